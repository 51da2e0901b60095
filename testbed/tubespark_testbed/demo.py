"""The demo on an embedded real TubeMQ cluster: ``python -m tubespark_testbed demo [--seconds N]``.

The demo is the newcomer's first contact (``./dev demo``), so it says what it downloads and each start-up
stage with its time, shows results and the group's lag while it runs, says why when the stream read nothing,
and cleans everything up on Ctrl-C. It lives with the test bed, not in the connector, because it starts a
local cluster. Spark's Python processes start through tubespark's start-up script unless ``PYSPARK_PYTHON`` is
set (``tubespark.use_spark_python()``, docs/troubleshooting/busy-machine.md).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tubespark_testbed import artifacts
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


@dataclass
class Produced:
    """What the demo's producer thread did: how many messages it sent, and the error that stopped it."""

    sent: int = 0
    error: str | None = None


def _produce_forever(master: str, stop: threading.Event, rate_per_s: float, produced: Produced) -> None:
    from tubespark.tubemq.client.producer import Producer
    from tubespark.tubemq.wire.message import OutgoingMessage, format_msg_time

    rng = random.Random(7)
    try:
        with Producer(master) as producer:
            producer.publish([DEMO_TOPIC])
            while not stop.wait(1 / rate_per_s):
                kind, body = _event(rng)
                producer.send_async(DEMO_TOPIC, OutgoingMessage(body, msg_type=kind, msg_time=format_msg_time(
                    datetime.now(UTC)), attributes={"source": "demo"}))
                produced.sent += 1
                if rng.random() < 0.1:
                    producer.flush()
    except Exception as exc:  # noqa: BLE001 - said in the demo's last line when the stream read nothing
        produced.error = first_line(exc)


def first_line(exc: BaseException | str, limit: int = 300) -> str:
    """An error in one line: its first, cut at ``limit`` characters (Spark's carry a JVM stack trace after it)."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


BUSY_MACHINE_DOC = "docs/troubleshooting/busy-machine.md"
FIRST_BATCH_TIMEOUT_S = 300.0
"""How long the demo waits for its stream's first micro-batch before ``--seconds`` starts counting."""


def why_nothing_read(*, query_error: str | None, produced: Produced, streamed_s: float) -> str:
    """Why the stream read no event, in words a newcomer can act on: the stream's own error first (with what to
    do about Spark's start-up timeout), then the producer's, then a stream that simply had no batch yet."""
    if query_error:
        hint = (f" (Spark's Python process for the stream started too slowly on this busy machine: see "
                f"{BUSY_MACHINE_DOC})" if "connect back" in query_error else "")
        return f"the stream stopped with an error: {query_error}{hint}"
    if produced.error:
        return f"the producer stopped with an error after {produced.sent} messages: {produced.error}"
    if not produced.sent:
        return "the producer had not sent a message yet (the cluster took the whole time)"
    return (f"the producer sent {produced.sent} messages, but no micro-batch ended in the {streamed_s:.0f} s the "
            f"stream ran (the first one starts Spark's Python workers, slow on a busy machine: see "
            f"{BUSY_MACHINE_DOC})")


@contextmanager
def stage(what: str, *, every_s: float = 15.0) -> Iterator[None]:
    """Say ``what`` starts, that it is still going every ``every_s`` seconds, and how long it took."""
    started = time.monotonic()
    done = threading.Event()

    def still_going() -> None:
        while not done.wait(every_s):
            print(f"  ... {what}: {time.monotonic() - started:.0f} s so far", flush=True)

    ticker = threading.Thread(target=still_going, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join(timeout=1)
    print(f"  {what}: done in {time.monotonic() - started:.0f} s", flush=True)


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
    import tubespark

    tubespark.use_spark_python()  # Spark's Python processes start from PySpark's bytecode (a set one is kept)
    if not artifacts.is_resolved():
        with stage(f"Downloading the TubeMQ server from Maven Central into {artifacts.cache_dir()} (first run only)"):
            artifacts.ensure_artifacts()
    print("Starting a local TubeMQ cluster (ZooKeeper, master, broker; about 40 s, most of it the master's wait "
          "before it serves a new topic).", flush=True)
    stop = threading.Event()
    produced = Produced()
    # Deployed with the cluster: the master holds a new topic (and a new broker) ~30 s before use.
    with contextlib.ExitStack() as stopped_last:  # the cluster stops after the query and Spark (finally below)
        with stage("TubeMQ cluster start"):
            cluster = stopped_last.enter_context(LocalCluster(topics=[(DEMO_TOPIC, 1, 4)]))
        print(f"TubeMQ master at {cluster.master_address}, topic {DEMO_TOPIC} ready", flush=True)
        producer = threading.Thread(target=_produce_forever, args=(cluster.master_address, stop, 200.0, produced),
                                    daemon=True)
        producer.start()
        spark: Any = None
        query: Any = None
        total = 0
        interrupted = False
        query_error: str | None = None
        streamed_s = 0.0
        try:
            print("Starting Spark (local[2]) and the streaming query ...", flush=True)
            with stage("Spark and the streaming query start"):
                spark, query = _start_query(cluster.master_address)
            print("Streaming: a table of events per stream every few seconds (the first batch takes longest).",
                  flush=True)
            streaming_since = time.monotonic()
            # --seconds counts from the first batch's end: the first one starts Spark's Python workers, which a
            # busy machine may take a minute over, and a short demo would otherwise end before it showed a row
            with stage("the first micro-batch"):
                first_by = streaming_since + FIRST_BATCH_TIMEOUT_S
                while query.isActive and not query.recentProgress and time.monotonic() < first_by:
                    time.sleep(0.5)
            # PySpark's own SIGINT handler cancels every running Spark job first: a micro-batch caught
            # mid-run would fail the query with an ERROR and a stack trace. The query.stop() below ends
            # it cleanly, so Ctrl-C only has to leave this loop.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            deadline = time.monotonic() + seconds if seconds else None
            while deadline is None or time.monotonic() < deadline:
                time.sleep(5)
                if not query.isActive:  # failed: waiting out the rest of --seconds shows nothing more
                    break
                progress = query.lastProgress or {}
                print(f"[{datetime.now():%H:%M:%S}] last batch {progress.get('numInputRows', 0)} rows; "
                      f"{_group_lag(cluster)}  (Ctrl-C to stop)", flush=True)
            streamed_s = time.monotonic() - streaming_since
        except KeyboardInterrupt:
            interrupted = True
            print("\nStopping ...", flush=True)
        except Exception as exc:  # noqa: BLE001 - Spark or the query did not start: the last line says why
            query_error = first_line(exc)
        finally:
            # A second Ctrl-C while the query, Spark and the cluster stop would cut that short and leave
            # a traceback (and JVMs) behind: from here on the demo only shuts down.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            stop.set()
            if query is not None:
                failure = query.exception()
                query_error = first_line(failure) if failure else None
                _stop_between_batches(query)
                total = sum(p["numInputRows"] for p in query.recentProgress)
            if spark is not None:
                spark.stop()
            producer.join(timeout=15)
    if total > 0 or interrupted:
        print(f"Demo finished: the stream read {total} events. Everything was shut down.")
        return 0 if total > 0 else 130
    why = why_nothing_read(query_error=query_error, produced=produced, streamed_s=streamed_s)
    print(f"Demo finished: the stream read 0 events: {why}. Everything was shut down.")
    return 1


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
