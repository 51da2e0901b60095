"""``spark.read.format("rocketmq")``: every read queue of the topics, ``[startingOffsets, endingOffsets)``
each, split by ``maxRecordsPerPartition``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from tubespark.errors import OptionError
from tubespark.rocketmq.client.client import RocketMQClient, all_queues
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.read_task import PullRange, read_range
from tubespark.rocketmq.wire.route import MessageQueue
from tubespark.spark.offsets import EARLIEST, LATEST, resolve_offset
from tubespark.spark.planning import split_range

log = logging.getLogger(__name__)


def _task(mq: MessageQueue, start: int, end: int) -> PullRange:
    return PullRange(mq.topic, mq.broker_name, mq.queue_id, start, end)


class RocketMQBatchReader(DataSourceReader):
    """``spark.read.format("rocketmq")``: exact ranges of every queue."""

    def __init__(self, options: RocketMQOptions) -> None:
        if options.pop:
            raise OptionError("consumeMode=pop is for streaming reads (acks follow a micro-batch's commit); "
                              "batch reads use consumeMode=pull")
        if options.starting_offsets == "group":
            raise OptionError("startingOffsets=group is for streaming reads; batch reads take earliest, latest "
                              "or JSON offsets")
        self.options = options

    def partitions(self) -> list[InputPartition]:
        opts = self.options
        with RocketMQClient(list(opts.namesrvs), opts.client_settings()) as client:
            queues = all_queues(client, opts.topics or ())  # an unknown topic fails here, on the driver
            bounds = client.bounds(queues)
        tasks: list[InputPartition] = []
        for mq in queues:
            low, high = bounds[mq.key]
            start = resolve_offset(opts.starting_offsets, mq.key, earliest=low, latest=high, default=EARLIEST)
            end = resolve_offset(opts.ending_offsets, mq.key, earliest=low, latest=high, default=LATEST)
            if end < start:
                raise OptionError(f"for {mq.key} the starting offset {start} is after the ending offset {end}")
            if end > high:
                raise OptionError(f"endingOffsets for {mq.key} is {end}, beyond the queue's max offset {high}")
            tasks.extend(_task(mq, a, b) for a, b in split_range(start, end, opts.max_records_per_partition))
        log.info("rocketmq batch read of %s: %d tasks", ",".join(opts.topics or ()), len(tasks))
        return tasks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, PullRange):  # an empty plan: Spark runs one task, bare partition
            return iter(())
        return read_range(partition, self.options)
