"""Driver-side planning helpers: how much of each partition a micro-batch or a task takes.

Offsets here are whatever a broker counts in; ``record_size`` converts messages to offset units
(1 where offsets count messages, larger where they are byte positions of fixed-size index records).
"""

from __future__ import annotations

from collections.abc import Mapping
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
