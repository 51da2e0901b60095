"""A streaming job run as its own process, so tests can kill it hard (SIGKILL) and restart it.

    python stream_job.py FORMAT OPTIONS_JSON CHECKPOINT OUTPUT (run|drain)

Reads ``spark.readStream.format(FORMAT).options(**OPTIONS_JSON)`` into a parquet sink at OUTPUT with its
checkpoint at CHECKPOINT: ``run`` streams (200 ms triggers) until killed; ``drain`` runs
Trigger.AvailableNow and exits.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession

import tubespark


def main() -> None:
    source, options, checkpoint, output, mode = sys.argv[1:6]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("tubespark-stream-job")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    tubespark.register(spark)
    stream = spark.readStream.format(source).options(**json.loads(options)).load()
    writer = stream.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint)
    if mode == "drain":
        writer.trigger(availableNow=True).start().awaitTermination(300)
    else:
        print("started", flush=True)
        writer.trigger(processingTime="200 milliseconds").start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
