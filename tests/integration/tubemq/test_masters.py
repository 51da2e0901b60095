"""A master group: kill the active master mid-stream, and nothing is lost.

TubeMQ 2.4.0 masters with ZooKeeper meta-data storage (``[meta_zookeeper]``; the BDB store is not on
the classpath) run as a group: they share the meta data in ZooKeeper and elect the active one through
an ephemeral node; standbys answer clients with ``StandbyException``. ``LocalCluster(masters=2)``
runs two on one host and ``master_address`` lists both. A kill -9 of the active master hands the role
to the standby once the dead master's ZooKeeper session expires (here 6 s), and our producer, the
sink's producer and the streaming query's group session move over on their own.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tubespark_testbed import ClusterSettings, LocalCluster

from tests.integration.tubemq.test_soak import SteadyProducer, topic_seqs

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SOURCE, SINK = "msrc", "mout"


@contextlib.contextmanager
def _master_group(_tmp: Path) -> Iterator[LocalCluster]:
    settings = ClusterSettings(zk_session_timeout_ms=6000, zk_master_check_period_ms=1000)
    with LocalCluster(settings=settings, masters=2, topics=[(SOURCE, 1, 4), (SINK, 1, 4)]) as cluster:
        yield cluster


PRESTART = {"master_group": _master_group}  # started ahead of this module (tubespark_testbed/prestart.py)
PRESTART_LIGHT = True  # a cluster: mostly waiting while it starts, so it may start beside another


@pytest.fixture(scope="module")
def master_group(prestarted) -> LocalCluster:
    return prestarted("master_group")


def _seqs(spark, master: str, topic: str) -> list[int]:
    return topic_seqs(master, topic)


def test_group_runs_one_active_master(master_group):
    assert master_group.master_names == ["master", "master-2"]
    assert len(master_group.master_addresses) == 2
    assert master_group.active_master() == "master"


def test_active_master_killed_mid_stream_loses_nothing(spark, master_group, tmp_path):
    cluster = master_group
    master = cluster.master_address
    producer = SteadyProducer(master, SOURCE, total=9000, rate=200.0).start()
    query = (spark.readStream.format("tubemq").option("master", master).option("topic", SOURCE)
             .option("group", "mg" + uuid.uuid4().hex[:8]).option("startingOffsets", "earliest")
             .option("heartbeatIntervalMs", "1000").load().select("value")
             .writeStream.format("tubemq").option("master", master).option("topic", SINK)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="500 milliseconds")
             .start())
    try:
        # the master dies mid-stream: once the query has run a batch with data (its first assignment can take
        # 20 s on a busy machine), with some 25 s of the producer's 45 s still to come
        started = time.monotonic()
        while not query.lastProgress or query.lastProgress["batchId"] < 1:
            assert query.exception() is None, query.exception()
            assert time.monotonic() - started < 90, "the query ran no batch in 90 s"
            time.sleep(0.2)
        before = query.lastProgress["batchId"]
        killed_at = time.monotonic()
        cluster.kill(cluster.active_master() or "master")
        while cluster.active_master() != "master-2":
            assert time.monotonic() - killed_at < 60, "the standby never took over"
            time.sleep(0.2)
        failover_s = time.monotonic() - killed_at
        producer.join(120)
        acked = set(producer.acked)
        deadline = time.monotonic() + 120
        while True:
            assert query.exception() is None, query.exception()
            out = _seqs(spark, master, SINK)
            if acked.issubset(out) or time.monotonic() > deadline:
                break
            time.sleep(3)
        after = query.lastProgress["batchId"]
    finally:
        producer.close()
        query.stop()
    source = _seqs(spark, master, SOURCE)
    print(f"\n[masters] failover to master-2 after {failover_s:.1f}s; produced={producer.produced} "
          f"acknowledged={len(acked)} send_failures={len(producer.failed)} {dict(producer.errors)}; "
          f"source holds {len(set(source))}; sink holds {len(set(out))} distinct, "
          f"{len(out) - len(set(out))} duplicates (the sink is at-least-once); "
          f"batches {before} -> {after}")
    assert not producer.failed, "the producer must move to the new master without failing sends"
    assert acked.issubset(source), "the broker must hold every acknowledged message"
    assert after > before + 3, "the query kept running micro-batches after the failover"
    assert acked.issubset(out), f"{len(acked - set(out))} messages never reached the sink"
