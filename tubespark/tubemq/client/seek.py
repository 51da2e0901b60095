"""Finding where a partition reaches a point in time: a bounded binary search over message times.

TubeMQ has no time-to-offset call a client can make (docs/tubemq/protocol.md, "Time"): the broker's
own time search runs only on its offset-history store, and its web methods reset a *group* to where it
was at a time, which says nothing for a new group. What a client can see is each message's ``msgTime``
(``yyyyMMddHHmm``, minute precision, set by the producer). So the search reads single messages at
chosen offsets under a private group and bisects the index range, ``ceil(log2(n + 1))`` reads for
``n`` records (about 20 for a million), each a register, one fetch and a release.

Semantics, stated once for the documentation (docs/tubemq/guide.md#reading-by-time) and the options:

* times compare by the minute, in UTC (tubespark writes ``msgTime`` in UTC; a producer writing local
  time shifts the answer by its UTC offset): the answer is the first message whose minute is at or
  after the minute holding ``when``, so a start by time may include up to 59 s before ``when``, and an
  end by time (exclusive) stops before that minute: ``[t1, t2)`` followed by ``[t2, t3)`` reads each
  message once;
* a message without ``msgTime`` takes the time of the next timed message within :data:`PROBE_WINDOW`
  records (a window with none counts as older than any time), so untimed messages just before the
  first timed message of the minute are read with it;
* the bisection assumes times do not go down along the partition; where producers' times are out of
  order it still returns a position where they cross ``when``, not necessarily the first one.
"""

from __future__ import annotations

import logging
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime

from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.ranges import Bounds, RangeReader
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE
from tubespark.tubemq.wire.formats import PartitionRef
from tubespark.tubemq.wire.message import parse_msg_time

log = logging.getLogger(__name__)

PROBE_WINDOW = 32
"""Records one probe may look through for a message that has a time (one fetch)."""

_MINUTE_MS = 60_000


@dataclass(frozen=True)
class TimeSeek:
    """Where a partition reaches a time: ``offset`` (``None``: every timed message is older) and the cost."""

    offset: int | None
    probes: int


def minute_of(when_ms: int) -> int:
    """Minutes since the epoch of a time in epoch milliseconds (UTC)."""
    return when_ms // _MINUTE_MS


def describe_time(when_ms: int) -> str:
    """``when_ms`` for messages: the number and its UTC date."""
    return f"{when_ms} ({datetime.fromtimestamp(when_ms / 1000, UTC):%Y-%m-%d %H:%M:%S} UTC)"


def offset_at_time(broker: BrokerClient, part: PartitionRef, bounds: Bounds, when_ms: int, group: str, *,
                   verify_checksums: bool = True, retry_s: float = 30.0) -> TimeSeek:
    """The first offset of ``part`` within ``bounds`` whose message's minute is at or after ``when_ms``'s.

    ``group`` must be private to this search (its registrations come and go with each probe).
    """
    reader = RangeReader(broker, group, verify_checksums=verify_checksums, retry_s=retry_s)
    target = minute_of(when_ms)
    records = max(0, bounds.max_offset - bounds.min_offset) // INDEX_RECORD_SIZE
    probes = 0

    def minute_at(index: int) -> int | None:
        nonlocal probes
        probes += 1
        start = bounds.min_offset + index * INDEX_RECORD_SIZE
        end = min(bounds.max_offset, start + PROBE_WINDOW * INDEX_RECORD_SIZE)
        with closing(reader.read_batches(part, start, end)) as batches:  # closing releases the registration
            for batch in batches:
                for message in batch:
                    when = parse_msg_time(message.msg_time)
                    if when is not None:
                        return minute_of(int(when.timestamp() * 1000))
        return None

    low, high = 0, records
    while low < high:
        middle = (low + high) // 2
        minute = minute_at(middle)
        if minute is not None and minute >= target:
            high = middle
        else:
            low = middle + 1
    offset = None if low == records else bounds.min_offset + low * INDEX_RECORD_SIZE
    log.info("partition %s reaches %s at %s after %d probe reads", part.key, describe_time(when_ms),
             "no offset (every timed message is older)" if offset is None else f"offset {offset}", probes)
    return TimeSeek(offset, probes)
