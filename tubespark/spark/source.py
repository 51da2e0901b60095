"""The ``tubemq`` data source: ``spark.readStream.format("tubemq")``.

Register it once per session with ``tubespark.register(spark)`` (or
``spark.dataSource.register(TubeMQDataSource)``).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from tubespark.spark.options import TubeOptions, parse_options
from tubespark.spark.schema import read_schema
from tubespark.spark.stream_reader import TubeStreamReader


class TubeMQDataSource(DataSource):
    """Apache InLong TubeMQ as a Spark source. Options: see ``tubespark.spark.options.OPTIONS``."""

    @classmethod
    def name(cls) -> str:
        return "tubemq"

    def _read_options(self, *, required: tuple[str, ...] = ()) -> TubeOptions:
        return parse_options(self.options, mode="read", required=required + ("topic",))

    def schema(self) -> StructType:
        return read_schema(self._read_options()["includeAttributes"])

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TubeStreamReader(self._read_options(required=("group",)))
