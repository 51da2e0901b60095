"""A streaming query's lag, per partition, from Spark's progress: for every format tubespark registers.

Every tubespark source (``tubemq``, ``tank``, ``rocketmq`` in pull mode) runs on the shared stream engine, and
each progress event carries, per source, where the batch ended (``endOffset``) and each partition's max offset
when the source planned that batch (``latestOffset``, which the engine reports through Spark's
``reportLatestOffset``). The backlog of a partition is the gap between the two, in messages: exact, and free,
since the numbers are already in the event.

* :func:`progress_lag`: one progress -> ``{partition key: messages behind}``.
* :class:`LagListener`, a Spark ``StreamingQueryListener``: keeps, per query, a history of per-partition backlog
  and rows/s (:class:`LagHistory`).

Which source an offset map belongs to (docs/spark/progress.md). The progress names a Python source only by its JVM
object (``PythonMicroBatchStreamWithTriggerAvailableNow@1a2b3c``), never by its format, so a source is recognised by
its offsets: each format's partition keys have their own shape, checked by the broker's own key rule, and each
format steps its offsets by its own amount per message (:data:`OFFSET_FORMS`). TANK's ``topic:partition`` has one
``:``; TubeMQ's ``brokerId:topic:partitionId`` and RocketMQ's ``topic:brokerName:queueId`` have two. A map whose
keys are TubeMQ-shaped (a numeric first part, a topic starting with a letter) is TubeMQ's only when every offset is
a multiple of 28 (TubeMQ offsets are positions of 28-byte index records: docs/tubemq/protocol.md, "Index offsets");
RocketMQ is the one format that may still look the same (an all-digit topic on a broker named like a TubeMQ topic,
with every offset a multiple of 28), and it is read as TubeMQ then. Offsets of anything else
(Kafka's ``{"topic": {"0": 5}}``, RocketMQ's pop mode, which hands out messages and has no positions) give no sample.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tubespark.rocketmq.spark.options import TERMS as ROCKETMQ
from tubespark.spark.offsets import BatchOffsets
from tubespark.spark.offsets import parse_offsets as offset_map
from tubespark.spark.planning import backlog_between
from tubespark.tank.spark.options import TERMS as TANK
from tubespark.tubemq.spark.options import TERMS as TUBEMQ
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE

if TYPE_CHECKING:
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
        StreamingQueryListener,
    )
else:
    try:
        from pyspark.sql.streaming import StreamingQueryListener
    except ImportError:  # pragma: no cover - the pure helpers below work without pyspark
        StreamingQueryListener = object


@dataclass(frozen=True)
class OffsetForm:
    """How one format's stream offsets look: its partition keys, and how far its offsets move per message."""

    format: str  # the name the data source registers: "tubemq"
    is_key: Callable[[str], bool]  # the broker's own rule for a partition key of its offset JSON
    step: int  # offset units per message


OFFSET_FORMS = (
    OffsetForm("tubemq", TUBEMQ.is_partition_key, INDEX_RECORD_SIZE),  # positions of 28-byte index records
    OffsetForm("rocketmq", ROCKETMQ.is_partition_key, 1),  # consume-queue offsets: one per message
    OffsetForm("tank", TANK.is_partition_key, 1),  # sequence numbers: one per message
)
"""Every format tubespark registers (``tests/unit/apps/test_lag.py`` checks it against the registry), most
particular first: a TubeMQ-shaped key also passes RocketMQ's rule, never the other way round."""


def form_of(*offsets: Mapping[str, int]) -> OffsetForm | None:
    """The format whose keys and offset steps fit every partition of ``offsets`` (one source's maps of one
    progress); ``None`` when none does, or there is no partition at all."""
    keys = {key for partitions in offsets for key in partitions}
    if not keys:
        return None
    for form in OFFSET_FORMS:
        if all(form.is_key(key) for key in keys) and all(
                offset % form.step == 0 for partitions in offsets for offset in partitions.values()):
            return form
    return None


def positions(raw: Any) -> dict[str, int] | None:
    """A source offset as Spark reports it (JSON text or dict) -> ``{partition key: offset}``, marks left out.

    ``None`` for anything that is not a map of integers (another source's format, empty, unparsable). The
    stream engine's marks (``#from``, ``#last``, ``#origin``, ...) are no partitions and no lag.
    """
    offsets = offset_map(raw)
    return None if offsets is None else BatchOffsets.parse(offsets).positions


def parse_offsets(raw: Any) -> dict[str, int] | None:
    """The partitions of a tubespark source offset as Spark reports it: ``{partition key: offset}``.

    ``None`` for anything that is not the offset of a tubespark format (:data:`OFFSET_FORMS`).
    """
    found = positions(raw)
    return found if found is not None and form_of(found) is not None else None


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


def _getter(item: Any) -> Callable[..., Any]:
    """``get(name, default)`` on a progress or source: a JSON dict, or PySpark's progress objects."""
    if isinstance(item, Mapping):
        return item.get
    return lambda name, default=None: getattr(item, name, default)


def sample_from_progress(progress: Any) -> LagSample | None:
    """Build a :class:`LagSample` from a ``StreamingQueryProgress`` (object, its JSON dict, or the JSON text).

    Uses the sources whose offsets are a tubespark format's (:func:`form_of`); ``None`` when there is none.
    """
    if isinstance(progress, str):
        progress = json.loads(progress)
    get = _getter(progress)
    backlog: dict[str, int] = {}
    rows = 0
    in_rate = out_rate = 0.0
    found = False
    for source in get("sources", None) or []:
        sget = _getter(source)
        end = positions(sget("endOffset", None))
        latest = positions(sget("latestOffset", None)) or {}
        form = form_of(end, latest) if end is not None else None
        if end is None or form is None:
            continue
        found = True
        backlog.update(backlog_between(end, latest or end, record_size=form.step))  # never negative
        rows += int(_number(sget("numInputRows", 0)))
        in_rate += _number(sget("inputRowsPerSecond", 0))
        out_rate += _number(sget("processedRowsPerSecond", 0))
    if not found:
        return None
    return LagSample(_timestamp(get("timestamp", None)), int(_number(get("batchId", 0))), rows, in_rate, out_rate,
                     backlog)


def progress_lag(progress: Any) -> dict[str, int]:
    """Per-partition lag of a query's tubespark source(s) in one progress: ``{partition key: messages behind}``.

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
    """Records per-partition backlog and throughput of every tubespark query of a session (any format).

        listener = LagListener()
        spark.streams.addListener(listener)
        ...
        listener.history.latest_backlog(str(query.id))   # {partition key: messages behind}
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
