"""Batch reads (``spark.read.format("tank")``): exact sequence ranges of every partition of the topics.

Planned on the driver from DiscoverPartitions: each partition from ``startingOffsets`` (default
``earliest``) to ``endingOffsets`` (default ``latest``: the high-water mark + 1 at planning time),
split into tasks of ``maxRecordsPerPartition`` numbers when set. An explicit start below the first
available number is data loss (``failOnDataLoss``): fail, or start at the first available number.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from tubespark.core.outage import named_if_never_answered
from tubespark.errors import DataLossError
from tubespark.spark.offset_rules import check_range
from tubespark.spark.planning import split_range
from tubespark.tank.spark.bounds import EARLIEST, LATEST, UNITS, check_named, discover, resolve
from tubespark.tank.spark.options import TankOptions
from tubespark.tank.spark.read_task import SeqRange, read_range

log = logging.getLogger(__name__)


class TankBatchReader(DataSourceReader):
    def __init__(self, options: TankOptions) -> None:
        self.options = options

    def plan(self) -> list[SeqRange]:
        opts = self.options
        tasks: list[SeqRange] = []
        found = discover(opts)
        check_named(opts, found, ending=True)
        for key, bounds in sorted(found.items()):
            start = resolve(opts.starting_offsets, bounds, default=EARLIEST, option="startingOffsets")
            end = resolve(opts.ending_offsets, bounds, default=LATEST, option="endingOffsets")
            check_range(key, start, end, UNITS)
            if start < bounds.first:
                message = (f"partition {key}: startingOffsets asks for {start} but the first available number is "
                           f"{bounds.first}")
                if opts.fail_on_data_loss:
                    raise DataLossError(f"{message}; set failOnDataLoss=false to read from {bounds.first}")
                log.warning("%s; failOnDataLoss=false: reading from %d", message, bounds.first)
                start = min(bounds.first, end)
            tasks.extend(SeqRange(opts.broker, bounds.topic, bounds.partition, low, high)
                         for low, high in split_range(start, end, opts.max_records_per_partition))
        log.info("batch read of %s planned %d tasks", ",".join(opts.topics or ()), len(tasks))
        return tasks

    def partitions(self) -> list[InputPartition]:
        with named_if_never_answered(f"the batch read of TANK broker {self.options.broker}"):
            return list(self.plan())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SeqRange):  # an empty plan: Spark runs one task, bare partition
            return iter(())
        return read_range(partition, self.options)
