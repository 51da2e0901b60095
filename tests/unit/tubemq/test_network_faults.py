"""Network faults between the client and a master or broker (issue 23, part 5), through the testbed's fault proxy.

Every path gives up within its configured timeout with a typed, retriable error when its peer stalls (a
paused process: accepted, never answered) or goes half-open (the host vanished: no FIN, no RST, the socket
stays established and silent for ever), and works again once the proxy passes traffic: a half-open
connection is never revived, so recovering means noticing the silent connection and opening a new one.
Brokers are reached through the proxy by ``ClientSettings.broker_address_map`` (the ``brokerAddressMap``
option), masters by giving the client the proxy's address. The fake master and broker are the documented
doubles of ``tests/doubles/fakebroker.py``; ``tests/integration/tubemq/test_network_faults.py`` runs the
same faults against the real cluster.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tubespark_testbed.faultproxy import FaultProxy

from tests.doubles.fakebroker import FakeBroker, FakeMaster, fast_settings, wait_until
from tubespark.errors import BrokerConnectionError, RangeReadError, TubeSparkError
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.client.group import GroupSession
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.client.ranges import RangeReader, probe_bounds
from tubespark.tubemq.wire.constants import EventType
from tubespark.tubemq.wire.formats import PartitionRef
from tubespark.tubemq.wire.message import OutgoingMessage

TIMEOUT_S = 1.0
"""requestTimeoutMs of every client here."""
MARGIN_S = 0.7
"""What a give-up may take beyond its bound (thread wake-ups, a loaded CI machine)."""
FAULTS = ["stall", "half_open"]
TOPIC = "topic_nf"
N = 12


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker(batch_size=4) as fake:
        [ref] = fake.add_topic(TOPIC)
        fake.append(ref, *[f"m{i}".encode() for i in range(N)])
        yield fake


@pytest.fixture
def broker_proxy(broker: FakeBroker) -> Iterator[FaultProxy]:
    with FaultProxy(broker.address) as proxy:
        yield proxy


@pytest.fixture
def master_proxy(master: FakeMaster) -> Iterator[FaultProxy]:
    with FaultProxy(master.address) as proxy:
        yield proxy


@pytest.fixture
def settings(broker: FakeBroker, broker_proxy: FaultProxy) -> ClientSettings:
    """Short timeouts; the broker reached only through its proxy."""
    return dataclasses.replace(fast_settings(request_timeout_s=TIMEOUT_S, connect_timeout_s=TIMEOUT_S,
                                             heartbeat_interval_s=0.1),
                               broker_address_map=((broker.address, broker_proxy.address),))


@pytest.fixture
def part(broker: FakeBroker) -> PartitionRef:
    return broker.ref(TOPIC)


def timed(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    """Wall time of ``call`` and what it raised (None when it returned)."""
    started = time.monotonic()
    try:
        call()
    except TubeSparkError as exc:
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


def gives_up(call: Callable[[], Any], bound_s: float, kind: type[BaseException] = BrokerConnectionError) -> None:
    elapsed, exc = timed(call)
    assert exc is not None, f"the call returned under a fault ({elapsed:.2f}s)"
    assert isinstance(exc, kind) and getattr(exc, "retriable", False), repr(exc)
    assert elapsed <= bound_s + MARGIN_S, f"gave up after {elapsed:.2f}s, bound {bound_s:.2f}s: {exc}"


# ---- brokers --------------------------------------------------------------------------------------------------


def test_the_address_map_sends_broker_traffic_through_the_proxy(settings: ClientSettings, part: PartitionRef,
                                                                broker_proxy: FaultProxy) -> None:
    client = BrokerClient("reader-nf", settings)
    try:
        assert probe_bounds(client, part, "probe-nf") == probe_bounds(client, part, "probe-nf")
        assert broker_proxy.accepted >= 1
    finally:
        client.close()


@pytest.mark.parametrize("fault", FAULTS)
def test_bounds_give_up_within_the_request_timeout_and_recover(settings: ClientSettings, part: PartitionRef,
                                                               broker_proxy: FaultProxy, fault: str) -> None:
    client = BrokerClient("reader-nf", settings)
    try:
        expected = probe_bounds(client, part, "probe-nf")
        broker_proxy.set_mode(fault)
        gives_up(lambda: probe_bounds(client, part, "probe-nf"), TIMEOUT_S)
        broker_proxy.pass_through()
        assert probe_bounds(client, part, "probe-nf") == expected
    finally:
        client.close()


def test_a_delay_below_the_timeout_only_slows_calls_and_a_cut_fails_them_at_once(
        settings: ClientSettings, part: PartitionRef, broker_proxy: FaultProxy) -> None:
    client = BrokerClient("reader-nf", settings)
    try:
        expected = probe_bounds(client, part, "probe-nf")
        broker_proxy.delay(TIMEOUT_S * 1000 / 5)
        elapsed, exc = timed(lambda: probe_bounds(client, part, "probe-nf"))
        assert exc is None and elapsed >= TIMEOUT_S / 5 * 2  # there and back, twice (register, release)
        broker_proxy.cut()
        gives_up(lambda: probe_bounds(client, part, "probe-nf"), TIMEOUT_S / 2)  # half a frame, then the end
        broker_proxy.pass_through()
        assert probe_bounds(client, part, "probe-nf") == expected
    finally:
        client.close()


@pytest.mark.parametrize("fault", [*FAULTS, "cut"])
@pytest.mark.parametrize("caller_reads", [False, True], ids=["reader-thread", "caller-reads"])
def test_a_range_read_rides_out_a_fault_shorter_than_its_budget(settings: ClientSettings, part: PartitionRef,
                                                                 broker_proxy: FaultProxy, fault: str,
                                                                 caller_reads: bool) -> None:
    client = BrokerClient("reader-nf", dataclasses.replace(settings, caller_reads=caller_reads))
    reader = RangeReader(client, "read-nf", retry_s=TIMEOUT_S * 8)
    bodies: list[bytes] = []
    try:
        for batch in reader.read_batches(part, 0, 28 * N):
            bodies += [m.data for m in batch]
            if len(bodies) == 4:
                broker_proxy.set_mode(fault)
                time.sleep(TIMEOUT_S * 2)
                broker_proxy.pass_through()
    finally:
        client.close()
    assert bodies == [f"m{i}".encode() for i in range(N)]  # each message once, none lost


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("caller_reads", [False, True], ids=["reader-thread", "caller-reads"])
def test_a_range_read_gives_up_within_its_budget(settings: ClientSettings, part: PartitionRef,
                                                 broker_proxy: FaultProxy, fault: str, caller_reads: bool) -> None:
    client = BrokerClient("reader-nf", dataclasses.replace(settings, caller_reads=caller_reads))
    budget = TIMEOUT_S * 3
    reader = RangeReader(client, "read-nf", retry_s=budget)
    broker_proxy.set_mode(fault)
    try:
        # the documented bound: no try starts after the budget, and one in flight then ends within its timeout
        gives_up(lambda: list(reader.read_batches(part, 0, 28 * N)), budget + TIMEOUT_S, RangeReadError)
    finally:
        client.close()


def _send_one(producer: Producer, body: bytes, part: PartitionRef, batched: bool) -> None:
    """One message by the per-message path (``send``) or the sink's batched one (``send_prepared``)."""
    if batched:
        assert producer.send_prepared([producer.prepare(TOPIC, OutgoingMessage(body), part)]) == 1
    else:
        assert producer.send(TOPIC, OutgoingMessage(body), part).partition == part


@pytest.mark.parametrize("batched", [False, True], ids=["per-message", "batched"])
@pytest.mark.parametrize("fault", FAULTS)
def test_a_send_gives_up_within_its_retries_and_recovers(master: FakeMaster, settings: ClientSettings,
                                                         part: PartitionRef, broker_proxy: FaultProxy,
                                                         fault: str, batched: bool) -> None:
    with Producer(master.address, settings, max_retries=1, shield_s=0.1) as producer:
        producer.publish([TOPIC])
        _send_one(producer, b"before", part, batched)
        broker_proxy.set_mode(fault)
        # each try waits twice the request timeout for its acknowledgement; 0.2 s of backoff between the two
        gives_up(lambda: _send_one(producer, b"lost", part, batched), 2 * (2 * TIMEOUT_S) + 0.3)
        broker_proxy.pass_through()
        _send_one(producer, b"after", part, batched)


@pytest.mark.parametrize("fault", FAULTS)
def test_a_commit_gives_up_within_the_request_timeout_and_recovers(master: FakeMaster, broker: FakeBroker,
                                                                   settings: ClientSettings, part: PartitionRef,
                                                                   broker_proxy: FaultProxy, fault: str) -> None:
    # heartbeats far apart: the commit itself meets the fault (a failed heartbeat would release the partition)
    quiet = dataclasses.replace(settings, heartbeat_interval_s=30.0)
    with GroupSession(master.address, "group_nf", [TOPIC], settings=quiet) as session:
        master.push_event(EventType.CONNECT, [part])
        assert set(session.wait_for_partitions(1, timeout_s=5.0)) == {part.key}
        broker_proxy.set_mode(fault)
        gives_up(lambda: session.commit(part, 28 * 3), TIMEOUT_S)
        broker_proxy.pass_through()
        if fault == "stall":
            # a paused broker that resumes still handles the commit it had received: it lands late, and the
            # next commit supersedes it (sent before it lands, it could be overwritten by the stale one)
            wait_until(lambda: broker.stored_offset("group_nf", part) == 28 * 3, what="the held commit")
        assert session.commit(part, 28 * 5).offset == 28 * 5
    assert broker.stored_offset("group_nf", part) == 28 * 5


@pytest.mark.parametrize("fault", FAULTS)
def test_leaving_a_group_while_its_broker_is_silent_takes_one_timeout(master: FakeMaster, broker: FakeBroker,
                                                                      settings: ClientSettings,
                                                                      broker_proxy: FaultProxy, fault: str) -> None:
    broker.add_topic("topic_nf3", stores=3)
    session = GroupSession(master.address, "group_nf3", ["topic_nf3"], settings=settings).start()
    master.push_event(EventType.CONNECT, broker.partitions("topic_nf3"))
    session.wait_for_partitions(3, timeout_s=5.0)
    broker_proxy.set_mode(fault)
    elapsed, exc = timed(session.close)
    assert exc is None
    # one unregister to the silent broker times out; the others to it are not tried (it expires them itself)
    assert elapsed <= TIMEOUT_S + MARGIN_S, f"close took {elapsed:.2f}s"


# ---- the master -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", FAULTS)
def test_a_master_call_gives_up_within_the_request_timeout_and_the_session_recovers(
        master: FakeMaster, master_proxy: FaultProxy, settings: ClientSettings, fault: str) -> None:
    with GroupSession(master_proxy.address, "group_nfm", [TOPIC], settings=settings) as session:
        master.push_event(EventType.CONNECT, [master.broker.ref(TOPIC)])
        session.wait_for_partitions(1, timeout_s=5.0)
        master_proxy.set_mode(fault)
        channel = settings.master_channel(master_proxy.address)
        try:
            gives_up(lambda: channel.call(*_heartbeat_probe()), TIMEOUT_S + TIMEOUT_S)  # connect + request
        finally:
            channel.close()
        errors = session.heartbeat_errors
        wait_until(lambda: session.heartbeat_errors > errors, TIMEOUT_S * 4, "a failed heartbeat")
        master_proxy.pass_through()
        beats = len(master.requests)
        wait_until(lambda: len(master.requests) > beats + 2, TIMEOUT_S * 6, "heartbeats reaching the master again")
        assert session.refusal() is None and set(session.held()) == {master.broker.ref(TOPIC).key}


def _heartbeat_probe() -> tuple[int, Any, Any]:
    """A consumer heartbeat for an unknown member: any answer (even a refusal) proves the master answers."""
    from tubespark.tubemq.wire.constants import Method
    from tubespark.tubemq.wire.pb import master_service_pb2 as mpb
    return (Method.CONSUMER_HEARTBEAT, mpb.HeartRequestC2M(clientId="probe", groupName="group_nfm",
                                                               reportSubscribeInfo=False),
            mpb.HeartResponseM2C)


def test_no_send_blocks_past_the_io_timeout_when_the_broker_stops_reading(
        master: FakeMaster, settings: ClientSettings, part: PartitionRef, broker_proxy: FaultProxy) -> None:
    """Big messages to a stalled broker fill the socket buffers, so a send blocks in the kernel: at most the
    request timeout (it once waited 1.25 s more for a TLS alert no stalled peer sends)."""
    with Producer(master.address, settings, max_retries=0, shield_s=0.1) as producer:
        producer.publish([TOPIC])
        producer.send(TOPIC, OutgoingMessage(b"before"), part)
        broker_proxy.stall()
        longest = 0.0
        for _ in range(8):
            started = time.monotonic()
            producer.send_async(TOPIC, OutgoingMessage(b"y" * 900_000), part)
            longest = max(longest, time.monotonic() - started)
        assert longest <= TIMEOUT_S + MARGIN_S, f"a send_async blocked {longest:.2f}s"
        gives_up(producer.flush, 2 * TIMEOUT_S)
