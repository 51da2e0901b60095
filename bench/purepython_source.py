"""``format("tubemq_purepython")``: the tubemq source and sink with the compiled hot path switched off.

Why: the benchmark compares the compiled and the pure-Python fetch decoders in one Spark session, runs
alternating, against the same broker (``TUBESPARK_NO_EXTENSIONS=1`` would need a second session, whose
Python workers start with the switch set). A Python worker runs one task at a time, so switching the
twins for the duration of a ``read`` or a ``write`` touches no other task.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceReader, DataSourceWriter, InputPartition
from pyspark.sql.types import StructType

from tubespark.tubemq.spark.source import TubeMQDataSource


class PurePythonTubeMQ(TubeMQDataSource):
    @classmethod
    def name(cls) -> str:
        return "tubemq_purepython"

    def reader(self, schema: StructType) -> DataSourceReader:
        return _PurePythonReader(super().reader(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return _PurePythonWriter(super().writer(schema, overwrite))


class _PurePythonReader(DataSourceReader):
    def __init__(self, inner: DataSourceReader) -> None:
        self.inner = inner

    def partitions(self) -> Any:
        return self.inner.partitions()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from tubespark.tubemq.wire.twin import pure_python

        with pure_python():
            yield from self.inner.read(partition)


class _PurePythonWriter(DataSourceArrowWriter):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def write(self, iterator: Iterator[Any]) -> Any:
        from tubespark.tubemq.wire.twin import pure_python

        with pure_python():
            return self.inner.write(iterator)

    def commit(self, messages: list) -> None:
        self.inner.commit(messages)

    def abort(self, messages: list) -> None:
        self.inner.abort(messages)
