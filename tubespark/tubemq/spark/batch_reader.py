"""Batch reads (``spark.read.format("tubemq")``): exact offset ranges of every partition of the topics.

No consumer group is needed from the user: the reader plans with a generated group named
``tubespark-batch-<id>`` (visible as such in TubeMQ's admin tools), reads each range under its own
read group and releases every registration when the task ends. Large ranges can be split
(``maxRecordsPerPartition``) so a backfill keeps every core busy.

The master lists only the partitions of brokers that serve now, so a plan made from that list alone
would leave out a broker that is down without a word. Before planning, the reader compares the list
with the master's configuration (:mod:`tubespark.tubemq.spark.availability`: over the master's RPC port,
:func:`~tubespark.tubemq.client.configured.configured_by_master`, and its web API,
:func:`~tubespark.tubemq.client.placement.configured_partitions`): partitions configured on a broker that
does not serve them fail the read, naming broker and partitions, and so does a read that cannot learn the
configuration at all, unless ``onUnavailablePartitions=skip``, which reads the rest and logs what it left
out (:attr:`TubeBatchReader.left_out`) or that it could not check.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from tubespark.core.outage import named_if_never_answered
from tubespark.errors import BrokerConnectionError, OptionError
from tubespark.spark.offset_rules import check_named_partitions, check_range, resolve_checked
from tubespark.spark.offsets import EARLIEST, LATEST, wanted_time
from tubespark.spark.planning import split_range
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.ranges import Bounds, probe_bounds
from tubespark.tubemq.spark.availability import served_partitions, settle_unavailable
from tubespark.tubemq.spark.by_time import end_at_time, start_at_time
from tubespark.tubemq.spark.ledger import OFFSET_UNITS, PARTITION_LISTING
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.read_task import QueueRange, read_range
from tubespark.tubemq.spark.topics import subscribed_topics
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE
from tubespark.tubemq.wire.formats import PartitionRef

log = logging.getLogger(__name__)


class TubeBatchReader(DataSourceReader):
    def __init__(self, options: TubeMQOptions) -> None:
        if options.starting_offsets == "group":
            raise OptionError("option startingOffsets=group is for streaming reads; batch reads take earliest, "
                              "latest or JSON offsets")
        self.options = options
        self.base_group = f"tubespark-batch-{uuid.uuid4().hex[:12]}"
        self.left_out: dict[int, tuple[str, ...]] = {}
        """After :meth:`plan`: broker id -> partitions left out because that broker does not serve them
        (only with ``onUnavailablePartitions=skip``; otherwise the plan fails instead)."""
        self.checked = True
        """After :meth:`plan`: whether the plan was checked against the master's configuration (False only with
        ``onUnavailablePartitions=skip`` when no source of it answered: a broker that is down may be left out)."""

    def plan(self) -> list[QueueRange]:
        opts = self.options
        # an unknown topic, an unreachable master or a broker that is down fails here, on the driver,
        # before any task runs
        topics = subscribed_topics(opts)
        served, self.left_out, self.checked = served_partitions(topics, opts)
        broker = BrokerClient(f"{self.base_group}.planner", opts.client_settings())
        tasks: list[QueueRange] = []
        # listed by the master but not answering: a broker that crashed or stalls, not yet released by the
        # master (that takes its heartbeat timeout); the same as one that is down
        silent: dict[int, list[str]] = {}
        why: dict[int, str] = {}
        try:
            self._check_named([ref.key for ref in served])
            for ref in served:
                if ref.broker_id in why:
                    silent[ref.broker_id].append(ref.key)
                    continue
                try:
                    bounds = probe_bounds(broker, ref, f"{self.base_group}-probe")
                except BrokerConnectionError as exc:
                    why[ref.broker_id] = (f"broker {ref.broker_id} ({ref.broker.address}): listed by the master but "
                                          f"not answering ({exc})")
                    silent[ref.broker_id] = [ref.key]
                    continue
                start = self._start(broker, ref, bounds)
                end = self._end(broker, ref, bounds)
                check_range(ref.key, start, end, OFFSET_UNITS)
                tasks.extend(self._task(ref, low, high, len(tasks))
                             for low, high in split_range(start, end, opts.max_records_per_partition,
                                                          record_size=INDEX_RECORD_SIZE))
        finally:
            broker.close()
        if silent:  # all of such a broker's partitions, those it answered for before going silent too
            unanswered = {b: tuple(sorted({*keys, *(t.ref.key for t in tasks if t.ref.broker_id == b)}))
                          for b, keys in silent.items()}
            self.left_out = {**self.left_out, **settle_unavailable(
                topics, opts, unanswered, why, total=len(served) + sum(len(k) for k in self.left_out.values()))}
            tasks = [t for t in tasks if t.ref.broker_id not in silent]
        log.info("batch read of %s planned %d tasks under %s", ",".join(topics), len(tasks),
                 self.base_group)
        return tasks

    def _start(self, broker: BrokerClient, ref: PartitionRef, bounds: Bounds) -> int:
        """A start time (``startingTimestamp``, ``startingOffsetsByTimestamp``) wins over ``startingOffsets``."""
        opts = self.options
        when = wanted_time(opts.starting_timestamp, opts.starting_offsets_by_timestamp, ref.key)
        if when is not None:
            return start_at_time(broker, ref, bounds, when, f"{self.base_group}-time", opts)
        return resolve_checked("startingOffsets", opts.starting_offsets, ref.key, low=bounds.min_offset,
                               high=bounds.max_offset, default=EARLIEST, units=OFFSET_UNITS)

    def _end(self, broker: BrokerClient, ref: PartitionRef, bounds: Bounds) -> int:
        """An end time (``endingTimestamp``, ``endingOffsetsByTimestamp``) wins over ``endingOffsets``."""
        opts = self.options
        when = wanted_time(opts.ending_timestamp, opts.ending_offsets_by_timestamp, ref.key)
        if when is not None:
            return end_at_time(broker, ref, bounds, when, f"{self.base_group}-time", opts)
        return resolve_checked("endingOffsets", opts.ending_offsets, ref.key, low=bounds.min_offset,
                               high=bounds.max_offset, default=LATEST, units=OFFSET_UNITS)

    def _check_named(self, served: list[str]) -> None:
        """startingOffsets/endingOffsets JSON names only partitions of the topics: served ones, or ones left out
        because their broker does not serve them now (``onUnavailablePartitions=skip``)."""
        left_out = {key for keys in self.left_out.values() for key in keys}
        for option, spec in (("startingOffsets", self.options.starting_offsets),
                             ("endingOffsets", self.options.ending_offsets)):
            check_named_partitions(option, spec, served, exists=left_out.__contains__, listing=PARTITION_LISTING)

    def _task(self, ref: PartitionRef, start: int, end: int, index: int) -> QueueRange:
        # Splits of one partition run at the same time, so each needs its own read group.
        return QueueRange(ref.broker_id, ref.host, ref.port, ref.topic, ref.partition_id, start, end,
                          f"{self.base_group}-r{index}", f"{self.base_group}.{index}")

    def partitions(self) -> list[InputPartition]:
        with named_if_never_answered("the batch read's plan at the TubeMQ master"):
            return list(self.plan())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(partition, self.options)
