"""A user's whole round trip through format("tubemq"), using only tubespark's public API, in its own process.

    python roundtrip_job.py MASTER TOPIC_IN TOPIC_OUT WORK_DIR [--connect] [--ship] [--register]
                            [--expect-not-found] [--rows N]

Batch write of N rows to TOPIC_IN, batch read back, then one streaming query (Trigger.AvailableNow with
maxOffsetsPerTrigger, so admission control has to split it) that copies TOPIC_IN to TOPIC_OUT with the
streaming sink, and a batch read of TOPIC_OUT. ``--connect`` runs it from a Spark Connect session on a
local Connect server (``SparkSession.builder.remote("local[2]")``), ``--ship`` first sends tubespark to
the server with ``spark.addArtifacts(tubespark.package_zip(), pyfile=True)``. Without ``--register`` the job
calls nothing: PySpark's data source discovery must find the formats (the ``pyspark_*`` modules of the Python
Spark's workers run); ``--register`` calls ``tubespark.register(spark)`` as older code does. ``--expect-not-found``
first checks that format("tubemq") is not found (that Python lacks tubespark) and that ``tubespark.typed_errors``
says so as :class:`~tubespark.errors.DataSourceNotFoundError`.
Prints one JSON line with what it saw; any mismatch exits non-zero. Used by test_connect.py and, from an
installed wheel in a fresh venv, by test_wheel.py, so it imports nothing from the checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("master")
    parser.add_argument("topic_in")
    parser.add_argument("topic_out")
    parser.add_argument("work_dir")
    parser.add_argument("--connect", action="store_true")
    parser.add_argument("--ship", action="store_true")
    parser.add_argument("--register", action="store_true")
    parser.add_argument("--expect-not-found", action="store_true")
    parser.add_argument("--rows", type=int, default=400)
    args = parser.parse_args()

    import time
    t0 = time.monotonic()

    def mark(what: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {what}", file=sys.stderr, flush=True)

    import pyspark
    from pyspark.sql import SparkSession

    import tubespark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.remote("local[2]") if args.connect else SparkSession.builder.master("local[2]")
    spark = (builder.appName("tubespark-roundtrip")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled", "false").getOrCreate())
    mark("session")
    not_found = None
    if args.expect_not_found:
        from tubespark.errors import DataSourceNotFoundError

        try:
            with tubespark.typed_errors():
                # columns: a Connect DataFrame is resolved on the server only when asked (classic: at load())
                frame = spark.read.format("tubemq").option("master", args.master).option("topic", args.topic_in)
                print(f"unexpected columns {frame.load().columns}", file=sys.stderr)
        except DataSourceNotFoundError as exc:
            not_found = str(exc)
        if not_found is None:
            print("format('tubemq') was found, or failed otherwise, where it should not be found", file=sys.stderr)
            return 1
        mark("not found, as expected")
    shipped = None
    if args.ship:
        shipped = tubespark.package_zip(args.work_dir)
        spark.addArtifacts(shipped, pyfile=True)
    if args.register:
        tubespark.register(spark)

    rows = args.rows
    run = uuid.uuid4().hex[:8]  # rows of this run only, should the topics hold others
    expected = [f"{run}-{i}" for i in range(rows)]
    (spark.range(rows).selectExpr(f"concat('{run}-', CAST(id AS STRING)) AS value", "'rt' AS streamId")
     .write.format("tubemq").option("master", args.master).option("topic", args.topic_in).mode("append").save())

    def read_values(topic: str) -> list[str]:
        frame = spark.read.format("tubemq").option("master", args.master).option("topic", topic).load()
        values = frame.selectExpr("CAST(value AS STRING) AS value").where(f"value LIKE '{run}-%'")
        return sorted(r.value for r in values.collect())

    mark("written")
    read = read_values(args.topic_in)
    mark("read")
    if read != sorted(expected):
        print(f"batch read gave {len(read)} rows, expected {rows}", file=sys.stderr)
        return 1

    per_trigger = max(1, rows // 4)
    query = (spark.readStream.format("tubemq").option("master", args.master).option("topic", args.topic_in)
             .option("group", f"rt-{uuid.uuid4().hex[:8]}").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(per_trigger)).load()
             .select("value", "streamId")
             .writeStream.format("tubemq").option("master", args.master).option("topic", args.topic_out)
             .option("checkpointLocation", os.path.join(args.work_dir, "checkpoint"))
             .trigger(availableNow=True).start())
    mark("stream started")
    query.awaitTermination(300)
    mark("stream done")
    if query.isActive:
        query.stop()
        print("the AvailableNow query did not finish within 300 s", file=sys.stderr)
        return 1
    # numInputRows is a property of StreamingQueryProgress (summed over sources), not a key of its JSON
    batches = [p.numInputRows for p in query.recentProgress if p.numInputRows]
    mark(f"batches {batches}")
    copied = read_values(args.topic_out)
    print(json.dumps({
        "pyspark": pyspark.__version__,
        "session": type(spark).__module__,
        "tubespark_file": tubespark.__file__,
        "shipped": shipped,
        "registered": args.register,
        "not_found": not_found,
        "read": len(read),
        "stream_batches": batches,
        "copied": len(copied),
        "copied_matches": copied == sorted(expected),
    }), flush=True)
    spark.stop()
    # admission control split the backlog: every micro-batch within maxOffsetsPerTrigger (>=: the topics may
    # hold rows of earlier runs; copied == expected is the exactly-once check for this run's rows)
    split = sum(batches) >= rows and len(batches) >= 2 and max(batches) <= per_trigger
    return 0 if copied == sorted(expected) and split else 1


if __name__ == "__main__":
    sys.exit(main())
