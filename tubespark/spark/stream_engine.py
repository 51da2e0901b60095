"""The one stream reader of every broker: read limits, Trigger.AvailableNow, offsets, pickling, tasks.

:class:`StreamEngine` holds one broker's :class:`~tubespark.spark.broker.Broker` and asks it facts only (the
``survey`` of its partitions each trigger, where a new query starts, the read tasks of a range, how to read
one on an executor); everything Spark asks goes through the engine, so every broker has the same admission
options (``maxOffsetsPerTrigger``, ``maxBytesPerTrigger``, ``minOffsetsPerTrigger`` with ``maxTriggerDelay``),
the same AvailableNow behaviour, the same offset marks and the same handling of a range whose broker went
down mid-batch (``deferOnOutage`` with ``deferredRangesPath``, :meth:`StreamEngine.deferring`). What it knows of
each partition is one :class:`~tubespark.spark.partition_state.PartitionState`. The rules of one plan are the
pure :func:`tubespark.spark.planning.plan_batch`.

Spark 4.x runs a Python stream reader in a long-lived driver-side process (``initialOffset``,
``latestOffset``, ``partitions``, ``commit``) and calls ``read()`` on executors against a pickled copy
made at query start: the copy carries the broker object with its options, never a socket.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import pyarrow as pa
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
from tubespark.spark.broker import Broker, Survey, ranges_of
from tubespark.spark.commit_log import newest_committed_offsets
from tubespark.spark.marks import START, Divergence, find_divergence, thin
from tubespark.spark.offsets import BatchOffsets, Offsets
from tubespark.spark.options import SharedOptions
from tubespark.spark.origins import OriginMarks
from tubespark.spark.partition_state import UNCHECKED, Status
from tubespark.spark.planning import Admission, Bounds, Loss, Plan, plan_batch

log = logging.getLogger(__name__)

T = TypeVar("T")

SIZE_SAMPLE = 16
"""Messages read at a partition's next offset to estimate its message size (``maxBytesPerTrigger``)."""


class StreamEngine(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's stream reader API over one broker's :class:`~tubespark.spark.broker.Broker`: every broker's stream
    is this class, holding that broker's object (never subclassed)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.options: SharedOptions = broker.options
        self.source = broker.name
        self.partitions_state = broker.states
        """One :class:`~tubespark.spark.partition_state.PartitionState` per partition the query knows."""
        broker.on_terminate = self.stop
        self._initial: Offsets | None = None
        self._available_now = False  # Trigger.AvailableNow: each partition's state has its target
        self._last_batch_at = time.monotonic()  # minOffsetsPerTrigger waits at most maxTriggerDelay from here
        self.data_losses: list[Loss] = []
        """Every loss logged with failOnDataLoss=false."""
        self._origins = OriginMarks(broker.origins)
        self._recorded_origins: Offsets = {}  # the start's #origin marks (by scope)
        self._bounds_now: Mapping[str, Bounds] = {}  # this trigger's survey (a loss note looks at its scope)
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

    # --- pickling: executors get the options and the task state, never sockets or threads ----------

    def __getstate__(self) -> dict[str, Any]:
        return {"broker": self.broker}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["broker"])  # type: ignore[misc]  # rebuilds the driver-free reader

    # --- Spark's calls -------------------------------------------------------------------------------

    def _ride_out(self, call: Callable[[], T], what: str) -> T:
        """``call()`` under the one rule for a broker that is down (:mod:`tubespark.core.outage`): a new query's
        first questions to its broker wait for an entry point this process saw answer, as a running stream does
        (issue 37 part 6), and fail within seconds naming the address option when it never answered. A query
        restarted on its checkpoint is planned from it (:meth:`latestOffset`, whose survey plans nothing on a
        broker that does not answer), so its broker's outage is waited for whatever this process saw."""
        return ride_out(call, outage_s=self.options.outage_timeout_ms / 1000,
                        what=f"{what} of the {self.source} stream")

    def initialOffset(self) -> Offsets:
        """A new query's start, worked out once per process: Spark asks on every trigger until the first
        batch has data, and data arriving in between must not be skipped (``latest``)."""
        if self._initial is None:
            self._initial = dict(self._ride_out(self.broker.start_offsets, "the start"))
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
        return {state.key: state.latest for state in self.partitions_state if state.latest is not None} or None

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an AvailableNow run: what the partitions hold now, nothing after. A partition
        without a target yet (its broker did not answer) gets one when it first answers."""
        with self._lock:
            target = self._ride_out(self.broker.available_now_target, "the AvailableNow target")
            self._available_now = True
            for key, offset in target.items():
                self.partitions_state[key].target = offset
        log.info("AvailableNow run of the %s stream reads up to %s", self.source, target)

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        batch = BatchOffsets.parse(end)
        with self._lock:  # a batch Spark replays after a restart must not read another cluster's topic either
            self._origins.check(batch.positions, batch.origins)
            if end != start:
                self._ran = dict(end)
            self._task_token = batch.deferrals
            ranges = batch.ranges(BatchOffsets.parse(start).positions)
            for key, why in sorted(self.broker.gone(ranges).items()):  # a replayed batch's partition removed since
                low, high = ranges.pop(key)
                self._vanished(key, low, f"{why}; offsets [{low}, {high}) were planned")
            return list(self.broker.read_tasks(ranges_of(ranges), self.task_deferral()))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.broker.read(partition)

    def commit(self, end: Offsets) -> None:
        """Spark committed a batch ending at ``end``: store it on the broker where the broker keeps offsets.
        Spark commits a batch after planning the next one, so a partition whose remainder was deferred at that
        plan is stored at the remainder's start, never past it."""
        positions = BatchOffsets.parse(end).positions
        with self._lock:
            for state in self.partitions_state:
                if state.floor is not None and state.key in positions and positions[state.key] > state.floor:
                    positions[state.key] = state.floor
        self.broker.store_offsets(positions)

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
                self.broker.close()

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
        for key in {*start, *(state.key for state in self.partitions_state)}:  # checked by _check_reuse
            state = self.partitions_state[key]
            state.fingerprint, state.history = parsed.fingerprints.get(key), dict(parsed.history.get(key, {}))
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
        for state in self.partitions_state:
            if state.floor is not None and start.get(state.key) != state.floor:
                state.floor = None  # the remainder was read (or the partition left the query)
        previous = parsed.deferrals
        reports = None if previous is None else self._previous_reports(previous)
        found = {} if reports is None else reports.take(start)
        for key, deferral in sorted(found.items()):
            log.warning("partition %s: the read task of [%d, %d) could not reach its broker and read up to %d; the "
                        "next batches read on from %d once the broker is back", key, deferral.start, deferral.end,
                        deferral.reached, deferral.reached)
            state = self.partitions_state[key]
            start[key] = state.floor = deferral.reached
            parsed.fingerprints.pop(key, None)
            state.fingerprint, state.checked_under = None, UNCHECKED
            state.mark(Status.DEFERRED, f"the rest of [{deferral.start}, {deferral.end}) from {deferral.reached}")
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
        if not self._available_now or plan.moves(start) or not stuck:
            return plan
        # Trigger.AvailableNow would end here with a partition below its target: wait for it instead
        timeout_s = self.broker.available_now_wait_s()
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
            self.broker.wait_for_change(min(remaining, 1.0))
            plan, stuck = self._plan_once(start, admission)
            if plan.moves(start) or not stuck:
                return plan

    def _plan_once(self, start: Offsets, admission: Admission) -> tuple[Plan, dict[str, str]]:
        """The plan, and the partitions below their AvailableNow target that could not be planned (why)."""
        # Spark plans the next batch only after the one ending at ``start`` completed, so ``start`` is
        # committed: store it now rather than wait for commit(), which lags a batch and never comes for
        # the last batch of an AvailableNow run or before an idle period.
        self.broker.store_offsets(start)
        survey = self.broker.survey(start)
        self._bounds_now = survey.bounds
        self._check_reuse(start, survey)
        kept = dict(start)
        for key, why in sorted(survey.gone.items()):
            kept.pop(key, None)
            self._vanished(key, start.get(key), why)
            self.partitions_state.forget(key)
        self._note_survey(kept, survey)
        target = self._targets()
        plan = plan_batch(kept, survey.bounds, admission=admission, policy=self.broker.policy, joined=survey.joined,
                          jumps=survey.jumps, unavailable=survey.unavailable, target=target,
                          since_last_batch_s=time.monotonic() - self._last_batch_at, sizes=self._estimate_sizes,
                          record_size=self.broker.record_size)
        for loss in plan.losses:
            self._lost(loss)
        stuck = {} if target is None else {key: why for key, why in survey.unavailable.items()
                                           if key not in target or plan.end.get(key, -1) < target[key]}
        return plan, stuck

    def _note_survey(self, start: Offsets, survey: Survey) -> None:
        """Each partition's state after this trigger's survey (an AvailableNow run's target: its end when it first
        answered, where the run began without it)."""
        for key, found in survey.bounds.items():
            state = self.partitions_state[key]
            state.latest = found.high
            if self._available_now and state.target is None:
                state.target = found.high
            if state.status is not Status.DEFERRED or state.floor is None:
                state.mark(Status.READABLE)
        for key, why in survey.unavailable.items():
            self.partitions_state[key].mark(Status.UNAVAILABLE, why)
        for key in start:
            if key not in survey.bounds and key not in survey.unavailable:
                self.partitions_state[key].mark(Status.PARKED)

    def _targets(self) -> dict[str, int] | None:
        """A Trigger.AvailableNow run's end per partition (``None``: not such a run)."""
        if not self._available_now:
            return None
        return {state.key: state.target for state in self.partitions_state if state.target is not None}

    def _estimate_sizes(self, begin: Mapping[str, int], backlog: Mapping[str, int]) -> dict[str, float]:
        """Mean value bytes of the next messages of each partition with a backlog (``maxBytesPerTrigger``);
        a partition that cannot be sampled keeps its last estimate."""
        for key, count in sorted(backlog.items()):
            state = self.partitions_state[key]
            if not count or state.size_at == begin[key]:
                continue
            high = begin[key] + min(count, SIZE_SAMPLE) * self.broker.record_size
            try:
                sizes = self.broker.sample_sizes(key, begin[key], high)
            except Exception as exc:  # noqa: BLE001  # an estimate only: the batch is planned without it
                log.info("cannot sample the message size of %s: %s", key, exc)
                continue
            if sizes:
                state.size_at, state.mean_size = begin[key], sum(sizes) / len(sizes)
        return {key: self.partitions_state[key].mean_size for key in backlog
                if self.partitions_state[key].size_at is not None}

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
                value = self.broker.fingerprint(key, position)
            except TubeSparkError as exc:  # unchecked until a later batch takes one
                log.info("cannot take the fingerprint of %s below offset %d: %s", key, position, exc)
                value = None
            if value is not None:
                out[key] = value
                self.partitions_state[key].checked_under = self.broker.incarnation(key)
                if not marks:  # the partition's first fingerprint: no history yet, it begins here
                    marks[begin] = START
            if marks:
                marks_out[key] = thin(marks, position, self.broker.record_size)
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
            self.partitions_state[key].checked_under = UNCHECKED
        policy = self.broker.policy
        for key, found in sorted(survey.bounds.items()):
            position = start.get(key)
            if position is None or key in survey.jumps:
                continue
            if position > found.high:
                if policy.lost_above:
                    why = policy.above(key, position, found).loss
                    self._resume_at_divergence(key, position, found, survey, why)
                continue
            state = self.partitions_state[key]
            recorded = state.fingerprint
            if recorded is None:
                continue
            incarnation = self.broker.incarnation(key)
            if state.checked_under is not UNCHECKED and state.checked_under == incarnation:
                continue
            try:
                now = self.broker.fingerprint(key, position)
            except TubeSparkError as exc:  # checked again next trigger
                log.info("cannot check the message of %s below offset %d yet: %s", key, position, exc)
                continue
            state.checked_under = incarnation
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
            found_at = find_divergence(self.partitions_state[key].history, differs=position, held_below=found.high,
                                       read=lambda offset: self.broker.fingerprint(key, offset))
        except TubeSparkError as exc:
            self.partitions_state[key].checked_under = UNCHECKED
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
                f"messages (it crashed before they reached its disk, within its durability window) and "
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
        top = min(where.differs - self.broker.record_size, found.high)
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
        self.partitions_state[loss.key].mark(Status.LOST, loss.why)
        log.warning("%s; failOnDataLoss=false: continuing from offset %d (data loss event %d).%s", message,
                    loss.resumes_at, len(self.data_losses), note)
