"""The one benchmark command: ``python -m bench [--size smoke|full] ...`` (``python bench/run.py`` too).

Why one session: these machines are noisy (2 cores shared with other jobs), so every comparison is made
between runs that alternate (A, B, A, B, ...) in the same process, against the same brokers, and
reported as a ratio of medians. The session:

1. starts, in parallel, a TubeMQ cluster (the testbed's ``LocalCluster``, its broker on Java's default
   flags, ``broker_jvm="default"``; skipped with ``--tubemq-master``), a Kafka 4.3.1 broker
   (``bench/kafka.py``) and the build of the Java tool (``bench/java.py``);
2. fills each size's read topic (TubeMQ with the Java producer, Kafka with Spark's Kafka sink) and
   checks both hold the expected N;
3. per core count (a fresh Spark session each): per size, the read group, then the write group,
   alternating; with the last core count also the streaming latency and the memory case;
4. prints the table, writes the JSON (``--out``) and the chart (``--chart``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/run.py`: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cases as C
from bench.cpu import CpuMeter, jvm_flags, spark_jvm_pid
from bench.profiles import MESSAGE_SIZES, MIN_RUN_S, PROFILES, Profile, scaled
from bench.provenance import git_commit
from tubespark.tubemq.wire.twin import HOT_PATH

log = logging.getLogger("bench")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
READ_CASES = ("tubespark_batch", "tubespark_batch_pure", "tubespark_batch_bundled", "tubespark_stream",
              "java_consume", "ceiling", "kafka_batch", "kafka_batch_tuned")
WRITE_CASES = ("tubespark_sink", "tubespark_sink_pure", "tubespark_sink_bundled", "kafka_sink", "java_produce")
EXTRA_CASES = ("latency", "memory")
ALL_CASES = READ_CASES + WRITE_CASES + EXTRA_CASES
MEMORY_SIZE = 1024
LOAD_DELIVERY_TIMEOUT_MS = 600_000
"""How long loading Kafka's copy of a read topic (set-up, not timed) may leave a record unacknowledged: the
producer's 120 s default expired records on a 2-core machine kept busy beside the run (the bench smoke in CI)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(PROFILES), default="smoke", help="smoke (harness check) or full")
    p.add_argument("--spark-master", default="local[2]",
                   help="Spark master URL; with local[*] the core count comes from --cores")
    p.add_argument("--tubemq-master", default=None,
                   help="host:port of an existing TubeMQ master (its topics bench_read_<size>, bench_write_<size>, "
                        "bench_bundled_<size>, "
                        "bench_latency, bench_memory must exist); default: start a local cluster")
    p.add_argument("--tubemq-web-url", default=None,
                   help="the master's web API (masterWebUrl) for --tubemq-master, so batch reads check every "
                        "partition is served as a user's would; the local cluster's is passed by itself")
    p.add_argument("--cores", default="1,2", help="executor core counts to measure, comma separated")
    p.add_argument("--sizes", default=",".join(map(str, MESSAGE_SIZES)), help="message sizes in bytes")
    p.add_argument("--cases", default=",".join(ALL_CASES), help=f"subset of {','.join(ALL_CASES)}")
    p.add_argument("--repeats", type=int, default=None, help="measured rounds (default: the profile's)")
    p.add_argument("--warmup", type=int, default=None, help="unmeasured rounds first (default: the profile's)")
    p.add_argument("--rows-scale", type=float, default=1.0, help="multiply the profile's row counts")
    p.add_argument("--broker-jvm", choices=("default", "testbed"), default="default",
                   help="TubeMQ broker JVM flags: Java's defaults (for figures) or the testbed's start-up flags")
    p.add_argument("--out", type=Path, default=None, help="JSON output (default bench/results/<timestamp>.json)")
    p.add_argument("--chart", type=Path, default=RESULTS / "latest.png", help="chart image path")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-run log lines")
    return p.parse_args(argv)


def _csv_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def build_spark(master: str, cores: int, jars: list[str]) -> Any:
    """A fresh SparkSession with ``cores`` executor cores, tubespark and the ceiling source registered."""
    from pyspark.sql import SparkSession

    import tubespark
    from bench.ceiling_source import CeilingDataSource
    from bench.purepython_source import PurePythonTubeMQ

    url = f"local[{cores}]" if master.startswith("local") else master
    builder = (SparkSession.builder.master(url).appName(f"tubespark-bench-{cores}c")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(cores)).config("spark.sql.session.timeZone", "UTC")
               .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"]))
    if not master.startswith("local"):
        builder = builder.config("spark.cores.max", str(cores)).config("spark.executor.cores", str(cores))
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    tubespark.register(spark)
    spark.dataSource.register(CeilingDataSource)
    spark.dataSource.register(PurePythonTubeMQ)
    return spark


def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30, check=False).stderr
        return out.splitlines()[0] if out else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("py4j", "tubespark", "tubespark_testbed"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    started_wall = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    profile: Profile = scaled(PROFILES[args.size], args.rows_scale)
    repeats = args.repeats if args.repeats is not None else profile.repeats
    warmup = args.warmup if args.warmup is not None else profile.warmup
    cores_list, sizes = _csv_ints(args.cores), _csv_ints(args.sizes)
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(wanted) - set(ALL_CASES)
    if unknown:
        raise SystemExit(f"unknown cases: {sorted(unknown)} (known: {', '.join(ALL_CASES)})")
    want_kafka = any(c in wanted for c in ("kafka_batch", "kafka_batch_tuned", "kafka_sink"))
    partitions = profile.topic_shape[0] * profile.topic_shape[1]

    # Workers must import bench.ceiling_source and this checkout's tubespark; they inherit PYTHONPATH.
    path_entries = [str(ROOT), str(ROOT / "testbed"), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]
    os.environ["PYTHONPATH"] = ":".join(dict.fromkeys(path_entries))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    from tubespark_testbed import LocalCluster

    from bench.java import TubeBench
    from bench.kafka import KAFKA_VERSION, SPARK_KAFKA_VERSION, KafkaBroker, spark_kafka_jars

    work_dir = Path(tempfile.mkdtemp(prefix="tubespark-bench-"))
    read_topics = {s: f"bench_read_{s}" for s in sizes}
    write_topics = {s: f"bench_write_{s}" for s in sizes}
    bundled_topics = {s: f"bench_bundled_{s}" for s in sizes}  # the read backlog again, as InLong bundles
    topics = [*read_topics.values(), *write_topics.values(), *bundled_topics.values(), "bench_latency",
              "bench_memory"]
    cluster: LocalCluster | None = None
    kafka: KafkaBroker | None = None
    java = TubeBench()
    all_cases: list[C.Case] = []
    latency: list[dict[str, Any]] = []
    memory: dict[str, Any] | None = None
    errors: list[str] = []
    doc_tubemq: dict[str, Any] = {}
    spark_version = "?"
    spark_jvm_flags: list[str] = []
    try:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            fut_cluster = None
            if args.tubemq_master is None:
                cluster = LocalCluster(broker_jvm=args.broker_jvm, topics=[(t, *profile.topic_shape) for t in topics])
                fut_cluster = pool.submit(cluster.start)
            kafka_topics = [*read_topics.values(), *write_topics.values()]
            fut_kafka = pool.submit(KafkaBroker.started_with, kafka_topics, partitions=partitions) \
                if want_kafka else None
            fut_jars = pool.submit(spark_kafka_jars) if want_kafka else None
            fut_java = pool.submit(java.build)
            fut_java.result()
            if fut_cluster is not None:
                fut_cluster.result()
            jars: list[str] = []
            if fut_kafka is not None and fut_jars is not None:
                try:
                    kafka = fut_kafka.result()
                    jars = fut_jars.result()
                except Exception as exc:  # noqa: BLE001 - the TubeMQ figures are still worth having
                    errors.append(f"kafka set-up failed, Kafka cases skipped: {exc}")
                    log.warning("%s", errors[-1])
        master = args.tubemq_master or (cluster.master_address if cluster else "")
        doc_tubemq = {
            "master": master,
            "local_cluster": cluster is not None,
            "broker_jvm": args.broker_jvm if cluster else "external (unknown)",
            "broker_jvm_flags": cluster.jvm_flags("broker") if cluster else [],
            "testbed_broker_jvm_flags": LocalCluster(broker_jvm="testbed").jvm_flags("broker"),
            "topic_shape": {"partitions": profile.topic_shape[0], "stores": profile.topic_shape[1]},
            "server_version": "2.4.0" if cluster else "?",
            "java_client": "org.apache.inlong:tubemq-client:1.13.0 (wire-equal to 2.4.0)",
        }
        if cluster is not None:
            s = cluster.settings
            doc_tubemq["cluster_settings"] = {"max_segment_bytes": s.max_segment_bytes,
                                              "balance_period_ms": s.balance_period_ms}
        log.info("TubeMQ at %s (broker JVM: %s), Kafka at %s; set-up %.0f s", master, doc_tubemq["broker_jvm"],
                 kafka.bootstrap if kafka else None, time.monotonic() - t0)

        # Fill the TubeMQ read topics with the Java producer (fast, and not the code under test).
        any_read = any(c in wanted for c in READ_CASES)
        if any_read:
            for size in sizes:
                java.produce(master, read_topics[size], profile.read_rows[size], size,
                             timeout_s=fill_timeout_s(profile.read_rows[size]))
        setup_s = time.monotonic() - t0
        read_rows: dict[int, int] = {}
        for index, cores in enumerate(cores_list):
            spark = build_spark(args.spark_master, cores, jars)
            spark_version = spark.version
            jvm = spark_jvm_pid()
            spark_jvm_flags = jvm_flags(jvm)
            brokers = {"tubemq": [cluster.process("broker").pid] if cluster else [],
                       "kafka": [kafka.proc.pid] if kafka and kafka.proc else []}
            env = C.Env(spark=spark, cores=cores, tubemq_master=master, java=java,
                        tubemq_web_url=args.tubemq_web_url or (cluster.master_web_url if cluster else ""),
                        kafka_bootstrap=kafka.bootstrap if kafka else None, work_dir=work_dir, partitions=partitions,
                        cpu=CpuMeter(jvm, {k: [p for p in v if p] for k, v in brokers.items()}))
            try:
                if index == 0 and any_read:
                    for size in sizes:
                        read_rows[size] = C.count_tubemq(env, read_topics[size])
                        if read_rows[size] < profile.read_rows[size]:
                            raise RuntimeError(f"{read_topics[size]} holds {read_rows[size]} messages, "
                                               f"expected {profile.read_rows[size]}")
                        if kafka is not None and {"kafka_batch", "kafka_batch_tuned"} & set(wanted):
                            try:
                                C.source_frame(spark, read_rows[size], size, partitions).write.format("kafka") \
                                    .option("kafka.bootstrap.servers", kafka.bootstrap) \
                                    .option("kafka.delivery.timeout.ms", str(LOAD_DELIVERY_TIMEOUT_MS)) \
                                    .option("topic", read_topics[size]).save()
                            except Exception as exc:
                                raise RuntimeError(f"loading kafka {read_topics[size]} failed: {str(exc)[:2000]}\n"
                                                   f"{kafka.state()}") from exc
                            got = C.count_kafka(env, read_topics[size])
                            if got != read_rows[size]:
                                raise RuntimeError(f"kafka {read_topics[size]} holds {got}, expected {read_rows[size]}")
                        if "tubespark_batch_bundled" in wanted:
                            got = C.fill_bundled(env, bundled_topics[size], read_rows[size], size)
                            if got != read_rows[size]:
                                raise RuntimeError(f"{bundled_topics[size]} holds {got} rows, expected "
                                                   f"{read_rows[size]}")
                for size in sizes:
                    group = _read_group(env, wanted, kafka is not None, read_topics[size], read_rows.get(size, 0),
                                        size, profile.ceiling_factor, bundled_topics[size])
                    C.alternate(group, repeats=repeats, warmup=warmup, cpu=env.cpu)
                    all_cases += group
                    group = _write_group(env, wanted, kafka is not None, write_topics[size],
                                         profile.write_rows[size], size, profile.bulk_write_factor)
                    C.alternate(group, repeats=repeats, warmup=warmup, cpu=env.cpu)
                    all_cases += group
                if index == len(cores_list) - 1:
                    if "latency" in wanted:
                        latency.append(_guard(C.streaming_latency, env, "bench_latency", sizes[0],
                                              profile.latency_rate, profile.latency_seconds,
                                              profile.latency_warmup_s))
                    if "memory" in wanted:
                        memory = _guard(_memory_case, env, profile)
            finally:
                spark.stop()
    finally:
        if kafka is not None:
            kafka.stop()
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work_dir, ignore_errors=True)

    from bench import report

    records = [report.case_record(c, MIN_RUN_S) for c in all_cases]
    doc: dict[str, Any] = {
        "schema_version": 1,
        "profile": profile.name,
        "started": started_wall.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([Path(sys.executable).name, "-m", "bench", *(argv if argv is not None else sys.argv[1:])]),
        "config": {"repeats": repeats, "warmup": warmup, "sizes": sizes, "cores": cores_list, "cases": wanted,
                   "rows_scale": args.rows_scale, "read_rows": read_rows or profile.read_rows,
                   "write_rows": profile.write_rows, "bulk_write_factor": profile.bulk_write_factor,
                   "ceiling_factor": profile.ceiling_factor,
                   "min_run_s": MIN_RUN_S, "alternation": "A,B,C,A,B,C,... per (size, cores) group"},
        "commit": git_commit(),
        "hot_path": {"tubespark_batch": HOT_PATH, "tubespark_sink": HOT_PATH,
                     "tubespark_batch_pure": "pure-python (bench switch, bench/purepython_source.py)",
                     "tubespark_sink_pure": "pure-python (bench switch, bench/purepython_source.py)"},
        "host": {"cpus": os.cpu_count(), "cpu_model": _cpu_model(),
                 "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                 "protobuf_backend": _protobuf_backend(),
                 "python": platform.python_version(), "java": _java_version(), "platform": platform.platform()},
        "spark": {"master": args.spark_master, "version": spark_version,
                  "jvm_flags": spark_jvm_flags or ["(Java defaults)"]},
        "cpu_measure": "utime+stime (+ reaped children) from /proc/<pid>/stat, before and after each run; "
                       "Spark side = the Spark JVM + its Python descendants; broker = the JVM read from/written to",
        "tubemq": doc_tubemq,
        "kafka": {"version": KAFKA_VERSION, "broker_jvm_flags": kafka.jvm_flags if kafka else None,
                  "spark_connector": f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_KAFKA_VERSION}",
                  "used": kafka is not None},
        "results": records,
        "ratios": report.ratios(records) + C.bundled_ratios(records) + report.cpu_ratios(records),
        "latency": latency,
        "memory": memory,
        "errors": errors + [f"{c.name} {c.size}B {c.cores}c: {c.error}" for c in all_cases if c.error],
        "durations": {"setup_s": round(setup_s, 1), "total_s": round(time.monotonic() - t0, 1)},
    }
    out = args.out or RESULTS / f"{started_wall.strftime('%Y%m%dT%H%M%SZ')}.json"
    report.write_json(doc, out)
    try:
        report.chart(doc, args.chart)
    except Exception as exc:  # noqa: BLE001 - a chart problem must not lose the figures
        doc["errors"].append(f"chart failed: {exc}")
        report.write_json(doc, out)
    print(report.table(doc))
    print(f"\nJSON: {out}\nchart: {args.chart}")
    return 1 if doc["errors"] else 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _protobuf_backend() -> str:
    """``upb`` (C) or ``python``: the pure-Python protobuf backend decodes fetches many times slower."""
    from google.protobuf.internal import api_implementation

    return str(api_implementation.Type())


def _memory_case(env: C.Env, profile: Profile) -> dict[str, Any]:
    """Fill the memory topic with the 1 KiB backlog, then drain it while sampling RSS."""
    env.java.produce(env.tubemq_master, "bench_memory", profile.memory_rows, MEMORY_SIZE,
                     timeout_s=fill_timeout_s(profile.memory_rows))
    return C.memory_drain(env, "bench_memory", profile.memory_rows, MEMORY_SIZE, profile.memory_max_offsets)


def fill_timeout_s(rows: int) -> float:
    """Time allowed to fill a topic: generous, as a busy 2-core machine may manage only ~2k msgs/s."""
    return max(600.0, rows / 2000)


def _guard(action: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``action(*args)``, or ``{"error": ...}`` when it fails: one failed case must not lose the rest."""
    try:
        return action(*args)
    except Exception as exc:  # noqa: BLE001 - recorded in the output instead
        log.warning("case failed: %s", exc)
        return {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}


def _read_group(env: C.Env, wanted: list[str], have_kafka: bool, topic: str, rows: int, size: int,
                ceiling_factor: int, bundled_topic: str) -> list[C.Case]:
    makers: dict[str, tuple[str, bool, Callable[[], C.Run]]] = {
        "tubespark_batch": ("tubespark", True, lambda: C.tubespark_batch(env, topic, rows, size)),
        "tubespark_batch_pure": ("tubespark", True, lambda: C.tubespark_batch_pure(env, topic, rows, size)),
        "tubespark_batch_bundled": ("tubespark", True,
                                    lambda: C.tubespark_batch_bundled(env, bundled_topic, rows, size)),
        "tubespark_stream": ("tubespark", True, lambda: C.tubespark_stream(env, topic, rows, size)),
        "java_consume": ("java", False, lambda: C.java_consume(env, topic, rows, size)),
        "ceiling": ("ceiling", True, lambda: C.ceiling(env, rows * ceiling_factor, size)),
        "kafka_batch": ("kafka", True, lambda: C.kafka_batch(env, topic, rows, size)),
        "kafka_batch_tuned": ("kafka", True, lambda: C.kafka_batch(env, topic, rows, size, fetch_max_wait_ms=10)),
    }
    return [C.Case(name, "read", system, size, env.cores, spark, fn, _broker_of(system))
            for name, (system, spark, fn) in makers.items() if name in wanted and (system != "kafka" or have_kafka)]


def _broker_of(system: str) -> str | None:
    """Whose CPU is the case's broker: TubeMQ's for tubespark and the Java client, Kafka's for Kafka."""
    return {"tubespark": "tubemq", "java": "tubemq", "kafka": "kafka"}.get(system)


def _write_group(env: C.Env, wanted: list[str], have_kafka: bool, topic: str, rows: int, size: int,
                 bulk_factor: int) -> list[C.Case]:
    bulk = rows * bulk_factor  # the bundled and Kafka sinks (Profile.bulk_write_factor)
    makers: dict[str, tuple[str, bool, Callable[[], C.Run]]] = {
        "tubespark_sink": ("tubespark", True, lambda: C.tubespark_sink(env, topic, rows, size)),
        "tubespark_sink_pure": ("tubespark", True, lambda: C.tubespark_sink_pure(env, topic, rows, size)),
        "tubespark_sink_bundled": ("tubespark", True, lambda: C.tubespark_sink_bundled(env, topic, bulk, size)),
        "kafka_sink": ("kafka", True, lambda: C.kafka_sink(env, topic, bulk, size)),
        "java_produce": ("java", False, lambda: C.java_produce(env, topic, rows, size)),
    }
    return [C.Case(name, "write", system, size, env.cores, spark, fn, _broker_of(system))
            for name, (system, spark, fn) in makers.items() if name in wanted and (system != "kafka" or have_kafka)]


if __name__ == "__main__":
    raise SystemExit(main())
