"""A streaming query whose broker is killed mid-stream recovers, and its sink holds every message once.

Dedicated cluster (the kill must not disturb the session cluster's other tests), whose broker writes
straight to its files (``enableMemStore=false``): otherwise ``kill -9`` drops what the broker had
acknowledged but kept in its memory cache (up to ``memCacheFlushIntvl``, 20 s by default), which is the
broker's loss, not the reader's (docs/guarantees.md, TubeMQ faults).
The query runs small micro-batches; once the sink holds some rows the broker is killed, kept down for
a while and restarted on the same ports and data. Executors retry the range read (resuming at the last
batch boundary they yielded); if the query fails anyway (e.g. the driver's planning gave up), it is
restarted from its checkpoint, as a user would. Either way the parquet sink must hold each message
exactly once.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tubespark_testbed import ClusterSettings, LocalCluster

from tests.integration.helpers import bodies, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOPIC = "killed_broker"
COUNT = 400


@contextlib.contextmanager
def _fault_cluster(_tmp: Path) -> Iterator[LocalCluster]:
    with LocalCluster(settings=ClusterSettings(enable_mem_store=False), topics=[(TOPIC, 1, 2)]) as cluster:
        yield cluster


PRESTART = {"fault_cluster": _fault_cluster}  # started ahead of this module (tubespark_testbed/prestart.py)
PRESTART_LIGHT = True  # a cluster: mostly waiting while it starts, so it may start beside another


@pytest.fixture(scope="module")
def fault_cluster(prestarted) -> LocalCluster:
    return prestarted("fault_cluster")


def start_query(spark, master: str, group: str, sink: str, checkpoint: str):
    frame = (spark.readStream.format("tubemq").option("master", master).option("topic", TOPIC)
             .option("group", group).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "15")
             .option("requestTimeoutMs", "5000").option("assignmentTimeoutMs", "90000").load())
    return (frame.selectExpr("CAST(value AS STRING) AS value", "partitionKey", "offset")
            .writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds").start())


def sink_values(spark, sink: str) -> list[str]:
    try:
        return [r.value for r in spark.read.parquet(sink).select("value").collect()]
    except Exception:  # noqa: BLE001 - no file committed yet
        return []


def test_broker_killed_mid_stream_recovers_exactly_once(spark, fault_cluster, tmp_path):
    master = fault_cluster.master_address
    expected = [f"msg-{i:04d}" for i in range(COUNT)]
    produce(master, TOPIC, bodies([v.encode() for v in expected]))
    group = "faults_" + uuid.uuid4().hex[:8]
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")

    query = start_query(spark, master, group, sink, checkpoint)
    deadline = time.monotonic() + 120
    while len(sink_values(spark, sink)) < 30:
        assert time.monotonic() < deadline, "the query made no progress before the fault"
        assert query.exception() is None, query.exception()
        time.sleep(0.2)

    fault_cluster.kill("broker")
    killed_at = time.monotonic()
    time.sleep(4)  # tasks and the driver see the broker gone
    fault_cluster.restart("broker", kill=False)  # already dead: just start it on the same ports and data
    print(f"broker was down {time.monotonic() - killed_at:.1f}s")

    restarts = 0
    deadline = time.monotonic() + 300
    while len(sink_values(spark, sink)) < COUNT and time.monotonic() < deadline:
        if not query.isActive:
            error = query.exception()
            print(f"query failed after the broker restart (restart {restarts + 1} from the checkpoint): {error}")
            assert restarts < 3, f"the query keeps failing after the broker came back: {error}"
            restarts += 1
            query = start_query(spark, master, group, sink, checkpoint)
        time.sleep(0.5)
    query.stop()

    values = sink_values(spark, sink)
    duplicates = sorted({v for v in values if values.count(v) > 1})
    assert not duplicates, f"{len(duplicates)} messages written twice, e.g. {duplicates[:5]}"
    missing = sorted(set(expected) - set(values))
    assert not missing, f"{len(missing)} messages missing, e.g. {missing[:5]}"
    assert len(values) == COUNT
