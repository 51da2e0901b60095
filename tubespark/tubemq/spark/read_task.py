"""What the driver ships to an executor for one Spark task: one queue and one offset range.

With ``payloadFormat=inlongmsg`` each message is decoded as an InLong bundle and becomes one row per
record. A message that is not a valid bundle fails the task naming partition and offset
(:class:`BundleParseError`), or with ``ignoreParseErrors=true`` is skipped: a WARNING per skipped
message and one summary line per task in the executor log, and, with ``skippedBundlesPath``, one JSON
file per task range that :func:`skipped_bundles` sums on the driver (Spark 4.3's Python Data Source API
has no custom task or progress metrics, and an executor's Python worker cannot reach the driver
otherwise).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from tubespark.core.deferred import TaskDeferral
from tubespark.core.native import announce
from tubespark.core.outage import is_unreachable, read_attempt_s, read_through_outage
from tubespark.core.shared_dir import SharedDir, SharedDirError
from tubespark.errors import DataLossError, UnknownTopicError
from tubespark.formats import PayloadFormatError, Record, decode_bundle
from tubespark.formats.bundles import ATTR_MSG_EN_TYPE, MSG_EN_TYPE_INLONGMSG, MSG_EN_TYPE_PB
from tubespark.spark.dedupe import ReplayFilter
from tubespark.spark.worker_heap import freeze_worker_heap
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.ranges import RangeReader
from tubespark.tubemq.errors import BundleParseError, ServerNotReadyError, ServiceStoppedError
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.schema import arrow_schema, bundle_record_batch, fetches_record_batch, value_bytes
from tubespark.tubemq.wire.fetch import Columns, PackedColumns, ValueArena
from tubespark.tubemq.wire.formats import PartitionRef
from tubespark.tubemq.wire.message import ReceivedMessage
from tubespark.tubemq.wire.twin import HOT_PATH

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """Read ``[start, end)`` of one partition under ``read_group`` as ``client_id``. Small and picklable."""

    broker_id: int
    host: str
    port: int
    topic: str
    partition_id: int
    start: int
    end: int
    read_group: str
    client_id: str
    defer: tuple[str, int, str] | None = None
    """A streaming task: ``(location, token, run_id)`` of the :class:`DeferredRanges` it hands the rest of its
    range to when its broker is down; ``None`` (batch reads, the driver's own reads): wait for the broker."""

    @property
    def ref(self) -> PartitionRef:
        return PartitionRef(self.broker_id, self.topic, self.partition_id, self.host, self.port)


_KEEP_DETAILS = 100  # skipped offsets / errors kept per task in its summary


@dataclass
class SkipCounter:
    """What one read task skipped with ``ignoreParseErrors=true``."""

    count: int = 0
    offsets: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, offset: int, error: str) -> None:
        self.count += 1
        if len(self.offsets) < _KEEP_DETAILS:
            self.offsets.append(offset)
            self.errors.append(error)


def decode_bundles(messages: Sequence[ReceivedMessage], partition_key: str, ignore_errors: bool,
                   skipped: SkipCounter) -> list[tuple[ReceivedMessage, list[Record]]]:
    """Each message with its records; a message that is not a bundle raises or (``ignore_errors``) is
    counted in ``skipped`` and left out."""
    decoded = []
    for message in messages:
        try:
            decoded.append((message, decode_bundle(message.data, message.attributes, raw_fallback=False)))
        except PayloadFormatError as exc:
            if not ignore_errors:
                raise BundleParseError(f"partition {partition_key}, offset {message.offset}: the message is not a "
                                       f"valid InLong bundle ({exc}); set ignoreParseErrors=true to skip such "
                                       f"messages") from exc
            skipped.add(message.offset, str(exc))
            log.warning("partition %s, offset %d: skipping a message that is not a valid InLong bundle "
                        "(ignoreParseErrors=true): %s", partition_key, message.offset, exc)
    return decoded


SKIPS_OPTION = "skippedBundlesPath"


def record_skips(path: str, task: QueueRange, skipped: SkipCounter) -> None:
    """Write the task's skip summary (one file per range: a retried task overwrites its own) into ``path``,
    a local directory or a filesystem URI (:mod:`tubespark.core.shared_dir`), atomically."""
    doc = {"partition": task.ref.key, "start": task.start, "end": task.end, "skipped": skipped.count,
           "offsets": skipped.offsets, "errors": skipped.errors}
    name = f"{task.topic}-{task.broker_id}-{task.partition_id}-{task.start}-{task.end}.json"
    SharedDir(path, SKIPS_OPTION).publish(name, json.dumps(doc).encode())


@dataclass(frozen=True)
class SkippedBundles:
    """What :func:`skipped_bundles` found: the total, per partition, and every task range's summary."""

    total: int
    by_partition: Mapping[str, int]
    ranges: list[dict[str, Any]]


def skipped_bundles(path: str) -> SkippedBundles:
    """Sum what read tasks with ``ignoreParseErrors=true`` and ``skippedBundlesPath=path`` skipped."""
    ranges = []
    directory = SharedDir(path, SKIPS_OPTION)
    for name in directory.names("*.json"):
        try:
            ranges.append(json.loads(directory.read(name)))
        except (SharedDirError, ValueError) as exc:  # a file being replaced right now: the next call sees it
            log.info("cannot read %s in %r: %s", name, directory, exc)
    by_partition: dict[str, int] = {}
    for doc in ranges:
        by_partition[doc["partition"]] = by_partition.get(doc["partition"], 0) + int(doc["skipped"])
    return SkippedBundles(sum(by_partition.values()), by_partition, ranges)


BATCH_ROWS = 8192
"""Rows of one Arrow batch at most: the fetches a task holds before it hands them to Spark as one batch."""
BATCH_BYTES = 2 << 20
"""Value bytes of one Arrow batch at most. Joining fetches saves a batch's fixed costs (Arrow building, PySpark's
hand-over) and, since their values lie one after the other in the task's :class:`ValueArena`, costs no copy (it
cost one before, which did not pay at 1 KiB). In-process (``python -m bench.wire_micro --cpu --paired --join
1:4 --ab``, docs/performance/breakdown.md) four fetches of 1 KiB messages (about 460 KB of values each) walked,
made a batch and handed over took about 0.8 of the CPU per row one fetch a batch took before; so four of
either size make one batch (four of 100 B: 8,000 rows, below ``BATCH_ROWS``)."""
ARENA_BYTES = 4 << 20
"""The buffer a read task's fetches write their values into (:class:`ValueArena`), one after the other, so that a
batch of several takes them with no copy: two batches of ``BATCH_BYTES`` (a batch also ends where a buffer
does). A buffer is written again once Spark let go of its batches, while its pages are still warm."""

STATS_OPTION = "readStatsPath"


@dataclass
class FetchCounter:
    """What one read task fetched from its broker: messages and bytes of message values (``readStatsPath``), those
    of its range: the tail of a fetch that reaches past the range's end is cut and not counted."""

    messages: int = 0
    value_bytes: int = 0

    def add(self, columns: Columns) -> None:
        self.messages += len(columns)
        self.value_bytes += value_bytes(columns)

    def add_messages(self, messages: Sequence[ReceivedMessage]) -> None:
        self.messages += len(messages)
        self.value_bytes += sum(len(message.data) for message in messages)

    def publish(self, path: str, task: QueueRange) -> None:
        """One JSON file per task range (a retried task overwrites its own); a failure only loses the count."""
        doc = {"partition": task.ref.key, "start": task.start, "end": task.end, "messages": self.messages,
               "bytes": self.value_bytes}
        name = f"{task.topic}-{task.broker_id}-{task.partition_id}-{task.start}-{task.end}.json"
        try:
            SharedDir(path, STATS_OPTION).publish(name, json.dumps(doc).encode())
        except SharedDirError as exc:
            log.error("cannot record the read stats of %s in %s: %s", task.ref.key, path, exc)


def read_stats(path: str) -> dict[str, int]:
    """The sum of what the read tasks of ``readStatsPath=path`` fetched: ``messages``, ``bytes``, ``tasks``."""
    directory = SharedDir(path, STATS_OPTION)
    total = {"messages": 0, "bytes": 0, "tasks": 0}
    for name in directory.names("*.json"):
        doc = json.loads(directory.read(name))
        total["messages"] += int(doc["messages"])
        total["bytes"] += int(doc["bytes"])
        total["tasks"] += 1
    return total


def read_range(task: InputPartition, options: TubeMQOptions, *, outage_s: float | None = None,
               defer: bool = True) -> Iterator[pa.RecordBatch]:
    """Executor side: read the task's range from its broker, one Arrow batch per few fetches, then let go. A broker
    that is down is waited for ``outage_s`` (by default ``outageTimeoutMs``; the driver's own reads pass 0),
    unless the task is a stream's (:attr:`QueueRange.defer`, and ``defer``): then the rest of the range is left
    to the next micro-batch after the reader's first try (:mod:`tubespark.core.deferred`)."""
    if not isinstance(task, QueueRange):  # a plan with no range: Spark still runs one task, with a bare partition
        return
    announce("TubeMQ wire hot path", HOT_PATH)
    freeze_worker_heap()
    deferrer = TaskDeferral(task.defer, task.ref.key, task.start, task.end) if defer and task.defer else None
    if options.inlongmsg:
        yield from _read_bundles(task, options, outage_s, deferrer)
        return
    schema = arrow_schema(options.include_attributes)
    ref = task.ref
    broker, reader = _range_reader(task, options, deferring=deferrer is not None, arena=ValueArena(ARENA_BYTES))
    dedup_attribute = options.dedup_attribute if options.dedupe else None
    replays = ReplayFilter()
    hinted = False
    held: list[Columns] = []  # fetched, not handed to Spark yet: at most BATCH_ROWS rows and BATCH_BYTES bytes
    rows = size = 0

    def batch() -> pa.RecordBatch:
        nonlocal rows, size
        parts = held[:]
        held.clear()
        rows = size = 0
        return fetches_record_batch(parts, topic=task.topic, partition_key=ref.key, broker_id=task.broker_id,
                                    partition_id=task.partition_id, schema=schema)

    fetched = FetchCounter() if options.read_stats_path else None  # counted only where it is asked for
    try:
        for columns in _patiently(task, options, outage_s, reader.read_columns, deferrer):
            if fetched is not None:
                fetched.add(columns)
            if not hinted and len(columns):
                hinted = True  # the first messages tell: a topic of InLong bundles holds little else
                hint_inlong_bundles(columns, ref.key)
            if dedup_attribute:
                columns = columns.where([replays.first_time(a.get(dedup_attribute)) for a in columns.attributes])
            if not columns:
                continue
            nbytes = value_bytes(columns)
            if held and (rows + len(columns) > BATCH_ROWS or size + nbytes > BATCH_BYTES
                         or not _joins(held[-1], columns)):
                yield batch()
            held.append(columns)
            rows, size = rows + len(columns), size + nbytes
            if rows >= BATCH_ROWS or size >= BATCH_BYTES:
                yield batch()
        if held:
            yield batch()
        if deferrer is not None:
            deferrer.finish()
    except UnknownTopicError as exc:
        if options.fail_on_data_loss:
            raise DataLossError(f"partition {ref.key} vanished while offsets [{task.start}, {task.end}) were "
                                f"planned: {exc}; set failOnDataLoss=false to skip it") from exc
        log.warning("partition %s vanished (%s); skipping offsets [%d, %d)", ref.key, exc, task.start, task.end)
        if held:  # what was read before it vanished is the task's, as when each fetch was a batch
            yield batch()
    finally:
        broker.close()
    if fetched is not None and options.read_stats_path:
        fetched.publish(options.read_stats_path, task)


def _joins(before: Columns, columns: Columns) -> bool:
    """Whether ``columns`` may join ``before``'s batch: lists always (a batch with lists joins lists), the compiled
    twin's buffers when their values follow ``before``'s in the task's arena (not after a fetch dropped by a retry,
    or a new buffer)."""
    if isinstance(before, PackedColumns) and isinstance(columns, PackedColumns):
        return columns.follows(before)
    return True


_hinted: set[str] = set()  # what this process has hinted at already


def hint_inlong_bundles(columns: Columns, partition_key: str) -> bool:
    """Log once per process when a raw read's first messages are InLong bundles (``msgEnType``), which
    ``payloadFormat=raw`` gives as one row of bundle bytes each: the user most likely wanted records.
    Returns whether the messages carry bundles."""
    texts = columns.text_attributes if isinstance(columns, PackedColumns) else columns.attributes
    kinds = sorted({a[ATTR_MSG_EN_TYPE] for a in texts if a.get(ATTR_MSG_EN_TYPE) in _BUNDLE_KINDS})
    if not kinds:
        return False
    if "inlong" not in _hinted:
        _hinted.add("inlong")
        log.warning("partition %s holds InLong bundles (TubeMQ attribute msgEnType=%s: %s), read with "
                    "payloadFormat=raw, so each row's value is a whole bundle's bytes, many records in one; "
                    "set .option(\"payloadFormat\", \"inlongmsg\") for a row per record", partition_key,
                    "/".join(kinds), ", ".join(_BUNDLE_KINDS[k] for k in kinds))
    return True


_BUNDLE_KINDS = {str(MSG_EN_TYPE_PB): "MessageObjs", str(MSG_EN_TYPE_INLONGMSG): "InLongMsg"}


def _retry_s(options: TubeMQOptions) -> float:
    """How long a read retries faults of a broker that answers (busy, a stale holder) without progress."""
    return options.request_timeout_ms / 1000 * 6


def _range_reader(task: QueueRange, options: TubeMQOptions, *, deferring: bool = False,
                  arena: ValueArena | None = None) -> tuple[BrokerClient, RangeReader]:
    """The task's broker connection and range reader (the caller closes the broker). The reader gives up
    after one short attempt (:func:`read_attempt_s`, shorter for a task that defers); :func:`_patiently`
    decides whether to wait and go on."""
    broker = BrokerClient(task.client_id, replace(options.client_settings(), caller_reads=True))
    retry_s = _retry_s(options)
    return broker, RangeReader(broker, task.read_group, filters=options.stream_ids,
                               fail_on_data_loss=options.fail_on_data_loss,
                               verify_checksums=options.verify_checksums,
                               retry_s=read_attempt_s(retry_s, options.request_timeout_ms / 1000,
                                                      deferring=deferring),
                               data_wait_s=retry_s, arena=arena)


def _is_outage(exc: BaseException) -> bool:
    """A broker that is down, stopping or restarting: a stopping broker answers every read with code 503 until
    its port closes (``ServiceStoppedError``), and a restarted one accepts connections a moment before its RPC
    server runs (``ServerNotReadyError``); both are part of the same outage."""
    return is_unreachable(exc) or isinstance(exc, ServerNotReadyError | ServiceStoppedError)


def _patiently(task: QueueRange, options: TubeMQOptions, outage_s: float | None,
               read: Callable[[PartitionRef, int, int], Iterator[T]],
               defer: TaskDeferral | None = None) -> Iterator[T]:
    """``read`` of the task's range, waiting for its broker while it is down (``outageTimeoutMs``), or, for a
    streaming task (``defer``), leaving the rest to the next batch."""
    ref = task.ref
    return read_through_outage(lambda offset: read(ref, offset, task.end), start=task.start, is_outage=_is_outage,
                               retry_s=_retry_s(options), defer=defer,
                               outage_s=options.outage_timeout_ms / 1000 if outage_s is None else outage_s,
                               what=f"read of partition {ref.key} [{task.start}, {task.end}) from broker "
                                    f"{ref.broker.address}")


def _read_bundles(task: QueueRange, options: TubeMQOptions, outage_s: float | None,
                  defer: TaskDeferral | None) -> Iterator[pa.RecordBatch]:
    """``payloadFormat=inlongmsg``: a row per record of every bundle in ``[start, end)``."""
    schema = arrow_schema(options.include_attributes, inlongmsg=True)
    ref = task.ref
    broker, reader = _range_reader(task, options, deferring=defer is not None)
    dedup_attribute = options.dedup_attribute if options.dedupe else None
    replays = ReplayFilter()
    keep = (lambda attrs: replays.first_time(attrs.get(dedup_attribute))) if dedup_attribute else None
    skipped = SkipCounter()
    messages_read = rows = 0
    fetched = FetchCounter() if options.read_stats_path else None
    try:
        for messages in _patiently(task, options, outage_s, reader.read_batches, defer):
            messages_read += len(messages)
            if fetched is not None:
                fetched.add_messages(messages)
            decoded = decode_bundles(messages, ref.key, options.ignore_parse_errors, skipped)
            if decoded:
                batch = bundle_record_batch(decoded, topic=task.topic, partition_key=ref.key,
                                            broker_id=task.broker_id, partition_id=task.partition_id, schema=schema,
                                            keep=keep)
                rows += batch.num_rows
                if batch.num_rows:
                    yield batch
        if defer is not None:
            defer.finish()
    except UnknownTopicError as exc:
        if options.fail_on_data_loss:
            raise DataLossError(f"partition {ref.key} vanished while offsets [{task.start}, {task.end}) were "
                                f"planned: {exc}; set failOnDataLoss=false to skip it") from exc
        log.warning("partition %s vanished (%s); skipping offsets [%d, %d)", ref.key, exc, task.start, task.end)
    finally:
        broker.close()
    if fetched is not None and options.read_stats_path:
        fetched.publish(options.read_stats_path, task)
    level = logging.WARNING if skipped.count else logging.INFO
    log.log(level, "read of %s [%d, %d): %d rows from %d bundles; %d messages skipped as unparseable%s", ref.key,
            task.start, task.end, rows, messages_read - skipped.count, skipped.count,
            f" (offsets {skipped.offsets})" if skipped.count else "")
    if skipped.count and options.skipped_bundles_path:
        try:
            record_skips(options.skipped_bundles_path, task, skipped)
        except SharedDirError as exc:  # the rows are right; only the counter is lost: say so loudly
            log.error("cannot record %d skipped messages of %s in %s: %s", skipped.count, ref.key,
                      options.skipped_bundles_path, exc)
