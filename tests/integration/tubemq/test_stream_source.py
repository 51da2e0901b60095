"""spark.readStream.format("tubemq") against the real local TubeMQ cluster and real Spark (local mode)."""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.integration.helpers import produce
from tubespark.apps.lag import parse_offsets
from tubespark.tubemq.wire.message import OutgoingMessage

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def sample(n: int, *, stream_ids: tuple[str, ...] = ("orders", "clicks"), tag: str = "") -> list[OutgoingMessage]:
    return [OutgoingMessage(f"{tag}{i}:".encode() + os.urandom(i % 50), msg_type=stream_ids[i % len(stream_ids)],
                            msg_time="202611221030", attributes={"seq": str(i), "src": "test"})
            for i in range(n)]


def reader(spark, master: str, topic: str, group: str, **options: str):
    stream = (spark.readStream.format("tubemq").option("master", master).option("topic", topic)
              .option("group", group).option("startingOffsets", "earliest").option("heartbeatIntervalMs", "1000"))
    for key, value in options.items():
        stream = stream.option(key, value)
    return stream.load()


def run_available_now(frame, path: Path, checkpoint: Path, *, timeout: float = 180):
    query = (frame.writeStream.format("parquet").option("path", str(path))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(timeout), "the AvailableNow query did not finish in time"
    assert query.exception() is None, query.exception()
    return query


def test_stream_ids_filter_on_the_broker(spark, tubemq_cluster, topic_factory, tmp_path):
    topic = topic_factory(partitions=4, stores=1)
    messages = sample(300, stream_ids=("orders", "clicks", "views"))
    produce(tubemq_cluster.master_address, topic, messages)
    frame = reader(spark, tubemq_cluster.master_address, topic, "g" + uuid.uuid4().hex[:8],
                   streamIds="orders,views")
    run_available_now(frame, tmp_path / "out", tmp_path / "ck")
    rows = spark.read.parquet(str(tmp_path / "out")).select("value", "streamId").collect()
    wanted = sorted(m.data for m in messages if m.msg_type in ("orders", "views"))
    assert sorted(r.value for r in rows) == wanted
    assert {r.streamId for r in rows} == {"orders", "views"}


def test_one_spark_partition_per_assigned_queue(spark, tubemq_cluster, topic_factory, tmp_path):
    """A micro-batch has one Spark partition (task) per queue the master assigned that has new data."""
    topic = topic_factory(partitions=4, stores=1)
    results = produce(tubemq_cluster.master_address, topic, sample(80))
    queues = {r.partition.key for r in results}
    assert len(queues) == 4
    batches: list[tuple[int, dict[int, set[str]]]] = []

    def record(frame, batch_id: int) -> None:
        by_task = frame.groupBy(F.spark_partition_id().alias("task")).agg(
            F.collect_set("partitionKey").alias("queues")).collect()
        batches.append((frame.rdd.getNumPartitions(), {r.task: set(r.queues) for r in by_task}))

    frame = reader(spark, tubemq_cluster.master_address, topic, "g" + uuid.uuid4().hex[:8])
    query = (frame.writeStream.foreachBatch(record).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180) and query.exception() is None
    (tasks, by_task), = [b for b in batches if b[1]]  # everything was there at the start: one batch
    assert tasks == 4, batches
    assert all(len(q) == 1 for q in by_task.values()), by_task  # each task reads exactly one queue
    assert set().union(*by_task.values()) == queues


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def group_offsets(cluster, group: str, topic: str) -> dict[int, tuple[int, int]]:
    answer = cluster.broker_admin("admin_query_offset", groupName=group, topicName=topic)
    offsets = {}
    for item in answer.get("dataSet", []):
        for sub in item["subInfo"]:
            for part in sub["offsets"]:
                offsets[part["partitionId"]] = (part["curOffset"], part["offsetMax"])
    return offsets


def test_committed_batches_become_the_groups_offsets(spark, tubemq_cluster, topic_factory, tmp_path):
    topic = topic_factory(partitions=1, stores=4)
    produce(tubemq_cluster.master_address, topic, sample(100))
    group = "g" + uuid.uuid4().hex[:8]
    query = run_available_now(reader(spark, tubemq_cluster.master_address, topic, group,
                                     maxOffsetsPerTrigger="40"), tmp_path / "out", tmp_path / "ck")
    end = parse_offsets(query.lastProgress["sources"][0]["endOffset"])

    def stored() -> dict[str, int]:
        offsets = group_offsets(tubemq_cluster, group, topic)
        return {f"{tubemq_cluster.broker_id}:{topic}:{pid}": cur for pid, (cur, _max) in offsets.items()}

    # The broker's admin API lists a group once its offsets were flushed to the broker's offset file (~5 s).
    _wait_for(lambda: stored() == end, 30, f"the broker to show the group's offsets {end}")
    assert all(cur == high for cur, high in group_offsets(tubemq_cluster, group, topic).values())

    # commitToGroup=false: a query stores nothing. A control group that does commit runs right after it,
    # so once the broker lists the control's offsets, its offset flush also covered the first query.
    other, control = "g" + uuid.uuid4().hex[:8], "g" + uuid.uuid4().hex[:8]
    run_available_now(reader(spark, tubemq_cluster.master_address, topic, other, commitToGroup="false"),
                      tmp_path / "out2", tmp_path / "ck2")
    run_available_now(reader(spark, tubemq_cluster.master_address, topic, control),
                      tmp_path / "out3", tmp_path / "ck3")
    highs = {pid: high for pid, (_cur, high) in group_offsets(tubemq_cluster, group, topic).items()}
    assert len(highs) == 4 and all(highs.values())
    _wait_for(lambda: {pid: cur for pid, (cur, _m) in group_offsets(tubemq_cluster, control, topic).items()} == highs,
              30, "the control group's offsets")
    not_stored = group_offsets(tubemq_cluster, other, topic)
    assert all(cur == 0 for cur, _max in not_stored.values()), f"commitToGroup=false stored offsets: {not_stored}"


def test_tubemq_only_options_fail_before_any_network_call(spark):
    """The options only TubeMQ has (the shared ones: tests/integration/contract/test_bad_options.py)."""
    unreachable = "127.0.0.1:1"  # nothing listens here: any network use would fail differently
    cases = {
        (("master", unreachable), ("topic", "t1")): "option group is required",
        (("master", unreachable), ("topic", "t1"), ("group", "grp"), ("tubemq.sessionKey", "x")):
            "cannot be passed through",
        (("master", unreachable), ("topic", "t1"), ("group", "g")): "option group='g'",
    }
    for options, message in cases.items():
        stream = spark.readStream.format("tubemq")
        for key, value in options:
            stream = stream.option(key, value)
        started = time.monotonic()
        with pytest.raises(Exception, match=message.replace("(", r"\(").replace("{", r"\{")):
            stream.load().writeStream.format("noop").start().awaitTermination(30)
        assert time.monotonic() - started < 30


def _memory_query(spark, master: str, topic: str, group: str, name: str):
    frame = reader(spark, master, topic, group).select("value", "partitionKey")
    return (frame.writeStream.format("memory").queryName(name).trigger(processingTime="500 milliseconds").start())


def test_two_queries_in_one_group_split_partitions_and_hand_over(spark, tubemq_cluster, topic_factory):
    topic = topic_factory(partitions=4, stores=1)
    group = "g" + uuid.uuid4().hex[:8]
    master = tubemq_cluster.master_address
    first, second = f"q1_{group}", f"q2_{group}"
    q1 = _memory_query(spark, master, topic, group, first)
    q2 = _memory_query(spark, master, topic, group, second)

    def rows(name: str) -> list:
        return spark.sql(f"select value, partitionKey from {name}").collect()

    try:
        # Probe until the master's split is stable: a fresh burst lands wholly in one query per partition.
        for attempt in range(30):
            burst = [m.data for m in sample(40, tag=f"split{attempt}-")]
            produce(master, topic, [OutgoingMessage(d) for d in burst])
            seen = set(burst)
            _wait_for(lambda s=seen: s <= {r.value for r in rows(first) + rows(second)}, 60, "the burst")
            parts1 = {r.partitionKey for r in rows(first) if r.value in seen}
            parts2 = {r.partitionKey for r in rows(second) if r.value in seen}
            if len(parts1) == 2 and len(parts2) == 2 and not parts1 & parts2:
                break
            time.sleep(1)
        else:
            pytest.fail(f"the group never split 2/2 between the queries: {parts1} / {parts2}")
        values = [r.value for r in rows(first) + rows(second) if r.value in seen]
        assert sorted(values) == sorted(seen), "with a stable split every message is read exactly once"

        q2.stop()  # its partitions are released at once and handed to q1
        after = [m.data for m in sample(80, tag="handover-")]
        produce(master, topic, [OutgoingMessage(d) for d in after])
        try:
            _wait_for(lambda: set(after) <= {r.value for r in rows(first)}, 120, "q1 to take over q2's partitions")
        except AssertionError:  # a rare CI timeout: keep what q1 saw, to tell a slow rebalance from a stuck query
            raise AssertionError(f"q1 did not take over within 120 s; q1 active={q1.isActive} "
                                 f"exception={q1.exception()} lastProgress={q1.lastProgress}; hand-over rows "
                                 f"q1 read per partition: "
                                 f"{Counter(r.partitionKey for r in rows(first) if r.value in set(after))}") from None
        assert {r.partitionKey for r in rows(first) if r.value in set(after)} == parts1 | parts2
    finally:
        for query in (q1, q2):
            if query.isActive:
                query.stop()
