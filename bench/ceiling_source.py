"""The ceiling: a Python DataSource that yields tubespark's 8 read columns from memory, as Arrow batches.

Why: a tubespark read can be no faster than Spark's Python Data Source API carrying the same rows from
a Python worker into the JVM. This source does nothing else (each partition builds one Arrow batch
once and yields it again and again), so "tubespark / ceiling" says how much of the API's throughput the
connector's own work (sockets, decoding, building columns) costs.

Options: ``rows`` (total), ``size`` (value bytes), ``partitions``, ``batchRows`` (rows per Arrow batch).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from tubespark.tubemq.spark.schema import arrow_schema, read_schema

NAME = "tubespark_ceiling"


class CeilingPartition(InputPartition):
    """``rows`` rows of partition ``index``."""

    def __init__(self, index: int, rows: int) -> None:
        super().__init__(index)
        self.index = index
        self.rows = rows


class CeilingReader(DataSourceReader):
    """Yields one prebuilt batch repeatedly (and a shorter last one), so per-row cost is zero."""

    def __init__(self, options: dict[str, str]) -> None:
        self.rows = int(options.get("rows", "1000000"))
        self.size = int(options.get("size", "100"))
        self.partition_count = int(options.get("partitions", "4"))
        self.batch_rows = int(options.get("batchRows", "4096"))

    def partitions(self) -> list[InputPartition]:
        base, extra = divmod(self.rows, self.partition_count)
        return [CeilingPartition(i, base + (1 if i < extra else 0)) for i in range(self.partition_count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, CeilingPartition)
        schema = arrow_schema(False)
        rows = partition.rows

        def batch(n: int) -> pa.RecordBatch:
            key = f"1:bench_ceiling:{partition.index}"
            when = datetime(2024, 1, 1, tzinfo=UTC)
            return pa.RecordBatch.from_arrays([
                pa.array([b"x" * self.size] * n, pa.binary()),
                pa.array(["bench_ceiling"] * n, pa.string()),
                pa.array([key] * n, pa.string()),
                pa.array([1] * n, pa.int32()),
                pa.array([partition.index] * n, pa.int32()),
                pa.array(range(0, 28 * n, 28), pa.int64()),
                pa.array([when] * n, schema.field(6).type),
                pa.array(["bench"] * n, pa.string()),
            ], schema=schema)

        full = batch(min(self.batch_rows, rows)) if rows else None
        sent = 0
        while sent < rows:
            n = min(self.batch_rows, rows - sent)
            yield full if full is not None and n == full.num_rows else batch(n)
            sent += n


class CeilingDataSource(DataSource):
    """``spark.read.format("tubespark_ceiling")``: tubespark's read schema, from memory."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return read_schema(False)

    def reader(self, schema: StructType) -> DataSourceReader:
        return CeilingReader(dict(self.options))
