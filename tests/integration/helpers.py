"""Small helpers shared by the integration tests."""

from __future__ import annotations

import time
from pathlib import Path

from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.client.producer import Producer, SendResult
from tubespark.tubemq.wire.message import OutgoingMessage


def produce(master: str, topic: str, messages: list[OutgoingMessage]) -> list[SendResult]:
    """Send ``messages`` with one pipelined producer; return the acknowledgements in order."""
    with Producer(master, ClientSettings(heartbeat_interval_s=2)) as producer:
        producer.publish([topic])
        for message in messages:
            producer.send_async(topic, message)
        return producer.flush()


def bodies(values: list[bytes], **fields) -> list[OutgoingMessage]:
    return [OutgoingMessage(v, **fields) for v in values]


class SharedSession:
    """The test session's SparkSession for ``backfill.main``, which stops its session at the end: not this one."""

    def __init__(self, spark) -> None:
        self._spark = spark

    def __getattr__(self, name: str):
        return getattr(self._spark, name)

    def stop(self) -> None:
        pass


def run_pop_stream(spark, frame, name: str, checkpoint: Path, values: int, columns: str = "value",
                   timeout_s: float = 120.0) -> list:
    """Runs a RocketMQ pop stream into a memory sink until it holds ``values`` distinct values, lets the next
    trigger ack the last batch, stops it, and returns the rows it wrote (``columns`` of them)."""
    query = (frame.writeStream.format("memory").queryName(name).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="500 milliseconds").start())
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            seen = spark.sql(f"select {columns} from {name}").collect()
            if len({r.value for r in seen}) >= values:
                break
            assert query.exception() is None, query.exception()
            time.sleep(0.5)
        time.sleep(2)  # the next trigger's latestOffset acks the last batch
    finally:
        query.stop()
    return seen


def assert_pop_group_drained(namesrv: str, group: str, topic: str) -> None:
    """Every message of ``topic`` was acked by ``group``: the broker's backlog of the pop group is 0 (it commits
    a pop group's offsets asynchronously, so this waits up to 20 s for it)."""
    from tubespark.rocketmq.client.client import RocketMQClient
    from tubespark.rocketmq.client.pop import PopConsumer

    with RocketMQClient([namesrv]) as client:
        consumer = PopConsumer(client, group, topic)
        deadline = time.monotonic() + 20
        while consumer.backlog() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert consumer.backlog() == 0
