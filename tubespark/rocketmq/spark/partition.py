"""The read schema, and what executors do for one Spark task: an exact pull range, or a round of pops.

Rows (Kafka-connector style, bytes in): ``value``, ``topic``, ``brokerName``, ``queueId``, ``queueOffset``,
``queueKey`` (``topic:brokerName:queueId``, the offsets' key), ``msgId`` (the producer's ``UNIQ_KEY``),
``tags``, ``keys``, ``bornTimestamp``, ``storeTimestamp``, ``reconsumeTimes``; with ``includeProperties``
a ``properties`` map; in pop mode ``receiptHandle``.

Executors keep one :class:`RocketMQClient` per name-server set and settings (Python workers are reused
across tasks), so connections outlive a task.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tubespark.rocketmq.client.client import RocketMQClient
from tubespark.rocketmq.client.pop import PopConsumer, Popped, pop_until
from tubespark.rocketmq.client.ranges import RangeReader
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.wire.headers import INIT_MODE_MAX, INIT_MODE_MIN
from tubespark.rocketmq.wire.message import KEYS, TAGS, UNIQ_KEY, StoredMessage
from tubespark.rocketmq.wire.route import MessageQueue
from tubespark.spark.arrow import arrow_schema_for

log = logging.getLogger(__name__)

READ_GROUP = "tubespark_read"
"""The group pulls name when the user gave none (a pull needs one; reading commits nothing for it)."""


def read_schema(include_properties: bool, pop: bool = False) -> StructType:
    fields = [
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("brokerName", StringType()),
        StructField("queueId", IntegerType()),
        StructField("queueOffset", LongType()),
        StructField("queueKey", StringType()),
        StructField("msgId", StringType()),
        StructField("tags", StringType()),
        StructField("keys", StringType()),
        StructField("bornTimestamp", TimestampType()),
        StructField("storeTimestamp", TimestampType()),
        StructField("reconsumeTimes", IntegerType()),
    ]
    if include_properties:
        fields.append(StructField("properties", MapType(StringType(), StringType())))
    if pop:
        fields.append(StructField("receiptHandle", StringType()))
    return StructType(fields)


def to_record_batch(messages: Sequence[StoredMessage], *, broker_name: str, schema: pa.Schema,
                    receipts: Sequence[str] | None = None) -> pa.RecordBatch:
    """One Arrow batch, column by column (per-row Python work is what limits a Python source)."""
    n = len(messages)
    topics = [m.topic for m in messages]
    queue_ids = [m.queue_id for m in messages]
    props = [m.properties for m in messages]
    arrays = [
        pa.array([m.body for m in messages], pa.binary()),
        pa.array(topics, pa.string()),
        pa.repeat(pa.scalar(broker_name, pa.string()), n),
        pa.array(queue_ids, pa.int32()),
        pa.array([m.queue_offset for m in messages], pa.int64()),
        pa.array([f"{t}:{broker_name}:{q}" for t, q in zip(topics, queue_ids, strict=True)], pa.string()),
        pa.array([p.get(UNIQ_KEY) for p in props], pa.string()),
        pa.array([p.get(TAGS) for p in props], pa.string()),
        pa.array([p.get(KEYS) for p in props], pa.string()),
        pa.array([m.born_ms * 1000 for m in messages], schema.field("bornTimestamp").type),
        pa.array([m.store_ms * 1000 for m in messages], schema.field("storeTimestamp").type),
        pa.array([m.reconsume_times for m in messages], pa.int32()),
    ]
    if schema.get_field_index("properties") >= 0:
        arrays.append(pa.array([list(p.items()) for p in props], schema.field("properties").type))
    if receipts is not None:
        arrays.append(pa.array(list(receipts), pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_clients: dict[tuple, RocketMQClient] = {}


def shared_client(options: RocketMQOptions) -> RocketMQClient:
    """One client per executor process and cluster (workers are reused across tasks)."""
    settings = options.client_settings()
    key = (options.namesrvs, settings)
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = RocketMQClient(list(options.namesrvs), settings)
    return client


# --- pull ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PullRange(InputPartition):
    """Read ``[start, end)`` of one queue. Small and picklable."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int

    @property
    def mq(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


def read_range(task: PullRange, options: RocketMQOptions) -> Iterator[pa.RecordBatch]:
    """Executor side: every message of the task's range, in order, one Arrow batch per pull."""
    schema = arrow_schema_for(read_schema(options.include_properties))
    reader = RangeReader(shared_client(options), options.group or READ_GROUP,
                         fail_on_data_loss=options.fail_on_data_loss, verify_crc=options.verify_checksums,
                         retry_s=options.failover_timeout_ms / 1000)
    for messages in reader.read(task.mq, task.start, task.end):
        yield to_record_batch(messages, broker_name=task.broker_name, schema=schema)


# --- pop ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PopTask(InputPartition):
    """One task of a pop micro-batch: pop up to the limit and leave the receipts under ``receipts_dir``."""

    batch: int
    index: int
    receipts_dir: str


def receipt_file(receipts_dir: str, index: int, task_attempt_id: int) -> Path:
    """Named by Spark's task attempt id, which grows with every attempt the application starts, so sorting
    puts a task's latest attempt last, also across a stage Spark runs again (whose attempt numbers start
    from 0 again)."""
    return Path(receipts_dir) / f"part-{index:05d}-attempt-{task_attempt_id:020d}.json"


def read_pops(task: PopTask, options: RocketMQOptions) -> Iterator[pa.RecordBatch]:
    """Executor side: pop, yield rows with their receipts, then record the receipts for the driver's ack.

    The receipt file is written only after Spark took every row of the task, and per attempt: the driver
    acks the last attempt of each task only, so rows of a failed attempt are never acked (they reappear).
    "Last" is the one whose rows Spark kept as long as no two attempts of a task run at once, which is
    why speculative execution (``spark.speculation``, off by default) must stay off for pop reads.
    """
    assert options.topics and options.group
    schema = arrow_schema_for(read_schema(options.include_properties, pop=True))
    client = shared_client(options)
    init_mode = INIT_MODE_MAX if options.starting_offsets == "latest" else INIT_MODE_MIN
    receipts: list[dict[str, str]] = []
    per_topic = max(1, options.pop_max_messages // len(options.topics))
    for topic in options.topics:
        consumer = PopConsumer(client, options.group, topic, invisible_ms=options.pop_invisible_time_ms,
                               poll_ms=options.pop_poll_ms, init_mode=init_mode,
                               verify_crc=options.verify_checksums)
        popped = pop_until(consumer, per_topic, deadline_s=options.pop_invisible_time_ms / 1000 / 2)
        by_broker: dict[str, list[Popped]] = {}
        for item in popped:
            by_broker.setdefault(item.broker_name, []).append(item)
        for broker, items in sorted(by_broker.items()):
            receipts.extend({"topic": topic, "receipt": item.receipt} for item in items)
            yield to_record_batch([i.message for i in items], broker_name=broker, schema=schema,
                                  receipts=[i.receipt for i in items])
    context = TaskContext.get()
    target = receipt_file(task.receipts_dir, task.index, context.taskAttemptId() if context else 0)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".receipts-", dir=target.parent)
    with os.fdopen(fd, "w") as out:
        json.dump(receipts, out)
    os.replace(tmp, target)
    log.info("pop task %d of batch %d: %d messages; receipts in %s", task.index, task.batch, len(receipts), target)


def last_attempt_receipts(receipts_dir: Path) -> dict[str, list[str]]:
    """``{topic: [receipt...]}`` of the last attempt of every task of one batch."""
    last: dict[str, Path] = {}
    for file in sorted(receipts_dir.glob("part-*-attempt-*.json")):
        last[file.name.split("-attempt-")[0]] = file  # sorted: the highest attempt wins
    out: dict[str, list[str]] = {}
    for file in last.values():
        for item in json.loads(file.read_text()):
            out.setdefault(item["topic"], []).append(item["receipt"])
    return out
