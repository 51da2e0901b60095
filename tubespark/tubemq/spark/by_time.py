"""Starting and ending reads by time (``startingTimestamp``, ``endingTimestamp`` and their per-partition
maps), shared by the batch and the stream reader. The search and its precision: tubespark/tubemq/client/seek.py."""

from __future__ import annotations

from tubespark.errors import OptionError
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.ranges import Bounds
from tubespark.tubemq.client.seek import describe_time, offset_at_time
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.formats import PartitionRef


def start_at_time(broker: BrokerClient, ref: PartitionRef, bounds: Bounds, when_ms: int, group: str,
                  options: TubeMQOptions) -> int:
    """The first offset at or after ``when_ms``; a partition with none follows
    ``startingOffsetsByTimestampStrategy`` (``latest``: its max offset; ``error``: OptionError naming it)."""
    seek = offset_at_time(broker, ref, bounds, when_ms, group, verify_checksums=options.verify_checksums)
    if seek.offset is not None:
        return seek.offset
    if options.starting_offsets_by_timestamp_strategy == "latest":
        return bounds.max_offset
    raise OptionError(f"partition {ref.key} has no message at or after the start time {describe_time(when_ms)} "
                      f"(searched {seek.probes} messages' msgTime); set startingOffsetsByTimestampStrategy=latest "
                      f"to start such partitions at their latest offset")


def end_at_time(broker: BrokerClient, ref: PartitionRef, bounds: Bounds, when_ms: int, group: str,
                options: TubeMQOptions) -> int:
    """The end (exclusive) of a read up to ``when_ms``: a partition with no message at or after it is read
    to its max offset."""
    seek = offset_at_time(broker, ref, bounds, when_ms, group, verify_checksums=options.verify_checksums)
    return bounds.max_offset if seek.offset is None else seek.offset
