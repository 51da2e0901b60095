"""The ``rocketmq`` pull stream reader: exact queue ranges planned on the driver.

The driver plans one Spark partition per message queue with new data, offsets
``{"topic:brokerName:queueId": offset}`` in Spark's checkpoint (the source of truth: a restart resumes
there, exactly once with an idempotent sink). It follows the route each trigger: a queue whose broker
does not answer plans nothing this trigger; a group whose master died is read from the acting master the
name server puts in its place, and from the master again when it returns. An offset never moves back:
when the member serving a queue reports a max offset below the query's (an acting slave that had not
replicated everything), the queue waits until the data is there again. On commit the batch's end is
stored as the group's offsets (``group`` + ``commitOffsets``).
"""


from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from tubespark.errors import DataLossError, TubeSparkError
from tubespark.rocketmq.client.client import RocketMQClient, all_queues
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.read_task import PullRange, read_range
from tubespark.rocketmq.wire.route import MessageQueue
from tubespark.spark.offsets import EARLIEST, Offsets, resolve_offset, wanted_offset
from tubespark.spark.planning import share_by_backlog

log = logging.getLogger(__name__)



def _task(mq: MessageQueue, start: int, end: int) -> PullRange:
    return PullRange(mq.topic, mq.broker_name, mq.queue_id, start, end)




class _PullStreamBase(DataSourceStreamReader):
    def __init__(self, options: RocketMQOptions) -> None:
        self.options = options
        self._client: RocketMQClient | None = None
        self._latest: Offsets = {}
        self._target: Offsets | None = None
        self._stored: Offsets = {}
        self.held_back: dict[str, tuple[int, int]] = {}
        """Queues whose serving member reported a max below the query's offset: ``key -> (query, broker)``."""

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    @property
    def client(self) -> RocketMQClient:
        if self._client is None:
            self._client = RocketMQClient(list(self.options.namesrvs), self.options.client_settings())
        return self._client

    def _queues(self) -> list[MessageQueue]:
        return all_queues(self.client, self.options.topics or (), refresh=True)

    def initialOffset(self) -> Offsets:
        opts = self.options
        queues = self._queues()
        bounds = self.client.bounds(queues)
        offsets: Offsets = {}
        for mq in queues:
            low, high = bounds[mq.key]
            wanted = wanted_offset(opts.starting_offsets, mq.key, default=EARLIEST)
            if wanted == "group":
                stored = self.client.consumer_offset(opts.group or "", mq)
                offsets[mq.key] = low if stored is None else max(low, min(stored, high))
            else:
                offsets[mq.key] = resolve_offset(opts.starting_offsets, mq.key, earliest=low, latest=high,
                                                 default=EARLIEST)
        log.info("rocketmq stream of %s starts at %s", ",".join(opts.topics or ()), offsets)
        return offsets

    def _plan(self, start: Offsets, max_rows: int | None) -> Offsets:
        # Spark plans a batch only after the one ending at ``start`` committed: store it now, as commit()
        # is not called for the last batch of a Trigger.AvailableNow run.
        self.commit(start)
        queues = self._queues()
        bounds = self.client.bounds(queues, follow=False)  # a dead broker plans nothing this trigger
        end: Offsets = dict(start)  # every queue stays in the offsets, planned or not
        backlog: dict[str, int] = {}
        for mq in queues:
            if mq.key not in bounds:
                continue
            low, high = bounds[mq.key]
            self._latest[mq.key] = high
            first = start.get(mq.key)
            if first is None:  # a queue added to the topic after the query started: from its beginning
                first = end[mq.key] = low
                log.info("queue %s joined the topic; reading it from offset %d", mq.key, low)
            if high < first:
                self.held_back[mq.key] = (first, high)
                log.warning("queue %s: the broker serving it reports max offset %d, below this query's %d (a slave "
                            "acting for its master may lag); waiting, the offset does not move back", mq.key, high,
                            first)
                continue
            self.held_back.pop(mq.key, None)
            if low > first:
                message = f"queue {mq.key}: offsets [{first}, {low}) are gone (retention)"
                if self.options.fail_on_data_loss:
                    raise DataLossError(f"{message}; set failOnDataLoss=false to skip them")
                log.warning("%s; skipping them", message)
                first = end[mq.key] = low
            if self._target is not None:
                high = min(high, self._target.setdefault(mq.key, high))
            backlog[mq.key] = max(0, high - first)
        shares = share_by_backlog(backlog, max_rows) if max_rows else backlog
        for key, count in shares.items():
            end[key] = end[key] + count
        return end

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        tasks: list[InputPartition] = []
        for key in sorted(end):
            low = start.get(key)
            if low is None or end[key] <= low:
                continue
            tasks.append(_task(MessageQueue.parse_key(key), low, end[key]))
        return tasks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        assert isinstance(partition, PullRange)
        return read_range(partition, self.options)

    def commit(self, end: Offsets) -> None:
        """Store the committed batch's end as the group's offsets (best effort: the checkpoint rules)."""
        group = self.options.group
        if not group or not self.options.commit_offsets:
            return
        for key, offset in sorted(end.items()):
            if self._stored.get(key) == offset:
                continue
            try:
                self.client.commit_offset(group, MessageQueue.parse_key(key), offset)
                self._stored[key] = offset
            except TubeSparkError as exc:
                log.warning("could not store offset %d of %s for group %s: %s", offset, key, group, exc)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class PullStreamReader(_PullStreamBase, SupportsTriggerAvailableNow):
    """Streaming pull reads with admission control (``maxOffsetsPerTrigger``) and Trigger.AvailableNow."""

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        return self._plan(start, limit.max_rows if isinstance(limit, ReadMaxRows) else None)

    def reportLatestOffset(self) -> Offsets | None:
        return dict(self._latest) or None

    def prepareForTriggerAvailableNow(self) -> None:
        queues = self._queues()
        self._target = {key: high for key, (_low, high) in self.client.bounds(queues).items()}
        log.info("AvailableNow run reads up to %s", self._target)


