"""Lag for operators: how far a tubemq query (or a consumer group) is behind its partitions.

Two views:

* :class:`LagListener`, a Spark ``StreamingQueryListener``: on every progress event it reads the tubemq
  source's ``endOffset`` (where the batch ended) and ``latestOffset`` (the partitions' max offsets the
  source saw when it planned the batch, from ``reportLatestOffset``) and keeps, per query, a history of
  per-partition backlog in messages (``(latest - end) // 28``) and rows/s. Exact, and costs nothing:
  the numbers are already in the progress event.
* :func:`group_lag`: for one consumer group, each partition's ``[min, max)`` through our own client
  (metadata from the master, bounds probed on the brokers under a private group) and, when the
  broker's HTTP admin address is given, the group's committed offset and so its backlog. The TubeMQ
  RPC protocol tells a client nothing about another member's position nor the broker's web port, so
  without ``broker_web`` the committed offset is unknown (``None``). ``tubespark lag`` prints it.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tubespark.spark.offsets import BatchOffsets
from tubespark.spark.offsets import parse_offsets as shared_parse_offsets
from tubespark.spark.planning import backlog_between
from tubespark.tubemq.errors import AdminApiError
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE

if TYPE_CHECKING:
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
        StreamingQueryListener,
    )

    from tubespark.tubemq.client.common import ClientSettings
else:
    try:
        from pyspark.sql.streaming import StreamingQueryListener
    except ImportError:  # pragma: no cover - the pure helpers below work without pyspark
        StreamingQueryListener = object


def parse_offsets(raw: Any) -> dict[str, int] | None:
    """A source offset as Spark reports it (JSON text or dict) -> ``{partition key: offset}``.

    ``None`` for anything that is not a tubemq offset (another source's format, empty, unparsable).
    """
    offsets = shared_parse_offsets(raw, is_key=lambda key: "#" in key or key.count(":") >= 2)
    return None if offsets is None else BatchOffsets.parse(offsets).positions  # marks are no partitions


def backlog_messages(end: Mapping[str, int], latest: Mapping[str, int]) -> dict[str, int]:
    """Per-partition backlog in messages: ``(latest - end) // 28``, never negative; keys of ``latest``."""
    return backlog_between(end, latest, record_size=INDEX_RECORD_SIZE)


@dataclass(frozen=True)
class LagSample:
    """One progress event of one query."""

    at: float  # seconds since the epoch (from the progress timestamp when available)
    batch_id: int
    num_input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    backlog: dict[str, int] = field(default_factory=dict)  # partition key -> messages

    @property
    def total_backlog(self) -> int:
        return sum(self.backlog.values())


def _number(value: Any) -> float:
    try:
        result = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(result) else result  # NaN: Spark reports it for the first batch


def _timestamp(text: Any) -> float:
    from datetime import datetime

    if isinstance(text, str):
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()


def sample_from_progress(progress: Any) -> LagSample | None:
    """Build a :class:`LagSample` from a ``StreamingQueryProgress`` (object or its JSON dict).

    Uses the sources whose offsets look like tubemq's; ``None`` when there is none.
    """
    if isinstance(progress, str):
        progress = json.loads(progress)
    get = progress.get if isinstance(progress, Mapping) else (lambda name, default=None:
                                                                 getattr(progress, name, default))
    backlog: dict[str, int] = {}
    rows = 0
    in_rate = out_rate = 0.0
    found = False
    for source in get("sources", None) or []:
        sget = source.get if isinstance(source, Mapping) else (lambda name, default=None, s=source:
                                                                getattr(s, name, default))
        end = parse_offsets(sget("endOffset", None))
        latest = parse_offsets(sget("latestOffset", None))
        if end is None:
            continue
        found = True
        backlog.update(backlog_messages(end, latest or end))
        rows += int(_number(sget("numInputRows", 0)))
        in_rate += _number(sget("inputRowsPerSecond", 0))
        out_rate += _number(sget("processedRowsPerSecond", 0))
    if not found:
        return None
    return LagSample(_timestamp(get("timestamp", None)), int(_number(get("batchId", 0))), rows, in_rate, out_rate,
                     backlog)


def progress_lag(progress: Any) -> dict[str, int]:
    """Per-partition lag of a query's tubemq source(s) in one progress: ``{partition key: messages behind}``.

    ``progress`` is ``query.lastProgress`` (or an element of ``query.recentProgress``, a listener's
    ``event.progress``, or its JSON); ``None`` (no batch yet) gives ``{}``. A partition's lag is how far
    the batch's end was behind the partition's max offset when the source planned that batch (the
    source's ``latestOffset``, reported through ``reportLatestOffset``): what Spark's Kafka source
    reports as ``offsetsBehindLatest``, per partition and in messages. 0 everywhere: caught up.

    Why a helper and not ``progress["sources"][0]["metrics"]``: Spark 4.3 gives Python sources no way to
    report source metrics (their JVM stream classes implement no ``ReportsSourceMetrics``, and the
    driver-side runner has no call for it), so the progress carries only the two offset maps this
    derives the lag from.
    """
    if progress is None:
        return {}
    sample = sample_from_progress(progress)
    return dict(sample.backlog) if sample is not None else {}


class LagHistory:
    """Thread-safe per-query history of :class:`LagSample` (bounded to ``max_samples`` per query)."""

    def __init__(self, max_samples: int = 10_000) -> None:
        self.max_samples = max_samples
        self._samples: dict[str, list[LagSample]] = {}
        self._lock = threading.Lock()

    def add(self, query_id: str, sample: LagSample) -> None:
        with self._lock:
            samples = self._samples.setdefault(query_id, [])
            samples.append(sample)
            del samples[:-self.max_samples]

    def samples(self, query_id: str | None = None) -> list[LagSample]:
        """The samples of ``query_id``, or of the only/most recent query when ``None``."""
        with self._lock:
            if query_id is None:
                if not self._samples:
                    return []
                query_id = next(reversed(self._samples))
            return list(self._samples.get(query_id, []))

    def latest_backlog(self, query_id: str | None = None) -> dict[str, int]:
        samples = self.samples(query_id)
        return dict(samples[-1].backlog) if samples else {}

    def to_rows(self, query_id: str | None = None) -> list[dict[str, Any]]:
        """One row per (sample, partition): handy for ``pandas.DataFrame(rows)`` and plotting."""
        return [{"at": s.at, "batchId": s.batch_id, "partition": key, "backlog": count,
                 "numInputRows": s.num_input_rows, "inputRowsPerSecond": s.input_rows_per_second,
                 "processedRowsPerSecond": s.processed_rows_per_second}
                for s in self.samples(query_id) for key, count in (s.backlog.items() or [("", 0)])]


class LagListener(StreamingQueryListener):
    """Records per-partition backlog and throughput of every tubemq query of a session.

        listener = LagListener()
        spark.streams.addListener(listener)
        ...
        listener.history.latest_backlog(str(query.id))   # {"brokerId:topic:partitionId": messages}
    """

    def __init__(self, history: LagHistory | None = None) -> None:
        self.history = history or LagHistory()

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        sample = sample_from_progress(progress)
        if sample is not None:
            self.history.add(str(getattr(progress, "id", "")), sample)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass


# --- a consumer group's lag, from outside Spark ----------------------------------------------------


@dataclass(frozen=True)
class PartitionLag:
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
