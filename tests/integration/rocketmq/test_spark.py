"""``format("rocketmq")`` on a real broker: batch ranges, the sink, pull streams (exactly once through a
restart), pop streams (acks after commit, at-least-once) and bad options."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tubespark.errors import OptionError
from tubespark.rocketmq.client.client import RocketMQClient, all_queues
from tubespark.rocketmq.client.pop import PopConsumer
from tubespark.rocketmq.client.producer import BatchProducer
from tubespark.rocketmq.spark.batch_reader import RocketMQBatchReader
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.wire.route import MessageQueue

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


def test_batch_read_of_exact_ranges(spark, rocketmq_stack, rocketmq_topic):
    topic = rocketmq_topic(4)
    produce(rocketmq_stack, topic, [f"v{i}".encode() for i in range(400)])
    whole = batch(spark, rocketmq_stack, topic, maxRecordsPerPartition="100", includeProperties="true")
    assert whole.rdd.getNumPartitions() >= 4
    rows = whole.collect()
    assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(400))
    assert all(r.msgId and r.properties.get("UNIQ_KEY") == r.msgId and r.bornTimestamp for r in rows)
    key = f"{topic}:broker-a:2"
    sent = sorted((r.queueOffset, r.value) for r in rows if r.queueKey == key)
    low, high = sent[3][0], sent[-3][0]
    part = batch(spark, rocketmq_stack, topic, startingOffsets=json.dumps({key: low}),
                 endingOffsets=json.dumps({key: high})).where(F.col("queueKey") == key).orderBy("queueOffset")
    assert [(r.queueOffset, r.value) for r in part.collect()] == [s for s in sent if low <= s[0] < high]


def test_sink_round_trip_batch_and_stream(spark, rocketmq_stack, rocketmq_topic, tmp_path):
    topic = rocketmq_topic(4)
    rows = [(f"w{i}", f"tag{i % 3}", f"key{i}", {"p": str(i)}, f"pk{i % 5}") for i in range(1000)]
    frame = spark.createDataFrame(rows, "value string, tags string, keys string, properties map<string,string>, "
                                        "partitionKey string")
    (frame.write.format("rocketmq").option("namesrv", rocketmq_stack.namesrv_address).option("topic", topic)
     .option("batchMaxMessages", "50").mode("append").save())
    back = batch(spark, rocketmq_stack, topic, includeProperties="true").collect()
    assert sorted(r.value.decode() for r in back) == sorted(r[0] for r in rows)
    one = next(r for r in back if r.value == b"w7")
    assert (one.tags, one.keys, one.properties["p"]) == ("tag1", "key7", "7")
    by_key: dict[str, set[str]] = {}
    for r in back:
        by_key.setdefault(f"pk{int(r.properties['p']) % 5}", set()).add(r.queueKey)
    assert all(len(queues) == 1 for queues in by_key.values())  # a partitionKey keeps to one queue
    # streaming write from a rate-like source: the committed batches all arrive
    source = spark.readStream.format("rate").option("rowsPerSecond", "200").load()
    query = (source.select(F.col("value").cast("string").alias("value")).writeStream.format("rocketmq")
             .option("namesrv", rocketmq_stack.namesrv_address).option("topic", topic)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="500 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while query.lastProgress is None or query.lastProgress["numInputRows"] == 0:
            assert time.monotonic() < deadline and query.exception() is None
            time.sleep(0.2)
    finally:
        query.stop()
    assert batch(spark, rocketmq_stack, topic).count() > 1000


def test_pull_stream_is_exactly_once_through_restarts(spark, rocketmq_stack, rocketmq_topic, tmp_path):
    topic = rocketmq_topic(4)
    group = "g" + uuid.uuid4().hex[:8]
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    produce(rocketmq_stack, topic, [f"a{i}".encode() for i in range(300)])
    frame = stream(spark, rocketmq_stack, topic, group=group, startingOffsets="earliest",
                   maxOffsetsPerTrigger="100").select("value", "queueKey", "queueOffset")
    run_available_now(frame, out, checkpoint)
    produce(rocketmq_stack, topic, [f"b{i}".encode() for i in range(200)])
    # a query stopped mid-stream and restarted from its checkpoint
    query = (frame.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="200 milliseconds").start())
    deadline = time.monotonic() + 60
    while (query.lastProgress is None or query.lastProgress["numInputRows"] == 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    query.stop()
    produce(rocketmq_stack, topic, [f"c{i}".encode() for i in range(100)])
    run_available_now(frame, out, checkpoint)
    values = Counter(r.value for r in spark.read.parquet(str(out)).collect())
    expected = {f"{p}{i}".encode() for p, n in (("a", 300), ("b", 200), ("c", 100)) for i in range(n)}
    assert set(values) == expected and max(values.values()) == 1
    offsets = json.loads(sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))[-1]
                         .read_text().splitlines()[-1])
    assert sum(offsets.values()) == 600
    # commit() stored the committed ends as the group's offsets
    with RocketMQClient([rocketmq_stack.namesrv_address]) as client:
        stored = {key: client.consumer_offset(group, MessageQueue.parse_key(key)) for key in offsets}
    assert stored == offsets


def test_max_offsets_per_trigger_bounds_every_batch(spark, rocketmq_stack, rocketmq_topic, tmp_path):
    topic = rocketmq_topic(2)
    produce(rocketmq_stack, topic, [f"x{i}".encode() for i in range(250)])
    sizes: list[int] = []

    def record(frame, _batch_id):
        sizes.append(frame.count())

    query = (stream(spark, rocketmq_stack, topic, startingOffsets="earliest", maxOffsetsPerTrigger="60")
             .writeStream.foreachBatch(record).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180) and query.exception() is None
    assert sum(sizes) == 250 and max(sizes) <= 60


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


def test_bad_options_fail_before_any_network_call(spark):
    def load(**options: str):
        reader = spark.read.format("rocketmq")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    for options, message in [
        ({"topic": "t"}, "namesrv is required"),
        ({"namesrv": "nohost", "topic": "t"}, "host:port"),
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
