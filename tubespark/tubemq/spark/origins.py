"""Where a TubeMQ topic's deployment on a broker came from: the ``#origin`` marks of its partitions' offsets.

A checkpoint from another cluster, or from before the topic was deleted and re-created, looks to the offsets
exactly like a broker that lost acknowledged messages (:mod:`tubespark.spark.origins`). The master's web API
tells each deployment's ``createDate``, which tells them apart.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from tubespark.spark.origins import Origin
from tubespark.tubemq.client.placement import configured_partitions
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.formats import PartitionRef

ORIGIN_TIMEOUT_S = 5.0
"""Longest wait for the master's web API when learning topics' origins without ``masterWebUrl`` set (port 8080
of the master hosts is a guess there: a firewall that drops it must not hold a query's first batch long)."""


class TopicOrigins:
    """The :class:`~tubespark.spark.origins.OriginSource` of a TubeMQ stream: a scope is a topic's deployment on
    one broker (``brokerId:topic``)."""

    advice = ("Set masterWebUrl (the masters' web API, port 8080 by default) so the offsets record each "
              "topic deployment's creation time and a checkpoint from another cluster or topic incarnation "
              "fails with ForeignCheckpointError instead; to tell now, compare the topic's createDate in "
              "the master's admin_query_topic_deploy_info with when this checkpoint was written")

    def __init__(self, options: TubeMQOptions) -> None:
        self.options = options

    def scope(self, key: str) -> str | None:
        """A topic's deployment on one broker (``brokerId:topic``): the master creates and deletes it as one."""
        broker_id, topic, _partition = PartitionRef.parse_key(key)
        return f"{broker_id}:{topic}"

    def ask(self, scopes: Collection[str]) -> Mapping[str, Origin]:
        """Each deployment's ``createDate`` at the master (its web API, one call): a cluster started anew, or
        a topic deleted and re-created, has other ones. Raises :class:`AdminApiError` when no web API answers."""
        topics = {scope.split(":", 1)[1] for scope in scopes}
        timeout_s = self.options.request_timeout_ms / 1000
        if not self.options.master_web_urls:
            timeout_s = min(timeout_s, ORIGIN_TIMEOUT_S)
        placement = configured_partitions(self.options.web_urls(), topics, timeout_s=timeout_s)
        out: dict[str, Origin] = {}
        for deploy in placement.deployments:
            scope, mark = f"{deploy.broker_id}:{deploy.topic}", deploy.created_mark
            if deploy.configured and mark is not None and scope in scopes:
                out[scope] = Origin(mark, self.describe(mark))
        return out

    def name(self, scope: str) -> str:
        broker_id, topic = scope.split(":", 1)
        return f"topic {topic} on broker {broker_id}"

    def describe(self, mark: int) -> str:
        """``20261125074442`` -> ``2026-11-25 07:44:42 (the master's clock)``."""
        t = f"{mark:014d}"
        return f"{t[:4]}-{t[4:6]}-{t[6:8]} {t[8:10]}:{t[10:12]}:{t[12:]} (the master's clock)"
