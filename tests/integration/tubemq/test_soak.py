"""Exactly-once soaks under faults, and TubeMQ's own durability window.

**What CI runs**: one soak, the rolling soak below, which does the steps of both soaks, plus the durability window
in its ``enableMemStore=false`` case. ``TUBESPARK_SOAK=long`` adds the one-broker soak (defined only then: CI
fails every skipped test, so it is not a skip in CI but absent), 1,000,000 messages per soak, and the durability
window's two other flush settings::

    TUBESPARK_SOAK=long pytest tests/integration/tubemq/test_soak.py -m soak_long -s
    TUBESPARK_SOAK_SEED=1234 ...                              # replay one schedule of query kills

**Rolling soak** (``test_rolling_restarts_on_three_brokers_lose_and_repeat_nothing``, issue 23 part 6; CI and long):
sequence-numbered messages go at a steady rate to a topic on 3 brokers (127.0.0.1-3, 2 stores x 1 partition each)
and 2 masters (active + standby), while a streaming query (``soak_job.py``, its own process, writing a checkpointed
parquet sink) and, in the same Spark application, a second query streaming the topic into another topic through the
TubeMQ sink run. In turn: broker 1 stopped gracefully (SIGTERM) and started again; broker 3 killed -9 and started
again at once (~1 s down, within the master's 10 s broker heartbeat timeout), its **recovery time** measured per
partition: from the broker accepting connections to the end of the first batch planned after that which reads each
of its partitions again (target <= ``RECOVERY_TARGET_S``, 15 s, asserted at three times that; with 3 brokers "the
next non-empty batch" would be met by the others' partitions, so the job prints each batch's end offset per
partition); broker 2 killed -9 and kept down (CI 45 s, long 5 minutes: past the heartbeat timeout, so the master
releases its partitions) while the active master is killed -9 and kept down until the standby serves; long only:
broker 3 stopped gracefully and started again, then broker 1 killed -9 and started again at once, measured the same.
Each graceful return waits until the master serves the broker's topics again (~33 s). The query is killed -9 (driver
JVM and Python workers: the whole process group) and restarted at seeded random moments (``TUBESPARK_SOAK_SEED``;
printed): CI twice (after broker 3's restart at once, during the outage), long 4 times. Neither query may stop. At
the end the last query catches up and is killed, an AvailableNow drain reads what is left, and what the brokers hold
(read with the client's exact range reader) is compared with the parquet sink: every held sequence number exactly
once; the TubeMQ sink's topic must hold each at least once. The report separates the brokers' loss (acknowledged,
not held: durability) from the connector's (held, not in the sink; of it, offsets a broker reused after losing their
first message). CI: 30,000 messages at 200/s (about 3 minutes); long: 1,000,000 at 1,500/s.

**One-broker soak** (``test_soak_exactly_once_under_faults``, ``TUBESPARK_SOAK=long`` only): the same producer and
parquet query on the one-broker cluster, 1,000,000 messages at 1,500/s, the query killed -9 10 times at seeded
random moments, the broker killed -9 and restarted at once twice and the master once; the same checks and report,
and the recovery time after each broker restart.

**Two clusters, one group name** (issue 37's long run: cluster A of 3 brokers and 2 masters beside a one-broker
cluster B, a query of the same group on each, rolling restart, a 10-minute broker outage, a master fail-over, 10
query kills): ``tests/integration/long_soak.py``, a script run by hand (never collected), built on the pieces here.

``TUBESPARK_SOAK_FLUSH`` picks the brokers' flush settings for both soaks: ``nomem`` (default: the broker writes
straight to its segment files, so a kill -9 loses nothing acknowledged, the test asserts it, and the check is
about the connector alone), ``tight`` (memory cache at the server's minimums) or ``default`` (the server defaults:
a broker kill -9 loses acknowledged messages, and the offsets it lost are handed to new messages after the
restart, which a query that had already read past them skips).

**Durability window** (``test_broker_kill_loses_only_the_unflushed_window``): how many acknowledged messages one
broker kill -9 loses, at the server's default flush settings and with a tight flush (those two only print
figures, so they run with ``TUBESPARK_SOAK=long``; CI runs ``nomem``, which must lose none, on the one-broker
cluster).
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from tubespark_testbed import ClusterSettings, LocalCluster

from tubespark.errors import TubeSparkError
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.client.producer import Producer, SendResult
from tubespark.tubemq.client.ranges import RangeReader, probe_bounds
from tubespark.tubemq.wire.message import OutgoingMessage

pytestmark = [pytest.mark.integration, pytest.mark.spark]

JOB = Path(__file__).resolve().parents[1] / "soak_job.py"
TOPIC = "soak"
WINDOW_TOPIC = "window"
ROLLING_TOPIC, ROLLING_SINK = "rolling", "rollout"  # on the 3-broker cluster: 2 stores x 1 partition per broker
RECOVERY_TARGET_S = 15.0
RECOVERY_BOUND_S = 3 * RECOVERY_TARGET_S
"""What the test asserts: the goal (``RECOVERY_TARGET_S``, printed beside each measured figure) three times over, so a
busy machine (the soak shares it with ./dev test's other lane) does not fail it, and a recovery that waits out a
timer of the master or broker (tens of seconds more) still does."""
LONG = os.environ.get("TUBESPARK_SOAK", "") == "long"


def _flush_settings(mode: str) -> ClusterSettings:
    base = ClusterSettings()
    return {"default": base, "tight": base.tight_flush(), "nomem": base.tight_flush(mem_store=False)}[mode]


def seq_body(seq: int) -> bytes:
    return b"seq-%09d" % seq


def body_seq(body: bytes) -> int:
    return int(body[4:])


# --- producing ------------------------------------------------------------------------------------


@dataclass
class SteadyProducer:
    """Sends ``total`` sequence-numbered messages at ``rate``/s, one thread per partition (sync sends).

    A send that fails after the producer's own retries (broker down) is counted as produced, not
    acknowledged, and the sequence moves on: the broker may or may not hold it. Sequence numbers start at
    ``first`` (``acked`` and ``failed`` hold them so): two producers on two clusters with different ``first``
    tell a row of one cluster in the other's sink apart (tests/integration/long_soak.py).
    """

    master: str
    topic: str
    total: int
    rate: float
    first: int = 0
    acked: dict[int, SendResult] = field(default_factory=dict)
    failed: set[int] = field(default_factory=set)
    errors: collections.Counter = field(default_factory=collections.Counter)
    produced: int = 0
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> SteadyProducer:
        self._producer = Producer(self.master, ClientSettings(heartbeat_interval_s=2, request_timeout_s=5),
                                  max_retries=5)
        self._producer.start()
        self._producer.publish([self.topic])
        parts = self._producer.partitions(self.topic)
        self._t0 = time.monotonic()
        for part in parts:
            t = threading.Thread(target=self._run, args=(part,), daemon=True, name=f"soak-send-{part.key}")
            self._threads.append(t)
            t.start()
        return self

    def _take(self) -> int | None:
        with self._lock:
            if self._next >= self.total or self._stop.is_set():
                return None
            seq, self._next = self._next, self._next + 1
            self.produced += 1
        return seq

    def _run(self, part) -> None:
        while (seq := self._take()) is not None:
            due = self._t0 + seq / self.rate
            if (delay := due - time.monotonic()) > 0:
                time.sleep(delay)
            number = self.first + seq
            try:
                result = self._producer.send(self.topic, OutgoingMessage(seq_body(number)), partition=part)
            except TubeSparkError as exc:
                with self._lock:
                    self.failed.add(number)
                    self.errors[type(exc).__name__] += 1
                continue
            with self._lock:
                self.acked[number] = result

    def done(self) -> bool:
        return not any(t.is_alive() for t in self._threads)

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        self._stop.set()
        self.join(30)
        self._producer.close()


def broker_max_offsets(cluster: LocalCluster, results: list[SendResult]) -> dict[str, int]:
    """``max_offset`` now of every partition some result went to."""
    broker = BrokerClient("soak-probe-" + uuid.uuid4().hex[:6])
    try:
        parts = {r.partition.key: r.partition for r in results}
        return {key: probe_bounds(broker, part, "soakprobe" + uuid.uuid4().hex[:8]).max_offset
                for key, part in parts.items()}
    finally:
        broker.close()


def acked_but_gone(cluster: LocalCluster, results: list[SendResult]) -> int:
    """Acknowledged messages at or past their partition's end now: what the broker lost."""
    ends = broker_max_offsets(cluster, results)
    return sum(1 for r in results if r.append_offset >= ends[r.partition.key])


# --- the durability window ------------------------------------------------------------------------


def measure_kill_loss(cluster: LocalCluster, topic: str, count: int) -> tuple[int, int]:
    """Send ``count`` messages as fast as acknowledgements come, kill -9 the broker right after the
    last one, restart it; return (acknowledged, acknowledged but gone)."""
    with Producer(cluster.master_address, ClientSettings(heartbeat_interval_s=2)) as producer:
        producer.publish([topic])
        for i in range(count):
            producer.send_async(topic, OutgoingMessage(seq_body(i)))
        results = producer.flush()
    cluster.kill("broker")
    cluster.restart("broker", kill=False)
    return len(results), acked_but_gone(cluster, results)


@pytest.mark.parametrize("mode", ["default", "tight", "nomem"] if LONG else ["nomem"])
def test_broker_kill_loses_only_the_unflushed_window(mode, soak_cluster):
    settings = _flush_settings(mode)
    if mode == soak_cluster.flush_mode:  # the soak's cluster has these settings: the window topic is on it
        acked, lost = measure_kill_loss(soak_cluster, WINDOW_TOPIC, 20000)
    else:
        with LocalCluster(settings=settings, topics=[(WINDOW_TOPIC, 1, 4)]) as cluster:
            time.sleep(1)
            acked, lost = measure_kill_loss(cluster, WINDOW_TOPIC, 20000)
    print(f"\n[durability] flush={mode}: broker kill -9 right after {acked} acknowledged messages "
          f"lost {lost} of them ({settings.topic_flush_params() or 'server defaults'}, "
          f"enableMemStore={settings.enable_mem_store})")
    if mode == "nomem":
        assert lost == 0, "without the memory cache a process kill must not lose acknowledged messages"
    assert lost <= acked


# --- the soak --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """One finished micro-batch of a :class:`Job`'s parquet query (a ``progress`` line of soak_job.py)."""

    batch: int
    rows: int
    at: float       # unix time the job saw it finished
    began: float    # unix time its trigger began: the batch was planned after this
    ends: dict[str, int]  # its end offset per partition key

    @classmethod
    def parse(cls, line: str) -> Progress:
        _, batch, rows, at, began, ends = line.split()
        return cls(int(batch), int(rows), float(at), float(began),
                   {} if ends == "-" else {key: int(offset) for key, _, offset in
                                           (item.partition("=") for item in ends.split(","))})


def recovery_s(progress: list[Progress], keys: list[str], accepting_at: float) -> dict[str, float | None]:
    """Per partition of a broker restarted under the query: seconds from the broker accepting connections again
    (unix time ``accepting_at``) to the end of the first batch planned after that which reads the partition past
    where the query stood then (``None``: never). Measured per partition, not as "the next non-empty batch": with
    several brokers the others' partitions fill every batch, restarted broker or not."""
    ordered = sorted(progress, key=lambda p: p.at)
    out: dict[str, float | None] = {}
    for key in keys:
        stood = max((p.ends.get(key, -1) for p in ordered if p.at <= accepting_at), default=-1)
        read = next((p.at for p in ordered if p.began >= accepting_at and p.ends.get(key, -1) > stood), None)
        out[key] = None if read is None else read - accepting_at
    return out


def _recovery_text(recovery: dict[str, float | None]) -> str:
    return ", ".join(f"{key} {'never' if s is None else f'{s:.1f}s'}" for key, s in sorted(recovery.items()))


def _recovered(recovery: dict[str, float | None]) -> bool:
    return all(s is not None and s <= RECOVERY_BOUND_S for s in recovery.values())


class Job:
    """One run of soak_job.py; collects its progress lines in the background."""

    def __init__(self, cluster: LocalCluster, group: str, work: Path, mode: str, log: list[str], *,
                 topic: str = TOPIC, sink_topic: str = "", web: bool = False) -> None:
        argv = [sys.executable, str(JOB), cluster.master_address, topic, group, str(work / "ck"),
                str(work / "out"), mode, "5000"] + ([sink_topic] if sink_topic or web else [])
        argv += [",".join(cluster.master_web_urls)] if web else []  # after SINK_TOPIC, "" for none
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.progress: list[Progress] = []
        self.log = log
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("progress "):
                self.progress.append(Progress.parse(line))
            else:
                self.log.append(line.rstrip())

    def kill(self) -> None:
        """kill -9 of the whole process group: driver JVM, Python driver and Python workers."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._reader.join(5)

    def alive(self) -> bool:
        return self.proc.poll() is None


def _drain(spark, cluster: LocalCluster, group: str, work: Path, topic: str = TOPIC, *, web: bool = False) -> None:
    """What ``soak_job.py ... drain`` runs (Trigger.AvailableNow from the killed runs' checkpoint, same options
    and sink), in the test's own Spark session: one Spark start less per drain."""
    options = {"masterWebUrl": ",".join(cluster.master_web_urls)} if web else {}
    deferred = os.environ.get("TUBESPARK_SOAK_DEFERRED_RANGES_PATH")  # the runs' own (soak_job.py), if any
    options.update({"deferredRangesPath": deferred} if deferred else {})
    query = (spark.readStream.format("tubemq").option("master", cluster.master_address).option("topic", topic)
             .options(**options)
             .option("group", group).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "5000")
             .option("heartbeatIntervalMs", "1000").load().select("value", "partitionKey", "offset")
             .writeStream.format("parquet").option("path", str(work / "out"))
             .option("checkpointLocation", str(work / "ck")).trigger(availableNow=True).start())
    assert query.awaitTermination(300), "the drain did not finish in time"
    assert query.exception() is None, query.exception()


def _sink_rows(spark, out: Path) -> list[tuple[int, str, int]]:
    if not out.exists() or not any(out.glob("*.parquet")):
        return []
    return [(body_seq(bytes(r.value)), r.partitionKey, r.offset)
            for r in spark.read.parquet(str(out)).select("value", "partitionKey", "offset").collect()]


def topic_seqs(master: str, topic: str) -> list[int]:
    """Every sequence number the broker holds for ``topic`` now (what a batch read returns), read with
    the client's exact range reader: the ground truth does not depend on the Spark reader under test."""
    with Producer(master, ClientSettings(heartbeat_interval_s=2)) as producer:
        producer.publish([topic])
        parts = producer.partitions(topic)
    broker = BrokerClient("soak-truth-" + uuid.uuid4().hex[:6])
    try:
        seqs = []
        for part in parts:
            bounds = probe_bounds(broker, part, "truth" + uuid.uuid4().hex[:8])
            reader = RangeReader(broker, "truth" + uuid.uuid4().hex[:8])
            seqs += [body_seq(m.data) for m in reader.read(part, bounds.min_offset, bounds.max_offset)]
        return seqs
    finally:
        broker.close()


def _unread_and_repeated(held: list[int], got: collections.Counter[int]) -> tuple[list[int], dict[int, int]]:
    """The connector's misses and repeats against what the brokers hold: sequence numbers read fewer times than the
    brokers hold them, and those read more often (a message held once read twice). The producer that fills the
    topic is at-least-once (a send whose answer a broker kill cut off is sent again: docs/tubemq/guide.md), so the
    brokers may hold a sequence number twice, and then the query reads it twice: that is not the query's repeat.
    Seen in CI's rolling soak: held 29,973 (distinct 29,972), read 29,973, one sequence number read twice."""
    held_count = collections.Counter(held)
    missing = sorted(s for s, c in held_count.items() if got[s] < c)
    repeated = {s: c for s, c in got.items() if c > max(held_count[s], 1)}  # (read, not held: reported apart)
    return missing, repeated


def _held(spark, master: str) -> list[int]:
    return topic_seqs(master, TOPIC)


def _plan(rng: random.Random, duration_s: float, job_kills: int) -> list[tuple[float, str]]:
    """Fault times: query kills spread at random; broker x2 and master x1 at jittered fixed points."""
    events = [(duration_s * f + rng.uniform(-3, 3), what)
              for f, what in ((0.25, "broker"), (0.5, "master"), (0.72, "broker"))]
    slots = [duration_s * (i + 0.5) / job_kills for i in range(job_kills)]
    events += [(s + rng.uniform(-0.3, 0.3) * duration_s / job_kills, "query") for s in slots]
    events.sort()
    # keep faults apart so each recovery is seen on its own: 8 s, and 25 s after a broker restart (a
    # query killed while it recovers would measure the killed members' session timeout instead)
    spaced: list[tuple[float, str]] = []
    for at, what in events:
        if spaced:
            gap = 25 if spaced[-1][1] == "broker" else 8
            at = max(at, spaced[-1][0] + gap)
        spaced.append((at, what))
    return spaced


def _rolling_settings(mode: str) -> ClusterSettings:
    """The rolling soak's cluster: the soak's flush settings, and a master group whose standby takes over 6 s
    after the active master's ZooKeeper session is gone (as in test_masters)."""
    return replace(_flush_settings(mode), zk_session_timeout_ms=6000, zk_master_check_period_ms=1000)


@contextlib.contextmanager
def _soak_clusters(_tmp: Path) -> Iterator[dict[str, LocalCluster]]:
    """The one-broker cluster (the durability window's topic when their settings agree, as in CI; with the long
    switch also the one-broker soak's), and the rolling soak's: 3 brokers on 127.0.0.1-3 and 2 masters (active +
    standby). One piece, so both start ahead of the module (a second piece would start inline: nothing starts
    beside the soak)."""
    mode = os.environ.get("TUBESPARK_SOAK_FLUSH", "nomem")
    with contextlib.ExitStack() as stack:
        single = stack.enter_context(LocalCluster(settings=_flush_settings(mode),
                                                  topics=([(TOPIC, 1, 4)] if LONG else []) + [(WINDOW_TOPIC, 1, 4)]))
        rolling = stack.enter_context(LocalCluster(settings=_rolling_settings(mode), brokers=3, masters=2,
                                                   topics=[(ROLLING_TOPIC, 1, 2), (ROLLING_SINK, 1, 2)]))
        for cluster in (single, rolling):
            cluster.flush_mode = mode  # type: ignore[attr-defined]
        yield {"soak": single, "rolling": rolling}


# Started ahead of this module (tubespark_testbed/prestart.py). Not quiet: the soak's promises (nothing lost or
# repeated, recovery within RECOVERY_BOUND_S) hold on a busy machine, so ./dev test's other lane runs beside it.
PRESTART = {"soak_clusters": _soak_clusters}
PRESTART_LIGHT = True  # clusters: mostly waiting while they start, so they may start beside another


@pytest.fixture(scope="module")
def soak_cluster(prestarted) -> LocalCluster:
    return prestarted("soak_clusters")["soak"]


@pytest.fixture(scope="module")
def rolling_cluster(prestarted) -> LocalCluster:
    return prestarted("soak_clusters")["rolling"]


def _soak_size() -> tuple[int, float, int]:
    """(messages, rate per second, query kills) of the one-broker soak, which runs with the long switch only."""
    return 1_000_000, 1500.0, 10


def _soak_exactly_once_under_faults(spark, soak_cluster, tmp_path):
    """The one-broker soak (``TUBESPARK_SOAK=long`` only: CI's rolling soak does its steps): query kills at seeded
    random moments, the broker killed -9 and restarted at once twice, the master once; every message the broker
    holds in the sink once, each broker restart's recovery within RECOVERY_BOUND_S (the goal: RECOVERY_TARGET_S)."""
    cluster = soak_cluster
    total, rate, job_kills = _soak_size()
    seed = _seed()
    rng = random.Random(seed)
    duration = total / rate
    plan = _plan(rng, duration, job_kills)
    group = "soak" + uuid.uuid4().hex[:8]
    job_log: list[str] = []
    print(f"\n[soak] seed={seed} messages={total} rate={rate:.0f}/s flush={cluster.flush_mode} plan="
          + ", ".join(f"{what}@{at:.0f}s" for at, what in plan))

    t_start = time.monotonic()
    producer = SteadyProducer(cluster.master_address, TOPIC, total, rate).start()
    job = Job(cluster, group, tmp_path, "run", job_log)
    jobs = [job]
    restarts: list[tuple[str, float]] = []  # (what, wall time its RPC port accepted connections)
    events: list[str] = []
    try:
        for at, what in plan:
            while time.monotonic() - t_start < at:
                if not job.alive():
                    raise AssertionError("the streaming query died:\n" + "\n".join(job_log[-60:]))
                time.sleep(0.2)
            stamp = time.monotonic() - t_start
            if what == "query":
                job.kill()
                job = Job(cluster, group, tmp_path, "run", job_log)
                jobs.append(job)
                events.append(f"{stamp:.0f}s query kill -9 + restart")
            else:
                name = "broker" if what == "broker" else (cluster.active_master() or "master")
                cluster.kill(name)
                time.sleep(1.0)  # a real outage: clients notice before the process is back
                wall = time.time()
                accepting = cluster.restart(name, kill=False)
                restarts.append((what, wall + accepting))
                events.append(f"{stamp:.0f}s {what} kill -9, back in {accepting:.1f}s "
                              f"(serving after {time.time() - wall:.1f}s)")
        producer.join(duration * 2 + 120)
        produced_s = time.monotonic() - t_start
        # let the running query catch up, then stop it and drain what is left
        deadline = time.monotonic() + 90
        last_rows = -1
        while time.monotonic() < deadline and job.alive():
            time.sleep(3)
            rows = sum(p.rows for p in job.progress)
            if rows == last_rows and rows > 0:
                break
            last_rows = rows
        query_died = not job.alive()
        job.kill()
    finally:
        producer.close()
        for j in jobs:
            j.kill()
    if query_died:
        raise AssertionError("the streaming query died:\n" + "\n".join(job_log[-80:]))

    held = _held(spark, cluster.master_address)
    held_set = set(held)
    deadline = time.monotonic() + 180
    while True:  # killed members' partitions come back once the servers time them out
        _drain(spark, cluster, group, tmp_path)
        sink = _sink_rows(spark, tmp_path / "out")
        got = collections.Counter(seq for seq, _, _ in sink)
        if held_set.issubset(got) or time.monotonic() > deadline:
            break
        time.sleep(5)

    acked = producer.acked
    missing, dup = _unread_and_repeated(held, got)
    broker_lost = sorted(set(acked) - held_set)
    read_not_held = sorted(set(got) - held_set)
    # a held message missing from the sink whose (partition, offset) the sink holds for another
    # message: the broker lost that offset's first message in a kill and reused the offset
    by_position = {(p, o): s for s, p, o in sink}
    position = {s: (r.partition.key, r.append_offset) for s, r in acked.items()}
    reused = [s for s in missing if s in position and by_position.get(position[s], s) != s]

    all_progress = [p for j in jobs for p in j.progress]
    keys = sorted({r.partition.key for r in acked.values()})
    recoveries = [recovery_s(all_progress, keys, accept_at) for what, accept_at in restarts if what == "broker"]

    print(f"[soak] events: {'; '.join(events)}")
    print(f"[soak] produced={producer.produced} acknowledged={len(acked)} send_failures={len(producer.failed)} "
          f"{dict(producer.errors)} in {produced_s:.0f}s")
    print(f"[soak] held_by_broker={len(held)} (distinct {len(held_set)}) read_into_sink={sum(got.values())} "
          f"(distinct {len(got)})")
    print(f"[soak] lost_by_connector={len(missing)} (of which offset reused after a broker loss: "
          f"{len(reused)}) duplicated={len(dup)} broker_lost_acknowledged={len(broker_lost)} "
          f"read_then_lost_by_broker={len(read_not_held)} held_twice_by_broker={len(held) - len(held_set)}")
    print("[soak] recovery after broker restarts (accepting -> a batch planned after it reads each partition "
          "again): " + "; ".join(_recovery_text(r) for r in recoveries) + f" (target <= {RECOVERY_TARGET_S:.0f}s)")
    assert not missing, f"{len(missing)} held messages never reached the sink, e.g. {missing[:10]}"
    assert not dup, f"{len(dup)} messages written twice, e.g. {list(dup.items())[:10]}"
    assert all(_recovered(r) for r in recoveries), recoveries


if LONG:  # only with the long switch: defined in CI it would be a skip, and CI fails every skip (tests/conftest.py)
    test_soak_exactly_once_under_faults = pytest.mark.soak_long(_soak_exactly_once_under_faults)


# --- the rolling soak: 3 brokers, 2 masters --------------------------------------------------------


@dataclass(frozen=True)
class RollingSize:
    total: int          # messages
    rate: float         # per second
    outage_s: float     # how long broker-2 stays down after its crash


def _rolling_size() -> RollingSize:
    if LONG:
        return RollingSize(1_000_000, 1500.0, 300.0)
    # CI: the steps themselves take ~2.5 min (each graceful return waits out the master's ~30 s hold on the broker's
    # topics); the rate keeps the producer running through all of them
    return RollingSize(30_000, 200.0, 45.0)


@dataclass(frozen=True)
class Step:
    """One step of the rolling soak: ``what`` to process ``name``, ``delay`` seconds after ``after``: ``"start"``
    (the run's start), ``""`` (the end of the step before it) or an earlier step's :attr:`key` (its start)."""

    after: str
    delay: float
    what: str
    name: str = ""

    @property
    def key(self) -> str:
        return f"{self.what} {self.name}".strip()

    def __str__(self) -> str:
        return f"{self.key}@{self.after or 'prev'}+{self.delay:.0f}s"


def _rolling_plan(size: RollingSize, rng: random.Random) -> list[Step]:
    """The steps in order, the query kills at seeded random moments in their windows (``TUBESPARK_SOAK_SEED``).

    ``restart``: graceful stop (SIGTERM), start, wait until the master serves the broker again. ``bounce``: kill -9,
    start again after ~1 s (within the master's heartbeat timeout), wait until the query reads the broker's
    partitions again (the recovery time). ``crash``: kill -9, down until ``up`` (past the heartbeat timeout, so the
    master releases its partitions). ``master``: kill -9 the active master, down until the standby serves. Steps
    block, so a step starts at its time or when the one before it is done, whichever is later; a query kill is kept
    out of a bounce's recovery (a query restarting would be measured instead)."""
    duration = size.total / size.rate
    crash = "crash broker-2"
    if not LONG:
        return [Step("start", 0.05 * duration, "restart", "broker"),
                Step("", 2, "bounce", "broker-3"),
                Step("", rng.uniform(1, 6), "query"),
                Step("", 5, "crash", "broker-2"),
                Step(crash, 10, "master"),
                Step(crash, size.outage_s * rng.uniform(0.45, 0.75), "query"),  # the master is back by then
                Step(crash, size.outage_s, "up", "broker-2")]
    return [Step("start", 0.05 * duration, "restart", "broker"),
            Step("", 2, "bounce", "broker-3"),
            Step("", rng.uniform(5, 0.1 * duration), "query"),
            Step("start", 0.3 * duration, "crash", "broker-2"),
            Step(crash, 10, "master"),
            Step(crash, size.outage_s * rng.uniform(0.2, 0.45), "query"),
            Step(crash, size.outage_s * rng.uniform(0.55, 0.8), "query"),
            Step(crash, size.outage_s, "up", "broker-2"),
            Step("", 1, "restart", "broker-3"),
            Step("", 5, "bounce", "broker"),
            Step("", rng.uniform(5, 0.1 * duration), "query")]


@dataclass(frozen=True)
class Bounce:
    """A broker killed -9 and started again at once: its partitions' keys and when it accepted connections again."""

    name: str
    keys: list[str]
    accepting_at: float  # unix time


class RollingRun:
    """The running query (a :class:`Job` with the TubeMQ sink beside it) and the cluster steps of one rolling soak."""

    def __init__(self, cluster: LocalCluster, work: Path) -> None:
        self.cluster = cluster
        self.work = work
        self.group = "roll" + uuid.uuid4().hex[:8]
        self.log: list[str] = []
        self.jobs: list[Job] = []
        self.events: list[str] = []
        self.marks: dict[str, float] = {}  # step key -> unix time the step began
        self.started: dict[str, float] = {"start": time.monotonic()}  # step key -> monotonic time it began
        self.bounces: list[Bounce] = []
        self.t0 = self.last_end = time.monotonic()
        self.new_job()

    def new_job(self) -> None:
        self.jobs.append(Job(self.cluster, self.group, self.work, "run", self.log, topic=ROLLING_TOPIC,
                             sink_topic=ROLLING_SINK, web=True))

    @property
    def job(self) -> Job:
        return self.jobs[-1]

    def progress(self) -> list[Progress]:
        return [p for job in self.jobs for p in job.progress]

    def check_alive(self, during: str) -> None:
        if not self.job.alive():
            (self.work / "job.log").write_text("\n".join(self.log) + "\n")
            why = [line for line in self.log if line.startswith(("query failed", "sink query stopped"))]
            raise AssertionError(f"the streaming query or its sink stopped ({during}; the job's whole log: "
                                 f"{self.work / 'job.log'}):\n" + "\n".join(why + self.log[-40:]))

    def wait_for(self, step: Step) -> None:
        anchor = self.last_end if not step.after else self.started[step.after]
        while time.monotonic() < anchor + step.delay:
            self.check_alive("waiting for the next step")
            time.sleep(0.2)

    def run(self, step: Step) -> None:
        self.wait_for(step)
        stamp = time.monotonic() - self.t0
        began = self.started[step.key] = time.monotonic()
        self.marks[step.key] = time.time()
        note = self._do(step.what, step.name, began)
        self.last_end = time.monotonic()
        self.events.append(f"{stamp:.0f}s {note}")
        self.check_alive(note)

    def _do(self, what: str, name: str, began: float) -> str:
        cluster = self.cluster
        if what == "query":
            self.job.kill()
            self.new_job()
            return "query kill -9 + restart"
        if what == "restart":
            stop_s = cluster.terminate(name)
            accepting = cluster.start_again(name, new_registration=True)
            return (f"{name} graceful stop ({stop_s:.1f}s), start: accepting after {accepting:.1f}s, "
                    f"serving after {time.monotonic() - began:.0f}s")
        if what == "bounce":
            return self._bounce(name)
        if what == "crash":
            cluster.kill(name)
            return f"{name} kill -9 (stays down)"
        if what == "up":
            accepting = cluster.start_again(name, new_registration=True)
            return f"{name} start: accepting after {accepting:.1f}s, serving after {time.monotonic() - began:.0f}s"
        old = cluster.active_master()
        assert old is not None, "no active master before the master kill"
        cluster.kill(old)
        while (new := cluster.active_master()) in (None, old):
            assert time.monotonic() - began < 90, "the standby never took over"
            time.sleep(0.2)
        took_over = time.monotonic() - began
        cluster.start_again(old)  # back as a standby
        return f"{old} kill -9, {new} active after {took_over:.1f}s, {old} back as standby"

    def _bounce(self, name: str) -> str:
        """kill -9 ``name``, start it again after ~1 s (a real outage: clients notice before the process is back;
        still within the master's heartbeat timeout), then wait until the query reads each of its partitions again,
        so the next step does not overlap the recovery it measures."""
        deadline = time.monotonic() + 120
        while not any(p.rows for p in self.job.progress):  # the query reads before the broker goes
            self.check_alive("waiting for the query to read before a bounce")
            assert time.monotonic() < deadline, "the query read nothing for 120 s before the bounce"
            time.sleep(0.2)
        prefix = f"{self.cluster.broker(name).broker_id}:{ROLLING_TOPIC}:"
        keys = sorted({key for p in self.progress() for key in p.ends if key.startswith(prefix)})
        assert keys, f"the query's offsets name no partition of {name} ({prefix}*)"
        self.cluster.kill(name)
        time.sleep(1.0)
        wall = time.time()
        accepting = self.cluster.start_again(name, new_registration=False)
        bounce = Bounce(name, keys, wall + accepting)
        self.bounces.append(bounce)
        deadline = time.monotonic() + RECOVERY_BOUND_S + 15
        while None in (recovery := recovery_s(self.progress(), keys, bounce.accepting_at)).values():
            self.check_alive(f"{name}'s recovery")
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        return f"{name} kill -9, started again at once: accepting after {accepting:.1f}s, read again: " + \
            _recovery_text(recovery)

    def kill_all(self) -> None:
        for job in self.jobs:
            job.kill()


def _seed() -> int:
    return int(os.environ.get("TUBESPARK_SOAK_SEED", str(random.randrange(1 << 30))))


@(pytest.mark.soak_long if LONG else lambda f: f)
def test_rolling_restarts_on_three_brokers_lose_and_repeat_nothing(spark, rolling_cluster, tmp_path):
    """Every broker restarted in turn (graceful stops, one crash restarted at once, one crash down for longer than
    the master's broker heartbeat timeout), the active master killed and kept down until the standby serves, the
    query killed and restarted at seeded random moments: the stream and its TubeMQ sink never stop, the sink holds
    every message the brokers hold, once, and a broker restarted at once has its partitions read again within
    RECOVERY_BOUND_S (the goal, RECOVERY_TARGET_S, is printed). Brokers without the memory cache (``nomem``, CI): a
    broker loses nothing acknowledged, so any loss would be the connector's."""
    cluster = rolling_cluster
    size = _rolling_size()
    seed = _seed()
    plan = _rolling_plan(size, random.Random(seed))
    duration = size.total / size.rate
    print(f"\n[rolling] seed={seed} messages={size.total} rate={size.rate:.0f}/s brokers=3 masters=2 "
          f"flush={cluster.flush_mode} outage={size.outage_s:.0f}s plan=" + ", ".join(map(str, plan)))
    producer = SteadyProducer(cluster.master_address, ROLLING_TOPIC, size.total, size.rate).start()
    run = RollingRun(cluster, tmp_path)
    try:
        for step in plan:
            run.run(step)
        producer.join(duration * 2 + 120)
        produced_s = time.monotonic() - run.t0
        # the last query catches up: the parquet query until its last batch ends where the brokers' partitions end,
        # the TubeMQ sink until it holds what the source holds
        held = topic_seqs(cluster.master_address, ROLLING_TOPIC)
        ends = broker_max_offsets(cluster, list(producer.acked.values()))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            run.check_alive("catching up")
            last = run.job.progress[-1].ends if run.job.progress else {}
            if (all(last.get(key, -1) >= end for key, end in ends.items())
                    and set(held) <= set(topic_seqs(cluster.master_address, ROLLING_SINK))):
                break
            time.sleep(1)
        run.check_alive("catching up")
        caught_up_s = time.monotonic() - run.t0
    finally:
        producer.close()
        run.kill_all()

    held_set = set(held)
    deadline = time.monotonic() + 180
    while True:  # killed members' partitions come back once the master times them out
        _drain(spark, cluster, run.group, tmp_path, ROLLING_TOPIC, web=True)
        sink = _sink_rows(spark, tmp_path / "out")
        got = collections.Counter(seq for seq, _, _ in sink)
        if held_set <= set(got) or time.monotonic() > deadline:
            break
        time.sleep(5)
    relayed = collections.Counter(topic_seqs(cluster.master_address, ROLLING_SINK))
    checked_s = time.monotonic() - run.t0

    acked = set(producer.acked)
    broker_lost = acked - held_set
    missing, dup = _unread_and_repeated(held, got)
    relay_missing = sorted(held_set - set(relayed))
    # a held message missing from the sink whose (partition, offset) the sink holds for another message: a broker
    # lost that offset's first message in a kill and reused the offset (only with the memory cache on)
    by_position = {(p, o): s for s, p, o in sink}
    position = {s: (r.partition.key, r.append_offset) for s, r in producer.acked.items()}
    reused = [s for s in missing if s in position and by_position.get(position[s], s) != s]
    per_broker = collections.Counter(r.partition.broker_id for r in producer.acked.values())
    progress = run.progress()
    recoveries = [(b, recovery_s(progress, b.keys, b.accepting_at)) for b in run.bounces]
    # the other brokers' partitions keep flowing while broker 2 is down (progress lines carry unix times)
    down, up = run.marks["crash broker-2"], run.marks["up broker-2"]
    during = [p.rows for p in progress if down < p.at < up]
    print(f"[rolling] events: {'; '.join(run.events)}")
    print(f"[rolling] produced={producer.produced} acknowledged={len(acked)} "
          f"(per broker {dict(sorted(per_broker.items()))}) send_failures={len(producer.failed)} "
          f"{dict(producer.errors)} in {produced_s:.0f}s; the queries caught up at {caught_up_s:.0f}s, drained and "
          f"checked at {checked_s:.0f}s")
    print(f"[rolling] held_by_brokers={len(held)} (distinct {len(held_set)}) read_into_sink={sum(got.values())} "
          f"(distinct {len(got)}) in {len(progress)} batches over {len(run.jobs)} query runs")
    print(f"[rolling] lost_by_brokers(durability)={len(broker_lost)} lost_by_connector={len(missing)} (of which "
          f"offset reused after a broker loss: {len(reused)}) duplicated={len(dup)} "
          f"read_not_held={len(set(got) - held_set)}")
    print("[rolling] recovery after a kill -9 restarted at once (accepting -> a batch planned after it reads the "
          "broker's partition again): " + "; ".join(f"{b.name}: {_recovery_text(r)}" for b, r in recoveries)
          + f" (target <= {RECOVERY_TARGET_S:.0f}s)")
    print(f"[rolling] while broker-2 was down ({up - down:.0f}s): {sum(during)} rows read from the others in "
          f"{sum(1 for rows in during if rows)} non-empty batches")
    print(f"[rolling] TubeMQ sink topic (at-least-once): holds {len(relayed)} distinct, missing {len(relay_missing)}, "
          f"written twice {sum(1 for c in relayed.values() if c > 1)}")
    assert not missing, f"{len(missing)} held messages never reached the sink, e.g. {missing[:10]}"
    assert not dup, f"{len(dup)} messages written twice, e.g. {list(dup.items())[:10]}"
    assert not relay_missing, (f"{len(relay_missing)} held messages never reached the TubeMQ sink, "
                               f"e.g. {relay_missing[:10]}")
    assert len(held) == len(held_set), "a broker holds a message twice"
    assert recoveries and all(_recovered(r) for _, r in recoveries), recoveries
    # not asserted: a micro-batch planned just before the crash has a range on broker 2, and its read task
    # waits for that broker (up to outageTimeoutMs), holding the whole stream; after a query kill the
    # replayed batch waits the same way. Whether rows flow during the outage depends on that timing (4,609
    # rows in one run, 0 in another), so it is printed, not checked
    if cluster.flush_mode == "nomem":
        assert not broker_lost, f"without the memory cache the brokers lost {len(broker_lost)} acknowledged messages"
