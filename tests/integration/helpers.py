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
