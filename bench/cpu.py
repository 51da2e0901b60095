"""CPU seconds per role, from ``/proc/<pid>/stat``, around one timed run: what a row costs, not only how fast.

Why: rows/s on a shared 2-core machine says little about what a read costs once the machine is busy; CPU
seconds per row does. Roles:

* ``spark_jvm``      - the Spark JVM this session started (local mode: driver and executors in one);
* ``python_workers`` - every Python process under that JVM (``pyspark.daemon`` and the workers it forks,
  the planners);
* ``broker``         - the broker the case reads from or writes to (TubeMQ's broker JVM, or Kafka's).

A process's CPU is ``utime + stime`` of itself plus ``cutime + cstime`` (its children it has reaped), summed
over the living processes of a role: a worker that exits during the run moves its time into its parent's
``c*time``, so the delta between two snapshots still counts it exactly once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(ppid, CPU seconds of the process and its reaped children)."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # after "(comm)": state ppid ... utime(12) stime(13) cutime(14) cstime(15), counted from state = 0
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / TICKS


def _cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _table() -> dict[int, tuple[int, float]]:
    out = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                out[int(entry.name)] = stat
    return out


def spark_jvm_pid(root: int | None = None) -> int | None:
    """The Spark JVM: the ``java`` process under this one whose command line runs SparkSubmit."""
    table = _table()
    stack = [root if root is not None else os.getpid()]
    while stack:
        pid = stack.pop()
        for child, (ppid, _) in table.items():
            if ppid == pid:
                if "org.apache.spark.deploy.SparkSubmit" in _cmdline(child):
                    return child
                stack.append(child)
    return None


def jvm_flags(pid: int | None) -> list[str]:
    """The ``-X``/``-XX`` flags of a JVM's command line (empty: Java's defaults)."""
    if pid is None:
        return []
    return [arg for arg in _cmdline(pid).split() if arg.startswith(("-X", "-XX"))]


@dataclass(frozen=True)
class Snapshot:
    seconds: dict[str, float]


class CpuMeter:
    """Snapshots of CPU seconds per role: the Spark JVM and its Python descendants, and a broker's pids."""

    def __init__(self, spark_jvm: int | None, brokers: dict[str, list[int]]) -> None:
        self.spark_jvm = spark_jvm
        self.brokers = brokers  # broker name (e.g. "tubemq", "kafka") -> its JVM pids

    def snapshot(self) -> Snapshot:
        table = _table()
        seconds: dict[str, float] = {"spark_jvm": 0.0, "python_workers": 0.0}
        if self.spark_jvm is not None and self.spark_jvm in table:
            seconds["spark_jvm"] = _own(table, self.spark_jvm)
            children: dict[int, list[int]] = {}
            for pid, (ppid, _) in table.items():
                children.setdefault(ppid, []).append(pid)
            stack = list(children.get(self.spark_jvm, []))
            while stack:
                pid = stack.pop()
                seconds["python_workers"] += table[pid][1]
                stack.extend(children.get(pid, []))
            # the JVM's reaped children are Python workers too (its own c*time is in spark_jvm: move it)
            reaped = table[self.spark_jvm][1] - _own(table, self.spark_jvm)
            seconds["python_workers"] += reaped
        for name, pids in self.brokers.items():
            seconds[name] = sum(table[p][1] for p in pids if p in table)
        return Snapshot(seconds)

    @staticmethod
    def delta(before: Snapshot, after: Snapshot) -> dict[str, float]:
        return {k: round(after.seconds.get(k, 0.0) - v, 3) for k, v in before.seconds.items()}


def _own(table: dict[int, tuple[int, float]], pid: int) -> float:
    """utime + stime of ``pid`` alone."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError):
        return table[pid][1]


def per_row(cpu: dict[str, float], rows: int, broker: str | None) -> dict[str, float | None]:
    """Microseconds of CPU per row: per role, the Spark side (JVM + Python workers) and the broker's."""
    if rows <= 0:
        return {}
    out: dict[str, float | None] = {f"{k}_us_per_row": round(v / rows * 1e6, 3) for k, v in cpu.items()}
    out["spark_side_us_per_row"] = round((cpu.get("spark_jvm", 0.0) + cpu.get("python_workers", 0.0)) / rows * 1e6, 3)
    out["broker_us_per_row"] = round(cpu[broker] / rows * 1e6, 3) if broker and broker in cpu else None
    return out
