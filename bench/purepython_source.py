"""``format("tubemq_purepython")``: the tubemq source with its compiled hot path switched off for its reads.

Why: the benchmark compares the compiled and the pure-Python fetch decoders in one Spark session, runs
alternating, against the same broker (``TUBESPARK_NO_EXTENSIONS=1`` would need a second session, whose
Python workers start with the switch set). A Python worker runs one task at a time, so switching the
twin for the duration of a ``read`` touches no other task.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from tubespark.tubemq.spark.source import TubeMQDataSource


class PurePythonTubeMQ(TubeMQDataSource):
    @classmethod
    def name(cls) -> str:
        return "tubemq_purepython"

    def reader(self, schema: StructType) -> DataSourceReader:
        return _PurePythonReader(super().reader(schema))


class _PurePythonReader(DataSourceReader):
    def __init__(self, inner: DataSourceReader) -> None:
        self.inner = inner

    def partitions(self) -> Any:
        return self.inner.partitions()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from tubespark.tubemq.wire.twin import pure_python

        with pure_python():
            yield from self.inner.read(partition)
