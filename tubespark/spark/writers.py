"""Shared Arrow writers: each write task gets a stable stamp, returns what it sent, and the driver logs it.

A broker's sink subclasses :class:`StampedBatchWriter` / :class:`StampedStreamWriter` and implements
``send(batches, stamp)``: send every row, return only after the broker acknowledged all of them. The
stamp is the same for every attempt of a task (write id made on the driver, or query id + batch id,
plus the task's partition index), so a writer can tag rows with ids that survive a retry.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import DataType, MapType, StringType, StructType

from tubespark.core.outage import alive_addresses, is_unreachable, ride_out, vouch
from tubespark.errors import OptionError
from tubespark.spark.worker_heap import freeze_worker_heap

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SentCommitMessage(WriterCommitMessage):
    """What one write task sent (all of it acknowledged by the brokers)."""

    task: int
    rows: int
    bytes: int


def check_sink_columns(schema: StructType, allowed: Mapping[str, tuple[type[DataType], ...]], *, broker: str,
                       topic_option: bool) -> None:
    """Fail a write on the driver, before any task runs, if ``broker``'s sink cannot send its columns: it
    needs ``value``, a topic (the option, else a ``topic`` column), and only the columns of ``allowed``
    with one of their types; a map column must be map<string,string>."""
    names = {f.name: f.dataType for f in schema.fields}
    if "value" not in names:
        raise OptionError(f"the {broker} sink needs a 'value' column (binary or string); got {sorted(names)}")
    if not topic_option and "topic" not in names:
        raise OptionError(f"the {broker} sink needs a topic: set option 'topic' or add a 'topic' column")
    for name, data_type in names.items():
        types = allowed.get(name)
        if types is None:
            raise OptionError(f"column {name!r} is not sent to {broker}; the sink takes {sorted(allowed)}")
        if not isinstance(data_type, types):
            raise OptionError(f"column {name!r} has type {data_type.simpleString()}, expected "
                              f"{' or '.join(t.typeName() for t in types)}")
        if isinstance(data_type, MapType) and not (isinstance(data_type.keyType, StringType)
                                                  and isinstance(data_type.valueType, StringType)):
            raise OptionError(f"column {name!r} must be map<string,string>")


def task_index() -> int:
    """The running task's partition index (0 outside a Spark task)."""
    context = TaskContext.get()
    return context.partitionId() if context else 0


def log_commit(messages: Sequence[WriterCommitMessage | None], what: str) -> None:
    done = [m for m in messages if isinstance(m, SentCommitMessage)]
    log.info("%s: %d tasks sent %d rows (%d bytes)", what, len(done), sum(m.rows for m in done),
             sum(m.bytes for m in done))


class StampedWriter:
    """What the batch and the stream writer share: the options, ``broker`` (names the system in the logs),
    the driver's check that the broker can take the write, and ``send``. A broker's sink mixin derives from
    it too, so its ``super().__init__`` is typed.

    Spark makes a new writer on the driver for every write and every micro-batch of a sink stream, so the
    check runs each time: a broker that is down or restarting then is waited for (``outageTimeoutMs``,
    :func:`tubespark.core.outage.ride_out`) instead of failing the stream; what counts as an outage rather
    than a mistake (an unknown topic) is the broker's :meth:`is_outage`.
    """

    broker = "the broker"

    def __init__(self, options: Any) -> None:
        self.options = options
        outage_ms = getattr(options, "outage_timeout_ms", 0)  # every broker's options have it (shared spec)
        ride_out(self.check_reachable, outage_s=outage_ms / 1000, is_outage=self.is_outage,
                 what=f"the {self.broker} sink's check of its broker")
        # what the check saw answer goes with the writer to the tasks (other processes, which have seen nothing):
        # a broker that answered here and is down when a task starts is waited for there, not failed fast
        self.seen_alive = alive_addresses()

    def vouch_for_tasks(self) -> None:
        """In a write task: count what the driver's check saw answer as seen alive in this process too."""
        vouch(getattr(self, "seen_alive", ()))

    def check_reachable(self) -> None:
        """On the driver, before any task: the broker answers and the ``topic`` option's topic exists, so a
        mistake fails once with a typed error instead of once per task. Nothing by default."""

    def is_outage(self, exc: BaseException) -> bool:
        """Whether ``exc`` from :meth:`check_reachable` means the broker is unreachable for now."""
        return is_unreachable(exc)

    def send(self, batches: Iterator[pa.RecordBatch], stamp: str) -> SentCommitMessage:
        raise NotImplementedError


class StampedBatchWriter(StampedWriter, DataSourceArrowWriter):
    """``df.write``: stamps are ``<write id>-<task>``."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.write_id = uuid.uuid4().hex[:16]  # made on the driver: the same for every attempt of a task

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentCommitMessage:
        freeze_worker_heap()
        self.vouch_for_tasks()
        return self.send(iterator, f"{self.write_id}-{task_index()}")

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log_commit(messages, f"{self.broker} batch write committed")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log_commit(messages, f"{self.broker} batch write aborted (rows already sent stay in {self.broker})")


class StampedStreamWriter(StampedWriter, DataSourceStreamArrowWriter):
    """``df.writeStream``: stamps are ``<query id>-<batch id>-<task>``, the same when a batch is replayed."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentCommitMessage:
        freeze_worker_heap()
        self.vouch_for_tasks()
        context = TaskContext.get()
        query = context.getLocalProperty("sql.streaming.queryId") if context else None
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        stamp = f"{query or 'q'}-{batch or 0}-{context.partitionId() if context else 0}"
        return self.send(iterator, stamp)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log_commit(messages, f"{self.broker} stream batch {batchId} committed")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log_commit(messages, f"{self.broker} stream batch {batchId} aborted (rows already sent stay in "
                             f"{self.broker})")
