"""The demo on an embedded real TubeMQ cluster: ``python -m tubespark_testbed demo [--seconds N]``.

The demo is the newcomer's first contact (``./dev demo``), so it says what it downloads, shows results
and the group's lag while it runs, and cleans everything up on Ctrl-C. It lives with the test bed, not
in the connector, because it starts a local cluster.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from tubespark_testbed.local import LocalCluster

DEMO_TOPIC = "demo_events"
DEMO_GROUP = "tubespark_demo"


def quiet_log4j_config() -> str | None:
    """``conf/spark/log4j2.properties`` of a source checkout (or an install's share dir), if present."""
    from pathlib import Path

    here = Path(__file__).resolve().parent
    for candidate in (here.parent.parent / "conf" / "spark" / "log4j2.properties",
                      Path(sys.prefix) / "share" / "tubespark" / "conf" / "spark" / "log4j2.properties"):
        if candidate.is_file():
            return str(candidate)
    return None


def _event(rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(("orders", "clicks", "clicks", "clicks"))
    body = {"user": f"user{rng.randint(1, 50)}", "page": rng.choice(("home", "cart", "search", "item")),
            "amount": round(rng.uniform(5, 500), 2) if kind == "orders" else 0.0,
            "ts": datetime.now(UTC).isoformat()}
    return kind, json.dumps(body).encode()


def _produce_forever(master: str, stop: threading.Event, rate_per_s: float) -> None:
    from tubespark.tubemq.client.producer import Producer
    from tubespark.tubemq.wire.message import OutgoingMessage, format_msg_time

    rng = random.Random(7)
    with Producer(master) as producer:
        producer.publish([DEMO_TOPIC])
        while not stop.wait(1 / rate_per_s):
            kind, body = _event(rng)
            producer.send_async(DEMO_TOPIC, OutgoingMessage(body, msg_type=kind, msg_time=format_msg_time(
                datetime.now(UTC)), attributes={"source": "demo"}))
            if rng.random() < 0.1:
                producer.flush()


def _group_lag(cluster: LocalCluster) -> str:
    answer = cluster.broker_admin("admin_query_offset", groupName=DEMO_GROUP, topicName=DEMO_TOPIC)
    return format_group_lag(answer)


def format_group_lag(answer: dict[str, Any]) -> str:
    """The group's lag from the broker's ``admin_query_offset`` answer, in a line a newcomer can read: the
    total, then each partition by its id, which TubeMQ numbers ``store * 10000 + index`` (the demo topic
    has 4 stores of 1 partition: 0, 10000, 20000, 30000)."""
    offsets = sorted((int(part["partitionId"]), int(part["offsetLag"]) // 28)
                     for item in answer.get("dataSet", []) for sub in item.get("subInfo", [])
                     for part in sub.get("offsets", []) if "partitionId" in part and "offsetLag" in part)
    if not offsets:
        return "group lag: not committed yet"
    parts = ", ".join(f"{pid}: {lag}" for pid, lag in offsets)
    return (f"group lag: {sum(lag for _, lag in offsets)} messages behind (by partition id, "
            f"store*10000+partition: {parts})")


def demo(seconds: float | None) -> int:
    """Run the demo; 0 when the stream read events, 130 when Ctrl-C came before it read any.

    Ctrl-C is how a newcomer ends the demo, at any moment: while the cluster starts (tens of seconds),
    while Spark starts, or while the stream runs. Each ends with one line saying what happened and
    everything shut down, never a traceback: the cluster stops itself when its start is interrupted,
    and the body below stops the query and Spark before the cluster goes.
    """
    try:
        return _run(seconds)
    except KeyboardInterrupt:
        print("\nStopped (Ctrl-C) before the stream read anything. Everything was shut down.", flush=True)
        return 130


def _run(seconds: float | None) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    print("Starting a local TubeMQ cluster (ZooKeeper, master, broker). The first run downloads the server "
          "from Maven Central; later runs use the cache.", flush=True)
    stop = threading.Event()
    # Deployed with the cluster: the master holds a new topic (and a new broker) ~30 s before use.
    with LocalCluster(topics=[(DEMO_TOPIC, 1, 4)]) as cluster:
        print(f"TubeMQ master at {cluster.master_address}, topic {DEMO_TOPIC} ready", flush=True)
        producer = threading.Thread(target=_produce_forever, args=(cluster.master_address, stop, 200.0), daemon=True)
        producer.start()
        spark: Any = None
        query: Any = None
        total = 0
        interrupted = False
        try:
            spark, query = _start_query(cluster.master_address)
            # PySpark's own SIGINT handler cancels every running Spark job first: a micro-batch caught
            # mid-run would fail the query with an ERROR and a stack trace. The query.stop() below ends
            # it cleanly, so Ctrl-C only has to leave this loop.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            deadline = time.monotonic() + seconds if seconds else None
            while deadline is None or time.monotonic() < deadline:
                time.sleep(5)
                progress = query.lastProgress or {}
                print(f"[{datetime.now():%H:%M:%S}] last batch {progress.get('numInputRows', 0)} rows; "
                      f"{_group_lag(cluster)}  (Ctrl-C to stop)", flush=True)
        except KeyboardInterrupt:
            interrupted = True
            print("\nStopping ...", flush=True)
        finally:
            # A second Ctrl-C while the query, Spark and the cluster stop would cut that short and leave
            # a traceback (and JVMs) behind: from here on the demo only shuts down.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            stop.set()
            if query is not None:
                _stop_between_batches(query)
                total = sum(p["numInputRows"] for p in query.recentProgress)
            if spark is not None:
                spark.stop()
            producer.join(timeout=15)
    print(f"Demo finished: the stream read {total} events. Everything was shut down.")
    return 0 if total > 0 else 130 if interrupted else 1


def _stop_between_batches(query: Any, wait_s: float = 10.0) -> None:
    """Stop ``query`` while no micro-batch runs (waiting up to ``wait_s`` for the current one to end).

    ``query.stop()`` in the middle of a batch kills its tasks: Spark then logs the batch's write as
    aborted (ERROR) and PySpark's worker daemon prints BrokenPipeError tracebacks for the read tasks
    whose sockets it closed. Nothing is lost (the batch runs again on the next start), but a newcomer
    reads it as a crash. The demo's batches take well under its 3 s trigger interval, so right after
    one ends there are seconds before the next starts.
    """
    deadline = time.monotonic() + wait_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def _start_query(master: str) -> tuple[Any, Any]:
    """Spark (quiet logging) and the demo's streaming query on ``master``'s demo topic."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import tubespark

    builder = (SparkSession.builder.master("local[2]").appName("tubespark-demo")
               .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2"))
    log4j = quiet_log4j_config()
    if log4j:  # keeps Spark's start-up chatter (WARN and below) out of the demo's output
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    tubespark.register(spark)
    events = (spark.readStream.format("tubemq").option("master", master)
              .option("topic", DEMO_TOPIC).option("group", DEMO_GROUP).option("startingOffsets", "earliest")
              .load())
    schema = "user string, page string, amount double, ts string"
    parsed = events.select("streamId", "partitionId", F.from_json(F.col("value").cast("string"), schema).alias("e"))
    # exact distinct users (the demo has 50): approx_count_distinct said "52" of 50, and a streaming query
    # allows no count(DISTINCT ...)
    summary = parsed.groupBy("streamId").agg(F.count("*").alias("events"),
                                            F.round(F.sum("e.amount"), 2).alias("revenue"),
                                            F.size(F.collect_set("e.user")).alias("users"))
    query = (summary.writeStream.outputMode("complete").format("console").option("truncate", "false")
             .trigger(processingTime="3 seconds").start())
    return spark, query
