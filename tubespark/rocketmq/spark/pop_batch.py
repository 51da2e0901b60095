"""``spark.read.format("rocketmq").option("consumeMode", "pop")``: a batch read that consumes what it pops.

A batch read has no commit to wait for, so each task acks what it popped once Spark took every row of it
(receipts never travel to the driver: no ``popReceiptsPath``). That is a consuming read: the group's
messages are gone from it once read, and each action on the DataFrame pops anew. A task that fails before
its end acks nothing (those messages reappear after ``popInvisibleTimeMs``; Spark's retry of the task pops
others); rows of a task that ended are acked even if a later part of the job fails. Use pull mode for a
read that can be repeated.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from tubespark.rocketmq.client.client import RocketMQClient
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.pop_task import PopTask, read_pops

log = logging.getLogger(__name__)


class PopBatchReader(DataSourceReader):
    """``popPartitions`` tasks, each popping until a round of pops brings nothing or ``popMaxMessages``,
    then acking: the read takes what the group has to pop while it runs (up to ``popPartitions`` times
    ``popMaxMessages``)."""

    def __init__(self, options: RocketMQOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        opts = self.options
        with RocketMQClient(list(opts.namesrvs), opts.client_settings()) as client:
            for topic in opts.topics or ():  # an unknown topic or a filter the brokers refuse fails here
                client.route(topic)
                client.check_filter(topic, opts.group or "", opts.filter)
        log.info("rocketmq pop batch read of %s for %s: %d tasks", ",".join(opts.topics or ()), opts.group,
                 opts.pop_partitions)
        return [PopTask(0, i, "") for i in range(opts.pop_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PopTask)
        return read_pops(partition, self.options, ack=True)
