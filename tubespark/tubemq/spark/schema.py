"""The fixed read schema (Kafka-connector style: bytes in, decode with DataFrame functions)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
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
    return to_arrow_schema(read_schema(include_attributes), timezone="UTC")


def to_record_batch(messages: Sequence[ReceivedMessage], *, topic: str, partition_key: str, broker_id: int,
                    partition_id: int, schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch for the messages of one fetch."""
    n = len(messages)
    columns = [
        pa.array([m.data for m in messages], pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition_key] * n, pa.string()),
        pa.array([broker_id] * n, pa.int32()),
        pa.array([partition_id] * n, pa.int32()),
        pa.array([m.offset for m in messages], pa.int64()),
        pa.array([parse_msg_time(m.msg_time) for m in messages], pa.timestamp("us", tz="UTC")),
        pa.array([m.msg_type or None for m in messages], pa.string()),
    ]
    if len(schema) > len(columns):
        columns.append(pa.array([list(m.user_attributes.items()) for m in messages],
                                pa.map_(pa.string(), pa.string())))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
