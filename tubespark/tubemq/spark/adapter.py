"""TubeMQ's answers to the shared planners (:class:`tubespark.spark.broker.Broker`): streams and batch reads.

Who does what (the shared engines own read limits, Trigger.AvailableNow, the offsets, the start and end rules and
the tasks; this module answers their questions for TubeMQ):

* a stream's driver joins the group through the master, holds the partitions the master assigns on their brokers,
  reports their bounds each trigger (:meth:`TubeAdapter.survey`), and stores each committed batch's end as the
  group's offset; a batch read's driver lists the topics' partitions under a generated group and checks them
  against the master's configuration (:meth:`TubeAdapter.catalog`);
* executors: each task registers its partition under a private read group, reads exactly ``[start, end)``
  and releases it (:mod:`tubespark.tubemq.client.ranges`).

Offsets are ``{"brokerId:topic:partitionId": offset}``; Spark's checkpoint is the source of truth, the
group's offsets on the brokers follow it for monitoring and for hand-overs between queries. Where each
partition starts is the :class:`PartitionLedger`'s (rules a-e), kept in each partition's state record.

A partition the master assigned but that is not usable this trigger (its broker is down or restarting,
or a stale registration still occupies it) plans no new data and stays in the offsets; the group session
registers it again and the query catches up. A broker that comes back with a max offset below this
query's offset lost acknowledged messages (TubeMQ acknowledges before the data is on disk):
``failOnDataLoss`` decides.
"""

from __future__ import annotations

import logging
import uuid
import zlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from tubespark.core.retry import RetryPolicy, call_with_retry
from tubespark.errors import AvailableNowIncompleteError, BrokerConnectionError, TubeSparkError, UnknownTopicError
from tubespark.spark.broker import Broker, Catalog, Deferring, Range, Survey
from tubespark.spark.offset_rules import check_named_partitions, resolve_start
from tubespark.spark.offsets import EARLIEST, Offsets, wanted_offset, wanted_time
from tubespark.spark.planning import Bounds, BoundsPolicy, Resolution
from tubespark.spark.pushdown import Column, Columns, Kind
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.group import HeldPartition
from tubespark.tubemq.client.placement import configured_partitions
from tubespark.tubemq.client.ranges import Bounds as ProbedBounds
from tubespark.tubemq.client.ranges import RangeReader, probe_bounds
from tubespark.tubemq.errors import AdminApiError
from tubespark.tubemq.spark.availability import served_partitions
from tubespark.tubemq.spark.by_time import end_at_time, start_at_time
from tubespark.tubemq.spark.ledger import OFFSET_UNITS, PARTITION_LISTING, Assignment, PartitionLedger
from tubespark.tubemq.spark.membership import GroupMembership
from tubespark.tubemq.spark.options import MAX_STREAM_IDS, TubeMQOptions, stream_id_ok
from tubespark.tubemq.spark.origins import TopicOrigins
from tubespark.tubemq.spark.read_task import QueueRange, read_range, skipped_bundles
from tubespark.tubemq.spark.topics import subscribed_topics
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE
from tubespark.tubemq.wire.formats import PartitionRef
from tubespark.tubemq.wire.message import ReceivedMessage

log = logging.getLogger(__name__)

AssignmentUnavailableError = AvailableNowIncompleteError
"""The name this error had when only TubeMQ streams raised it."""

FINGERPRINT_WINDOW = 8
"""Index records read below an offset to find a partition's last message there: several partitions of one
store share its index, so the record just below may be another partition's (docs/tubemq/protocol.md)."""


def message_fingerprint(message: ReceivedMessage) -> int:
    """CRC-32 of a message's index offset, broker message id and body (31 bits, a positive JSON number).

    The message id is the broker's (built from its clock when it stored the message), so a new message at a
    reused offset differs even when a producer sends the very same body again."""
    head = message.offset.to_bytes(8, "big", signed=True) + message.message_id.to_bytes(8, "big", signed=True)
    return zlib.crc32(message.data, zlib.crc32(head)) & 0x7FFFFFFF


class _LostAcknowledged(BoundsPolicy):
    """TubeMQ's bounds come from registration, which tells no min offset: only a max below the query's
    offset is judged here (the range reader finds offsets that are gone)."""

    def above(self, key: str, start: int, bounds: Bounds) -> Resolution:
        return Resolution(bounds.high, f"the broker's max offset {bounds.high} is below this query's offset "
                                       f"{start}; the broker lost acknowledged messages (TubeMQ's durability "
                                       f"window: a broker killed before flushing its memory cache loses what it "
                                       f"acknowledged; enableMemStore=false on the broker closes the window, see "
                                       f"docs/guarantees.md#tubemqs-own-durability-window). Offsets "
                                       f"[{bounds.high}, {start}) will be reused by new messages, and the broker "
                                       f"may already have written new ones below {bounds.high} since its restart. "
                                       f"With failOnDataLoss=true a restart on this checkpoint keeps failing, also "
                                       f"once the broker is refilled past {start} (the offsets' #last check)")


PUSHDOWN_COLUMNS: Mapping[str, Column] = {
    "partitionKey": Column(Kind.PARTITION, str, never_null=True),
    "topic": Column(Kind.PARTITION, str, never_null=True),
    "brokerId": Column(Kind.PARTITION, int, never_null=True),
    "partitionId": Column(Kind.PARTITION, int, never_null=True),
    "offset": Column(Kind.OFFSET, int, never_null=True),
    "msgTime": Column(Kind.TIME, datetime),
    "streamId": Column(Kind.TAG, str, accepts=stream_id_ok),
}
"""The read columns a pushed filter can use (docs/tubemq/guide.md#filter-pushdown)."""


class TubeAdapter(Broker):
    """The ``tubemq`` format's broker object: a stream's group member, or a batch read's private planner."""

    name = "tubemq"
    units = OFFSET_UNITS
    listing = PARTITION_LISTING
    policy = _LostAcknowledged()

    def __init__(self, options: TubeMQOptions, *, batch: bool = False) -> None:
        super().__init__(options, batch=batch)
        self.options: TubeMQOptions = options
        self.origins = TopicOrigins(options)
        self.run_id = uuid.uuid4().hex[:12]
        self.group: str = options.group or ""
        self.read_group = f"{self.group}-tubespark-read"
        self.batch_group = f"tubespark-batch-{self.run_id}"
        """A batch read's generated group (visible as such in TubeMQ's admin tools): no group is needed from the
        user; each task reads under its own read group and releases every registration when it ends."""
        self.ledger = PartitionLedger(self.states)
        self.member = GroupMembership(options, self.run_id, self._terminated)
        self._down: set[str] = set()  # brokers that did not take this trigger's offsets: planned nothing
        self._last_reader: BrokerClient | None = None  # fingerprint reads: one client (and connection per broker)
        self._planner: BrokerClient | None = None  # a batch read's probes and time searches
        self._probed: dict[str, ProbedBounds] = {}  # a batch read's partitions' bounds, as the broker told them
        self.skipped_bundles = 0
        """Messages read tasks skipped as unparseable so far (``skippedBundlesPath``; ``ignoreParseErrors``)."""

    # --- where partitions start -------------------------------------------------------------------

    def start_offsets(self) -> Offsets:
        """A new query: its initial partitions (the master's first assignment) start at startingOffsets. A master
        that is down is waited for by the engine when this process saw it answer, and fails within seconds naming
        ``master`` when it never did (:meth:`StreamEngine.initialOffset`); a broker the master lists that does not
        answer is the ledger's (its start is resolved at a later trigger)."""
        assigned = self.member.assigned()
        held = self.member.session().held()
        offsets = self.ledger.start_query(assigned, held, lambda key: self._resolve_start(key, held.get(key)))
        self._check_named(assigned)
        return offsets

    def _check_named(self, assigned: Collection[str]) -> None:
        """startingOffsets JSON names only partitions of the subscribed topics. One not assigned to this member may
        be another member's (logged); one the topic does not have fails the query (OptionError)."""
        spec = self.options.starting_offsets
        if not isinstance(spec, dict) or not set(spec) - set(assigned):
            return
        topics = set(self.member.topics)
        try:
            listed = {ref.key for refs in self.member.layout(sorted(topics)).values() for ref in refs}
        except TubeSparkError as exc:  # the master cannot list them now: each key is judged on its own below
            log.info("cannot list the partitions of %s to check startingOffsets: %s", ", ".join(sorted(topics)), exc)
            listed = set()
        listed |= set(assigned)

        def exists(key: str) -> bool:  # not listed: a broker that is down, or no such partition
            return PartitionRef.parse_key(key)[1] in topics and self._partition_exists(key)

        check_named_partitions("startingOffsets", spec, listed, exists=exists, listing=PARTITION_LISTING)
        others = sorted(set(spec) - set(assigned))
        if others:
            log.warning("startingOffsets names partitions the master assigned to other members of group %s (or not "
                        "yet): %s; each starts there when it joins this query", self.group, ", ".join(others))

    def _resolve_start(self, key: str, held: HeldPartition | None) -> int | None:
        """Where a new query starts ``key`` (a start time, else ``startingOffsets``); ``None`` when that
        cannot be known yet (the group's offset of a partition not held yet, a broker that does not answer)."""
        opts = self.options
        when = wanted_time(opts.starting_timestamp, opts.starting_offsets_by_timestamp, key)
        wanted = wanted_offset(opts.starting_offsets, key, default=EARLIEST)
        if when is None and wanted == "group":  # the broker tells the group's offset (min if none) on registration
            return None if held is None else held.stored_offset
        ref = self.member.refs[key]
        try:
            with self.member.probe_broker() as broker:
                bounds = probe_bounds(broker, ref, self.member.probe_group)
                if when is not None:  # tubespark/tubemq/spark/by_time.py
                    return start_at_time(broker, ref, bounds, when, f"{self.member.probe_group}-time", opts)
        except TubeSparkError as exc:
            if not exc.retriable:
                raise
            log.warning("cannot learn the bounds of %s yet (its start is resolved once it answers): %s", key, exc)
            return None
        return resolve_start("startingOffsets", opts.starting_offsets, key, low=bounds.min_offset,
                             high=bounds.max_offset, default=EARLIEST, units=OFFSET_UNITS,
                             fail_on_data_loss=opts.fail_on_data_loss)

    def _terminated(self) -> None:
        self.on_terminate()  # looked up now: the stream engine sets it after this object is built

    # --- a batch read ------------------------------------------------------------------------------------

    def catalog(self) -> Catalog:
        """The partitions the master lists, checked against its configuration (:mod:`.availability`): one
        configured on a broker that does not serve it is unavailable, and so is every partition of a broker the
        master lists but that does not answer (crashed or stalled, not yet released by the master: that takes its
        heartbeat timeout)."""
        opts = self.options
        topics = subscribed_topics(opts)  # an unknown topic or an unreachable master fails here, on the driver
        served = served_partitions(topics, opts)
        catalog = Catalog(unavailable=dict(served.missing), reasons=dict(served.reasons), topics=topics,
                          checked=served.checked)
        self._planner = self._planner or BrokerClient(f"{self.batch_group}.planner", opts.client_settings())
        for ref in served.listed:
            self.member.refs[ref.key] = ref
            if ref.broker_id in catalog.unavailable:
                catalog.unavailable[ref.broker_id] += (ref.key,)
                continue
            try:
                self._probed[ref.key] = probe_bounds(self._planner, ref, f"{self.batch_group}-probe")
            except BrokerConnectionError as exc:
                catalog.reasons[ref.broker_id] = (f"broker {ref.broker_id} ({ref.broker.address}): listed by the "
                                                  f"master but not answering ({exc})")
                answered = tuple(key for key in catalog.bounds if self.member.refs[key].broker_id == ref.broker_id)
                catalog.unavailable[ref.broker_id] = (*answered, ref.key)
                for key in answered:
                    del catalog.bounds[key]
                continue
            found = self._probed[ref.key]
            catalog.bounds[ref.key] = Bounds(found.min_offset, found.max_offset)
        return catalog

    def pushdown_columns(self) -> Columns:
        """What a pushed WHERE filter can use (:mod:`tubespark.spark.pushdown`): the partition columns select
        partitions; ``offset`` cuts ranges; ``msgTime`` prunes by the same bisection as ``startingTimestamp``;
        ``streamId`` is the msgType the broker filters by (a hash: Spark checks again), only with
        ``streamIdPushdown=true``: a filtered fetch tells no exact offset for the messages it returns, so the
        ``offset`` column changes (docs/tubemq/protocol.md "Filtering by msgType"). With ``payloadFormat=inlongmsg``
        a row's ``streamId`` and ``msgTime`` are its record's, which the broker does not see: left to Spark."""
        columns = dict(PUSHDOWN_COLUMNS)
        if self.options.inlongmsg or not self.options.stream_id_pushdown:
            del columns["streamId"]
        if self.options.inlongmsg:
            del columns["msgTime"]
        return columns

    def partition_values(self, key: str) -> Mapping[str, object]:
        broker_id, topic, partition_id = PartitionRef.parse_key(key)
        return {"partitionKey": key, "topic": topic, "brokerId": broker_id, "partitionId": partition_id}

    def time_position(self, key: str, bounds: Bounds, column: str, when_ms: int) -> int:
        """The first offset at or after ``when_ms``'s minute (tubespark/tubemq/client/seek.py), the partition's
        max offset when every message is older."""
        assert self._planner is not None, "time_position runs while the batch plan holds its planner"
        return end_at_time(self._planner, self.member.refs[key], self._probed[key], when_ms,
                           f"{self.batch_group}-time", self.options)

    def use_tags(self, column: str, values: frozenset[object]) -> frozenset[object]:
        """Read tasks register with these stream ids as the broker's filter, met with ``streamIds`` when that is
        set (a row must pass both). More than the broker's 500 filter items: no broker filter (Spark's applies)."""
        given = set(self.options.stream_ids)
        ids = frozenset(str(v) for v in values if not given or v in given)
        if 0 < len(ids) <= MAX_STREAM_IDS:
            self.options = replace(self.options, stream_ids=tuple(sorted(ids)))
        return ids

    def position_at(self, key: str, bounds: Bounds, option: str) -> int | None:
        """A start or end time (``startingTimestamp``, ``startingOffsetsByTimestamp``, ``endingTimestamp``,
        ``endingOffsetsByTimestamp``) wins over the offsets option: the offset of the first message stored at or
        after it (tubespark/tubemq/spark/by_time.py)."""
        opts = self.options
        if option == "startingOffsets":
            when = wanted_time(opts.starting_timestamp, opts.starting_offsets_by_timestamp, key)
            search = start_at_time
        else:
            when = wanted_time(opts.ending_timestamp, opts.ending_offsets_by_timestamp, key)
            search = end_at_time
        if when is None or self._planner is None:
            return None
        return search(self._planner, self.member.refs[key], self._probed[key], when, f"{self.batch_group}-time",
                      opts)

    # --- each trigger ------------------------------------------------------------------------------

    def survey(self, start: Offsets) -> Survey:
        self._report_skips()
        self.member.remember(start)
        self.member.refresh_topics()
        session = self.member.session()
        refusal = session.refusal()
        if refusal is not None:  # e.g. a broker refuses our TLS certificate: waiting would stall the query
            raise refusal
        assigned = self.member.assigned()
        held = session.held()
        pending = session.pending()
        ledger = self.ledger
        ledger.first_assignment(assigned, start)
        survey = Survey()
        for key, offset in start.items():
            # Every partition stays in the offsets, assigned or not, so the checkpoint never forgets where
            # this query stands on it (a restart resumes there, rule a).
            if key in assigned:
                continue
            if not ledger.keeps_start(key):
                if not self._partition_exists(key):
                    survey.gone[key] = "its topic no longer lists it"
                    ledger.forget(key)
                    continue
                ledger.revoke(key, offset)  # revoked (or, after a restart, assigned elsewhere): rule (d)
        for key, ref in sorted(assigned.items()):
            item = held.get(key)
            if key in start:
                if item is not None:
                    jump = ledger.regain(key, start[key], item.stored_offset)
                    if jump is not None:
                        survey.jumps[key] = jump
            else:
                first = ledger.join_offset(key, None if item is None else item.stored_offset,
                                           partial(self._resolve_start, held=item))
                if first is None:
                    survey.unavailable[key] = pending.get(key, Assignment.UNRESOLVED.value)
                    continue
                survey.joined[key] = first
            self._survey_bounds(key, ref, item, pending, survey)
        return survey

    def _survey_bounds(self, key: str, ref: PartitionRef, item: HeldPartition | None, pending: Mapping[str, str],
                       survey: Survey) -> None:
        """The bounds of one assigned partition, or why it cannot be read this trigger."""
        ledger = self.ledger
        if item is None:
            why = pending.get(key, Assignment.NOT_HELD.value)
            ledger.mark(key, Assignment.NOT_HELD, why)
            survey.unavailable[key] = why
            log.info("partition %s of group %s is assigned but not held (%s): no new data this trigger", key,
                     self.group, why)
            return
        ledger.mark(key, Assignment.HELD)
        if ref.broker.address in self._down:
            ledger.mark(key, Assignment.OFFLINE)
            survey.unavailable[key] = f"broker {ref.broker.address} unreachable"
            return
        try:
            fresh = self.member.session().refresh(ref)
        except UnknownTopicError as exc:
            if not self._partition_exists(key):
                survey.gone[key] = str(exc)
                return
            survey.unavailable[key] = f"broker {ref.broker.address} refused it: {exc}"
            return
        except TubeSparkError as exc:
            if isinstance(exc, BrokerConnectionError):
                self._down.add(ref.broker.address)
            ledger.mark(key, Assignment.OFFLINE)
            survey.unavailable[key] = f"broker {ref.broker.address} did not answer: {exc}"
            log.warning("partition %s: broker %s unreachable, no new data this trigger (it stays assigned and is "
                        "registered again when the broker is back): %s", key, ref.broker.address, exc)
            return
        if fresh is None:
            survey.unavailable[key] = "released while planning"
            return
        survey.bounds[key] = Bounds(None, fresh.max_offset)

    def _partition_exists(self, key: str) -> bool:
        """False only on evidence that ``key`` was removed; a partition that may merely be unserved now counts
        as existing (it stays in the offsets, plans nothing, and resumes when its broker serves again).

        A broker that is down, stopped or whose heartbeat timed out drops out of the master's RPC views
        exactly like a deleted partition. The configuration (the masters' web API, ``masterWebUrl``;
        docs/tubemq/brokers.md "Configured and served partitions") decides. When no web API answers, the
        configuration is unknown, never "not listed": the partition exists if the master lists it, and
        otherwise its own broker is asked. A broker that answers that it has no such topic or partition
        is evidence of removal; one that does not answer is down, which is no evidence at all.
        """
        topic = PartitionRef.parse_key(key)[1]
        try:
            return configured_partitions(self.options.web_urls(), [topic],
                                         timeout_s=self.options.request_timeout_ms / 1000).is_configured(key)
        except AdminApiError as exc:
            log.info("no master web API answered (%s): whether %s still exists is asked of the master's served "
                     "partitions and of its broker; set masterWebUrl so a broker that is down is never taken for "
                     "a removed partition", exc, key)
        try:
            layout = self.member.layout([topic])
            if any(ref.key == key for ref in layout.get(topic, ())):
                return True
        except UnknownTopicError:
            pass  # the master lists none of the topic's partitions: removed, or its brokers are all down
        except TubeSparkError as exc:  # the master cannot tell right now: assume it exists, ask again later
            log.info("cannot check whether partition %s still exists: %s", key, exc)
            return True
        ref = self.member.refs.get(key)
        if ref is None:
            return True
        try:
            with self.member.probe_broker() as broker:
                probe_bounds(broker, ref, self.member.probe_group, occupied_wait_s=1.0)
        except UnknownTopicError as exc:
            log.info("broker %s says partition %s is not there: %s", ref.broker.address, key, exc)
            return False
        except TubeSparkError as exc:
            log.warning("partition %s: the master does not list it and its broker %s does not answer (%s); taken "
                        "as a broker that is down, not a removed partition: no new data until it serves again",
                        key, ref.broker.address, exc)
        return True

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

    def available_now_target(self) -> Offsets:
        """Every partition the master assigned counts, held on its broker or not: the max offsets come from
        a private probe group, which a stale registration of the user's group does not block."""
        assigned = self.member.assigned()
        if not assigned:  # whether the topics have no partition to serve (brokers down) or others hold them
            self.member.layout(self.member.topics)  # raises naming the first case
            log.info("AvailableNow run of group %s got no partition: other members of the group hold them all",
                     self.group)
        target: Offsets = {}
        for key, ref in sorted(assigned.items()):
            try:
                with self.member.probe_broker() as broker:
                    target[key] = probe_bounds(broker, ref, self.member.probe_group).max_offset
            except TubeSparkError as exc:
                if not exc.retriable:
                    raise
                log.warning("AvailableNow: cannot learn the max offset of %s yet: %s", key, exc)
        return target

    def available_now_wait_s(self) -> float:
        return self.options.assignment_timeout_ms / 1000

    def wait_for_change(self, timeout_s: float) -> None:
        self.member.session().wait_for_change(timeout_s)

    def fingerprint(self, key: str, offset: int) -> int | None:
        """The last message of ``key`` in the :data:`FINGERPRINT_WINDOW` records below ``offset``, read under a
        private probe group (register, one fetch, release); ``None`` when none of them is this partition's."""
        ref = self.member.refs.get(key)
        if ref is None or offset <= 0:
            return None
        low = max(0, offset - FINGERPRINT_WINDOW * INDEX_RECORD_SIZE)
        if self._last_reader is None:  # kept: a connection per call cost ~3 ms per partition and trigger
            self._last_reader = BrokerClient(f"{self.member.probe_group}-last.{self.run_id}",
                                             self.options.client_settings())
        reader = RangeReader(self._last_reader, f"{self.member.probe_group}-last", fail_on_data_loss=False,
                             verify_checksums=False, retry_s=5.0)
        last: ReceivedMessage | None = None
        for message in reader.read(ref, low, offset):
            last = message
        return None if last is None else message_fingerprint(last)

    def incarnation(self, key: str) -> object:
        """How many connections the group session opened to the partition's broker: a broker that restarted
        broke the last one, even when it came back between two triggers."""
        ref = self.member.refs.get(key)
        return None if ref is None else self.member.session().brokers.pool.opened(ref.broker.address)

    def sample_sizes(self, key: str, low: int, high: int) -> list[int]:
        """Read under a private probe group: the read tasks' group may hold the partition right now."""
        with self.member.probe_broker() as broker:
            reader = RangeReader(broker, f"{self.member.probe_group}-size", verify_checksums=False, retry_s=5.0)
            return [len(m.data) for m in reader.read(self.member.refs[key], low, high)]

    # --- tasks and offsets ----------------------------------------------------------------------------

    def gone(self, keys: Collection[str]) -> dict[str, str]:
        """A restart replays a batch for partitions this member no longer holds: their brokers are looked up (the
        master's listing, else its configuration); one found in neither no longer exists."""
        missing = [key for key in keys if key not in self.member.refs]
        if not missing:
            return {}
        topics = {PartitionRef.parse_key(k)[1] for k in missing}
        # a master restarting right now must not fail the batch: wait for it like the session does
        layouts = call_with_retry(
            lambda: self.member.layout(topics),
            RetryPolicy(timeout_s=self.options.assignment_timeout_ms / 1000, backoff_s=0.5, max_backoff_s=5.0),
            what=f"look up the brokers of {sorted(topics)}")
        for parts in layouts.values():
            self.member.refs.update({p.key: p for p in parts})
        self.member.refs.update(self._configured_refs([k for k in missing if k not in self.member.refs]))
        return {key: "neither the master nor its configuration lists it" for key in missing
                if key not in self.member.refs}

    def read_tasks(self, ranges: Sequence[Range], defer: Deferring = None) -> Sequence[InputPartition]:
        tasks: list[InputPartition] = []
        for index, (key, low, high) in enumerate(ranges):
            ref = self.member.refs[key]
            if self.batch:  # splits of one partition run at the same time: each needs its own read group
                group, client_id = f"{self.batch_group}-r{index}", f"{self.batch_group}.{index}"
            else:
                group = self.read_group
                client_id = f"{self.read_group}.{self.run_id}.{ref.broker_id}.{ref.partition_id}.{ref.topic}"
            tasks.append(QueueRange(ref.broker_id, ref.host, ref.port, ref.topic, ref.partition_id, low, high,
                                    group, client_id, defer))
        return tasks

    def _configured_refs(self, keys: Sequence[str]) -> dict[str, PartitionRef]:
        """Where the master's configuration puts ``keys`` the master does not list: a replayed batch's range of a
        partition whose broker is down (the query restarted during the outage) is still to be read, from the
        broker it is configured on; the read task waits for it like for any broker fault. Keys the
        configuration does not hold (removed), or every key when no web API answers, are left out."""
        if not keys:
            return {}
        topics = sorted({PartitionRef.parse_key(key)[1] for key in keys})
        try:
            placement = configured_partitions(self.options.web_urls(), topics,
                                              timeout_s=self.options.request_timeout_ms / 1000)
        except AdminApiError as exc:
            log.info("no master web API answered (%s): where %s are configured is unknown", exc, ", ".join(keys))
            return {}
        refs: dict[str, PartitionRef] = {}
        for key in keys:
            deployment = placement.deployment_of(key)
            if deployment is None or not deployment.configured:
                continue
            host, _, port = deployment.broker_address.rpartition(":")
            broker_id, topic, partition_id = PartitionRef.parse_key(key)
            refs[key] = PartitionRef(broker_id, topic, partition_id, host, int(port))
            log.warning("partition %s: a replayed batch reads it from broker %s, which the master does not list now "
                        "(down or restarting): its read task waits for the broker", key, deployment.broker_address)
        return refs

    def read(self, task: InputPartition, *, driver: bool = False) -> Iterator[pa.RecordBatch]:
        """A driver's read does not wait out an outage (it is tried again at a later trigger)."""
        if not isinstance(task, QueueRange):
            raise TypeError(f"a tubemq read task is a QueueRange, not {type(task).__name__}")
        return read_range(task, self.options, outage_s=0, defer=False) if driver else read_range(task, self.options)

    def store_offsets(self, offsets: Offsets) -> None:
        """Store ``offsets`` as the group's for the partitions held (commitToGroup); never raises. Brokers
        that did not answer plan nothing this trigger."""
        self._down = set()
        self.member.remember(offsets)
        if not self.options.commit_to_group:
            return
        session = self.member.session()
        for key, item in sorted(session.held().items()):
            address = item.ref.broker.address
            if key not in offsets or self.states[key].stored == offsets[key] or address in self._down:
                continue
            if self.ledger.state(key) is Assignment.REVOKED:
                continue  # held again: the group's offset decides where it resumes (rule d), don't overwrite it
            try:
                session.commit(item.ref, offsets[key])
                self.states[key].stored = offsets[key]
            except TubeSparkError as exc:  # the next commit or plan tries again
                if isinstance(exc, BrokerConnectionError):
                    self._down.add(address)
                log.warning("could not store offset %d for %s in group %s: %s", offsets[key], key, self.group, exc)

    def close(self) -> None:
        for client in (self._last_reader, self._planner):
            if client is not None:
                client.close()
        self._last_reader = self._planner = None
        self.member.close()
