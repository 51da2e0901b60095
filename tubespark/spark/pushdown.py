"""WHERE clauses a batch read serves itself: Spark's filter objects -> what a broker's planner and reads can do.

One algorithm for every broker. A broker declares which of its read columns it can act on and how
(:class:`Columns`); :func:`translate` turns the filters Spark hands ``DataSourceReader.pushFilters`` (an AND
of them) into one :class:`Pushdown`: the partitions to read, the tags (stream ids, RocketMQ tags) the broker
filters on, a time range and an offset range to prune each partition's read to. It also says, filter by
filter, whether Spark must still apply it.

Exactness, the rule every kind follows: a filter is taken off Spark's list only when every row the read
returns satisfies it and no row that satisfies it is left out. Whole-partition selections are that
(``partitionKey``, ``brokerId``, ``partitionId``, ``topic``: a partition is read entirely or not at all, and
those columns are never null), and so is a tag set whose read checks every message's real tag (``exact``). The
others prune the read, and Spark applies them again on what comes back:

* a time range is found by bisecting the partition over its messages' times (minute precision, and it assumes
  times do not go down along a partition), so the pruned range can hold messages outside the range;
* an offset range is cut on message boundaries, and a broker whose offset column is a lower bound in some reads
  (TubeMQ's sparse index batches) keeps Spark's check;
* a tag filter on the broker may let through a hash collision (TubeMQ filters by the hash of the msgType),
  unless the broker's read checks each message's real tag after the broker's filter (RocketMQ's pull reads do:
  :meth:`tubespark.rocketmq.wire.filter.Filter.keeps`): such a column is declared ``exact`` and served.

A filter on a column the broker did not declare, of a kind it cannot use (``Not``, ``IsNull``, string
matching, a value of the wrong type), is left to Spark untouched: never approximated.

Turned on by Spark's ``spark.sql.python.filterPushdown.enabled=true`` (off by default); with it off, PySpark
4.3 refuses a reader class that defines ``pushFilters`` (``DATA_SOURCE_PUSHDOWN_DISABLED``), so the data source
hands Spark a reader without it (:func:`pushdown_enabled`, :mod:`tubespark.spark.source`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from types import FrameType
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

CONF = "spark.sql.python.filterPushdown.enabled"
"""The Spark SQL setting that turns pushdown on (default false in PySpark 4.3)."""


class Kind(Enum):
    """What a broker can do with a column's filter."""

    PARTITION = "partition"
    """The column is the same for every row of a partition: the plan selects partitions (exact)."""
    TAG = "tag"
    """The broker filters messages by this value set when it sends them (Spark checks again)."""
    TIME = "time"
    """A timestamp the broker can find a position for: each partition's read is pruned to a range of it."""
    OFFSET = "offset"
    """The row's offset: each partition's read is cut to a range of it."""


@dataclass(frozen=True)
class Column:
    """One column a broker can act on. ``accepts``: whether a value can be pushed at all (a broker's limits:
    TubeMQ takes at most 500 stream ids of letters, digits, '_' and '-'); a filter with another value is left
    to Spark."""

    kind: Kind
    type: type
    accepts: Callable[[object], bool] = lambda value: True
    never_null: bool = False
    exact: bool = False
    """TAG: the read returns exactly the messages whose value is in the set (it checks each message's real value
    after the broker's filter), so the filter is served, not applied by Spark again."""


Columns = Mapping[str, Column]


@dataclass(frozen=True)
class Span:
    """An inclusive range of integers, either end open (``None``)."""

    low: int | None = None
    high: int | None = None

    def meet(self, other: Span) -> Span:
        low = other.low if self.low is None else self.low if other.low is None else max(self.low, other.low)
        high = other.high if self.high is None else self.high if other.high is None else min(self.high, other.high)
        return Span(low, high)

    @property
    def empty(self) -> bool:
        return self.low is not None and self.high is not None and self.low > self.high

    @property
    def bounded(self) -> bool:
        return self.low is not None or self.high is not None


@dataclass
class Pushdown:
    """What the filters Spark pushed ask of the read (the AND of them). Empty: read everything."""

    values: dict[str, frozenset[Any]] = field(default_factory=dict)
    """PARTITION and TAG columns: the values a row may have."""
    times: dict[str, Span] = field(default_factory=dict)
    """TIME columns: epoch milliseconds, widened to whole milliseconds (a superset of the filter)."""
    offsets: Span = Span()
    served: list[str] = field(default_factory=list)
    """Filters taken off Spark's list (exact), as Spark prints them."""
    pruning: list[str] = field(default_factory=list)
    """Filters the read uses and Spark applies again."""

    @property
    def nothing(self) -> bool:
        """The filters contradict each other (``a = 1 AND a = 2``, an empty range): no row can match."""
        return any(not v for v in self.values.values()) or self.offsets.empty or any(
            span.empty for span in self.times.values())

    def selects(self, row: Mapping[str, object]) -> bool:
        """Whether a partition whose PARTITION columns have these values is read."""
        return all(value in self.values[name] for name, value in row.items() if name in self.values)

    def tags(self, column: str) -> frozenset[Any] | None:
        return self.values.get(column)

    def describe(self) -> str:
        """For logs and the reader's description: what is served and what only prunes."""
        return f"served: [{', '.join(self.served)}]; pruning (Spark checks again): [{', '.join(self.pruning)}]"


def _column(f: Filter) -> str | None:
    path: tuple[str, ...] = getattr(f, "attribute", ())
    return path[0] if len(path) == 1 else None


def _epoch_ms(value: object, *, up: bool) -> int | None:
    """A timezone-aware datetime as epoch milliseconds (rounded outward: the range stays a superset); a naive
    one (TIMESTAMP_NTZ: no instant) or anything else: ``None``."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        return None
    micros = (value - _EPOCH) // timedelta(microseconds=1)  # exact integer arithmetic, no float
    return -(-micros // 1000) if up else micros // 1000


def _typed(value: object, spec: Column) -> bool:
    if spec.type is int:
        return isinstance(value, int) and not isinstance(value, bool) and spec.accepts(value)
    return isinstance(value, spec.type) and spec.accepts(value)


def _values(f: Filter, spec: Column) -> frozenset[Any] | None:
    """EqualTo / EqualNullSafe / In with values the broker accepts (a null never matches a value set; an empty
    In matches no row: the empty set)."""
    if isinstance(f, EqualTo | EqualNullSafe):
        candidates: Sequence[object] = (f.value,)
    elif isinstance(f, In):
        candidates = tuple(f.value)
    else:
        return None
    if isinstance(f, EqualNullSafe) and f.value is None:
        return None
    if not all(_typed(v, spec) for v in candidates):
        return None
    return frozenset(candidates)


def _range(f: Filter, spec: Column) -> Span | None:
    """A comparison as an inclusive integer span (times: epoch ms, widened outward)."""
    if not isinstance(f, EqualTo | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual):
        return None
    if spec.kind is Kind.TIME:
        low, high = _epoch_ms(f.value, up=False), _epoch_ms(f.value, up=True)
        if low is None or high is None:
            return None
        strict = 0  # a superset: "> t" prunes like ">= t"
    elif _typed(f.value, spec):
        low = high = int(f.value)
        strict = 1
    else:
        return None
    if isinstance(f, EqualTo):
        return Span(low, high)
    if isinstance(f, GreaterThan):
        return Span(low + strict, None)
    if isinstance(f, GreaterThanOrEqual):
        return Span(low, None)
    if isinstance(f, LessThan):
        return Span(None, high - strict)
    return Span(None, high)


def translate(filters: Iterable[Filter], columns: Columns) -> tuple[Pushdown, list[Filter]]:
    """The :class:`Pushdown` of ``filters`` and the filters Spark must still apply (the same objects, in order:
    PySpark matches them by identity)."""
    pushed = Pushdown()
    left: list[Filter] = []
    for f in filters:
        name = _column(f)
        spec = columns.get(name) if name is not None else None
        exact = _absorb(pushed, f, name, spec) if spec is not None and name is not None else None
        if exact is None:
            left.append(f)
        elif exact:
            pushed.served.append(describe_filter(f))
        else:
            pushed.pruning.append(describe_filter(f))
            left.append(f)
    return pushed, left


def _absorb(pushed: Pushdown, f: Filter, name: str, spec: Column) -> bool | None:
    """Fold ``f`` into ``pushed``: True served exactly, False used to prune (Spark checks again), None unused."""
    if isinstance(f, IsNotNull):
        return True if spec.never_null else None
    if spec.kind in (Kind.PARTITION, Kind.TAG):
        values = _values(f, spec)
        if values is None:
            return None
        have = pushed.values.get(name)
        pushed.values[name] = values if have is None else have & values
        return spec.kind is Kind.PARTITION or spec.exact
    if isinstance(f, In) and spec.kind is Kind.OFFSET:  # offsets in a set: the span around them
        values = _values(f, spec)
        if values is None:
            return None
        span: Span | None = Span(min(values), max(values)) if values else Span(1, 0)
    else:
        span = _range(f, spec)
    if span is None:
        return None
    if spec.kind is Kind.OFFSET:
        pushed.offsets = pushed.offsets.meet(span)
    else:
        pushed.times[name] = pushed.times.get(name, Span()).meet(span)
    return False


def describe_filter(f: Filter) -> str:
    """A filter as Spark's explain() prints pushed ones: ``EqualTo(streamId,a)``."""
    name = ".".join(getattr(f, "attribute", ()))
    value = getattr(f, "value", None)
    if isinstance(f, IsNotNull) or (value is None and not hasattr(f, "value")):
        return f"{type(f).__name__}({name})"
    shown = "[" + ",".join(map(str, value)) + "]" if isinstance(value, tuple | list) else str(value)
    return f"{type(f).__name__}({name},{shown})"


def clip(start: int, end: int, offsets: Span, record_size: int) -> tuple[int, int]:
    """``[start, end)`` cut to the offsets in ``offsets`` on message boundaries (multiples of ``record_size``):
    the first boundary at or above the low end, the first above the high end. ``end <= start``: nothing."""
    if offsets.low is not None:
        start = max(start, -(-offsets.low // record_size) * record_size)
    if offsets.high is not None:
        end = min(end, -(-(offsets.high + 1) // record_size) * record_size)
    return start, max(start, end)


def pushdown_enabled(depth: int = 2) -> bool:
    """Whether Spark will push filters to the reader being made now (``CONF``), as the calling PySpark worker
    knows it.

    Why look at the caller: a Python data source sees no Spark configuration, and PySpark 4.3 fails a read with
    ``DATA_SOURCE_PUSHDOWN_DISABLED`` when pushdown is off and the reader's class defines ``pushFilters``. Spark
    asks for the reader from one of two workers: ``data_source_pushdown_filters`` (only run with pushdown on;
    it then calls ``pushFilters``) or ``plan_data_source_read``, which holds the setting in its local
    ``enable_pushdown`` when it calls ``reader()``. Anything else (a direct call, another PySpark) gets the
    reader without ``pushFilters``: reads stay correct, only unpushed. tests/integration/tubemq/
    test_filter_pushdown.py checks both paths in a real session.
    """
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        if frame.f_code.co_filename.endswith("data_source_pushdown_filters.py"):
            return True
        if frame.f_code.co_filename.endswith("plan_data_source_read.py") and "enable_pushdown" in frame.f_locals:
            return bool(frame.f_locals["enable_pushdown"])
        frame = frame.f_back
    return False


__all__ = ["CONF", "Column", "Columns", "Kind", "Pushdown", "Span", "clip", "describe_filter", "pushdown_enabled",
           "translate"]
