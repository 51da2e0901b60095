"""The ``tank`` data source: stream and batch reads, batch and streaming writes.

Register it with ``tubespark.register(spark)`` (or ``spark.dataSource.register(TankDataSource)``).
"""

from __future__ import annotations

from tubespark.spark.source import BrokerDataSource
from tubespark.tank.spark.batch_reader import TankBatchReader
from tubespark.tank.spark.options import TankOptions
from tubespark.tank.spark.schema import READ_SCHEMA
from tubespark.tank.spark.stream_reader import TankStreamReader
from tubespark.tank.spark.writer import TankBatchWriter, TankStreamWriter, check_sink_schema


class TankDataSource(BrokerDataSource):
    """A TANK broker as a Spark source and sink. Options: ``tubespark.tank.spark.options.OPTIONS``."""

    format = "tank"
    options_class = TankOptions
    read_required = ("topic",)
    read_schema = staticmethod(lambda options: READ_SCHEMA)
    stream_reader = TankStreamReader
    batch_reader = TankBatchReader
    batch_writer = TankBatchWriter
    stream_writer = TankStreamWriter
    check_sink = staticmethod(check_sink_schema)
