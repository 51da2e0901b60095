"""The ``rocketmq`` read schema and the Arrow batch of a read (pull or pop).

Rows (Kafka-connector style, bytes in): ``value``, ``topic``, ``brokerName``, ``queueId``, ``queueOffset``,
``queueKey`` (``topic:brokerName:queueId``, the offsets' key), ``msgId`` (the producer's ``UNIQ_KEY``),
``tags``, ``keys``, ``bornTimestamp``, ``storeTimestamp``, ``reconsumeTimes``; with ``includeProperties``
a ``properties`` map; in pop mode ``receiptHandle``.
"""

from __future__ import annotations

from collections.abc import Sequence

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

from tubespark.rocketmq.wire.message import KEYS, TAGS, UNIQ_KEY, StoredMessage


def read_schema(include_properties: bool, pop: bool = False) -> StructType:
    fields = [
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("brokerName", StringType()),
        StructField("queueId", IntegerType()),
        StructField("queueOffset", LongType()),
        StructField("queueKey", StringType()),
        StructField("msgId", StringType()),
        StructField("tags", StringType()),
        StructField("keys", StringType()),
        StructField("bornTimestamp", TimestampType()),
        StructField("storeTimestamp", TimestampType()),
        StructField("reconsumeTimes", IntegerType()),
    ]
    if include_properties:
        fields.append(StructField("properties", MapType(StringType(), StringType())))
    if pop:
        fields.append(StructField("receiptHandle", StringType()))
    return StructType(fields)


def to_record_batch(messages: Sequence[StoredMessage], *, broker_name: str, schema: pa.Schema,
                    receipts: Sequence[str] | None = None) -> pa.RecordBatch:
    """One Arrow batch, column by column (per-row Python work is what limits a Python source)."""
    n = len(messages)
    topics = [m.topic for m in messages]
    queue_ids = [m.queue_id for m in messages]
    props = [m.properties for m in messages]
    arrays = [
        pa.array([m.body for m in messages], pa.binary()),
        pa.array(topics, pa.string()),
        pa.repeat(pa.scalar(broker_name, pa.string()), n),
        pa.array(queue_ids, pa.int32()),
        pa.array([m.queue_offset for m in messages], pa.int64()),
        pa.array([f"{t}:{broker_name}:{q}" for t, q in zip(topics, queue_ids, strict=True)], pa.string()),
        pa.array([p.get(UNIQ_KEY) for p in props], pa.string()),
        pa.array([p.get(TAGS) for p in props], pa.string()),
        pa.array([p.get(KEYS) for p in props], pa.string()),
        pa.array([m.born_ms * 1000 for m in messages], schema.field("bornTimestamp").type),
        pa.array([m.store_ms * 1000 for m in messages], schema.field("storeTimestamp").type),
        pa.array([m.reconsume_times for m in messages], pa.int32()),
    ]
    if schema.get_field_index("properties") >= 0:
        arrays.append(pa.array([list(p.items()) for p in props], schema.field("properties").type))
    if receipts is not None:
        arrays.append(pa.array(list(receipts), pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
