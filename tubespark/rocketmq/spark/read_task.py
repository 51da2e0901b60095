"""What an executor does for one pull task: every message of an exact ``[start, end)`` queue range."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from tubespark.core.deferred import TaskDeferral
from tubespark.core.outage import read_attempt_s, read_through_outage
from tubespark.rocketmq.client.ranges import RangeReader
from tubespark.rocketmq.spark.clients import shared_client
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.schema import read_schema, to_record_batch
from tubespark.rocketmq.wire.filter import ALL
from tubespark.rocketmq.wire.route import MessageQueue
from tubespark.spark.arrow import arrow_schema_for
from tubespark.spark.worker_heap import freeze_worker_heap

READ_GROUP = "tubespark_read"
"""The group pulls name when the user gave none (a pull needs one; reading commits nothing for it)."""


@dataclass(frozen=True)
class PullRange(InputPartition):
    """Read ``[start, end)`` of one queue. Small and picklable."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int
    defer: tuple[str, int, str] | None = None
    """A streaming task: ``(location, token, run_id)`` of the deferred-range reports it hands the rest of its
    range to when its broker group is down (:mod:`tubespark.core.deferred`); ``None`` (batch reads, the driver's
    own reads, a query that does not defer): wait for the group."""

    @property
    def mq(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


def read_range(task: PullRange, options: RocketMQOptions, *, retry_s: float | None = None,
               outage_s: float | None = None, filtered: bool = True, defer: bool = True) -> Iterator[pa.RecordBatch]:
    """Executor side: every message of the task's range that ``subExpression`` matches, in order, one Arrow
    batch per pull; a failing pull is retried for ``retry_s`` (by default ``failoverTimeoutMs``: long enough
    for a slave to act for its master), a broker group that is down waited for ``outage_s`` (by default
    ``outageTimeoutMs``, :func:`read_through_outage`), unless the task is a stream's (:attr:`PullRange.defer`, and
    ``defer``): then the rest of the range is left to the next micro-batch after the reader's first try.
    ``filtered=False`` reads every message (the driver's own reads: a fingerprint names the message at an offset,
    whatever the filter)."""
    freeze_worker_heap()
    schema = arrow_schema_for(read_schema(options.include_properties))
    budget = options.failover_timeout_ms / 1000 if retry_s is None else retry_s
    deferrer = TaskDeferral(task.defer, task.mq.key, task.start, task.end) if defer and task.defer else None
    reader = RangeReader(shared_client(options), options.group or READ_GROUP,
                         fail_on_data_loss=options.fail_on_data_loss, verify_crc=options.verify_checksums,
                         retry_s=read_attempt_s(budget, options.request_timeout_ms / 1000,
                                                deferring=deferrer is not None),
                         flt=options.filter if filtered else ALL)
    wait_s = options.outage_timeout_ms / 1000 if outage_s is None else outage_s
    for messages in read_through_outage(lambda offset: reader.read(task.mq, offset, task.end), start=task.start,
                                        retry_s=budget, outage_s=wait_s, defer=deferrer,
                                        what=f"read of queue {task.mq.key} [{task.start}, {task.end})"):
        yield to_record_batch(messages, broker_name=task.broker_name, schema=schema)
    if deferrer is not None:
        deferrer.finish()


