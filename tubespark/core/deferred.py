"""Deferred ranges: a streaming read task whose broker is down hands the rest of its range to the next batch.

Why: Spark runs one micro-batch at a time, so a read task that waits for a crashed broker
(:func:`tubespark.core.outage.read_through_outage`, up to ``outageTimeoutMs``) holds every partition of the
query still for the whole outage. Instead, a streaming task gives up on its broker after the reader's first
short try (:func:`~tubespark.core.outage.read_attempt_s`), returns the rows it read and leaves a report of
the unread remainder ``[reached, end)`` here; the driver, planning the next batch, moves that partition's
offset back to ``reached`` (:class:`tubespark.spark.stream_engine.StreamEngine`), so the remainder is read,
with whatever came after it, once the broker is back. Spark's offset log holds the moved offset: a restart
replays exactly what was read.

The reports travel like skipped-bundle reports and pop receipts: small files in a directory the tasks write
and the driver reads (:class:`~tubespark.core.shared_dir.SharedDir`). One file per partition and planned
range, so a retried or replayed attempt of the same range overwrites it (the last attempt wins) and an
attempt that read everything deletes it. The driver publishes a marker file for its run; a task defers only
when it sees that marker, i.e. when the driver can see its report: an executor on another machine than a
driver-local directory keeps waiting for its broker, as before, and says how to get the non-blocking
behaviour (``deferredRangesPath`` on a filesystem both reach).

A query's reports live in a directory named by its *scope*, a key that stays the same when its driver restarts:
a report written just before the driver died is found by the restarted one (else the unread rest would be lost).
A consumer group is such a key (TubeMQ's read group; RocketMQ's pull ``group``); a query without
one (TANK, RocketMQ pull without ``group``) defers only into a ``deferredRangesPath`` the user gave it alone,
like a checkpoint location (:meth:`tubespark.spark.stream_engine.StreamEngine.deferred_ranges`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tubespark.core.shared_dir import SharedDir, SharedDirError

log = logging.getLogger(__name__)

OPTION = "deferredRangesPath"
DEFAULT_BASE = str(Path(tempfile.gettempdir()) / "tubespark-deferred-ranges")
"""Where reports go without ``deferredRangesPath``: the driver's temp dir, which executors reach in local mode."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _safe(text: str) -> str:
    """``text`` as a file name part: readable, and unique (a hash of the original) whatever it holds."""
    return f"{_UNSAFE.sub('_', text)[:80]}.{hashlib.sha1(text.encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class Deferral:
    """A task read ``key``'s planned ``[start, end)`` up to ``reached`` only: ``[reached, end)`` is unread."""

    key: str
    start: int
    end: int
    reached: int


class DeferredRanges:
    """The reports of one query, under its scope (queries of different scopes never share a directory)."""

    def __init__(self, location: str | None, scope: str) -> None:
        self.location = location or DEFAULT_BASE
        self.scope = scope
        self.dir = SharedDir(self.location, OPTION, _safe(scope))

    def where(self, run_id: str) -> tuple[str, str, str]:
        """What a read task of run ``run_id`` needs to find these reports (:class:`TaskDeferral`'s ``where``)."""
        return self.location, self.scope, run_id

    @staticmethod
    def _name(key: str, start: int, end: int) -> str:
        return f"{_safe(key)}-{start}-{end}.json"

    # --- the driver -------------------------------------------------------------------------------

    def announce(self, run_id: str) -> None:
        """Publish this run's marker: tasks that see it know the driver sees their reports."""
        self.dir.publish(f"driver-{run_id}", b"{}")

    def withdraw(self, run_id: str) -> None:
        """Remove this run's marker (the query stops); best effort."""
        try:
            self.dir.discard(f"driver-{run_id}")
        except SharedDirError as exc:
            log.info("cannot remove the marker of run %s: %s", run_id, exc)

    def take(self, positions: Mapping[str, int]) -> dict[str, Deferral]:
        """The deferrals of the batch that ended at ``positions``: a report counts when its planned end is its
        partition's position (the batch that just completed read up to there); any other report of a partition in
        ``positions`` is stale (an older batch's, already moved into the offsets) and is deleted. Reports of
        other partitions are left alone: another query of the same group may be reading them. Raises
        :class:`SharedDirError` when the directory cannot be listed, read or cleaned."""
        out: dict[str, Deferral] = {}
        for name in self.dir.names("*.json"):
            try:  # a SharedDirError passes: the caller plans no batch rather than miss a remainder
                doc = json.loads(self.dir.read(name))
                found = Deferral(str(doc["partition"]), int(doc["start"]), int(doc["end"]), int(doc["reached"]))
            except (ValueError, KeyError, TypeError) as exc:  # published whole, so not ours: leave it
                log.warning("ignoring %s in %r: not a deferred-range report (%s)", name, self.dir, exc)
                continue
            if found.key not in positions:
                continue  # another query of the group may read it
            if positions[found.key] == found.end and found.start <= found.reached < found.end:
                out[found.key] = found
            else:
                self.dir.discard(name)
        return out

    # --- a read task ------------------------------------------------------------------------------

    def visible(self, run_id: str) -> bool:
        """Whether this task sees the marker of the driver's run ``run_id`` (so the driver sees its report)."""
        try:
            return bool(self.dir.names(f"driver-{run_id}"))
        except SharedDirError as exc:
            log.info("cannot look for the driver's marker in %r: %s", self.dir, exc)
            return False

    def record(self, deferral: Deferral) -> None:
        """Leave the report of ``deferral`` (replacing one of an earlier attempt of the same range)."""
        doc = {"partition": deferral.key, "start": deferral.start, "end": deferral.end, "reached": deferral.reached}
        self.dir.publish(self._name(deferral.key, deferral.start, deferral.end), json.dumps(doc).encode())

    def complete(self, key: str, start: int, end: int) -> None:
        """This attempt read the whole range: an earlier attempt's report of it no longer holds."""
        self.dir.discard(self._name(key, start, end))


_unseen_warned: set[str] = set()  # directories this process warned it cannot share with the driver


class TaskDeferral:
    """A streaming read task's side, the ``defer`` of :func:`~tubespark.core.outage.read_through_outage`: report
    the unread rest of ``key``'s ``[start, end)`` when its broker is down (if the driver can see the report), or,
    once the whole range was read, clear an earlier attempt's report of it (:meth:`finish`).

    ``where`` is the task's ``(location, scope, run_id)``, which the driver's stream reader puts in every task."""

    def __init__(self, where: tuple[str, str, str], key: str, start: int, end: int) -> None:
        location, scope, self.run_id = where
        self.ranges = DeferredRanges(location, scope)
        self.key, self.start, self.end = key, start, end
        self.deferred = False

    def __call__(self, offset: int) -> bool:
        if offset >= self.end:
            return False
        if not self.ranges.visible(self.run_id):
            if self.ranges.location not in _unseen_warned:
                _unseen_warned.add(self.ranges.location)
                log.warning("the read of %s [%d, %d) waits for its broker, holding the whole micro-batch: this "
                            "executor does not see the driver's marker in %s; set deferredRangesPath to a "
                            "directory the driver and the executors share (e.g. hdfs://namenode/dir) so a task "
                            "leaves the rest of its range to the next batch instead", self.key, self.start,
                            self.end, self.ranges.location)
            return False
        try:
            self.ranges.record(Deferral(self.key, self.start, self.end, offset))
        except SharedDirError as exc:
            log.warning("cannot report the unread rest of %s [%d, %d) in %s (%s): waiting for the broker instead",
                        self.key, self.start, self.end, self.ranges.location, exc)
            return False
        self.deferred = True
        return True

    def finish(self) -> None:
        """The read ended without an error: a complete read clears an earlier attempt's report (a replayed or
        retried task that read everything must not leave a remainder to be read twice). A failure to clear it
        fails the task (Spark retries it) rather than risk that."""
        if not self.deferred:
            self.ranges.complete(self.key, self.start, self.end)
