"""A streaming job run as its own process, so tests can kill it hard (SIGKILL) and restart it.

    python stream_job.py MASTER TOPIC GROUP CHECKPOINT OUTPUT (run|drain) [MAX_OFFSETS_PER_TRIGGER]

``run`` streams until killed; ``drain`` runs Trigger.AvailableNow and exits.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

import tubespark


def main() -> None:
    master, topic, group, checkpoint, output, mode = sys.argv[1:7]
    max_per_trigger = sys.argv[7] if len(sys.argv) > 7 else "50"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("tubespark-stream-job")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    tubespark.register(spark)
    stream = (spark.readStream.format("tubemq").option("master", master).option("topic", topic)
              .option("group", group).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", max_per_trigger).option("heartbeatIntervalMs", "1000").load())
    writer = stream.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint)
    if mode == "drain":
        writer.trigger(availableNow=True).start().awaitTermination(300)
    else:
        print("started", flush=True)
        writer.trigger(processingTime="200 milliseconds").start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
