"""The streaming reader: the driver is a member of the TubeMQ consumer group, executors read ranges.

Who does what (Spark 4.3's Python streaming API runs the reader in a long-lived driver-side process,
and ``read()`` on executors against a pickled copy made at query start):

* driver (``initialOffset``, ``latestOffset``, ``partitions``, ``commit``): joins the group through the
  master, holds the partitions the master assigns on their brokers, plans one :class:`QueueRange` per
  held partition with new data, and on commit stores the batch's end as the group's offset;
* executors (``read``): each task registers its partition under a private read group, reads exactly
  ``[start, end)`` and releases it (see :mod:`tubespark.tubemq.client.ranges`).

Offsets are ``{"brokerId:topic:partitionId": offset}``. Spark's checkpoint is the source of truth; the
group's offsets on the brokers follow it for monitoring and for hand-overs between queries.

Guarantees: exactly-once within one checkpoint (restarts replay the planned ranges exactly). When
the master moves a partition to another query of the same group, that query resumes from the group's
committed offset, which lags one micro-batch (Spark commits a batch when it plans the next), so a
hand-over is at-least-once: the last batch may be read by both queries.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from tubespark.errors import DataLossError, OptionError, TubeSparkError
from tubespark.spark.offsets import EARLIEST, Offsets, wanted_offset
from tubespark.spark.planning import share_by_backlog
from tubespark.spark.shutdown import install_shutdown_hooks
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.group import GroupSession, HeldPartition
from tubespark.tubemq.client.metadata import topic_partitions
from tubespark.tubemq.client.ranges import probe_bounds
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.partition import QueueRange, read_range
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE
from tubespark.tubemq.wire.formats import PartitionRef

try:  # admission control and AvailableNow arrived in PySpark 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - exercised only on PySpark < 4.2
    SupportsTriggerAvailableNow = None

log = logging.getLogger(__name__)

class _TubeStreamReaderBase(DataSourceStreamReader):
    def __init__(self, options: TubeMQOptions) -> None:
        self.options = options
        self.group: str = options.group or ""
        self.read_group = f"{self.group}-tubespark-read"
        self.probe_group = f"{self.group}-tubespark-probe"
        self.run_id = uuid.uuid4().hex[:12]
        self._session: GroupSession | None = None
        self._refs: dict[str, PartitionRef] = {}
        self._latest: Offsets = {}
        self._target: Offsets | None = None
        self._last_end: Offsets | None = None
        self._stored: Offsets = {}
        self._lock = threading.Lock()

    # --- pickling: executors get options only, never sockets or threads -------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "group": self.group, "read_group": self.read_group,
                "probe_group": self.probe_group, "run_id": self.run_id}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]
        self.run_id = state["run_id"]

    # --- group session (driver) -----------------------------------------------------------------

    def _ensure_session(self) -> GroupSession:
        with self._lock:
            if self._session is None:
                opts = self.options
                stream_ids = list(opts.stream_ids)
                topics = opts.topics or ()
                session = GroupSession(opts.masters, self.group, topics, settings=opts.client_settings(),
                                       filters=dict.fromkeys(topics, stream_ids) if stream_ids else None)
                session.start()
                self._session = session
                install_shutdown_hooks(self.stop)  # Spark 4.3 ends this process with SIGTERM, never calling stop()
                session.wait_for_partitions(1, opts.assignment_timeout_ms / 1000)
            return self._session

    def _held(self) -> dict[str, HeldPartition]:
        held = self._ensure_session().held()
        for key, item in held.items():
            self._refs[key] = item.ref
        return held

    # --- offsets --------------------------------------------------------------------------------

    def initialOffset(self) -> Offsets:
        held = self._held()
        spec = self.options.starting_offsets
        offsets: Offsets = {}
        for key, item in sorted(held.items()):
            wanted = wanted_offset(spec, key, default=EARLIEST)
            if wanted == "earliest":
                broker = BrokerClient(f"{self.probe_group}.{self.run_id}", self.options.client_settings())
                try:
                    offsets[key] = probe_bounds(broker, item.ref, self.probe_group).min_offset
                finally:
                    broker.close()
            elif wanted == "latest":
                offsets[key] = item.max_offset
            elif wanted == "group":
                offsets[key] = item.stored_offset
            else:
                if wanted > item.max_offset:
                    raise OptionError(f"startingOffsets for {key} is {wanted}, beyond the partition's max offset "
                                      f"{item.max_offset}")
                offsets[key] = wanted
        if isinstance(spec, dict):
            unknown = sorted(set(spec) - set(held))
            if unknown:
                log.warning("startingOffsets names partitions not assigned to this query: %s", ", ".join(unknown))
        log.info("tubemq source for group %s starts at %s", self.group, offsets)
        return offsets

    def _plan_end(self, start: Offsets, max_rows: int | None) -> Offsets:
        session = self._ensure_session()
        # Spark plans the next batch only after the one ending at ``start`` completed, so ``start`` is
        # committed: store it now rather than wait for commit(), which lags a batch and never comes
        # for the last batch of an AvailableNow run or before an idle period.
        self._store_group_offsets(start)
        end = dict(start)
        backlog: dict[str, int] = {}
        for key, item in sorted(self._held().items()):
            if key not in start:
                # Assigned after the query started: resume where the group left it (its committed offset).
                end[key] = item.stored_offset
                continue
            fresh = session.refresh(item.ref)
            if fresh is None:
                continue
            high = fresh.max_offset
            self._latest[key] = high
            if self._target is not None:
                high = min(high, self._target.get(key, start[key]))
            backlog[key] = max(0, high - start[key]) // INDEX_RECORD_SIZE
        shares = share_by_backlog(backlog, max_rows) if max_rows else backlog
        for key, count in shares.items():
            end[key] = start[key] + count * INDEX_RECORD_SIZE
        self._last_end = end
        return end

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        tasks: list[InputPartition] = []
        missing = [k for k in end if k not in self._refs and end[k] > start.get(k, end[k])]
        if missing:  # a restart replays a batch for partitions we no longer hold: look their brokers up
            topics = {PartitionRef.parse_key(k)[1] for k in missing}
            for parts in topic_partitions(self.options.masters, topics, self.options.client_settings()).values():
                self._refs.update({p.key: p for p in parts})
        for key in sorted(end):
            low, high = start.get(key), end[key]
            if low is None or high <= low:
                continue
            ref = self._refs.get(key)
            if ref is None:
                if self.options.fail_on_data_loss:
                    raise DataLossError(f"partition {key} no longer exists but offsets [{low}, {high}) were "
                                         f"planned; set failOnDataLoss=false to skip it")
                log.warning("partition %s vanished; skipping offsets [%d, %d)", key, low, high)
                continue
            client_id = f"{self.read_group}.{self.run_id}.{ref.broker_id}.{ref.partition_id}.{ref.topic}"
            tasks.append(QueueRange(ref.broker_id, ref.host, ref.port, ref.topic, ref.partition_id, low, high,
                                    self.read_group, client_id))
        return tasks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_range(partition, self.options)

    def commit(self, end: Offsets) -> None:
        """Spark committed a batch ending at ``end``: store it as the group's offsets (commitToGroup)."""
        self._store_group_offsets(end)

    def _store_group_offsets(self, offsets: Offsets) -> None:
        if not self.options.commit_to_group or self._session is None:
            return
        for key, item in self._session.held().items():
            if key in offsets and self._stored.get(key) != offsets[key]:
                try:
                    self._session.commit(item.ref, offsets[key])
                    self._stored[key] = offsets[key]
                except TubeSparkError as exc:
                    log.warning("could not store offset %d for %s in group %s: %s", offsets[key], key, self.group,
                                exc)

    def stop(self) -> None:
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            session.close()


if SupportsTriggerAvailableNow is not None:

    class TubeStreamReader(_TubeStreamReaderBase, SupportsTriggerAvailableNow):
        """Stream reader with admission control (``maxOffsetsPerTrigger``) and Trigger.AvailableNow."""

        def getDefaultReadLimit(self) -> ReadLimit:
            limit = self.options.max_offsets_per_trigger
            return ReadMaxRows(limit) if limit else ReadAllAvailable()

        def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
            return self._plan_end(start, limit.max_rows if isinstance(limit, ReadMaxRows) else None)

        def reportLatestOffset(self) -> Offsets | None:
            return dict(self._latest) or None

        def prepareForTriggerAvailableNow(self) -> None:
            """Fix the end of an AvailableNow run: what is in the partitions now, nothing after."""
            self._target = {key: item.max_offset for key, item in self._held().items()}

else:  # pragma: no cover - PySpark < 4.2: no admission control

    class TubeStreamReader(_TubeStreamReaderBase):  # type: ignore[no-redef]
        """Stream reader for PySpark < 4.2 (``maxOffsetsPerTrigger`` still applies)."""

        def latestOffset(self) -> Offsets:
            start = self._last_end if self._last_end is not None else self.initialOffset()
            return self._plan_end(start, self.options.max_offsets_per_trigger)
