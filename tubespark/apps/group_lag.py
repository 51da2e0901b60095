"""A TubeMQ consumer group's lag from outside Spark, whoever consumes the group: what ``tubespark lag`` prints.

For each partition of the topics, ``[min, max)`` through tubespark's own TubeMQ client (metadata from the master,
bounds probed on the brokers under a private group) and, when the broker's HTTP admin address is given, the
group's committed offset and so its backlog. The TubeMQ RPC protocol tells a client nothing about another
member's position nor the broker's web port, so without ``broker_web`` the committed offset is unknown
(``None``). TubeMQ only: it reads the group's offsets on TubeMQ's brokers. A query's lag for any format comes
from Spark's progress instead (:mod:`tubespark.apps.lag`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tubespark.tubemq.errors import AdminApiError
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE

if TYPE_CHECKING:
    from tubespark.tubemq.client.common import ClientSettings


@dataclass(frozen=True)
class PartitionLag:
    """One partition of a group's topics: its bounds, and the group's committed offset there."""

    key: str
    min_offset: int
    max_offset: int
    committed: int | None  # the group's stored offset, None when unknown

    @property
    def backlog(self) -> int | None:
        """Messages between the committed offset and max; ``None`` when the committed offset is unknown."""
        if self.committed is None:
            return None
        return max(0, self.max_offset - max(self.committed, self.min_offset)) // INDEX_RECORD_SIZE

    @property
    def retained(self) -> int:
        return max(0, self.max_offset - self.min_offset) // INDEX_RECORD_SIZE


def parse_admin_offsets(answer: Mapping[str, Any], topic: str) -> dict[int, int]:
    """``{partitionId: committed offset}`` from the broker's ``admin_query_offset`` answer."""
    out: dict[int, int] = {}
    for item in answer.get("dataSet", []) or []:
        if item.get("topicName", topic) != topic:
            continue
        for sub in item.get("subInfo", []) or []:
            for part in sub.get("offsets", []) or []:
                if "partitionId" not in part:
                    continue
                for name in ("curOffset", "currOffset", "offset"):
                    if isinstance(part.get(name), int) and part[name] >= 0:
                        out[int(part["partitionId"])] = part[name]
                        break
                else:
                    if isinstance(part.get("offsetLag"), int) and isinstance(part.get("maxOffset"), int):
                        out[int(part["partitionId"])] = part["maxOffset"] - part["offsetLag"]
    return out


def group_lag(master: str, group: str, topics: Iterable[str], *, broker_web: Mapping[int, str] | str | None = None,
              settings: ClientSettings | None = None) -> list[PartitionLag]:
    """Each partition's ``[min, max)`` and, with ``broker_web``, the group's committed offset.

    ``broker_web``: the brokers' HTTP admin base URL (``http://host:8081``), one string for every broker
    or ``{brokerId: url}``. Bounds are probed under the private group ``<group>-tubespark-lag``, never
    under ``group`` itself, so this never disturbs the group's consumers.
    """
    from tubespark.tubemq.client.broker import BrokerClient
    from tubespark.tubemq.client.metadata import topic_partitions
    from tubespark.tubemq.client.ranges import probe_bounds

    probe_group = f"{group}-tubespark-lag"
    parts = topic_partitions(master, topics, settings)
    committed: dict[tuple[int, str], dict[int, int]] = {}
    result: list[PartitionLag] = []
    broker = BrokerClient(f"{probe_group}.{int(time.time() * 1000)}", settings)
    try:
        for topic, refs in sorted(parts.items()):
            for ref in sorted(refs):
                bounds = probe_bounds(broker, ref, probe_group, occupied_wait_s=5.0)
                url = broker_web.get(ref.broker_id) if isinstance(broker_web, Mapping) else broker_web
                stored = None
                if url:
                    cache_key = (ref.broker_id, topic)
                    if cache_key not in committed:
                        committed[cache_key] = parse_admin_offsets(broker_offsets(url, group, topic), topic)
                    stored = committed[cache_key].get(ref.partition_id)
                result.append(PartitionLag(ref.key, bounds.min_offset, bounds.max_offset, stored))
    finally:
        broker.close()
    return result


def broker_offsets(url: str, group: str, topic: str) -> Mapping[str, Any]:
    """The broker's ``admin_query_offset`` answer; a URL that is not a broker's admin API says what to pass."""
    from tubespark.tubemq.client.admin import BrokerAdmin

    try:
        return BrokerAdmin(url)("admin_query_offset", groupName=group, topicName=topic)
    except AdminApiError as exc:
        raise AdminApiError(f"the broker web URL {url} did not answer as a TubeMQ broker's admin API: {exc}. Pass "
                            f"the broker's HTTP admin port (its webPort, 8081 by default), e.g. --broker-web "
                            f"http://BROKER:8081, not the master's web port nor an RPC port") from None


LAG_HEADER = ("partition", "min_offset", "max_offset", "committed_offset", "backlog_messages")
"""Offsets and the backlog count different things, so each column names its unit."""


def format_lag_table(rows: Iterable[PartitionLag], *, group: str | None = None, broker_web: bool = False) -> str:
    """A fixed-width table: partition, min/max/committed offsets (positions in the broker's index, 28 per
    message) and the backlog in messages. ``broker_web``: whether committed offsets were asked for, so a
    partition without one is a group that never committed there, not a missing ``--broker-web``."""
    rows = list(rows)
    table = [LAG_HEADER] + [(r.key, str(r.min_offset), str(r.max_offset),
                             "?" if r.committed is None else str(r.committed),
                             "?" if r.backlog is None else str(r.backlog)) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(LAG_HEADER))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(line, widths, strict=True))) for line in table]
    lines.append(f"offsets are positions in the broker's index ({INDEX_RECORD_SIZE} per message); the backlog "
                 f"counts messages")
    known = [r.backlog for r in rows if r.backlog is not None]
    if known:
        lines.append(f"total backlog: {sum(known)} messages")
    unknown = [r.key for r in rows if r.committed is None]
    if unknown and broker_web:
        name = f"group {group}" if group else "the group"
        lines.append(f"{name} has no committed offset on the broker for {len(unknown)} of {len(rows)} partitions "
                     f"(it never committed there: a stream stores one when a micro-batch completes, with "
                     f"commitToGroup=true; check the group name); min/max are exact")
    elif unknown:
        lines.append("committed offsets unknown: pass --broker-web http://BROKER:WEBPORT (the broker's admin port) "
                     "to read them; min/max are exact")
    return "\n".join(lines)
