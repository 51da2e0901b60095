"""Arrow conversion for ``read()``: the schema Spark checks batches against, and batches from columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType


def arrow_schema_for(schema: StructType) -> pa.Schema:
    """Exactly the Arrow schema Spark checks ``read()`` batches against (types, names, nullability)."""
    return to_arrow_schema(schema, timezone="UTC")


def record_batch(schema: pa.Schema, columns: Sequence[Sequence[object]]) -> pa.RecordBatch:
    """A RecordBatch of ``schema`` from one Python sequence per field, each typed by its field."""
    arrays = [pa.array(values, schema.field(i).type) for i, values in enumerate(columns)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def column_values(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    """The column ``name`` of ``batch`` as Python values, ``None`` when the batch has no such column."""
    index = batch.schema.get_field_index(name)
    return batch.column(index).to_pylist() if index >= 0 else None
