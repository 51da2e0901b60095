"""The streaming reader: the driver is a member of the TubeMQ consumer group, executors read ranges.

Who does what (Spark 4.3's Python streaming API runs the reader in a long-lived driver-side process,
and ``read()`` on executors against a pickled copy made at query start):

* driver (``initialOffset``, ``latestOffset``, ``partitions``, ``commit``): joins the group through the
  master, holds the partitions the master assigns on their brokers, plans one :class:`QueueRange` per
  held partition with new data, and on commit stores the batch's end as the group's offset;
* executors (``read``): each task registers its partition under a private read group, reads exactly
  ``[start, end)`` and releases it (see :mod:`tubespark.tubemq.client.ranges`).

Offsets are ``{"brokerId:topic:partitionId": offset}``. Spark's checkpoint is the source of truth; the
group's offsets on the brokers follow it for monitoring and for hand-overs between queries.

Where each partition starts (README "Reading a stream" states the same rule):

(a) a partition in the checkpoint Spark restarts from resumes at the checkpoint's offset;
(b) a new query's initial partitions, those the master assigns in its first rebalance (including ones
    a stale registration still occupies on the broker, held later), start at ``startingOffsets``;
(c) a partition assigned by a later rebalance starts at the group's committed offset (at-least-once:
    at most the batch in flight at the hand-over is read twice);
(d) a partition this query held, lost and got back resumes at the group's committed offset when that
    is ahead of the query's own last end, else at its own;
(e) ``startingOffsets=group`` uses the group's committed offsets for the initial partitions.

The initial offsets are worked out once per process, and the first batch carries them (``FROM_MARK``):
Spark replays a batch 0 that a crash interrupted from a fresh ``initialOffset()``, which may differ.

A partition the master assigned but that is not usable this trigger (its broker is down or
restarting, or a stale registration still occupies it) plans no new data and stays assigned; the group
session registers it again and the query catches up. A Trigger.AvailableNow run covers every assigned
partition up to the max offset it had when the run was prepared, and waits (``assignmentTimeoutMs``)
for a partition it cannot read yet rather than finish without it.

A broker that comes back with a max offset below this query's offset lost acknowledged messages
(TubeMQ acknowledges before the data is on disk): failOnDataLoss=true fails naming the partition and
both offsets; false logs it, counts it (:attr:`data_loss_events`) and continues from the broker's
offset.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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

from tubespark.core.retry import RetryPolicy, call_with_retry
from tubespark.errors import BrokerConnectionError, DataLossError, OptionError, TubeSparkError, UnknownTopicError
from tubespark.spark.offsets import EARLIEST, Offsets, wanted_offset, wanted_time
from tubespark.spark.planning import Admission, share_by_backlog
from tubespark.spark.shutdown import install_shutdown_hooks
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.group import GroupSession, HeldPartition
from tubespark.tubemq.client.metadata import topic_partitions
from tubespark.tubemq.client.ranges import Bounds, RangeReader, probe_bounds
from tubespark.tubemq.spark.by_time import start_at_time
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.read_task import QueueRange, read_range, skipped_bundles
from tubespark.tubemq.spark.topics import subscribed_topics
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE
from tubespark.tubemq.wire.formats import PartitionRef

log = logging.getLogger(__name__)

SIZE_SAMPLE = 16
"""Messages read at a partition's next offset to estimate its message size (``maxBytesPerTrigger``)."""

SKIP_MARK = "#skip"
"""``end["<key>#skip"] == end[key]`` marks a batch whose range of ``key`` is skipped, not read: a regained
partition jumping ahead to the group's committed offset. It lives in the offsets themselves, so a batch
Spark replays after a restart skips exactly as the first run did."""

FROM_MARK = "#from"
"""``end["<key>#from"]``: where a new query's first batch starts ``key``. Spark logs only batch ends: to
replay batch 0 after a restart it asks ``initialOffset()`` again, in a new process whose answer can differ
(the master may assign other partitions, ``latest`` has moved on). Batch 0 carries its own start instead.
Keys with ``#`` (both marks) are no partitions: topic names cannot contain it."""

def _unmarked(offsets: Offsets) -> Offsets:
    """The partitions' offsets without the marks (``SKIP_MARK``, ``FROM_MARK``)."""
    return {key: offset for key, offset in offsets.items() if "#" not in key}


class AssignmentUnavailableError(TubeSparkError):
    """A Trigger.AvailableNow run cannot read a partition the master assigned to it (still occupied by a
    stale registration, or its broker down) within ``assignmentTimeoutMs``; finishing would skip it."""


class TubeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The ``tubemq`` stream reader, with admission control (``maxOffsetsPerTrigger`` and the rest) and
    Trigger.AvailableNow."""

    def __init__(self, options: TubeMQOptions) -> None:
        self.options = options
        self.group: str = options.group or ""
        self.read_group = f"{self.group}-tubespark-read"
        self.probe_group = f"{self.group}-tubespark-probe"
        self.run_id = uuid.uuid4().hex[:12]
        self._session: GroupSession | None = None
        self._refs: dict[str, PartitionRef] = {}
        self._latest: Offsets = {}
        self._target: Offsets | None = None
        self._last_end: Offsets | None = None
        self._stored: Offsets = {}
        self._deferred: set[str] = set()  # initial partitions whose startingOffsets could not be resolved yet
        self._awaiting_first = False  # a new query that saw no assignment yet: the first one is initial
        self._initial: Offsets | None = None  # initialOffset()'s answer, fixed once given
        self._topics: tuple[str, ...] | None = None  # subscribed now (``topic``, or what topicPattern matched)
        self._topics_at = 0.0
        self._hooks_installed = False
        self._last_batch_at = time.monotonic()  # minOffsetsPerTrigger waits at most maxTriggerDelay from here
        self._sizes: dict[str, tuple[int, float]] = {}  # key -> (offset sampled at, mean message bytes)
        self._own_end: Offsets = {}  # partitions this query held and dropped (revoked): where it had got to
        self._never_held: set[str] = set()  # initial partitions not held on their broker yet
        self.data_loss_events = 0
        """How many times a broker came back below this query's offset (failOnDataLoss=false)."""
        self.data_losses: list[tuple[str, int, int]] = []
        """``(partition, query offset, broker max offset)`` of each of those events."""
        self.skipped_bundles = 0
        """Messages read tasks skipped as unparseable so far (``skippedBundlesPath``; ``ignoreParseErrors``)."""
        self._lock = threading.RLock()  # reentrant: the SIGTERM hook calls stop() in the thread that may hold it

    # --- pickling: executors get options only, never sockets or threads -------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "group": self.group, "read_group": self.read_group,
                "probe_group": self.probe_group, "run_id": self.run_id}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]
        self.run_id = state["run_id"]

    # --- group session (driver) -----------------------------------------------------------------

    def _ensure_session(self) -> GroupSession:
        with self._lock:
            if self._session is None:
                opts = self.options
                if self._topics is None:
                    self._topics, self._topics_at = subscribed_topics(opts), time.monotonic()
                stream_ids = list(opts.stream_ids)
                session = GroupSession(opts.masters, self.group, self._topics, settings=opts.client_settings(),
                                       filters=dict.fromkeys(self._topics, stream_ids) if stream_ids else None)
                session.start()
                self._session = session
                if not self._hooks_installed:  # Spark 4.3 ends this process with SIGTERM, never calling stop()
                    install_shutdown_hooks(self.stop)
                    self._hooks_installed = True
                # the master's first rebalance: what it assigns, held on the broker yet or not
                session.wait_for_assignment(opts.assignment_timeout_ms / 1000)
            return self._session

    def _refresh_topics(self) -> None:
        """``topicPattern``: list the topics again every ``topicRefreshIntervalMs``; when the matching set
        changed, join the group again with it. A new topic's partitions then join the query at the group's
        committed offset (earliest for a group that never read them); a removed topic's partitions are
        handled as vanished (``failOnDataLoss``)."""
        opts = self.options
        if opts.topic_pattern is None or time.monotonic() - self._topics_at < opts.topic_refresh_interval_ms / 1000:
            return
        self._topics_at = time.monotonic()
        try:
            topics = subscribed_topics(opts, allow_none=True)
        except TubeSparkError as exc:
            log.warning("cannot list the topics for topicPattern %r (trying again later): %s",
                        opts.topic_pattern.pattern, exc)
            return
        if not topics or topics == self._topics:
            return  # nothing matches any more: keep the current members' view; vanished partitions fail or go
        log.info("topicPattern %r of group %s now matches %s (was %s): joining the group again",
                 opts.topic_pattern.pattern, self.group, list(topics), list(self._topics or ()))
        with self._lock:
            session, self._session, self._topics = self._session, None, topics
        if session is not None:
            session.close()
        self._ensure_session()

    def _assigned(self) -> dict[str, PartitionRef]:
        assigned = self._ensure_session().assigned()
        self._refs.update(assigned)
        return assigned

    @contextmanager
    def _probe_broker(self) -> Iterator[BrokerClient]:
        """A broker client for the driver's private probe groups: a stale registration of the user's group
        (410) does not block them."""
        broker = BrokerClient(f"{self.probe_group}.{self.run_id}", self.options.client_settings())
        try:
            yield broker
        finally:
            broker.close()

    def _probe(self, ref: PartitionRef) -> Bounds:
        """``[min, max)`` of ``ref`` under the private probe group."""
        with self._probe_broker() as broker:
            return probe_bounds(broker, ref, self.probe_group)

    # --- offsets --------------------------------------------------------------------------------

    def initialOffset(self) -> Offsets:
        """A new query: its initial partitions (the master's first assignment) start at startingOffsets.

        Spark asks again on every trigger until the first batch has data, and once more to run it: the
        answer is worked out once, so data arriving in between is not skipped (``latest``) and the start
        Spark reads batch 0 from is the one it was planned from.
        """
        if self._initial is not None:
            return dict(self._initial)
        assigned = self._assigned()
        held = self._ensure_session().held()
        offsets: Offsets = {}
        if not assigned:
            self._awaiting_first = True
        for key, ref in sorted(assigned.items()):
            start = self._starting_offset(key, ref, held.get(key))
            if start is None:
                self._deferred.add(key)  # its first planning resolves it (rule b)
            else:
                offsets[key] = start
            if key not in held:
                self._never_held.add(key)
        spec = self.options.starting_offsets
        if isinstance(spec, dict):
            unknown = sorted(set(spec) - set(assigned))
            if unknown:
                log.warning("startingOffsets names partitions not assigned to this query: %s", ", ".join(unknown))
        log.info("tubemq source for group %s starts at %s%s", self.group, offsets,
                 f" (to be resolved once readable: {sorted(self._deferred)})" if self._deferred else "")
        self._initial = offsets
        return dict(offsets)

    def _starting_offset(self, key: str, ref: PartitionRef, held: HeldPartition | None) -> int | None:
        """Where a new query starts ``key`` (a start time, else ``startingOffsets``); ``None`` when that
        cannot be known yet (the group's offset of a partition not held yet, a broker that does not answer)."""
        opts = self.options
        when = wanted_time(opts.starting_timestamp, opts.starting_offsets_by_timestamp, key)
        wanted = wanted_offset(opts.starting_offsets, key, default=EARLIEST)
        if when is None and wanted == "group":  # the broker tells the group's offset (min if none) on registration
            return None if held is None else held.stored_offset
        try:
            with self._probe_broker() as broker:
                bounds = probe_bounds(broker, ref, self.probe_group)
                if when is not None:  # tubespark/tubemq/spark/by_time.py
                    return start_at_time(broker, ref, bounds, when, f"{self.probe_group}-time", opts)
        except TubeSparkError as exc:
            if not exc.retriable:
                raise
            log.warning("cannot learn the bounds of %s yet (its start is resolved once it answers): %s", key, exc)
            return None
        if wanted == "earliest":
            return bounds.min_offset
        if wanted == "latest":
            return bounds.max_offset
        if wanted > bounds.max_offset:
            raise OptionError(f"startingOffsets for {key} is {wanted}, beyond the partition's max offset "
                              f"{bounds.max_offset}")
        return int(wanted)

    def _report_skips(self) -> None:
        """Log the running total of messages the read tasks skipped (ignoreParseErrors + skippedBundlesPath)."""
        path = self.options.skipped_bundles_path
        if not path:
            return
        total = skipped_bundles(path).total
        if total != self.skipped_bundles:
            log.warning("tubemq query of group %s: read tasks skipped %d unparseable messages so far (%d new); "
                        "details in %s", self.group, total, total - self.skipped_bundles, path)
            self.skipped_bundles = total

    def _admission(self, max_rows: int | None) -> Admission:
        """This query's limits per micro-batch, with ``max_rows`` as the row cap."""
        opts = self.options
        return Admission(max_rows=max_rows, max_bytes=opts.max_bytes_per_trigger,
                         min_rows=opts.min_offsets_per_trigger, max_delay_s=opts.max_trigger_delay_ms / 1000)

    def _plan_end(self, start: Offsets, admission: Admission) -> Offsets:
        end = self._plan_until_readable(start, admission)
        if _unmarked(end) == _unmarked(start):
            return start  # nothing new: the very same offsets, so Spark plans no (empty) batch
        self._last_batch_at = time.monotonic()
        if start == self._initial:  # batch 0 of a new query: it carries its start
            end.update({key + FROM_MARK: offset for key, offset in start.items()})
        return end

    def _plan_until_readable(self, start: Offsets, admission: Admission) -> Offsets:
        self._report_skips()
        end, stuck = self._plan_once(start, admission)
        if self._target is None or _unmarked(end) != _unmarked(start) or not stuck:
            return end
        # Trigger.AvailableNow would end here with a partition below its target: wait for it instead
        timeout_s = self.options.assignment_timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        log.info("AvailableNow run of group %s waits up to %.0f s for %s", self.group, timeout_s, stuck)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                detail = "; ".join(f"{key}: {why}" for key, why in sorted(stuck.items()))
                raise AssignmentUnavailableError(
                    f"Trigger.AvailableNow cannot finish for group {self.group}: partition(s) assigned to this "
                    f"query still cannot be read after {timeout_s:.0f} s (assignmentTimeoutMs) and are below "
                    f"the run's target, so finishing would skip their data: {detail}. Run it again once the "
                    f"stale registration has timed out on the broker or the broker is back, or raise "
                    f"assignmentTimeoutMs")
            self._ensure_session().wait_for_change(min(remaining, 1.0))
            end, stuck = self._plan_once(start, admission)
            if _unmarked(end) != _unmarked(start) or not stuck:
                return end

    def _plan_once(self, start: Offsets, admission: Admission) -> tuple[Offsets, dict[str, str]]:
        """The next batch's end, and the assigned partitions below the AvailableNow target that could not
        be planned (key -> why)."""
        self._refresh_topics()
        session = self._ensure_session()
        refusal = session.refusal()
        if refusal is not None:  # e.g. a broker refuses our TLS certificate: waiting would stall the query
            raise refusal
        assigned = self._assigned()
        held = session.held()
        pending = session.pending()
        # Spark plans the next batch only after the one ending at ``start`` completed, so ``start`` is
        # committed: store it now rather than wait for commit(), which lags a batch and never comes
        # for the last batch of an AvailableNow run or before an idle period.
        down = self._store_group_offsets(start)
        if self._awaiting_first and assigned:  # the first assignment came after initialOffset: still initial
            self._deferred.update(k for k in assigned if k not in start)
            self._awaiting_first = False
        end: Offsets = {}
        for key, offset in start.items():
            if "#" in key:
                continue  # the previous batch's marks (SKIP_MARK, FROM_MARK): that batch is done
            # Every partition stays in the offsets, assigned or not, so the checkpoint never forgets
            # where this query stands on it (a restart resumes there, rule a).
            end[key] = offset
            if key in assigned or key in self._never_held or key in self._own_end:
                continue  # an initial partition moved away before it was held keeps its start (rule b)
            if self._partition_exists(key):  # revoked (or, after a restart, assigned elsewhere): rule (d)
                self._own_end[key] = offset
                log.info("partition %s is no longer assigned to this query (group %s) at offset %d", key,
                         self.group, offset)
            else:
                del end[key]
                self._vanished(key, offset, "its topic no longer lists it")
        stuck: dict[str, str] = {}
        backlog: dict[str, int] = {}
        for key, ref in sorted(assigned.items()):
            item = held.get(key)
            if item is not None:
                self._never_held.discard(key)
            if key not in start:
                first = self._first_offset(key, ref, item)
                if first is None:
                    stuck[key] = pending.get(key, "its start is not known yet")
                else:
                    end[key] = first  # nothing planned for it in this batch; the next one reads from here
                continue
            if item is not None and key in self._own_end:  # regained in this run: rule (d)
                self._own_end.pop(key)
                if item.stored_offset > start[key]:
                    # another member read on meanwhile: jump to the group's offset. The marker makes the
                    # range [start, committed) a skip, also when Spark replays this batch after a restart.
                    end[key] = end[key + SKIP_MARK] = item.stored_offset
                    log.info("partition %s is back with group %s, which read on to %d: resuming there, not at "
                             "this query's %d", key, self.group, item.stored_offset, start[key])
                    continue
            if item is None:
                stuck[key] = pending.get(key, "not registered on its broker yet")
                log.info("partition %s of group %s is assigned but not held (%s): no new data this trigger", key,
                         self.group, stuck[key])
                continue
            if ref.broker.address in down:
                stuck[key] = f"broker {ref.broker.address} unreachable"
                continue
            try:
                fresh = session.refresh(ref)
            except UnknownTopicError as exc:
                if not self._partition_exists(key):
                    self._vanished(key, start[key], str(exc))
                    end.pop(key, None)
                    continue
                stuck[key] = f"broker {ref.broker.address} refused it: {exc}"
                continue
            except TubeSparkError as exc:
                if isinstance(exc, BrokerConnectionError):
                    down.add(ref.broker.address)
                stuck[key] = f"broker {ref.broker.address} did not answer: {exc}"
                log.warning("partition %s: broker %s unreachable, no new data this trigger (it stays assigned "
                            "and is registered again when the broker is back): %s", key, ref.broker.address, exc)
                continue
            if fresh is None:
                stuck[key] = "released while planning"
                continue
            high = fresh.max_offset
            self._latest[key] = high
            if high < start[key]:
                self._data_loss(key, start[key], high)
                end[key] = high  # continue from the broker's offset: the next batch starts there
                continue
            if self._target is not None:
                high = min(high, self._target.setdefault(key, high))
            backlog[key] = max(0, high - start[key]) // INDEX_RECORD_SIZE
        shares = self._admit(backlog, start, admission)
        for key, count in shares.items():
            end[key] = start[key] + count * INDEX_RECORD_SIZE
        if self._target is not None:  # only what is below its target holds an AvailableNow run open
            stuck = {k: why for k, why in stuck.items()
                     if k not in self._target or end.get(k, -1) < self._target[k]}
        else:
            stuck = {}
        self._last_end = end
        return end, stuck

    def _admit(self, backlog: dict[str, int], start: Offsets, admission: Admission) -> dict[str, int]:
        """Messages this batch takes per partition, within the query's limits. A Trigger.AvailableNow run
        never waits for ``minOffsetsPerTrigger``: all its data is there, and its last batch takes the rest."""
        if self._target is None and admission.waits(backlog, time.monotonic() - self._last_batch_at):
            log.debug("group %s: %d messages wait, fewer than minOffsetsPerTrigger", self.group, sum(backlog.values()))
            return {}
        sizes = self._message_sizes(backlog, start) if admission.max_bytes else {}
        cap = admission.rows(backlog, sizes)
        return share_by_backlog(backlog, cap) if cap else backlog

    def _message_sizes(self, backlog: dict[str, int], start: Offsets) -> dict[str, float]:
        """Mean value bytes of the next messages of each partition with a backlog (``maxBytesPerTrigger``),
        read under the private probe group; a partition that cannot be sampled keeps its last estimate."""
        stale = [key for key, count in sorted(backlog.items())
                 if count and self._sizes.get(key, (-1, 0.0))[0] != start[key]]
        if stale:
            with self._probe_broker() as broker:
                reader = RangeReader(broker, f"{self.probe_group}-size", verify_checksums=False, retry_s=5.0)
                for key in stale:
                    high = start[key] + min(backlog[key], SIZE_SAMPLE) * INDEX_RECORD_SIZE
                    try:
                        sizes = [len(m.data) for m in reader.read(self._refs[key], start[key], high)]
                    except TubeSparkError as exc:
                        log.info("cannot sample the message size of %s: %s", key, exc)
                        continue
                    if sizes:
                        self._sizes[key] = (start[key], sum(sizes) / len(sizes))
        return {key: self._sizes[key][1] for key in backlog if key in self._sizes}

    def _first_offset(self, key: str, ref: PartitionRef, item: HeldPartition | None) -> int | None:
        """Where a partition that is not in the offsets yet starts (rules b-e); ``None``: not known yet."""
        first: int | None
        if key in self._deferred:
            first = self._starting_offset(key, ref, item)
            rule = "startingOffsets (initial partition)"
        elif item is None:
            return None
        else:
            first = item.stored_offset
            rule = "the group's committed offset (assigned by a later rebalance)"
        if first is None:
            return None
        self._deferred.discard(key)
        log.info("partition %s joins the query of group %s at offset %d: %s", key, self.group, first, rule)
        return first

    def _partition_exists(self, key: str) -> bool:
        """Whether the master still lists ``key`` in its topic (a revoked partition may have been deleted)."""
        topic = PartitionRef.parse_key(key)[1]
        try:
            layout = topic_partitions(self.options.masters, [topic], self.options.client_settings(),
                                      timeout_s=self.options.request_timeout_ms / 1000)
        except UnknownTopicError:
            return False
        except TubeSparkError as exc:  # the master cannot tell right now: assume it exists, ask again later
            log.info("cannot check whether partition %s still exists: %s", key, exc)
            return True
        return any(ref.key == key for ref in layout.get(topic, ()))

    def _vanished(self, key: str, offset: int, why: str) -> None:
        """A partition this query was reading is gone (its topic was deleted or shrank)."""
        message = f"partition {key} vanished at offset {offset} ({why})"
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{message}; data written to it after offset {offset} cannot be read. Set "
                                f"failOnDataLoss=false to go on without it")
        log.warning("%s; failOnDataLoss=false: going on without it", message)

    def _data_loss(self, key: str, offset: int, high: int) -> None:
        message = (f"partition {key}: the broker's max offset {high} is below this query's offset {offset}; the "
                   f"broker lost acknowledged messages (e.g. it was killed before flushing them), offsets "
                   f"[{high}, {offset}) will be reused by new messages, and what it stored below {high} since "
                   f"its restart cannot be told from what this query read before")
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{message}. Set failOnDataLoss=false to continue from offset {high}")
        self.data_loss_events += 1
        self.data_losses.append((key, offset, high))
        log.warning("%s; failOnDataLoss=false: continuing from offset %d (data loss event %d)", message, high,
                    self.data_loss_events)

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        tasks: list[InputPartition] = []
        start = {**start, **{k[:-len(FROM_MARK)]: v for k, v in end.items() if k.endswith(FROM_MARK)}}
        missing = [k for k in end if "#" not in k and k not in self._refs and end[k] > start.get(k, end[k])]
        if missing:  # a restart replays a batch for partitions we no longer hold: look their brokers up
            topics = {PartitionRef.parse_key(k)[1] for k in missing}
            # a master restarting right now must not fail the batch: wait for it like the session does
            layouts = call_with_retry(
                lambda: topic_partitions(self.options.masters, topics, self.options.client_settings()),
                RetryPolicy(timeout_s=self.options.assignment_timeout_ms / 1000, backoff_s=0.5, max_backoff_s=5.0),
                what=f"look up the brokers of {sorted(topics)}")
            for parts in layouts.values():
                self._refs.update({p.key: p for p in parts})
        for key in sorted(end):
            low, high = start.get(key), end[key]
            if "#" in key or low is None or high <= low or end.get(key + SKIP_MARK) == high:
                continue  # nothing to read, or a jump to the group's committed offset (rule d)
            ref = self._refs.get(key)
            if ref is None:
                if self.options.fail_on_data_loss:
                    raise DataLossError(f"partition {key} no longer exists but offsets [{low}, {high}) were "
                                         f"planned; set failOnDataLoss=false to skip it")
                log.warning("partition %s vanished; skipping offsets [%d, %d)", key, low, high)
                continue
            client_id = f"{self.read_group}.{self.run_id}.{ref.broker_id}.{ref.partition_id}.{ref.topic}"
            tasks.append(QueueRange(ref.broker_id, ref.host, ref.port, ref.topic, ref.partition_id, low, high,
                                    self.read_group, client_id))
        return tasks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_range(partition, self.options)

    def commit(self, end: Offsets) -> None:
        """Spark committed a batch ending at ``end``: store it as the group's offsets (commitToGroup)."""
        self._store_group_offsets(end)

    def _store_group_offsets(self, offsets: Offsets) -> set[str]:
        """Store ``offsets`` for the partitions held; never raises. Returns the brokers that did not answer."""
        down: set[str] = set()
        if not self.options.commit_to_group or self._session is None:
            return down
        for key, item in sorted(self._session.held().items()):
            address = item.ref.broker.address
            if key not in offsets or self._stored.get(key) == offsets[key] or address in down:
                continue
            try:
                self._session.commit(item.ref, offsets[key])
                self._stored[key] = offsets[key]
            except TubeSparkError as exc:  # the next commit or plan tries again
                if isinstance(exc, BrokerConnectionError):
                    down.add(address)
                log.warning("could not store offset %d for %s in group %s: %s", offsets[key], key, self.group,
                            exc)
        return down

    def stop(self) -> None:
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            session.close()

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
            return self._plan_end(start, Admission())
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_offsets_per_trigger
        return self._plan_end(start, self._admission(max_rows))

    def reportLatestOffset(self) -> Offsets | None:
        return dict(self._latest) or None

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an AvailableNow run: what is in the assigned partitions now, nothing after.

        Every partition the master assigned counts, held on its broker or not: the max offsets come
        from a private probe group, which a stale registration of the user's group does not block.
        A partition whose broker does not answer gets its target when it first answers.
        """
        assigned = self._assigned()
        if not assigned:  # whether the topics have no partition to serve (brokers down) or others hold them
            topic_partitions(self.options.masters, self._topics or (), self.options.client_settings(),
                             timeout_s=self.options.request_timeout_ms / 1000)  # raises naming the first case
            log.info("AvailableNow run of group %s got no partition: other members of the group hold them all",
                     self.group)
        target: Offsets = {}
        for key, ref in sorted(assigned.items()):
            try:
                target[key] = self._probe(ref).max_offset
            except TubeSparkError as exc:
                if not exc.retriable:
                    raise
                log.warning("AvailableNow: cannot learn the max offset of %s yet: %s", key, exc)
        self._target = target
        log.info("AvailableNow run of group %s reads up to %s", self.group, target)
