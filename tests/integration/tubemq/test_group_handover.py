"""A stopped tubespark stream hands its consumer group over to the official TubeMQ Java client (issue 37).

A streaming query in group G reads a topic and stops cleanly; a Java consumer then joins G and must start
at the next message: nothing the query committed is read again, nothing after it is skipped. The query is
stopped right after its last batch, before another trigger (a ``processingTime`` trigger between two
triggers; ``Trigger.Once``), where Spark never tells the reader the batch completed: the reader, given the
query's ``checkpointLocation`` too, finds it in the commit log when it stops (docs/spark/commit-timing.md).
Real TubeMQ cluster, real Spark, the Java side is ``tests/interop/javaclient.py``.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from tests.integration.helpers import produce
from tubespark.tubemq.wire.message import OutgoingMessage

if not (Path(__file__).resolve().parents[2] / "interop" / "javaclient.py").exists():
    pytest.skip("tests/interop/javaclient.py (the Java interop driver) is missing", allow_module_level=True)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

READ_BY_SPARK = 60
LEFT_FOR_JAVA = 20
JAVA_TIMEOUT_MS = 150_000  # a Java consumer waits for the master's rebalance and its own heartbeat
QUERY_TIMEOUT_S = 180.0
INTERVAL_S = 30  # the processing-time trigger's: the stop comes well within one
ONCE_RUNS = 5  # a Trigger.Once run plans nothing for a partition not registered on its broker yet: run again


def messages(tag: str, count: int) -> list[OutgoingMessage]:
    return [OutgoingMessage(f"{tag}-{i}".encode()) for i in range(count)]


def stream(spark, master: str, topic: str, group: str, checkpoint: Path):
    return (spark.readStream.format("tubemq").option("master", master).option("topic", topic)
            .option("group", group).option("startingOffsets", "earliest").option("heartbeatIntervalMs", "1000")
            .option("checkpointLocation", str(checkpoint))  # the query's own: the reader reads its commit log
            .load().selectExpr("CAST(value AS STRING) AS value"))


def read_then_stop_between_triggers(spark, master: str, topic: str, group: str, out: Path, checkpoint: Path) -> None:
    """A processing-time query stopped once its batches have read everything, before its next trigger.

    Spark starts a processing-time trigger at each multiple of the interval on the wall clock
    (``ProcessingTimeExecutor.nextBatchTime``), so the query starts just after one: its next trigger is a
    whole interval away, and the test checks that it stopped the query before then."""
    time.sleep(INTERVAL_S - time.time() % INTERVAL_S + 0.5)
    query = (stream(spark, master, topic, group, checkpoint).writeStream.format("parquet")
             .option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime=f"{INTERVAL_S} seconds").start())
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    try:
        # a progress event comes after Spark wrote the batch to its commit log
        while sum(p["numInputRows"] for p in query.recentProgress) < READ_BY_SPARK:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, f"the query read {query.recentProgress} in {QUERY_TIMEOUT_S} s"
            time.sleep(0.2)
        while query.status["isTriggerActive"]:
            time.sleep(0.02)
        last = [p for p in query.recentProgress if p["numInputRows"]][-1]
        started = datetime.fromisoformat(last["timestamp"].replace("Z", "+00:00")).timestamp()
        next_trigger = (started // INTERVAL_S + 1) * INTERVAL_S
        stopping = time.time()
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    assert stopping < next_trigger, (f"stopped {stopping - next_trigger:.1f} s after the next trigger began: this "
                                     f"run did not stop the query between two triggers")


def read_with_trigger_once(spark, master: str, topic: str, group: str, out: Path, checkpoint: Path) -> None:
    """Trigger.Once runs on one checkpoint until they have read everything: the last one reads the rest."""
    for _ in range(ONCE_RUNS):
        query = (stream(spark, master, topic, group, checkpoint).writeStream.format("parquet")
                 .option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(once=True).start())
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the Trigger.Once query did not end in time"
        assert query.exception() is None, query.exception()
        if out.exists() and spark.read.parquet(str(out)).count() >= READ_BY_SPARK:
            return
    pytest.fail(f"{ONCE_RUNS} Trigger.Once runs did not read the {READ_BY_SPARK} messages")


@pytest.mark.parametrize("run", [read_then_stop_between_triggers, read_with_trigger_once],
                         ids=["processing-time-stop", "trigger-once"])
def test_a_java_consumer_of_the_group_starts_where_the_stopped_query_committed(spark, tubemq_cluster, topic_factory,
                                                                              java, tmp_path, run):
    master = tubemq_cluster.master_address
    topic = topic_factory(partitions=1, stores=1)
    group = "handover_" + uuid.uuid4().hex[:8]
    old = messages("spark", READ_BY_SPARK)
    produce(master, topic, old)

    run(spark, master, topic, group, tmp_path / "out", tmp_path / "ck")
    got_by_spark = [r.value.encode() for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(got_by_spark) == sorted(m.data for m in old), "the query read each message once"

    new = messages("java", LEFT_FOR_JAVA)
    produce(master, topic, new)
    got_by_java = java.consume(master, group, topic, LEFT_FOR_JAVA, from_first=True, timeout_ms=JAVA_TIMEOUT_MS)
    bodies = [g["data"] for g in got_by_java]
    again = sorted(set(bodies) & set(got_by_spark))
    assert not again, f"the Java consumer read {len(again)} messages the query had committed again, e.g. {again[:3]}"
    assert sorted(bodies) == sorted(m.data for m in new), "the Java consumer starts at the next message, none skipped"
