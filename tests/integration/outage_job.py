"""The long-outage test's streaming job (tests/integration/tubemq/test_long_outage.py): three queries of one topic in
one Spark application, run as its own process so that what its executors log (the sink's routing around a broker)
can be read from its output::

    python outage_job.py MASTER MASTER_WEB_URLS TOPIC SINK_TOPIC WORK

* ``strict``: TOPIC into parquet files ``WORK/strict`` (checkpoint ``WORK/strict-ck``), ``failOnDataLoss=true``;
* ``lenient``: the same into ``WORK/lenient``, ``failOnDataLoss=false``;
* ``sink``: TOPIC through the TubeMQ sink into SINK_TOPIC (checkpoint ``WORK/sink-ck``).

Each has its own group, reads from the earliest offsets and sets ``masterWebUrl`` (how a stream tells a broker that
is down from a removed partition). For every finished micro-batch it prints ``<query> `` followed by soak_job.py's
``progress`` line (rows, unix times, the batch's end offset per partition), and exits 1 as soon as a query stops.
"""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession
from soak_job import progress_line  # the same directory: this file runs as a script

import tubespark

QUERIES = ("strict", "lenient", "sink")


def main() -> None:
    master, web, topic, sink_topic, work = sys.argv[1:6]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("tubespark-long-outage")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    tubespark.register(spark)

    def source(name: str, fail_on_data_loss: str):
        return (spark.readStream.format("tubemq").option("master", master).option("topic", topic)
                .option("masterWebUrl", web).option("group", f"outage-{name}-{os.getpid()}")
                .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "5000")
                .option("heartbeatIntervalMs", "1000").option("failOnDataLoss", fail_on_data_loss)
                .option("deferredRangesPath", f"{work}/deferred").load())  # one directory for all: each query its own

    queries = {}
    for name, fail in (("strict", "true"), ("lenient", "false")):
        queries[name] = (source(name, fail).select("value", "partitionKey", "offset").writeStream
                         .format("parquet").option("path", f"{work}/{name}")
                         .option("checkpointLocation", f"{work}/{name}-ck")
                         .trigger(processingTime="500 milliseconds").start())
    queries["sink"] = (source("sink", "true").select("value").writeStream.format("tubemq")
                       .option("master", master).option("topic", sink_topic).option("masterWebUrl", web)
                       .option("checkpointLocation", f"{work}/sink-ck")
                       .trigger(processingTime="500 milliseconds").start())
    print("started", flush=True)
    seen = dict.fromkeys(queries, -1)
    while all(query.isActive for query in queries.values()):
        for name, query in queries.items():
            for progress in query.recentProgress:
                if progress["batchId"] > seen[name]:
                    seen[name] = progress["batchId"]
                    print(f"{name} {progress_line(progress)}", flush=True)
        time.sleep(0.1)
    for name, query in queries.items():
        if not query.isActive:
            print(f"query {name} stopped: {query.exception()}", flush=True)
    spark.stop()
    sys.exit(1)


if __name__ == "__main__":
    main()
