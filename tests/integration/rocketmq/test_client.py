"""The RocketMQ client against a real name server + broker: routes, batch sends, exact pulls, offsets, pop."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from tubespark.errors import DataLossError, NoDataError, RangeReadError, UnknownTopicError
from tubespark.rocketmq.client.client import RocketMQClient, all_queues
from tubespark.rocketmq.client.keeper import Keeper
from tubespark.rocketmq.client.pop import PopConsumer, pop_until
from tubespark.rocketmq.client.producer import BatchProducer
from tubespark.rocketmq.client.ranges import RangeReader
from tubespark.rocketmq.wire import headers
from tubespark.rocketmq.wire.pop import Receipt
from tubespark.rocketmq.wire.route import MessageQueue

pytestmark = pytest.mark.integration


@pytest.fixture
def client(rocketmq_stack):
    with RocketMQClient([rocketmq_stack.namesrv_address]) as c:
        yield c


def send(client: RocketMQClient, topic: str, n: int, *, prefix: str = "m", **kw) -> None:
    producer = BatchProducer(client, **kw)
    for i in range(n):
        producer.add(topic, f"{prefix}{i}".encode(), {"KEYS": f"k{i}"})
    producer.flush()
    assert producer.sent_messages == n


def settled_bounds(client: RocketMQClient, topic: str, total: int) -> dict[str, tuple[int, int]]:
    """Bounds once the broker dispatched every sent message to its queues (dispatch is asynchronous)."""
    deadline = time.monotonic() + 30
    while True:
        bounds = client.bounds(all_queues(client, [topic]))
        if sum(high - low for low, high in bounds.values()) >= total or time.monotonic() > deadline:
            return bounds
        time.sleep(0.1)


def test_route_and_batch_sends_fill_every_queue(client, rocketmq_stack, rocketmq_topic):
    topic = rocketmq_topic(4)
    route = client.route(topic)
    assert [q.key for q in route.write_queues()] == [f"{topic}:broker-a:{i}" for i in range(4)]
    assert route.read_address("broker-a") == rocketmq_stack.node("broker-a").address
    send(client, topic, 5000, batch_messages=100)
    bounds = settled_bounds(client, topic, 5000)
    assert sum(high for _low, high in bounds.values()) == 5000
    assert all(high >= 1000 for _low, high in bounds.values())  # whole batches go round robin over the queues


def test_exact_ranges_are_read_once_in_order(client, rocketmq_topic):
    topic = rocketmq_topic(1)
    send(client, topic, 1000)
    mq = MessageQueue(topic, "broker-a", 0)
    assert settled_bounds(client, topic, 1000)[mq.key] == (0, 1000)
    reader = RangeReader(client, "tubespark_test", depth=4, verify_crc=True)  # in queue order, as sent
    for low, high in ((0, 1000), (5, 6), (31, 97), (990, 1000)):
        got = [m for batch in reader.read(mq, low, high) for m in batch]
        assert [m.queue_offset for m in got] == list(range(low, high))
        assert [m.body for m in got] == [f"m{i}".encode() for i in range(low, high)]
    assert got[0].keys == "k990" and got[0].msg_id and got[0].topic == topic


def test_reading_past_the_end_waits_then_fails(client, rocketmq_topic):
    topic = rocketmq_topic(1)
    send(client, topic, 10)
    settled_bounds(client, topic, 10)
    reader = RangeReader(client, "tubespark_test", retry_s=1.0)
    with pytest.raises(RangeReadError, match=r"reading \[0, 12\) failed at 10 .*no message at 10") as error:
        list(reader.read(MessageQueue(topic, "broker-a", 0), 0, 12))
    assert error.value.retriable and isinstance(error.value.__cause__, NoDataError)  # the data may still come


def test_consumer_offsets_roundtrip(client, rocketmq_topic):
    topic = rocketmq_topic(2)
    mq = MessageQueue(topic, "broker-a", 1)
    group = "g" + uuid.uuid4().hex[:8]
    assert client.consumer_offset(group, mq) is None
    client.commit_offset(group, mq, 42)
    assert client.consumer_offset(group, mq) == 42


def test_unknown_topic_is_typed(client):
    with pytest.raises(UnknownTopicError):
        client.route("no_such_topic_" + uuid.uuid4().hex[:6])


def test_data_loss_is_raised_for_offsets_below_the_minimum(client, rocketmq_topic):
    topic = rocketmq_topic(1)
    send(client, topic, 5)
    settled_bounds(client, topic, 5)
    reader = RangeReader(client, "tubespark_test", fail_on_data_loss=False)
    mq = MessageQueue(topic, "broker-a", 0)
    assert [m.queue_offset for batch in reader.read(mq, 0, 5) for m in batch] == [0, 1, 2, 3, 4]
    reader.fail_on_data_loss = True
    moved = headers.PullResult(headers.OFFSET_MOVED, 3, 3, 5, b"", 0)  # what a broker answers below its minimum
    with pytest.raises(DataLossError, match=r"offsets \[0, 3\) are gone"):
        reader._take(mq, moved, 0, 5)
    reader.fail_on_data_loss = False
    assert reader._take(mq, moved, 0, 5) == ([], 3) and reader.lost == [(mq.key, 0, 3)]

def test_a_keeper_hides_held_messages_past_their_invisible_time(client, rocketmq_topic):
    """Held 3 s (``TUBESPARK_SOAK=long``: 20 s, longer than the broker takes to revive unrenewed messages)
    with a 1 s invisible time: renewed again and again, nothing delivered again while held, and the
    renewed receipts (not the popped ones) ack them."""
    topic = rocketmq_topic(2)
    send(client, topic, 40)
    settled_bounds(client, topic, 40)
    group = "keep" + uuid.uuid4().hex[:8]
    consumer = PopConsumer(client, group, topic, invisible_ms=1000, poll_ms=300)
    popped = pop_until(consumer, 40)
    assert len(popped) == 40
    keeper = Keeper({topic: consumer}, 1000).start()
    keeper.hold(topic, [p.receipt for p in popped])
    other = PopConsumer(client, group, topic, invisible_ms=60000, poll_ms=300)
    again = []
    deadline = time.monotonic() + (20 if os.environ.get("TUBESPARK_SOAK") == "long" else 3)
    while time.monotonic() < deadline:
        again += pop_until(other, 100)
    held = keeper.release()[topic]
    assert again == [], f"{len(again)} held messages were delivered again"
    assert keeper.renewed >= 40 * 3
    assert {Receipt.parse(r).offset for r in held} == {p.message.queue_offset for p in popped}
    assert not set(held) & {p.receipt for p in popped}  # every receipt changed
    assert consumer.ack(held) == 40


def test_pop_ack_and_redelivery(client, rocketmq_topic):
    topic = rocketmq_topic(2)
    send(client, topic, 60)
    settled_bounds(client, topic, 60)
    consumer = PopConsumer(client, "pop" + uuid.uuid4().hex[:8], topic, invisible_ms=3000, poll_ms=300)
    assert consumer.backlog() == 60
    first = pop_until(consumer, 60)
    assert sorted(p.message.body for p in first) == sorted(f"m{i}".encode() for i in range(60))
    deadline = time.monotonic() + 20  # the group's offsets move with the pop (the broker commits them async)
    while consumer.backlog() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert consumer.backlog() == 0
    kept = first[:20]
    assert consumer.ack([p.receipt for p in first[20:-1]]) == 39
    consumer.ack_one(first[-1].receipt)
    renewed = consumer.change_invisible(kept[0].receipt, 30000)  # this one stays hidden longer
    assert Receipt.parse(renewed).offset == kept[0].message.queue_offset
    again = []
    deadline = time.monotonic() + 60
    while len(again) < 19 and time.monotonic() < deadline:
        again += pop_until(consumer, 100)
    assert sorted(p.message.body for p in again) == sorted(p.message.body for p in kept[1:])
    assert all(p.message.reconsume_times >= 1 and Receipt.parse(p.receipt).kind != "0" for p in again)
    consumer.ack([p.receipt for p in again] + [renewed])
