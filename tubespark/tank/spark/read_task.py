"""What the driver ships to an executor for one Spark task: one partition and one sequence range."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from tubespark.core.deferred import TaskDeferral
from tubespark.core.outage import read_attempt_s, read_through_outage
from tubespark.errors import DataLossError, UnknownTopicError
from tubespark.spark.worker_heap import freeze_worker_heap
from tubespark.tank.client.ranges import RangeReader
from tubespark.tank.spark.options import TankOptions, partition_key
from tubespark.tank.spark.schema import arrow_schema, to_record_batch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SeqRange(InputPartition):
    """Read ``[start, end)`` of ``topic``/``partition`` from ``broker``. Small and picklable."""

    broker: str
    topic: str
    partition: int
    start: int
    end: int
    defer: tuple[str, int, str] | None = None
    """A streaming task: ``(location, token, run_id)`` of the deferred-range reports it hands the rest of its
    range to when its broker is down (:mod:`tubespark.core.deferred`); ``None`` (batch reads, the driver's own
    reads, a query without a reports directory): wait for the broker."""

    @property
    def key(self) -> str:
        return partition_key(self.topic, self.partition)


def read_range(task: SeqRange, options: TankOptions, *, outage_s: float | None = None,
               defer: bool = True) -> Iterator[pa.RecordBatch]:
    """Executor side: exactly the messages of the task's range, one Arrow batch per fetch; a broker that is
    down is waited for ``outage_s`` (by default ``outageTimeoutMs``; the driver's own reads pass 0,
    :func:`read_through_outage`), unless the task is a stream's (:attr:`SeqRange.defer`, and ``defer``): then
    the rest of the range is left to the next micro-batch after the reader's first try."""
    freeze_worker_heap()
    schema = arrow_schema()
    deferrer = TaskDeferral(task.defer, task.key, task.start, task.end) if defer and task.defer else None
    reader = RangeReader(task.broker, options.client_settings(), fetch_size=options.fetch_size_bytes,
                         retry_s=read_attempt_s(options.retry_s, options.request_timeout_ms / 1000,
                                                deferring=deferrer is not None),
                         fail_on_data_loss=options.fail_on_data_loss)
    rows = 0
    try:
        for columns in read_through_outage(lambda seq: reader.read(task.topic, task.partition, seq, task.end),
                                           start=task.start, retry_s=options.retry_s,
                                           outage_s=options.outage_timeout_ms / 1000 if outage_s is None
                                           else outage_s, defer=deferrer,
                                           what=f"read of partition {task.key} [{task.start}, {task.end}) from "
                                                f"broker {task.broker}"):
            rows += len(columns)
            yield to_record_batch(columns, task.topic, task.partition, schema)
        if deferrer is not None:
            deferrer.finish()
    except UnknownTopicError as exc:
        if options.fail_on_data_loss:
            raise DataLossError(f"partition {task.key} vanished while [{task.start}, {task.end}) was planned: {exc}; "
                                f"set failOnDataLoss=false to skip it") from exc
        log.warning("partition %s vanished (%s); skipping [%d, %d)", task.key, exc, task.start, task.end)
    finally:
        reader.close()
    log.info("read %s [%d, %d): %d messages, %d refetches of cut bundles", task.key, task.start, task.end, rows,
             reader.refetches)
