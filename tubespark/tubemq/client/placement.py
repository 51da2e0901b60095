"""Which partitions the master's configuration holds, and which of them a broker serves now.

The RPC views a producer and a server-balance consumer get (a producer's ``topicInfos``, a consumer group's
assignment) list only the partitions of brokers that are registered and serving: a broker that crashed, was
stopped, or whose heartbeat timed out takes its partitions out of them, exactly as a topic removed from the
configuration would. Only the master's configuration tells the two apart. The client-balance partition
metadata shows it over RPC (:mod:`tubespark.tubemq.client.configured`: every deployment, served or not,
but not why); the web API shows it with the reasons (``docs/tubemq/brokers.md``, "Configured and served
partitions"): ``admin_query_topic_deploy_info``
lists, per topic, every broker the topic is deployed on with its ``numPartitions`` x
``numTopicStores`` and its ``topicStatusId``, plus a ``runInfo`` block that holds ``"-"`` while that
broker has no running registration at the master.

:func:`configured_partitions` reads it once. A partition is *configured* while a deployment record in
status 0 (normal) names it, whatever its broker does; it is *served* when its broker also runs with the
topic open for subscription. Configured but not served: its broker is down, stopped, stalled past the
heartbeat timeout, offline, or the topic is closed there; its data is still there. Not configured: the
topic or that broker's deployment was deleted (``admin_delete_topic_deploy_info`` and after).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tubespark.tubemq.client.admin import MasterAdmin
from tubespark.tubemq.errors import AdminApiError
from tubespark.tubemq.wire.constants import PARTITION_STORE_BASE
from tubespark.tubemq.wire.formats import PartitionRef

TOPIC_STATUS_NORMAL = 0
"""``topicStatusId`` of a deployment in use; 1 (soft-deleted) and later states no longer serve the topic."""

_NOT_RUNNING = "-"  # what a runInfo field holds while the broker has no running registration


@dataclass(frozen=True)
class Deployment:
    """One topic's deployment record on one broker, and what the master says of that broker now."""

    topic: str
    broker_id: int
    broker_address: str
    num_partitions: int
    num_stores: int
    status_id: int
    running: bool  # the broker holds a running registration at the master (runInfo is not "-")
    accept_subscribe: bool  # ... and the topic is open to consumers there now
    manage_status: str  # the broker record's manage status (online, offline, ...), "-" when not running
    created: str = ""
    """The record's ``createDate`` at the master, ``yyyyMMddHHmmss`` on the master's clock ("" if absent): a
    deployment deleted and added again, or the same topic on another cluster, has another one."""
    run_known: bool = True
    """False when the source says only served or not (the master's RPC view,
    :mod:`tubespark.tubemq.client.configured`): ``running`` then means "served" and the reason is unknown."""

    @property
    def created_mark(self) -> int | None:
        """:attr:`created` as a number (``20261125074442``), ``None`` when the master gave none."""
        return int(self.created) if len(self.created) == 14 and self.created.isdigit() else None

    @property
    def configured(self) -> bool:
        return self.status_id == TOPIC_STATUS_NORMAL

    @property
    def served(self) -> bool:
        """Readable now: configured, its broker running and the topic open for subscription there."""
        return self.configured and self.running and self.accept_subscribe

    def partition_keys(self) -> tuple[str, ...]:
        """Keys ``brokerId:topic:partitionId`` of this deployment: ``store * 10000 + index``."""
        return tuple(PartitionRef(self.broker_id, self.topic, store * PARTITION_STORE_BASE + index).key
                     for store in range(self.num_stores) for index in range(self.num_partitions))

    def why_not_served(self) -> str:
        if not self.run_known:
            return ("the master does not offer the topic to consumers there now (the broker is down, stopped, "
                    "stalled or offline, the topic is closed to consumers there, or its deployment is being "
                    "deleted)")
        if not self.configured:
            return f"its deployment is deleted (topicStatusId={self.status_id})"
        if not self.running:
            return "the broker is not running at the master (down, stopped, stalled or offline)"
        return f"the topic is not open for subscription there (broker manage status {self.manage_status})"


@dataclass(frozen=True)
class Placement:
    """The master's configuration of some topics: every deployment, by topic.

    ``partitions``: topic -> the keys of its configured partitions (on every broker, serving or not).
    """

    deployments: tuple[Deployment, ...]
    partitions: Mapping[str, frozenset[str]] = field(init=False)

    def __post_init__(self) -> None:
        keys: dict[str, set[str]] = {}
        for d in self.deployments:
            if d.configured:
                keys.setdefault(d.topic, set()).update(d.partition_keys())
        object.__setattr__(self, "partitions", {t: frozenset(k) for t, k in keys.items()})

    def is_configured(self, key: str) -> bool:
        """True while the master's configuration holds partition ``key`` (its broker may be down)."""
        _broker_id, topic, _pid = PartitionRef.parse_key(key)
        return key in self.partitions.get(topic, frozenset())

    def deployment_of(self, key: str) -> Deployment | None:
        broker_id, topic, _pid = PartitionRef.parse_key(key)
        for d in self.deployments:
            if d.topic == topic and d.broker_id == broker_id and d.configured and key in d.partition_keys():
                return d
        return None

    @property
    def offline_brokers(self) -> frozenset[int]:
        """Brokers with configured deployments of these topics that are not running at the master now."""
        return frozenset(d.broker_id for d in self.deployments if d.configured and not d.running)

    @property
    def running_brokers(self) -> frozenset[int]:
        return frozenset(d.broker_id for d in self.deployments if d.running)

    def unserved(self) -> dict[int, tuple[str, ...]]:
        """Broker id -> the configured partitions of these topics it does not serve now (sorted keys)."""
        out: dict[int, set[str]] = {}
        for d in self.deployments:
            if d.configured and not d.served:
                out.setdefault(d.broker_id, set()).update(d.partition_keys())
        return {b: tuple(sorted(keys)) for b, keys in sorted(out.items())}

    def missing_from(self, listed: Iterable[str]) -> dict[int, tuple[str, ...]]:
        """Broker id -> configured partitions that are not among ``listed`` keys (what a plan would leave out)."""
        have = set(listed)
        out: dict[int, set[str]] = {}
        for keys in self.partitions.values():
            for key in keys - have:
                out.setdefault(PartitionRef.parse_key(key)[0], set()).add(key)
        return {b: tuple(sorted(keys)) for b, keys in sorted(out.items())}

    def describe_broker(self, broker_id: int) -> str:
        """``broker 2 (127.0.0.2:8123)``, with why its deployments are not served when they are not."""
        deploys = [d for d in self.deployments if d.broker_id == broker_id and d.configured]
        if not deploys:
            return f"broker {broker_id}"
        reasons = sorted({d.why_not_served() for d in deploys if not d.served})
        why = f": {'; '.join(reasons)}" if reasons else ""
        return f"broker {broker_id} ({deploys[0].broker_address}){why}"


def configured_partitions(web_urls: Iterable[str], topics: Iterable[str], *, timeout_s: float = 10.0) -> Placement:
    """The master's configuration of ``topics`` (one web API call), asking each master in turn.

    Raises :class:`AdminApiError` when no master's web API answers (only the active master does).
    A topic the master does not know has no deployment, hence no configured partition.
    """
    names = sorted(set(topics))
    if not names:
        return Placement(())
    errors: list[str] = []
    for url in web_urls:
        try:
            answer = MasterAdmin(url, "", timeout=timeout_s)("admin_query_topic_deploy_info",
                                                             topicName=",".join(names))
        except AdminApiError as exc:
            errors.append(str(exc))
            continue
        wanted = set(names)
        return Placement(tuple(d for item in answer.get("data") or () if item.get("topicName") in wanted
                               for d in _deployments(item)))
    raise AdminApiError("no master web API answered the topics' configuration (admin_query_topic_deploy_info): "
                        + "; ".join(errors))


def _deployments(item: Mapping[str, Any]) -> list[Deployment]:
    topic = str(item["topicName"])
    out = []
    for d in item.get("deployInfo") or ():
        run = d.get("runInfo") or {}
        running = run.get("acceptSubscribe", _NOT_RUNNING) != _NOT_RUNNING
        out.append(Deployment(
            topic=topic,
            broker_id=int(d["brokerId"]),
            broker_address=f"{d.get('brokerIp', '?')}:{d.get('brokerPort', '?')}",
            num_partitions=int(d["numPartitions"]),
            num_stores=int(d["numTopicStores"]),
            status_id=int(d.get("topicStatusId", TOPIC_STATUS_NORMAL)),
            running=running,
            accept_subscribe=running and run.get("acceptSubscribe") is True,
            manage_status=str(run.get("brokerManageStatus", _NOT_RUNNING)),
            created=str(d.get("createDate", "")),
        ))
    return out
