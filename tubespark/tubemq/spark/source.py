"""The ``tubemq`` data source: stream and batch reads, batch and streaming writes.

Register it once per session with ``tubespark.register(spark)`` (or
``spark.dataSource.register(TubeMQDataSource)``).
"""

from __future__ import annotations

from collections.abc import Iterator

from tubespark.spark.compat import require_supported_pyspark

require_supported_pyspark()  # before the PySpark imports below, which an older PySpark fails with an ImportError

from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from tubespark.errors import OptionError  # noqa: E402
from tubespark.tubemq.spark.batch_reader import TubeBatchReader  # noqa: E402
from tubespark.tubemq.spark.options import TubeMQOptions  # noqa: E402
from tubespark.tubemq.spark.schema import read_schema  # noqa: E402
from tubespark.tubemq.spark.stream_reader import TubeStreamReader  # noqa: E402
from tubespark.tubemq.spark.writer import TubeBatchWriter, TubeStreamWriter, check_sink_schema  # noqa: E402


class TubeMQDataSource(DataSource):
    """Apache InLong TubeMQ as a Spark source. Options: see ``tubespark.tubemq.spark.options.OPTIONS``."""

    @classmethod
    def name(cls) -> str:
        return "tubemq"

    def _read_options(self, *, required: tuple[str, ...] = ()) -> TubeMQOptions:
        return TubeMQOptions.from_raw(self.options, mode="read", required=required)  # topic or topicPattern: check()

    def schema(self) -> StructType:
        options = self._read_options()
        return read_schema(options.include_attributes, options.inlongmsg)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            options = self._read_options(required=("group",))
        except OptionError as exc:  # only a stream needs ``group``: ``load()`` could not check it
            return OptionErrorStreamReader(exc)
        return TubeStreamReader(options)

    def reader(self, schema: StructType) -> DataSourceReader:
        # a backfill starts at the beginning unless told
        options = TubeMQOptions.from_raw(self.options, mode="read", defaults={"startingOffsets": "earliest"})
        return TubeBatchReader(options)

    def _write_options(self, schema: StructType) -> TubeMQOptions:
        options = TubeMQOptions.from_raw(self.options, mode="write")
        check_sink_schema(schema, options)
        return options

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return TubeBatchWriter(self._write_options(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return TubeStreamWriter(self._write_options(schema))


class OptionErrorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader of a query whose options are wrong: every call raises the :class:`OptionError`.

    Raising from ``streamReader()`` itself reads badly: PySpark 4.3's driver-side source runner then
    calls ``stop()`` on a reader it never got, and the user's last line is ``UnboundLocalError: cannot
    access local variable 'reader'`` chained after ours. Handing the error to the first call Spark
    makes (``getDefaultReadLimit``, ``initialOffset``, ``prepareForTriggerAvailableNow`` ...) fails the
    query at the same moment, before any network call, with the option's message as its last line.
    Every method Spark calls is here, so whatever it calls first raises.
    """

    def __init__(self, error: OptionError) -> None:
        self.error = error

    def getDefaultReadLimit(self) -> ReadLimit:
        raise self.error

    def initialOffset(self) -> dict:
        raise self.error

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        raise self.error

    def reportLatestOffset(self) -> dict | None:
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def partitions(self, start: dict, end: dict) -> list:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        raise self.error

    def commit(self, end: dict) -> None:
        raise self.error

    def stop(self) -> None:
        """Nothing was opened."""
