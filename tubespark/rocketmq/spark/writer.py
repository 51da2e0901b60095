"""The RocketMQ sink: ``df.write.format("rocketmq")`` and ``df.writeStream.format("rocketmq")``.

Columns: ``value`` (binary or string, required), ``topic`` (unless the ``topic`` option is set; the option
wins), ``tags``, ``keys`` (space-separated message keys), ``properties`` (map<string,string>) and
``partitionKey`` (rows with the same key go to the same queue; otherwise whole batches go round robin).

Rows are gathered per queue into batch sends (``batchMaxMessages`` / ``batchMaxBytes``) with up to
``maxInFlight`` requests awaiting acknowledgement; a task returns only after every batch was
acknowledged and fails (after ``sendRetries`` re-sends following the route) otherwise. At-least-once: a
retried task sends its rows again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial

import pyarrow as pa
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from tubespark.core.outage import ride_out
from tubespark.errors import BrokerConnectionError, OptionError, TubeSparkError
from tubespark.rocketmq.client.producer import BatchProducer
from tubespark.rocketmq.spark.clients import shared_client
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.wire.headers import cluster_info_request
from tubespark.rocketmq.wire.message import KEYS, TAGS
from tubespark.spark.arrow import column_values
from tubespark.spark.writers import (
    SentCommitMessage,
    StampedBatchWriter,
    StampedStreamWriter,
    check_sink_columns,
    task_index,
)

log = logging.getLogger(__name__)

_ALLOWED = {
    "value": (BinaryType, StringType),
    "topic": (StringType,),
    "tags": (StringType,),
    "keys": (StringType,),
    "properties": (MapType,),
    "partitionKey": (StringType,),
}


def check_sink_schema(schema: StructType, options: RocketMQOptions) -> None:
    """Fail the write on the driver, before any task runs, if the columns cannot be sent."""
    check_sink_columns(schema, _ALLOWED, broker="RocketMQ", topic_option=bool(options.topics))


def send_batches(batches: Iterator[pa.RecordBatch], options: RocketMQOptions) -> SentCommitMessage:
    """Send every row; return after all are acknowledged."""
    producer = BatchProducer(shared_client(options), group=options.producer_group,
                             max_in_flight=options.max_in_flight, batch_messages=options.batch_max_messages,
                             batch_bytes=options.batch_max_bytes, retries=options.send_retries,
                             outage_s=options.outage_timeout_ms / 1000, auto_create=options.auto_create_topic)
    fixed_topic = options.topics[0] if options.topics else None
    routed: set[str] = set()
    rows = 0
    try:
        for batch in batches:
            values, topics = column_values(batch, "value"), column_values(batch, "topic")
            tags, keys = column_values(batch, "tags"), column_values(batch, "keys")
            properties, routes = column_values(batch, "properties"), column_values(batch, "partitionKey")
            for i, value in enumerate(values or ()):
                topic = fixed_topic or (topics[i] if topics else None)
                if not topic:
                    raise OptionError(f"row {rows} has no topic (null 'topic' column and no 'topic' option): set the "
                                      f"topic option or fill the topic column")
                if topic not in routed:  # its brokers may be restarting: wait for the route like the sends do
                    ride_out(partial(producer.queues, topic), outage_s=options.outage_timeout_ms / 1000,
                             what=f"route of RocketMQ topic {topic}")
                    routed.add(topic)
                props = dict(properties[i] or ()) if properties else {}
                if tags and tags[i]:
                    props[TAGS] = tags[i]
                if keys and keys[i]:
                    props[KEYS] = keys[i]
                data = value.encode() if isinstance(value, str) else (value or b"")
                producer.add(topic, data, props, key=routes[i] if routes else None)
                rows += 1
        producer.flush()
    except BaseException:
        producer.abandon()
        raise
    return SentCommitMessage(task_index(), rows, producer.sent_bytes)


def check_name_server(options: RocketMQOptions) -> None:
    """On the driver: some name server of ``namesrv`` answers (its cluster info). What the driver saw answer goes
    to the tasks (:class:`~tubespark.spark.writers.StampedWriter`), so a task that starts while the name server
    is down waits for it; a ``namesrv`` that never answered fails here within seconds (:mod:`tubespark.core.outage`)."""
    client = shared_client(options)
    last: TubeSparkError | None = None
    for address in client.namesrv:
        try:
            client.call_address(address, cluster_info_request(), "cluster info")
            return
        except BrokerConnectionError as exc:
            last = exc
    if last is not None:
        raise last


class RocketMQBatchWriter(StampedBatchWriter):
    broker = "RocketMQ"

    def check_reachable(self) -> None:
        check_name_server(self.options)

    def send(self, batches: Iterator[pa.RecordBatch], stamp: str) -> SentCommitMessage:
        return send_batches(batches, self.options)


class RocketMQStreamWriter(StampedStreamWriter):
    broker = "RocketMQ"

    def check_reachable(self) -> None:
        check_name_server(self.options)

    def send(self, batches: Iterator[pa.RecordBatch], stamp: str) -> SentCommitMessage:
        return send_batches(batches, self.options)
