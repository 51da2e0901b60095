"""The ``tubemq`` data source: stream and batch reads, batch and streaming writes.

Register it once per session with ``tubespark.register(spark)`` (or
``spark.dataSource.register(TubeMQDataSource)``).
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

from tubespark.tubemq.spark.batch_reader import TubeBatchReader
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.schema import read_schema
from tubespark.tubemq.spark.stream_reader import TubeStreamReader
from tubespark.tubemq.spark.writer import TubeBatchWriter, TubeStreamWriter, check_sink_schema


class TubeMQDataSource(DataSource):
    """Apache InLong TubeMQ as a Spark source. Options: see ``tubespark.tubemq.spark.options.OPTIONS``."""

    @classmethod
    def name(cls) -> str:
        return "tubemq"

    def _read_options(self, *, required: tuple[str, ...] = ()) -> TubeMQOptions:
        return TubeMQOptions.from_raw(self.options, mode="read", required=(*required, "topic"))

    def schema(self) -> StructType:
        options = self._read_options()
        return read_schema(options.include_attributes, options.inlongmsg)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TubeStreamReader(self._read_options(required=("group",)))

    def reader(self, schema: StructType) -> DataSourceReader:
        # a backfill starts at the beginning unless told
        options = TubeMQOptions.from_raw(self.options, mode="read", required=("topic",),
                                         defaults={"startingOffsets": "earliest"})
        return TubeBatchReader(options)

    def _write_options(self, schema: StructType) -> TubeMQOptions:
        options = TubeMQOptions.from_raw(self.options, mode="write")
        check_sink_schema(schema, options)
        return options

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return TubeBatchWriter(self._write_options(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return TubeStreamWriter(self._write_options(schema))
