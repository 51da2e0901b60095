"""``format("rocketmq")`` on a real broker, what only RocketMQ has: the sink's tags, keys, properties and
partition keys, group offsets committed by pull streams, pop streams (acks after commit, at-least-once)
and RocketMQ's own options. What every broker promises: tests/integration/contract/."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from tubespark.errors import OptionError
from tubespark.rocketmq.client.client import RocketMQClient, all_queues
from tubespark.rocketmq.client.pop import PopConsumer
from tubespark.rocketmq.client.producer import BatchProducer
from tubespark.rocketmq.spark.batch_reader import RocketMQBatchReader
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
    query = (frame.writeStream.format("memory").queryName("pop_" + group)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="500 milliseconds").start())
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            seen = spark.sql(f"select value, receiptHandle from pop_{group}").collect()
            if len({r.value for r in seen}) >= 500:
                break
            assert query.exception() is None, query.exception()
            time.sleep(0.5)
        time.sleep(2)  # let the last batch's commit ack it
    finally:
        query.stop()
    assert {r.value for r in seen} == {f"p{i}".encode() for i in range(500)}
    assert all(len(r.receiptHandle.split(" ")) == 8 for r in seen)
    # every committed batch was acked: nothing comes back after the invisible time, nothing is waiting
    with RocketMQClient([rocketmq_stack.namesrv_address]) as client:
        consumer = PopConsumer(client, group, topic)
        deadline = time.monotonic() + 20  # the broker commits a pop group's offsets asynchronously
        while consumer.backlog() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert consumer.backlog() == 0
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
        ({"namesrv": "127.0.0.1:1", "topic": "t", "popInvisibleTimeMs": "10"}, "1000.."),
    ]:
        with pytest.raises(Exception, match=message):
            load(**options).collect()
    options = RocketMQOptions.from_raw({"namesrv": "h:1", "topic": "t", "startingOffsets": "group", "group": "g"},
                                       mode="read")
    with pytest.raises(OptionError, match="streaming reads"):
        RocketMQBatchReader(options)
