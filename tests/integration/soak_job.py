"""The soak's streaming job: a checkpointed parquet sink, run as its own process so it can be killed -9.

    python soak_job.py MASTER TOPIC GROUP CHECKPOINT OUTPUT (run|drain) [MAX_OFFSETS_PER_TRIGGER]

Prints one line per finished micro-batch, for the soak to measure recovery times from::

    progress <batchId> <numInputRows> <unix time the line was printed>

``run`` streams until killed; ``drain`` runs Trigger.AvailableNow and exits.
"""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession

import tubespark


def main() -> None:
    master, topic, group, checkpoint, output, mode = sys.argv[1:7]
    max_per_trigger = sys.argv[7] if len(sys.argv) > 7 else "5000"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("tubespark-soak-job")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    tubespark.register(spark)
    stream = (spark.readStream.format("tubemq").option("master", master).option("topic", topic)
              .option("group", group).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", max_per_trigger).option("heartbeatIntervalMs", "1000").load()
              .select("value", "partitionKey", "offset"))
    writer = stream.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint)
    if mode == "drain":
        query = writer.trigger(availableNow=True).start()
    else:
        query = writer.trigger(processingTime="500 milliseconds").start()
    print("started", flush=True)
    seen = -1
    while query.isActive:
        for progress in query.recentProgress:
            batch = progress.get("batchId", -1) if isinstance(progress, dict) else progress.batchId
            rows = progress.get("numInputRows", 0) if isinstance(progress, dict) else progress.numInputRows
            if batch > seen:
                seen = batch
                print(f"progress {batch} {rows} {time.time():.3f}", flush=True)
        time.sleep(0.1)
    error = query.exception()
    if error is not None:
        print(f"query failed: {error}", flush=True)
        spark.stop()
        sys.exit(1)
    spark.stop()


if __name__ == "__main__":
    main()
