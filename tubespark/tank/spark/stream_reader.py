"""The streaming reader: offsets are TANK sequence numbers, kept in Spark's checkpoint only.

TANK has no consumer groups and no offset commit (docs/tank/protocol.md#no-consumer-groups), so there is
nothing to join, balance or store on the broker: every query reads every partition of its topics, and
its offsets ``{"topic:partition": next sequence number}`` live in Spark's checkpoint. A restart resumes
exactly there; each micro-batch reads exact ``[start, end)`` ranges that Spark logged before running it,
so a replayed batch reads the same messages (exactly-once with an idempotent sink).

Driver: ``initialOffset`` resolves ``startingOffsets`` against DiscoverPartitions (``earliest`` = first
available, ``latest`` = high-water mark + 1); ``latestOffset`` asks DiscoverPartitions again and plans
up to each high-water mark + 1, sharing ``maxOffsetsPerTrigger`` by backlog (core's planning helper).
A partition that appears later (a topic grew) joins at its first available number. Executors read the
ranges (:func:`tubespark.tank.spark.read_task.read_range`).

Numbers that vanish (``failOnDataLoss``): a start below the partition's first available number
(retention) is data loss when this query had seen messages at or above it, or does not know (after a
restart); a gap below the first message of a partition this query saw empty (a producer that chose its
numbers, ProduceWithSeqnum) is not. A high-water mark that went back below the query's position means
the broker lost acknowledged messages: fail, or continue from the broker's number.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from tubespark.errors import DataLossError, OptionError
from tubespark.spark.offsets import Offsets
from tubespark.spark.planning import share_by_backlog
from tubespark.tank.client.broker import TankClient
from tubespark.tank.spark.bounds import EARLIEST, Bounds, discover, resolve
from tubespark.tank.spark.options import TankOptions, split_key
from tubespark.tank.spark.read_task import SeqRange, read_range

log = logging.getLogger(__name__)


class TankStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream reader with admission control (``maxOffsetsPerTrigger``) and Trigger.AvailableNow."""

    def __init__(self, options: TankOptions) -> None:
        self.options = options
        self._client: TankClient | None = None
        self._seen_next: dict[str, int] = {}  # partition -> the largest high-water mark + 1 this process saw
        self._latest: Offsets = {}
        self._jump: dict[str, int] = {}  # partition -> first available number the last plan moved a start to
        self._target: Offsets | None = None
        self.data_loss_events: list[tuple[str, int, int]] = []
        """``(partition, query position, broker number)`` of every loss logged with failOnDataLoss=false."""

    # executors get the options only, never a socket
    def __getstate__(self) -> dict:
        return {"options": self.options}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    def _discover(self) -> dict[str, Bounds]:
        if self._client is None:
            self._client = TankClient(self.options.broker, self.options.client_settings())
        try:
            found = discover(self.options, self._client)
        except Exception:
            self._client.close()
            self._client = None
            raise
        for key, bounds in found.items():
            self._latest[key] = bounds.next
        return found

    def initialOffset(self) -> Offsets:
        offsets: Offsets = {}
        for key, bounds in sorted(self._discover().items()):
            offsets[key] = resolve(self.options.starting_offsets, bounds, default=EARLIEST, option="startingOffsets")
            if offsets[key] < bounds.first:
                raise OptionError(f"option startingOffsets: {key} is at {offsets[key]}, below the partition's first "
                                  f"available number {bounds.first}")
            self._seen_next[key] = bounds.next
        spec = self.options.starting_offsets
        if isinstance(spec, dict) and set(spec) - set(offsets):
            raise OptionError(f"option startingOffsets names partitions that do not exist: "
                              f"{', '.join(sorted(set(spec) - set(offsets)))}")
        log.info("tank source for %s starts at %s", ",".join(self.options.topics or ()), offsets)
        return offsets

    def _plan_end(self, start: Offsets, max_rows: int | None) -> Offsets:
        found = self._discover()
        end: Offsets = {}
        backlog: dict[str, int] = {}
        begin: dict[str, int] = {}
        self._jump = {}
        for key, position in start.items():
            bounds = found.get(key)
            if bounds is None:
                self._vanished(key, position)
                continue
            end[key] = position
            if bounds.next < position:
                self._loss(key, position, bounds.next, "the broker's high-water mark went back below this query's "
                           "position: it lost acknowledged messages")
                end[key] = bounds.next
                continue
            begin[key] = position
            if position < bounds.first:
                # Numbers below the first available one are gone. A loss when this query saw messages at or
                # above its position, or cannot know (a restart); numbers never produced when it saw the
                # partition end below them (a producer choosing its own numbers, ProduceWithSeqnum).
                if self._seen_next.get(key, position + 1) > position:
                    self._loss(key, position, bounds.first, "retention removed numbers this query had not read")
                else:
                    log.info("partition %s: numbers [%d, %d) were never produced", key, position, bounds.first)
                begin[key] = self._jump[key] = bounds.first
            high = bounds.next if self._target is None else min(bounds.next, self._target.setdefault(key, bounds.next))
            backlog[key] = max(0, high - begin[key])
        for key, bounds in found.items():
            if key not in start:
                log.info("partition %s joins the query at its first available number %d", key, bounds.first)
                end[key] = bounds.first
        shares = share_by_backlog(backlog, max_rows) if max_rows else backlog
        for key, count in shares.items():
            end[key] = begin[key] + count
        for key, bounds in found.items():
            self._seen_next[key] = max(self._seen_next.get(key, 0), bounds.next)
        return end

    def _vanished(self, key: str, position: int) -> None:
        message = f"partition {key} vanished at {position} (its topic no longer lists it)"
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{message}. Set failOnDataLoss=false to go on without it")
        log.warning("%s; failOnDataLoss=false: going on without it", message)

    def _loss(self, key: str, position: int, number: int, why: str) -> None:
        message = f"partition {key}: {why} (query at {position}, broker at {number})"
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{message}. Set failOnDataLoss=false to continue from {number}")
        self.data_loss_events.append((key, position, number))
        log.warning("%s; failOnDataLoss=false: continuing from %d", message, number)

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        tasks: list[InputPartition] = []
        for key in sorted(end):
            low, high = start.get(key), end[key]
            if low is None:
                continue
            low = max(low, self._jump.get(key, low))  # the plan moved it past numbers that are gone
            if high <= low:
                continue
            topic, partition = split_key(key)
            tasks.append(SeqRange(self.options.broker, topic, partition, low, high))
        return tasks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        assert isinstance(partition, SeqRange)
        return read_range(partition, self.options)

    def commit(self, end: Offsets) -> None:
        """Nothing to store on the broker: TANK keeps no consumer offsets (the checkpoint is the record)."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        return self._plan_end(start, limit.max_rows if isinstance(limit, ReadMaxRows) else None)

    def reportLatestOffset(self) -> Offsets | None:
        return dict(self._latest) or None

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an AvailableNow run: each partition's high-water mark + 1 now, nothing after."""
        started = time.monotonic()
        self._target = {key: bounds.next for key, bounds in self._discover().items()}
        log.info("AvailableNow run reads up to %s (%.2f s to learn)", self._target, time.monotonic() - started)
