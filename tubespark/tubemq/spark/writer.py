"""The TubeMQ sink: ``df.write.format("tubemq")`` and ``df.writeStream.format("tubemq")``.

Columns: ``value`` (binary or string, required), ``topic`` (unless the ``topic`` option is set; the
option wins), ``streamId`` (sent as msgType, so server-side filters match), ``msgTime`` (timestamp or
``yyyyMMddHHmm`` string), ``attributes`` (map<string,string>) and ``partitionKey`` (rows with the
same key go to the same partition; otherwise round-robin).

Each executor process keeps one producer per cluster and pipelines many SendMessage requests per
broker; a task returns only after the broker acknowledged every row, and fails (after retries) on
any send error, so nothing is dropped silently. Delivery is at-least-once: a retried task sends its
rows again. With ``dedupAttribute`` every message carries a stable id (write, task, row), and a
tubespark reader with ``dedupe=true`` drops the replays.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator
from datetime import datetime

import pyarrow as pa
from pyspark.sql.types import BinaryType, MapType, StringType, StructType, TimestampType

from tubespark.errors import MessageFormatError, OptionError
from tubespark.spark.arrow import column_values
from tubespark.spark.writers import SentCommitMessage, StampedBatchWriter, StampedStreamWriter, task_index
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.formats import PartitionRef
from tubespark.tubemq.wire.message import OutgoingMessage, format_msg_time

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
    names = {f.name: f.dataType for f in schema.fields}
    if "value" not in names:
        raise OptionError(f"the TubeMQ sink needs a 'value' column (binary or string); got {sorted(names)}")
    if not options.topics and "topic" not in names:
        raise OptionError("the TubeMQ sink needs a topic: set option 'topic' or add a 'topic' column")
    for name, data_type in names.items():
        allowed = _ALLOWED.get(name)
        if allowed is None:
            raise OptionError(f"column {name!r} is not sent to TubeMQ; the sink takes {sorted(_ALLOWED)}")
        if not isinstance(data_type, allowed):
            raise OptionError(f"column {name!r} has type {data_type.simpleString()}, expected "
                              f"{' or '.join(t.typeName() for t in allowed)}")
        if isinstance(data_type, MapType) and not (isinstance(data_type.keyType, StringType)
                                                  and isinstance(data_type.valueType, StringType)):
            raise OptionError("column 'attributes' must be map<string,string>")


_producers: dict[tuple, Producer] = {}


def _producer(options: TubeMQOptions) -> Producer:
    """One producer per cluster per executor process: Python workers are reused across tasks."""
    settings = options.client_settings()
    key = (tuple(options.masters), settings.connect_timeout_s, settings.call_timeout_s, settings.credentials,
           options.tls_enable, options.tls_ca_file, options.max_in_flight, options.send_retries)
    producer = _producers.get(key)
    if producer is None:
        producer = Producer(list(options.masters), settings, max_in_flight=options.max_in_flight,
                            max_retries=options.send_retries).start()
        _producers[key] = producer
    return producer


def send_batches(batches: Iterator[pa.RecordBatch], options: TubeMQOptions, stamp: str | None) -> SentCommitMessage:
    """Send every row; return after all are acknowledged. ``stamp`` prefixes the dedup ids."""
    producer = _producer(options)
    fixed_topic = options.topics[0] if options.topics else None
    dedup_attribute = options.dedup_attribute
    try:
        rows, sent_bytes = _send_all(batches, producer, fixed_topic, dedup_attribute, stamp)
    except BaseException:
        try:  # settle what this task already sent, so the next task on this worker starts clean
            producer.flush()
        except Exception as exc:  # noqa: BLE001 - the original failure is what the task reports
            log.info("sends of the failed task also failed: %s", exc)
        raise
    return SentCommitMessage(task_index(), rows, sent_bytes)


def _send_all(batches: Iterator[pa.RecordBatch], producer: Producer, fixed_topic: str | None,
              dedup_attribute: str | None, stamp: str | None) -> tuple[int, int]:
    layouts: dict[str, tuple[PartitionRef, ...]] = {}
    rows = sent_bytes = 0
    for batch in batches:
        values, topics = column_values(batch, "value"), column_values(batch, "topic")
        stream_ids, times = column_values(batch, "streamId"), column_values(batch, "msgTime")
        attributes, keys = column_values(batch, "attributes"), column_values(batch, "partitionKey")
        for i, value in enumerate(values):
            topic = fixed_topic or topics[i]
            if not topic:
                raise OptionError(f"row {rows} has no topic (null 'topic' column and no 'topic' option)")
            if topic not in layouts:
                producer.publish([topic])
                layouts[topic] = producer.partitions(topic)
            data = value.encode() if isinstance(value, str) else (value or b"")
            attrs = dict(attributes[i] or ()) if attributes else {}
            route = keys[i] if keys and keys[i] is not None else None
            if dedup_attribute and stamp is not None:
                attrs[dedup_attribute] = f"{stamp}-{rows}"
                route = route or attrs[dedup_attribute]  # a replayed row lands where the original did
            when = times[i] if times else None
            message = OutgoingMessage(data, msg_type=stream_ids[i] if stream_ids else None,
                                      msg_time=format_msg_time(when) if isinstance(when, datetime) else when,
                                      attributes=attrs)
            partitions = layouts[topic]
            part = partitions[zlib.crc32(route.encode()) % len(partitions)] if route is not None else None
            try:
                producer.send_async(topic, message, part)
            except MessageFormatError as exc:  # too large or empty: nothing of this row was sent
                raise type(exc)(f"row {rows} of this task (topic {topic!r}, value of {len(data)} bytes) cannot be "
                                f"sent: {exc}; the {rows} rows before it were sent") from exc
            rows += 1
            sent_bytes += len(data)
        producer.flush()  # bound what is held in memory to one Arrow batch of rows
    return rows, sent_bytes


def check_sink_reachable(options: TubeMQOptions) -> None:
    """On the driver, before any task runs: the master answers and the ``topic`` option's topic is publishable.

    Fails with NoMasterAvailableError / BrokerConnectionError (master unreachable) or UnknownTopicError
    (no such topic, or it does not accept publishing) instead of one failure per task later. A topic
    taken from a ``topic`` column is only known per row, so the tasks check those.
    """
    producer = Producer(list(options.masters), options.client_settings())
    try:
        producer.start()
        if options.topics:
            producer.publish(options.topics, timeout_s=max(5.0, options.request_timeout_ms / 1000 * 2))
    finally:
        producer.close()


class TubeBatchWriter(StampedBatchWriter):
    """``df.write.format("tubemq")``: each task sends its rows, stamped ``<write id>-<task>``."""

    broker = "TubeMQ"
    options: TubeMQOptions

    def __init__(self, options: TubeMQOptions) -> None:
        super().__init__(options)
        check_sink_reachable(options)

    def send(self, batches: Iterator[pa.RecordBatch], stamp: str) -> SentCommitMessage:
        return send_batches(batches, self.options, stamp)


class TubeStreamWriter(StampedStreamWriter):
    """``df.writeStream.format("tubemq")``: each task sends its rows, stamped ``<query>-<batch>-<task>``."""

    broker = "TubeMQ"
    options: TubeMQOptions

    def __init__(self, options: TubeMQOptions) -> None:
        super().__init__(options)
        check_sink_reachable(options)

    def send(self, batches: Iterator[pa.RecordBatch], stamp: str) -> SentCommitMessage:
        return send_batches(batches, self.options, stamp)
