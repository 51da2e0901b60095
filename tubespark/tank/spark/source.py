"""The ``tank`` data source: stream and batch reads, batch and streaming writes.

Register it with ``tubespark.register(spark)`` (or ``spark.dataSource.register(TankDataSource)``).
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

from tubespark.tank.spark.batch_reader import TankBatchReader
from tubespark.tank.spark.options import TankOptions
from tubespark.tank.spark.schema import READ_SCHEMA
from tubespark.tank.spark.stream_reader import TankStreamReader
from tubespark.tank.spark.writer import TankBatchWriter, TankStreamWriter, check_sink_schema


class TankDataSource(DataSource):
    """A TANK broker as a Spark source and sink. Options: ``tubespark.tank.spark.options.OPTIONS``."""

    @classmethod
    def name(cls) -> str:
        return "tank"

    def schema(self) -> StructType:
        TankOptions.from_raw(self.options, mode="read", required=("topic",))
        return READ_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TankStreamReader(TankOptions.from_raw(self.options, mode="read", required=("topic",)))

    def reader(self, schema: StructType) -> DataSourceReader:
        # a backfill starts at the beginning unless told
        options = TankOptions.from_raw(self.options, mode="read", required=("topic",),
                                       defaults={"startingOffsets": "earliest"})
        return TankBatchReader(options)

    def _write_options(self, schema: StructType) -> TankOptions:
        options = TankOptions.from_raw(self.options, mode="write")
        check_sink_schema(schema, options)
        return options

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return TankBatchWriter(self._write_options(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return TankStreamWriter(self._write_options(schema))
