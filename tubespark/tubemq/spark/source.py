"""The ``tubemq`` data source: stream and batch reads, batch and streaming writes.

Register it once per session with ``tubespark.register(spark)`` (or
``spark.dataSource.register(TubeMQDataSource)``).
"""

from __future__ import annotations

from tubespark.spark.source import BrokerDataSource
from tubespark.tubemq.spark.batch_reader import TubeBatchReader
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.schema import read_schema
from tubespark.tubemq.spark.stream_reader import TubeStreamReader
from tubespark.tubemq.spark.writer import TubeBatchWriter, TubeStreamWriter, check_sink_schema


class TubeMQDataSource(BrokerDataSource):
    """Apache InLong TubeMQ as a Spark source and sink. Options: ``tubespark.tubemq.spark.options.OPTIONS``."""

    format = "tubemq"
    options_class = TubeMQOptions
    stream_required = ("group",)  # topic or topicPattern: TubeMQOptions.check()
    read_schema = staticmethod(lambda options: read_schema(options.include_attributes, options.inlongmsg))
    stream_reader = TubeStreamReader
    batch_reader = TubeBatchReader
    batch_writer = TubeBatchWriter
    stream_writer = TubeStreamWriter
    check_sink = staticmethod(check_sink_schema)
