"""Driver side: each partition's bounds, as DiscoverPartitions tells them.

A partition's readable numbers are ``[first, next)``: ``first`` is the broker's first available sequence
number and ``next`` its high-water mark + 1 (docs/tank/protocol.md#discoverpartitions). An empty
partition reports ``first == next`` (nothing yet; the next message gets ``next``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tubespark.spark.offset_rules import OffsetUnits
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


_SEEN: set[str] = set()
"""Every partition this process discovered: what a batch read covers when its broker is down and cannot list them."""


def known_partitions(options: TankOptions) -> tuple[str, ...]:
    """The partitions of the option's topics this process knows of without asking the broker: those it discovered
    before and those the ``startingOffsets`` / ``endingOffsets`` JSON names."""
    named = {key for spec in (options.starting_offsets, options.ending_offsets) if isinstance(spec, dict)
             for key in spec}
    topics = set(options.topics or ())
    return tuple(sorted(key for key in _SEEN | named if key.rsplit(":", 1)[0] in topics))


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
        _SEEN.update(found)
        return found
    finally:
        if own:
            client.close()


UNITS = OffsetUnits(1, "next sequence number", "sequence number")
"""TANK's sequence numbers count messages: every number in bounds is a message boundary."""

PARTITION_LISTING = "keys are topic:partition; a topic's partitions are 0 up to its partition count - 1"
