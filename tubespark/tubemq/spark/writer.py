"""The TubeMQ sink: ``df.write.format("tubemq")`` and ``df.writeStream.format("tubemq")``.

Columns: ``value`` (binary or string, required), ``topic`` (unless the ``topic`` option is set; the
option wins), ``streamId`` (sent as msgType, so server-side filters match), ``msgTime`` (timestamp or
``yyyyMMddHHmm`` string), ``attributes`` (map<string,string>) and ``partitionKey`` (rows with the
same key go to the same partition; otherwise round-robin).

A broker that fails a send is shielded for a while (``Producer``): rows go to the other brokers'
partitions, those that failed are re-sent there, and the executor log says so. Rows with a
``partitionKey`` then go to a serving broker's partition too, the same one for the same key as long as
the same brokers serve.

Each executor process keeps one producer per cluster. One message per row: each Arrow batch of rows goes
through the producer's batched path (:meth:`Producer.send_prepared`): up to ``maxInFlight`` SendMessage
requests per broker on the wire, each window written in one socket write, no future per row; a task
returns only after the broker acknowledged every row, and fails (after retries) on any send error, so
nothing is dropped silently. Delivery is at-least-once: a retried task sends its rows again. With
``dedupAttribute`` every message carries a stable id (write, task, row), and a tubespark reader
with ``dedupe=true`` drops the replays.

``payloadFormat=inlongmsg`` packs the rows into InLong bundles (InLongMsg v1, see
:mod:`tubespark.formats.inlongmsg` for why v1) instead: one open bundle per (topic, partition,
streamId, msgTime minute, attributes), closed at ``bundleMaxRows`` rows, ``bundleMaxBytes`` bytes of
records (default: the topic's max message size minus :data:`BUNDLE_HEADROOM`) or ``bundleLingerMs``
after it opened, and at the end of the task. A record carries the row's ``attributes`` plus
``streamId`` (the column, when set) and ``dt`` (the row's msgTime in epoch ms, when set) and, with
``dedupAttribute``, its own stable id. Each bundle is one SendMessage with msgType = the streamId (so
broker-side filters match) and the TubeMQ attribute ``msgEnType=2`` (how InLong recognises InLongMsg).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Hashable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.sql.types import BinaryType, MapType, StringType, StructType, TimestampType

from tubespark.core.outage import ride_out
from tubespark.errors import (
    BrokerConnectionError,
    BrokerUnavailableError,
    MessageFormatError,
    OptionError,
    UnknownTopicError,
)
from tubespark.formats import PayloadEncodeError, format_attributes
from tubespark.formats.bundles import ATTR_MSG_EN_TYPE, MSG_EN_TYPE_INLONGMSG
from tubespark.spark.arrow import column_values
from tubespark.spark.bundling import RECORD_OVERHEAD_BYTES, Bundle, Bundler, attributes_cost, encode_bundle
from tubespark.spark.writers import (
    SentCommitMessage,
    StampedBatchWriter,
    StampedStreamWriter,
    StampedWriter,
    check_sink_columns,
    task_index,
)
from tubespark.tubemq.client.batch_send import Prepared
from tubespark.tubemq.client.placement import configured_partitions
from tubespark.tubemq.client.producer import Producer, unsendable
from tubespark.tubemq.errors import AdminApiError
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.message import OutgoingMessage, encode_payload, format_msg_time, parse_msg_time

log = logging.getLogger(__name__)

_ALLOWED = {
    "value": (BinaryType, StringType),
    "topic": (StringType,),
    "streamId": (StringType,),
    "msgTime": (TimestampType, StringType),
    "attributes": (MapType,),
    "partitionKey": (StringType,),
}


def check_sink_schema(schema: StructType, options: TubeMQOptions) -> None:
    """Fail the write on the driver, before any task runs, if the columns cannot be sent."""
    check_sink_columns(schema, _ALLOWED, broker="TubeMQ", topic_option=bool(options.topics))


_producers: dict[Hashable, Producer] = {}  # by what makes a cluster's producer


def _producer(options: TubeMQOptions) -> Producer:
    """One producer per cluster per executor process: Python workers are reused across tasks."""
    settings = options.client_settings()
    key = (tuple(options.masters), settings.connect_timeout_s, settings.request_timeout_s, settings.credentials,
           options.tls_enable, options.tls_ca_file, options.max_in_flight, options.send_retries,
           options.outage_timeout_ms)
    producer = _producers.get(key)
    if producer is None:
        producer = Producer(list(options.masters), settings, max_in_flight=options.max_in_flight,
                            max_retries=options.send_retries, outage_s=options.outage_timeout_ms / 1000).start()
        _producers[key] = producer
    return producer


def send_batches(batches: Iterator[pa.RecordBatch], options: TubeMQOptions, stamp: str | None) -> SentCommitMessage:
    """Send every row; return after all are acknowledged. ``stamp`` prefixes the dedup ids."""
    producer = _producer(options)
    fixed_topic = options.topics[0] if options.topics else None
    dedup_attribute = options.dedup_attribute
    try:
        if options.inlongmsg:
            rows, sent_bytes = BundledSend(producer, options, fixed_topic, stamp).send_all(batches)
        else:
            rows, sent_bytes = _send_all(batches, producer, fixed_topic, dedup_attribute, stamp, options)
    except BaseException:
        try:  # settle what this task already sent, so the next task on this worker starts clean
            producer.flush()
        except Exception as exc:  # noqa: BLE001 - the original failure is what the task reports
            log.info("sends of the failed task also failed: %s", exc)
        raise
    return SentCommitMessage(task_index(), rows, sent_bytes)


def _send_all(batches: Iterator[pa.RecordBatch], producer: Producer, fixed_topic: str | None,
              dedup_attribute: str | None, stamp: str | None, options: TubeMQOptions) -> tuple[int, int]:
    """One message per row, an Arrow batch at a time through the producer's batched path
    (:meth:`Producer.send_prepared`: pipelined, no future per row); every row is acknowledged before the
    next batch is read, which also bounds what is held in memory to one Arrow batch of rows.

    A batch's rows are encoded column by column (:func:`_encode_rows`) and placed and built in one
    :meth:`Producer.prepare_many` call per topic run; no object is made per row besides the request."""
    published: set[str] = set()
    rows = sent_bytes = 0
    for batch in batches:
        topics = None if fixed_topic else column_values(batch, "topic")
        datas = _bodies(batch)
        encoded = _encode_rows(batch, datas, dedup_attribute if stamp is not None else None, f"{stamp}-", rows)
        good = len(encoded.payloads)  # the rows before one whose attributes cannot be encoded
        for first, end, topic in _topic_runs(fixed_topic, topics, good):
            if first == end:
                continue
            if not topic:
                raise OptionError(f"row {rows + first} has no topic (null 'topic' column and no 'topic' option): "
                                  f"set the topic option or fill the topic column")
            if topic not in published:
                publish(producer, topic, options)
                published.add(topic)
            _send_run(producer, topic, encoded, first, end, rows, options)
        if encoded.error is not None:  # nothing of this row was sent
            row, topic = rows + good, fixed_topic or (topics[good] if topics else None)
            if not topic:
                raise OptionError(f"row {row} has no topic (null 'topic' column and no 'topic' option): set the "
                                  f"topic option or fill the topic column")
            raise type(encoded.error)(f"row {row} of this task (topic {topic!r}, value of {len(datas[good])} bytes) "
                                      f"cannot be sent: {encoded.error}; the {row} rows before it were sent"
                                      ) from encoded.error
        rows += len(datas)
        sent_bytes += sum(map(len, datas))
    return rows, sent_bytes


def _bodies(batch: pa.RecordBatch) -> list[bytes]:
    """The ``value`` column as message bodies: strings UTF-8 encoded, nulls empty (refused later as such).
    A binary column without nulls is its Python values as they are, without a look at each row."""
    index = batch.schema.get_field_index("value")
    if index < 0:
        return []
    column = batch.column(index)
    values: list[bytes | str | None] = column.to_pylist()
    if pa.types.is_binary(column.type) and not column.null_count:
        return values  # type: ignore[return-value]  # bytes, every one
    return [value.encode() if isinstance(value, str) else (value or b"") for value in values]


class _Rows:
    """A batch's rows as the producer takes them: payloads, and the columns only some batches have."""

    __slots__ = ("datas", "error", "flags", "key_hashes", "msg_times", "msg_types", "payloads")

    def __init__(self, datas: list[bytes], payloads: list[bytes], flags: list[int] | None,
                 msg_types: list[str] | None, msg_times: list[str] | None,
                 key_hashes: list[int | None] | None, error: MessageFormatError | None = None) -> None:
        self.datas, self.payloads, self.flags = datas, payloads, flags
        self.msg_types, self.msg_times, self.key_hashes = msg_types, msg_times, key_hashes
        self.error = error  # why row len(payloads) cannot be encoded (the columns stop before it)


def _encode_rows(batch: pa.RecordBatch, datas: list[bytes], dedup_attribute: str | None, stamp: str,
                 first_row: int) -> _Rows:
    """Encode a batch's rows (``OutgoingMessage.encode``'s payload and flag, the route hash): a batch of
    bare values is its values as they are; only rows with attributes, a streamId or a msgTime (or a dedup
    id) get an attribute prefix. ``first_row``: the task's row number of the batch's first row."""
    stream_ids, times = column_values(batch, "streamId"), column_values(batch, "msgTime")
    attributes, keys = column_values(batch, "attributes"), column_values(batch, "partitionKey")
    key_hashes: list[int | None] | None = [route_hash(key) for key in keys] if keys else None
    if not (stream_ids or times or attributes or dedup_attribute):
        return _Rows(datas, datas, None, None, None, key_hashes)
    count = len(datas)
    msg_types = [stream_id or "" for stream_id in stream_ids] if stream_ids else None
    msg_times = [format_msg_time(when) if isinstance(when, datetime) else (when or "")
                 for when in times] if times else None
    payloads: list[bytes] = []
    flags: list[int] = []
    if dedup_attribute and key_hashes is None:
        key_hashes = [None] * count
    for i, data in enumerate(datas):
        attrs = dict(attributes[i] or ()) if attributes else {}
        if dedup_attribute and key_hashes is not None:
            attrs[dedup_attribute] = dedup_id = f"{stamp}{first_row + i}"
            if not (keys and keys[i]):  # a replayed row lands where the original did
                key_hashes[i] = route_hash(dedup_id)
        try:
            payload, flag = encode_payload(data, attrs, msg_types[i] if msg_types else None,
                                           msg_times[i] if msg_times else None)
        except MessageFormatError as exc:  # a bad attribute, streamId or msgTime: the rows before it go
            return _Rows(datas, payloads, flags, msg_types and msg_types[:i], msg_times and msg_times[:i],
                         key_hashes and key_hashes[:i], exc)
        payloads.append(payload)
        flags.append(flag)
    return _Rows(datas, payloads, flags, msg_types, msg_times, key_hashes)


def _topic_runs(fixed_topic: str | None, topics: list[str | None] | None,
                count: int) -> Iterator[tuple[int, int, str | None]]:
    """``(first, end, topic)`` of each run of consecutive rows bound for one topic (one run with the
    ``topic`` option), in row order, so rows before a row without a topic are sent before it fails."""
    if fixed_topic or topics is None:
        yield 0, count, fixed_topic
        return
    first = 0
    for i in range(1, count + 1) if count else ():
        if i == count or topics[i] != topics[first]:
            yield first, i, topics[first]
            first = i


def _send_run(producer: Producer, topic: str, rows: _Rows, first: int, end: int, row_base: int,
              options: TubeMQOptions) -> None:
    """Prepare and send rows ``first:end`` of a batch to ``topic``. A row that cannot be sent (empty, too
    large) fails the task after the rows before it are sent, as the error says."""
    whole = first == 0 and end == len(rows.payloads)

    def part(column: list[Any] | None, stop: int) -> list[Any] | None:
        return column if column is None or (whole and stop == end) else column[first:stop]

    payloads = part(rows.payloads, end) or []
    bad = unsendable(payloads, producer.max_message_size(topic))
    stop = end if bad < 0 else first + bad

    def prepare() -> list[Prepared]:
        return producer.prepare_many(topic, part(rows.payloads, stop) or [], flags=part(rows.flags, stop),
                                     msg_types=part(rows.msg_types, stop), msg_times=part(rows.msg_times, stop),
                                     key_hashes=part(rows.key_hashes, stop))
    try:
        items = prepare()
    except BrokerConnectionError:  # a broker restarting now (no partition listed): nothing was sent
        items = ride_out(prepare, outage_s=options.outage_timeout_ms / 1000, what=f"send to TubeMQ topic {topic}")
    producer.send_prepared(items)
    if bad >= 0:  # too large or empty: nothing of this row was sent
        row, data = row_base + stop, rows.datas[stop]
        try:
            producer.prepare_many(topic, [rows.payloads[stop]])
        except MessageFormatError as exc:
            raise type(exc)(f"row {row} of this task (topic {topic!r}, value of {len(data)} bytes) cannot be "
                            f"sent: {exc}; the {row} rows before it were sent") from exc


def publish(producer: Producer, topic: str, options: TubeMQOptions) -> None:
    """Declare ``topic`` to the producer, waiting (``outageTimeoutMs``) for one whose brokers are away: one
    this producer saw served, or one the master's configuration holds (:func:`check_sink_reachable`)."""
    outage_s = options.outage_timeout_ms / 1000

    def declare() -> None:
        try:
            producer.publish([topic], timeout_s=max(5.0, min(60.0, outage_s)))
        except UnknownTopicError as exc:
            raise_if_configured(exc, options, (topic,))
            raise

    ride_out(declare, outage_s=outage_s, what=f"partitions of TubeMQ topic {topic}")


def route_hash(route: str | None) -> int | None:
    """The hash the producer places a row by (``Producer.choose_partition``): rows with equal routes go
    to the same partition; None (no route) is round-robin."""
    return zlib.crc32(route.encode()) if route is not None else None


BUNDLE_HEADROOM = 1024
"""Bytes of a topic's max message size left for the TubeMQ attributes of a bundle (``msgEnType``, msgType,
msgTime) when ``bundleMaxBytes`` is unset or larger."""

_BundleKey = tuple[str, str, str | None, str | None, tuple[tuple[str, str], ...]]
"""A bundle's key: topic, partition index (-1: the producer picks), streamId, msgTime minute, the row's
own attributes (sorted): rows that differ in any of them cannot share an InLong group."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_BUNDLE_ATTRIBUTES = {ATTR_MSG_EN_TYPE: str(MSG_EN_TYPE_INLONGMSG)}


def _epoch_ms(when: datetime) -> int:
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - _EPOCH) // _MS


class BundledSend:
    """``payloadFormat=inlongmsg``: one write task's rows packed into bundles (see the module docstring)."""

    def __init__(self, producer: Producer, options: TubeMQOptions, fixed_topic: str | None,
                 stamp: str | None) -> None:
        self.producer = producer
        self.options = options
        self.fixed_topic = fixed_topic
        self.dedup_attribute = options.dedup_attribute if stamp is not None else None
        self.stamp = stamp
        self.compress = options.bundle_compression == "snappy"
        self.bundler: Bundler[_BundleKey, dict[str, str]] = Bundler(max_rows=options.bundle_max_rows,
                                                                    linger_s=options.bundle_linger_ms / 1000)
        self.limits: dict[str, int] = {}  # topic -> payload limit of a bundle
        self.key_hashes: dict[_BundleKey, int | None] = {}  # bundle key -> the route hash its bundles are sent by
        self.shared: dict[_BundleKey, dict[str, str]] = {}  # key -> the attributes its records share (checked)
        self.bundles = 0

    def _limit(self, topic: str) -> int:
        limit = self.limits.get(topic)
        if limit is None:
            publish(self.producer, topic, self.options)
            limit = self.limits[topic] = self.producer.max_message_size(topic) - BUNDLE_HEADROOM
        return limit

    def send_all(self, batches: Iterator[pa.RecordBatch]) -> tuple[int, int]:
        rows = sent_bytes = 0
        for batch in batches:
            values = column_values(batch, "value") or []
            topics = None if self.fixed_topic else column_values(batch, "topic")  # the topic option wins
            stream_ids, times = column_values(batch, "streamId"), column_values(batch, "msgTime")
            attributes, keys = column_values(batch, "attributes"), column_values(batch, "partitionKey")
            if self.fixed_topic and not self.dedup_attribute and stream_ids is times is attributes is keys is None:
                # every row has the same key: only the values differ (the batch's rows in one call)
                datas = [value.encode() if isinstance(value, str) else (value or b"") for value in values]
                self._add_run(rows, datas)
                rows += len(datas)
                sent_bytes += sum(map(len, datas))
            else:
                for i, value in enumerate(values):
                    data = value.encode() if isinstance(value, str) else (value or b"")
                    self._add(rows, data, self.fixed_topic or (topics[i] if topics else None),
                              stream_ids[i] if stream_ids else None, times[i] if times else None,
                              attributes[i] if attributes else None, keys[i] if keys else None)
                    rows += 1
                    sent_bytes += len(data)
            self._ship(self.bundler.expired())
            self.producer.flush()  # bound what is held in memory to about one Arrow batch of rows
        self._ship(self.bundler.drain())
        self.producer.flush()
        log.info("task sent %d rows in %d bundles", rows, self.bundles)
        return rows, sent_bytes

    def _add(self, row: int, data: bytes, topic: str | None, stream_id: str | None, when: datetime | str | None,
             user_attributes: list[tuple[str, str]] | None, route: str | None) -> None:
        key, attrs, own_cost, max_bytes = self._place(row, topic, stream_id, when, user_attributes, route)
        cost = RECORD_OVERHEAD_BYTES + len(data) + own_cost
        if not self.bundler.is_open(key):  # the group's attribute text, once per bundle
            cost += attributes_cost(self.shared[key])
        self._ship(self.bundler.add(key, data, attrs, cost=cost, max_bytes=max_bytes, row=row))

    def _add_run(self, first_row: int, datas: list[bytes]) -> None:
        """:meth:`_add` of rows that have only a value (a fixed topic, no other column, no dedup id)."""
        key, attrs, _own_cost, max_bytes = self._place(first_row, self.fixed_topic, None, None, None, None)
        self._ship(self.bundler.add_run(key, datas, attrs, overhead=RECORD_OVERHEAD_BYTES,
                                        open_cost=attributes_cost(attrs), max_bytes=max_bytes, first_row=first_row))

    def _place(self, row: int, topic: str | None, stream_id: str | None, when: datetime | str | None,
               user_attributes: list[tuple[str, str]] | None,
               route: str | None) -> tuple[_BundleKey, dict[str, str], int, int]:
        """A row's bundle key, its record's attributes, what its own attributes add to its cost (a dedup id, a
        data time its group does not share) and the bundle size limit of its topic."""
        if not topic:
            raise OptionError(f"row {row} has no topic (null 'topic' column and no 'topic' option): set the "
                              f"topic option or fill the topic column")
        limit = self._limit(topic)
        minute: str | None = None
        dt: int | None = None
        if isinstance(when, datetime):
            minute, dt = format_msg_time(when), _epoch_ms(when)
        elif when is not None:
            parsed = parse_msg_time(when)
            if parsed is None:
                raise MessageFormatError(f"row {row} of this task: msgTime {when!r} is not yyyyMMddHHmm")
            minute, dt = when, _epoch_ms(parsed)
        own = tuple(sorted(user_attributes)) if user_attributes else ()
        record_extra: dict[str, str] = {}
        if self.dedup_attribute:
            record_extra[self.dedup_attribute] = f"{self.stamp}-{row}"
            route = route or record_extra[self.dedup_attribute]  # a replayed row lands where the original did
        # rows bound for one partition share bundles: group by the partition the route places them on now
        key_hash = route_hash(route)
        target = self.producer.choose_partition(topic, key_hash).key if key_hash is not None else ""
        key = (topic, target, stream_id, minute, own)
        self.key_hashes.setdefault(key, key_hash)
        shared = self.shared.get(key)
        if shared is None:
            shared = self._shared_attributes(row, dict(own), stream_id)
            self.shared[key] = shared
        if dt is not None and "dt" not in shared:
            record_extra["dt"] = str(dt)
        max_bytes = min(self.options.bundle_max_bytes or limit, limit)
        if not record_extra:
            return key, shared, 0, max_bytes
        attrs = {**shared, **record_extra}
        return key, attrs, attributes_cost(attrs), max_bytes

    def _shared_attributes(self, row: int, attrs: dict[str, str], stream_id: str | None) -> dict[str, str]:
        """The attributes every record of a key carries, checked once: what InLong's parser reads back."""
        if stream_id and attrs.setdefault("streamId", stream_id) != stream_id:
            raise MessageFormatError(f"row {row} of this task: its attribute streamId={attrs['streamId']!r} "
                                     f"disagrees with its streamId column {stream_id!r}")
        try:
            format_attributes(attrs)
        except PayloadEncodeError as exc:
            raise PayloadEncodeError(f"row {row} of this task cannot be put in an InLong bundle: {exc}") from exc
        return attrs

    def _ship(self, bundles: list[Bundle[_BundleKey, dict[str, str]]]) -> None:
        for bundle in bundles:
            key = bundle.key
            topic, _target, stream_id, minute, _own = key
            limit = self.limits[topic]
            describe = f"row {{}} of this task (topic {topic!r})".format
            for payload, rows in encode_bundle(bundle.records, bundle.rows, compress=self.compress, limit=limit,
                                               describe=describe):
                message = OutgoingMessage(payload, msg_type=stream_id, msg_time=minute,
                                          attributes=dict(_BUNDLE_ATTRIBUTES))
                try:
                    ride_out(partial(self.producer.send_async, topic, message, key_hash=self.key_hashes[key],
                                     defer=True), outage_s=self.options.outage_timeout_ms / 1000,
                             what=f"send to TubeMQ topic {topic}")
                except MessageFormatError as exc:
                    raise type(exc)(f"the bundle of rows {rows[0]}..{rows[-1]} of this task (topic {topic!r}, "
                                    f"{len(rows)} rows) cannot be sent: {exc}; rows in bundles before it were "
                                    f"sent") from exc
                self.bundles += 1


def check_sink_reachable(options: TubeMQOptions) -> None:
    """On the driver, before any task runs: the master answers and the ``topic`` option's topic is publishable.

    Fails with NoMasterAvailableError / BrokerConnectionError (master unreachable), UnknownTopicError (the
    master has no deployment of the topic, or a deployed one is closed to publishing) or
    BrokerUnavailableError (the master's configuration holds the topic, but no broker serves it now: down
    or restarting) instead of one failure per task
    later. A topic taken from a ``topic`` column is only known per row, so the tasks check those.
    """
    producer = Producer(list(options.masters), options.client_settings())
    try:
        producer.start()
        if options.topics:
            try:
                producer.publish(options.topics, timeout_s=max(5.0, options.request_timeout_ms / 1000 * 2))
            except UnknownTopicError as exc:
                raise_if_configured(exc, options, options.topics)
                raise
    finally:
        producer.close()


def raise_if_configured(exc: UnknownTopicError, options: TubeMQOptions, topics: tuple[str, ...]) -> None:
    """The master lists no partition of ``topics`` (``exc``): raise :class:`BrokerUnavailableError` when its
    configuration holds them all (their brokers are away: waited for), else return (a missing topic)."""
    if configured(options, topics):
        raise BrokerUnavailableError(f"{exc} (the master's configuration holds the topic: its brokers are down "
                                     f"or restarting); start them, or wait and write again") from exc


def configured(options: TubeMQOptions, topics: tuple[str, ...]) -> bool:
    """Whether the master's configuration (its web API) holds a partition of every one of ``topics``: then
    "no partition to serve" means their brokers are away, not that a topic is missing. False when no web
    API answers (the sink cannot tell; ``masterWebUrl`` lets it)."""
    try:
        placement = configured_partitions(options.web_urls(), topics, timeout_s=options.request_timeout_ms / 1000)
    except AdminApiError as exc:
        log.info("cannot tell a missing topic from brokers that are down (no master web API answered): %s", exc)
        return False
    return all(placement.partitions.get(topic) for topic in topics)


class _TubeSink(StampedWriter):
    """What the batch and the stream sink share: a reachable cluster checked on the driver, and the send."""

    broker = "TubeMQ"
    options: TubeMQOptions

    def check_reachable(self) -> None:
        check_sink_reachable(self.options)

    # what is an outage: the shared rule (core/outage.py). A ``master`` that never answered in this process fails
    # within seconds naming the option (a mistake far more often than a restart); one that answered before, and
    # brokers the master's configuration holds (BrokerUnavailableError), are waited for.

    def send(self, batches: Iterator[pa.RecordBatch], stamp: str) -> SentCommitMessage:
        return send_batches(batches, self.options, stamp)


class TubeBatchWriter(_TubeSink, StampedBatchWriter):
    """``df.write.format("tubemq")``: each task sends its rows, stamped ``<write id>-<task>``."""


class TubeStreamWriter(_TubeSink, StampedStreamWriter):
    """``df.writeStream.format("tubemq")``: each task sends its rows, stamped ``<query>-<batch>-<task>``."""
