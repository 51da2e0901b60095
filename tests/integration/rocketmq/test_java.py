"""Cross-check with RocketMQ's own Java client (rocketmq-client 5.3.3 from Maven Central): what it produces,
``format("rocketmq")`` reads; what ``format("rocketmq")`` writes, it consumes."""

from __future__ import annotations

import time

import pytest

from tests.interop.rocketmqjava import RocketMQJava

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def java():
    client = RocketMQJava()
    client.build()
    return client


def test_spark_reads_what_the_java_producer_sent(spark, java, rocketmq_stack, rocketmq_topic):
    topic = rocketmq_topic(4)
    assert java.produce(rocketmq_stack.namesrv_address, topic, 300, batch=10)["sent"] == 300
    java.produce(rocketmq_stack.namesrv_address, topic, 5, size=5000)  # single sends the client compresses (> 4 KiB)
    deadline = time.monotonic() + 30
    while True:
        rows = (spark.read.format("rocketmq").option("namesrv", rocketmq_stack.namesrv_address)
                .option("topic", topic).option("verifyChecksums", "true").load().collect())
        if len(rows) >= 305 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    small = sorted((r for r in rows if len(r.value) < 100), key=lambda r: int(r.value[1:]))
    assert [r.value for r in small] == [f"j{i}".encode() for i in range(300)]
    assert all(r.keys == f"k{i}" and r.tags == "java" and r.msgId for i, r in enumerate(small))
    big = [r for r in rows if len(r.value) == 5000]
    assert len(big) == 5 and all(r.value.startswith(b"j") for r in big)


def test_java_consumer_reads_what_spark_wrote(spark, java, rocketmq_stack, rocketmq_topic):
    topic = rocketmq_topic(4)
    frame = spark.createDataFrame([(f"s{i}", f"key{i}", "spark") for i in range(500)], "value string, keys string, "
                                                                                          "tags string")
    (frame.write.format("rocketmq").option("namesrv", rocketmq_stack.namesrv_address).option("topic", topic)
     .option("batchMaxMessages", "64").mode("append").save())
    bodies, summary = java.consume(rocketmq_stack.namesrv_address, topic, 500)
    stored = (spark.read.format("rocketmq").option("namesrv", rocketmq_stack.namesrv_address).option("topic", topic)
              .load().count())
    per_queue = {q: sum(1 for b in bodies if b["queue"] == q) for q in sorted({b["queue"] for b in bodies})}
    assert summary["received"] == 500, (summary, per_queue, f"the broker holds {stored}")
    assert sorted(b["body"] for b in bodies) == sorted(f"s{i}" for i in range(500))
    assert all(b["keys"] == "key" + b["body"][1:] and b["tags"] == "spark" for b in bodies)
