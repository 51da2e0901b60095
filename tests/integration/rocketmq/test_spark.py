"""``format("rocketmq")`` on a real broker, what only RocketMQ has: the sink's tags, keys, properties and
partition keys, group offsets committed by pull streams, pop streams (acks after commit, at-least-once)
and RocketMQ's own options. What every broker promises: tests/integration/contract/."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.helpers import assert_pop_group_drained, run_pop_stream
from tests.readers import RocketMQBatchReader
from tubespark.errors import OptionError
from tubespark.rocketmq.client.client import RocketMQClient, all_queues
from tubespark.rocketmq.client.pop import PopConsumer, pop_until
from tubespark.rocketmq.client.producer import BatchProducer
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.wire.route import MessageQueue
from tubespark.spark.offsets import BatchOffsets

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def produce(stack, topic: str, values: list[bytes], **props: str) -> None:
    with RocketMQClient([stack.namesrv_address]) as client:
        producer = BatchProducer(client, batch_messages=64)
        for value in values:
            producer.add(topic, value, props)
        producer.flush()
        deadline = time.monotonic() + 30  # the broker dispatches to its queues asynchronously
        while time.monotonic() < deadline:
            bounds = client.bounds(all_queues(client, [topic]))
            if sum(high - low for low, high in bounds.values()) >= len(values):
                return
            time.sleep(0.1)
    raise AssertionError("sent messages did not reach the queues")


def batch(spark, stack, topic: str, **options: str):
    return (spark.read.format("rocketmq").option("namesrv", stack.namesrv_address).option("topic", topic)
            .options(**options).load())


def stream(spark, stack, topic: str, **options: str):
    return (spark.readStream.format("rocketmq").option("namesrv", stack.namesrv_address).option("topic", topic)
            .options(**options).load())


def run_available_now(frame, out: Path, checkpoint: Path) -> None:
    query = (frame.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation",
                                                                                  str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180), "the AvailableNow query did not finish in time"
    assert query.exception() is None, query.exception()


def test_sink_round_trip_of_tags_keys_properties_and_partition_keys(spark, rocketmq_stack, rocketmq_topic):
    """The columns only RocketMQ has, written and read back (every row landing once, from batch and streaming
    writes, is every broker's: tests/integration/contract/test_sink.py)."""
    topic = rocketmq_topic(4)
    rows = [(f"w{i}", f"tag{i % 3}", f"key{i}", {"p": str(i)}, f"pk{i % 5}") for i in range(1000)]
    frame = spark.createDataFrame(rows, "value string, tags string, keys string, properties map<string,string>, "
                                        "partitionKey string")
    (frame.write.format("rocketmq").option("namesrv", rocketmq_stack.namesrv_address).option("topic", topic)
     .option("batchMaxMessages", "50").mode("append").save())
    back = batch(spark, rocketmq_stack, topic, includeProperties="true").collect()
    assert sorted(r.value.decode() for r in back) == sorted(r[0] for r in rows)
    assert all(r.msgId and r.properties.get("UNIQ_KEY") == r.msgId and r.bornTimestamp for r in back)
    one = next(r for r in back if r.value == b"w7")
    assert (one.tags, one.keys, one.properties["p"]) == ("tag1", "key7", "7")
    by_key: dict[str, set[str]] = {}
    for r in back:
        by_key.setdefault(f"pk{int(r.properties['p']) % 5}", set()).add(r.queueKey)
    assert all(len(queues) == 1 for queues in by_key.values())  # a partitionKey keeps to one queue


def test_committed_batches_become_the_groups_offsets(spark, rocketmq_stack, rocketmq_topic, tmp_path):
    """commit() stores each committed batch's ends as the group's offsets (nothing lost or read twice through
    a restart is every broker's: tests/integration/contract/test_checkpoint_restart.py)."""
    topic = rocketmq_topic(4)
    group = "g" + uuid.uuid4().hex[:8]
    checkpoint = tmp_path / "ck"
    produce(rocketmq_stack, topic, [f"a{i}".encode() for i in range(300)])
    frame = stream(spark, rocketmq_stack, topic, group=group, startingOffsets="earliest",
                   maxOffsetsPerTrigger="100").select("value", "queueKey", "queueOffset")
    run_available_now(frame, tmp_path / "out", checkpoint)
    offsets = BatchOffsets.parse(json.loads(sorted((checkpoint / "offsets").glob("[0-9]*"),
                                                   key=lambda p: int(p.name))[-1].read_text().splitlines()[-1])
                                 ).positions  # without the marks (#last)
    assert sum(offsets.values()) == 300
    with RocketMQClient([rocketmq_stack.namesrv_address]) as client:
        stored = {key: client.consumer_offset(group, MessageQueue.parse_key(key)) for key in offsets}
    assert stored == offsets


def test_pop_stream_acks_after_commit(spark, rocketmq_stack, rocketmq_topic, tmp_path):
    topic = rocketmq_topic(4)
    group = "pop" + uuid.uuid4().hex[:8]
    produce(rocketmq_stack, topic, [f"p{i}".encode() for i in range(500)])
    frame = stream(spark, rocketmq_stack, topic, consumeMode="pop", group=group, startingOffsets="earliest",
                   popPartitions="3", popMaxMessages="100", popPollMs="300",
                   popReceiptsPath=str(tmp_path / "receipts")).select("value", "receiptHandle", "queueKey")
    seen = run_pop_stream(spark, frame, "pop_" + group, tmp_path / "ck", 500, "value, receiptHandle")
    assert {r.value for r in seen} == {f"p{i}".encode() for i in range(500)}
    assert all(len(r.receiptHandle.split(" ")) == 8 for r in seen)
    # every committed batch was acked: nothing comes back after the invisible time, nothing is waiting
    assert_pop_group_drained(rocketmq_stack.namesrv_address, group, topic)
    assert not any((tmp_path / "receipts").rglob("part-*.json")), "receipts of committed batches were not acked"


def test_rocketmq_only_options_fail_before_any_network_call(spark):
    """The options only RocketMQ has (the shared ones: tests/integration/contract/test_bad_options.py)."""
    def load(**options: str):
        reader = spark.read.format("rocketmq")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    for options, message in [
        ({"namesrv": "127.0.0.1:1", "topic": "bad topic"}, "topic names"),
        ({"namesrv": "127.0.0.1:1", "topic": "t", "consumeMode": "push"}, "pull or pop"),
        ({"namesrv": "127.0.0.1:1", "topic": "t", "consumeMode": "pop"}, "needs option group"),
        ({"namesrv": "127.0.0.1:1", "topic": "t", "startingOffsets": '{"t:b:x": 1}'}, "bad partition key"),
        ({"namesrv": "127.0.0.1:1", "topic": "t", "popInvisibleTimeMs": "10000"}, "at least 30000"),
    ]:
        with pytest.raises(Exception, match=message):
            load(**options).collect()
    options = RocketMQOptions.from_raw({"namesrv": "h:1", "topic": "t", "startingOffsets": "group", "group": "g"},
                                       mode="read")
    with pytest.raises(OptionError, match="streaming reads"):
        RocketMQBatchReader(options)


def comes_back(stack, group: str, topic: str, seconds: float) -> list[bytes]:
    """What the group pops within ``seconds`` (each message popped is acked, so nothing is counted twice)."""
    got: list[bytes] = []
    with RocketMQClient([stack.namesrv_address]) as client:
        consumer = PopConsumer(client, group, topic, invisible_ms=60000, poll_ms=500)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            popped = pop_until(consumer, 1000)
            if popped:
                consumer.ack([p.receipt for p in popped])
            got += [p.message.body for p in popped]
    return got


SOAK = os.environ.get("TUBESPARK_SOAK") == "long"
REDELIVERY_S = 8.0
"""How long after its invisible time runs out a message not acked is delivered again, with margin. Waiting
that long proves "not delivered again"; it costs too much for CI, so only ``TUBESPARK_SOAK=long`` waits
(CI checks what makes it so: the acks, the changed receipts)."""


def pop_stream(spark, stack, topic: str, group: str, tmp_path: Path, **options: str):
    return stream(spark, stack, topic, consumeMode="pop", group=group, startingOffsets="earliest", popPollMs="300",
                  popReceiptsPath=str(tmp_path / "receipts"), **options)


def test_pop_available_now_reads_what_was_there_then_stops(spark, rocketmq_stack, rocketmq_topic, tmp_path):
    topic = rocketmq_topic(4)
    group = "popnow" + uuid.uuid4().hex[:8]
    produce(rocketmq_stack, topic, [f"n{i}".encode() for i in range(600)])
    frame = pop_stream(spark, rocketmq_stack, topic, group, tmp_path, popPartitions="2",
                       popMaxMessages="100").select("value")
    run_available_now(frame, tmp_path / "out", tmp_path / "ck")  # 3+ batches: 2 tasks x 100 messages each
    values = [r.value for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(values) == sorted(f"n{i}".encode() for i in range(600))
    assert len(list((tmp_path / "ck" / "commits").glob("[0-9]*"))) >= 3
    assert not any((tmp_path / "receipts").rglob("part-*.json")), "the last batch was not acked"


def test_pop_batch_read_acks_what_it_read(spark, rocketmq_stack, rocketmq_topic):
    """A batch read in pop mode consumes: every message once, acked by the tasks (nothing comes back)."""
    topic = rocketmq_topic(4)
    group = "popread" + uuid.uuid4().hex[:8]
    produce(rocketmq_stack, topic, [f"b{i}".encode() for i in range(400)])
    options = {"consumeMode": "pop", "group": group, "popPartitions": "2", "popPollMs": "300",
               "popInvisibleTimeMs": "30000"}
    rows = batch(spark, rocketmq_stack, topic, **options).select("value", "receiptHandle").collect()
    assert sorted(r.value for r in rows) == sorted(f"b{i}".encode() for i in range(400))
    assert batch(spark, rocketmq_stack, topic, **options).count() == 0  # consumed
    assert comes_back(rocketmq_stack, group, topic, 30 + REDELIVERY_S if SOAK else 0.5) == []


def test_pop_batch_longer_than_the_invisible_time_is_delivered_once(spark, rocketmq_stack, rocketmq_topic,
                                                                    tmp_path):
    """A micro-batch that outlasts the invisible time (the shortest one allowed, 30 s): the driver extends the
    waiting receipts' invisible time (their files hold new receipts), so nothing is delivered again, while it
    runs or after its (renewed) receipts were acked; ``TUBESPARK_SOAK=long`` watches long enough for a
    redelivery to show (the broker revived unrenewed ones more than 8 s after they ran out)."""
    topic = rocketmq_topic(4)
    group = "popslow" + uuid.uuid4().hex[:8]
    produce(rocketmq_stack, topic, [f"s{i}".encode() for i in range(300)])
    seen: list[bytes] = []
    ended: list[float] = []
    changed: list[bool] = []

    def slow(frame, batch_id: int) -> None:
        rows = frame.select("value", "receiptHandle").collect()
        seen.extend(r.value for r in rows)
        if batch_id == 0:
            time.sleep(36.0)  # 1.2 x popInvisibleTimeMs, after the tasks ended: the receipts wait for the commit
            waiting = {item["receipt"] for f in (tmp_path / "receipts").rglob("part-*.json")
                       for item in json.loads(f.read_text())}
            changed.append(len(waiting) == len(rows) and not waiting & {r.receiptHandle for r in rows})
            ended.append(time.monotonic())

    query = (pop_stream(spark, rocketmq_stack, topic, group, tmp_path, popInvisibleTimeMs="30000")
             .writeStream.foreachBatch(slow).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="300 milliseconds").start())
    try:
        deadline = time.monotonic() + 120
        watch = REDELIVERY_S if SOAK else 1.0
        while not (ended and time.monotonic() > ended[0] + watch) and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(0.3)
    finally:
        query.stop()
    assert ended, "the first batch did not end"
    assert changed == [True], "the driver did not extend the waiting receipts (each change gives a new one)"
    assert sorted(seen) == sorted(f"s{i}".encode() for i in range(300))  # each once: no early redelivery
    assert comes_back(rocketmq_stack, group, topic, 1.0) == []


def test_a_restarted_driver_acks_what_its_predecessor_committed(spark, rocketmq_stack, rocketmq_topic, tmp_path):
    """Spark acks (commits the source) when it plans the next batch: a driver gone between a batch's commit
    and that moment leaves the batch unacked. The restarted driver acks it from the receipts its
    predecessor left (their run id is in the checkpointed offsets), so the broker does not deliver it again.

    The receipts must still be valid when the new driver starts, so the invisible time (30 s) is longer than
    the restart; that nothing comes back once it has run out is waited for with ``TUBESPARK_SOAK=long`` only
    (38 s), CI checks the receipts were acked and nothing is back at once."""
    topic = rocketmq_topic(4)
    group = "poprestart" + uuid.uuid4().hex[:8]
    produce(rocketmq_stack, topic, [f"r{i}".encode() for i in range(200)])
    frame = pop_stream(spark, rocketmq_stack, topic, group, tmp_path, popInvisibleTimeMs="30000").select("value")
    first = (frame.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="1 hour").start())
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "ck" / "commits" / "0").exists() and time.monotonic() < deadline:
            assert first.exception() is None, first.exception()
            time.sleep(0.2)
    finally:
        first.stop()  # committed, not acked: the next batch's planning would have acked it
    stopped = time.monotonic()
    assert any((tmp_path / "receipts").rglob("part-*.json")), "batch 0 was acked before the restart"
    run_available_now(frame, tmp_path / "out", tmp_path / "ck")
    assert not any((tmp_path / "receipts").rglob("part-*.json")), "the restarted driver did not ack batch 0"
    values = [r.value for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(values) == sorted(f"r{i}".encode() for i in range(200))
    wait = 30 + REDELIVERY_S - (time.monotonic() - stopped) if SOAK else 0.5
    assert comes_back(rocketmq_stack, group, topic, wait) == []
