"""Batch reads, the TubeMQ sink (batch and streaming) and the backfill command, on the real cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.integration.helpers import bodies, produce
from tests.interop.javaclient import JavaClient

pytestmark = [pytest.mark.integration, pytest.mark.spark]

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def batch(spark, master: str, topic: str, **options: str):
    return spark.read.format("tubemq").option("master", master).option("topic", topic).options(**options).load()


def test_batch_read_of_exact_ranges(spark, tubemq_cluster, topic_factory):
    topic = topic_factory(partitions=4, stores=1)  # one store shared by 4 partitions: sparse offsets
    results = produce(tubemq_cluster.master_address, topic, bodies([f"m{i}".encode() for i in range(200)]))
    by_part: dict[str, list] = {}
    for i, result in enumerate(results):
        by_part.setdefault(result.partition.key, []).append((result.append_offset, f"m{i}".encode()))
    key, sent = sorted(by_part.items())[1]
    low, high = sent[5][0], sent[-5][0]
    frame = batch(spark, tubemq_cluster.master_address, topic, startingOffsets=json.dumps({key: low}),
                  endingOffsets=json.dumps({key: high}), maxRecordsPerPartition="7")
    rows = frame.where(F.col("partitionKey") == key).orderBy("offset").collect()
    assert [r.value for r in rows] == [body for offset, body in sent if low <= offset < high]
    whole = batch(spark, tubemq_cluster.master_address, topic, maxRecordsPerPartition="16")
    assert whole.rdd.getNumPartitions() > 4
    assert sorted(r.value for r in whole.collect()) == sorted(f"m{i}".encode() for i in range(200))


def test_batch_read_matches_the_java_client(spark, tubemq_cluster, topic_factory):
    topic = topic_factory(partitions=1, stores=4)
    results = produce(tubemq_cluster.master_address, topic, bodies([f"j{i}".encode() for i in range(120)]))
    key = results[0].partition.key
    offsets = sorted(r.append_offset for r in results if r.partition.key == key)
    low, high = offsets[3], offsets[-3]
    java = JavaClient().read_range(tubemq_cluster.master_address, "jg" + uuid.uuid4().hex[:8], topic,
                                              key, low, high)
    ours = batch(spark, tubemq_cluster.master_address, topic, startingOffsets=json.dumps({key: low}),
                 endingOffsets=json.dumps({key: high})).where(F.col("partitionKey") == key).orderBy("offset")
    assert [(r.offset, r.value) for r in ours.collect()] == [(m["offset"], m["data"]) for m in java]


def test_batch_and_streaming_writes_read_back_byte_equal(spark, tubemq_cluster, topic_factory, tmp_path):
    topic = topic_factory(partitions=1, stores=4)
    master = tubemq_cluster.master_address
    rows = [(bytes([i % 256]) * (i % 300), f"s{i % 3}", {"row": str(i), "kind": "batch"}, f"k{i % 7}")
            for i in range(500)]
    frame = spark.createDataFrame(rows, "value binary, streamId string, attributes map<string,string>, "
                                        "partitionKey string").withColumn("msgTime", F.current_timestamp())
    frame.write.format("tubemq").option("master", master).option("topic", topic).mode("append").save()

    source = tmp_path / "in"
    spark.createDataFrame([(f"stream-{i}", "s9") for i in range(300)], "value string, streamId string") \
        .write.parquet(str(source))
    query = (spark.readStream.schema("value string, streamId string").parquet(str(source))
             .writeStream.format("tubemq").option("master", master).option("topic", topic)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert query.awaitTermination(180) and query.exception() is None

    back = batch(spark, master, topic, includeAttributes="true").collect()
    assert len(back) == 800
    written = {(r[0], r[1], r[2]["row"]) for r in rows}
    assert {(r.value, r.streamId, r.attributes.get("row")) for r in back if r.streamId != "s9"} == written
    assert sorted(r.value for r in back if r.streamId == "s9") == sorted(f"stream-{i}".encode() for i in range(300))
    keyed = {}
    for r in back:
        if r.attributes.get("kind") == "batch":
            keyed.setdefault(rows[int(r.attributes["row"])][3], set()).add(r.partitionKey)
    assert all(len(parts) == 1 for parts in keyed.values()), "one partitionKey must map to one partition"


def test_sink_rejects_bad_columns_before_sending(spark, tubemq_cluster):
    frame = spark.createDataFrame([(1, "x")], "id int, value string")
    with pytest.raises(Exception, match="column 'id' is not sent to TubeMQ"):
        frame.write.format("tubemq").option("master", tubemq_cluster.master_address).option("topic", "tx") \
            .mode("append").save()
    with pytest.raises(Exception, match="needs a topic"):
        frame.select("value").write.format("tubemq").option("master", tubemq_cluster.master_address) \
            .mode("append").save()


def test_failed_write_task_loses_nothing_and_dedupe_drops_the_replays(spark, tubemq_cluster, topic_factory):
    topic = topic_factory(partitions=1, stores=4)
    count = 1000
    job = subprocess.run([sys.executable, str(HERE / "write_job.py"), tubemq_cluster.master_address, topic,
                          str(count), "tsid"], capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
    everything = batch(spark, tubemq_cluster.master_address, topic).collect()
    assert len(everything) > count, "the injected failure should have made the retried task send rows again"
    assert {r.value for r in everything} == {f"row-{i}".encode() for i in range(count)}, "no row may be lost"
    deduped = batch(spark, tubemq_cluster.master_address, topic, dedupe="true", dedupAttribute="tsid").collect()
    assert sorted(r.value for r in deduped) == sorted(f"row-{i}".encode() for i in range(count))


def test_backfill_command_round_trip_with_spark_submit(spark, tubemq_cluster, topic_factory, tmp_path):
    topic = topic_factory(partitions=1, stores=4)
    master = tubemq_cluster.master_address
    source = tmp_path / "source"
    spark.createDataFrame([(f"event-{i}", "orders") for i in range(400)], "value string, streamId string") \
        .write.parquet(str(source))
    submit = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
              str(ROOT / "scripts" / "backfill.py")]
    published = subprocess.run([*submit, "publish", "--master", master, "--topic", topic, "--input", str(source)],
                               capture_output=True, text=True, timeout=300)
    assert published.returncode == 0, published.stderr[-3000:]
    assert "acknowledged all 400 rows" in published.stdout + published.stderr
    out = tmp_path / "export"
    exported = subprocess.run([*submit, "export", "--master", master, "--topic", topic, "--output", str(out),
                               "--max-records-per-partition", "50"],
                              capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "export: complete, 400 messages" in exported.stdout + exported.stderr
    assert "rows/s" in exported.stdout + exported.stderr
    values = sorted(r.value for r in spark.read.parquet(str(out)).collect())
    assert values == sorted(f"event-{i}".encode() for i in range(400))
    missing = subprocess.run([*submit, "export", "--master", master, "--topic", "no_such_topic_x",
                              "--output", str(tmp_path / "none")],
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode != 0 and "FAILED" in missing.stdout + missing.stderr
