"""Deferred ranges: a streaming read task whose broker is down hands the rest of its range to the next batch.

Why: Spark runs one micro-batch at a time, so a read task that waits for a crashed broker
(:func:`tubespark.core.outage.read_through_outage`, up to ``outageTimeoutMs``) holds every partition of the
query still for the whole outage. With ``deferredRangesPath`` set, a streaming task instead gives up on its
broker after the reader's first short try (:func:`~tubespark.core.outage.read_attempt_s`), returns the rows it
read and leaves a report of the unread remainder ``[reached, end)`` here; the driver, planning the next batch,
moves that partition's offset back to ``reached`` (:class:`tubespark.spark.stream_engine.StreamEngine`), so the
remainder is read, with whatever came after it, once the broker is back. Spark's offset log holds the moved
offset: a restart replays exactly what was read.

A report is the only record that a planned range was not read whole, so it must never be lost, by
construction:

* **Only its own query sees it.** The reports live in a directory named by the query's *token*, a random number
  the driver draws at the query's first deferring plan and writes into every batch end (the ``#deferrals`` mark,
  :data:`tubespark.spark.offsets.DEFER_MARK`): Spark's checkpoint carries it, so a restarted driver finds the same
  directory, and no other query (another cluster, the same group name, a copy of the job) can name it, read it
  or clean it. Nothing is keyed by group, cluster or host.
* **Proof, not absence.** The token's directory holds a ``query`` marker from its first plan on. A driver that
  plans after a batch whose end carries a token looks there; when the marker is missing (the directory was
  deleted, or the driver restarted where it is not) it cannot tell a range read whole from one whose report is
  gone, and says so (:class:`~tubespark.errors.DataLossError`, ``failOnDataLoss``) instead of taking the batch as
  read.
* **Only where the reports outlive the driver.** The directory must be one the driver and the executors share and
  that lasts as long as the checkpoint (like ``checkpointLocation``): nothing tubespark could pick by itself is
  known to be (a temp dir is gone when a driver is rescheduled on another machine), so a query defers only into a
  ``deferredRangesPath`` given to it; without one its tasks wait for their broker, which loses nothing either.

One file per partition and planned range, so a retried or replayed attempt of the same range overwrites it (the
last attempt wins) and an attempt that read everything deletes it. The driver publishes a marker file for its
run; a task defers only when it sees that marker, i.e. when the driver can see its report: an executor that
does not see it (a path local to the driver's machine) keeps waiting for its broker and says why.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from tubespark.core.shared_dir import SharedDir, SharedDirError

log = logging.getLogger(__name__)

OPTION = "deferredRangesPath"
QUERY_MARKER = "query"
"""The file a query's directory holds from its first deferring plan on: the proof that it is that directory."""

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


def new_token() -> int:
    """A query's token: random, so no two queries share one; below 2**53, so any JSON reader keeps it exact."""
    return secrets.randbelow(2**53 - 1) + 1


class DeferredRanges:
    """The reports of one query, under its token (queries never share a directory)."""

    def __init__(self, location: str, token: int) -> None:
        self.location = location
        self.token = token
        self.scope = f"query-{token}"
        self.dir = SharedDir(self.location, OPTION, self.scope)

    def where(self, run_id: str) -> tuple[str, int, str]:
        """What a read task of run ``run_id`` needs to find these reports (:class:`TaskDeferral`'s ``where``)."""
        return self.location, self.token, run_id

    @staticmethod
    def _name(key: str, start: int, end: int) -> str:
        return f"{_safe(key)}-{start}-{end}.json"

    # --- the driver -------------------------------------------------------------------------------

    def found(self) -> bool:
        """Whether this is the directory of the query's earlier plans (it holds their ``query`` marker). Raises
        :class:`SharedDirError` when it cannot be listed."""
        return bool(self.dir.names(QUERY_MARKER))

    def establish(self) -> None:
        """Mark the directory as this query's (its first deferring plan)."""
        self.dir.publish(QUERY_MARKER, b"{}")

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
        other partitions are left alone (a partition the query no longer holds may come back). Raises
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
                continue
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

    ``where`` is the task's ``(location, token, run_id)``, which the driver's stream reader puts in every task."""

    def __init__(self, where: tuple[str, int, str], key: str, start: int, end: int) -> None:
        location, token, self.run_id = where
        self.ranges = DeferredRanges(location, token)
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
