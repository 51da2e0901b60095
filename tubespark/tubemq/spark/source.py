"""The ``tubemq`` data source: stream and batch reads, batch and streaming writes.

Register it once per session with ``tubespark.register(spark)`` (or
``spark.dataSource.register(TubeMQDataSource)``).
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from tubespark.core.shared_dir import SharedDir
from tubespark.spark.batch_engine import BatchEngine
from tubespark.spark.source import BrokerDataSource
from tubespark.spark.stream_engine import StreamEngine
from tubespark.tubemq.spark import schema
from tubespark.tubemq.spark.adapter import TubeAdapter
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.writer import TubeBatchWriter, TubeStreamWriter, check_sink_schema


class TubeMQDataSource(BrokerDataSource):
    """Apache InLong TubeMQ as a Spark source and sink. Options: ``tubespark.tubemq.spark.options.OPTIONS``."""

    format = "tubemq"
    options_class = TubeMQOptions
    entry_point = "masters"
    stream_required = ("group",)  # topic or topicPattern: TubeMQOptions.check()
    adapter = TubeAdapter

    def read_schema(self, options: TubeMQOptions) -> StructType:
        return schema.read_schema(options.include_attributes, options.inlongmsg)

    def stream_reader(self, options: TubeMQOptions) -> StreamEngine:
        check_skips_path(options)
        return StreamEngine(TubeAdapter(options))

    def batch_reader(self, options: TubeMQOptions) -> BatchEngine:
        check_skips_path(options)
        return BatchEngine(TubeAdapter(options, batch=True))

    def batch_writer(self, options: TubeMQOptions) -> TubeBatchWriter:
        return TubeBatchWriter(options)

    def stream_writer(self, options: TubeMQOptions) -> TubeStreamWriter:
        return TubeStreamWriter(options)

    def check_sink(self, schema: StructType, options: TubeMQOptions) -> None:
        check_sink_schema(schema, options)


def check_skips_path(options: TubeMQOptions) -> None:
    """On the driver, before any task: an unreachable or read-only ``skippedBundlesPath`` fails the query now
    (a task would only log that it lost its count)."""
    if options.skipped_bundles_path:
        SharedDir(options.skipped_bundles_path, "skippedBundlesPath").check()
