"""Packing a write task's rows into InLong bundles: one open bundle per key, closed by rows, bytes or age.

Broker-neutral: a sink decides the key (for TubeMQ: topic, partition, streamId, msgTime minute and the
rows' attributes; for TANK: topic and partition), the byte cost of each record, what travels with each
record's body (InLong: its attributes; TANK: its key and timestamp) and where a closed bundle goes.
:class:`Bundler` only keeps the open bundles and says which are complete:

* full: ``max_rows`` records, or the next record would take the bundle past ``max_bytes``;
* old: opened ``linger_s`` or more ago (checked by :meth:`Bundler.expired`, which the sink calls as rows
  arrive: rows come in Arrow batches, there is no timer);
* too many open: more than ``max_open`` keys open at once closes the oldest (bounds memory when rows
  carry many distinct attribute sets);
* the end of the task: :meth:`Bundler.drain` returns everything left.

:func:`encode_bundle` writes one bundle as InLongMsg (v1, the codec's recommended version) and splits
it in two while the encoded bytes exceed the limit (incompressible records under Snappy).
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from typing import Generic, TypeVar

from tubespark.errors import MessageTooLargeError
from tubespark.formats import encode_inlongmsg

BUNDLE_HEADER_BYTES = 16  # v1: magic, create time, group count, trailing magic
RECORD_OVERHEAD_BYTES = 4  # v1: the int32 length before each record
GROUP_OVERHEAD_BYTES = 7  # v1: attribute length (2), data length (4), compression flag (1)


def attributes_cost(attributes: Mapping[str, str]) -> int:
    """Bytes of ``k=v&k=v`` text plus a group's framing: what a distinct attribute set adds to a bundle."""
    return GROUP_OVERHEAD_BYTES + sum(len(k) + len(v) + 2 for k, v in attributes.items())


K = TypeVar("K", bound=Hashable)  # a sink's bundle key
X = TypeVar("X")  # what a sink keeps with each record's body


@dataclass
class Bundle(Generic[K, X]):
    """An open or closed bundle: its key, its records ``(body, extra)``, the task rows they came from.

    ``extra`` is whatever the sink's encoder needs besides the body (InLong: the record's attributes).
    """

    key: K
    records: list[tuple[bytes, X]] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    size: int = BUNDLE_HEADER_BYTES
    opened: float = 0.0


class Bundler(Generic[K, X]):
    """The open bundles of one write task, by key."""

    def __init__(self, *, max_rows: int, linger_s: float, max_open: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_rows < 1 or max_open < 1 or linger_s < 0:
            raise ValueError("max_rows and max_open must be >= 1, linger_s >= 0")
        self.max_rows = max_rows
        self.linger_s = linger_s
        self.max_open = max_open
        self.clock = clock
        self._open: dict[K, Bundle[K, X]] = {}  # insertion order = opening order

    @property
    def open_count(self) -> int:
        return len(self._open)

    def is_open(self, key: K) -> bool:
        return key in self._open

    def add(self, key: K, body: bytes, extra: X, *, cost: int, max_bytes: int,
            row: int) -> list[Bundle[K, X]]:
        """Add one record (``cost`` bytes in the encoded bundle) under ``key``; return the bundles this closed.

        A record that does not fit an open bundle's remaining ``max_bytes`` closes it and starts a new one;
        a record larger than ``max_bytes`` on its own still gets a bundle (the encoder decides whether the
        broker takes it).
        """
        closed: list[Bundle[K, X]] = []
        bundle = self._open.get(key)
        if bundle is not None and bundle.size + cost > max_bytes:
            closed.append(self._open.pop(key))
            bundle = None
        if bundle is None:
            if len(self._open) >= self.max_open:
                closed.append(self._open.pop(next(iter(self._open))))
            bundle = Bundle(key, opened=self.clock())
            self._open[key] = bundle
        bundle.records.append((body, extra))
        bundle.rows.append(row)
        bundle.size += cost
        if len(bundle.records) >= self.max_rows or bundle.size >= max_bytes:
            closed.append(self._open.pop(key))
        return closed

    def add_run(self, key: K, bodies: Sequence[bytes], extra: X, *, overhead: int, open_cost: int, max_bytes: int,
                first_row: int) -> list[Bundle[K, X]]:
        """:meth:`add` of each of ``bodies`` in turn under one ``key``, all with the same ``extra``: record ``i``
        costs ``overhead + len(bodies[i])``, plus ``open_cost`` when ``key`` has no open bundle as it is added,
        and is row ``first_row + i``. The same bundles as one :meth:`add` per record, a bundle's worth of
        records at a time (the rows of a sink's Arrow batch mostly share one key)."""
        closed: list[Bundle[K, X]] = []
        sums = list(accumulate(len(body) + overhead for body in bodies))  # sums[i]: records 0..i
        i, n = 0, len(bodies)
        while i < n:
            cost = overhead + len(bodies[i]) + (open_cost if self._open.get(key) is None else 0)
            closed += self.add(key, bodies[i], extra, cost=cost, max_bytes=max_bytes, row=first_row + i)
            i += 1
            bundle = self._open.get(key)
            if bundle is None or i == n:
                continue
            # the records after it that fit the open bundle whole and leave it open, as add() would take them
            room_rows = self.max_rows - len(bundle.records)
            limit = sums[i - 1] + max_bytes - bundle.size  # record j fits while sums[j] <= limit
            end = min(n, i + room_rows, bisect_right(sums, limit, i, n))
            if end > i:
                bundle.records += zip(bodies[i:end], repeat(extra))
                bundle.rows += range(first_row + i, first_row + end)
                bundle.size += sums[end - 1] - sums[i - 1]
                i = end
                if len(bundle.records) >= self.max_rows or bundle.size >= max_bytes:
                    closed.append(self._open.pop(key))
        return closed

    def expired(self) -> list[Bundle[K, X]]:
        """Close and return the bundles opened ``linger_s`` or more ago."""
        if not self._open:
            return []
        now = self.clock()
        old = [key for key, bundle in self._open.items() if now - bundle.opened >= self.linger_s]
        return [self._open.pop(key) for key in old]

    def drain(self) -> list[Bundle[K, X]]:
        """Close and return every open bundle (the end of the task)."""
        closed, self._open = list(self._open.values()), {}
        return closed


def encode_bundle(records: Sequence[tuple[bytes, Mapping[str, str]]], rows: list[int], *, compress: bool, limit: int,
                  describe: Callable[[int], str]) -> list[tuple[bytes, list[int]]]:
    """``[(payload, rows)]``: the records as InLongMsg v1 bundles of at most ``limit`` bytes each.

    One bundle unless it encodes larger than ``limit``; then the records are split in halves until every
    part fits. A single record that does not fit raises :class:`MessageTooLargeError` with ``describe(row)``.
    """
    payload = encode_inlongmsg(records, version=1, compress=compress)
    if len(payload) <= limit:
        return [(payload, rows)]
    if len(records) == 1:
        raise MessageTooLargeError(f"{describe(rows[0])}: its bundle is {len(payload)} bytes, over the "
                                   f"{limit} bytes a message of this topic may hold: make the row smaller")
    half = len(records) // 2
    return (encode_bundle(records[:half], rows[:half], compress=compress, limit=limit, describe=describe)
            + encode_bundle(records[half:], rows[half:], compress=compress, limit=limit, describe=describe))
