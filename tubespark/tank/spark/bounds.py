"""Driver side: each partition's bounds, and what ``startingOffsets`` / ``endingOffsets`` mean for it.

A partition's readable numbers are ``[first, next)``: ``first`` is the broker's first available sequence
number and ``next`` its high-water mark + 1 (docs/tank/protocol.md#discoverpartitions). An empty
partition reports ``first == next`` (nothing yet; the next message gets ``next``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tubespark.errors import OptionError
from tubespark.spark.offsets import EARLIEST, LATEST, OffsetSpec, resolve_offset
from tubespark.tank.client.broker import TankClient
from tubespark.tank.spark.options import TankOptions, partition_key


@dataclass(frozen=True)
class Bounds:
    topic: str
    partition: int
    first: int
    next: int

    @property
    def key(self) -> str:
        return partition_key(self.topic, self.partition)


def discover(options: TankOptions, client: TankClient | None = None) -> dict[str, Bounds]:
    """``{key: Bounds}`` of every partition of the option's topics (UnknownTopicError for a missing topic)."""
    own = client is None
    client = client or TankClient(options.broker, options.client_settings())
    try:
        found: dict[str, Bounds] = {}
        for topic in options.topics or ():
            for info in client.partitions(topic):
                following = info.high_water_mark + 1
                first = min(max(info.first_available, 1), following)
                found[partition_key(topic, info.partition)] = Bounds(topic, info.partition, first, following)
        return found
    finally:
        if own:
            client.close()


def resolve(spec: OffsetSpec, bounds: Bounds, *, default: int, option: str) -> int:
    """The sequence number ``spec`` means for a partition; an explicit number must lie in ``[first, next]``
    unless it is below ``first`` (the caller decides whether that is data loss)."""
    value = resolve_offset(spec, bounds.key, earliest=bounds.first, latest=bounds.next, default=default)
    if value > bounds.next:
        raise OptionError(f"option {option}: {bounds.key} is at {value}, beyond the partition's next sequence number "
                          f"{bounds.next} (high-water mark + 1): use latest or a number up to {bounds.next}")
    return value


__all__ = ["EARLIEST", "LATEST", "Bounds", "discover", "resolve"]
