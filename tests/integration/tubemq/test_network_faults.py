"""Network faults between tubespark and a real TubeMQ cluster (issue 23, part 5), through the testbed's fault proxy.

The proxy (``tubespark_testbed.faultproxy``) sits in front of the broker (reached through the
``brokerAddressMap`` option / ``ClientSettings.broker_address_map``, since the master lists the broker's
own address) or the master (the client is given the proxy's address). Each path gives up within its
configured timeout with a typed, retriable error while its peer stalls (accepts, never answers) or is
half-open (gone without FIN or RST), and works again when the proxy passes; a running stream rides out
a 60 s stall of its broker without losing or repeating a row. The same cases against the fake broker, in
a second: tests/unit/tubemq/test_network_faults.py.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tubespark_testbed import LocalCluster
from tubespark_testbed.faultproxy import FaultProxy

from tests.integration.helpers import produce
from tubespark.errors import BrokerConnectionError, RangeReadError, TubeSparkError
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.client.group import GroupSession
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.client.ranges import RangeReader, probe_bounds
from tubespark.tubemq.wire.message import OutgoingMessage

pytestmark = [pytest.mark.integration]

TIMEOUT_S = 2.0
MARGIN_S = 1.0
FAULTS = ["stall", "half_open"]


@pytest.fixture
def broker_proxy(tubemq_cluster: LocalCluster) -> Iterator[FaultProxy]:
    with FaultProxy(tubemq_cluster.broker_address) as proxy:
        yield proxy


@pytest.fixture
def master_proxy(tubemq_cluster: LocalCluster) -> Iterator[FaultProxy]:
    with FaultProxy(tubemq_cluster.master_address) as proxy:
        yield proxy


@pytest.fixture
def settings(tubemq_cluster: LocalCluster, broker_proxy: FaultProxy) -> ClientSettings:
    return ClientSettings(connect_timeout_s=TIMEOUT_S, request_timeout_s=TIMEOUT_S, heartbeat_interval_s=1.0,
                          broker_address_map=((tubemq_cluster.broker_address, broker_proxy.address),))


@pytest.fixture
def loaded(tubemq_cluster: LocalCluster, topic_factory: Callable[..., str]) -> tuple[str, list[Any]]:
    """A topic of 1 partition with 30 messages: (name, their acknowledgements)."""
    topic = topic_factory(partitions=1, stores=1)
    return topic, produce(tubemq_cluster.master_address, topic, [OutgoingMessage(f"m{i}".encode()) for i in range(30)])


def gives_up(call: Callable[[], Any], bound_s: float, kind: type[BaseException] = BrokerConnectionError) -> None:
    """``call`` raises a retriable ``kind`` within ``bound_s`` (+ the margin)."""
    started = time.monotonic()
    failure: TubeSparkError | None = None
    try:
        call()
    except TubeSparkError as exc:
        failure = exc
    elapsed = time.monotonic() - started
    assert failure is not None, f"the call returned under a fault ({elapsed:.2f}s)"
    assert isinstance(failure, kind) and failure.retriable, repr(failure)
    assert elapsed <= bound_s + MARGIN_S, f"gave up after {elapsed:.2f}s, bound {bound_s:.2f}s: {failure}"


@pytest.mark.parametrize("fault", FAULTS)
def test_bounds_and_range_reads_give_up_in_time_and_recover(loaded: tuple[str, list[Any]], settings: ClientSettings,
                                                            broker_proxy: FaultProxy, fault: str) -> None:
    _topic, acks = loaded
    part = acks[0].partition
    client = BrokerClient(f"nf-{uuid.uuid4().hex[:6]}", settings)
    try:
        bounds = probe_bounds(client, part, "nf_probe")
        assert broker_proxy.accepted >= 1  # the broker was reached through the proxy
        broker_proxy.set_mode(fault)
        gives_up(lambda: probe_bounds(client, part, "nf_probe"), TIMEOUT_S)
        budget = TIMEOUT_S * 2
        reader = RangeReader(client, "nf_read", retry_s=budget)
        gives_up(lambda: list(reader.read(part, bounds.min_offset, bounds.max_offset)), budget + TIMEOUT_S,
                 RangeReadError)
        broker_proxy.pass_through()
        assert probe_bounds(client, part, "nf_probe") == bounds
        read = [m.data for m in RangeReader(client, "nf_read2").read(part, bounds.min_offset, bounds.max_offset)]
        assert read[-30:] == [f"m{i}".encode() for i in range(30)]
    finally:
        client.close()


@pytest.mark.parametrize("fault", FAULTS)
def test_sends_give_up_in_time_and_recover(tubemq_cluster: LocalCluster, loaded: tuple[str, list[Any]],
                                           settings: ClientSettings, broker_proxy: FaultProxy, fault: str) -> None:
    topic, acks = loaded
    part = acks[0].partition
    with Producer(tubemq_cluster.master_address, settings, max_retries=0, shield_s=0.5) as producer:
        producer.publish([topic])
        producer.send(topic, OutgoingMessage(b"before"), part)
        broker_proxy.set_mode(fault)
        gives_up(lambda: producer.send(topic, OutgoingMessage(b"during"), part), 2 * TIMEOUT_S)
        broker_proxy.pass_through()
        assert producer.send(topic, OutgoingMessage(b"after"), part).partition == part


@pytest.mark.parametrize("fault", FAULTS)
def test_commits_give_up_in_time_and_recover(tubemq_cluster: LocalCluster, loaded: tuple[str, list[Any]],
                                             settings: ClientSettings, broker_proxy: FaultProxy, fault: str) -> None:
    topic, acks = loaded
    part = acks[0].partition
    quiet = dataclasses.replace(settings, heartbeat_interval_s=20.0)  # the commit, not a heartbeat, meets the fault
    with GroupSession(tubemq_cluster.master_address, f"nf_{uuid.uuid4().hex[:6]}", [topic], settings=quiet) as s:
        assert set(s.wait_for_partitions(1, timeout_s=60)) == {part.key}
        broker_proxy.set_mode(fault)
        gives_up(lambda: s.commit(part, acks[5].append_offset), TIMEOUT_S)
        broker_proxy.pass_through()
        assert s.commit(part, acks[10].append_offset).offset == acks[10].append_offset


@pytest.mark.parametrize("fault", FAULTS)
def test_the_group_session_gives_up_on_a_silent_master_and_recovers(
        tubemq_cluster: LocalCluster, loaded: tuple[str, list[Any]], master_proxy: FaultProxy,
        settings: ClientSettings, fault: str) -> None:
    topic, acks = loaded
    with GroupSession(master_proxy.address, f"nf_{uuid.uuid4().hex[:6]}", [topic], settings=settings) as session:
        assert set(session.wait_for_partitions(1, timeout_s=60)) == {acks[0].partition.key}
        master_proxy.set_mode(fault)
        started = time.monotonic()
        while session.heartbeat_errors == 0:
            assert time.monotonic() - started <= settings.heartbeat_interval_s + TIMEOUT_S + MARGIN_S, \
                "no heartbeat failed in time"
            time.sleep(0.05)
        master_proxy.pass_through()
        started = time.monotonic()
        while session.heartbeat_errors:
            assert time.monotonic() - started <= settings.heartbeat_interval_s + TIMEOUT_S + MARGIN_S, \
                "heartbeats did not recover"
            time.sleep(0.05)
        assert set(session.held()) == {acks[0].partition.key}


STALL_S = 60.0


@pytest.mark.spark
def test_a_stream_rides_out_a_60s_stall_of_its_broker(spark, tubemq_cluster: LocalCluster,  # type: ignore[no-untyped-def]
                                                      topic_factory: Callable[..., str],
                                                      broker_proxy: FaultProxy) -> None:
    """Every read of the query (the driver's survey, the executors' range reads, the group's broker heartbeats)
    goes through the proxy; the producer writes to the broker directly, so messages arrive during the stall."""
    topic, master = topic_factory(partitions=1, stores=4), tubemq_cluster.master_address
    name = "nf_stall_" + uuid.uuid4().hex[:8]
    frame = (spark.readStream.format("tubemq").option("master", master).option("topic", topic)
             .option("group", "nf_" + uuid.uuid4().hex[:8]).option("startingOffsets", "earliest")
             .option("heartbeatIntervalMs", "1000")
             .option("brokerAddressMap", f"{tubemq_cluster.broker_address}={broker_proxy.address}").load())
    query = (frame.select("value").writeStream.format("memory").queryName(name)
             .trigger(processingTime="500 milliseconds").start())

    def values() -> list[bytes]:
        return [r.value for r in spark.sql(f"select value from {name}").collect()]

    def wait_for_all(expected: set[bytes], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not expected <= set(values()):
            assert query.isActive, f"the query stopped: {query.exception()}"
            assert time.monotonic() < deadline, f"{len(expected - set(values()))} of {len(expected)} rows not read"
            time.sleep(0.5)

    try:
        waves = [[OutgoingMessage(f"w{w}-{i}".encode()) for i in range(200)] for w in range(3)]
        produce(master, topic, waves[0])
        wait_for_all({m.data for m in waves[0]}, 120)
        broker_proxy.stall()
        stalled = time.monotonic()
        produce(master, topic, waves[1])
        while time.monotonic() - stalled < STALL_S:
            assert query.isActive, f"the query stopped {time.monotonic() - stalled:.0f} s into the stall: " \
                                   f"{query.exception()}"
            time.sleep(1.0)
        broker_proxy.pass_through()
        produce(master, topic, waves[2])
        everything = {m.data for wave in waves for m in wave}
        wait_for_all(everything, 180)
        read = values()
        assert len(read) == len(set(read)) == len(everything), "a row was read twice"
        assert broker_proxy.accepted >= 2  # the query really read through the proxy
    finally:
        if query.isActive:
            query.stop()
