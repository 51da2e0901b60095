"""The ``rocketmq`` pop stream reader: executors pop, the broker balances; acks follow Spark's commits."""


from __future__ import annotations

import logging
import tempfile
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from tubespark.core.shared_dir import SharedDir
from tubespark.errors import TubeSparkError
from tubespark.rocketmq.client.client import RocketMQClient
from tubespark.rocketmq.client.keeper import due, look_interval_s, now_ms, renew_due
from tubespark.rocketmq.client.pop import PopConsumer
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.pop_task import (
    RECEIPTS_OPTION,
    PopTask,
    last_attempt_receipts,
    last_attempts,
    read_pops,
    read_receipts,
    write_receipts,
)
from tubespark.rocketmq.wire.headers import INIT_MODE_MAX, INIT_MODE_MIN

log = logging.getLogger(__name__)

BATCH_KEY = "popBatch"
RUN_KEY = "popRun"
"""Offsets are ``{"popBatch": n, "popRun": id}``: the run id names the receipts directory, so a driver
restarted on the checkpoint finds (and acks) the receipts its predecessor left. Checkpoints written before
the run id was kept have none; such a query gets a new one."""


def _run_of(offset: Mapping[str, Any]) -> str | None:
    run = offset.get(RUN_KEY)
    return run if isinstance(run, str) and run.isalnum() else None


class PopStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming pop reads: executors pop, the broker balances; acks after Spark commits a batch.

    Offsets are ``{"popBatch": n, "popRun": id}``: a new batch is planned when the broker reports messages
    the group has not popped yet (the topic's and the group's retry topics' max offsets above the group's
    offsets, which a pop moves at once). Each batch runs ``popPartitions`` tasks that pop on their own;
    nobody owns a queue, so a slow task strands nothing. A task leaves its receipts in
    ``popReceiptsPath/<run>/batch-<n>/`` (a local path or a filesystem URI: :mod:`tubespark.core.shared_dir`);
    ``commit`` batch-acks those of every batch up to the committed one and removes them.

    While receipts wait there for the commit, a :class:`~tubespark.rocketmq.client.keeper.Keeper`-style
    thread of the driver extends their invisible time and rewrites them (a change voids the old receipt), so
    a batch longer than ``popInvisibleTimeMs`` is not delivered again while it runs. Messages whose ack does
    not arrive (a failed task attempt, a driver that died and was not restarted before their invisible time
    ran out) are delivered again: at-least-once.

    ``Trigger.AvailableNow``: :meth:`prepareForTriggerAvailableNow` takes each queue's max offset (topic and
    retry topics); batches are planned until the group's offsets reached them, so the run ends once what
    was there at its start was popped (messages that arrived meanwhile may come along in those batches).
    """

    def __init__(self, options: RocketMQOptions) -> None:
        self.options = options
        self.run_id = uuid.uuid4().hex[:12]
        self.receipts_base = (options.pop_receipts_path
                              or str(Path(tempfile.gettempdir()) / "tubespark-rocketmq-receipts")).rstrip("/")
        self._client: RocketMQClient | None = None
        self.acked = 0
        """Messages acked by this reader so far."""
        self.renewed = 0
        """Invisible-time extensions of waiting receipts by this reader so far."""
        self._filter_checked = False
        self._target: dict[str, dict[str, int]] | None = None  # Trigger.AvailableNow: topic -> queue -> offset
        self._planned: set[int] = set()
        self._lock = threading.RLock()  # commit, planning and the keeper thread touch the receipts
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None

    @property
    def receipts_root(self) -> str:
        return f"{self.receipts_base}/{self.run_id}"  # the base may be a URI: no Path()

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "run_id": self.run_id}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]
        self.run_id = state["run_id"]

    @property
    def client(self) -> RocketMQClient:
        with self._lock:  # Spark's calls and the keeper thread: one client
            if self._client is None:
                self._client = RocketMQClient(list(self.options.namesrvs), self.options.client_settings())
            return self._client

    def _consumer(self, topic: str) -> PopConsumer:
        init_mode = INIT_MODE_MAX if self.options.starting_offsets == "latest" else INIT_MODE_MIN
        return PopConsumer(self.client, self.options.group or "", topic, init_mode=init_mode)

    def _adopt(self, offset: Mapping[str, Any]) -> None:
        """Take the run id of a checkpointed offset (a restarted driver continues its predecessor's receipts
        directory) and keep the receipts there hidden from now on."""
        run = _run_of(offset)
        with self._lock:
            if run is not None:
                self.run_id = run
            if self._keeper is None:
                self._keeper = threading.Thread(target=self._keep, name="tubespark-pop-receipts-keeper",
                                                daemon=True)
                self._keeper.start()

    def _offset(self, batch: int) -> dict[str, Any]:
        return {BATCH_KEY: batch, RUN_KEY: self.run_id}

    def initialOffset(self) -> dict[str, Any]:
        return self._offset(0)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix what this run reads: each queue's max offset now (topic and the group's retry topics)."""
        self._target = {}
        for topic in self.options.topics or ():
            self._target[topic] = {key: high for key, (high, _) in self._consumer(topic).positions().items()}
        log.info("pop Trigger.AvailableNow of %s: reads up to %s", self.options.group, self._target)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """One more batch when the group has messages to pop (``limit`` does not apply: tasks bound a batch).

        Spark plans a batch only after the one ending at ``start`` was committed, and calls ``commit`` only
        when it constructs a new batch: ack everything up to ``start`` here, or the last batch before an
        idle period would wait for its ack until its messages reappear. A restarted driver acks here what
        its predecessor committed but did not ack.
        """
        self._adopt(start)
        self.commit(start)
        if not self._filter_checked:  # the brokers take subExpression, before the first batch is planned
            for topic in self.options.topics or ():
                self.client.check_filter(topic, self.options.group or "", self.options.filter)
            self._filter_checked = True
        current = int(start.get(BATCH_KEY, 0))
        waiting = 0
        for topic in self.options.topics or ():
            try:
                target = None if self._target is None else self._target.get(topic, {})
                waiting += self._consumer(topic).backlog(target)
            except TubeSparkError as exc:
                log.info("pop backlog of %s unknown this trigger: %s", topic, exc)
        return self._offset(current + 1 if waiting > 0 else current)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        self._adopt(end)
        batch = int(end.get(BATCH_KEY, 0))
        if batch <= int(start.get(BATCH_KEY, 0)):
            return []
        directory = f"{self.receipts_root}/batch-{batch:09d}"
        with self._lock:
            if batch not in self._planned:  # planned again after a restart: the old attempts' rows were not
                # committed, and their attempt ids (counted anew by each application) would mix with the new
                # ones; dropping them lets those messages reappear after their invisible time
                SharedDir(directory, RECEIPTS_OPTION).remove()
                self._planned.add(batch)
        return [PopTask(batch, i, directory) for i in range(self.options.pop_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PopTask)
        return read_pops(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        """Ack the receipts of every batch up to ``end`` (Spark committed them), then drop their files."""
        self._adopt(end)
        with self._lock:
            self._commit(int(end.get(BATCH_KEY, 0)))

    def _batches(self) -> list[tuple[int, SharedDir]]:
        root = SharedDir(self.receipts_root, RECEIPTS_OPTION)
        return [(int(name.split("-")[1]), root.child(name)) for name in root.names("batch-*")]

    def _commit(self, upto: int) -> None:
        try:
            batches = self._batches()
        except TubeSparkError as exc:  # the next commit covers these batches too
            log.warning("cannot list the pop receipts in %s; acks wait for the next commit: %s",
                        self.receipts_root, exc)
            return
        for batch, directory in batches:
            if batch > upto:
                continue
            try:
                for topic, receipts in sorted(last_attempt_receipts(directory).items()):
                    try:
                        self.acked += self._consumer(topic).ack(receipts)
                    except TubeSparkError as exc:
                        log.warning("acks of %s in batch %d failed; those messages are delivered again after "
                                    "their invisible time: %s", topic, batch, exc)
                directory.remove()
            except TubeSparkError as exc:  # a shared-directory failure: the next commit tries again
                log.warning("pop receipts of batch %d: %s", batch, exc)

    def _keep(self) -> None:
        """The driver's keeper: extend the invisible time of receipts waiting for their batch's commit."""
        while not self._stop.wait(look_interval_s(self.options.pop_invisible_time_ms)):
            try:
                with self._lock:
                    self._renew_waiting()
            except TubeSparkError as exc:
                log.warning("extending the invisible time of waiting pop receipts failed this time: %s", exc)

    def _renew_waiting(self) -> None:
        invisible_ms = self.options.pop_invisible_time_ms
        for _, directory in self._batches():
            for name in last_attempts(directory):
                records = read_receipts(directory, name)
                at = now_ms()
                if not any(due(receipt, invisible_ms, at) for _, receipt in records):
                    continue
                by_topic: dict[str, list[int]] = {}
                for i, (topic, _) in enumerate(records):
                    by_topic.setdefault(topic, []).append(i)
                renewed_records = list(records)
                for topic, indexes in by_topic.items():
                    fresh, count = renew_due(self._consumer(topic), [records[i][1] for i in indexes], invisible_ms,
                                             at)
                    for i, receipt in zip(indexes, fresh, strict=True):
                        renewed_records[i] = (topic, receipt)
                    self.renewed += count
                write_receipts(directory, name, renewed_records)

    def stop(self) -> None:
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join()
        if self._client is not None:
            self._client.close()
            self._client = None
