"""The fixed read schema (Kafka-connector style: bytes in, decode with DataFrame functions)."""

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

from tubespark.spark.arrow import arrow_schema_for, record_batch
from tubespark.tubemq.wire.message import ReceivedMessage, parse_msg_time


def read_schema(include_attributes: bool) -> StructType:
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
    if include_attributes:
        fields.append(StructField("attributes", MapType(StringType(), StringType())))
    return StructType(fields)


def arrow_schema(include_attributes: bool) -> pa.Schema:
    """Exactly the Arrow schema Spark checks ``read()`` batches against (types, names, nullability)."""
    return arrow_schema_for(read_schema(include_attributes))


def to_record_batch(messages: Sequence[ReceivedMessage], *, topic: str, partition_key: str, broker_id: int,
                    partition_id: int, schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch for the messages of one fetch."""
    n = len(messages)
    columns: list[list] = [
        [m.data for m in messages],
        [topic] * n,
        [partition_key] * n,
        [broker_id] * n,
        [partition_id] * n,
        [m.offset for m in messages],
        [parse_msg_time(m.msg_time) for m in messages],
        [m.msg_type or None for m in messages],
    ]
    if len(schema) > len(columns):
        columns.append([list(m.user_attributes.items()) for m in messages])
    return record_batch(schema, columns)
