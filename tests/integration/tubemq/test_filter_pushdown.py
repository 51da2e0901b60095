"""WHERE clauses pushed to a TubeMQ batch read (tubespark/spark/pushdown.py), with real Spark on the session
cluster: for each kind of filter the same rows with pushdown on as with it off (Spark's default), fewer messages
fetched from the broker (each task's count, ``readStatsPath``), and Spark's explain() naming what was served."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tubespark.core.retry import RetryPolicy, poll
from tubespark.spark.pushdown import CONF
from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.spark.read_task import read_stats
from tubespark.tubemq.wire.message import OutgoingMessage, format_msg_time

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BASE = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
STREAMS = ("a", "b", "c", "d")
COUNT = 240  # over 2 partitions, 12 minutes, 4 stream ids


@pytest.fixture(scope="module")
def topic_parts(tubemq_cluster, topic_factory) -> tuple[str, list[int]]:
    """Both partitions hold every stream id and minute: each run of 4 messages (one per stream id) goes to one
    partition, alternately. The placement is ours, not the producer's round-robin, whose random start once put
    every ``a`` on the partition a case does not read. The producer sends once the master lists both partitions
    (a fresh topic's second store can show up a moment after the first)."""
    name = topic_factory(partitions=1, stores=2)
    with Producer(tubemq_cluster.master_address, ClientSettings(heartbeat_interval_s=1)) as producer:
        producer.publish([name])
        assert poll(lambda: len(producer.partitions(name)) == 2 or None, RetryPolicy(timeout_s=60, backoff_s=0.5),
                    what=f"the master to list both partitions of {name}")
        refs = sorted(producer.partitions(name), key=lambda ref: ref.partition_id)
        for i in range(COUNT):
            producer.send_async(name, OutgoingMessage(b"m%d" % i, msg_type=STREAMS[i % 4], msg_time=format_msg_time(
                BASE + timedelta(minutes=i * 12 // COUNT))), refs[i // 4 % 2])
        producer.flush()
        return name, [ref.partition_id for ref in refs]


@pytest.fixture
def topic(topic_parts) -> str:
    return topic_parts[0]


@contextlib.contextmanager
def pushdown(spark, on: bool) -> Iterator[None]:
    spark.conf.set(CONF, "true" if on else "false")
    try:
        yield
    finally:
        spark.conf.unset(CONF)


def read(spark, master: str, topic: str, where: str, stats: Path, *, on: bool,
         **options: str) -> tuple[list[tuple], int, str]:
    """The rows (every column), the messages the tasks fetched and the physical plan."""
    with pushdown(spark, on):
        frame = (spark.read.format("tubemq").option("master", master).option("topic", topic)
                 .option("readStatsPath", str(stats)).options(**options).load().where(where))
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            frame.explain("formatted")
        plan = shown.getvalue()
        rows = sorted(tuple(row) for row in frame.collect())
    return rows, read_stats(str(stats))["messages"], plan


CASES = [
    ("msgTime >= '2026-11-20 08:03:00' AND msgTime < '2026-11-20 08:05:00'", 6, None),
    ("partitionId = {p1}", 2, "EqualTo(partitionId,{p1})"),
    ("offset >= 280 AND offset < 840", 3, None),
    ("streamId = 'a' AND msgTime > '2026-11-20 08:09:30' AND partitionId = {p0}", 4, "EqualTo(partitionId,{p0})"),
]


@pytest.mark.parametrize(("where", "factor", "served"), CASES, ids=[c[0] for c in CASES])
def test_same_rows_fewer_messages(spark, tubemq_cluster, topic_parts, tmp_path, where, factor, served):
    topic, (p0, p1) = topic_parts[0], topic_parts[1]
    where, served = where.format(p0=p0, p1=p1), served and served.format(p0=p0, p1=p1)
    master = tubemq_cluster.master_address
    plain, plain_fetched, plain_plan = read(spark, master, topic, where, tmp_path / "off", on=False)
    pushed, pushed_fetched, pushed_plan = read(spark, master, topic, where, tmp_path / "on", on=True)
    assert plain_fetched == COUNT and "PushedFilters" not in plain_plan  # Spark's default: read all, unchanged
    assert plain and pushed == plain
    assert pushed_fetched <= 1.5 * COUNT / factor + 30, (pushed_fetched, len(plain))  # about the selected part
    assert pushed_fetched >= len(plain)
    if served:  # explain() lists what the read serves exactly; the pruning filters stay in Spark's Filter
        listed = [line for line in pushed_plan.splitlines() if line.startswith("PushedFilters: [")]
        assert len(listed) == 1 and served in listed[0], pushed_plan


def test_filters_that_match_nothing_read_nothing(spark, tubemq_cluster, topic_parts, tmp_path):
    topic, (p0, p1) = topic_parts
    rows, fetched, _ = read(spark, tubemq_cluster.master_address, topic, f"partitionId = {p0} AND partitionId = {p1}",
                            tmp_path, on=True)
    assert rows == [] and fetched == 0


def test_filters_left_to_spark_read_everything(spark, tubemq_cluster, topic, tmp_path):
    where = "streamId LIKE 'b%' OR offset = 0"  # neither can be served: Spark filters every message
    plain, _, _ = read(spark, tubemq_cluster.master_address, topic, where, tmp_path / "off", on=False)
    pushed, fetched, _ = read(spark, tubemq_cluster.master_address, topic, where, tmp_path / "on", on=True)
    assert pushed == plain and 0 < len(plain) < COUNT
    assert fetched == COUNT


@pytest.mark.parametrize(("where", "share"), [("streamId = 'b'", 4), ("streamId IN ('a', 'c')", 2)])
def test_stream_ids_to_the_broker(spark, tubemq_cluster, topic, tmp_path, where, share):
    """By default a streamId filter stays with Spark (the offsets stay exact); with streamIdPushdown=true the
    brokers send only those messages, the same rows but for the offset column, now a lower bound."""
    master = tubemq_cluster.master_address
    plain, _, _ = read(spark, master, topic, where, tmp_path / "off", on=False)
    kept, kept_fetched, _ = read(spark, master, topic, where, tmp_path / "kept", on=True)
    assert kept == plain and kept_fetched == COUNT
    pushed, fetched, _ = read(spark, master, topic, where, tmp_path / "on", on=True, streamIdPushdown="true")
    assert fetched == len(plain) == COUNT // share  # the broker sent exactly the selected messages
    offset = 5  # the column's index in the rows
    assert [r[:offset] + r[offset + 1:] for r in pushed] == [r[:offset] + r[offset + 1:] for r in plain]
    assert all(p[offset] <= q[offset] for p, q in zip(pushed, plain, strict=True))
