"""Messages in offset ranges, counted per store: what offsets mean when a store holds several partitions.

An offset is a position in a *store's* index, and each 28-byte index record is one message of one of the
store's partitions (``docs/tubemq/brokers.md``, "Several partitions per store"). So ``(end - start) / 28``
counts the messages of the whole store in ``[start, end)``, never those of one partition: with ``k``
partitions per store and producers spreading over them, a partition's own messages are about ``1/k`` of
it, and summing ``(end - start) / 28`` over the partitions of a store counts every message ``k`` times.

The rule: count per store, each index record once. The partitions of a store read over one common range
``[start, end)`` hold exactly ``(end - start) / 28`` messages between them; with different ranges, the
records in the union of their ranges bound the count from above (each record belongs to one partition and
is read only when it lies in that partition's range).
"""

from __future__ import annotations

from collections.abc import Mapping

from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE
from tubespark.tubemq.wire.formats import PartitionRef

StoreKey = tuple[int, str, int]
"""``(broker id, topic, store id)``: the partitions that share one index."""


def store_of(ref: PartitionRef) -> StoreKey:
    return (ref.broker_id, ref.topic, ref.store_id)


def by_store(ranges: Mapping[PartitionRef, tuple[int, int]]) -> dict[StoreKey, list[tuple[int, int]]]:
    """The ranges grouped by the store whose index they are positions in."""
    out: dict[StoreKey, list[tuple[int, int]]] = {}
    for ref, span in ranges.items():
        out.setdefault(store_of(ref), []).append(span)
    return out


def max_messages(ranges: Mapping[PartitionRef, tuple[int, int]]) -> int:
    """At most this many messages lie in ``ranges`` (``[start, end)`` per partition): per store, the index
    records of the union of its partitions' ranges, each counted once. Exact when :func:`exact_messages` is."""
    total = 0
    for spans in by_store(ranges).values():
        reach = None
        for start, end in sorted(span for span in spans if span[1] > span[0]):
            if reach is None or start >= reach:
                total += end - start
            elif end > reach:
                total += end - reach
            reach = end if reach is None else max(reach, end)
    return total // INDEX_RECORD_SIZE


def exact_messages(ranges: Mapping[PartitionRef, tuple[int, int]]) -> int | None:
    """The number of messages in ``ranges`` when the offsets alone tell it, else None.

    They do when, in every store, all partitions named share one range: then that range's records are
    exactly their messages. The caller must name every partition of each store it reads (a plan over a
    topic does; one that picks single partitions of shared stores does not) and read unfiltered (a
    ``streamIds`` filter skips records).
    """
    total = 0
    for spans in by_store(ranges).values():
        if len(set(spans)) > 1:
            return None
        start, end = spans[0]
        total += max(0, end - start) // INDEX_RECORD_SIZE
    return total
