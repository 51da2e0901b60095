"""Lanes of cluster tests on one machine: which lane a test module runs in, and the quiet turns between them.

``./dev test`` runs the cluster tests in three pytest processes at once (``TUBESPARK_LANE=main``, ``side`` and
``long``; with ``TUBESPARK_LANES=2``, the long lane's modules run in the main lane; with ``TUBESPARK_LANES=1``, one
process runs them all), each with its own session clusters and Spark session. The side lane takes the modules that
spend most of their time waiting on a server's fixed timers (a TubeMQ master's hold on a restarted broker, heartbeat
timeouts, a 60 s stall), so their waits overlap the main lane's CPU-bound Spark work instead of adding to the run.
The long lane takes a few long modules on servers of their own (the rolling soak: minutes of brokers and masters
stopped and restarted under two queries; the bench smoke; a standalone Spark cluster), which overlap both other
lanes instead of lengthening theirs.

A test that times its triggers, measures recovery or bounds a latency (``PRESTART_QUIET`` on its module, or the
``quiet`` marker, in ``tests/integration``) must not share the machine with the other lane's tests.
:class:`QuietTurns` keeps them apart with two ``flock``ed files: every other test holds the turn lock shared; a
quiet test holds it exclusively (from the first of a run of quiet tests to the next test that is not), so it
waits for the other lane's test under way and the other lane waits for it. The quiet lane takes the intent lock
exclusively first, and a shared turn passes through that lock, so the other lane cannot slip one test after
another past a waiting quiet test. A process that dies lets go of its locks with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

LANE_ENV = "TUBESPARK_LANE"
LOCK_ENV = "TUBESPARK_LANE_LOCK"
COUNT_ENV = "TUBESPARK_LANES"
MAIN, SIDE, LONG = "main", "side", "long"

SIDE_MODULES = frozenset({
    # each has a cluster of its own, killed, stalled or restarted under a query, and waits out the server's timers
    "tubemq/test_faults_driver.py", "tubemq/test_network_faults.py",
    "tubemq/test_masters.py", "tubemq/test_local_cluster.py", "tubemq/test_data_loss.py", "tubemq/test_tls.py",
    # on the lane's own session cluster: waits for rebalances, new topics' holds, a killed broker's release
    "tubemq/test_user_mistakes.py", "tubemq/test_bad_input.py", "tubemq/test_kafka_conventions.py",
    "tubemq/test_client_rebalance.py", "tubemq/test_client_roundtrip.py", "tubemq/test_lag_cli.py",
    "tubemq/test_stream_source.py", "tubemq/test_java_client_smoke.py", "tubemq/test_java_interop.py",
    "tubemq/test_batch_and_sink.py", "tubemq/test_quiet_stop.py", "tubemq/test_offset_boundary.py",
    # waits for a processing-time trigger's interval boundary, then for a Java consumer of the group
    "tubemq/test_group_handover.py",
    # a RocketMQ stack of its own (two broker groups), stopped and crashed under queries: waits on its brokers
    "rocketmq/test_broker_groups.py",
})
"""Paths under ``tests/integration`` of the side lane's modules; every other module runs in the main lane."""

CONNECT_SERVER_MODULES = frozenset({"spark/test_connect.py", "spark/test_pipelines.py"})
"""Modules that start a local Spark Connect server (``remote("local")``, ``spark-pipelines run``): it binds Connect's
default port, 15002, and its client connects there, so two at once would clash or talk to the other's server. They
run in one lane, one after the other (tests/unit/tooling/test_lanes.py holds this)."""


LONG_MODULES = frozenset({
    # the bench at smoke size (~4 minutes with its own TubeMQ cluster and Kafka broker, in the background from the
    # lane's start): in the side lane it was the longest item of the run's longest lane (2,010 s at 5a8687a)
    "core/test_bench_smoke.py",
    # a Spark master and worker of their own (~1.5 minutes), out of the main lane
    "spark/test_standalone_cluster.py",
    # the rolling soak (~4 minutes, mostly waiting on restarted brokers and a master fail-over, on its own clusters)
    "tubemq/test_soak.py",
    # the README's walkthrough and the notebooks (about a minute each, in kernels and sessions of their own), the
    # wheels' venv with the oldest PySpark (~3 minutes), and the three brokers killed and restarted under queries
    # (~4 minutes, mostly waiting on the master's hold): at a3b8013+ the main and side lanes took 1,755 s and
    # 1,821 s, the long lane 984 s
    "core/test_readme_example.py", "core/test_notebooks.py", "core/test_wheel.py", "tubemq/test_brokers.py",
})
"""Paths under ``tests/integration`` of the long lane's modules (the main lane's when there are two lanes)."""


def lane() -> str | None:
    """This process's lane, or ``None`` when one process runs every cluster test."""
    value = os.environ.get(LANE_ENV, "").strip()
    if value and value not in (MAIN, SIDE, LONG):
        raise ValueError(f"{LANE_ENV}={value!r}: expected {MAIN!r}, {SIDE!r} or {LONG!r}")
    return value or None


def lane_count() -> int:
    """How many lanes ``./dev test`` runs: 3 unless ``TUBESPARK_LANES`` says 1 or 2."""
    value = os.environ.get(COUNT_ENV, "").strip() or "3"
    if value not in ("1", "2", "3"):
        raise ValueError(f"{COUNT_ENV}={value!r}: expected 1, 2 or 3")
    return int(value)


def lane_of(relative_path: str, count: int = 3) -> str:
    """The lane of the module at ``relative_path`` (under ``tests/integration``) when ``count`` lanes run."""
    if relative_path in SIDE_MODULES:
        return SIDE
    if relative_path in LONG_MODULES and count >= 3:
        return LONG
    return MAIN


def in_lane(relative_path: str, which: str, count: int = 3) -> bool:
    """Whether the module at ``relative_path`` (under ``tests/integration``) runs in lane ``which``."""
    return lane_of(relative_path, count) == which


class QuietTurns:
    """The locks between the lanes (module docstring): :meth:`test` around each test of this process."""

    def __init__(self, path: Path) -> None:
        self._turn = open(path, "a+")  # noqa: SIM115 - held for the whole session, closed by close()
        self._intent = open(path.with_name(path.name + ".intent"), "a+")  # noqa: SIM115 - the same
        self._quiet = False

    @contextlib.contextmanager
    def test(self, *, quiet: bool) -> Iterator[None]:
        if quiet:
            if not self._quiet:
                fcntl.flock(self._intent, fcntl.LOCK_EX)  # the other lane starts no test from now on
                fcntl.flock(self._turn, fcntl.LOCK_EX)  # and the test it runs ends first
                self._quiet = True
            yield
            return
        if self._quiet:
            fcntl.flock(self._turn, fcntl.LOCK_UN)
            fcntl.flock(self._intent, fcntl.LOCK_UN)
            self._quiet = False
        fcntl.flock(self._intent, fcntl.LOCK_SH)  # waits while the other lane runs (or waits to run) a quiet test
        fcntl.flock(self._turn, fcntl.LOCK_SH)
        fcntl.flock(self._intent, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self._turn, fcntl.LOCK_UN)

    def close(self) -> None:
        self._turn.close()  # lets go of any lock
        self._intent.close()
