"""The soak's streaming job: a checkpointed parquet sink, run as its own process so it can be killed -9.

    python soak_job.py MASTER TOPIC GROUP CHECKPOINT OUTPUT (run|drain) [MAX_OFFSETS_PER_TRIGGER]
        [SINK_TOPIC [MASTER_WEB_URL]]

Prints one line per finished micro-batch of the parquet query, for the soak to measure recovery times from::

    progress <batchId> <numInputRows> <unix time the line was printed> <unix time the trigger began> <ends>

``<ends>`` is the batch's end offset per partition, compacted to ``key=offset,...`` (the source's ``endOffset``
without its ``#`` marks; ``-`` when there is none): with several brokers the soak tells from it when a restarted
broker's partitions are read again, which the batch's row count cannot show (the other brokers' partitions
fill it). A batch whose trigger began after a broker accepted connections again was planned after it.

``run`` streams until killed; ``drain`` runs Trigger.AvailableNow and exits. With ``SINK_TOPIC`` (``run``
only) a second query in the same Spark application streams the topic's values into ``SINK_TOPIC`` through
the TubeMQ sink (group ``GROUP`` + ``-sink``, checkpoint ``CHECKPOINT`` + ``-sink``): the rolling soak's
running sink. The job exits 1 as soon as either query stops. ``MASTER_WEB_URL`` sets ``masterWebUrl`` on
the source and the sink (how a production job tells a broker that is down from a removed partition).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession

import tubespark
from tubespark.spark.offsets import BatchOffsets, parse_offsets


def progress_line(progress: Mapping[str, Any]) -> str:
    """One ``progress`` line (see the module docstring) from a StreamingQueryProgress (a dict in PySpark)."""
    began = datetime.strptime(progress["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    sources = progress.get("sources") or [{}]
    ends = BatchOffsets.parse(parse_offsets(sources[0].get("endOffset"))).positions
    compact = ",".join(f"{key}={offset}" for key, offset in sorted(ends.items())) or "-"
    return (f"progress {progress['batchId']} {progress.get('numInputRows') or 0} {time.time():.3f} "
            f"{began.timestamp():.3f} {compact}")


def main() -> None:
    master, topic, group, checkpoint, output, mode = sys.argv[1:7]
    max_per_trigger = sys.argv[7] if len(sys.argv) > 7 else "5000"
    sink_topic = sys.argv[8] if len(sys.argv) > 8 else ""
    web = {"masterWebUrl": sys.argv[9]} if len(sys.argv) > 9 else {}
    deferred = os.environ.get("TUBESPARK_SOAK_DEFERRED_RANGES_PATH")  # the long soak's: one for every query
    web.update({"deferredRangesPath": deferred} if deferred else {})
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("tubespark-soak-job")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.python.worker.faulthandler.enabled", "true").getOrCreate())  # a worker crash's stack
    spark.sparkContext.setLogLevel("ERROR")
    tubespark.register(spark)

    def source(group_id: str):
        return (spark.readStream.format("tubemq").option("master", master).option("topic", topic)
                .option("group", group_id).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", max_per_trigger).option("heartbeatIntervalMs", "1000")
                .options(**web).load())

    stream = source(group).select("value", "partitionKey", "offset")
    writer = stream.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint)
    if mode == "drain":
        query = writer.trigger(availableNow=True).start()
    else:
        query = writer.trigger(processingTime="500 milliseconds").start()
    others = []
    if sink_topic and mode != "drain":
        # Start the second query once the first has finished a batch: started while the first query's first batch
        # was being planned, it failed that batch twice in CI (stage 0 of the app: a task's binary that Java
        # could not deserialize, OptionalDataException in HashMap.readObject; once two Python workers dying at
        # once), a race between the two queries' start-up in one session that no user of one query meets
        deadline = time.monotonic() + 120
        while query.isActive and query.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.1)
        others.append(source(group + "-sink").select("value").writeStream.format("tubemq")
                      .option("master", master).option("topic", sink_topic).options(**web)
                      .option("checkpointLocation", checkpoint + "-sink")
                      .trigger(processingTime="500 milliseconds").start())
    print("started", flush=True)
    seen = -1
    while query.isActive and all(other.isActive for other in others):
        for progress in query.recentProgress:
            if progress["batchId"] > seen:
                seen = progress["batchId"]
                print(progress_line(progress), flush=True)
        time.sleep(0.1)
    error = query.exception()
    stopped = [other for other in others if not other.isActive]
    if error is not None or stopped:
        print(f"query failed: {error}" if error is not None else f"sink query stopped: {stopped[0].exception()}",
              flush=True)
        spark.stop()
        sys.exit(1)
    spark.stop()


if __name__ == "__main__":
    main()
