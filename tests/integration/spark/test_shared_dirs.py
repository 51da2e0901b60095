"""popReceiptsPath and skippedBundlesPath on a real HDFS (Hadoop's MiniDFSCluster over WebHDFS, started by the
testbed in the background), not a local directory: what a Spark cluster without a shared mount uses.

* the shared directory itself: atomic publication (a replaced file reads whole, temporaries stay hidden),
  listing, reading, removal, and a typed error naming the option for a location it cannot write;
* a RocketMQ pop stream whose receipts travel through HDFS: every row arrives and every batch is acked
  (the receipts are gone from HDFS, the group has no backlog);
* a TubeMQ batch read with ``ignoreParseErrors=true`` counting its one skipped message in HDFS.
"""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tubespark_testbed.hdfs import MiniHdfs

from tests.integration.helpers import assert_pop_group_drained, run_pop_stream
from tests.integration.helpers import produce as produce_tubemq
from tests.integration.rocketmq.test_spark import produce as produce_rocketmq
from tests.integration.rocketmq.test_spark import stream as rocketmq_stream
from tubespark.core.shared_dir import SharedDir, SharedDirError
from tubespark.formats import encode_inlongmsg
from tubespark.tubemq.spark.read_task import skipped_bundles
from tubespark.tubemq.wire.message import OutgoingMessage

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@contextlib.contextmanager
def _hdfs(tmp: Path) -> Iterator[MiniHdfs]:
    with MiniHdfs(tmp / "hdfs") as hdfs:
        yield hdfs


PRESTART = {"hdfs": _hdfs}
PRESTART_LIGHT = True  # one JVM that starts in ~5 s, then waits


@pytest.fixture(scope="module")
def hdfs(prestarted) -> MiniHdfs:
    return prestarted("hdfs")


def test_shared_dir_on_hdfs_publishes_atomically_lists_reads_and_removes(hdfs):
    root = SharedDir(f"{hdfs.url}/it-{uuid.uuid4().hex[:8]}", "popReceiptsPath")
    root.check()
    batch = root.child("batch-000000001")
    batch.publish("part-00000.json", b'{"v": 1}')
    batch.publish("part-00000.json", b'{"v": 2}')  # a retried task replaces its file
    batch.publish("part-00001.json", b"[]")
    assert batch.names("part-*.json") == ["part-00000.json", "part-00001.json"]  # no temporaries listed
    assert batch.read("part-00000.json") == b'{"v": 2}'
    assert root.names() == ["batch-000000001"]
    root.remove()
    assert root.names() == [] and batch.names() == []

    root.child("a-file").publish("x", b"1")
    under_a_file = SharedDir(f"{root!r}/a-file/x/below", "skippedBundlesPath")  # HDFS: a parent is a file
    with pytest.raises(SharedDirError, match=r"option skippedBundlesPath=.*cannot write"):
        under_a_file.check()
    root.remove()


def test_pop_receipts_travel_through_hdfs(spark, rocketmq_stack, rocketmq_topic, hdfs, tmp_path):
    topic = rocketmq_topic(2)
    group = "pophdfs" + uuid.uuid4().hex[:8]
    receipts = f"{hdfs.url}/receipts-{group}"
    produce_rocketmq(rocketmq_stack, topic, [f"h{i}".encode() for i in range(200)])
    frame = rocketmq_stream(spark, rocketmq_stack, topic, consumeMode="pop", group=group, startingOffsets="earliest",
                            popPartitions="2", popMaxMessages="100", popPollMs="300",
                            popReceiptsPath=receipts).select("value")
    seen = run_pop_stream(spark, frame, "pop_" + group, tmp_path / "ck", 200, timeout_s=90)
    assert {r.value for r in seen} == {f"h{i}".encode() for i in range(200)}
    assert_pop_group_drained(rocketmq_stack.namesrv_address, group, topic)
    (run,) = SharedDir(receipts, "popReceiptsPath").names()  # this query's run directory, on HDFS
    batches = SharedDir(receipts, "popReceiptsPath").child(run)
    left = [name for batch in batches.names("batch-*") for name in batches.child(batch).names("part-*.json")]
    assert not left, f"receipts of committed batches were not acked: {left}"
    SharedDir(receipts, "popReceiptsPath").remove()


def test_skipped_bundles_are_counted_on_hdfs(spark, tubemq_cluster, topic_factory, hdfs):
    master = tubemq_cluster.master_address
    topic = topic_factory(partitions=1, stores=1)
    good = encode_inlongmsg([(f"a{i}".encode(), {"streamId": "s"}) for i in range(3)])
    results = produce_tubemq(master, topic, [OutgoingMessage(good, attributes={"msgEnType": "2"}),
                                             OutgoingMessage(b"not a bundle", attributes={"msgEnType": "2"})])
    skips = f"{hdfs.url}/skips-{uuid.uuid4().hex[:8]}"
    rows = (spark.read.format("tubemq").option("master", master).option("topic", topic)
            .option("payloadFormat", "inlongmsg").option("ignoreParseErrors", "true")
            .option("skippedBundlesPath", skips).load().collect())
    assert sorted(bytes(r.value) for r in rows) == [b"a0", b"a1", b"a2"]
    summary = skipped_bundles(skips)
    assert summary.total == 1 and summary.ranges[0]["offsets"] == [results[1].append_offset]
    SharedDir(skips, "skippedBundlesPath").remove()


def test_an_unreachable_location_fails_the_query_at_its_start_naming_the_option(spark, tubemq_cluster, topic_factory):
    with socket.socket() as probe:  # a port nobody listens on once closed: connection refused
        probe.bind(("127.0.0.1", 0))
        url = f"webhdfs://127.0.0.1:{probe.getsockname()[1]}"
    reader = (spark.read.format("tubemq").option("master", tubemq_cluster.master_address)
              .option("topic", topic_factory(partitions=1, stores=1)).option("payloadFormat", "inlongmsg")
              .option("ignoreParseErrors", "true").option("skippedBundlesPath", f"{url}/skips"))
    with pytest.raises(Exception, match=r"SharedDirError.*option skippedBundlesPath="):
        reader.load().collect()
