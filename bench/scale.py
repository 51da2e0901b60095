"""How the TubeMQ stream source grows with partitions: planning time, connections, driver memory.

    python -m bench.scale                                   # 12, 48, 96 partitions over 3 brokers, 30 triggers
    python -m bench.scale --partitions 12,48 --triggers 5   # a quick look

Issue 23 part 7. One 3-broker local TubeMQ cluster (the testbed's ``LocalCluster(brokers=3)``, brokers on
127.0.0.1-3) holds one topic per size, ``scale_<N>``, deployed on every broker with N/3 partitions each
(:data:`PARTITIONS_PER_STORE` partitions per store, so only the number of stores grows with N). Each topic
is filled with ``--fill`` messages per partition. Per size, measured without Spark, on the very objects
Spark's processes run:

* **driver planning** (a child process standing for Spark's long-lived driver-side Python process, which
  makes no other connections): ``TubeMQDataSource(options).streamReader(schema)`` in a fresh consumer group
  (it is assigned every partition), ``initialOffset`` once, then per trigger: the parent sends
  ``--per-trigger`` new messages to every partition (acknowledged), then the child times
  ``latestOffset(start, limit)`` + ``partitions(start, end)`` (the plan) and ``commit(end)`` on its own.
  The first ``--warmup`` triggers (the fill backlog, first fingerprints) are left out; figures are median
  and p95 of the rest. Also counted in the child: TCP connects during the steady triggers (Python's
  ``socket.connect`` audit event, so a connection opened per partition or per trigger shows), the
  established TCP connections it holds at the end (``/proc/self/fd`` sockets joined with
  ``/proc/self/net/tcp``), and its RSS (``/proc/self/status``): after imports (the baseline), after the
  query started (``initialOffset``), after the triggers, and the peak (VmHWM).
* **executor connections** (a second child standing for one executor's Python worker, reused across tasks
  as Spark reuses it): the reader pickled as Spark ships it, then ``read()`` of every partition's task of
  one batch covering the whole backlog, one task after another as a worker runs them. Counted: TCP
  connects (per task), and the most connections open at once (sampled at every Arrow batch).

Growth is stated against the smallest size as the baseline: ratio of the figure to the baseline's, next
to the ratio of partitions (linear growth = the same ratio; per-partition cost = figure / partitions).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import pickle
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.provenance import git_commit

if __package__ in (None, ""):  # `python bench/scale.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
BROKERS = 3
PARTITIONS_PER_STORE = 4
DEFAULT_SIZES = (12, 48, 96)
TRACED_TRIGGERS = 5
"""Steady triggers of the memory run (tracemalloc slows every call, so that run is not the timed one)."""
log = logging.getLogger("bench.scale")


# --- what a process holds: sockets, connects, memory ------------------------------------------------------

def _socket_inodes() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between listdir and readlink
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def established_tcp() -> list[str]:
    """Remote ``ip:port`` of every ESTABLISHED TCP connection this process holds (IPv4 and IPv6)."""
    mine = _socket_inodes()
    remotes = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "01" and cols[9] in mine:  # 01 = ESTABLISHED
                host_hex, port_hex = cols[2].split(":")
                host = (socket.inet_ntoa(bytes.fromhex(host_hex)[::-1]) if len(host_hex) == 8 else host_hex)
                remotes.append(f"{host}:{int(port_hex, 16)}")
    return remotes


class ConnectCounter:
    """Every ``socket.connect`` of this process by address, from Python's audit hook (it cannot be removed,
    so it counts only while :attr:`on`)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.on = False
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.on and event == "socket.connect":
            address = args[1]
            self.counts[f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)] += 1

    def total(self) -> int:
        return sum(self.counts.values())


class RpcCounter:
    """Broker requests of every :class:`BrokerClient` in this process by method, while :attr:`on` (the class's
    two send paths wrapped: bench instrumentation, one dict update per request)."""

    def __init__(self) -> None:
        from tubespark.tubemq.client.broker import BrokerClient

        self.counts: Counter[str] = Counter()
        self.on = False
        for name in ("_call", "_send"):
            original = getattr(BrokerClient, name)

            def counted(client: Any, part: Any, method: Any, *rest: Any, _original: Any = original) -> Any:
                if self.on:
                    self.counts[getattr(method, "name", str(method))] += 1
                return _original(client, part, method, *rest)

            setattr(BrokerClient, name, counted)


def status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _mib(kib: int) -> float:
    return round(kib / 1024, 1)


# --- the driver child ---------------------------------------------------------------------------------

def _source_options(master: str, web_urls: str, topic: str, extra: list[str]) -> dict[str, str]:
    options = {"master": master, "topic": topic, "group": f"scale-{uuid.uuid4().hex[:8]}",
               "startingOffsets": "earliest", **dict(item.split("=", 1) for item in extra)}
    if web_urls:
        options["masterWebUrl"] = web_urls
    return options


def driver_child(args: argparse.Namespace) -> int:
    """Stand for Spark's driver-side Python process of one query; talk to the parent over stdin/stdout."""
    connects = ConnectCounter()
    rpcs = RpcCounter()
    import tracemalloc

    from tubespark.spark.stream_engine import StreamEngine
    from tubespark.tubemq.spark.source import TubeMQDataSource

    rss_base = status_kib("VmRSS")
    if args.tracemalloc:  # the memory run: Python's allocations from here on (it slows every call: not timed)
        tracemalloc.start()
    source = TubeMQDataSource(_source_options(args.master, args.web_urls, args.topic, args.option))
    reader = source.streamReader(source.schema())
    assert isinstance(reader, StreamEngine)

    def say(doc: dict[str, Any]) -> None:
        print(json.dumps(doc), flush=True)

    t0 = time.perf_counter()
    connects.on = True
    start = reader.initialOffset()
    connects.on = False
    start_s = time.perf_counter() - t0
    start_connects = connects.total()
    start_by_address = dict(connects.counts)
    connects.counts.clear()
    limit = reader.getDefaultReadLimit()
    rss_started = status_kib("VmRSS")
    say({"ready": len(reader.broker.member.assigned()), "start_s": round(start_s, 3), "start_connects": start_connects,
         "start_connects_by_address": start_by_address})
    plans: list[float] = []
    latest: list[float] = []
    commits: list[float] = []
    tasks_per_trigger: list[int] = []
    first = dict(start)
    for index in range(args.triggers + args.warmup):
        if sys.stdin.readline().strip() != "go":
            return 1
        if index == args.warmup:
            connects.on = rpcs.on = True
        t0 = time.perf_counter()
        end = reader.latestOffset(start, limit)
        t1 = time.perf_counter()
        tasks = reader.partitions(start, end) if end != start else []
        t2 = time.perf_counter()
        reader.commit(end)
        t3 = time.perf_counter()
        if index >= args.warmup:
            plans.append(t2 - t0)
            latest.append(t1 - t0)
            commits.append(t3 - t2)
            tasks_per_trigger.append(len(tasks))
        start = end
        say({"trigger": index})
    connects.on = rpcs.on = False
    traced = tracemalloc.get_traced_memory() if args.tracemalloc else (0, 0)
    held = established_tcp()
    # what an executor gets: the reader as Spark pickles it, and one batch over the whole backlog
    backlog = reader.partitions(first, start)
    Path(args.tasks_file).write_bytes(pickle.dumps((reader, backlog)))
    say({
        "plan_ms": [round(x * 1000, 2) for x in plans],
        "latest_offset_ms": [round(x * 1000, 2) for x in latest],
        "commit_ms": [round(x * 1000, 2) for x in commits],
        "tasks_per_trigger": tasks_per_trigger,
        "steady_connects": connects.total(),
        "steady_rpcs": dict(rpcs.counts),
        "steady_connects_by_address": dict(connects.counts),
        "held_connections": len(held),
        "held_by_address": dict(Counter(held)),
        "rss_base_mib": _mib(rss_base), "rss_started_mib": _mib(rss_started),
        "rss_end_mib": _mib(status_kib("VmRSS")), "rss_peak_mib": _mib(status_kib("VmHWM")),
        "traced_kib": round(traced[0] / 1024, 1), "traced_peak_kib": round(traced[1] / 1024, 1),
    })
    sys.stdin.readline()  # the parent says when to leave the group
    reader.stop()
    return 0


# --- the executor child -------------------------------------------------------------------------------

def executor_child(args: argparse.Namespace) -> int:
    """Stand for one executor Python worker running every task of one batch, one after another."""
    connects = ConnectCounter()
    reader, tasks = pickle.loads(Path(args.tasks_file).read_bytes())
    before = set(established_tcp())
    peak = 0
    rows = 0
    connects.on = True
    t0 = time.perf_counter()
    for task in tasks:
        for batch in reader.read(task):
            rows += batch.num_rows
            peak = max(peak, len([c for c in established_tcp() if c not in before]))
    seconds = time.perf_counter() - t0
    connects.on = False
    print(json.dumps({"tasks": len(tasks), "rows": rows, "connects": connects.total(),
                      "brokers": len(connects.counts), "peak_open": peak, "seconds": round(seconds, 2)}),
          flush=True)
    return 0


# --- the parent ---------------------------------------------------------------------------------------

@dataclass
class SizeResult:
    partitions: int
    start_s: float = 0.0
    plan_ms: list[float] = field(default_factory=list)
    latest_offset_ms: list[float] = field(default_factory=list)
    commit_ms: list[float] = field(default_factory=list)
    driver: dict[str, Any] = field(default_factory=dict)
    executor: dict[str, Any] = field(default_factory=dict)

    def median(self, name: str) -> float:
        values: list[float] = getattr(self, name)
        return float(statistics.median(values))

    def p95(self, name: str) -> float:
        values = sorted(getattr(self, name))
        return float(values[min(len(values) - 1, round(0.95 * (len(values) - 1)))])


def _child(mode: str, args: argparse.Namespace, extra: list[str]) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "testbed"), env.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-m", "bench.scale", f"--{mode}", *extra], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _answer(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"the bench child ended (exit {proc.wait()})")
    doc: dict[str, Any] = json.loads(line)
    return doc


def _driver_run(args: argparse.Namespace, common: list[str], topic: str, partitions: int, triggers: int,
                send_round: Callable[[str, int], None], then: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """One driver child through ``triggers`` steady triggers (new data before each); ``then`` runs before it
    leaves its group (the executor child reads while the driver still holds the partitions)."""
    driver = _child("driver", args, common)
    assert driver.stdin is not None
    try:
        ready = _answer(driver)
        if ready["ready"] != partitions:
            raise RuntimeError(f"the query was assigned {ready['ready']} of {partitions} partitions")
        for _ in range(triggers + args.warmup):
            send_round(topic, args.per_trigger)
            driver.stdin.write("go\n")
            driver.stdin.flush()
            _answer(driver)
        doc = _answer(driver)
        doc.update(start_s=ready["start_s"], start_connects=ready["start_connects"],
                   start_connects_by_address=ready["start_connects_by_address"])
        then()
        driver.stdin.write("stop\n")
        driver.stdin.flush()
        driver.wait(timeout=60)
        return doc
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def measure(master: str, web_urls: str, topic: str, partitions: int, args: argparse.Namespace,
            send_round: Callable[[str, int], None]) -> SizeResult:
    """One size: the driver child's timed triggers with new data in between, the executor child's reads of
    what they planned, then a second driver child under tracemalloc (:data:`TRACED_TRIGGERS` triggers)."""
    result = SizeResult(partitions)
    with tempfile.TemporaryDirectory(prefix="tubespark-scale-") as tmp:
        tasks_file = str(Path(tmp) / "tasks.pickle")
        common = ["--master", master, "--web-urls", web_urls or "", "--topic", topic, "--tasks-file", tasks_file,
                  "--warmup", str(args.warmup), *(f"--option={item}" for item in args.option)]

        def executor() -> None:
            proc = _child("executor", args, common)
            result.executor = _answer(proc)
            proc.wait(timeout=60)

        doc = _driver_run(args, [*common, "--triggers", str(args.triggers)], topic, partitions, args.triggers,
                          send_round, executor)
        result.plan_ms, result.latest_offset_ms = doc.pop("plan_ms"), doc.pop("latest_offset_ms")
        result.commit_ms, result.start_s = doc.pop("commit_ms"), doc.pop("start_s")
        result.driver = doc
        traced = _driver_run(args, [*common, "--triggers", str(TRACED_TRIGGERS), "--tracemalloc"], topic,
                             partitions, TRACED_TRIGGERS, send_round)
        result.driver.update(traced_kib=traced["traced_kib"], traced_peak_kib=traced["traced_peak_kib"])
    log.info("%d partitions: plan median %.1f ms, executor connects %s, driver RSS %.1f MiB, traced %.0f KiB",
             partitions, result.median("plan_ms"), result.executor.get("connects"),
             result.driver.get("rss_end_mib", 0), result.driver["traced_kib"])
    return result


def _growth(value: float, base: float) -> str:
    return f"{value / base:5.2f}x" if base else "  -  "


def report(results: list[SizeResult], doc: dict[str, Any]) -> str:
    """The table: each figure, its ratio to the smallest size (the baseline) and its cost per partition."""
    base = results[0]
    lines = [f"TubeMQ stream source at scale: {BROKERS} brokers, {PARTITIONS_PER_STORE} partitions per store; "
             f"{doc['triggers']} steady triggers after {doc['warmup']} warm-up, {doc['per_trigger']} new messages "
             f"per partition between triggers; baseline = {base.partitions} partitions "
             f"(growth = figure / baseline's; partitions grow "
             + ", ".join(f"{r.partitions / base.partitions:.0f}x" for r in results[1:]) + ")",
             f"{'partitions':>10} {'plan med ms':>12} {'p95 ms':>8} {'ms/part':>8} {'growth':>7} "
             f"{'commit med':>10} {'RPC/trig':>8} {'start s':>8} {'start conn':>10} {'drv conn':>8} {'conn/trig':>9} "
             f"{'exec conn':>9} {'/task':>6} {'open max':>8} {'RSS MiB':>8} {'peak':>6} {'heap KiB':>8} {'growth':>7} "
             f"{'KiB/extra part':>14}"]
    base_mem = base.driver["traced_kib"]
    for r in results:
        plan = r.median("plan_ms")
        mem = r.driver["traced_kib"]
        ex = r.executor
        lines.append(
            f"{r.partitions:>10} {plan:>12.1f} {r.p95('plan_ms'):>8.1f} {plan / r.partitions:>8.2f} "
            f"{_growth(plan, base.median('plan_ms')):>7} {r.median('commit_ms'):>10.1f} "
            f"{sum(r.driver['steady_rpcs'].values()) / doc['triggers']:>8.0f} {r.start_s:>8.2f} "
            f"{r.driver['start_connects']:>10} {r.driver['held_connections']:>8} "
            f"{r.driver['steady_connects'] / doc['triggers']:>9.2f} "
            f"{ex['connects']:>9} {ex['connects'] / max(1, ex['tasks']):>6.2f} {ex['peak_open']:>8} "
            f"{r.driver['rss_end_mib']:>8.1f} {r.driver['rss_peak_mib']:>6.1f} {mem:>8.0f} {_growth(mem, base_mem):>7} "
            + (f"{(mem - base_mem) / (r.partitions - base.partitions):>14.1f}" if r is not base else f"{'-':>14}"))
    lines.append("plan = latestOffset + partitions per trigger; commit = commit(end); RPC/trig = broker requests "
                 "per steady trigger (plan and commit); start s, start conn = initialOffset's seconds and TCP "
                 "connects; drv conn = established TCP connections the driver process holds after the triggers; "
                 "conn/trig = its connects per steady trigger; exec conn = "
                 "connects of one executor process reading one batch of every partition (tasks in turn); open max "
                 "= most of its connections open at once; RSS, peak = the driver process's RSS after the triggers and "
                 "its high-water mark (VmHWM); heap = Python memory the source holds after its steady triggers "
                 "(tracemalloc from before the reader was made, in a second, untimed run); KiB/extra part = its growth "
                 "per partition above the baseline")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", default=",".join(map(str, DEFAULT_SIZES)),
                   help=f"topic sizes, each a multiple of {BROKERS * PARTITIONS_PER_STORE}")
    p.add_argument("--triggers", type=int, default=30, help="measured triggers per size")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured triggers first")
    p.add_argument("--fill", type=int, default=50, help="messages per partition before the query starts")
    p.add_argument("--per-trigger", type=int, default=2, help="new messages per partition before each trigger")
    p.add_argument("--size", type=int, default=100, help="message bytes")
    p.add_argument("--tubemq-master", default=None,
                   help="an existing 3-broker cluster's master host:port (topics scale_<N> deployed on each "
                        "broker); default: start a local one")
    p.add_argument("--web-urls", default=None, help="with --tubemq-master: its masterWebUrl")
    p.add_argument("--topics", default=None,
                   help="with --tubemq-master: the topics to measure, one per --partitions size, smallest first "
                        "(default scale_<N>)")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a further option of the measured stream, e.g. maxBytesPerTrigger=1m (repeatable)")
    p.add_argument("--out", type=Path, default=None, help="JSON output")
    p.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--executor", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--master", help=argparse.SUPPRESS)
    p.add_argument("--topic", help=argparse.SUPPRESS)
    p.add_argument("--tasks-file", help=argparse.SUPPRESS)
    p.add_argument("--tracemalloc", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


@dataclass
class _Producer:
    """Sends rounds of messages to every partition of a topic, each acknowledged before the round returns."""

    master: str
    size: int
    producers: dict[str, Any] = field(default_factory=dict)

    def round(self, topic: str, per_partition: int) -> None:
        from tubespark.tubemq.wire.message import OutgoingMessage

        producer = self.producers[topic]
        futures = [producer.send_async(topic, OutgoingMessage(os.urandom(self.size // 2).hex().encode()), part)
                   for part in producer.partitions(topic) for _ in range(per_partition)]
        for future in futures:
            future.result(timeout=60)

    def open(self, topic: str) -> None:
        from tubespark.tubemq.client.common import ClientSettings
        from tubespark.tubemq.client.producer import Producer

        producer = Producer(self.master, ClientSettings(heartbeat_interval_s=2)).start()
        producer.publish([topic])
        self.producers[topic] = producer

    def close(self) -> None:
        for producer in self.producers.values():
            producer.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.driver:
        return driver_child(args)
    if args.executor:
        return executor_child(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("tubespark", "tubespark_testbed"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    sizes = sorted(int(x) for x in args.partitions.split(",") if x.strip())
    step = BROKERS * PARTITIONS_PER_STORE
    if not sizes or any(n % step for n in sizes):
        raise SystemExit(f"--partitions: each size must be a multiple of {step}")
    sys.path[:0] = [str(ROOT / "testbed")]
    started = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    topics = {n: f"scale_{n}" for n in sizes}
    if args.topics:
        names = [t.strip() for t in args.topics.split(",") if t.strip()]
        if len(names) != len(sizes):
            raise SystemExit("--topics: one topic per --partitions size")
        topics = dict(zip(sizes, names, strict=True))
    cluster = None
    producer = None
    try:
        if args.tubemq_master is None:
            from tubespark_testbed import LocalCluster

            cluster = LocalCluster(brokers=BROKERS, topics=[(topics[n], PARTITIONS_PER_STORE,
                                                             n // step) for n in sizes])
            cluster.start()
            master, web_urls = cluster.master_address, ",".join(cluster.master_web_urls)
        else:
            master, web_urls = args.tubemq_master, args.web_urls or ""
        setup_s = time.monotonic() - t0
        producer = _Producer(master, args.size)
        for n in sizes:
            producer.open(topics[n])
            got = len(producer.producers[topics[n]].partitions(topics[n]))
            if got != n:
                raise RuntimeError(f"{topics[n]} has {got} partitions, expected {n}")
            producer.round(topics[n], args.fill)
        results = [measure(master, web_urls, topics[n], n, args, producer.round) for n in sizes]
    finally:
        if producer is not None:
            producer.close()
        if cluster is not None:
            cluster.stop()
    doc: dict[str, Any] = {
        "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": git_commit(),
        "command": " ".join(["python", "-m", "bench.scale", *(argv if argv is not None else sys.argv[1:])]),
        "host": {"cpus": os.cpu_count(), "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                 "python": platform.python_version(), "platform": platform.platform()},
        "brokers": BROKERS, "partitions_per_store": PARTITIONS_PER_STORE, "triggers": args.triggers,
        "warmup": args.warmup, "fill": args.fill, "options": args.option, "per_trigger": args.per_trigger,
        "message_bytes": args.size,
        "setup_s": round(setup_s, 1), "total_s": round(time.monotonic() - t0, 1),
        "results": [{"partitions": r.partitions, "start_s": r.start_s, "plan_ms": r.plan_ms,
                     "plan_median_ms": r.median("plan_ms"), "plan_p95_ms": r.p95("plan_ms"),
                     "latest_offset_ms": r.latest_offset_ms, "commit_ms": r.commit_ms, "driver": r.driver,
                     "executor": r.executor} for r in results],
    }
    print()
    print(report(results, doc))
    print(f"commit {doc['commit']}, {doc['started']}, {os.cpu_count()} CPUs, load {doc['host']['loadavg_end']}, "
          f"set-up {doc['setup_s']} s, total {doc['total_s']} s")
    if args.out is not None:
        args.out.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
