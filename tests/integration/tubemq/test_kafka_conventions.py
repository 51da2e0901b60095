"""What users of Spark's Kafka source expect, with real Spark against the real local cluster: reads bounded
by time, and ``topicPattern`` picking up a topic deployed while a stream runs. (Admission, the batch sizes
users see, is every broker's: tests/integration/contract/test_admission.py.)"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.helpers import produce
from tubespark.tubemq.wire.message import OutgoingMessage, format_msg_time

pytestmark = [pytest.mark.integration, pytest.mark.spark]

# topicPattern's topics: two that match and one that does not, deployed with the session cluster (the
# conftest's SESSION_TOPICS), so only the topic the test deploys while its stream runs costs a deploy wait.
PATTERN_RUN = uuid.uuid4().hex[:6]
PATTERN_TOPICS = [f"pat{PATTERN_RUN}_a", f"pat{PATTERN_RUN}_b", f"nopat{PATTERN_RUN}_c"]
SESSION_TOPICS = [(name, 1, 2) for name in PATTERN_TOPICS]


def stream(spark, master: str, topic: str, **options: str):
    reader = (spark.readStream.format("tubemq").option("master", master)
              .option("group", "g" + uuid.uuid4().hex[:8]).option("startingOffsets", "earliest")
              .option("heartbeatIntervalMs", "1000"))
    if topic:
        reader = reader.option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_between_two_times(spark, tubemq_cluster, topic_factory):
    topic, master = topic_factory(partitions=1, stores=4), tubemq_cluster.master_address
    base = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
    minutes = [i // 10 for i in range(60)]  # 10 messages in each of 6 minutes
    produce(master, topic, [OutgoingMessage(b"m%d-%d" % (m, i), msg_time=format_msg_time(base + timedelta(minutes=m)))
                            for i, m in enumerate(minutes)])

    def epoch_ms(minute: float) -> str:
        return str(int((base + timedelta(minutes=minute)).timestamp() * 1000))

    frame = (spark.read.format("tubemq").option("master", master).option("topic", topic)
             .option("startingTimestamp", epoch_ms(1.5)).option("endingTimestamp", epoch_ms(4)).load())
    got = sorted(r.value.decode() for r in frame.select("value").collect())
    assert got == sorted(f"m{m}-{i}" for i, m in enumerate(minutes) if 1 <= m < 4)  # minutes 1, 2, 3
    late = (spark.read.format("tubemq").option("master", master).option("topic", topic)
            .option("startingTimestamp", epoch_ms(30)))
    with pytest.raises(Exception, match="has no message at or after the start time"):
        late.load().count()
    assert late.option("startingOffsetsByTimestampStrategy", "latest").load().count() == 0


def test_topic_pattern_reads_matching_topics_and_picks_up_a_new_one(spark, tubemq_cluster):
    master, run = tubemq_cluster.master_address, PATTERN_RUN
    first, second, other = PATTERN_TOPICS
    if not tubemq_cluster.topics_ready(PATTERN_TOPICS):  # a session cluster started without them
        tubemq_cluster.create_topics(PATTERN_TOPICS, partitions=1, stores=2)
    for topic in (first, second, other):
        produce(master, topic, [OutgoingMessage(f"{topic}-{i}".encode()) for i in range(5)])
    pattern = {"topicPattern": f"pat{run}_.*", "masterWebUrl": tubemq_cluster.master_web_url}

    frame = spark.read.format("tubemq").option("master", master).options(**pattern).load()
    assert sorted(r.topic for r in frame.select("topic").distinct().collect()) == [first, second]
    assert frame.count() == 10

    name = "pattern_" + run
    query = (stream(spark, master, "", **pattern, topicRefreshIntervalMs="2000")  # topic="": not set
             .select("topic", "value").writeStream.format("memory").queryName(name)
             .trigger(processingTime="500 milliseconds").start())
    try:
        def topics_read() -> dict[str, int]:
            return {r.topic: r.n for r in spark.sql(f"select topic, count(*) n from {name} group by topic").collect()}

        deadline = time.monotonic() + 60
        while topics_read() != {first: 5, second: 5} and time.monotonic() < deadline:
            time.sleep(0.5)
        assert topics_read() == {first: 5, second: 5}
        late = f"pat{run}_late"
        tubemq_cluster.create_topic(late, partitions=1, stores=2)  # deployed while the query runs
        produce(master, late, [OutgoingMessage(f"{late}-{i}".encode()) for i in range(7)])
        deadline = time.monotonic() + 90
        while topics_read().get(late, 0) < 7 and query.isActive and time.monotonic() < deadline:
            time.sleep(0.5)
        assert topics_read() == {first: 5, second: 5, late: 7}, (topics_read(), query.exception())
    finally:
        query.stop()
