"""What an executor does for one pop task: pop a round of messages and leave their receipts for the driver."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import InputPartition

from tubespark.core.shared_dir import SharedDir
from tubespark.rocketmq.client.keeper import Keeper
from tubespark.rocketmq.client.pop import PopConsumer, Popped, pop_until
from tubespark.rocketmq.spark.clients import shared_client
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.schema import read_schema, to_record_batch
from tubespark.rocketmq.wire.headers import INIT_MODE_MAX, INIT_MODE_MIN
from tubespark.spark.arrow import arrow_schema_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PopTask(InputPartition):
    """One task of a pop micro-batch: pop up to the limit and leave the receipts under ``receipts_dir`` (a path
    or URI below ``popReceiptsPath``: :class:`~tubespark.core.shared_dir.SharedDir`)."""

    batch: int
    index: int
    receipts_dir: str


RECEIPTS_OPTION = "popReceiptsPath"


def receipt_name(index: int, task_attempt_id: int) -> str:
    """Named by Spark's task attempt id, which grows with every attempt the application starts, so sorting
    puts a task's latest attempt last, also across a stage Spark runs again (whose attempt numbers start
    from 0 again)."""
    return f"part-{index:05d}-attempt-{task_attempt_id:020d}.json"


def read_pops(task: PopTask, options: RocketMQOptions, *, ack: bool = False) -> Iterator[pa.RecordBatch]:
    """Executor side: pop, yield rows with their receipts, then record the receipts for the driver's ack (or,
    with ``ack``, a batch read's, ack them here).

    While the task holds popped messages a :class:`~tubespark.rocketmq.client.keeper.Keeper` extends their
    invisible time, so a task slower than ``popInvisibleTimeMs`` does not see them delivered again; the
    receipts recorded (or acked) are the newest, as a change voids the old ones. The ``receiptHandle``
    column keeps the receipt of the pop.

    The receipt file is written only after Spark took every row of the task, and per attempt: the driver
    acks the last attempt of each task only, so rows of a failed attempt are never acked (they reappear).
    "Last" is the one whose rows Spark kept as long as no two attempts of a task run at once, which is
    why speculative execution (``spark.speculation``, off by default) must stay off for pop reads.
    """
    assert options.topics and options.group
    schema = arrow_schema_for(read_schema(options.include_properties, pop=True))
    client = shared_client(options)
    init_mode = INIT_MODE_MAX if options.starting_offsets == "latest" else INIT_MODE_MIN
    per_topic = max(1, options.pop_max_messages // len(options.topics))
    consumers = {topic: PopConsumer(client, options.group, topic, invisible_ms=options.pop_invisible_time_ms,
                                    poll_ms=options.pop_poll_ms, init_mode=init_mode,
                                    verify_crc=options.verify_checksums, flt=options.filter)
                 for topic in options.topics}
    keeper = Keeper(consumers, options.pop_invisible_time_ms).start()
    def holder(topic: str) -> Callable[[list[Popped]], None]:
        return lambda got: keeper.hold(topic, [item.receipt for item in got])

    try:
        for topic, consumer in consumers.items():
            popped = pop_until(consumer, per_topic, deadline_s=options.pop_invisible_time_ms / 1000 / 2,
                               on_pop=holder(topic))
            by_broker: dict[str, list[Popped]] = {}
            for item in popped:
                by_broker.setdefault(item.broker_name, []).append(item)
            for broker, items in sorted(by_broker.items()):
                yield to_record_batch([i.message for i in items], broker_name=broker, schema=schema,
                                      receipts=[i.receipt for i in items])
    finally:
        held = keeper.release()  # a task that failed or was abandoned leaves its messages to reappear
    count = sum(len(r) for r in held.values())
    if ack:
        for topic, receipts in sorted(held.items()):
            if receipts:
                consumers[topic].ack(receipts)
        log.info("pop task %d (batch read): %d messages acked, %d invisible-time extensions", task.index, count,
                 keeper.renewed)
        return
    context = TaskContext.get()
    name = receipt_name(task.index, context.taskAttemptId() if context else 0)
    target = SharedDir(task.receipts_dir, RECEIPTS_OPTION)
    records = [{"topic": topic, "receipt": r} for topic, receipts in held.items() for r in receipts]
    target.publish(name, json.dumps(records).encode())  # atomic: the driver never reads half a file
    log.info("pop task %d of batch %d: %d messages (%d invisible-time extensions); receipts in %r/%s", task.index,
             task.batch, count, keeper.renewed, target, name)


def last_attempts(receipts_dir: SharedDir) -> list[str]:
    """The receipt files of the last attempt of every task of one batch."""
    last: dict[str, str] = {}
    for name in receipts_dir.names("part-*-attempt-*.json"):
        last[name.split("-attempt-")[0]] = name  # sorted: the highest attempt wins
    return sorted(last.values())


def read_receipts(receipts_dir: SharedDir, name: str) -> list[tuple[str, str]]:
    """``[(topic, receipt)...]`` of one receipt file."""
    return [(item["topic"], item["receipt"]) for item in json.loads(receipts_dir.read(name))]


def write_receipts(receipts_dir: SharedDir, name: str, receipts: list[tuple[str, str]]) -> None:
    receipts_dir.publish(name, json.dumps([{"topic": t, "receipt": r} for t, r in receipts]).encode())


def last_attempt_receipts(receipts_dir: SharedDir) -> dict[str, list[str]]:
    """``{topic: [receipt...]}`` of the last attempt of every task of one batch."""
    out: dict[str, list[str]] = {}
    for name in last_attempts(receipts_dir):
        for topic, receipt in read_receipts(receipts_dir, name):
            out.setdefault(topic, []).append(receipt)
    return out
