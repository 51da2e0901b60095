"""Topic metadata without joining a consumer group, and the list of topics a master serves.

TubeMQ clients learn a topic's partitions only from a producer heartbeat (``topicInfos``), so this
opens a short producer session, asks, and closes it. Batch reads and offset planning use it to find
every partition of a topic and the broker that serves it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tubespark.errors import UnknownTopicError
from tubespark.tubemq.client.admin import MasterAdmin
from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.errors import AdminApiError
from tubespark.tubemq.wire.errcodes import ErrCode
from tubespark.tubemq.wire.formats import PartitionRef


def topic_partitions(masters: str | Sequence[str], topics: Iterable[str], settings: ClientSettings | None = None, *,
                     timeout_s: float = 60.0, missing_ok: bool = False) -> dict[str, tuple[PartitionRef, ...]]:
    """``{topic: partitions}`` the master lists now (those of brokers that serve); raises UnknownTopicError
    for topics with no partition, unless ``missing_ok`` (then they map to ``()`` after ``timeout_s``), and
    at once, whatever ``missing_ok``, for a topic the master has no deployment of."""
    topics = sorted(set(topics))
    with Producer(masters, settings) as producer:
        try:
            producer.publish(topics, timeout_s=timeout_s)
        except UnknownTopicError as exc:
            if not missing_ok or exc.code == ErrCode.TOPIC_NOT_DEPLOYED:  # the master has no such topic
                raise
        return {topic: producer.partitions(topic) if producer.has_partitions(topic) else () for topic in topics}


def list_topics(web_urls: Iterable[str], *, timeout_s: float = 10.0) -> list[str]:
    """The topics the master serves for subscription, from its web API (no RPC lists topics:
    docs/tubemq/protocol.md, "Listing topics"): deployed, running and open to consumers; the broker's own
    ``__``-prefixed system topics left out. Asks each master in turn, since only the active one answers.
    """
    errors: list[str] = []
    for url in web_urls:
        try:
            answer = MasterAdmin(url, "", timeout=timeout_s)("admin_query_cluster_topic_view")
        except AdminApiError as exc:
            errors.append(str(exc))
            continue
        return sorted(str(item["topicName"]) for item in answer.get("data", ())
                      if item.get("isSrvAcceptSubscribe") and int(item.get("totalRunNumPartCount", 0)) > 0
                      and not str(item["topicName"]).startswith("__"))
    raise AdminApiError("no master web API answered the topic list: " + "; ".join(errors))
