"""Topic metadata without joining a consumer group.

TubeMQ clients learn a topic's partitions only from a producer heartbeat (``topicInfos``), so this
opens a short producer session, asks, and closes it. Batch reads and offset planning use it to find
every partition of a topic and the broker that serves it.
"""

from __future__ import annotations

from collections.abc import Iterable

from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.wire.formats import PartitionRef


def topic_partitions(masters: str | list[str], topics: Iterable[str], settings: ClientSettings | None = None, *,
                     timeout_s: float = 60.0) -> dict[str, tuple[PartitionRef, ...]]:
    """``{topic: partitions}``; raises UnknownTopicError for topics with no partition."""
    topics = sorted(set(topics))
    with Producer(masters, settings) as producer:
        producer.publish(topics, timeout_s=timeout_s)
        return {topic: producer.partitions(topic) for topic in topics}
