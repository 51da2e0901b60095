"""The TANK sink: ``df.write.format("tank")`` and ``df.writeStream.format("tank")``.

Columns: ``value`` (binary or string, required), ``key`` (binary or string, at most 255 bytes),
``partition`` (int), ``timestamp`` (timestamp; default: when the task sends the row) and ``topic``
(string, unless the ``topic`` option is set; the option wins). Where a row goes: its ``partition``
when set, else by a hash of its ``key`` (rows with the same key share a partition), else round-robin
over the topic's partitions (each task starting at its own partition, so tasks spread out).

Rows are packed into TANK bundles (docs/tank/protocol.md#bundles), one open bundle per (topic,
partition) in core's :class:`~tubespark.spark.bundling.Bundler`: a bundle closes at ``bundleMaxRows``
messages, ``bundleMaxBytes`` of keys and values, ``bundleLingerMs`` after it opened (checked as rows
arrive) and at the end of the task; ``bundleCompression`` decides Snappy. Closed bundles of different
partitions travel in one Produce request, up to ``maxInFlight`` requests at once
(:class:`~tubespark.tank.client.producer.Producer`). A task returns only after the broker acknowledged
every bundle and fails after ``sendRetries`` on any error, so nothing is dropped silently. Delivery is
at-least-once: a retried task sends its rows again (TANK messages carry no headers for a replay marker).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime

import pyarrow as pa
from pyspark.sql.types import BinaryType, IntegerType, LongType, ShortType, StringType, StructType, TimestampType

from tubespark.core.outage import ride_out
from tubespark.errors import MessageFormatError, OptionError
from tubespark.spark.arrow import column_values
from tubespark.spark.bundling import Bundle, Bundler
from tubespark.spark.writers import (
    SentCommitMessage,
    StampedBatchWriter,
    StampedStreamWriter,
    StampedWriter,
    check_sink_columns,
    task_index,
)
from tubespark.tank.client.broker import TankClient
from tubespark.tank.client.producer import Producer
from tubespark.tank.spark.options import TankOptions
from tubespark.tank.wire.bundle import encode_bundle

log = logging.getLogger(__name__)

_ALLOWED = {
    "value": (BinaryType, StringType),
    "key": (BinaryType, StringType),
    "partition": (IntegerType, ShortType, LongType),
    "timestamp": (TimestampType,),
    "topic": (StringType,),
}
MESSAGE_OVERHEAD = 12
"""Bytes a message adds to a bundle besides its key and value (flags, timestamp, length): part of its cost."""


def check_sink_schema(schema: StructType, options: TankOptions) -> None:
    """Fail the write on the driver, before any task runs, if the columns cannot be sent."""
    check_sink_columns(schema, _ALLOWED, broker="TANK", topic_option=bool(options.topics))


def check_sink_reachable(options: TankOptions) -> None:
    """On the driver: the broker answers and the ``topic`` option's topic exists (else a typed error now,
    instead of one failure per task later)."""
    with TankClient(options.broker, options.client_settings()) as client:
        for topic in options.topics or ():
            client.partitions(topic)


def _bytes(value: bytes | bytearray | memoryview | str | None) -> bytes | None:
    """A binary or string column's value (what Arrow's ``to_pylist`` gives) as bytes."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _epoch_ms(when: datetime) -> int:
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


_Key = tuple[str, int]
"""A bundle's key: topic, partition."""
_Extra = tuple[bytes | None, int]
"""What a record keeps besides its value: its key and its timestamp (ms)."""


class BundledSend:
    """One write task's rows, packed into bundles per (topic, partition) and produced."""

    def __init__(self, options: TankOptions) -> None:
        self.options = options
        self.producer = Producer(options.broker, options.client_settings(), max_in_flight=options.max_in_flight,
                                 retries=options.send_retries, outage_s=options.outage_timeout_ms / 1000)
        self.bundler: Bundler[_Key, _Extra] = Bundler(max_rows=options.bundle_max_rows,
                                                      linger_s=options.bundle_linger_ms / 1000, max_open=4096)
        self.partition_counts: dict[str, int] = {}
        self.next_partition = task_index()
        self.bundles = 0

    def close(self) -> None:
        self.producer.close()

    def _partitions(self, topic: str) -> int:
        count = self.partition_counts.get(topic)
        if count is None:  # the broker may be restarting: wait for it like the sends do
            infos = ride_out(lambda: self.producer.client.partitions(topic),
                             outage_s=self.options.outage_timeout_ms / 1000, what=f"partitions of TANK topic {topic}")
            count = self.partition_counts[topic] = len(infos)
        return count

    def send_all(self, batches: Iterator[pa.RecordBatch]) -> tuple[int, int]:
        fixed_topic = self.options.topics[0] if self.options.topics else None
        rows = sent_bytes = 0
        for batch in batches:
            values = column_values(batch, "value") or []
            keys, partitions = column_values(batch, "key"), column_values(batch, "partition")
            times, topics = column_values(batch, "timestamp"), column_values(batch, "topic")
            now = int(time.time() * 1000)
            for i, raw in enumerate(values):
                topic = fixed_topic or (topics[i] if topics else None)
                if not topic:
                    raise OptionError(f"row {rows} has no topic (null 'topic' column and no 'topic' option): set the "
                                      f"topic option or fill the topic column")
                value = _bytes(raw) or b""
                key = _bytes(keys[i]) if keys else None
                if key is not None and len(key) > 0xFF:
                    raise MessageFormatError(f"row {rows} of this task: its key is {len(key)} bytes; a TANK key holds "
                                             f"at most 255; the {rows} rows before it were sent or are being sent")
                when = times[i] if times else None
                stamp = _epoch_ms(when) if isinstance(when, datetime) else now
                partition = self._route(rows, topic, partitions[i] if partitions else None, key)
                cost = MESSAGE_OVERHEAD + len(value) + (len(key) if key else 0)
                self._ship(self.bundler.add((topic, partition), value, (key, stamp), cost=cost,
                                            max_bytes=self.options.bundle_max_bytes, row=rows))
                rows += 1
                sent_bytes += len(value)
            self._ship(self.bundler.expired())
        self._ship(self.bundler.drain())
        self.producer.flush()
        log.info("task sent %d rows in %d bundles (%d Produce requests, %d re-sent, up to %d in flight)", rows,
                 self.bundles, self.producer.requests_sent, self.producer.resent, self.producer.max_window)
        return rows, sent_bytes

    def _route(self, row: int, topic: str, partition: int | None, key: bytes | None) -> int:
        count = self._partitions(topic)
        if partition is not None:
            if not 0 <= partition < count:
                raise MessageFormatError(f"row {row} of this task: partition {partition} does not exist (topic "
                                         f"{topic!r} has partitions 0..{count - 1})")
            return partition
        if key is not None:
            return zlib.crc32(key) % count
        self.next_partition += 1
        return self.next_partition % count

    def _ship(self, closed: list[Bundle[_Key, _Extra]]) -> None:
        """Encode closed bundles and send them, one Produce request per topic and distinct partitions."""
        while closed:
            batch: dict[str, dict[int, bytes]] = {}
            rest: list[Bundle[_Key, _Extra]] = []
            for bundle in closed:
                topic, partition = bundle.key
                if partition in batch.setdefault(topic, {}):
                    rest.append(bundle)  # a partition appears once per request (docs/tank/protocol.md#produce)
                    continue
                keys = [extra[0] for _body, extra in bundle.records]
                batch[topic][partition] = encode_bundle(
                    [body for body, _extra in bundle.records], [extra[1] for _body, extra in bundle.records],
                    keys if any(k is not None for k in keys) else None, compression=self.options.bundle_compression)
                self.bundles += 1
            for topic, bundles in batch.items():
                self.producer.send(topic, bundles)
            closed = rest


def send_batches(batches: Iterator[pa.RecordBatch], options: TankOptions) -> SentCommitMessage:
    """Send every row; return after the broker acknowledged all of them."""
    send = BundledSend(options)
    try:
        rows, sent_bytes = send.send_all(batches)
    finally:
        send.close()
    return SentCommitMessage(task_index(), rows, sent_bytes)


class _TankSink(StampedWriter):
    """What the batch and the stream sink share: a reachable broker checked on the driver, and the send."""

    broker = "TANK"
    options: TankOptions

    def check_reachable(self) -> None:
        check_sink_reachable(self.options)

    def send(self, batches: Iterator[pa.RecordBatch], stamp: str) -> SentCommitMessage:
        return send_batches(batches, self.options)


class TankBatchWriter(_TankSink, StampedBatchWriter):
    """``df.write.format("tank")``."""


class TankStreamWriter(_TankSink, StampedStreamWriter):
    """``df.writeStream.format("tank")``."""
