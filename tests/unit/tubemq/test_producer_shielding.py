"""The producer on several brokers: a broker that fails a send is shielded and its messages go elsewhere."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from tests.doubles.fakebroker import FakeBroker, FakeMaster, fast_settings
from tubespark.errors import BrokerConnectionError
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.wire.constants import Method
from tubespark.tubemq.wire.message import OutgoingMessage

TOPIC = "topic_s"


@pytest.fixture
def brokers() -> Iterator[tuple[FakeBroker, FakeBroker]]:
    with FakeBroker(1) as one, FakeBroker(2) as two:
        one.add_topic(TOPIC, stores=2)
        two.add_topic(TOPIC, stores=2)
        yield one, two


@pytest.fixture
def master(brokers: tuple[FakeBroker, FakeBroker]) -> Iterator[FakeMaster]:
    one, two = brokers
    with FakeMaster(one, others=[two]) as fake:
        yield fake


def _producer(master: FakeMaster, shield_s: float = 30.0) -> Producer:
    producer = Producer(master.address, fast_settings(heartbeat_interval_s=30.0), max_retries=2, shield_s=shield_s)
    producer.start()
    producer.publish([TOPIC], timeout_s=5)
    return producer


def _stored(broker: FakeBroker) -> list[bytes]:
    return [body for ref in broker.partitions(TOPIC) for body in broker.bodies(ref)]


def test_a_broker_that_fails_is_shielded_and_every_message_lands_once_on_the_others(master, brokers, caplog):
    one, two = brokers
    producer = _producer(master)
    try:
        assert {p.broker_id for p in producer.partitions(TOPIC)} == {1, 2}
        two.fault(Method.SEND_MESSAGE, "reset", times=None)  # broker 2 stores nothing and drops the connection
        two.inject(Method.SEND_MESSAGE, 500, times=1000)
        with caplog.at_level(logging.WARNING, logger="tubespark.tubemq.client.producer"):
            for i in range(40):
                producer.send_async(TOPIC, OutgoingMessage(f"m{i}".encode()), defer=True)
            results = producer.flush()
        assert len(results) == 40 and {r.partition.broker_id for r in results} == {1}
        assert sorted(_stored(one)) == sorted(f"m{i}".encode() for i in range(40))  # each exactly once
        assert producer.shielded_brokers() == {2}
        shielding = [r.getMessage() for r in caplog.records if "failed a send" in r.getMessage()]
        assert len(shielding) == 1 and "broker 2" in shielding[0] and "other brokers" in shielding[0]
        # while shielded, nothing new is placed on broker 2
        sent_to_two = len(two.requests_of(Method.SEND_MESSAGE))
        assert {producer.send(TOPIC, OutgoingMessage(b"x")).partition.broker_id for _ in range(6)} == {1}
        assert len(two.requests_of(Method.SEND_MESSAGE)) == sent_to_two
    finally:
        producer.close()


def test_a_shielded_broker_gets_messages_again_once_its_shield_ends(master, brokers, caplog):
    _one, two = brokers
    producer = _producer(master, shield_s=0.3)
    try:
        two.fault(Method.SEND_MESSAGE, "reset", times=None)
        two.inject(Method.SEND_MESSAGE, 500, times=1000)
        for _ in range(4):
            producer.send(TOPIC, OutgoingMessage(b"during"))
        assert producer.shielded_brokers() == {2}
        two.heal()
        with two.lock:
            two._faults.clear()
        time.sleep(0.4)
        with caplog.at_level(logging.WARNING, logger="tubespark.tubemq.client.producer"):
            placed = {producer.send(TOPIC, OutgoingMessage(b"after")).partition.broker_id for _ in range(8)}
        assert placed == {1, 2} and producer.shielded_brokers() == set()
        assert any("broker 2" in r.getMessage() and "again" in r.getMessage() for r in caplog.records)
        assert b"during" not in _stored(two) and _stored(two).count(b"after") >= 1
    finally:
        producer.close()


def test_key_hashes_keep_their_partition_and_move_together_while_its_broker_is_shielded(master, brokers):
    _one, two = brokers
    producer = _producer(master)
    try:
        partitions = producer.partitions(TOPIC)
        assert [producer.choose_partition(TOPIC, h) for h in range(8)] == [partitions[h % 4] for h in range(8)]
        two.fault(Method.SEND_MESSAGE, "reset", times=None)
        two.inject(Method.SEND_MESSAGE, 500, times=1000)
        on_two = next(h for h in range(8) if partitions[h % 4].broker_id == 2)
        result = producer.send(TOPIC, OutgoingMessage(b"keyed"), key_hash=on_two)  # fails on 2, lands on 1
        assert result.partition.broker_id == 1
        again = [producer.choose_partition(TOPIC, on_two) for _ in range(3)]
        assert again == [result.partition] * 3  # the same hash, the same partition while 2 is shielded
        for h in range(8):  # hashes of broker 1's partitions did not move
            if partitions[h % 4].broker_id == 1:
                assert producer.choose_partition(TOPIC, h) == partitions[h % 4]
    finally:
        producer.close()


def test_a_partition_named_by_the_caller_is_never_moved(master, brokers):
    _one, two = brokers
    producer = _producer(master)
    try:
        two.fault(Method.SEND_MESSAGE, "reset", times=None)
        with pytest.raises(BrokerConnectionError):
            producer.send(TOPIC, OutgoingMessage(b"pinned"), two.ref(TOPIC, 0))
        assert len(two.requests_of(Method.SEND_MESSAGE)) == 3  # the send and max_retries=2 re-sends, all to 2
    finally:
        producer.close()


def test_when_the_master_releases_a_broker_its_partitions_leave_the_layout(master, brokers):
    _one, two = brokers
    producer = _producer(master)
    try:
        master.release(two)
        producer.publish([TOPIC], timeout_s=5)  # a heartbeat brings the new layout
        assert {p.broker_id for p in producer.partitions(TOPIC)} == {1}
        assert {producer.send(TOPIC, OutgoingMessage(b"y")).partition.broker_id for _ in range(4)} == {1}
        assert producer.shielded_brokers() == set()  # nothing failed: nothing shielded
        assert _stored(two) == []
    finally:
        producer.close()


@pytest.mark.parametrize("batched", [False, True], ids=["per-message", "batched"])
@pytest.mark.parametrize("outage_s", [0.0, 20.0])
def test_a_send_rides_out_an_outage_of_every_broker_within_the_outage_window(master, brokers, outage_s, batched):
    """Every broker of the topic drops its connections for ~2 s (a restart): after its ``max_retries`` the
    send used to fail the task; now it is tried again for ``outage_s`` (the sink's ``outageTimeoutMs``) and
    lands (at least once: a reset after the broker stored it sends it again). ``outage_s=0``: it fails with
    the connection error as before."""
    for broker in brokers:
        broker.fault(Method.SEND_MESSAGE, "reset", times=None)
    producer = Producer(master.address, fast_settings(heartbeat_interval_s=30.0), max_retries=1, outage_s=outage_s)
    producer.start()
    producer.publish([TOPIC], timeout_s=5)
    healer = threading.Timer(2.0, lambda: [broker.heal(Method.SEND_MESSAGE) for broker in brokers])
    healer.start()
    try:
        def send() -> int:  # the broker id it landed on; the sink's batched path or the per-message one
            if batched:
                item = producer.prepare(TOPIC, OutgoingMessage(b"during the outage"))
                assert producer.send_prepared([item]) == 1
                return item.partition.broker_id
            return producer.send(TOPIC, OutgoingMessage(b"during the outage")).partition.broker_id

        if not outage_s:
            with pytest.raises(BrokerConnectionError):
                send()
            return
        assert b"during the outage" in _stored(brokers[send() - 1])
    finally:
        healer.cancel()
        producer.close()


def test_a_broker_the_master_stops_listing_is_routed_around_and_the_log_says_so(master, brokers, caplog):
    """A crashed or stopped broker leaves the master's placement once its registration lapses, often before a
    send to it failed: the sink then routes around it without any failure to log, and used to say nothing."""
    _one, two = brokers
    producer = Producer(master.address, fast_settings(heartbeat_interval_s=0.1), max_retries=2)
    producer.start()
    try:
        producer.publish([TOPIC], timeout_s=5)
        assert {p.broker_id for p in producer.partitions(TOPIC)} == {1, 2}
        with caplog.at_level(logging.WARNING, logger="tubespark.tubemq.client.producer"):
            master.brokers.remove(two)  # the master no longer lists broker 2's partitions
            deadline = time.monotonic() + 5
            while {p.broker_id for p in producer.partitions(TOPIC)} != {1} and time.monotonic() < deadline:
                time.sleep(0.05)
            assert {producer.send(TOPIC, OutgoingMessage(b"x")).partition.broker_id for _ in range(4)} == {1}
            master.brokers.append(two)
            # the producer logs just after it takes the new placement (outside its lock): wait for the line itself
            again = f"TubeMQ broker 2 ({two.address}) serves topic {TOPIC} again"
            deadline = time.monotonic() + 5
            while not any(r.getMessage().startswith(again) for r in caplog.records) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert {p.broker_id for p in producer.partitions(TOPIC)} == {1, 2}
        messages = [r.getMessage() for r in caplog.records]
        assert any(m.startswith(f"TubeMQ broker 2 ({two.address}) no longer serves topic {TOPIC}")
                   and "other brokers" in m for m in messages), messages
        assert any(m.startswith(again) for m in messages), messages
    finally:
        producer.close()
