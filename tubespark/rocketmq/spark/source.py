"""The ``rocketmq`` data source: batch and streaming reads (pull or pop), batch and streaming writes.

Register it with ``tubespark.register(spark)`` (or ``spark.dataSource.register(RocketMQDataSource)``).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from tubespark.rocketmq.spark.batch_reader import RocketMQBatchReader
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.pop_reader import PopStreamReader
from tubespark.rocketmq.spark.schema import read_schema
from tubespark.rocketmq.spark.stream_reader import PullStreamReader
from tubespark.rocketmq.spark.writer import RocketMQBatchWriter, RocketMQStreamWriter, check_sink_schema


class RocketMQDataSource(DataSource):
    """Apache RocketMQ as a Spark source and sink. Options: ``tubespark.rocketmq.spark.options.OPTIONS``."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def _read_options(self, **defaults: str) -> RocketMQOptions:
        return RocketMQOptions.from_raw(self.options, mode="read", defaults=defaults or None)

    def schema(self) -> StructType:
        options = self._read_options()
        return read_schema(options.include_properties, options.pop)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = self._read_options()
        return PopStreamReader(options) if options.pop else PullStreamReader(options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return RocketMQBatchReader(self._read_options(startingOffsets="earliest"))

    def _write_options(self, schema: StructType) -> RocketMQOptions:
        options = RocketMQOptions.from_raw(self.options, mode="write")
        check_sink_schema(schema, options)
        return options

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return RocketMQBatchWriter(self._write_options(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return RocketMQStreamWriter(self._write_options(schema))
