"""Producer against the fake master and broker: acknowledgements, flush, retries, errors."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.doubles.fakebroker import FakeBroker, FakeMaster, _failure, fast_settings
from tubespark.errors import (
    BadRequestError,
    MessageFormatError,
    MessageTooLargeError,
    ServerBusyError,
    UnknownTopicError,
)
from tubespark.tubemq.client.producer import Producer, SendResult
from tubespark.tubemq.wire.constants import Method
from tubespark.tubemq.wire.message import OutgoingMessage, checksum, decode_payload
from tubespark.tubemq.wire.pb import master_service_pb2 as mpb

TOPIC = "topic_p"


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker() as fake:
        fake.add_topic(TOPIC, stores=2)
        yield fake


@pytest.fixture
def producer(master: FakeMaster) -> Iterator[Producer]:
    p = Producer(master.address, fast_settings(heartbeat_interval_s=30.0), max_retries=2, client_id="prod-1")
    p.start()
    p.publish([TOPIC], timeout_s=5)
    yield p
    p.close()


def test_publish_learns_the_partitions(broker, producer):
    assert producer.partitions(TOPIC) == tuple(broker.partitions(TOPIC))
    assert [p.partition_id for p in producer.partitions(TOPIC)] == [0, 10000]


def test_send_is_acknowledged_with_the_append_offset(broker, producer):
    part = broker.ref(TOPIC, 10000)
    first = producer.send(TOPIC, OutgoingMessage(b"one"), part)
    second = producer.send(TOPIC, OutgoingMessage(b"two", msg_type="click", attributes={"k": "v"}), part)
    assert isinstance(first, SendResult)
    assert (first.partition, first.append_offset, second.append_offset) == (part, 0, 28)
    assert first.message_id != second.message_id
    stored = broker.stores[(TOPIC, 10000)].messages
    assert stored[0].payLoadData == b"one"
    decoded = decode_payload(stored[1].messageId, stored[1].payLoadData, stored[1].flag, stored[1].checkSum)
    assert (decoded.data, decoded.msg_type, decoded.user_attributes) == (b"two", "click", {"k": "v"})
    request = broker.requests_of(Method.SEND_MESSAGE)[1]
    assert (request.clientId, request.topicName, request.partitionId, request.msgType) == ("prod-1", TOPIC,
                                                                                          10000, "click")
    assert request.checkSum == checksum(request.data)


def test_without_a_partition_sends_go_round_robin(broker, producer):
    results = [producer.send(TOPIC, OutgoingMessage(b"x")) for _ in range(4)]
    assert sorted(r.partition.partition_id for r in results) == [0, 0, 10000, 10000]


def test_flush_waits_for_every_pending_send_in_order(broker, producer):
    part = broker.ref(TOPIC, 0)
    futures = [producer.send_async(TOPIC, OutgoingMessage(f"m{i}".encode()), part) for i in range(20)]
    results = producer.flush()
    assert [r.append_offset for r in results] == [28 * i for i in range(20)]
    assert [f.result(timeout=0).append_offset for f in futures] == [28 * i for i in range(20)]
    assert broker.bodies(part) == [f"m{i}".encode() for i in range(20)]
    assert producer.flush() == []  # nothing pending any more


def test_deferred_sends_are_acknowledged_at_flush_even_beyond_the_in_flight_limit(master, broker):
    part = broker.ref(TOPIC, 0)
    with Producer(master.address, fast_settings(heartbeat_interval_s=30.0), max_in_flight=4) as producer:
        producer.publish([TOPIC], timeout_s=5)
        # 10 deferred sends through 4 slots: waiting for a slot writes out what is deferred, so no deadlock
        futures = [producer.send_async(TOPIC, OutgoingMessage(f"m{i}".encode()), part, defer=True) for i in range(10)]
        results = producer.flush()
    assert [r.append_offset for r in results] == [28 * i for i in range(10)]
    assert all(f.done() for f in futures)
    assert broker.bodies(part) == [f"m{i}".encode() for i in range(10)]


def test_retriable_error_then_success(broker, producer):
    part = broker.ref(TOPIC, 0)
    broker.inject(Method.SEND_MESSAGE, 503)
    result = producer.send(TOPIC, OutgoingMessage(b"payload"), part)
    assert result.append_offset == 0
    assert broker.bodies(part) == [b"payload"]  # stored exactly once
    first, second = broker.requests_of(Method.SEND_MESSAGE)
    assert (first.data, first.checkSum) == (second.data, second.checkSum)  # the same bytes sent again


def test_flush_retries_a_retriable_failure(broker, producer):
    part = broker.ref(TOPIC, 0)
    broker.inject(Method.SEND_MESSAGE, 503)
    producer.send_async(TOPIC, OutgoingMessage(b"a"), part)
    producer.send_async(TOPIC, OutgoingMessage(b"b"), part)
    results = producer.flush()
    assert [r.partition for r in results] == [part, part]
    assert sorted(broker.bodies(part)) == [b"a", b"b"]


def test_retries_are_bounded(broker, producer):
    broker.inject(Method.SEND_MESSAGE, 503, times=10)
    with pytest.raises(ServerBusyError):
        producer.send(TOPIC, OutgoingMessage(b"p"), broker.ref(TOPIC, 0))
    assert len(broker.requests_of(Method.SEND_MESSAGE)) == 3  # the send and max_retries=2 re-sends
    assert broker.bodies(broker.ref(TOPIC, 0)) == []


def test_non_retriable_error_reaches_the_caller(broker, producer):
    broker.inject(Method.SEND_MESSAGE, 400, text="data length over max length")
    with pytest.raises(BadRequestError, match="data length over max length"):
        producer.send(TOPIC, OutgoingMessage(b"p"), broker.ref(TOPIC, 0))
    assert len(broker.requests_of(Method.SEND_MESSAGE)) == 1


def test_flush_raises_a_non_retriable_error_after_settling_the_rest(broker, producer):
    part = broker.ref(TOPIC, 0)
    broker.inject(Method.SEND_MESSAGE, 400)
    producer.send_async(TOPIC, OutgoingMessage(b"bad"), part)
    good = producer.send_async(TOPIC, OutgoingMessage(b"good"), part)
    with pytest.raises(BadRequestError):
        producer.flush()
    assert good.result(timeout=0).append_offset == 0
    assert broker.bodies(part) == [b"good"]


def test_each_message_is_encoded_once_even_when_resent(monkeypatch, broker, producer):
    broker.inject(Method.SEND_MESSAGE, 503)
    calls = []
    original = OutgoingMessage.encode

    def counting(self):
        calls.append(self.data)
        return original(self)

    monkeypatch.setattr(OutgoingMessage, "encode", counting)
    producer.send(TOPIC, OutgoingMessage(b"once"), broker.ref(TOPIC, 0))
    assert len(broker.requests_of(Method.SEND_MESSAGE)) == 2
    assert calls == [b"once"]


def test_too_large_and_empty_messages_are_refused_before_sending(master, broker):
    master.max_msg_size = 10
    with Producer(master.address, fast_settings(heartbeat_interval_s=30.0), client_id="prod-2") as p:
        p.publish([TOPIC], timeout_s=5)
        with pytest.raises(MessageTooLargeError):
            p.send(TOPIC, OutgoingMessage(b"x" * 11))
        with pytest.raises(MessageFormatError):
            p.send(TOPIC, OutgoingMessage(b""))
        assert p.send(TOPIC, OutgoingMessage(b"x" * 10)).append_offset == 0
    assert len(broker.requests_of(Method.SEND_MESSAGE)) == 1


def test_unknown_topic(master):
    with Producer(master.address, fast_settings(heartbeat_interval_s=30.0), client_id="prod-3") as p:
        with pytest.raises(UnknownTopicError, match="no_such_topic"):
            p.publish(["no_such_topic"], timeout_s=0.3)
        with pytest.raises(UnknownTopicError):
            p.send("no_such_topic", OutgoingMessage(b"x"))


def test_master_forgetting_the_producer_makes_it_register_again(master, producer):
    master.inject(Method.PRODUCER_HEARTBEAT, 411)
    producer.publish([TOPIC], timeout_s=5)
    assert len(master.requests_of(Method.PRODUCER_REGISTER)) == 2


def test_close_flushes_pending_sends(broker, master):
    p = Producer(master.address, fast_settings(heartbeat_interval_s=30.0), client_id="prod-4").start()
    p.publish([TOPIC], timeout_s=5)
    p.send_async(TOPIC, OutgoingMessage(b"last"), broker.ref(TOPIC, 0))
    p.close()
    assert broker.bodies(broker.ref(TOPIC, 0)) == [b"last"]
    assert [r.clientId for r in master.requests_of(Method.PRODUCER_CLOSE)] == ["prod-4"]


def test_a_send_that_times_out_does_not_resend_the_others(broker, producer):
    """One unanswered send must not tear down the connection under the sends still in flight on it.

    Dropping the connection on a timeout failed every pending send, and re-sending them stored messages
    the broker already had a second time (the broker stores before it answers)."""
    part = broker.ref(TOPIC, 0)
    with broker.lock:  # the first answer never comes; the next ones come slowly, one after another
        broker._answer_faults[int(Method.SEND_MESSAGE)] = [("silent", 0.0)] + [("slow", 0.5)] * 12
    bodies = [f"m{i}".encode() for i in range(12)]
    for body in bodies:
        producer.send_async(TOPIC, OutgoingMessage(body), part)
    producer.flush()
    stored = broker.bodies(part)
    assert 1 <= stored.count(b"m0") <= 2  # the unanswered one may be stored twice: at-least-once
    assert [stored.count(body) for body in bodies[1:]] == [1] * 11


class ElectedMaster(FakeMaster):
    """A master just elected after the active one died: until ``loaded`` it answers every topic as TubeMQ 2.4.0's
    new active master did in ``test_masters.py`` (a consumer register refused with 431, "not deployed"; no topic
    in a producer heartbeat), then serves as usual."""

    def __init__(self, broker: FakeBroker, loaded_after_s: float | None) -> None:
        super().__init__(broker)
        self.loaded_at = None if loaded_after_s is None else time.monotonic() + loaded_after_s

    def _loading(self) -> bool:
        return self.loaded_at is None or time.monotonic() < self.loaded_at

    def _c_register(self, req):
        if self._loading():
            return _failure(mpb.RegisterResponseM2C, 431, f"Requested topic [{list(req.topicList)}] not deployed!")
        return super()._c_register(req)

    def _p_heartbeat(self, req):
        response = super()._p_heartbeat(req)
        if self._loading():
            del response.topicInfos[:]
        return response


DEAD_MASTER = "127.0.0.0:1"  # refuses at once, and sorts before the fake's 127.0.0.1 address: tried first


@pytest.mark.parametrize("failed_over", [True, False], ids=["after-a-fail-over", "one-master"])
def test_a_topic_a_new_active_master_calls_undeployed_is_asked_again_after_a_fail_over(broker, failed_over):
    """Seen in CI (test_masters.py): the active master killed -9, the sink's next task met the elected master,
    which said 431 "not deployed" for the sink's topic, and the query failed. A producer whose master channel
    just moved past a master that did not serve it asks again for ``master_election_s``; with one master the
    answer stands and fails at once."""
    with ElectedMaster(broker, loaded_after_s=1.5) as master:
        masters = f"{DEAD_MASTER},{master.address}" if failed_over else master.address
        with Producer(masters, fast_settings(heartbeat_interval_s=30.0, master_election_s=10.0)) as producer:
            started = time.monotonic()
            if failed_over:
                producer.publish([TOPIC], timeout_s=20)
                assert producer.partitions(TOPIC) == tuple(broker.partitions(TOPIC))
                assert time.monotonic() - started >= 1.0
            else:
                with pytest.raises(UnknownTopicError, match="not deployed"):
                    producer.publish([TOPIC], timeout_s=20)
                assert time.monotonic() - started < 1.0


def test_a_topic_that_stays_undeployed_after_a_fail_over_fails_once_the_election_window_ends(broker):
    with ElectedMaster(broker, loaded_after_s=None) as master:
        settings = fast_settings(heartbeat_interval_s=30.0, master_election_s=1.5)
        with Producer(f"{DEAD_MASTER},{master.address}", settings) as producer:
            started = time.monotonic()
            with pytest.raises(UnknownTopicError, match="not deployed"):
                producer.publish([TOPIC], timeout_s=20)
            assert 1.0 <= time.monotonic() - started < 5.0
