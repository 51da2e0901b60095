"""The ``rocketmq`` data source: batch and streaming reads (pull or pop), batch and streaming writes.

Register it with ``tubespark.register(spark)`` (or ``spark.dataSource.register(RocketMQDataSource)``).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from tubespark.core.shared_dir import SharedDir
from tubespark.rocketmq.spark import schema
from tubespark.rocketmq.spark.adapter import PullAdapter
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.pop_batch import PopBatchReader
from tubespark.rocketmq.spark.pop_reader import PopStreamReader
from tubespark.rocketmq.spark.writer import RocketMQBatchWriter, RocketMQStreamWriter, check_sink_schema
from tubespark.spark.batch_engine import BatchEngine
from tubespark.spark.source import BrokerDataSource
from tubespark.spark.stream_engine import StreamEngine


class RocketMQDataSource(BrokerDataSource):
    """Apache RocketMQ as a Spark source and sink. Options: ``tubespark.rocketmq.spark.options.OPTIONS``."""

    format = "rocketmq"
    options_class = RocketMQOptions
    entry_point = "namesrvs"
    adapter = PullAdapter

    def read_schema(self, options: RocketMQOptions) -> StructType:
        return schema.read_schema(options.include_properties, options.pop)

    def stream_reader(self, options: RocketMQOptions) -> DataSourceStreamReader:
        if options.pop and options.pop_receipts_path:  # on the driver: a bad location fails the query now
            SharedDir(options.pop_receipts_path, "popReceiptsPath").check()
        return PopStreamReader(options) if options.pop else StreamEngine(PullAdapter(options))

    def batch_reader(self, options: RocketMQOptions) -> DataSourceReader:
        return PopBatchReader(options) if options.pop else BatchEngine(PullAdapter(options, batch=True))

    def batch_writer(self, options: RocketMQOptions) -> RocketMQBatchWriter:
        return RocketMQBatchWriter(options)

    def stream_writer(self, options: RocketMQOptions) -> RocketMQStreamWriter:
        return RocketMQStreamWriter(options)

    def check_sink(self, schema: StructType, options: RocketMQOptions) -> None:
        check_sink_schema(schema, options)
