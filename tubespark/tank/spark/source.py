"""The ``tank`` data source: stream and batch reads, batch and streaming writes.

Register it with ``tubespark.register(spark)`` (or ``spark.dataSource.register(TankDataSource)``).
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from tubespark.spark.source import BrokerDataSource
from tubespark.tank.spark.adapter import TankAdapter
from tubespark.tank.spark.options import TankOptions
from tubespark.tank.spark.schema import READ_SCHEMA
from tubespark.tank.spark.writer import TankBatchWriter, TankStreamWriter, check_sink_schema


class TankDataSource(BrokerDataSource):
    """A TANK broker as a Spark source and sink. Options: ``tubespark.tank.spark.options.OPTIONS``."""

    format = "tank"
    options_class = TankOptions
    entry_point = "broker"
    read_required = ("topic",)
    adapter = TankAdapter

    def read_schema(self, options: TankOptions) -> StructType:
        return READ_SCHEMA

    def batch_writer(self, options: TankOptions) -> TankBatchWriter:
        return TankBatchWriter(options)

    def stream_writer(self, options: TankOptions) -> TankStreamWriter:
        return TankStreamWriter(options)

    def check_sink(self, schema: StructType, options: TankOptions) -> None:
        check_sink_schema(schema, options)
