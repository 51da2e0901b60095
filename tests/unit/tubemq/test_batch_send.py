"""The producer's batched send path (``prepare`` + ``send_prepared``) against the fake master and brokers:
order, the in-flight window, retries, partial failure, timeouts, shielding, and the sink's row loop on it."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pyarrow as pa
import pytest

from tests.doubles.fakebroker import FakeBroker, FakeMaster, fast_settings
from tubespark.errors import BadRequestError, MessageTooLargeError, ServerBusyError
from tubespark.tubemq.client.batch_send import GATHER_S, WAKE_SHARE, BatchSend
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.wire.constants import Method
from tubespark.tubemq.wire.message import OutgoingMessage
from tubespark.tubemq.wire.send import SendAnswer

TOPIC = "topic_b"


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker() as fake:
        fake.add_topic(TOPIC, stores=2)
        yield fake


def _producer(master: FakeMaster, **kwargs: object) -> Producer:
    settings = fast_settings(heartbeat_interval_s=30.0, request_timeout_s=float(kwargs.pop("request_timeout_s", 2.0)))
    producer = Producer(master.address, settings, max_retries=2, **kwargs)  # type: ignore[arg-type]
    producer.start()
    producer.publish([TOPIC], timeout_s=5)
    return producer


@pytest.fixture
def producer(master: FakeMaster) -> Iterator[Producer]:
    p = _producer(master, max_in_flight=4)
    yield p
    p.close()


def _bodies(n: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def test_a_batch_beyond_the_window_lands_in_order_with_its_offsets(broker, producer):
    part = broker.ref(TOPIC, 0)
    items = [producer.prepare(TOPIC, OutgoingMessage(body), part) for body in _bodies(200)]
    assert producer.send_prepared(items) == 200
    assert broker.bodies(part) == _bodies(200)  # one connection, pipelined: the list's order
    assert [item.append_offset for item in items] == sorted(item.append_offset for item in items)
    assert len({item.message_id for item in items}) == 200
    assert all(item.partition == part for item in items)
    assert producer.send_prepared([]) == 0


def test_placed_messages_spread_round_robin(broker, producer):
    items = [producer.prepare(TOPIC, OutgoingMessage(body)) for body in _bodies(40)]
    assert producer.send_prepared(items) == 40
    assert sorted(len(broker.bodies(ref)) for ref in broker.partitions(TOPIC)) == [20, 20]


def test_a_retriable_failure_is_resent_and_every_message_lands_once(broker, producer):
    part = broker.ref(TOPIC, 0)
    broker.inject(Method.SEND_MESSAGE, 503, times=2)
    items = [producer.prepare(TOPIC, OutgoingMessage(body), part) for body in _bodies(30)]
    assert producer.send_prepared(items) == 30
    assert sorted(broker.bodies(part)) == sorted(_bodies(30))
    assert len(broker.requests_of(Method.SEND_MESSAGE)) == 32


def test_retries_are_bounded_and_the_typed_error_raised(broker, producer):
    broker.inject(Method.SEND_MESSAGE, 503, times=10)
    with pytest.raises(ServerBusyError):
        producer.send_prepared([producer.prepare(TOPIC, OutgoingMessage(b"p"), broker.ref(TOPIC, 0))])
    assert len(broker.requests_of(Method.SEND_MESSAGE)) == 3  # the send and max_retries=2 re-sends
    assert broker.bodies(broker.ref(TOPIC, 0)) == []


def test_a_non_retriable_failure_is_raised_after_the_messages_on_the_wire_settle(broker, producer):
    part = broker.ref(TOPIC, 0)
    broker.inject(Method.SEND_MESSAGE, 400, text="data length over max length")
    items = [producer.prepare(TOPIC, OutgoingMessage(body), part) for body in _bodies(10)]
    with pytest.raises(BadRequestError, match="data length over max length"):
        producer.send_prepared(items)
    # the first window (4) went out together: the three after the refused one are acknowledged, and
    # nothing more is sent after the error
    assert broker.bodies(part) == _bodies(4)[1:]
    assert [item.append_offset >= 0 for item in items[:4]] == [False, True, True, True]
    assert len(broker.requests_of(Method.SEND_MESSAGE)) == 4
    # the producer is usable afterwards
    assert producer.send_prepared([producer.prepare(TOPIC, OutgoingMessage(b"after"), part)]) == 1


def test_an_unanswered_send_times_out_and_is_resent_without_resending_the_others(master, broker):
    producer = _producer(master, max_in_flight=8, request_timeout_s=0.3)
    try:
        part = broker.ref(TOPIC, 0)
        broker.fault(Method.SEND_MESSAGE, "silent", times=1)  # stored, never answered
        items = [producer.prepare(TOPIC, OutgoingMessage(body), part) for body in _bodies(6)]
        assert producer.send_prepared(items) == 6
        # at least once: the unanswered one is stored twice, every other once
        assert sorted(broker.bodies(part)) == sorted([b"m0", *_bodies(6)])
        assert len(broker.requests_of(Method.SEND_MESSAGE)) == 7
    finally:
        producer.close()


def test_a_lost_connection_fails_the_window_and_every_message_is_resent(master, broker):
    producer = _producer(master, max_in_flight=8)
    try:
        part = broker.ref(TOPIC, 0)
        broker.fault(Method.SEND_MESSAGE, "reset", times=1)  # the first is stored, then the connection is cut
        items = [producer.prepare(TOPIC, OutgoingMessage(body), part) for body in _bodies(50)]
        assert producer.send_prepared(items) == 50
        assert set(broker.bodies(part)) == set(_bodies(50))  # at least once, none lost
    finally:
        producer.close()


def test_a_failing_broker_is_shielded_and_its_messages_land_on_the_other():
    with FakeBroker(1) as one, FakeBroker(2) as two:
        one.add_topic(TOPIC, stores=2)
        two.add_topic(TOPIC, stores=2)
        with FakeMaster(one, others=[two]) as master:
            producer = _producer(master)
            try:
                two.fault(Method.SEND_MESSAGE, "reset", times=None)
                two.inject(Method.SEND_MESSAGE, 500, times=1000)  # broker 2 stores nothing
                items = [producer.prepare(TOPIC, OutgoingMessage(body)) for body in _bodies(40)]
                assert producer.send_prepared(items) == 40
                assert {item.partition.broker_id for item in items} == {1}
                stored = [body for ref in one.partitions(TOPIC) for body in one.bodies(ref)]
                assert sorted(stored) == sorted(_bodies(40))  # each exactly once
                assert producer.shielded_brokers() == {2}
            finally:
                producer.close()


def test_the_sink_sends_rows_through_the_batched_path_and_names_an_oversized_row(master, broker):
    from tubespark.tubemq.spark import writer
    from tubespark.tubemq.spark.options import TubeMQOptions

    master.max_msg_size = 64
    options = TubeMQOptions.from_raw({"master": master.address, "topic": TOPIC, "maxInFlight": "4",
                                      "requestTimeoutMs": "1000", "connectTimeoutMs": "500"}, mode="write")
    values = [f"row{i}".encode() for i in range(25)]
    big = [b"x" * 100]
    try:
        sent = writer.send_batches(iter([pa.record_batch({"value": values})]), options, None)
        assert (sent.rows, sent.bytes) == (25, sum(map(len, values)))
        assert sorted(b for ref in broker.partitions(TOPIC) for b in broker.bodies(ref)) == sorted(values)
        with pytest.raises(MessageTooLargeError, match="row 3 of this task"):
            writer.send_batches(iter([pa.record_batch({"value": values[:3] + big})]), options, None)
        # the rows before it were sent and acknowledged
        assert len([b for ref in broker.partitions(TOPIC) for b in broker.bodies(ref)]) == 28
    finally:
        for producer in writer._producers.values():
            producer.close()
        writer._producers.clear()


def test_a_message_sent_to_a_named_partition_stays_there_when_resent():
    with FakeBroker(1) as one, FakeBroker(2) as two:
        one.add_topic(TOPIC, stores=2)
        two.add_topic(TOPIC, stores=2)
        with FakeMaster(one, others=[two]) as master:
            producer = _producer(master)
            try:
                part = two.ref(TOPIC, 0)
                two.inject(Method.SEND_MESSAGE, 503, times=2)  # shields broker 2, yet the caller chose it
                items = [producer.prepare(TOPIC, OutgoingMessage(body), part) for body in _bodies(3)]
                assert producer.send_prepared(items) == 3
                assert all(item.partition == part for item in items)
                assert sorted(two.bodies(part)) == _bodies(3)
                assert producer.shielded_brokers() == {2}
            finally:
                producer.close()


def test_an_unreachable_broker_fails_the_batch_with_a_connection_error_after_the_retries(master, broker):
    from tubespark.errors import BrokerConnectionError

    producer = _producer(master, request_timeout_s=0.5)
    try:
        part = broker.ref(TOPIC, 0)
        items = [producer.prepare(TOPIC, OutgoingMessage(body), part) for body in _bodies(5)]
        broker.close()  # stops listening and cuts every connection
        with pytest.raises(BrokerConnectionError):
            producer.send_prepared(items)
        assert producer.shielded_brokers() == {1}
    finally:
        producer.close()


def _sink_options(master: FakeMaster, **extra: str) -> object:
    from tubespark.tubemq.spark.options import TubeMQOptions

    return TubeMQOptions.from_raw({"master": master.address, "maxInFlight": "4", "requestTimeoutMs": "1000",
                                   "connectTimeoutMs": "500", **extra}, mode="write")


def _close_sink_producers() -> None:
    from tubespark.tubemq.spark import writer

    for cached in writer._producers.values():
        cached.close()
    writer._producers.clear()


def _sent(broker: FakeBroker) -> list[tuple[int, bytes, int, int, str, str]]:
    return sorted((r.partitionId, r.data, r.flag, r.checkSum, r.msgType, r.msgTime)
                  for r in broker.requests_of(Method.SEND_MESSAGE))


def test_the_sinks_column_path_sends_what_one_message_per_row_sends(master, broker):
    """Each batch is encoded column by column (``_encode_rows`` + ``Producer.prepare_many``): every request must
    equal the one the row's own ``OutgoingMessage`` and ``Producer.prepare`` make, partition included."""
    from datetime import UTC, datetime

    from tubespark.tubemq.spark import writer

    when = datetime(2024, 1, 2, 15, 30, 59, tzinfo=UTC)
    batch = pa.record_batch({
        "value": pa.array(["text", "", "x" * 50, "y", "z"], pa.string()),
        "streamId": pa.array(["s1", None, "s2", "", "s1"]),
        "msgTime": pa.array([when, None, when, when, None], pa.timestamp("us", tz="UTC")),
        "attributes": pa.array([[("a", "1")], None, [("b", "2"), ("c", "3")], [], [("a", "1")]],
                               pa.map_(pa.string(), pa.string())),
        "partitionKey": pa.array(["k1", None, "k2", "", None]),
    })
    try:
        reference = _producer(master)
        expected = []
        for i, row in enumerate(batch.to_pylist()):
            attrs = dict(row["attributes"] or ())
            attrs["dedup"] = f"stamp-{i}"
            route = row["partitionKey"] or attrs["dedup"]
            message = OutgoingMessage(row["value"].encode(), msg_type=row["streamId"],
                                      msg_time=row["msgTime"].strftime("%Y%m%d%H%M") if row["msgTime"] else None,
                                      attributes=attrs)
            item = reference.prepare(TOPIC, message, key_hash=writer.route_hash(route))
            r = item.request
            expected.append((r.partition_id, r.data, r.flag, r.checksum, r.msg_type, r.msg_time))
        reference.close()
        sent = writer.send_batches(iter([batch]), _sink_options(master, topic=TOPIC, dedupAttribute="dedup"), "stamp")
        assert (sent.rows, sent.bytes) == (5, 56)
        assert _sent(broker) == sorted(expected)
    finally:
        _close_sink_producers()


def test_a_row_the_sink_cannot_encode_fails_the_task_after_the_rows_before_it(master, broker):
    from tubespark.errors import MessageFormatError
    from tubespark.tubemq.spark import writer

    attributes = pa.array([None, None, [("bad,key", "1")], None], pa.map_(pa.string(), pa.string()))
    batch = pa.record_batch({"value": pa.array([b"a", b"b", b"c", b"d"]), "attributes": attributes})
    try:
        with pytest.raises(MessageFormatError, match=r"row 2 of this task \(topic 'topic_b', value of 1 bytes\).*"
                                                     r"the 2 rows before it were sent"):
            writer.send_batches(iter([batch]), _sink_options(master, topic=TOPIC), None)
        assert sorted(body for ref in broker.partitions(TOPIC) for body in broker.bodies(ref)) == [b"a", b"b"]
    finally:
        _close_sink_producers()


def test_the_sink_sends_runs_of_rows_by_their_topic_column_and_stops_at_a_row_without_one():
    from tubespark.errors import OptionError
    from tubespark.tubemq.spark import writer

    with FakeBroker() as broker:
        broker.add_topic("topic_b", stores=2)
        broker.add_topic("topic_c", stores=1)
        with FakeMaster(broker) as master:
            batch = pa.record_batch({"value": pa.array([b"1", b"2", b"3", b"4", b"5"]),
                                     "topic": pa.array(["topic_b", "topic_c", "topic_c", None, "topic_b"])})
            try:
                with pytest.raises(OptionError, match="row 3 has no topic"):
                    writer.send_batches(iter([batch]), _sink_options(master), None)
                stored = {topic: sorted(b for ref in broker.partitions(topic) for b in broker.bodies(ref))
                          for topic in ("topic_b", "topic_c")}
                assert stored == {"topic_b": [b"1"], "topic_c": [b"2", b"3"]}
            finally:
                _close_sink_producers()


def test_the_sender_is_woken_once_half_of_what_is_on_the_wire_is_answered(producer):
    """Not per receive: against the real broker that cost a context switch per message (issue 24). A failure
    wakes it at once (it may end the batch or re-send)."""
    batch = BatchSend(producer, [])
    woken: list[int] = []

    class Counting(threading.Condition):
        def notify(self, n: int = 1) -> None:
            woken.append(n)
            super().notify(n)

    batch.cond = Counting(threading.Lock())
    answer = SendAnswer(True, 200, "OK", 1, 2, 3)
    batch.wake_at = 4
    batch.resolve_many([(0, answer), (1, answer)])
    batch.resolve_many([(2, answer)])
    assert woken == []
    batch.resolve_many([(3, answer)])
    assert woken == [1]
    batch.answers.clear()
    batch.reject(4, ServerBusyError(503, "busy"))
    assert woken == [1, 1]
    assert WAKE_SHARE == 0.5 and 0 < GATHER_S <= 0.01  # the gathering is bounded in time
