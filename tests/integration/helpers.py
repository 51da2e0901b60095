"""Small helpers shared by the integration tests."""

from __future__ import annotations

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
