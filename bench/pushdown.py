"""``python -m bench.pushdown``: a 1 % selective WHERE on ``msgTime`` and on ``streamId`` over a topic of a few
million messages, read with Spark's filter pushdown off (the default) and on (tubespark/spark/pushdown.py).

One local TubeMQ cluster (the testbed's), one topic of 4 partitions (1 per store), ``--messages`` messages of
``--size`` bytes: 100 stream ids in turn (``s00`` ... ``s99``, so one is 1 %) and 100 consecutive minutes of
``msgTime`` (one minute is 1 %). Each case alternates off and on ``--repeats`` times in one Spark session
(``local[2]``) and reports per run: the rows Spark returned, wall and CPU seconds (Spark's JVM and its Python
workers, from /proc: a shared machine distorts CPU far less than wall time), and what the read tasks fetched from
the broker (messages and bytes of values, the ``readStatsPath`` counts). Reads set ``streamIdPushdown=true``, so
the streamId case goes to the brokers' msgType filter. Run it under the integration lock.

    PYTHONPATH=.:testbed flock /tmp/tubespark-integration.lock python3 -m bench.pushdown --messages 2000000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.cpu import CpuMeter, spark_jvm_pid
from bench.provenance import git_commit

TOPIC = "bench_pushdown"
BASE = datetime(2026, 11, 1, 0, 0, tzinfo=UTC)
STREAMS = 100
MINUTES = 100
CASES = {
    "msgTime, 1 minute of 100": "msgTime >= '2026-11-01 00:42:00' AND msgTime < '2026-11-01 00:43:00'",
    "streamId, 1 of 100": "streamId = 's42'",
}


def fill(master: str, messages: int, size: int) -> float:
    from tubespark.tubemq.client.producer import Producer
    from tubespark.tubemq.wire.message import OutgoingMessage, format_msg_time

    body = os.urandom(size)
    times = [format_msg_time(BASE + timedelta(minutes=m)) for m in range(MINUTES)]
    started = time.perf_counter()
    with Producer(master) as producer:
        producer.publish([TOPIC], timeout_s=240.0)
        for k in range(messages):
            producer.send_async(TOPIC, OutgoingMessage(body, msg_type=f"s{k % STREAMS:02d}",
                                                       msg_time=times[k * MINUTES // messages]))
            if k % 5000 == 4999:
                producer.flush()
        producer.flush()
    return time.perf_counter() - started


def run_once(spark, meter: CpuMeter, master: str, where: str, on: bool) -> dict:
    from tubespark.tubemq.spark.read_task import read_stats

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true" if on else "false")
    with tempfile.TemporaryDirectory(prefix="bench-pushdown-") as stats:
        frame = (spark.read.format("tubemq").option("master", master).option("topic", TOPIC)
                 .option("readStatsPath", stats).option("streamIdPushdown", "true").load().where(where))
        before, started = meter.snapshot(), time.perf_counter()
        rows = frame.count()
        wall = time.perf_counter() - started
        cpu = CpuMeter.delta(before, meter.snapshot())
        fetched = read_stats(stats)
    return {"pushdown": on, "rows": rows, "wall_s": round(wall, 3), "cpu_s": round(sum(cpu.values()), 3),
            "messages_fetched": fetched["messages"], "bytes_fetched": fetched["bytes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="")
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    from tubespark_testbed import LocalCluster

    import tubespark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with LocalCluster(topics=[(TOPIC, 1, 4)]) as cluster:
        fill_s = fill(cluster.master_address, args.messages, args.size)
        print(f"filled {TOPIC}: {args.messages} x {args.size} B in {fill_s:.0f} s", flush=True)
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        tubespark.register(spark)
        meter = CpuMeter(spark_jvm_pid(), {})
        results: dict[str, list[dict]] = {}
        try:
            for name, where in CASES.items():
                run_once(spark, meter, cluster.master_address, where, True)  # warm-up: workers, imports
                runs = results.setdefault(name, [])
                for _ in range(args.repeats):
                    for on in (False, True):
                        runs.append(run_once(spark, meter, cluster.master_address, where, on))
                        print(name, runs[-1], flush=True)
        finally:
            spark.stop()
    summary = {name: {("on" if on else "off"): {
        key: statistics.median(r[key] for r in runs if r["pushdown"] is on)
        for key in ("rows", "wall_s", "cpu_s", "messages_fetched", "bytes_fetched")} for on in (False, True)}
        for name, runs in results.items()}
    doc = {"bench": "pushdown", "date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": git_commit(),
           "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
           "load_avg": os.getloadavg(), "messages": args.messages, "size": args.size, "repeats": args.repeats,
           "fill_s": round(fill_s, 1), "summary": summary, "runs": results}
    text = json.dumps(doc, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    for name, sides in summary.items():
        off, on = sides["off"], sides["on"]
        print(f"{name}: rows {on['rows']}; off {off['wall_s']} s wall {off['cpu_s']} s CPU, "
              f"{off['messages_fetched']} msgs {off['bytes_fetched']} B fetched; on {on['wall_s']} s wall "
              f"{on['cpu_s']} s CPU, {on['messages_fetched']} msgs {on['bytes_fetched']} B fetched")


if __name__ == "__main__":
    main()
