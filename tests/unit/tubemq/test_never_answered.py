"""Issue 37 part 4 for TubeMQ (the ``master`` option is the endpoint; brokers the master lists are known to the
deployment): a master that never answered in this process fails a write within seconds, typed and naming
``master``; one seen alive that goes down is waited for (``outageTimeoutMs``). Bounds are 3x the 10 s goal."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from tubespark_testbed.faultproxy import FaultProxy

from tests.doubles.fakebroker import FakeBroker, FakeMaster
from tests.doubles.fakepeer import SilentPeer, closed_port_address
from tubespark.errors import NeverAnsweredError
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.writer import TubeBatchWriter, TubeStreamWriter

BOUND_S = 3 * 10.0


def sink_options(master: str, **extra: str) -> TubeMQOptions:
    return TubeMQOptions.from_raw({"master": master, "topic": "events", "requestTimeoutMs": "1000",
                                   "connectTimeoutMs": "1000", "sendRetries": "1", "outageTimeoutMs": "60000",
                                   **extra}, mode="write")


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker() as fake:
        fake.add_topic("events")
        yield fake


@pytest.mark.parametrize("writer", [TubeBatchWriter, TubeStreamWriter], ids=["batch", "stream"])
def test_a_write_to_a_master_that_never_answered_fails_within_seconds_naming_the_master_option(writer):
    address = closed_port_address()
    started = time.monotonic()
    with pytest.raises(NeverAnsweredError, match=rf"TubeMQ master at {address} \(option `master`\) never answered"
                                                 r".*check the `master` option") as caught:
        writer(sink_options(address))
    assert time.monotonic() - started < BOUND_S and caught.value.option == "master"


def test_the_sinks_check_rides_an_outage_of_a_master_this_process_saw(broker):
    with FakeMaster(broker) as master:
        proxy = FaultProxy(master.address).start()
        port = int(proxy.address.rsplit(":", 1)[1])
        opts = sink_options(proxy.address, outageTimeoutMs="30000")
        TubeStreamWriter(opts)  # an earlier micro-batch: the master answered
        proxy.stop()
        restarted: list[FaultProxy] = []
        timer = threading.Timer(2.0, lambda: restarted.append(FaultProxy(master.address, port=port).start()))
        timer.start()
        started = time.monotonic()
        try:
            TubeStreamWriter(opts)
            assert 1.5 <= time.monotonic() - started < BOUND_S
        finally:
            timer.join()
            for again in restarted:
                again.stop()


def test_a_new_stream_on_a_master_that_never_answered_fails_within_seconds_naming_the_master_option():
    from tests.readers import TubeStreamReader

    options = TubeMQOptions.from_raw({"master": closed_port_address(), "topic": "events", "group": "g_never",
                                      "requestTimeoutMs": "1000", "connectTimeoutMs": "1000"}, mode="read")
    reader = TubeStreamReader(options)
    started = time.monotonic()
    try:
        with pytest.raises(NeverAnsweredError, match=r"TubeMQ master at .* \(option `master`\) never answered"):
            reader.initialOffset()
        assert time.monotonic() - started < BOUND_S
    finally:
        reader.stop()


def test_a_batch_read_of_a_master_that_never_answered_fails_within_seconds_naming_the_master_option():
    from tests.readers import TubeBatchReader

    options = TubeMQOptions.from_raw({"master": closed_port_address(), "topic": "events", "requestTimeoutMs": "1000",
                                      "connectTimeoutMs": "1000"}, mode="read")
    started = time.monotonic()
    with pytest.raises(NeverAnsweredError, match=r"\(option `master`\) never answered"):
        TubeBatchReader(options).partitions()
    assert time.monotonic() - started < BOUND_S


def test_a_new_stream_whose_master_this_process_saw_waits_for_it_at_its_first_trigger(broker, monkeypatch):
    """Part 6 for TubeMQ: a brand-new query of a driver that saw the master answer (an earlier query) meets the
    master down at its first trigger: it waits, as a running stream does, and starts once the master is back."""
    from tests.readers import TubeStreamReader
    from tubespark.tubemq.spark import membership
    from tubespark.tubemq.wire.constants import EventType

    monkeypatch.setattr(membership, "install_shutdown_hooks", lambda stop: None)
    with FakeMaster(broker) as master:
        proxy = FaultProxy(master.address).start()
        port = int(proxy.address.rsplit(":", 1)[1])
        TubeBatchWriter(sink_options(proxy.address))  # an earlier job of this driver: the master answered
        proxy.stop()
        restarted: list[FaultProxy] = []
        timer = threading.Timer(2.0, lambda: restarted.append(FaultProxy(master.address, port=port).start()))
        timer.start()
        master.push_event(EventType.CONNECT, broker.partitions("events"))
        reader = TubeStreamReader(TubeMQOptions.from_raw(
            {"master": proxy.address, "topic": "events", "group": "g_seen", "connectTimeoutMs": "1000",
             "requestTimeoutMs": "2000", "heartbeatIntervalMs": "50", "outageTimeoutMs": "30000",
             "startingOffsets": "earliest"}, mode="read"))
        started = time.monotonic()
        try:
            assert reader.initialOffset() == {ref.key: 0 for ref in broker.partitions("events")}
            assert 1.5 <= time.monotonic() - started < BOUND_S
        finally:
            reader.stop()
            timer.join()
            for again in restarted:
                again.stop()


@pytest.fixture
def silent() -> Iterator[SilentPeer]:
    """A port that accepts connections and never sends a byte (another service, a stuck proxy)."""
    with SilentPeer() as peer:
        yield peer


SILENT = {"requestTimeoutMs": "1000", "connectTimeoutMs": "1000", "outageTimeoutMs": "60000"}


@pytest.mark.parametrize("writer", [TubeBatchWriter, TubeStreamWriter], ids=["batch", "stream"])
def test_a_write_to_a_master_address_that_accepts_but_never_answers_fails_within_seconds_naming_master(writer, silent):
    """Issue 37's rule: the connect succeeding made the address count as alive, so the write waited
    outageTimeoutMs (15 min by default, 60 s here) in silence. An answer of the protocol is what counts."""
    started = time.monotonic()
    with pytest.raises(NeverAnsweredError, match=rf"TubeMQ master at {silent.address} \(option `master`\) never "
                                                 r"answered.*check the `master` option") as caught:
        writer(sink_options(silent.address, **SILENT))
    assert time.monotonic() - started < BOUND_S and caught.value.option == "master"
    assert silent.accepted >= 1  # it did accept: the port is open, only nothing answers there


def test_a_batch_read_of_a_master_address_that_accepts_but_never_answers_fails_within_seconds_naming_master(silent):
    from tests.readers import TubeBatchReader

    options = TubeMQOptions.from_raw({"master": silent.address, "topic": "events", **SILENT}, mode="read")
    started = time.monotonic()
    with pytest.raises(NeverAnsweredError, match=r"\(option `master`\) never answered"):
        TubeBatchReader(options).partitions()
    assert time.monotonic() - started < BOUND_S


def test_a_new_stream_on_a_master_address_that_accepts_but_never_answers_fails_within_seconds_naming_master(silent):
    from tests.readers import TubeStreamReader

    reader = TubeStreamReader(TubeMQOptions.from_raw({"master": silent.address, "topic": "events",
                                                      "group": "g_silent", **SILENT}, mode="read"))
    started = time.monotonic()
    try:
        with pytest.raises(NeverAnsweredError, match=r"TubeMQ master at .* \(option `master`\) never answered"):
            reader.initialOffset()
        assert time.monotonic() - started < BOUND_S
    finally:
        reader.stop()


def test_the_sinks_check_rides_a_silence_of_a_master_this_process_saw_answer(broker):
    """The other half of the rule: a master that answered once and then stops answering (stalled, not refusing)
    is an outage, waited for, not an address that never answered."""
    with FakeMaster(broker) as master:
        proxy = FaultProxy(master.address).start()
        try:
            opts = sink_options(proxy.address, outageTimeoutMs="30000")
            TubeStreamWriter(opts)  # an earlier micro-batch: the master answered
            proxy.stall()
            timer = threading.Timer(2.0, proxy.pass_through)
            timer.start()
            started = time.monotonic()
            TubeStreamWriter(opts)
            assert 1.5 <= time.monotonic() - started < BOUND_S
            timer.join()
        finally:
            proxy.stop()
