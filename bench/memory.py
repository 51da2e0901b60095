"""Peak resident memory of Spark's Python processes, sampled from ``/proc/<pid>/status``.

Why sampling VmHWM: it is the kernel's own high-water mark of a process's RSS, so a sample taken any
time before the process exits sees its true peak; we only have to catch each process alive once.
Python workers are forked from ``pyspark.daemon`` and may be short-lived, hence the short period.

Processes are classified by their command line: descendants of ``pyspark.daemon`` are the executors'
``python_worker``s; a process running ``python_streaming_source_runner`` (or forked from one) is the
driver's streaming ``source`` process; children of a daemon started for another module (data source
lookup, creation, read planning) are ``planner``s; other Python descendants are ``other_python``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
SOURCE_MODULE = "python_streaming_source_runner"


def _status_kib(pid: int, key: str) -> int | None:
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parents() -> dict[int, int]:
    """pid -> ppid for every process (field 4 of /proc/<pid>/stat, after the ``(comm)``)."""
    out: dict[int, int] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return out


@dataclass
class PeakRss:
    """Highest VmHWM seen per process and category (KiB)."""

    by_pid: dict[int, tuple[str, int]] = field(default_factory=dict)
    commands: dict[int, str] = field(default_factory=dict)

    def peak_mb(self, category: str) -> float | None:
        values = [kib for cat, kib in self.by_pid.values() if cat == category]
        return round(max(values) / 1024, 1) if values else None

    def count(self, category: str) -> int:
        return sum(1 for cat, _ in self.by_pid.values() if cat == category)

    def top(self, n: int = 8) -> list[dict[str, object]]:
        """The ``n`` processes with the highest peaks, to see what a category figure is made of."""
        ranked = sorted(self.by_pid.items(), key=lambda item: -item[1][1])[:n]
        return [{"pid": pid, "category": cat, "peak_rss_mb": round(kib / 1024, 1),
                 "command": self.commands.get(pid, "")[:160]} for pid, (cat, kib) in ranked]


class RssSampler:
    """Samples the Python descendants of ``root`` (default: this process) every ``period_s`` in a thread."""

    def __init__(self, root: int | None = None, period_s: float = 0.2) -> None:
        self.root = root if root is not None else os.getpid()
        self.period_s = period_s
        self.peaks = PeakRss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()  # the last word on processes still alive

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()

    def sample(self) -> None:
        parents = _parents()
        children: dict[int, list[int]] = {}
        for pid, ppid in parents.items():
            children.setdefault(ppid, []).append(pid)
        stack = [(self.root, "")]
        while stack:
            pid, inherited = stack.pop()
            for child in children.get(pid, []):
                category = inherited or _classify(_cmdline(child))
                if category:
                    kib = _status_kib(child, "VmHWM")
                    if kib is not None:
                        old = self.peaks.by_pid.get(child, (category, 0))[1]
                        self.peaks.by_pid[child] = (category, max(old, kib))
                        if child not in self.peaks.commands:
                            self.peaks.commands[child] = _cmdline(child)
                # What a daemon forks is a worker of the daemon's kind.
                stack.append((child, {"daemon": "python_worker", "planner_daemon": "planner"}.get(category, category)))


def _classify(cmd: str) -> str:
    """Category of a process that is not a forked child of an already classified one ("" = not Python)."""
    executable = cmd.split(" ", 1)[0].rsplit("/", 1)[-1]
    if not executable.startswith("python"):  # the JVM's command line mentions pyspark's paths too
        return ""
    if SOURCE_MODULE in cmd:
        return "source"
    if "pyspark.daemon" in cmd:
        # `pyspark.daemon [module]`: no module or pyspark.worker runs tasks; any other module (data source
        # lookup, creation, read planning, ...) serves the driver's planning.
        module = cmd.split("pyspark.daemon", 1)[1].split()
        return "daemon" if not module or module[0] == "pyspark.worker" else "planner_daemon"
    return "other_python"
