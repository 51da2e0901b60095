"""Batch reads, the TubeMQ sink and the backfill command, on the real cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from tests.integration.helpers import SharedSession, bodies, produce
from tests.interop.javaclient import JavaClient
from tests.readers import TubeBatchReader
from tubespark.apps import backfill
from tubespark.errors import ChecksumMismatchError, ServerBusyError
from tubespark.tubemq.client.batch_send import BatchSend
from tubespark.tubemq.spark import writer
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire import message as wire_message
from tubespark.tubemq.wire import twin

pytestmark = [pytest.mark.integration, pytest.mark.spark]

HERE = Path(__file__).resolve().parents[1]  # tests/integration: the jobs
ROOT = HERE.parents[1]


def batch(spark, master: str, topic: str, **options: str):
    return spark.read.format("tubemq").option("master", master).option("topic", topic).options(**options).load()


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


def test_batch_write_reads_back_byte_equal_with_stream_ids_times_and_attributes(spark, tubemq_cluster,
                                                                               topic_factory):
    """The columns only TubeMQ has, written and read back (every row landing once, from batch and streaming
    writes, is every broker's: tests/integration/contract/test_sink.py)."""
    topic = topic_factory(partitions=1, stores=4)
    master = tubemq_cluster.master_address
    rows = [(bytes([i % 256]) * (i % 300), f"s{i % 3}", {"row": str(i), "kind": "batch"}, f"k{i % 7}")
            for i in range(500)]
    # msgTime as a timestamp (seconds are dropped: TubeMQ keeps minutes), null on every fifth row
    frame = spark.createDataFrame(rows, "value binary, streamId string, attributes map<string,string>, "
                                        "partitionKey string").withColumn(
        "msgTime", F.when(F.element_at("attributes", "row").cast("int") % 5 == 0, F.lit(None))
                    .otherwise(F.to_timestamp(F.lit("2026-03-04 05:06:59"))))
    frame.write.format("tubemq").option("master", master).option("topic", topic).mode("append").save()
    spark.createDataFrame([(b"s9-row", "s9", "202401020304")], "value binary, streamId string, msgTime string") \
        .write.format("tubemq").option("master", master).option("topic", topic).mode("append").save()

    back = (batch(spark, master, topic, includeAttributes="true")
            .withColumn("minute", F.date_format("msgTime", "yyyyMMddHHmm")).collect())  # session time zone: UTC
    assert len(back) == 501
    assert {(r.streamId == "s9", int(r.attributes.get("row", 1)) % 5 == 0, r.minute) for r in back} == {
        (False, False, "202603040506"), (False, True, None), (True, False, "202401020304")}
    filtered = batch(spark, master, topic, streamIds="s1,s9").collect()  # batch reads filter on the broker too
    assert sorted(r.value for r in filtered) == sorted([r[0] for r in rows if r[1] == "s1"] + [b"s9-row"])
    written = {(r[0], r[1], r[2]["row"]) for r in rows}
    assert {(r.value, r.streamId, r.attributes.get("row")) for r in back if r.streamId != "s9"} == written
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


def test_sink_routes_rows_by_the_topic_column_and_round_robin(spark, tubemq_cluster, topic_factory):
    """Without the ``topic`` option each row goes to its ``topic`` column; rows without a partitionKey go
    round-robin over the topic's partitions (one task here, so exactly evenly)."""
    dense, sparse = topic_factory(partitions=1, stores=4), topic_factory(partitions=4, stores=1)
    master = tubemq_cluster.master_address
    rows = [(f"rr-{i}", dense if i % 2 == 0 else sparse) for i in range(400)]
    spark.createDataFrame(rows, "value string, topic string").coalesce(1) \
        .write.format("tubemq").option("master", master).mode("append").save()
    for topic in (dense, sparse):
        back = batch(spark, master, topic).collect()
        assert sorted(r.value for r in back) == sorted(v.encode() for v, t in rows if t == topic)
        assert {r.topic for r in back} == {topic}
        per_partition = Counter(r.partitionKey for r in back)
        assert len(per_partition) == 4 and set(per_partition.values()) == {50}, per_partition


def _arrow_rows(values: list[str]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": values})


def test_send_retries_and_max_in_flight_reach_the_sinks_producer(spark, tubemq_cluster, topic_factory, monkeypatch):
    """The sink's task function (``send_batches``, run in-process here) builds its producer from
    ``maxInFlight`` and ``sendRetries``; a retriable send failure is re-sent up to ``sendRetries`` times."""
    topic = topic_factory(partitions=1, stores=4)
    master = tubemq_cluster.master_address
    real_send = BatchSend._send
    failures = {"left": 0}

    def flaky_send(self, address, queue):  # the sink's batched path: "busy" for the next N sends (nothing stored)
        while failures["left"] > 0 and queue:
            failures["left"] -= 1
            self._failed(queue.popleft(), None, ServerBusyError(503, "injected: busy", broker="test"))
        if queue:
            real_send(self, address, queue)

    monkeypatch.setattr(BatchSend, "_send", flaky_send)

    def send(values: list[str], **options: str) -> None:
        monkeypatch.setattr(writer, "_producers", {})  # a fresh executor process
        opts = TubeMQOptions.from_raw({"master": master, "topic": topic, **options}, mode="write")
        producer = writer._producer(opts)
        assert (producer.max_in_flight, producer.max_retries) == (int(options["maxInFlight"]),
                                                                   int(options["sendRetries"]))
        try:
            writer.send_batches(iter([_arrow_rows(values)]), opts, None)
        finally:
            producer.close()

    failures["left"] = 3
    send([f"retried-{i}" for i in range(20)], maxInFlight="2", sendRetries="3")  # 3 failures, 3 re-sends
    assert failures["left"] == 0
    failures["left"] = 2
    with pytest.raises(ServerBusyError, match="injected"):
        send(["lost"], maxInFlight="1", sendRetries="1")  # 2 failures, 1 re-send: the task fails
    back = sorted(r.value for r in batch(spark, master, topic).collect())
    assert back == sorted(f"retried-{i}".encode() for i in range(20)), "each row exactly once, 'lost' not sent"


def test_a_later_write_with_other_send_settings_gets_them(tubemq_cluster, monkeypatch):
    monkeypatch.setattr(writer, "_producers", {})
    producers = []
    for in_flight, retries in (("2", "5"), ("9", "1")):
        opts = TubeMQOptions.from_raw({"master": tubemq_cluster.master_address, "topic": "t1",
                                       "maxInFlight": in_flight, "sendRetries": retries}, mode="write")
        producers.append(writer._producer(opts))
    try:
        assert (producers[-1].max_in_flight, producers[-1].max_retries) == (9, 1)
    finally:
        for producer in set(producers):
            producer.close()


def test_verify_checksums_reaches_the_range_read(tubemq_cluster, topic_factory, monkeypatch):
    """A batch task (``read``, in-process here) checks CRCs by default and not with verifyChecksums=false.

    Every message's checksum is made to mismatch by replacing the CRC function the pure-Python decoder uses,
    as a corrupted payload would; the read runs on that twin (the compiled twin's CRC check is held to the
    same answers by tests/unit/tubemq/test_fetch_twins.py)."""
    topic = topic_factory(partitions=1, stores=1)
    master = tubemq_cluster.master_address
    produce(master, topic, bodies([f"crc-{i}".encode() for i in range(10)]))
    monkeypatch.setattr(wire_message, "checksum", lambda payload: -1)

    def read(**options: str) -> list[bytes]:
        opts = TubeMQOptions.from_raw({"master": master, "topic": topic, "startingOffsets": "earliest", **options},
                                      mode="read")
        reader = TubeBatchReader(opts)
        assert reader.plan(), "nothing planned: the test would prove nothing"
        return [v.as_py() for task in reader.plan() for b in reader.read(task) for v in b.column("value")]

    with twin.pure_python():
        with pytest.raises(ChecksumMismatchError):
            read()
        assert sorted(read(verifyChecksums="false")) == sorted(f"crc-{i}".encode() for i in range(10))


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
    assert missing.returncode == 2 and "FAILED" in missing.stdout + missing.stderr


def test_backfill_console_command_flags_and_exit_codes(spark, tubemq_cluster, topic_factory, tmp_path, capsys):
    """``tubespark backfill`` (the console command, local[*]) with its flags; exit codes 1 and 2."""
    topic = topic_factory(partitions=1, stores=4)
    master = tubemq_cluster.master_address
    cli = Path(sys.executable).parent / "tubespark"
    assert cli.exists(), f"the tubespark console script is not installed next to {sys.executable}"
    source = tmp_path / "source"
    spark.createDataFrame([(f"event-{i}", ("orders", "clicks")[i % 2]) for i in range(200)],
                          "body string, streamId string").write.json(str(source))
    published = subprocess.run([str(cli), "backfill", "publish", "--master", master, "--topic", topic,
                                "--input", str(source), "--format", "json", "--value-column", "body",
                                "--dedup-attribute", "bid"], capture_output=True, text=True, timeout=300)
    assert published.returncode == 0, published.stderr[-3000:]
    assert "acknowledged all 200 rows" in published.stderr
    back = batch(spark, master, topic, includeAttributes="true").collect()
    assert sorted(r.value for r in back) == sorted(f"event-{i}".encode() for i in range(200))  # --value-column
    assert len({r.attributes["bid"] for r in back}) == 200  # --dedup-attribute: a stable id on every message
    keys = sorted({r.partitionKey for r in back})

    out = tmp_path / "export"
    out.mkdir()
    (out / "stale.json").write_text('{"value": "c3RhbGU="}\n')  # --mode overwrite must replace it
    exported = subprocess.run([str(cli), "backfill", "export", "--master", master, "--topic", topic,
                               "--output", str(out), "--format", "json", "--mode", "overwrite",
                               "--starting", json.dumps(dict.fromkeys(keys, -2)),
                               "--ending", json.dumps(dict.fromkeys(keys, -1)),
                               "--stream-ids", "orders", "--fail-on-data-loss", "false"],
                              capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "export: complete, 100 messages" in exported.stderr
    values = spark.read.json(str(out)).select(F.unbase64("value").alias("v"), "streamId").collect()
    assert sorted(r.v for r in values) == sorted(f"event-{i}".encode() for i in range(0, 200, 2))
    assert {r.streamId for r in values} == {"orders"}

    # In-process from here (no JVM start per case): main() with the test session.
    def run(*argv: str) -> tuple[int, str]:
        code = backfill.main(list(argv), session_factory=lambda: SharedSession(spark))
        return code, capsys.readouterr().err

    # 1: a failed Spark job (a row larger than the topic's maximum message size fails its task)
    big = tmp_path / "big"
    spark.createDataFrame([("small",), ("x" * (2 * 1024 * 1024),)], "value string").write.parquet(str(big))
    code, err = run("publish", "--master", master, "--topic", topic, "--input", str(big))
    assert code == 1, err
    assert "publish: FAILED, not everything arrived" in err
    # 2 (a usage error) when the output exists and --mode is the default errorifexists; the files are left alone
    code, err = run("export", "--master", master, "--topic", topic, "--output", str(out))
    assert code == 2 and "FAILED" in err and "--mode overwrite" in err, err
    assert spark.read.json(str(out)).count() == 100
    # 2: unknown topic, unreachable master, bad option value
    for argv, why in ((["--topic", "no_such_topic_y", "--master", master], "unknown topic"),
                      (["--topic", topic, "--master", "127.0.0.1:1"], "unreachable master"),
                      (["--topic", topic, "--master", master, "--starting", "{bad json"], "bad option")):
        code, err = run("export", *argv, "--output", str(tmp_path / "never"))
        assert code == 2, f"{why}: {err}"
        assert "export: FAILED" in err, why
    with pytest.raises(SystemExit) as usage:  # argparse: a flag value it does not know
        backfill.main(["export", "--master", master, "--topic", topic, "--output", "x", "--format", "xml"])
    assert usage.value.code == 2
    assert not (tmp_path / "never").exists()
