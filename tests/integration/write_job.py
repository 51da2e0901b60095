"""Writes N rows to TubeMQ while one write task fails once, mid-way (run as its own process: it needs task retries).

    python write_job.py MASTER TOPIC N [DEDUP_ATTRIBUTE]
"""

from __future__ import annotations

import os
import sys

from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

import tubespark


def main() -> None:
    master, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dedup = sys.argv[4] if len(sys.argv) > 4 else None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2,3]")  # up to 3 attempts per task
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    tubespark.register(spark)

    @F.udf(StringType())
    def body(i: int) -> str:
        # On a task's first attempt one row is too large for the topic: the sink has sent the rows before
        # it, then fails the task (MessageTooLargeError); the retry sends the whole partition again.
        if i == count // 2 + count // 4 and TaskContext.get().attemptNumber() == 0:
            return "x" * (2 * 1024 * 1024)
        return f"row-{i}"

    frame = spark.range(0, count, numPartitions=2).select(body("id").alias("value"),
                                                          F.lit("backfill").alias("streamId"))
    writer = frame.write.format("tubemq").option("master", master).option("topic", topic).mode("append")
    if dedup:
        writer = writer.option("dedupAttribute", dedup)
    writer.save()
    spark.stop()


if __name__ == "__main__":
    main()
