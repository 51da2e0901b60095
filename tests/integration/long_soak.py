"""The long soak of issue 37 ("guarantees without conditions", part 7): one run by hand, its figures quoted, not CI.

    flock /tmp/tubespark-integration.lock env PYTHONPATH=.:testbed python3 -m tests.integration.long_soak
        [--messages 1000000] [--messages-b N] [--rate R] [--kills 10] [--outage-s 600] [--seed S] [--out FILE]
        [--keep] [--deferral shared|none]

The small run that checks the script itself (about 10 minutes on a loaded 2-core machine, 3 more when something
is lost: the drain retries until ``DRAIN_S``)::

    ... python3 -m tests.integration.long_soak --messages 50000 --kills 2 --outage-s 60

The full run takes about 25 minutes: ~1.5 min to start both clusters, 1,000 s of producing (1,000/s, every fault
inside it), then the catch-up, drains and counts of 1.1 million rows.

Not a pytest test on purpose: CI fails every skipped test (tests/conftest.py), so the long runs exist only
behind a switch (``TUBESPARK_SOAK=long`` in test_soak.py); this one is never collected at all, and its verdict is
its exit code (0: every figure below is 0) and the JSON it writes.

**Shape** (the worst defect of issue 37 needed exactly this: two queries of the *same consumer group* on *two
clusters*, drivers on one host, a broker of one cluster killed under a running batch; the queries share one
``deferredRangesPath`` (``--deferral shared``, the default; ``none``: neither sets one, tubespark's default, and
read tasks wait for a down broker), and the partition keys ``<brokerId>:<topic>:<partition>`` of cluster B's broker
are those of cluster A's first broker):

* cluster A: 3 brokers (127.0.0.1-3, topic ``longsoak`` with 2 stores x 1 partition each), 2 masters (active +
  standby, ZooKeeper session 6 s so the standby takes over quickly); cluster B: 1 broker (broker id 1, like A's
  first), the same topic. Both without the brokers' memory cache (``enableMemStore=false``): a kill -9 loses
  nothing acknowledged, so any loss is the connector's (and acknowledged-but-not-held is checked to be 0 too).
* a producer per cluster sends sequence-numbered messages at a steady rate over the whole run (B's numbers start
  at 900,000,000, so a row of one cluster in the other's sink is seen);
* a streaming query per cluster (tests/integration/soak_job.py: its own process and Spark driver, ``group`` the
  same name on both, ``masterWebUrl`` set, a checkpointed parquet sink);
* faults on cluster A, in order: a rolling restart of every broker (SIGTERM, start, wait until the master serves
  it again); the first broker (the one whose partition keys B shares) killed -9 and kept down ``--outage-s``;
  15 s into that outage the active master killed -9 (the standby takes over; the old one comes back as standby);
* ``--kills`` kill -9s of a query's whole process group (driver JVM and Python workers), alternately A's and
  B's, at seeded random moments spread over the faults, each restarted from its checkpoint at once. A query
  process that ends any other way is a *query death*: recorded with its log, restarted, and the run fails.

At the end each running query catches up with its brokers and is killed, an AvailableNow drain of each reads
what is left (from the same checkpoint into the same sink), and the sink is compared with what the brokers hold,
read with the client's exact range reader (the ground truth does not use the Spark reader under test). Per
cluster and in total: **lost** (held, not in the sink), **duplicated** (in the sink more than once),
**read_not_held** (in the sink, not held: another cluster's row or an invented one), **broker_lost** (acknowledged,
not held), **held_twice**, **query deaths**: each must be 0, and every planned kill must have been done. Printed
and written as JSON (``--out``, default ``$TMPDIR/tubespark-long-soak-<UTC time>.json``) with the run's date,
commit, machine, command, parameters, seed and event timeline.

Everything started is stopped on exit, on failure and on Ctrl-C/SIGTERM/SIGHUP (the queries run in their own
process groups and are killed as groups; the clusters' JVMs are stopped; a kill -9 of this script itself cannot
be cleaned up). The work dir (checkpoints, sinks, the logs of dead queries) is removed after a passing run and
kept after a failing one (or with ``--keep``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from tubespark_testbed import LocalCluster

from bench.provenance import git_commit
from tests.integration.tubemq.test_soak import (
    Job,
    Progress,
    SteadyProducer,
    _drain,
    _flush_settings,
    _rolling_settings,
    _sink_rows,
    broker_max_offsets,
    topic_seqs,
)
from tubespark.tubemq.client.producer import SendResult

TOPIC = "longsoak"
B_FIRST = 900_000_000  # cluster B's first sequence number (A's is 0; seq_body holds up to 999,999,999)
OUTAGE_BROKER = "broker"  # cluster A's first broker: broker id 1, like cluster B's only broker
MASTER_KILL_AFTER_S = 15.0  # into the broker outage
SETTLE_S = 20.0  # both queries reading, before the first fault
PAUSE_S = 10.0  # between two broker restarts of the rolling restart, and around the outage
FAULTS_OVERHEAD_S = 400.0  # run time besides the outage: start-up, rolling restart (~45 s a broker), tail
CATCH_UP_S = 300.0
DRAIN_S = 180.0  # drains repeat until the sink holds what the brokers hold, at most this long
MAX_DEATHS = 20  # a query that keeps dying at start-up ends the run instead of looping


@dataclass(frozen=True)
class Params:
    messages: int
    messages_b: int
    rate: float
    kills: int
    outage_s: float
    seed: int
    deferral: str = "shared"
    """``shared``: both queries defer into one ``deferredRangesPath`` (each under its own token); ``none``: the
    default, their read tasks wait for a down broker."""

    @property
    def rate_b(self) -> float:
        """B's rate: its messages over A's production time."""
        return self.rate * self.messages_b / self.messages

    @property
    def produce_s(self) -> float:
        return self.messages / self.rate


def parse_params(argv: list[str]) -> tuple[Params, Path, bool]:
    parser = argparse.ArgumentParser(prog="python -m tests.integration.long_soak", description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="to cluster A (default 1,000,000)")
    parser.add_argument("--messages-b", type=int, help="to cluster B (default a tenth of --messages)")
    parser.add_argument("--rate", type=float, help="A's messages per second (default: --messages spread over "
                        f"--outage-s + {FAULTS_OVERHEAD_S:.0f} s, so the producer runs through every fault)")
    parser.add_argument("--kills", type=int, default=10, help="query kill -9s, alternately A's and B's (default 10)")
    parser.add_argument("--outage-s", type=float, default=600.0, help="how long A's first broker stays down "
                        "(default 600)")
    parser.add_argument("--seed", type=int, help="of the query kills' moments (default random; printed)")
    parser.add_argument("--out", type=Path, help="the JSON figures (default $TMPDIR/tubespark-long-soak-<time>.json)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir after a passing run too")
    parser.add_argument("--deferral", choices=("shared", "none"), default="shared",
                        help="shared (default): both queries set one deferredRangesPath, so a task on a down broker "
                             "leaves the rest of its range to later batches; none: tubespark's default, tasks wait")
    args = parser.parse_args(argv)
    if args.messages < 1000 or args.kills < 0 or args.outage_s < 2 * MASTER_KILL_AFTER_S:
        parser.error(f"need --messages >= 1000, --kills >= 0 and --outage-s >= {2 * MASTER_KILL_AFTER_S:.0f} "
                     "(the master is killed 15 s into the outage)")
    messages_b = args.messages_b if args.messages_b is not None else max(1000, args.messages // 10)
    if messages_b < 1:
        parser.error("--messages-b must be >= 1")
    rate = args.rate or args.messages / (args.outage_s + FAULTS_OVERHEAD_S)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or Path(tempfile.gettempdir()) / f"tubespark-long-soak-{stamp}.json"
    return Params(args.messages, messages_b, rate, args.kills, args.outage_s, seed, args.deferral), out, args.keep


# --- the run's record ------------------------------------------------------------------------------


class Timeline:
    """What happened when, in seconds since the run began (printed as it happens, kept for the JSON)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.events: list[str] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, text: str) -> None:
        line = f"{self.now():7.1f}s {text}"
        with self._lock:
            self.events.append(line)
        print(f"[long-soak] {line}", flush=True)


# --- the queries -----------------------------------------------------------------------------------


def kill_group(job: Job) -> None:
    """kill -9 a run's whole process group (driver JVM, Python driver, Python workers), even after its leader
    exited by itself (a worker could outlive it), and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.proc.pid, signal.SIGKILL)
    job.kill()


class Query:
    """One cluster's streaming query over its runs (soak_job.py processes): kill -9 + restart on purpose, and any
    other end of a run (a *death*) recorded with its log and restarted."""

    def __init__(self, name: str, cluster: LocalCluster, group: str, work: Path, timeline: Timeline) -> None:
        self.name, self.cluster, self.group, self.work, self.timeline = name, cluster, group, work, timeline
        work.mkdir(parents=True)
        self.log: list[str] = []
        self.jobs: list[Job] = []
        self.killed: set[int] = set()  # ids of the jobs killed on purpose
        self.deaths: list[dict[str, Any]] = []
        self.kills = 0
        self.start()

    def start(self) -> None:
        self.jobs.append(Job(self.cluster, self.group, self.work, "run", self.log, topic=TOPIC, web=True))

    @property
    def job(self) -> Job:
        return self.jobs[-1]

    def progress(self) -> list[Progress]:
        return [p for job in self.jobs for p in job.progress]

    def reading(self) -> bool:
        """The current run has finished a batch that read rows (a kill then interrupts a stream, not a start)."""
        return any(p.rows for p in self.job.progress)

    def kill(self, *, restart: bool = True) -> None:
        self.killed.add(id(self.job))
        kill_group(self.job)
        if restart:
            self.kills += 1
            self.start()

    def check(self) -> None:
        """A run that ended without being killed is a death: keep its log, restart from the checkpoint."""
        job = self.job
        if job.alive() or id(job) in self.killed:
            return
        kill_group(job)
        why = [line for line in self.log if line.startswith(("query failed", "sink query stopped"))]
        path = self.work / f"death-{len(self.deaths) + 1}.log"
        path.write_text("\n".join(self.log) + "\n")
        self.deaths.append({"at_s": round(self.timeline.now(), 1), "exit": job.proc.returncode,
                            "why": why[-1] if why else "", "log": str(path)})
        self.timeline.note(f"query {self.name} DIED (exit {job.proc.returncode}): {why[-1] if why else '?'}; "
                           f"log {path}; restarting")
        if len(self.deaths) >= MAX_DEATHS:
            raise RuntimeError(f"query {self.name} died {len(self.deaths)} times; giving up")
        self.start()

    def stop_all(self) -> None:
        """Kill every run (idempotent) and keep the runs' whole log (Spark's errors, the job's lines) beside them."""
        for job in self.jobs:
            self.killed.add(id(job))
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                kill_group(job)
        with contextlib.suppress(OSError):
            (self.work / "job.log").write_text("\n".join(self.log) + "\n")


class Supervisor(threading.Thread):
    """Watches both queries (deaths) and does the planned query kills at their moments, beside the cluster
    faults the main thread does: a kill may land in a restart, the outage or the fail-over."""

    def __init__(self, queries: list[Query], kill_at: list[tuple[float, Query]], timeline: Timeline) -> None:
        super().__init__(daemon=True, name="long-soak-supervisor")
        self.queries, self.pending, self.timeline = queries, list(kill_at), timeline
        self.done_kills = 0
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.wait(0.5):
                for query in self.queries:
                    query.check()
                if self.pending and self.timeline.now() >= self.pending[0][0]:
                    _, query = self.pending[0]
                    # kill a stream that reads, not a run still starting (up to 120 s late for one that is slow)
                    if query.reading() or self.timeline.now() >= self.pending[0][0] + 120:
                        self.pending.pop(0)
                        query.kill()
                        self.done_kills += 1
                        self.timeline.note(f"query {query.name} kill -9 #{query.kills} (process group), "
                                           "restarted from its checkpoint")
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which fails the run
            self.error = exc

    def stop(self) -> None:
        self._stop_event.set()
        self.join(60)

    def raise_error(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the supervisor failed: {self.error!r}") from self.error


def kill_plan(params: Params, queries: list[Query]) -> list[tuple[float, Query]]:
    """The query kills: one in each of ``kills`` equal slots over the faults' span, at a seeded random point of
    the slot's middle 60 %; alternately A's and B's (A first)."""
    rng = random.Random(params.seed)
    first = 60.0 + SETTLE_S  # ~ when both queries read and the first fault begins
    span = params.outage_s + FAULTS_OVERHEAD_S - 200.0 - first  # to about the outage's end
    slot = span / max(1, params.kills)
    return [(first + slot * (i + rng.uniform(0.2, 0.8)), queries[i % 2]) for i in range(params.kills)]


# --- the cluster faults (main thread) --------------------------------------------------------------


def wait_reading(queries: list[Query], supervisor: Supervisor, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(q.reading() for q in queries):
        supervisor.raise_error()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the queries read nothing for {timeout_s:.0f} s after the start")
        time.sleep(0.5)


def sleep_watching(seconds: float, supervisor: Supervisor) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        supervisor.raise_error()
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def rolling_restart(cluster: LocalCluster, timeline: Timeline, supervisor: Supervisor) -> None:
    for name in cluster.broker_names:
        began = time.monotonic()
        stop_s = cluster.terminate(name)
        accepting = cluster.start_again(name, new_registration=True)
        timeline.note(f"A {name}: SIGTERM (exited in {stop_s:.1f}s), started: accepting after {accepting:.1f}s, "
                      f"served again after {time.monotonic() - began:.0f}s")
        sleep_watching(PAUSE_S, supervisor)


def outage_with_failover(cluster: LocalCluster, outage_s: float, timeline: Timeline,
                         supervisor: Supervisor) -> dict[str, float]:
    """A's first broker down ``outage_s`` (kill -9), the active master killed -9 ``MASTER_KILL_AFTER_S`` into it."""
    down_at = time.monotonic()
    down_wall = time.time()
    cluster.kill(OUTAGE_BROKER)
    timeline.note(f"A {OUTAGE_BROKER}: kill -9, stays down {outage_s:.0f}s")
    sleep_watching(MASTER_KILL_AFTER_S, supervisor)
    old = cluster.active_master()
    if old is None:
        raise RuntimeError("no active master before the master kill")
    began = time.monotonic()
    cluster.kill(old)
    while (new := cluster.active_master()) in (None, old):
        supervisor.raise_error()
        if time.monotonic() - began > 120:
            raise RuntimeError("the standby master never took over")
        time.sleep(0.2)
    took_over = time.monotonic() - began
    cluster.start_again(old)
    timeline.note(f"A {old}: kill -9, {new} active after {took_over:.1f}s, {old} back as standby")
    sleep_watching(outage_s - (time.monotonic() - down_at), supervisor)
    up_wall = time.time()
    accepting = cluster.start_again(OUTAGE_BROKER, new_registration=True)
    timeline.note(f"A {OUTAGE_BROKER}: started after {up_wall - down_wall:.0f}s down: accepting after "
                  f"{accepting:.1f}s, served again after {time.time() - up_wall:.0f}s")
    return {"down": down_wall, "up": up_wall, "failover_s": took_over}


# --- the end: catch up, drain, count ---------------------------------------------------------------


def catch_up(query: Query, producer: SteadyProducer, supervisor: Supervisor, timeline: Timeline) -> None:
    """Wait until the running query's last batch ends where the brokers' partitions end (bounded: the drain reads
    whatever is left anyway)."""
    ends = broker_max_offsets(query.cluster, list(producer.acked.values()))
    deadline = time.monotonic() + CATCH_UP_S
    while time.monotonic() < deadline:
        supervisor.raise_error()
        last = query.job.progress[-1].ends if query.job.progress else {}
        if all(last.get(key, -1) >= end for key, end in ends.items()):
            timeline.note(f"query {query.name} caught up")
            return
        time.sleep(1)
    timeline.note(f"query {query.name} not caught up after {CATCH_UP_S:.0f}s; the drain reads the rest")


def spark_session() -> Any:
    """A local[2] session for the drains and the sink reads, as the tests' (tests/conftest.py): started only now, so
    no third Spark driver competes with the two queries during the run."""
    from pyspark.sql import SparkSession

    import tubespark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[2]").appName("tubespark-long-soak")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    tubespark.register(session)
    return session


def by_partition(seqs: Iterable[int], acked: dict[int, SendResult]) -> dict[str, dict[str, int]]:
    """Where messages sat: per partition key, how many and their lowest and highest offset (what a lost stretch
    is matched against: a broker's restart, a deferred range)."""
    spans: dict[str, dict[str, int]] = {}
    for seq in seqs:
        result = acked.get(seq)
        key, offset = (result.partition.key, result.append_offset) if result is not None else ("not acknowledged", -1)
        span = spans.setdefault(key, {"count": 0, "first_offset": offset, "last_offset": offset})
        span["count"] += 1
        span["first_offset"] = min(span["first_offset"], offset)
        span["last_offset"] = max(span["last_offset"], offset)
    return dict(sorted(spans.items()))


def drain_and_count(spark: Any, query: Query, producer: SteadyProducer, timeline: Timeline) -> dict[str, Any]:
    """Drain (AvailableNow, repeated until the sink holds what the brokers hold or DRAIN_S passed: a killed run's
    consumer keeps its partitions until the master times it out) and count against the brokers."""
    held = topic_seqs(query.cluster.master_address, TOPIC)
    held_set = set(held)
    deadline = time.monotonic() + DRAIN_S
    drains = 0
    drain_error = ""
    while True:
        try:
            _drain(spark, query.cluster, query.group, query.work, TOPIC, web=True)
        except Exception as exc:  # noqa: BLE001 - a failed drain is a figure of the run, not the end of the count
            drain_error = f"{type(exc).__name__}: {exc}"
            timeline.note(f"query {query.name}: drain {drains + 1} failed: {drain_error}")
        drains += 1
        got = collections.Counter(seq for seq, _, _ in _sink_rows(spark, query.work / "out"))
        if held_set <= set(got) or time.monotonic() > deadline:
            break
        time.sleep(5)
    timeline.note(f"query {query.name}: drained ({drains} AvailableNow run(s))")
    acked = set(producer.acked)
    missing = sorted(held_set - set(got))
    duplicated = {seq: n for seq, n in got.items() if n > 1}
    progress = query.progress()
    return {
        "produced": producer.produced, "acknowledged": len(acked), "send_failures": len(producer.failed),
        "send_errors": dict(producer.errors),
        "held_by_brokers": len(held), "held_distinct": len(held_set), "held_twice": len(held) - len(held_set),
        "sink_rows": sum(got.values()), "sink_distinct": len(got),
        "lost": len(missing), "lost_examples": missing[:10],
        "lost_by_partition": by_partition(missing, producer.acked),
        "duplicated": len(duplicated), "duplicate_rows": sum(n - 1 for n in duplicated.values()),
        "duplicated_examples": sorted(duplicated)[:10],
        "duplicated_by_partition": by_partition(duplicated, producer.acked),
        "read_not_held": len(set(got) - held_set), "broker_lost_acknowledged": len(acked - held_set),
        "query_runs": len(query.jobs), "query_kills": query.kills, "query_deaths": len(query.deaths),
        "deaths": query.deaths, "batches": len(progress), "drains": drains, "drain_error": drain_error,
    }


# --- provenance --------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    mem_gb = 0.0
    with contextlib.suppress(OSError, ValueError, StopIteration):
        kb = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
        mem_gb = round(int(kb.split()[1]) / 1024 / 1024, 1)
    return {"host": platform.node(), "os": platform.platform(), "cpus": os.cpu_count(), "cpu_model": model,
            "memory_gb": mem_gb, "python": platform.python_version(), "load_average_at_start": os.getloadavg()}


def command() -> str:
    return " ".join(shlex.quote(arg) for arg in sys.orig_argv)


# --- the run -------------------------------------------------------------------------------------------


@dataclass
class Result:
    date: str
    commit: str
    machine: dict[str, Any]
    command: str
    params: dict[str, Any]
    shape: dict[str, Any]
    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)
    outage: dict[str, Any] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    failure: str = ""
    passed: bool = False


def _raise_on_signal(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop everything


class Run:
    """One long soak: the clusters, producers, queries and the supervisor, and what stops them all."""

    def __init__(self, params: Params, work: Path, result: Result) -> None:
        self.params, self.work, self.result = params, work, result
        self.timeline = Timeline()
        self.group = "longsoak" + uuid.uuid4().hex[:8]  # the same name on both clusters; new per run
        self.queries: list[Query] = []
        self.producers: list[SteadyProducer] = []
        self.supervisor: Supervisor | None = None
        self.spark: Any = None

    def stop_all(self) -> None:
        """Everything but the clusters (their ExitStack stops them after this): idempotent, best effort."""
        if self.supervisor is not None:
            self.supervisor.stop()
        for query in self.queries:
            query.stop_all()
        for producer in self.producers:
            with contextlib.suppress(Exception):
                producer.close()
        if self.spark is not None:
            with contextlib.suppress(Exception):
                self.spark.stop()
            self.spark = None
        self.result.events = self.timeline.events

    def run(self) -> None:
        params, result, timeline = self.params, self.result, self.timeline
        result.shape = {"group": self.group, "topic": TOPIC,
                        "cluster_a": "3 brokers (127.0.0.1-3, ids 1-3), 2 masters",
                        "cluster_b": "1 broker (127.0.0.1, id 1), 1 master", "partitions_a": 6, "partitions_b": 2,
                        "flush": "nomem (enableMemStore=false)", "outage_broker": f"A {OUTAGE_BROKER} (id 1)",
                        "deferred_ranges": ("one deferredRangesPath shared by both queries"
                                            if params.deferral == "shared"
                                            else "none (the default: read tasks wait for a down broker)"),
                        "kills_planned": params.kills}
        with contextlib.ExitStack() as stack:
            timeline.note("starting cluster A (3 brokers, 2 masters), then cluster B (1 broker)")
            cluster_a = stack.enter_context(LocalCluster(settings=_rolling_settings("nomem"), brokers=3, masters=2,
                                                         topics=[(TOPIC, 1, 2)]))
            cluster_b = stack.enter_context(LocalCluster(settings=_flush_settings("nomem"), topics=[(TOPIC, 1, 2)]))
            stack.callback(self.stop_all)  # runs before the clusters stop
            timeline.note(f"clusters up: A masters {cluster_a.master_address}, B master {cluster_b.master_address}")
            timeline.t0 = time.monotonic()  # the schedule counts from the load's start
            self.producers = [
                SteadyProducer(cluster_a.master_address, TOPIC, params.messages, params.rate).start(),
                SteadyProducer(cluster_b.master_address, TOPIC, params.messages_b, params.rate_b,
                               first=B_FIRST).start()]
            if params.deferral == "shared":  # soak_job.py reads it: one directory for both queries
                os.environ["TUBESPARK_SOAK_DEFERRED_RANGES_PATH"] = str(self.work / "deferred-ranges")
            else:
                os.environ.pop("TUBESPARK_SOAK_DEFERRED_RANGES_PATH", None)
            self.queries = queries = [Query("A", cluster_a, self.group, self.work / "a", timeline),
                                      Query("B", cluster_b, self.group, self.work / "b", timeline)]
            plan = kill_plan(params, queries)
            timeline.note(f"producing {params.messages} to A at {params.rate:.0f}/s and {params.messages_b} to B at "
                          f"{params.rate_b:.0f}/s; query kills planned at "
                          + ", ".join(f"{at:.0f}s {q.name}" for at, q in plan))
            self.supervisor = supervisor = Supervisor(queries, plan, timeline)
            supervisor.start()
            wait_reading(queries, supervisor)
            timeline.note("both queries read")
            sleep_watching(SETTLE_S, supervisor)
            rolling_restart(cluster_a, timeline, supervisor)
            sleep_watching(PAUSE_S, supervisor)
            marks = outage_with_failover(cluster_a, params.outage_s, timeline, supervisor)
            deadline = time.monotonic() + 2 * params.produce_s + 600
            for producer in self.producers:
                while not producer.done():
                    supervisor.raise_error()
                    if time.monotonic() > deadline:
                        raise RuntimeError("the producers did not finish in time")
                    producer.join(5)
            timeline.note("producers done")
            while supervisor.pending:  # a kill planned late (the steps ran long) is still done
                supervisor.raise_error()
                time.sleep(1)
            for query, producer in zip(queries, self.producers, strict=True):
                catch_up(query, producer, supervisor, timeline)
            supervisor.stop()
            supervisor.raise_error()
            for query in queries:
                query.check()  # a death in the supervisor's last half second
                query.stop_all()
            result.shape["kills_done"] = supervisor.done_kills
            timeline.note("queries stopped (kill -9); draining")
            self.spark = spark_session()
            for name, query, producer in zip("AB", queries, self.producers, strict=True):
                result.clusters[name] = drain_and_count(self.spark, query, producer, timeline)
            during = [p.rows for p in queries[0].progress() if marks["down"] < p.at < marks["up"]]
            result.outage = {"broker": f"A {OUTAGE_BROKER}", "down_s": round(marks["up"] - marks["down"], 1),
                             "master_failover_s": round(marks["failover_s"], 1),
                             "a_rows_read_while_down": sum(during),
                             "a_nonempty_batches_while_down": sum(1 for rows in during if rows)}


def verdict(result: Result) -> None:
    totals = {key: sum(int(c[key]) for c in result.clusters.values())
              for key in ("lost", "duplicated", "read_not_held", "broker_lost_acknowledged", "held_twice",
                          "query_deaths", "query_kills", "held_by_brokers", "sink_rows")}
    result.totals = totals
    bad = [key for key in ("lost", "duplicated", "read_not_held", "broker_lost_acknowledged", "held_twice",
                           "query_deaths") if totals[key]]
    bad += [f"{name} drain failed" for name, c in result.clusters.items() if c["drain_error"]]
    if result.clusters and result.shape.get("kills_done") != result.shape.get("kills_planned"):
        bad.append("not every planned query kill was done")
    result.passed = not bad and not result.failure and len(result.clusters) == 2
    if bad:
        result.failure = (result.failure + "; " if result.failure else "") + "non-zero: " + ", ".join(bad)


def report(result: Result, out: Path) -> None:
    print("\n[long-soak] " + "-" * 100)
    print(f"[long-soak] {result.date} commit {result.commit} on {result.machine['host']} "
          f"({result.machine['cpus']} cpus, {result.machine['cpu_model']}, {result.machine['memory_gb']} GB)")
    print(f"[long-soak] command: {result.command}")
    print(f"[long-soak] params: {result.params}")
    for name, c in result.clusters.items():
        print(f"[long-soak] cluster {name}: produced={c['produced']} acknowledged={c['acknowledged']} "
              f"send_failures={c['send_failures']} held_by_brokers={c['held_by_brokers']} "
              f"sink_rows={c['sink_rows']} (distinct {c['sink_distinct']}) | lost={c['lost']} "
              f"duplicated={c['duplicated']} read_not_held={c['read_not_held']} "
              f"broker_lost_acknowledged={c['broker_lost_acknowledged']} held_twice={c['held_twice']} | "
              f"query kills={c['query_kills']} deaths={c['query_deaths']} runs={c['query_runs']} "
              f"batches={c['batches']} drains={c['drains']}")
        for what in ("lost", "duplicated"):
            if c[f"{what}_by_partition"]:
                print(f"[long-soak] cluster {name} {what} by partition: {c[f'{what}_by_partition']}")
    if result.outage:
        print(f"[long-soak] outage: {result.outage}")
    print(f"[long-soak] totals: {result.totals}")
    print(f"[long-soak] wall {result.wall_s:.0f}s; {'PASSED' if result.passed else 'FAILED: ' + result.failure}")
    out.write_text(json.dumps(asdict(result), indent=2) + "\n")
    print(f"[long-soak] figures: {out}")


def main(argv: list[str] | None = None) -> int:
    params, out, keep = parse_params(sys.argv[1:] if argv is None else argv)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_on_signal)
    work = Path(tempfile.mkdtemp(prefix="tubespark-long-soak-"))
    began = time.monotonic()
    result = Result(date=datetime.now(UTC).isoformat(timespec="seconds"), commit=git_commit(), machine=machine(),
                    command=command(), params=asdict(params) | {"rate_b": params.rate_b}, shape={})
    print(f"[long-soak] seed={params.seed} work dir {work}", flush=True)
    interrupted: BaseException | None = None
    try:
        Run(params, work, result).run()
    except Exception as exc:  # noqa: BLE001 - the run failed: still report what it has
        traceback.print_exc()
        result.failure = f"{type(exc).__name__}: {exc}"
    except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C, SIGTERM, SIGHUP: everything is stopped by now
        result.failure = f"interrupted ({type(exc).__name__} {exc})"
        interrupted = exc
    result.wall_s = time.monotonic() - began
    result.machine["load_average_at_end"] = os.getloadavg()
    verdict(result)
    report(result, out)
    if result.passed and not keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"[long-soak] work dir kept: {work}")
    if interrupted is not None:
        raise interrupted
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
