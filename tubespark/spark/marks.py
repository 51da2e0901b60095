"""Where a broker's offsets stop holding what a query read: a bounded history of ``(offset, fingerprint)`` marks.

A broker that loses acknowledged messages (TubeMQ killed within its durability window) loses a *suffix* of a
partition: everything from some offset ``L`` on, and hands ``L, L+1, ...`` to new messages after its restart. The
query had read up to ``P > L``. Reading on at ``P`` (the reused offsets) or at the broker's end skips the new
messages from ``L`` on; only ``L`` itself loses nothing but what the broker lost. No broker tells ``L``, so each
batch end keeps, besides the ``#last`` fingerprint of the message below its position, a few older ones: the last
:data:`RECENT_MARKS` batch ends (a durability window is seconds of data: ``L`` is most often among them) and
further back one about every power of two of messages (:func:`thin`), at most :data:`OLDER_MARKS` of them, so a
long-running query keeps a bounded, logarithmically spaced history and its offsets JSON stays small; plus its *start
mark*, where the query began reading the partition (nothing read below it, nothing to compare).

Because the loss is a suffix, a mark at ``m`` still matches what the broker holds exactly when ``m <= L``: the
highest matching mark ``M`` is where to resume. The messages in ``[M, L)`` are the same ones the query read: read a
second time; the divergence lies in ``[M, D)``, ``D`` the lowest mark above ``M`` (which differs), so at most
``D - M`` offsets are read again, a batch's worth when ``L`` falls among the recent marks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

RECENT_MARKS = 4
"""Batch ends kept as marks whatever their spacing: where a durability-window loss most often begins."""

OLDER_MARKS = 12
"""Older marks, about one per power of two of messages back (nearest first): a re-read at most about three times
the loss's own depth (plus a batch), for losses up to about ``2**12`` times the recent marks' span deep."""

START = -1
"""A start mark's value (no fingerprint is negative): the query began reading the partition here."""


def thin(marks: Mapping[int, int], position: int, record_size: int = 1) -> dict[int, int]:
    """The marks below ``position`` a batch end keeps: the start mark, the :data:`RECENT_MARKS` highest, and for each
    ``j`` from 0, the highest mark at or below the grid point ``g_j``, the highest multiple of ``2**j`` messages (of
    ``record_size`` offset units) at least ``2**j`` messages below ``position``, until :data:`OLDER_MARKS` are kept.

    ``g_j`` lies ``2**j`` to ``2**(j+1)`` messages back and moves on by one grid step at the very batch where
    ``g_(j-1)`` leaves that grid point, whose mark is then still kept: so each ``j`` keeps a mark between ``2**j``
    and ``2**(j+1)`` messages (plus a batch) back, and wherever a loss begins, ``d`` messages below the position,
    a kept mark lies less than ``3 * d`` plus a batch below it."""
    below = sorted((offset for offset in marks if offset < position), reverse=True)
    kept = set([offset for offset in below if marks[offset] == START][-1:])  # the lowest start mark (one at most)
    rest = [offset for offset in below if marks[offset] != START]
    kept.update(rest[:RECENT_MARKS])
    older, level, added = rest[RECENT_MARKS:], 0, 0
    while older and added < OLDER_MARKS:
        step = record_size << level
        grid = (position - step) // step * step
        nearest = next((offset for offset in older if offset <= grid), None)
        if nearest is None:
            break
        if nearest not in kept:
            kept.add(nearest)
            added += 1
        level += 1
    return {offset: marks[offset] for offset in sorted(kept)}


@dataclass(frozen=True)
class Divergence:
    """Where a partition resumes after its broker lost messages: ``resume``, the highest mark whose message the
    broker still holds unchanged (``None``: no such mark, not even a start mark); the broker's offsets diverge from
    what the query read at an offset in ``[resume, differs)``, ``differs`` the lowest mark above ``resume`` known to
    differ (or the position)."""

    resume: int | None
    differs: int
    reads: int
    """Fingerprints read to find it."""
    begins: bool = False
    """``resume`` is the start mark: no later mark matches."""


def find_divergence(marks: Mapping[int, int], *, differs: int, held_below: int,
                    read: Callable[[int], int | None]) -> Divergence:
    """Walk ``marks`` down from the highest one below ``differs`` (an offset known to differ: the position, or the
    lowest mark above the broker's end) and at most ``held_below`` (the broker's end: a mark above it names a message
    the broker no longer holds); the first whose fingerprint ``read(offset)`` still gives is where to resume. A start
    mark matches without a read. ``read`` may raise (the caller tries again later); ``None`` (no message to tell)
    counts as different: resuming lower re-reads, never skips."""
    reads = 0
    for offset in sorted((offset for offset in marks if offset < differs), reverse=True):
        if offset > held_below:
            differs = offset
            continue
        if marks[offset] == START:
            return Divergence(offset, differs, reads, begins=True)
        reads += 1
        if read(offset) == marks[offset]:
            return Divergence(offset, differs, reads)
        differs = offset
    return Divergence(None, differs, reads)
