"""The one stream reader of every broker: read limits, Trigger.AvailableNow, offsets, pickling, tasks.

A broker's stream reader derives from :class:`StreamEngine` and answers a narrow set of questions (the
``survey`` of its partitions each trigger, where a new query starts, the read tasks of a range, how to
read one on an executor); everything Spark asks goes through the engine, so every broker has the same
admission options (``maxOffsetsPerTrigger``, ``maxBytesPerTrigger``, ``minOffsetsPerTrigger`` with
``maxTriggerDelay``), the same AvailableNow behaviour, the same offset marks and the same handling of a
range whose broker went down mid-batch (``deferOnOutage``, :meth:`StreamEngine.deferred_ranges`). The rules
of one plan are the pure :func:`tubespark.spark.planning.plan_batch`.

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

from tubespark.core.deferred import Deferral, DeferredRanges
from tubespark.core.outage import ride_out
from tubespark.core.shared_dir import SharedDirError
from tubespark.errors import AvailableNowIncompleteError, DataLossError, TubeSparkError
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
        self._deferred: DeferredRanges | None = None
        self._deferral_off = False  # decided once: no deferral for this run (see deferred_ranges)
        self._lock = threading.RLock()  # reentrant: a SIGTERM hook may call stop() in a thread holding it

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

    def deferral_scope(self) -> str | None:
        """This query's key for its deferred-range reports, the same after a driver restart (its consumer group);
        ``None`` (the default): the query has none, and defers only into a ``deferredRangesPath`` set for it
        alone (see :meth:`deferred_ranges`)."""
        return None

    def close(self) -> None:
        """Release the driver's connections."""

    # --- deferred ranges: a task whose broker is down leaves the rest to the next batch ------------------

    def deferred_ranges(self) -> DeferredRanges | None:
        """Where this query's read tasks report the rest of a range they left to the next batch because its
        broker was down (:mod:`tubespark.core.deferred`), this run's marker published on first use; ``None``:
        tasks wait for their broker (up to ``outageTimeoutMs``), as with ``deferOnOutage=false``.

        The reports must outlive the driver: a report written just before it died is read by the restarted one.
        So they are kept under :meth:`deferral_scope` (a group: queries of other groups may share the directory,
        by default one under the driver's temp dir); a query without one defers only when ``deferredRangesPath``
        is set, which then is this query's own directory (like its checkpoint location). A directory that cannot
        be written leaves the tasks waiting, said once."""
        opts = self.options
        if not opts.defer_on_outage or self._deferral_off:
            return None
        if self._deferred is None:
            scope = self.deferral_scope()
            if scope is None:
                if not opts.deferred_ranges_path:
                    self._deferral_off = True
                    log.info("read tasks of this %s stream wait for a broker that is down (up to outageTimeoutMs), "
                             "holding the query: set deferredRangesPath to a directory of this query's own to have "
                             "them leave the rest of their range to the next batch instead", self.source)
                    return None
                scope = self.source  # the directory is the query's own
            reports = DeferredRanges(opts.deferred_ranges_path, scope)
            try:
                reports.announce(self.run_id)
            except SharedDirError as exc:
                self._deferral_off = True
                log.warning("read tasks of this %s stream wait for a broker that is down (and hold the query): the "
                            "deferredRangesPath directory cannot be written: %s", self.source, exc)
                return None
            self._deferred = reports
        return self._deferred

    def task_deferral(self) -> tuple[str, str, str] | None:
        """What each read task of a batch planned now carries to defer (its ``defer``), or ``None``: it waits."""
        reports = self.deferred_ranges()
        return None if reports is None else reports.where(self.run_id)

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
        with self._lock:
            reports, self._deferred = self._deferred, None
            if reports is not None:
                reports.withdraw(self.run_id)
            self.close()

    # --- planning ------------------------------------------------------------------------------------

    def _next_end(self, raw_start: Offsets, admission: Admission) -> Offsets:
        parsed = BatchOffsets.parse(raw_start)
        start = parsed.positions
        self._last_read = parsed.fingerprints  # checked by _plan_once (_check_reuse)
        self._recorded_origins = parsed.origins
        self._origins.check(start, parsed.origins)  # a restart's first plan: the checkpoint's cluster and topics
        try:
            deferred = self._take_deferrals(start, parsed.fingerprints)
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
        return BatchOffsets(plan.end, starts, self._fingerprints(start, parsed.fingerprints, plan),
                            self._origins.marks(plan.end, parsed.origins)).to_spark()

    def _take_deferrals(self, start: Offsets, fingerprints: Offsets) -> dict[str, Deferral]:
        """Move back, in ``start``, each partition whose read task in the batch that just ended left the rest of
        its range unread (its broker was down): the next batch reads it from there (with what came after) once
        the broker is back. The moved offset goes into the next batch's end, so Spark's offset log replays the
        same. Its ``#last`` mark (of the message below the old end, unread) is dropped with it."""
        for key in [key for key, floor in self._floors.items() if start.get(key) != floor]:
            del self._floors[key]  # the remainder was read (or the partition left the query)
        reports = self.deferred_ranges()
        if reports is None:
            return {}
        found = reports.take(start)  # SharedDirError: see _next_end
        for key, deferral in sorted(found.items()):
            log.warning("partition %s: the read task of [%d, %d) could not reach its broker and read up to %d; the "
                        "next batches read on from %d once the broker is back", key, deferral.start, deferral.end,
                        deferral.reached, deferral.reached)
            start[key] = self._floors[key] = deferral.reached
            fingerprints.pop(key, None)
            self._checked.pop(key, None)
            self.deferrals.append(deferral)
        return found

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

    def _fingerprints(self, start: Mapping[str, int], recorded: Mapping[str, int], plan: Plan) -> Offsets:
        """The ``#last`` marks of a batch end: taken now for each partition the batch moves (the broker still
        holds the message), carried over for the others. A partition moved back (a loss rule resumed it at
        the broker's end) is moved too: the mark it had is of a message the broker lost."""
        out: Offsets = {}
        for key, position in sorted(plan.end.items()):
            begin = start.get(key)
            if begin is None or position == begin:  # not read by this batch: a read below it could only wait
                if key in recorded:  # (a broker behind the query, nothing below a joined partition's start)
                    out[key] = recorded[key]
                continue
            try:
                value = self.fingerprint(key, position)
            except TubeSparkError as exc:  # unchecked until a later batch takes one
                log.info("cannot take the fingerprint of %s below offset %d: %s", key, position, exc)
                continue
            if value is not None:
                out[key] = value
                self._checked[key] = self.incarnation(key)
        return out

    def _check_reuse(self, start: Mapping[str, int], survey: Survey) -> None:
        """Whether a broker gave offsets this query read to new messages (a crash lost them), checked where a
        loss can have happened unseen: a partition's first plan in this process (a restart from the
        checkpoint: the broker may have lost and been refilled in between), after it was unavailable, and
        when its :meth:`incarnation` changed. One read of the message below the start against the ``#last``
        fingerprint; a start above the broker's end is the bounds policy's (the loss is plain there).

        A different message there is data loss (``failOnDataLoss``); with failOnDataLoss=false the
        partition skips to the broker's end, so nothing is taken for what this query read before."""
        for key in (*survey.unavailable, *survey.gone):
            self._checked.pop(key, None)
        for key, found in sorted(survey.bounds.items()):
            recorded = self._last_read.get(key)
            position = start.get(key)
            if recorded is None or position is None or key in survey.jumps or position > found.high:
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
            self._lost(Loss(key, position, found.high, self._reused_why(position, found.high, recorded, now)))
            survey.jumps[key] = found.high

    def _reused_why(self, position: int, high: int, recorded: int, now: int) -> str:
        return (f"offsets this query read were reused: the last message below offset {position} is not the one "
                f"this query read there (fingerprint {now}, recorded {recorded}). The broker lost acknowledged "
                f"messages (a crash within its durability window: README 'TubeMQ's own durability window') and "
                f"gave their offsets to new messages, and it has since been refilled past this query's offset. "
                f"The choice: failOnDataLoss=true stops the query (this error; nothing is skipped in silence: "
                f"re-read the partition, e.g. a new checkpoint with startingOffsets); failOnDataLoss=false skips "
                f"to the broker's end {high}: offsets [{position}, {high}) are skipped, and the new messages at "
                f"the reused offsets below {position} (the broker does not tell where its loss began) are never "
                f"read")

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
