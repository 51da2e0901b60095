"""Batch reads of every broker (``spark.read.format(...)``): one plan from the broker's catalog.

:class:`BatchEngine` holds the same :class:`~tubespark.spark.broker.Broker` object a stream does and plans from
its :meth:`~tubespark.spark.broker.Broker.catalog`, with the rules every broker shares, in this order:

1. partitions a server should serve and does not now (a broker that is down) fail the read, naming the server
   and its partitions (``onUnavailablePartitions=fail``, the default), or are left out with a warning
   (``skip``; :mod:`tubespark.spark.unavailable`): a read of part of a topic never passes for the whole;
2. ``startingOffsets`` / ``endingOffsets`` JSON names only partitions the topics have, and each number is on a
   message boundary, not beyond the partition's end, and not below its first offset (data loss:
   ``failOnDataLoss``), the end not before the start (:mod:`tubespark.spark.offset_rules`);
3. with filters Spark pushed (:class:`PushdownReader`, :mod:`tubespark.spark.pushdown`): only the partitions
   they select, each range cut to their offsets and times;
4. each partition's ``[start, end)`` is split into tasks of ``maxRecordsPerPartition`` messages.

A broker's own ways to place a start or an end (TubeMQ's times) come from
:meth:`~tubespark.spark.broker.Broker.position_at`; everything else is decided here, once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from tubespark.core.outage import named_if_never_answered
from tubespark.errors import OptionError
from tubespark.spark.broker import Broker, Catalog, Range
from tubespark.spark.offset_rules import check_named_partitions, check_range, resolve_checked, resolve_start
from tubespark.spark.offsets import EARLIEST, LATEST
from tubespark.spark.planning import Bounds, split_range
from tubespark.spark.pushdown import Kind, Pushdown, clip, translate
from tubespark.spark.unavailable import settle_unavailable

log = logging.getLogger(__name__)


class BatchEngine(DataSourceReader):
    """Spark's batch reader over one broker's :class:`Broker` (never subclassed)."""

    def __init__(self, broker: Broker) -> None:
        if broker.options.starting_offsets == "group":
            raise OptionError("option startingOffsets=group is for streaming reads; batch reads take earliest, "
                              "latest or JSON offsets")
        self.broker = broker
        self.options = broker.options
        self.left_out: dict[Any, tuple[str, ...]] = {}
        """After :meth:`plan`: server -> partitions left out because it does not serve them now (only with
        ``onUnavailablePartitions=skip``; otherwise the plan fails instead)."""
        self.checked = True
        """After :meth:`plan`: whether the broker could tell every partition the topics have (False only where it
        could not learn that and ``onUnavailablePartitions=skip`` let the read go on)."""
        self.pushdown: Pushdown | None = None
        """The filters Spark pushed (:class:`PushdownReader`), ``None``: none."""

    def plan(self) -> list[InputPartition]:
        """The read tasks; raises before any task runs for every rule above."""
        try:
            return self._plan()
        finally:
            self.broker.close()

    def _plan(self) -> list[InputPartition]:
        broker, opts = self.broker, self.options
        catalog = broker.catalog()
        self.checked = catalog.checked
        topics = catalog.topics or tuple(opts.topics or ())
        self.left_out = settle_unavailable(topics, opts.on_unavailable_partitions, catalog.unavailable,
                                           catalog.reasons, total=len(catalog.known()))
        away = {key for keys in catalog.unavailable.values() for key in keys}
        for option, spec in (("startingOffsets", opts.starting_offsets), ("endingOffsets", opts.ending_offsets)):
            check_named_partitions(option, spec, sorted(catalog.bounds), exists=away.__contains__,
                                   listing=broker.listing)
        ranges: list[Range] = []
        pushed = self.pushdown
        if pushed is not None and pushed.nothing:
            log.info("batch read of %s: the pushed filters match no row (%s)", ",".join(topics), pushed.describe())
            return []
        for key, found in sorted(catalog.bounds.items()):
            if pushed is not None and not pushed.selects(broker.partition_values(key)):
                continue
            start, end = self._start(key, found), self._end(key, found)
            check_range(key, start, end, broker.units)
            if pushed is not None:
                start, end = self._prune(key, found, start, end, pushed)
            ranges.extend((key, low, high) for low, high in split_range(
                start, end, opts.max_records_per_partition, record_size=broker.record_size))
        tasks = list(broker.read_tasks(ranges))
        log.info("batch read of %s planned %d tasks", ",".join(topics), len(tasks))
        return tasks

    def _prune(self, key: str, found: Bounds, start: int, end: int, pushed: Pushdown) -> tuple[int, int]:
        """``[start, end)`` of ``key`` cut to the pushed offsets and times (each time end found by the broker)."""
        start, end = clip(start, end, pushed.offsets, self.broker.record_size)
        for column, span in sorted(pushed.times.items()):
            if start >= end:
                break
            if span.low is not None:
                start = max(start, self.broker.time_position(key, found, column, span.low))
            if span.high is not None:  # the first message after the span's last millisecond ends the read
                end = min(end, self.broker.time_position(key, found, column, span.high + 1))
        return start, max(start, end)

    def _start(self, key: str, found: Bounds) -> int:
        at = self.broker.position_at(key, found, "startingOffsets")
        if at is not None:
            return at
        return resolve_start("startingOffsets", self.options.starting_offsets, key, low=found.low, high=found.high,
                             default=EARLIEST, units=self.broker.units,
                             fail_on_data_loss=self.options.fail_on_data_loss)

    def _end(self, key: str, found: Bounds) -> int:
        at = self.broker.position_at(key, found, "endingOffsets")
        if at is not None:
            return at
        return resolve_checked("endingOffsets", self.options.ending_offsets, key, low=found.low or 0,
                               high=found.high, default=LATEST, units=self.broker.units)

    def partitions(self) -> list[InputPartition]:
        with named_if_never_answered(f"the batch read's plan ({self.broker.name})"):
            return self.plan()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.__class__ is InputPartition:  # an empty plan: Spark runs one task, a bare partition
            return iter(())
        return self.broker.read(partition)


class PushdownReader(DataSourceReader):
    """The batch reader Spark gets when ``spark.sql.python.filterPushdown.enabled`` is on: the same
    :class:`BatchEngine`, plus ``pushFilters``. A class of its own because PySpark 4.3 fails a read whose reader
    class defines ``pushFilters`` while the setting is off (:func:`tubespark.spark.pushdown.pushdown_enabled`)."""

    def __init__(self, engine: BatchEngine) -> None:
        self.engine = engine

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 - PySpark's name
        """Keep what the broker serves (:func:`tubespark.spark.pushdown.translate`); return what Spark applies."""
        broker = self.engine.broker
        columns = broker.pushdown_columns()
        pushed, left = translate(filters, columns)
        for column, spec in columns.items():
            if spec.kind is Kind.TAG and pushed.values.get(column):
                pushed.values[column] = broker.use_tags(column, pushed.values[column])
        self.engine.pushdown = pushed
        log.info("%s batch read, filters pushed: %s; left to Spark: %d", broker.name, pushed.describe(), len(left))
        return left

    def partitions(self) -> list[InputPartition]:
        return self.engine.partitions()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.engine.read(partition)


__all__ = ["BatchEngine", "Catalog", "PushdownReader"]
