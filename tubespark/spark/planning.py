"""Driver-side planning helpers: how much of each partition a micro-batch or a task takes.

Offsets here are whatever a broker counts in; ``record_size`` converts messages to offset units
(1 where offsets count messages, larger where they are byte positions of fixed-size index records).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


def share_by_backlog(backlog: dict[str, int], limit: int) -> dict[str, int]:
    """Split ``limit`` messages over partitions in proportion to their backlog (in messages).

    The shares add up to exactly ``limit`` (the option promises "most messages per micro-batch"). When
    the limit allows, every partition with a backlog gets one message first, so a small partition is
    never starved by large ones; the rest goes by proportion, floors first, and the messages the
    rounding leaves over go one each to the largest remainders (ties: larger backlog, then key).
    """
    total = sum(backlog.values())
    if total <= limit:
        return dict(backlog)
    waiting = [key for key, size in backlog.items() if size > 0]
    base = dict.fromkeys(backlog, 0)
    if limit >= len(waiting):
        base.update(dict.fromkeys(waiting, 1))
    rest = {key: size - base[key] for key, size in backlog.items()}
    budget, remaining = limit - sum(base.values()), sum(rest.values())
    shares = {key: base[key] + budget * size // remaining for key, size in rest.items()}
    left = limit - sum(shares.values())
    by_remainder = sorted(rest, key=lambda key: (-(budget * rest[key] % remaining), -backlog[key], key))
    for key in by_remainder[:left]:
        shares[key] += 1
    return shares


def split_range(start: int, end: int, max_records: int | None, *, record_size: int = 1) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` into pieces of at most ``max_records`` records (aligned to ``record_size``)."""
    if not max_records or end - start <= max_records * record_size:
        return [(start, end)] if end > start else []
    step = max_records * record_size
    return [(low, min(low + step, end)) for low in range(start, end, step)]


def backlog_between(end: Mapping[str, int], latest: Mapping[str, int], *, record_size: int = 1) -> dict[str, int]:
    """Per-partition backlog in messages: ``(latest - end) // record_size``, never negative; keys of ``latest``."""
    return {key: max(0, high - end.get(key, high)) // record_size for key, high in sorted(latest.items())}


@dataclass(frozen=True)
class Admission:
    """What one micro-batch may take: Spark's Kafka source limits, plus a byte budget.

    ``max_rows`` and ``max_bytes`` cap a batch (the smaller wins; the byte budget is turned into
    messages with per-partition size estimates, and always admits one); ``min_rows`` makes a trigger
    wait for that many messages until ``max_delay_s`` has passed since the last batch.
    """

    max_rows: int | None = None
    max_bytes: int | None = None
    min_rows: int | None = None
    max_delay_s: float = 900.0

    def rows(self, backlog: Mapping[str, int], sizes: Mapping[str, float]) -> int | None:
        """Most messages the batch takes over all partitions (``None``: no cap). ``sizes``: estimated
        bytes per message of each partition with a backlog (a missing one counts as 0 bytes)."""
        cap = self.max_rows
        if self.max_bytes is not None:
            messages = sum(backlog.values())
            volume = sum(count * sizes.get(key, 0.0) for key, count in backlog.items())
            if volume > self.max_bytes:
                by_bytes = max(1, int(self.max_bytes * messages // volume))
                cap = by_bytes if cap is None else min(cap, by_bytes)
        return cap

    def waits(self, backlog: Mapping[str, int], since_last_batch_s: float) -> bool:
        """Whether this trigger plans nothing: fewer than ``min_rows`` wait and the delay has not passed."""
        return bool(self.min_rows) and sum(backlog.values()) < (self.min_rows or 0) \
            and since_last_batch_s < self.max_delay_s


# --- one micro-batch's plan ------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """What a partition holds now: offsets ``[low, high)``. ``low`` is ``None`` where the broker does not
    tell (the range reader then finds offsets that are gone)."""

    low: int | None
    high: int


@dataclass(frozen=True)
class Resolution:
    """What becomes of a partition whose start no longer fits its bounds.

    ``to`` is where it resumes (``None``: it stays where it is and plans nothing, e.g. a replica that has
    not caught up yet); ``loss`` says why skipping to ``to`` loses data (``failOnDataLoss`` decides), and
    is empty where the skipped offsets never held a message.
    """

    to: int | None
    loss: str = ""


class BoundsPolicy:
    """A broker's answer to a start below its partition's first offset or above its end.

    The default is the Kafka source's: offsets below the first one were removed (retention) and offsets
    above the end mean the broker lost acknowledged messages; both are data loss, resuming at the bound.
    """

    lost_above: bool = True
    """Whether a start above the end means the broker lost acknowledged messages. Then the stream engine resumes
    the partition where the broker's offsets diverge from what the query read (its ``#last@`` marks), at or below
    the end, so :func:`plan_batch` finds the start within bounds; ``False``: :meth:`above` alone decides (e.g. a
    replica behind the query is waited for)."""

    def below(self, key: str, start: int, bounds: Bounds) -> Resolution:
        low = bounds.low if bounds.low is not None else start
        return Resolution(low, f"offsets [{start}, {low}) are gone (retention removed them before this query "
                               f"read them)")

    def above(self, key: str, start: int, bounds: Bounds) -> Resolution:
        return Resolution(bounds.high, f"the broker's end offset {bounds.high} is below this query's offset "
                                       f"{start}: the broker lost acknowledged messages")


@dataclass(frozen=True)
class Loss:
    """Data a plan skips: partition ``key`` was at ``offset`` and resumes at ``resumes_at``; ``why``."""

    key: str
    offset: int
    resumes_at: int
    why: str


@dataclass(frozen=True)
class Plan:
    """The next batch: ``end`` (every partition of the start, and those joining), ``starts`` (the partitions
    it reads from elsewhere than their start: jumps, the ``#from`` marks), the ``losses`` those jumps make,
    ``idle`` (partitions planned nothing, and why) and ``backlog`` (messages waiting)."""

    end: dict[str, int]
    starts: dict[str, int]
    losses: tuple[Loss, ...]
    idle: dict[str, str]
    backlog: dict[str, int]

    def moves(self, start: Mapping[str, int]) -> bool:
        """Whether this plan reads or moves anything (else Spark must see the same offsets: no batch)."""
        return self.end != dict(start)


SizeSampler = Callable[[Mapping[str, int], Mapping[str, int]], Mapping[str, float]]
"""``(begin offsets, backlog in messages) -> mean message bytes`` of the partitions with a backlog."""


def plan_batch(start: Mapping[str, int], bounds: Mapping[str, Bounds], *, admission: Admission,
               policy: BoundsPolicy | None = None, joined: Mapping[str, int] | None = None,
               jumps: Mapping[str, int] | None = None, unavailable: Mapping[str, str] | None = None,
               target: Mapping[str, int] | None = None, since_last_batch_s: float = 0.0,
               sizes: SizeSampler | None = None, record_size: int = 1) -> Plan:
    """Plan one micro-batch from ``start``: pure, so the rules are tested table by table.

    ``bounds`` holds the partitions readable now; a partition of ``start`` without bounds keeps its offset
    and plans nothing (its broker is down, another member holds it: ``unavailable`` says why). ``joined``
    are partitions new to the query with the offset each starts at (read from the next batch on: the
    batch that records them plans nothing for them); ``jumps`` move a partition's start
    without reading what lies between (a regained partition resuming at its group's offset). A start
    outside its bounds goes to ``policy``. ``target`` (Trigger.AvailableNow) caps each partition's end;
    the run never waits for ``minOffsetsPerTrigger``. ``admission`` shares the batch's limit over the
    partitions by backlog; ``sizes`` estimates message sizes for ``maxBytesPerTrigger``. Offsets advance
    ``record_size`` units per message.
    """
    policy = policy or BoundsPolicy()
    end = dict(start)
    starts: dict[str, int] = {}
    idle = dict(unavailable or {})
    losses: list[Loss] = []
    begin: dict[str, int] = {}
    # a joining partition is recorded now and read from the next batch on, so a batch's marks name only the
    # partitions it started elsewhere than their previous end (batch 0's: exactly the query's initial ones)
    joining = {key: first for key, first in (joined or {}).items() if key not in start}
    end.update(joining)
    idle.update({key: f"joins the query at {first}" for key, first in joining.items()})
    for key, offset in (jumps or {}).items():
        if key in end and offset != end[key]:
            end[key] = starts[key] = offset
    backlog: dict[str, int] = {}
    for key in sorted(end):
        found = bounds.get(key)
        if found is None or key in joining:
            idle.setdefault(key, "no bounds this trigger")
            continue
        position = end[key]
        outside = (policy.below(key, position, found) if found.low is not None and position < found.low
                   else policy.above(key, position, found) if position > found.high else None)
        if outside is not None:
            if outside.to is None:
                idle[key] = outside.loss or "waiting for the broker to reach this query's offset"
                continue
            if outside.loss:
                losses.append(Loss(key, position, outside.to, outside.loss))
            position = end[key] = starts[key] = outside.to
        high = found.high if target is None else min(found.high, target.get(key, found.high))
        begin[key] = position
        backlog[key] = max(0, high - position) // record_size
    if target is None and admission.waits(backlog, since_last_batch_s):
        shares: dict[str, int] = {}
    else:
        estimates = sizes(begin, backlog) if sizes is not None and admission.max_bytes else {}
        cap = admission.rows(backlog, estimates)
        shares = share_by_backlog(backlog, cap) if cap else dict(backlog)
    for key, count in shares.items():
        end[key] = begin[key] + count * record_size
    return Plan(end, starts, tuple(losses), idle, backlog)
