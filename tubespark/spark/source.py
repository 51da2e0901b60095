"""What every broker's data source shares: the PySpark version guard, option parsing and its error path.

A broker's ``source.py`` is a short declaration: its format name, its options class, and which reader and
writer classes serve each of Spark's calls (:class:`BrokerDataSource`). Options are parsed before any
network call, so a typo fails at once naming the option and the value; a stream's option error reaches
Spark through :class:`OptionErrorStreamReader`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

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

from tubespark.core.outage import vouch  # noqa: E402
from tubespark.errors import OptionError, SharedDirError  # noqa: E402
from tubespark.spark.batch_engine import BatchEngine, PushdownReader  # noqa: E402
from tubespark.spark.broker import Broker  # noqa: E402
from tubespark.spark.commit_log import OPTION, committed_batches, parse_checkpoint_location  # noqa: E402
from tubespark.spark.pushdown import pushdown_enabled  # noqa: E402
from tubespark.spark.stream_engine import StreamEngine  # noqa: E402

log = logging.getLogger(__name__)

BATCH_READ_DEFAULTS = {"startingOffsets": "earliest"}
"""A backfill starts at the beginning unless told."""


class BrokerDataSource(DataSource):
    """A broker as a Spark source and sink. Subclasses set the class attributes below; nothing else."""

    format: ClassVar[str]
    options_class: ClassVar[Any]
    """A ``ParsedOptions`` subclass with ``from_raw(raw, mode=, required=, defaults=)``."""
    stream_required: ClassVar[tuple[str, ...]] = ()
    """Options a stream needs beyond a batch read (``load()`` cannot check them: Spark calls ``schema()``
    for both)."""
    read_required: ClassVar[tuple[str, ...]] = ()
    entry_point: ClassVar[str] = ""
    """The parsed options' attribute holding the address option the user gave (TANK ``broker``, TubeMQ ``masters``,
    RocketMQ ``namesrvs``): what a sink stream's checkpoint vouches for (:meth:`streamWriter`)."""

    # --- what each broker declares: the classes serving Spark's calls, given parsed options -------------

    def read_schema(self, options: Any) -> StructType:
        raise NotImplementedError

    adapter: ClassVar[type[Broker]]
    """The broker's object (:mod:`tubespark.spark.broker`) both planners hold."""

    def stream_reader(self, options: Any) -> DataSourceStreamReader:
        return StreamEngine(self.adapter(options))

    def batch_reader(self, options: Any) -> DataSourceReader:
        return BatchEngine(self.adapter(options, batch=True))

    def batch_writer(self, options: Any) -> DataSourceWriter:
        raise NotImplementedError

    def stream_writer(self, options: Any) -> DataSourceStreamWriter:
        raise NotImplementedError

    def check_sink(self, schema: StructType, options: Any) -> None:
        """Fail a write on the driver, before any task runs, when the columns cannot be sent."""
        raise NotImplementedError

    # --- Spark's calls -------------------------------------------------------------------------------

    @classmethod
    def name(cls) -> str:
        return cls.format

    def _options(self, mode: str, required: tuple[str, ...] = (), defaults: Mapping[str, str] | None = None) -> Any:
        return self.options_class.from_raw(self.options, mode=mode, required=required,
                                           defaults=dict(defaults) if defaults else None)

    def schema(self) -> StructType:
        return self.read_schema(self._options("read", self.read_required))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            options = self._options("read", self.read_required + self.stream_required)
            checkpoint = self._checkpoint_location()
        except OptionError as exc:
            return OptionErrorStreamReader(exc)
        reader = self.stream_reader(options)
        if isinstance(reader, StreamEngine):
            reader.checkpoint_location = checkpoint
        return reader

    def _checkpoint_location(self) -> str | None:
        """Spark's ``checkpointLocation``, when the query gave it to the reader too (Spark hands a source only its
        own options): the reader then reads the commit log there when the query stops (:mod:`.commit_log`)."""
        given = [value for key, value in self.options.items() if key.lower() == OPTION.lower()]
        return parse_checkpoint_location(str(given[0])) if given else None

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader; with Spark's filter pushdown on, one that takes WHERE filters
        (:mod:`tubespark.spark.pushdown`), else one without ``pushFilters``, which PySpark 4.3 requires then."""
        reader = self.batch_reader(self._options("read", self.read_required, BATCH_READ_DEFAULTS))
        if isinstance(reader, BatchEngine) and pushdown_enabled():
            return PushdownReader(reader)
        return reader

    def _write_options(self, schema: StructType) -> Any:
        options = self._options("write")
        self.check_sink(schema, options)
        return options

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:  # Spark's error for the default mode suggests Overwrite, so users reach for it
            raise OptionError(f"mode('overwrite') is not supported by format('{self.format}'): a topic only "
                              f"takes new messages, nothing it holds can be replaced. Write with "
                              f"mode('append'): the rows are added to the topic")
        return self.batch_writer(self._write_options(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = self._write_options(schema)
        self._vouch_from_checkpoint(options)
        return self.stream_writer(options)

    def _vouch_from_checkpoint(self, options: Any) -> None:
        """A sink stream whose checkpoint holds a committed batch wrote through its address option before: that is
        evidence it answered (as a read's checkpoint offsets are), so a driver process Spark started since (its
        Python workers end after a minute idle) waits for it when it is down, instead of failing the query as for
        an address that never answered (:mod:`tubespark.core.outage`). Spark hands ``checkpointLocation`` to the
        source when the query sets it as an option; without it the driver's own record decides."""
        if not self.entry_point:
            return
        try:
            location = self._checkpoint_location()
            committed = bool(location) and bool(committed_batches(str(location)))
        except (OptionError, SharedDirError) as exc:
            log.info("cannot list the checkpoint's commits (%s): the driver's own record decides", exc)
            return
        if committed:
            value = getattr(options, self.entry_point, ())
            vouch((value,) if isinstance(value, str) else tuple(value))


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

    def initialOffset(self) -> dict[str, int]:
        raise self.error

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        raise self.error

    def reportLatestOffset(self) -> dict[str, int] | None:
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        raise self.error

    def commit(self, end: dict[str, int]) -> None:
        raise self.error

    def stop(self) -> None:
        """Nothing was opened."""
