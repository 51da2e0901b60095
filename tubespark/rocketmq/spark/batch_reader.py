"""``spark.read.format("rocketmq")``: every read queue of the topics, ``[startingOffsets, endingOffsets)``
each, split by ``maxRecordsPerPartition``.

The name server routes only the broker groups that run: a group that stops (or crashes) leaves the route
and the cluster at once. A plan made from the route alone would leave out a stopped group's queues without
a word. So the plan is checked against the queues this process knows of (the routes it was given, the
queues the offsets options name: :func:`~tubespark.rocketmq.client.client.remember`); known queues on a
group that is not registered now fail the read (``onUnavailablePartitions=fail``, naming the group and
its queues) or are left out with a warning (``skip``). A process that never saw the topic's other groups
and names none of their queues cannot know of them: the name server keeps no record of a stopped group.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from tubespark.core.outage import named_if_never_answered
from tubespark.errors import OptionError
from tubespark.rocketmq.client.client import RocketMQClient, all_queues, remember
from tubespark.rocketmq.spark.options import QUEUE_LISTING, RocketMQOptions
from tubespark.rocketmq.spark.read_task import READ_GROUP, PullRange, read_range
from tubespark.rocketmq.wire.route import MessageQueue
from tubespark.spark.offset_rules import check_named_partitions, check_range, resolve_checked
from tubespark.spark.offsets import EARLIEST, LATEST
from tubespark.spark.planning import split_range
from tubespark.spark.unavailable import count_keys, settle_unavailable

log = logging.getLogger(__name__)


def _task(mq: MessageQueue, start: int, end: int) -> PullRange:
    return PullRange(mq.topic, mq.broker_name, mq.queue_id, start, end)


class RocketMQBatchReader(DataSourceReader):
    """``spark.read.format("rocketmq")``: exact ranges of every queue."""

    def __init__(self, options: RocketMQOptions) -> None:
        if options.starting_offsets == "group":
            raise OptionError("startingOffsets=group is for streaming reads; batch reads take earliest, latest "
                              "or JSON offsets")
        self.options = options
        self.left_out: dict[str, tuple[str, ...]] = {}
        """After :meth:`partitions`: broker group -> queues left out because the group is down (only with
        ``onUnavailablePartitions=skip``; otherwise the plan fails instead)."""

    def partitions(self) -> list[InputPartition]:
        with named_if_never_answered("the batch read's plan at the RocketMQ name server"):
            return self._partitions()

    def _partitions(self) -> list[InputPartition]:
        opts = self.options
        topics = opts.topics or ()
        remember(MessageQueue.parse_key(key) for spec in (opts.starting_offsets, opts.ending_offsets)
                 if isinstance(spec, dict) for key in spec if MessageQueue.parse_key(key).topic in topics)
        with RocketMQClient(list(opts.namesrvs), opts.client_settings()) as client:
            queues = all_queues(client, topics)  # an unknown topic fails here, on the driver
            down: dict[str, tuple[str, ...]] = {}
            for topic in topics:
                for group, known in client.down_groups(topic, client.route(topic)).items():
                    down[group] = (*down.get(group, ()), *(mq.key for mq in known))
            self.left_out = settle_unavailable(
                topics, opts.on_unavailable_partitions, down,
                {g: f"broker group {g} (not registered at the name server: stopped or down)" for g in down},
                total=len(queues) + count_keys(down), describe="broker group")
            on_down_groups = {key for keys in down.values() for key in keys}  # known, not routed now
            for option, spec in (("startingOffsets", opts.starting_offsets), ("endingOffsets", opts.ending_offsets)):
                check_named_partitions(option, spec, [mq.key for mq in queues], exists=on_down_groups.__contains__,
                                       listing=QUEUE_LISTING)
            bounds = client.bounds(queues)
            for topic in topics:
                client.check_filter(topic, opts.group or READ_GROUP, opts.filter)
        tasks: list[InputPartition] = []
        for mq in queues:
            low, high = bounds[mq.key]
            start = resolve_checked("startingOffsets", opts.starting_offsets, mq.key, low=low, high=high,
                                    default=EARLIEST)
            end = resolve_checked("endingOffsets", opts.ending_offsets, mq.key, low=low, high=high, default=LATEST)
            check_range(mq.key, start, end)
            tasks.extend(_task(mq, a, b) for a, b in split_range(start, end, opts.max_records_per_partition))
        log.info("rocketmq batch read of %s: %d tasks", ",".join(opts.topics or ()), len(tasks))
        return tasks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, PullRange):  # an empty plan: Spark runs one task, bare partition
            return iter(())
        return read_range(partition, self.options)
