"""Spark's task progress while a job runs, and a rate over the time tasks ran: what ``tubespark backfill`` prints.

Its own module because it is the part of a job that knows Spark's status tracker and nothing of a broker; any
application that runs a Spark job for an operator can print the same lines.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Progress:
    """Prints Spark's task progress every few seconds from a background thread, and a summary whose rate is
    over the time tasks ran: a short backfill spends most of its time starting Spark and planning, and a
    rate over all of it (267 rows/s for 2,000 rows) reads as a broken connector.

    On a terminal the progress is one line, updated in place (and cleared at the end); in a log, a line every
    ``interval_s``. ``quiet`` says when to print no more (Ctrl-C: the command's last line is what it left behind)."""

    def __init__(self, spark: SparkSession, label: str, interval_s: float = 2.0, out: TextIO = sys.stderr,
                 poll_s: float = 0.2, quiet: Callable[[], bool] = lambda: False) -> None:
        self.spark, self.label, self.interval_s, self.out, self.poll_s = spark, label, interval_s, out, poll_s
        self.quiet = quiet
        self._in_place = bool(getattr(out, "isatty", lambda: False)())
        self._shown = False  # an in-place line is on the terminal
        self.started = time.monotonic()
        self.first_task: float | None = None  # when a task was first seen running or done
        self.last_task: float | None = None  # when tasks were last seen running
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._shown:
            self.out.write("\r\x1b[K")  # the in-place line goes: what follows starts a clean line
            self.out.flush()

    def _run(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        printed = time.monotonic()
        while not self._stop.wait(self.poll_s):
            done = total = running = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info:
                    done += info.numCompletedTasks
                    total += info.numTasks
                    running += info.numActiveTasks
            self.observe(time.monotonic(), done=done, running=running)
            if self.quiet():
                continue
            if total and (self._in_place or time.monotonic() - printed >= self.interval_s):
                printed = time.monotonic()
                line = f"  {self.label}: {done}/{total} tasks, {printed - self.started:.0f}s"
                if self._in_place:
                    self.out.write(f"\r\x1b[K{line}")
                    self.out.flush()
                    self._shown = True
                else:
                    print(line, file=self.out, flush=True)

    def observe(self, now: float, *, done: int, running: int) -> None:
        """Record one look at the active stages: tasks done and running at ``now``."""
        if running or done:
            if self.first_task is None:
                self.first_task = now
            self.last_task = now

    def summary(self, rows: int, size: int, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed = max(now - self.started, 1e-6)
        if self.first_task is None or self.last_task is None:  # too quick to see a task: the whole time
            return (f"{self.label}: {rows:,} rows, {size / 1e6:.1f} MB in {elapsed:.1f}s "
                    f"({rows / elapsed:,.0f} rows/s, {size / 1e6 / elapsed:.1f} MB/s)")
        busy = max(self.last_task + self.poll_s - self.first_task, self.poll_s)
        return (f"{self.label}: {rows:,} rows, {size / 1e6:.1f} MB in {elapsed:.1f}s; {rows / busy:,.0f} rows/s, "
                f"{size / 1e6 / busy:.1f} MB/s over the {busy:.1f}s tasks ran (the first "
                f"{self.first_task - self.started:.1f}s: Spark starting its tasks)")
