"""The ``rocketmq`` data source: batch and streaming reads (pull or pop), batch and streaming writes.

Register it with ``tubespark.register(spark)`` (or ``spark.dataSource.register(RocketMQDataSource)``).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSourceStreamReader

from tubespark.rocketmq.spark.batch_reader import RocketMQBatchReader
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.pop_reader import PopStreamReader
from tubespark.rocketmq.spark.schema import read_schema
from tubespark.rocketmq.spark.stream_reader import PullStreamReader
from tubespark.rocketmq.spark.writer import RocketMQBatchWriter, RocketMQStreamWriter, check_sink_schema
from tubespark.spark.source import BrokerDataSource


def _stream_reader(options: RocketMQOptions) -> DataSourceStreamReader:
    return PopStreamReader(options) if options.pop else PullStreamReader(options)


class RocketMQDataSource(BrokerDataSource):
    """Apache RocketMQ as a Spark source and sink. Options: ``tubespark.rocketmq.spark.options.OPTIONS``."""

    format = "rocketmq"
    options_class = RocketMQOptions
    read_schema = staticmethod(lambda options: read_schema(options.include_properties, options.pop))
    stream_reader = staticmethod(_stream_reader)
    batch_reader = RocketMQBatchReader
    batch_writer = RocketMQBatchWriter
    stream_writer = RocketMQStreamWriter
    check_sink = staticmethod(check_sink_schema)
