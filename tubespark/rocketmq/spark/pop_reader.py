"""The ``rocketmq`` pop stream reader: executors pop, the broker balances; acks follow Spark's commits."""


from __future__ import annotations

import logging
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit

from tubespark.core.shared_dir import SharedDir
from tubespark.errors import TubeSparkError
from tubespark.rocketmq.client.client import RocketMQClient
from tubespark.rocketmq.client.pop import PopConsumer
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.pop_task import RECEIPTS_OPTION, PopTask, last_attempt_receipts, read_pops
from tubespark.rocketmq.wire.headers import INIT_MODE_MAX, INIT_MODE_MIN

log = logging.getLogger(__name__)

BATCH_KEY = "popBatch"


class PopStreamReader(DataSourceStreamReader):
    """Streaming pop reads: executors pop, the broker balances; acks after Spark commits a batch.

    Offsets are ``{"popBatch": n}``: a new batch is planned when the broker reports messages the group has
    not popped yet (the topic's and the group's retry topics' max offsets above the group's offsets,
    which a pop moves at once). Each batch runs ``popPartitions`` tasks that pop on their own; nobody owns
    a queue, so a slow task strands nothing. A task leaves its receipts in
    ``popReceiptsPath/<run>/<batch>/`` (a local path or a filesystem URI: :mod:`tubespark.core.shared_dir`);
    ``commit`` batch-acks those of every batch up to the committed one and removes them. Messages whose ack
    does not arrive within ``popInvisibleTimeMs`` (a batch that failed or ran long, a driver that died before
    committing) are delivered again: at-least-once.
    """

    def __init__(self, options: RocketMQOptions) -> None:
        self.options = options
        self.run_id = uuid.uuid4().hex[:12]
        base = options.pop_receipts_path or str(Path(tempfile.gettempdir()) / "tubespark-rocketmq-receipts")
        self.receipts_root = f"{base.rstrip('/')}/{self.run_id}"  # base may be a URI: no Path()
        self._client: RocketMQClient | None = None
        self.acked = 0
        self._filter_checked = False
        """Messages acked by this reader so far."""

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "run_id": self.run_id, "receipts_root": self.receipts_root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]
        self.run_id, self.receipts_root = state["run_id"], state["receipts_root"]

    @property
    def client(self) -> RocketMQClient:
        if self._client is None:
            self._client = RocketMQClient(list(self.options.namesrvs), self.options.client_settings())
        return self._client

    def _consumer(self, topic: str) -> PopConsumer:
        init_mode = INIT_MODE_MAX if self.options.starting_offsets == "latest" else INIT_MODE_MIN
        return PopConsumer(self.client, self.options.group or "", topic, init_mode=init_mode)

    def initialOffset(self) -> dict[str, int]:
        return {BATCH_KEY: 0}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        """One more batch when the group has messages to pop (``limit`` does not apply: tasks bound a batch).

        Spark plans a batch only after the one ending at ``start`` was committed, and calls ``commit`` only
        when it constructs a new batch: ack everything up to ``start`` here, or the last batch before an
        idle period would wait for its ack until its messages reappear.
        """
        self.commit(start)
        if not self._filter_checked:  # the brokers take subExpression, before the first batch is planned
            for topic in self.options.topics or ():
                self.client.check_filter(topic, self.options.group or "", self.options.filter)
            self._filter_checked = True
        current = start.get(BATCH_KEY, 0)
        waiting = 0
        for topic in self.options.topics or ():
            try:
                waiting += self._consumer(topic).backlog()
            except TubeSparkError as exc:
                log.info("pop backlog of %s unknown this trigger: %s", topic, exc)
        return {BATCH_KEY: current + 1} if waiting > 0 else {BATCH_KEY: current}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        batch = end.get(BATCH_KEY, 0)
        if batch <= start.get(BATCH_KEY, 0):
            return []
        directory = f"{self.receipts_root}/batch-{batch:09d}"
        return [PopTask(batch, i, directory) for i in range(self.options.pop_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PopTask)
        return read_pops(partition, self.options)

    def commit(self, end: dict[str, int]) -> None:
        """Ack the receipts of every batch up to ``end`` (Spark committed them), then drop their files."""
        root = SharedDir(self.receipts_root, RECEIPTS_OPTION)
        upto = end.get(BATCH_KEY, 0)
        try:
            batches = root.names("batch-*")
        except TubeSparkError as exc:  # the next commit covers these batches too
            log.warning("cannot list the pop receipts in %r; acks wait for the next commit: %s", root, exc)
            return
        for name in batches:
            if int(name.split("-")[1]) > upto:
                continue
            directory = root.child(name)
            try:
                for topic, receipts in sorted(last_attempt_receipts(directory).items()):
                    try:
                        self.acked += self._consumer(topic).ack(receipts)
                    except TubeSparkError as exc:
                        log.warning("acks of %s in %s failed; those messages are delivered again after their "
                                    "invisible time: %s", topic, name, exc)
                directory.remove()
            except TubeSparkError as exc:  # a shared-directory failure: the next commit tries again
                log.warning("pop receipts of %s: %s", name, exc)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

