"""The fixed read schema (Kafka-connector style: bytes in, decode with DataFrame functions).

With ``payloadFormat=inlongmsg`` a row is one *record* of an InLong bundle (see
:func:`bundle_record_batch`): the same columns plus ``recordIndex``, the record's index within its
bundle, so ``(offset, recordIndex)`` identifies a row.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tubespark.formats import Record
from tubespark.spark.arrow import arrow_schema_for, record_batch
from tubespark.tubemq.wire.fetch import Columns, PackedColumns
from tubespark.tubemq.wire.message import RESERVED_ATTRIBUTES, MessageColumns, ReceivedMessage, parse_msg_time

STREAM_ID_ATTRIBUTES = ("streamId", "inlongStreamId", "iname")
"""Where a record's stream id is, first match wins (InLong's names: ``streamId`` as InLongMsg v4's parser and
Sort use it, ``inlongStreamId`` as DataProxy's PB path sets it, ``iname`` in older formats); the TubeMQ
msgType (which DataProxy sets to the stream id) when none is present."""


def read_schema(include_attributes: bool, inlongmsg: bool = False) -> StructType:
    fields = [
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partitionKey", StringType()),
        StructField("brokerId", IntegerType()),
        StructField("partitionId", IntegerType()),
        StructField("offset", LongType()),
        StructField("msgTime", TimestampType()),
        StructField("streamId", StringType()),
    ]
    if inlongmsg:
        fields.append(StructField("recordIndex", IntegerType()))
    if include_attributes:
        fields.append(StructField("attributes", MapType(StringType(), StringType())))
    return StructType(fields)


def arrow_schema(include_attributes: bool, inlongmsg: bool = False) -> pa.Schema:
    """Exactly the Arrow schema Spark checks ``read()`` batches against (types, names, nullability)."""
    return arrow_schema_for(read_schema(include_attributes, inlongmsg))


def to_record_batch(columns: Columns, *, topic: str, partition_key: str, broker_id: int, partition_id: int,
                    schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch for the messages of one fetch, built column by column.

    Why this shape: per-row Python work is what limits a Python source, so the columns the fetch shares
    (topic, partition, broker) are Arrow repeats, and ``msgTime`` is parsed once per distinct minute.
    """
    if isinstance(columns, PackedColumns):
        return _packed_record_batch(columns, topic=topic, partition_key=partition_key, broker_id=broker_id,
                                    partition_id=partition_id, schema=schema)
    n = len(columns)
    times = {text: _micros(parse_msg_time(text)) for text in set(columns.msg_times)}
    arrays = [
        pa.array(columns.data, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition_key, pa.string()), n),
        pa.repeat(pa.scalar(broker_id, pa.int32()), n),
        pa.repeat(pa.scalar(partition_id, pa.int32()), n),
        pa.array(columns.offsets, pa.int64()),
        pa.array([times[text] for text in columns.msg_times], schema.field("msgTime").type),
        pa.array([msg_type or None for msg_type in columns.msg_types], pa.string()),
    ]
    if len(schema) > len(arrays):
        user: dict[int, list[tuple[str, str]]] = {}
        for attributes in columns.attributes:
            if id(attributes) not in user:
                user[id(attributes)] = _user_attributes(attributes)
        arrays.append(pa.array([user[id(attributes)] for attributes in columns.attributes],
                               schema.field("attributes").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _user_attributes(attributes: Mapping[str, str]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in attributes.items() if k not in RESERVED_ATTRIBUTES]


def _packed_record_batch(columns: PackedColumns, *, topic: str, partition_key: str, broker_id: int,
                         partition_id: int, schema: pa.Schema) -> pa.RecordBatch:
    """:func:`to_record_batch` for the compiled twin's buffers: no Python work per row.

    The value, offset and text-index buffers become Arrow arrays as they are; msgTime, streamId and the
    attributes are built once per distinct attribute text of the fetch and spread over the rows with
    Arrow's ``take`` (same values as the per-row path: the same parse functions on the same texts). The
    columns one value fills (topic, partition, broker, and msgTime and streamId when every message
    carries the same attributes, as one producer's do) are slices of arrays kept across fetches
    (:func:`_repeated`): a fetch's batch is then a dozen calls, not a dozen array builds.
    """
    return _packed_batch([columns], topic=topic, partition_key=partition_key, broker_id=broker_id,
                         partition_id=partition_id, schema=schema)


def fetches_record_batch(parts: Sequence[Columns], *, topic: str, partition_key: str, broker_id: int,
                         partition_id: int, schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch for the messages of several consecutive fetches of one partition, in their order.

    Why: a batch costs about 30 us of Arrow building and as much again of PySpark's hand-over whatever its
    rows (``docs/performance/breakdown.md``), and a fetch holds about 450 rows at 1 KiB. The compiled twin's
    parts must follow each other in one values buffer (:meth:`PackedColumns.follows`: a read task's fetches
    walked into its :class:`~tubespark.tubemq.wire.fetch.ValueArena`), which the batch's value column then
    takes as it is: no copy of the values (joining buffers of their own cost one, which did not pay at 1 KiB).
    The other columns are joined (8 bytes a row) or, those one value fills, sliced as in
    :func:`to_record_batch`, for all the rows at once.
    """
    if len(parts) == 1:
        return to_record_batch(parts[0], topic=topic, partition_key=partition_key, broker_id=broker_id,
                               partition_id=partition_id, schema=schema)
    if all(isinstance(part, PackedColumns) for part in parts):
        return _packed_batch([part for part in parts if isinstance(part, PackedColumns)], topic=topic,
                             partition_key=partition_key, broker_id=broker_id, partition_id=partition_id,
                             schema=schema)
    lists = [part.unpacked if isinstance(part, PackedColumns) else part for part in parts]  # pure twin, filtered
    joined = MessageColumns([i for c in lists for i in c.message_ids], [d for c in lists for d in c.data],
                            [a for c in lists for a in c.attributes], [t for c in lists for t in c.msg_types],
                            [t for c in lists for t in c.msg_times], [o for c in lists for o in c.offsets])
    return to_record_batch(joined, topic=topic, partition_key=partition_key, broker_id=broker_id,
                           partition_id=partition_id, schema=schema)


def value_bytes(columns: Columns) -> int:
    """The bytes of ``columns``' values (what a batch of them holds beyond its fixed-width columns)."""
    if isinstance(columns, PackedColumns):
        return columns.value_bytes()
    return sum(map(len, columns.data))


def _packed_batch(parts: Sequence[PackedColumns], *, topic: str, partition_key: str, broker_id: int,
                  partition_id: int, schema: pa.Schema) -> pa.RecordBatch:
    """The batch of one or more consecutive fetches' compiled-twin buffers (see the two callers)."""
    n = sum(part.count for part in parts)
    time_type = schema.field("msgTime").type
    with_attributes = len(schema) > 8
    for before, part in itertools.pairwise(parts):
        if not part.follows(before):
            raise ValueError("fetches_record_batch: the values of consecutive parts must follow each other")
    value_offsets: list[memoryview] = []
    offsets: list[pa.Array] = []
    times: list[pa.Array] = []
    stream_ids: list[pa.Array] = []
    attributes: list[pa.Array] = []
    uniform = {(p.text_msg_times[p.uniform_text], p.text_msg_types[p.uniform_text]) if p.uniform_text >= 0 else None
               for p in parts}
    shared = next(iter(uniform)) if len(uniform) == 1 else None  # every row of every part: one msgTime, streamId
    for part in parts:
        k = part.count
        value_offsets.append(memoryview(part.value_offset_buffer)[:4 * k])
        offsets.append(pa.Array.from_buffers(pa.int64(), k, [None, pa.py_buffer(part.offset_buffer)]))
        index: pa.Array | None = None
        if shared is not None:
            pass  # msgTime and streamId: one value for every row of every part, below
        elif part.uniform_text >= 0:
            u = part.uniform_text
            times.append(_repeated(_micros(parse_msg_time(part.text_msg_times[u])), "msgTime", time_type, k))
            stream_ids.append(_repeated(part.text_msg_types[u] or None, "streamId", pa.string(), k))
        else:
            index = pa.Array.from_buffers(pa.int32(), k, [None, pa.py_buffer(part.text_index_buffer)])
            times.append(pa.array([_micros(parse_msg_time(text)) for text in part.text_msg_times],
                                  time_type).take(index))
            stream_ids.append(pa.array([msg_type or None for msg_type in part.text_msg_types],
                                       pa.string()).take(index))
        if with_attributes:
            if index is None:
                index = pa.Array.from_buffers(pa.int32(), k, [None, pa.py_buffer(part.text_index_buffer)])
            user = pa.array([_user_attributes(a) for a in part.text_attributes], schema.field("attributes").type)
            attributes.append(user.take(index))
    if shared is None:
        time_array, stream_array = _joined(times), _joined(stream_ids)
    else:
        msg_time, msg_type = shared
        time_array = _repeated(_micros(parse_msg_time(msg_time)), "msgTime", time_type, n)
        stream_array = _repeated(msg_type or None, "streamId", pa.string(), n)
    last = parts[-1]  # the end of the last value closes the joined offsets
    value_offsets.append(memoryview(last.value_offset_buffer)[4 * last.count:4 * last.count + 4])
    joined_offsets = last.value_offset_buffer if len(parts) == 1 else b"".join(value_offsets)
    arrays = [
        pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(joined_offsets),
                                               pa.py_buffer(parts[0].value_buffer)]),
        _repeated(topic, "topic", pa.string(), n),
        _repeated(partition_key, "partitionKey", pa.string(), n),
        _repeated(broker_id, "brokerId", pa.int32(), n),
        _repeated(partition_id, "partitionId", pa.int32(), n),
        _joined(offsets),
        time_array,
        stream_array,
    ]
    if with_attributes:
        arrays.append(_joined(attributes))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _joined(arrays: list[pa.Array]) -> pa.Array:
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


_REPEATS: dict[tuple[str, object], pa.Array] = {}
_REPEATS_KEPT = 64  # distinct (column, value) arrays a process keeps: a task's constants and a few msgTimes
_REPEAT_MIN_ROWS = 4096


def _repeated(value: object, column: str, arrow_type: pa.DataType, n: int) -> pa.Array:
    """``n`` rows of ``value`` for ``column`` (of type ``arrow_type``, the same for every call with that
    column): a zero-copy slice of an array kept for the next fetch, built again only when a fetch has more
    rows than it. Keyed by the column's name: hashing an Arrow type cost more than all the rest."""
    key = (column, value)
    array = _REPEATS.get(key)
    if array is None or len(array) < n:
        if len(_REPEATS) >= _REPEATS_KEPT:
            _REPEATS.clear()
        rows = max(n, _REPEAT_MIN_ROWS, 2 * len(array) if array is not None else 0)
        array = pa.repeat(pa.scalar(value, arrow_type), rows)
        _REPEATS[key] = array
    return array if len(array) == n else array.slice(0, n)


_MIN_MS, _MAX_MS = -62135596800000, 253402300799999  # Spark's timestamp range, years 1..9999 (a data time
# outside it is not a time: the message's is used)


def _micros(when: datetime | None) -> int | None:
    return None if when is None else int(when.timestamp()) * 1_000_000


def record_stream_id(attributes: Mapping[str, str], msg_type: str | None) -> str | None:
    """A record's stream id: the first of :data:`STREAM_ID_ATTRIBUTES` it has, else the TubeMQ msgType."""
    for key in STREAM_ID_ATTRIBUTES:
        value = attributes.get(key)
        if value:
            return value
    return msg_type or None


def bundle_record_batch(decoded: Sequence[tuple[ReceivedMessage, Sequence[Record]]], *, topic: str,
                        partition_key: str, broker_id: int, partition_id: int, schema: pa.Schema,
                        keep: Callable[[Mapping[str, str]], bool] | None = None) -> pa.RecordBatch:
    """One Arrow batch with a row per record of the decoded bundles of one fetch.

    A row's ``attributes`` are its TubeMQ message's attributes overridden by the record's own (as InLong
    does: what the record says about itself wins over its transport); ``streamId`` see
    :func:`record_stream_id`; ``msgTime`` the record's data time (ms) when it has one, else the message's
    (minute precision); ``offset`` the message's, ``recordIndex`` the record's index in its bundle.
    ``keep(attributes)`` may drop rows (``dedupe``).
    """
    values: list[bytes] = []
    offsets: list[int] = []
    indexes: list[int] = []
    times: list[int | None] = []
    stream_ids: list[str | None] = []
    attributes: list[list[tuple[str, str]]] = []
    with_attributes = schema.get_field_index("attributes") >= 0
    for message, records in decoded:
        base = message.user_attributes
        message_time = _micros(parse_msg_time(message.msg_time))
        msg_type = message.msg_type or None
        for index, record in enumerate(records):
            merged = {**base, **record.attributes} if base else record.attributes
            if keep is not None and not keep(merged):
                continue
            values.append(record.body)
            offsets.append(message.offset)
            indexes.append(index)
            dt = record.data_time
            times.append(dt * 1000 if dt is not None and _MIN_MS <= dt <= _MAX_MS else message_time)
            stream_ids.append(record_stream_id(merged, msg_type))
            if with_attributes:
                attributes.append(list(merged.items()))
    n = len(values)
    columns: list[Sequence[object]] = [values, [topic] * n, [partition_key] * n, [broker_id] * n,
                                       [partition_id] * n, offsets, times, stream_ids, indexes]
    if with_attributes:
        columns.append(attributes)
    return record_batch(schema, columns)
