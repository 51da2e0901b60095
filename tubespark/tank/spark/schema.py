"""The ``tank`` read schema (Kafka-connector style: bytes in, decode with DataFrame functions).

| column | type | meaning |
|---|---|---|
| ``value`` | binary | the message content |
| ``key`` | binary | the message key, null when the message has none |
| ``topic`` | string | |
| ``partition`` | int | |
| ``offset`` | long | the message's TANK sequence number |
| ``timestamp`` | timestamp | the message's timestamp (TANK stores milliseconds since the epoch) |
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

from tubespark.spark.arrow import arrow_schema_for
from tubespark.tank.wire.bundle import MessageColumns

READ_SCHEMA = StructType([
    StructField("value", BinaryType()),
    StructField("key", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
])

_MAX_MS = 253402300799999  # 9999-12-31: beyond Spark's timestamp range a TANK timestamp becomes null


def arrow_schema() -> pa.Schema:
    return arrow_schema_for(READ_SCHEMA)


def to_record_batch(columns: MessageColumns, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch for the messages of one fetch. Topic and partition are Arrow repeats (no per-row work)."""
    n = len(columns)
    micros = [ts * 1000 if ts <= _MAX_MS else None for ts in columns.timestamps]
    arrays = [
        pa.array(columns.values, pa.binary()),
        pa.array(columns.keys, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(columns.seqs, pa.int64()),
        pa.array(micros, schema.field("timestamp").type),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
