"""The one stream reader of every broker: read limits, Trigger.AvailableNow, offsets, pickling, tasks.

A broker's stream reader derives from :class:`StreamEngine` and answers a narrow set of questions (the
``survey`` of its partitions each trigger, where a new query starts, the read tasks of a range, how to
read one on an executor); everything Spark asks goes through the engine, so every broker has the same
admission options (``maxOffsetsPerTrigger``, ``maxBytesPerTrigger``, ``minOffsetsPerTrigger`` with
``maxTriggerDelay``), the same AvailableNow behaviour, the same offset marks and the same handling of a
range whose broker went down mid-batch (``deferOnOutage`` with ``deferredRangesPath``,
:meth:`StreamEngine.deferring`). The rules of one plan are the pure :func:`tubespark.spark.planning.plan_batch`.

Spark 4.x runs a Python stream reader in a long-lived driver-side process (``initialOffset``,
``latestOffset``, ``partitions``, ``commit``) and calls ``read()`` on executors against a pickled copy
made at query start: the copy carries the options and :meth:`StreamEngine.task_state`, never a socket.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from tubespark.core.deferred import Deferral, DeferredRanges, new_token
from tubespark.core.outage import ride_out
from tubespark.core.shared_dir import SharedDirError
from tubespark.errors import AvailableNowIncompleteError, DataLossError, TubeSparkError
from tubespark.spark.commit_log import newest_committed_offsets
from tubespark.spark.marks import START, Divergence, find_divergence, thin
from tubespark.spark.offsets import BatchOffsets, Offsets
from tubespark.spark.origins import Origin, OriginMarks
from tubespark.spark.planning import Admission, Bounds, BoundsPolicy, Loss, Plan, plan_batch

log = logging.getLogger(__name__)

T = TypeVar("T")

SIZE_SAMPLE = 16
"""Messages read at a partition's next offset to estimate its message size (``maxBytesPerTrigger``)."""


@dataclass
class Survey:
    """A broker's view of the query's partitions this trigger (see :func:`plan_batch` for each field)."""

    bounds: dict[str, Bounds] = field(default_factory=dict)
    joined: dict[str, int] = field(default_factory=dict)
    jumps: dict[str, int] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    """Partitions the query should read but cannot this trigger (why): a Trigger.AvailableNow run waits for
    them. A partition of the start that is in none of these fields is parked: it keeps its offset."""
    gone: dict[str, str] = field(default_factory=dict)
    """Partitions removed for good (a deleted topic, a partition the configuration no longer has): why."""


def row_fingerprint(row: pa.RecordBatch, columns: Sequence[str]) -> int:
    """CRC-32 (31 bits: a positive JSON number) of ``columns`` of a one-row batch (those it has)."""
    crc = 0
    for name in columns:
        if name in row.schema.names:
            value = row.column(name)[0].as_py()
            crc = zlib.crc32(value if isinstance(value, bytes) else repr(value).encode(), crc)
            crc = zlib.crc32(b"\0", crc)
    return crc & 0x7FFFFFFF


class StreamEngine(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's stream reader API over a broker's :meth:`survey`; subclasses implement the hooks below.

    The options object must carry ``max_offsets_per_trigger``, ``max_bytes_per_trigger``,
    ``min_offsets_per_trigger``, ``max_trigger_delay_ms``, ``fail_on_data_loss``, ``defer_on_outage`` and
    ``deferred_ranges_path`` (the shared specs).
    """

    source: ClassVar[str] = "stream"
    """The format name, for logs."""
    record_size: ClassVar[int] = 1
    """Offset units per message (TubeMQ counts bytes of 28-byte index records)."""
    policy: BoundsPolicy = BoundsPolicy()
    """How a start outside its partition's bounds is handled (a broker may set its own per trigger)."""
    fingerprint_columns: ClassVar[tuple[str, ...]] = ()
    """Columns of a read row that tell one message from another at the same offset (the broker's id or store
    time and the value): the default :meth:`fingerprint` hashes them; none, no fingerprints."""
    origin_advice: ClassVar[str] = ""
    """How a user tells a checkpoint from another cluster or topic incarnation from data loss when the ``#origin``
    marks cannot (a broker whose :meth:`origin_scope` gives scopes says it; see :mod:`tubespark.spark.origins`)."""

    def __init__(self, options: Any) -> None:
        self.options = options
        self._initial: Offsets | None = None
        self._target: Offsets | None = None
        self._latest: Offsets = {}
        self._sizes: dict[str, tuple[int, float]] = {}  # key -> (offset sampled at, mean message bytes)
        self._last_batch_at = time.monotonic()  # minOffsetsPerTrigger waits at most maxTriggerDelay from here
        self.data_losses: list[Loss] = []
        """Every loss logged with failOnDataLoss=false."""
        self._last_read: Offsets = {}  # the start's #last marks (fingerprints), for this trigger's check
        self._history: dict[str, dict[int, int]] = {}  # the start's older marks (#last@): where a loss began
        self._checked: dict[str, object] = {}  # key -> incarnation its #last mark was taken or checked under
        self._origins = OriginMarks(self.origin_scope, self.origins, self.describe_origin, self.scope_name,
                                    self.origin_advice)
        self._recorded_origins: Offsets = {}  # the start's #origin marks
        self._bounds_now: Mapping[str, Bounds] = {}  # this trigger's survey (a loss note looks at its scope)
        self._floors: Offsets = {}  # key -> where a deferred remainder starts: commit() never stores past it
        self.deferrals: list[Deferral] = []
        """Every remainder a read task handed to a later batch (its broker was down), in this process."""
        self.run_id = uuid.uuid4().hex[:12]
        """This driver run: its marker in the deferred-range reports tells tasks the driver sees them."""
        self._deferred: DeferredRanges | None = None  # the reports this run announced itself in
        self._own_token: int | None = None  # drawn by this run for a query whose offsets carry none yet
        self._deferral_off = False  # decided once: the directory cannot be written, tasks wait (see _token)
        self._task_token: int | None = None  # the token of the batch whose tasks are being planned
        self._lock = threading.RLock()  # reentrant: a SIGTERM hook may call stop() in a thread holding it
        self.checkpoint_location: str | None = None
        """The query's ``checkpointLocation`` when the reader was given it too: :meth:`stop` reads the commit log
        there to learn whether the last batch Spark ran was committed (docs/spark/commit-timing.md)."""
        self._committed: Offsets | None = None  # the end Spark planned the newest trigger from: committed
        self._ran: Offsets | None = None  # the end of the newest batch Spark ran (partitions()): committed or not
        self._stopped = False  # stop() stores once: a later call (atexit, the runner's own) must not join again

    # --- the broker's hooks ------------------------------------------------------------------------

    def start_offsets(self) -> Offsets:
        """A new query's partitions and where each starts (``startingOffsets`` resolved); a partition whose
        start cannot be known yet may be left out and joined later through :attr:`Survey.joined`."""
        raise NotImplementedError

    def survey(self, start: Offsets) -> Survey:
        """The partitions of ``start`` (and any joining) as the broker sees them now."""
        raise NotImplementedError

    def available_now_target(self) -> Offsets:
        """Each partition's end now: a Trigger.AvailableNow run reads up to it and stops."""
        raise NotImplementedError

    def read_tasks(self, ranges: Mapping[str, tuple[int, int]]) -> Sequence[InputPartition]:
        """The Spark tasks reading ``{key: (low, high)}`` exactly."""
        raise NotImplementedError

    def read_partition(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the rows of one task."""
        raise NotImplementedError

    def store_offsets(self, offsets: Offsets) -> None:
        """Store a committed batch's end on the broker (group offsets), best effort; none by default."""

    def close(self) -> None:
        """Release the driver's connections."""

    # --- deferred ranges: a task whose broker is down leaves the rest to the next batch ------------------

    def deferring(self) -> bool:
        """Whether this query's read tasks may leave the rest of a range on a down broker to the next batch
        (:mod:`tubespark.core.deferred`): only into a ``deferredRangesPath`` given to it, the one place known to
        outlive the driver as its checkpoint does; otherwise tasks wait for their broker (``outageTimeoutMs``)."""
        opts = self.options
        return bool(opts.defer_on_outage and opts.deferred_ranges_path) and not self._deferral_off

    def _reports(self, token: int) -> DeferredRanges:
        """The reports under ``token``, this run's marker published there first (tasks that see it may defer).
        Raises :class:`SharedDirError` when the directory cannot be written.

        A batch Spark replays after a restart where the directory is not (another machine) is read again whole
        by tasks that report here, so this directory holds that batch's proof from now on: it is marked as the
        query's. (A batch Spark had committed is never replayed: its proof must be the old directory.)"""
        reports = self._deferred
        if reports is None or reports.token != token:
            reports = DeferredRanges(str(self.options.deferred_ranges_path), token)
            reports.announce(self.run_id)
            if not reports.found():
                reports.establish()
            if self._deferred is not None:
                self._deferred.withdraw(self.run_id)
            self._deferred = reports
        return reports

    def task_deferral(self) -> tuple[str, int, str] | None:
        """What each read task of the batch being planned carries to defer (its ``defer``), or ``None``: it
        waits for its broker. The batch's own token (its end's ``#deferrals`` mark, set by :meth:`partitions`), so
        a batch Spark replays after a restart reports where the next plan looks."""
        token = self._task_token
        if token is None or not self.deferring():
            return None
        try:
            return self._reports(token).where(self.run_id)
        except SharedDirError as exc:  # the tasks will not see this run's marker: they wait
            log.warning("read tasks of this %s stream wait for a broker that is down: the deferredRangesPath "
                        "directory cannot be written: %s", self.source, exc)
            return None

    def task_state(self) -> dict[str, Any]:
        """What executors need besides the options (restored by :meth:`restore_task_state`)."""
        return {}

    def restore_task_state(self, state: dict[str, Any]) -> None:
        """Take back what :meth:`task_state` gave."""

    def unavailable_timeout_s(self) -> float:
        """How long a Trigger.AvailableNow run waits for a partition it cannot read yet before failing."""
        return float(getattr(self.options, "assignment_timeout_ms", 60_000)) / 1000

    def wait_for_change(self, timeout_s: float) -> None:
        """Block until the broker's view may have changed (at most ``timeout_s``)."""
        time.sleep(timeout_s)

    def fingerprint(self, key: str, offset: int) -> int | None:
        """A number identifying the last message of ``key`` below ``offset`` (what a batch ending there read
        last), or ``None`` where there is none to tell (no message there any more, or no such hook: then
        reused offsets are not checked). Raises a :class:`TubeSparkError` when it cannot be read now.

        Called on the driver for each partition a batch moves (one read per partition and trigger) and to
        check a start again, see :meth:`_check_reuse`. By default: the executors' read path, run here, of the
        one message below ``offset`` (:meth:`driver_read`), its :attr:`fingerprint_columns` hashed."""
        if not self.fingerprint_columns or offset < self.record_size:
            return None
        last: pa.RecordBatch | None = None
        for task in self.read_tasks({key: (offset - self.record_size, offset)}):
            for batch in self.driver_read(task):
                if batch.num_rows:
                    last = batch.slice(batch.num_rows - 1)
        return None if last is None else row_fingerprint(last, self.fingerprint_columns)

    def incarnation(self, key: str) -> object:
        """Anything that changes when ``key``'s broker may have restarted since the last trigger (e.g. the
        driver had to reconnect to it): a start is checked against its ``#last`` fingerprint again then."""
        return None

    def origin_scope(self, key: str) -> str | None:
        """The scope of ``key``'s ``#origin`` mark (what is created and deleted as one: TubeMQ's topic on one
        broker); ``None`` (the default): no origin marks, a foreign checkpoint looks like data loss."""
        return None

    def origins(self, scopes: Collection[str]) -> Mapping[str, Origin]:
        """The current :class:`Origin` of each of ``scopes`` the broker can tell (one that is not configured
        at all is left out); raises a :class:`TubeSparkError` when it cannot ask now. Called on the driver
        once per process per scope, and before a loss of a scope is reported."""
        return {}

    def describe_origin(self, mark: int) -> str:
        """A recorded ``#origin`` mark in words, for :class:`ForeignCheckpointError`."""
        return str(mark)

    def scope_name(self, scope: str) -> str:
        """An :meth:`origin_scope` in words, for messages."""
        return scope

    def driver_read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """A read the driver makes for itself (:meth:`fingerprint`, :meth:`sample_sizes`): by default the
        executors' read path, run here. A broker whose range reader retries for long (a failover budget)
        should bound this one shorter: its failure only leaves a check or an estimate for a later trigger,
        while every trigger of the query waits for it."""
        return self.read_partition(partition)

    def sample_sizes(self, key: str, low: int, high: int) -> list[int]:
        """Value sizes of the messages in ``[low, high)``, read by :meth:`driver_read`."""
        tasks = self.read_tasks({key: (low, high)})
        return [size for task in tasks for batch in self.driver_read(task)
                for size in pc.binary_length(batch.column("value")).to_pylist() if size is not None]

    # --- pickling: executors get the options and the task state, never sockets or threads ----------

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "task": self.task_state()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]  # rebuilds the driver-free reader
        self.restore_task_state(state["task"])

    # --- Spark's calls -------------------------------------------------------------------------------

    def _ride_out(self, call: Callable[[], T], what: str) -> T:
        """``call()`` under the one rule for a broker that is down (:mod:`tubespark.core.outage`): a new query's
        first questions to its broker wait for an entry point this process saw answer, as a running stream does
        (issue 37 part 6), and fail within seconds naming the address option when it never answered. A query
        restarted on its checkpoint is planned from it (:meth:`latestOffset`, whose survey plans nothing on a
        broker that does not answer), so its broker's outage is waited for whatever this process saw."""
        return ride_out(call, outage_s=getattr(self.options, "outage_timeout_ms", 0) / 1000,
                        what=f"{what} of the {self.source} stream")

    def initialOffset(self) -> Offsets:
        """A new query's start, worked out once per process: Spark asks on every trigger until the first
        batch has data, and data arriving in between must not be skipped (``latest``)."""
        if self._initial is None:
            self._initial = dict(self._ride_out(self.start_offsets, "the start"))
            log.info("%s stream starts at %s", self.source, self._initial)
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        """The limit Spark hands back to :meth:`latestOffset`; any limit but ``ReadAllAvailable`` means the
        options' admission applies (Trigger.Once passes ``ReadAllAvailable`` to lift it)."""
        opts = self.options
        if opts.max_offsets_per_trigger:
            return ReadMaxRows(opts.max_offsets_per_trigger)
        if opts.max_bytes_per_trigger:
            return ReadMaxBytes(opts.max_bytes_per_trigger)
        if opts.min_offsets_per_trigger:
            return ReadMinRows(opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        if isinstance(limit, ReadAllAvailable):
            admission = Admission()
        else:
            opts = self.options
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else opts.max_offsets_per_trigger
            admission = Admission(max_rows=max_rows, max_bytes=opts.max_bytes_per_trigger,
                                  min_rows=opts.min_offsets_per_trigger, max_delay_s=opts.max_trigger_delay_ms / 1000)
        with self._lock:
            self._committed = dict(start)  # Spark plans from a batch's end only once its commit log has it
            return self._next_end(start, admission)

    def reportLatestOffset(self) -> Offsets | None:
        return dict(self._latest) or None

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an AvailableNow run: what the partitions hold now, nothing after. A partition
        without a target yet (its broker did not answer) gets one when it first answers."""
        with self._lock:
            self._target = dict(self._ride_out(self.available_now_target, "the AvailableNow target"))
        log.info("AvailableNow run of the %s stream reads up to %s", self.source, self._target)

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        batch = BatchOffsets.parse(end)
        with self._lock:  # a batch Spark replays after a restart must not read another cluster's topic either
            self._origins.check(batch.positions, batch.origins)
            if end != start:
                self._ran = dict(end)
            self._task_token = batch.deferrals
            return list(self.read_tasks(batch.ranges(BatchOffsets.parse(start).positions)))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.read_partition(partition)

    def commit(self, end: Offsets) -> None:
        """Spark committed a batch ending at ``end``: store it on the broker where the broker keeps offsets.
        Spark commits a batch after planning the next one, so a partition whose remainder was deferred at that
        plan is stored at the remainder's start, never past it."""
        positions = BatchOffsets.parse(end).positions
        with self._lock:
            for key, floor in self._floors.items():
                if key in positions and positions[key] > floor:
                    positions[key] = floor
        self.store_offsets(positions)

    def stop(self) -> None:
        """Store the newest end known committed (:meth:`last_committed_end`), then release the broker side."""
        with self._lock:
            try:
                if not self._stopped:
                    self._stopped = True
                    end = self.last_committed_end()
                    if end is not None:
                        self.commit(end)
            finally:
                reports, self._deferred = self._deferred, None
                if reports is not None:
                    reports.withdraw(self.run_id)
                self.close()

    def last_committed_end(self) -> Offsets | None:
        """When the query stops: the end of the newest batch known to be in Spark's commit log, ``None`` when this
        process planned nothing (it joined nothing on the broker side to store through).

        Spark says so only by planning the next trigger from that end (``latestOffset``), never at a stop, so the
        last batch it ran (a ``processingTime`` trigger stopped between triggers, ``Trigger.Once``) counts only
        when the commit log under :attr:`checkpoint_location` has it; without one, or while that batch may still
        be in flight (not committed, replayed by a restart), the end it was planned from. A batch that may not
        be committed is never stored: a consumer taking the partitions over would skip its messages."""
        committed, ran = self._committed, self._ran
        if committed is None:
            return None
        if ran is None or ran == committed or self.checkpoint_location is None:
            return committed
        try:
            confirmed = ran in newest_committed_offsets(self.checkpoint_location)
        except SharedDirError as exc:
            log.warning("%s stream stops with the group's offsets at the end its last trigger was planned from, "
                        "not the end of the batch it ran last: cannot read the query's commit log: %s",
                        self.source, exc)
            return committed
        return ran if confirmed else committed

    # --- planning ------------------------------------------------------------------------------------

    def _next_end(self, raw_start: Offsets, admission: Admission) -> Offsets:
        parsed = BatchOffsets.parse(raw_start)
        start = parsed.positions
        self._last_read = parsed.fingerprints  # checked by _plan_once (_check_reuse)
        self._history = parsed.history
        self._recorded_origins = parsed.origins
        self._origins.check(start, parsed.origins)  # a restart's first plan: the checkpoint's cluster and topics
        try:
            deferred, token = self._take_deferrals(start, parsed)
        except SharedDirError as exc:  # planning on could pass over a remainder for good: plan no batch now
            log.warning("no batch of the %s stream this trigger: cannot read the deferred ranges (option "
                        "deferredRangesPath): %s", self.source, exc)
            return raw_start
        plan = self._plan_until_readable(start, admission)
        if not plan.moves(start) and not deferred:
            return raw_start  # the very same offsets: Spark plans no (empty) batch
        self._last_batch_at = time.monotonic()
        starts = dict(plan.starts)
        for key, deferral in deferred.items():  # Spark computes ranges from the previous end, which holds the
            starts.setdefault(key, deferral.reached)  # remainder's end: the #from mark says where it starts
        if raw_start == self._initial:  # batch 0 of a new query carries its start (replays read the same)
            for key, offset in start.items():
                starts.setdefault(key, offset)
        fingerprints, history = self._fingerprints(start, parsed.fingerprints, parsed.history, plan)
        return BatchOffsets(plan.end, starts, fingerprints, self._origins.marks(plan.end, parsed.origins),
                            history=history, deferrals=token).to_spark()

    def _take_deferrals(self, start: Offsets, parsed: BatchOffsets) -> tuple[dict[str, Deferral], int | None]:
        """Move back, in ``start``, each partition whose read task in the batch that just ended left the rest of
        its range unread (its broker was down): the next batch reads it from there (with what came after) once
        the broker is back. The moved offset goes into the next batch's end, so Spark's offset log replays the
        same. Its ``#last`` mark (of the message below the old end, unread) is dropped with it.

        Also the token the next batch carries (``None``: its tasks wait). A batch that carried one counts as read
        only where its token's directory is found (:meth:`_unproven`). Raises :class:`SharedDirError` when the
        directory cannot be read."""
        for key in [key for key, floor in self._floors.items() if start.get(key) != floor]:
            del self._floors[key]  # the remainder was read (or the partition left the query)
        previous = parsed.deferrals
        reports = None if previous is None else self._previous_reports(previous)
        found = {} if reports is None else reports.take(start)
        for key, deferral in sorted(found.items()):
            log.warning("partition %s: the read task of [%d, %d) could not reach its broker and read up to %d; the "
                        "next batches read on from %d once the broker is back", key, deferral.start, deferral.end,
                        deferral.reached, deferral.reached)
            start[key] = self._floors[key] = deferral.reached
            parsed.fingerprints.pop(key, None)
            self._checked.pop(key, None)
            self.deferrals.append(deferral)
        return found, self._token(None if reports is None else reports.token)

    def _previous_reports(self, token: int) -> DeferredRanges | None:
        """The reports of the batch that just ended, planned under ``token``; ``None`` when they cannot be
        found and failOnDataLoss=false (else :class:`DataLossError`, :meth:`_unproven`)."""
        location = self.options.deferred_ranges_path
        if not location:
            self._unproven(token, "deferredRangesPath is not set now")
            return None
        reports = DeferredRanges(location, token)
        if not reports.found():
            self._unproven(token, f"{location} holds no directory query-{token}")
            return None
        return reports

    def _token(self, previous: int | None) -> int | None:
        """The token of the next batch (``None``: the query does not defer, its tasks wait): the query's
        (``previous``, whose directory was found) or, for a query whose offsets carry none yet (a new query, an
        old checkpoint, deferral newly on), one this run draws and marks once."""
        if not self.deferring():
            return None
        if previous is not None:
            return previous
        if self._own_token is None:
            reports = DeferredRanges(str(self.options.deferred_ranges_path), new_token())
            try:
                reports.establish()
            except SharedDirError as exc:
                self._deferral_off = True
                log.warning("read tasks of this %s stream wait for a broker that is down (and hold the query): the "
                            "deferredRangesPath directory cannot be written: %s", self.source, exc)
                return None
            self._own_token = reports.token
        return self._own_token

    def _unproven(self, token: int, why: str) -> None:
        """The batch that just ended was planned with deferred-range reports under ``token`` that this driver
        cannot see (``why``): a task of it may have left the rest of its range unread, and nothing else records
        it. Taking the batch as read could skip that rest in silence, so it is data loss (``failOnDataLoss``)."""
        message = (f"the last batch of this {self.source} stream was planned with deferOnOutage into "
                   f"deferredRangesPath (directory query-{token}), and {why}: a read task of that batch whose broker "
                   f"was down may have left part of its range unread, and only that directory says which. Restart "
                   f"with deferredRangesPath set to the same directory as before (where query-{token} is; it must "
                   f"be one the driver reaches after a restart, like checkpointLocation)")
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{message}, or set failOnDataLoss=false to take the batch as read")
        log.warning("%s; failOnDataLoss=false: the batch is taken as read, and its reports are no longer looked for",
                    message)

    def _plan_until_readable(self, start: Offsets, admission: Admission) -> Plan:
        plan, stuck = self._plan_once(start, admission)
        if self._target is None or plan.moves(start) or not stuck:
            return plan
        # Trigger.AvailableNow would end here with a partition below its target: wait for it instead
        timeout_s = self.unavailable_timeout_s()
        deadline = time.monotonic() + timeout_s
        log.info("AvailableNow run of the %s stream waits up to %.0f s for %s", self.source, timeout_s, stuck)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                detail = "; ".join(f"{key}: {why}" for key, why in sorted(stuck.items()))
                raise AvailableNowIncompleteError(
                    f"Trigger.AvailableNow cannot finish: partition(s) of this query still cannot be read after "
                    f"{timeout_s:.0f} s and are below the run's target, so finishing would skip their data: "
                    f"{detail}. Run it again once they can be read (a stale registration timed out, the broker "
                    f"is back), or wait longer")
            self.wait_for_change(min(remaining, 1.0))
            plan, stuck = self._plan_once(start, admission)
            if plan.moves(start) or not stuck:
                return plan

    def _plan_once(self, start: Offsets, admission: Admission) -> tuple[Plan, dict[str, str]]:
        """The plan, and the partitions below their AvailableNow target that could not be planned (why)."""
        # Spark plans the next batch only after the one ending at ``start`` completed, so ``start`` is
        # committed: store it now rather than wait for commit(), which lags a batch and never comes for
        # the last batch of an AvailableNow run or before an idle period.
        self.store_offsets(start)
        survey = self.survey(start)
        self._bounds_now = survey.bounds
        self._check_reuse(start, survey)
        kept = dict(start)
        for key, why in sorted(survey.gone.items()):
            kept.pop(key, None)
            self._vanished(key, start.get(key), why)
        target = self._target
        if target is not None:
            for key, found in survey.bounds.items():
                target.setdefault(key, found.high)
        for key, found in survey.bounds.items():
            self._latest[key] = found.high
        plan = plan_batch(kept, survey.bounds, admission=admission, policy=self.policy, joined=survey.joined,
                          jumps=survey.jumps, unavailable=survey.unavailable, target=target,
                          since_last_batch_s=time.monotonic() - self._last_batch_at, sizes=self._estimate_sizes,
                          record_size=self.record_size)
        for loss in plan.losses:
            self._lost(loss)
        stuck = {} if target is None else {key: why for key, why in survey.unavailable.items()
                                           if key not in target or plan.end.get(key, -1) < target[key]}
        return plan, stuck

    def _estimate_sizes(self, begin: Mapping[str, int], backlog: Mapping[str, int]) -> dict[str, float]:
        """Mean value bytes of the next messages of each partition with a backlog (``maxBytesPerTrigger``);
        a partition that cannot be sampled keeps its last estimate."""
        for key, count in sorted(backlog.items()):
            if not count or self._sizes.get(key, (-1, 0.0))[0] == begin[key]:
                continue
            high = begin[key] + min(count, SIZE_SAMPLE) * self.record_size
            try:
                sizes = self.sample_sizes(key, begin[key], high)
            except Exception as exc:  # noqa: BLE001  # an estimate only: the batch is planned without it
                log.info("cannot sample the message size of %s: %s", key, exc)
                continue
            if sizes:
                self._sizes[key] = (begin[key], sum(sizes) / len(sizes))
        return {key: self._sizes[key][1] for key in backlog if key in self._sizes}

    # --- reused offsets: the #last fingerprints ------------------------------------------------------

    def _fingerprints(self, start: Mapping[str, int], recorded: Mapping[str, int],
                      history: Mapping[str, Mapping[int, int]], plan: Plan
                      ) -> tuple[Offsets, dict[str, dict[int, int]]]:
        """The ``#last`` and ``#last@`` marks of a batch end. ``#last``: taken now for each partition the batch moves
        (the broker still holds the message), carried over for the others; a partition moved elsewhere (a loss
        rule resumed it) is taken again. ``#last@`` (:mod:`tubespark.spark.marks`): the start's ``#last`` joins the
        older marks at or below where the batch reads from (a mark above it names a message never read there, or
        one the broker lost), thinned to a bounded history; a partition's first ``#last`` comes with a start mark
        where the batch reads from (none where the broker gives no fingerprints: the marks would tell nothing)."""
        out: Offsets = {}
        marks_out: dict[str, dict[int, int]] = {}
        for key, position in sorted(plan.end.items()):
            begin = plan.starts.get(key, start.get(key))
            marks = dict(history.get(key, {}))
            if begin is None or (position == begin and key not in plan.starts):  # not read by this batch: a read
                if key in recorded:  # below it could only wait (a broker behind the query, nothing below a joined
                    out[key] = recorded[key]  # partition's start)
                if marks:
                    marks_out[key] = marks
                continue
            marks = {offset: value for offset, value in marks.items() if offset <= begin}
            if key not in plan.starts and key in recorded:
                marks.setdefault(begin, recorded[key])  # (a start mark there stays one)
            try:
                value = self.fingerprint(key, position)
            except TubeSparkError as exc:  # unchecked until a later batch takes one
                log.info("cannot take the fingerprint of %s below offset %d: %s", key, position, exc)
                value = None
            if value is not None:
                out[key] = value
                self._checked[key] = self.incarnation(key)
                if not marks:  # the partition's first fingerprint: no history yet, it begins here
                    marks[begin] = START
            if marks:
                marks_out[key] = thin(marks, position, self.record_size)
        return out, marks_out

    def _check_reuse(self, start: Mapping[str, int], survey: Survey) -> None:
        """Whether a broker lost acknowledged messages this query read, and where the partition resumes then.

        A start above the broker's end shows it plainly (when the :attr:`policy` calls that a loss; checked every
        trigger). A broker refilled past the start since does not: that is checked where it can have happened
        unseen, a partition's first plan in this process (a restart from the checkpoint), after it was
        unavailable, and when its :meth:`incarnation` changed: one read of the message below the start against
        its ``#last`` fingerprint; a different one means the offsets were reused. Either way the partition moves
        to where the broker's offsets diverge from what this query read (:meth:`_resume_at_divergence`), and
        ``failOnDataLoss`` decides whether it may."""
        for key in (*survey.unavailable, *survey.gone):
            self._checked.pop(key, None)
        for key, found in sorted(survey.bounds.items()):
            position = start.get(key)
            if position is None or key in survey.jumps:
                continue
            if position > found.high:
                if self.policy.lost_above:
                    why = self.policy.above(key, position, found).loss
                    self._resume_at_divergence(key, position, found, survey, why)
                continue
            recorded = self._last_read.get(key)
            if recorded is None:
                continue
            incarnation = self.incarnation(key)
            if key in self._checked and self._checked[key] == incarnation:
                continue
            try:
                now = self.fingerprint(key, position)
            except TubeSparkError as exc:  # checked again next trigger
                log.info("cannot check the message of %s below offset %d yet: %s", key, position, exc)
                continue
            self._checked[key] = incarnation
            if now is None or now == recorded:
                if now is None:
                    log.info("%s: no message below offset %d to check against its fingerprint", key, position)
                continue
            self._resume_at_divergence(key, position, found, survey, self._reused_why(position, recorded, now))

    def _resume_at_divergence(self, key: str, position: int, found: Bounds, survey: Survey, why: str) -> None:
        """The broker lost what this query read of ``key`` up to ``position`` from some offset on: find the highest
        recorded mark it still holds unchanged (:func:`find_divergence`), report the loss (raised with
        failOnDataLoss=true) and move the partition there. A mark that cannot be read now leaves the partition
        where it is, planned nothing, until a later trigger finds it."""
        try:
            found_at = find_divergence(self._history.get(key, {}), differs=position, held_below=found.high,
                                       read=lambda offset: self.fingerprint(key, offset))
        except TubeSparkError as exc:
            self._checked.pop(key, None)
            del survey.bounds[key]
            survey.unavailable[key] = f"cannot read the marks that tell where its broker's loss began yet: {exc}"
            log.warning("partition %s: %s. Its marks cannot be read yet to tell where the loss began (%s): it plans "
                        "nothing until they can", key, why, exc)
            return
        resume = found.high if found_at.resume is None else found_at.resume
        self._lost(Loss(key, position, resume, f"{why}. {self._diverged_why(position, found, found_at)}"))
        survey.jumps[key] = resume

    def _reused_why(self, position: int, recorded: int, now: int) -> str:
        return (f"offsets this query read were reused: the last message below offset {position} is not the one "
                f"this query read there (fingerprint {now}, recorded {recorded}). The broker lost acknowledged "
                f"messages (a crash within its durability window: README 'TubeMQ's own durability window') and "
                f"gave their offsets to new messages, and it has since been refilled past this query's offset")

    def _diverged_why(self, position: int, found: Bounds, where: Divergence) -> str:
        """What each ``failOnDataLoss`` does about a loss found at ``where``, and what is read again and lost."""
        choice = ("The choice: failOnDataLoss=true stops the query (this error; nothing is skipped in silence: "
                  "re-read the partition, e.g. a new checkpoint with startingOffsets); failOnDataLoss=false reads on")
        if where.resume is None:
            return (f"{choice} from the broker's end {found.high}: no mark in this query's offsets names a message "
                    f"the broker still holds unchanged (a checkpoint from before the #last@ marks, or a broker that "
                    f"now ends below where this query began reading), so new messages the broker wrote at offsets "
                    f"below {found.high} since it lost the others are not read")
        resume = where.resume
        if where.begins:
            found_by = (f"where this query began reading the partition (none of the {where.reads} later mark(s) "
                        f"read matches)")
        else:
            found_by = (f"the highest mark in this query's offsets whose message the broker still holds unchanged "
                        f"({where.reads} mark(s) read to find it)")
        # the divergence lies below the lowest mark that differs, and at most at the broker's end
        top = min(where.differs - self.record_size, found.high)
        return (f"{choice} from offset {resume}, {found_by}. The broker's offsets diverge from "
                f"what this query read at an offset L in [{resume}, {top}]: the messages this query read in "
                f"[{resume}, L) are read a second time (at most {top - resume} offsets), every new message written "
                f"from L on is read; the broker lost the messages at offsets [L, {position}) ({position - top} to "
                f"{position - resume} offsets, all read by this query before the loss) and whatever it "
                f"acknowledged above {position} (never read by this query; the broker cannot tell how much)")

    def _vanished(self, key: str, offset: int | None, why: str) -> None:
        """A partition this query was reading is gone for good."""
        at = "" if offset is None else f" at offset {offset}"
        message = f"partition {key} vanished{at} ({why})"
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{message}; data written to it after that cannot be read. Set "
                                f"failOnDataLoss=false to go on without it")
        log.warning("%s; failOnDataLoss=false: going on without it", message)

    def _lost(self, loss: Loss) -> None:
        """A loss, reported (failOnDataLoss=true: raised) unless the checkpoint turns out to belong to another
        cluster or topic incarnation (:class:`ForeignCheckpointError`, whatever failOnDataLoss says); where
        that cannot be told, the message says so (:meth:`OriginMarks.loss_note`)."""
        lead, note = self._origins.loss_note(loss.key, self._recorded_origins, self._bounds_now)
        message = f"{lead}partition {loss.key}: {loss.why}"
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{message}. Set failOnDataLoss=false to continue from offset {loss.resumes_at}."
                                f"{note}")
        self.data_losses.append(loss)
        log.warning("%s; failOnDataLoss=false: continuing from offset %d (data loss event %d).%s", message,
                    loss.resumes_at, len(self.data_losses), note)
