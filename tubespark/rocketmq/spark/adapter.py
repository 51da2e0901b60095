"""RocketMQ's answers to the shared planners (:class:`tubespark.spark.broker.Broker`): pull streams and batch
reads of its message queues. (Pop mode is not range-based: the broker hands out messages; it keeps its own reader.)

The driver plans one Spark partition per message queue with new data, offsets
``{"topic:brokerName:queueId": offset}`` in Spark's checkpoint (the source of truth: a restart resumes
there, exactly once with an idempotent sink); :class:`tubespark.spark.stream_engine.StreamEngine` plans
them and owns the read limits. It follows the route each trigger: a queue whose broker does not answer
plans nothing this trigger; a group whose master died is read from the acting master the name server puts
in its place, and from the master again when it returns. An offset never moves back: when the member
serving a queue reports a max offset below the query's (an acting slave that had not replicated
everything), the queue waits until the data is there again. A queue added to a topic joins at its min
offset. The committed batch's end is stored as the group's offsets (``group`` + ``commitToGroup``).

A broker group that stops leaves the name server's routes and cluster at once. Its queues in the offsets
plan nothing until it is back (they are not vanished: the offsets are this process's evidence of them, so
even a query restarted while the group is down takes a topic on that group alone for an outage, not an
unknown topic). A new query started while a group is down plans the live groups' queues; the down
group's queues join when it is back, from their min offset, as any queue new to the query does. A read task
whose group goes down mid-range waits for it, or, with ``deferredRangesPath`` set, leaves the rest of its range
to the next batch (``deferOnOutage``).

A batch read checks its plan against the queues this process knows of (the routes it was given, the queues the
offsets options name: :func:`~tubespark.rocketmq.client.client.remember`): the name server routes only the broker
groups that run, so known queues on a group that is not registered now are unavailable partitions
(``onUnavailablePartitions``). A process that never saw the topic's other groups and names none of their queues
cannot know of them: the name server keeps no record of a stopped group.

With Spark's filter pushdown on, a batch read selects queues, cuts offsets and turns a ``WHERE`` on ``tags`` into
the pulls' tag filter (:meth:`PullAdapter.pushdown_columns`, docs/rocketmq/guide.md "Filter pushdown").
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from tubespark.errors import BrokerUnavailableError, TubeSparkError
from tubespark.rocketmq.client.client import RocketMQClient, all_queues, remember, remembered
from tubespark.rocketmq.spark.options import QUEUE_LISTING, RocketMQOptions
from tubespark.rocketmq.spark.read_task import READ_GROUP, PullRange, read_range
from tubespark.rocketmq.wire.filter import SUB_ALL, TAG
from tubespark.rocketmq.wire.route import MessageQueue
from tubespark.spark.broker import Broker, Catalog, Deferring, Range, Survey
from tubespark.spark.offset_rules import check_named_partitions, resolve_start
from tubespark.spark.offsets import EARLIEST, Offsets, wanted_offset
from tubespark.spark.planning import Bounds, BoundsPolicy, Resolution
from tubespark.spark.pushdown import Column, Columns, Kind
from tubespark.spark.unavailable import FAIL

log = logging.getLogger(__name__)


class _NeverBack(BoundsPolicy):
    """A serving member behind the query's offset is waited for: an acting slave catches up, data returns.

    Only a running query's own offset (from its checkpoint or an earlier batch) is judged here; a start the user
    named above a queue's max fails at the start instead (tubespark.spark.offset_rules)."""

    lost_above = False

    def above(self, key: str, start: int, bounds: Bounds) -> Resolution:
        log.warning("queue %s: the broker serving it reports max offset %d, below this query's %d (a slave acting "
                    "for its master may lag); waiting, the offset does not move back", key, bounds.high, start)
        return Resolution(None, f"its serving broker is at {bounds.high}, behind this query's {start}")


def _tag_ok(value: object) -> bool:
    """A tag a tag expression can name: the broker splits ``subExpression`` on ``||`` and trims each part, and
    ``*`` means every message; a tag with those in it (or an empty one) is left to Spark."""
    return isinstance(value, str) and value != SUB_ALL and value == value.strip() != "" and "||" not in value


PUSHDOWN_COLUMNS: Mapping[str, Column] = {
    "queueKey": Column(Kind.PARTITION, str, never_null=True),
    "topic": Column(Kind.PARTITION, str, never_null=True),
    "brokerName": Column(Kind.PARTITION, str, never_null=True),
    "queueId": Column(Kind.PARTITION, int, never_null=True),
    "queueOffset": Column(Kind.OFFSET, int, never_null=True),
    "tags": Column(Kind.TAG, str, accepts=_tag_ok, exact=True),
}
"""The read columns a pushed filter can use (docs/rocketmq/guide.md#filter-pushdown)."""


class PullAdapter(Broker):
    """The ``rocketmq`` format's broker object (pull reads)."""

    name = "rocketmq"
    listing = QUEUE_LISTING
    policy = _NeverBack()
    fingerprint_columns = ("queueOffset", "msgId", "storeTimestamp", "value")

    def __init__(self, options: RocketMQOptions, *, batch: bool = False) -> None:
        super().__init__(options, batch=batch)
        self.options: RocketMQOptions = options
        self._client: RocketMQClient | None = None
        self._stored: Offsets = {}
        self._filter_checked = False

    @property
    def client(self) -> RocketMQClient:
        if self._client is None:
            self._client = RocketMQClient(list(self.options.namesrvs), self.options.client_settings())
        return self._client

    def _check_filter(self) -> None:
        """Once per process, before planning: the brokers take ``subExpression`` (a pull does not say when an
        SQL92 filter does not compile)."""
        if not self._filter_checked:
            for topic in self.options.topics or ():
                self.client.check_filter(topic, self.options.group or READ_GROUP, self.options.filter)
            self._filter_checked = True

    def _queues(self) -> list[MessageQueue]:
        return all_queues(self.client, self.options.topics or (), refresh=True)

    def start_offsets(self) -> Offsets:
        """A new query's start. Its brokers down while a name server answers are waited for by the engine
        (:meth:`StreamEngine.initialOffset`), as a running stream waits; a ``namesrv`` that never answered in this
        process fails within seconds naming the option."""
        opts = self.options
        self._check_filter()
        queues = self._queues()
        self._check_named(queues)
        bounds = self.client.bounds(queues)
        offsets: Offsets = {}
        for mq in queues:
            low, high = bounds[mq.key]
            wanted = wanted_offset(opts.starting_offsets, mq.key, default=EARLIEST)
            if wanted == "group":
                stored = self.client.consumer_offset(opts.group or "", mq)
                offsets[mq.key] = low if stored is None else max(low, min(stored, high))
            else:  # a number above the max is the user's mistake here, not a lagging slave (see _NeverBack)
                offsets[mq.key] = resolve_start("startingOffsets", opts.starting_offsets, mq.key, low=low, high=high,
                                                default=EARLIEST, fail_on_data_loss=opts.fail_on_data_loss)
        return offsets

    def catalog(self) -> Catalog:
        """Every routed queue's bounds, and the known queues of broker groups not registered now."""
        opts = self.options
        topics = opts.topics or ()
        remember(MessageQueue.parse_key(key) for spec in (opts.starting_offsets, opts.ending_offsets)
                 if isinstance(spec, dict) for key in spec if MessageQueue.parse_key(key).topic in topics)
        client = self.client
        queues: list[MessageQueue] = []
        catalog = Catalog()
        for topic in topics:
            try:
                route = client.route(topic)  # an unknown topic fails here, on the driver
            except BrokerUnavailableError:  # no group routes it now: down, when this process knows its queues
                down = remembered(topic)
                if not down:
                    raise
            else:
                queues += route.read_queues()
                down = client.down_groups(topic, route)
            for group, known in down.items():
                catalog.unavailable[group] = (*catalog.unavailable.get(group, ()), *(mq.key for mq in known))
                catalog.reasons[group] = f"broker group {group} (not registered at the name server: stopped or down)"
        queues.sort()
        if catalog.unavailable and opts.on_unavailable_partitions == FAIL:
            catalog.unasked = tuple(mq.key for mq in queues)  # the read fails naming the groups: asking the live
            return catalog  # ones first would only delay that
        catalog.bounds = {key: Bounds(low, high) for key, (low, high) in client.bounds(queues).items()}
        for topic in topics:
            client.check_filter(topic, opts.group or READ_GROUP, opts.filter)
        return catalog

    def _check_named(self, queues: Sequence[MessageQueue]) -> None:
        """startingOffsets JSON names only queues of the topics: routed ones, or ones of a broker group that is not
        registered now (down: they join when it is back, as the batch read's check counts them too)."""
        spec = self.options.starting_offsets
        routed = {mq.key for mq in queues}
        if not isinstance(spec, dict) or set(spec) <= routed:
            return
        topics = self.options.topics or ()
        remember(mq for mq in map(MessageQueue.parse_key, spec) if mq.topic in topics)
        away = {mq.key for topic in topics
                for known in self.client.down_groups(topic, self.client.route(topic)).values() for mq in known}
        check_named_partitions("startingOffsets", spec, routed, exists=away.__contains__, listing=QUEUE_LISTING)

    def survey(self, start: Offsets) -> Survey:
        # the offsets are evidence of the queues (a query restarted on its checkpoint while a broker group is
        # down: the name server forgot that group, and a topic on it alone would look unknown)
        remember(MessageQueue.parse_key(key) for key in start)
        self._check_filter()
        queues: list[MessageQueue] = []
        for topic in self.options.topics or ():
            try:
                queues += all_queues(self.client, [topic], refresh=True)
            except BrokerUnavailableError as exc:  # its brokers are away: its queues plan nothing, stay in the offsets
                log.warning("topic %s: %s; its queues read on once a broker serves them again", topic, exc)
        found = self.client.bounds(queues, follow=False)  # a dead broker plans nothing this trigger
        survey = Survey(bounds={key: Bounds(low, high) for key, (low, high) in found.items()})
        routed = {mq.key for mq in queues}
        for key in start:
            if key not in routed:
                survey.unavailable[key] = "the name server routes no broker to it now"
            elif key not in found:
                survey.unavailable[key] = "its broker did not answer"
        for key, (low, _high) in found.items():
            if key not in start:
                log.info("queue %s joined the topic; reading it from offset %d", key, low)
                survey.joined[key] = low
        return survey

    def available_now_target(self) -> Offsets:
        return {key: high for key, (_low, high) in self.client.bounds(self._queues()).items()}

    def pushdown_columns(self) -> Columns:
        """A pushed WHERE on the queue columns selects queues; on ``queueOffset`` it cuts each queue's range; on
        ``tags`` (``=``, ``IN``) it becomes the pull's tag filter (:meth:`use_tags`), served exactly: the broker
        filters by tag hash code, the read drops the collisions by the real tag (``Filter.keeps``, as the Java
        client's ``PullAPIWrapper.processPullResult``), and every message keeps its own ``queueOffset``, so no
        column changes (unlike TubeMQ's ``streamIdPushdown``, no opt-in). With an SQL92 ``subExpression`` a tag
        filter stays with Spark: a pull takes one expression of one type (:mod:`tubespark.spark.pushdown`)."""
        if self.options.filter.kind != TAG:
            return {name: spec for name, spec in PUSHDOWN_COLUMNS.items() if name != "tags"}
        return PUSHDOWN_COLUMNS

    def use_tags(self, column: str, values: frozenset[object]) -> frozenset[object]:
        """Read tasks pull with these tags as ``subExpression``, met with the user's tag list when one is set (a
        row must pass both: their intersection, exactly). Empty: no message can match (the plan reads none)."""
        given = self.options.filter.tags
        tags = frozenset(str(v) for v in values if not given or v in given)
        if tags:
            self.options = replace(self.options, sub_expression=" || ".join(sorted(tags)), expression_type=TAG.lower())
        return tags

    def partition_values(self, key: str) -> Mapping[str, object]:
        mq = MessageQueue.parse_key(key)
        return {"queueKey": key, "topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}

    def read_tasks(self, ranges: Sequence[Range], defer: Deferring = None) -> Sequence[InputPartition]:
        return [PullRange(mq.topic, mq.broker_name, mq.queue_id, low, high, defer)
                for mq, low, high in ((MessageQueue.parse_key(key), low, high) for key, low, high in ranges)]

    def read(self, task: InputPartition, *, driver: bool = False) -> Iterator[pa.RecordBatch]:
        """A driver's read: one request timeout of retries, not the failover budget nor an outage wait (every
        trigger would wait for it), and unfiltered: a fingerprint names the message at an offset and a size
        sample estimates offsets' bytes, whatever ``subExpression`` keeps."""
        if not isinstance(task, PullRange):
            raise TypeError(f"a rocketmq pull task is a PullRange, not {type(task).__name__}")
        if not driver:
            return read_range(task, self.options)
        return read_range(task, self.options, retry_s=self.options.request_timeout_ms / 1000, outage_s=0,
                          filtered=False, defer=False)

    def store_offsets(self, offsets: Offsets) -> None:
        """Store a committed batch's end as the group's offsets (best effort: the checkpoint rules)."""
        group = self.options.group
        if not group or not self.options.commit_to_group:
            return
        for key, offset in sorted(offsets.items()):
            if self._stored.get(key) == offset:
                continue
            try:
                self.client.commit_offset(group, MessageQueue.parse_key(key), offset)
                self._stored[key] = offset
            except TubeSparkError as exc:
                log.warning("could not store offset %d of %s for group %s: %s", offset, key, group, exc)

    def available_now_wait_s(self) -> float:
        return self.options.failover_timeout_ms / 1000

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
