"""Reading an exact offset range [start, end) of one partition, and learning a partition's bounds.

TubeMQ offsets are byte positions in a store's index file (28 bytes a record) and GetMessage returns
no per-message offsets: only where a batch started. So a range read works on batch boundaries:

* register to the broker at ``start`` under a private *read group* (never the user's group, whose
  stored offset only moves when Spark commits), then fetch in auto-commit mode: each reply's
  ``currOffset`` is where that batch started, i.e. where the previous batch ended;
* a batch that lies wholly below ``end`` is emitted; one that starts at or after ``end`` stops the read;
* a batch that straddles ``end`` (new data arrived after the range was planned) is cut exactly: when
  its index span holds only its own records (``span == 28 * count``) by counting, otherwise (the
  store holds several partitions, or a filter skipped records) by fetching again from ``end`` and
  dropping the messages, identified by messageId, that lie at or beyond ``end``.

Per-message ``offset``: exact (``batchStart + 28*k``) in dense batches; in sparse batches the same
formula is a lower bound that still increases strictly within the partition.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from tubespark.core.retry import RetryPolicy, call_with_retry, poll
from tubespark.errors import DataLossError, NoDataError, PartitionOccupiedError, TubeSparkError
from tubespark.tubemq.client.broker import BrokerClient, Fetch, Position
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE
from tubespark.tubemq.wire.formats import PartitionRef
from tubespark.tubemq.wire.message import ReceivedMessage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Bounds:
    """The readable index range of a partition's store: ``[min_offset, max_offset)``."""

    min_offset: int
    max_offset: int


def _register(broker: BrokerClient, part: PartitionRef, group: str, offset: int, filters: tuple[str, ...],
              wait_s: float) -> Position:
    """Register at ``offset``, waiting out a stale holder (410) for at most ``wait_s``.

    Only the stale holder is waited out: a read group is private, so the holder is our own earlier
    registration that the broker has not timed out yet. Other errors are the caller's to handle.
    """
    return call_with_retry(lambda: broker.register(part, group, offset=offset, filters=filters),
                           RetryPolicy(timeout_s=wait_s, backoff_s=0.5, max_backoff_s=2.0,
                                       retry_on=PartitionOccupiedError),
                           what=f"register {part.key} for {group}")


def probe_bounds(broker: BrokerClient, part: PartitionRef, probe_group: str, *,
                 occupied_wait_s: float = 40.0) -> Bounds:
    """Learn ``[min, max)`` of ``part`` by registering a private probe group at offset 0 (clamped to min)."""
    try:
        position = _register(broker, part, probe_group, 0, (), occupied_wait_s)
    finally:
        _release(broker, part, probe_group)
    return Bounds(position.offset, max(position.max_offset, position.offset))


def _align_up(offset: int) -> int:
    """Records sit at multiples of 28, so "at or after x" means "at or after x rounded up". Seeking to a
    position inside a record would make the broker misread the index."""
    return -(-offset // INDEX_RECORD_SIZE) * INDEX_RECORD_SIZE


def _release(broker: BrokerClient, part: PartitionRef, group: str) -> None:
    try:
        broker.unregister(part, group)
    except TubeSparkError as exc:
        log.debug("releasing %s for %s failed: %s", part.key, group, exc)


class RangeReader:
    """Reads ``[start, end)`` of one partition under a private read group.

    Args:
        broker: a BrokerClient whose client id is used for the read group's registration.
        read_group: a group used by nobody else for this partition at the same time.
        filters: streamIds (msgType) to filter on the broker.
        fail_on_data_loss: when ``start`` is below the store's min offset (retention removed it),
            raise DataLossError; when false, read from min and count the loss in ``lost_offsets``.
        retry_s: how long to wait out transient broker answers (busy, moved, a stale holder).
    """

    def __init__(self, broker: BrokerClient, read_group: str, *, filters: tuple[str, ...] = (),
                 fail_on_data_loss: bool = True, verify_checksums: bool = True, retry_s: float = 60.0) -> None:
        self.broker = broker
        self.read_group = read_group
        self.filters = tuple(filters)
        self.fail_on_data_loss = fail_on_data_loss
        self.verify_checksums = verify_checksums
        self.retry_s = retry_s
        self.lost_offsets = 0
        self._fetch_retry = RetryPolicy(timeout_s=retry_s)
        # Data below ``end`` that is not visible yet (a filtered read served from flushed files only)
        # is waited for; when it never comes, the broker lost it.
        self._data_wait = RetryPolicy(timeout_s=retry_s, backoff_s=0.2, max_backoff_s=1.0)

    def read(self, part: PartitionRef, start: int, end: int) -> Iterator[ReceivedMessage]:
        """Yield every message of ``part`` in ``[start, end)``, in order, exactly once."""
        for batch in self.read_batches(part, start, end):
            yield from batch

    def read_batches(self, part: PartitionRef, start: int, end: int) -> Iterator[list[ReceivedMessage]]:
        """Like :meth:`read`, one list per broker fetch (nothing is buffered beyond one fetch)."""
        start = _align_up(start)
        if end <= start:
            return
        position = _register(self.broker, part, self.read_group, start, self.filters, self.retry_s).offset
        try:
            if position > start:
                gap = f"offsets [{start}, {position}) of {part.key} are gone (below the broker's minimum {position})"
                if self.fail_on_data_loss:
                    raise DataLossError(gap + "; set failOnDataLoss=false to skip lost data")
                log.warning("%s; skipping them", gap)
                self.lost_offsets += position - start
            elif position < start:
                raise DataLossError(f"{part.key}: planned start {start} is beyond the broker's max offset "
                                    f"{position}; the partition was truncated or recreated")
            yield from self._read_from(part, position, end)
        finally:
            _release(self.broker, part, self.read_group)

    def _fetch(self, part: PartitionRef) -> Fetch | None:
        """One fetch with auto-commit of the previous batch; ``None`` when the position reached max.

        Retriable answers (busy, moved, a broken connection) are retried for ``retry_s``.
        """
        def once() -> Fetch | None:
            try:
                return self.broker.fetch(part, self.read_group, last_consumed=True)
            except NoDataError:  # retriable for a consumer, but here it is the answer: nothing more yet
                return None

        return call_with_retry(once, self._fetch_retry, what=f"fetch {part.key} for {self.read_group}")

    def _read_from(self, part: PartitionRef, position: int, end: int) -> Iterator[list[ReceivedMessage]]:
        pending: Fetch | None = None
        while True:
            fetch = self._fetch(part)
            if fetch is None:
                # The position reached the index max. Commit to learn where the pending batch ended.
                batch_end = self.broker.commit(part, self.read_group).offset
                if pending is not None:
                    yield self._cut(part, pending, batch_end, end)
                    pending = None
                if batch_end >= end:
                    return
                fetch = poll(lambda: self._fetch(part), self._data_wait,
                             what=f"{part.key}: data between {batch_end} and the planned end {end}")
                if fetch is None:
                    raise DataLossError(f"{part.key}: the broker's max offset stays at {batch_end}, below the "
                                        f"planned end {end}; data was removed or the broker lost it")
            if pending is not None:
                yield self._cut(part, pending, fetch.start, end)
            if fetch.start >= end:
                return
            pending = fetch

    def _cut(self, part: PartitionRef, batch: Fetch, batch_end: int, end: int) -> list[ReceivedMessage]:
        """The messages of ``batch`` (which spans ``[batch.start, batch_end)``) that lie below ``end``."""
        messages = batch.decode(self.verify_checksums)
        if batch_end <= end:
            return messages
        if batch_end - batch.start == INDEX_RECORD_SIZE * len(messages):  # dense: message k is at start + 28k
            # message k is in range when start + 28k < end: round up, or an unaligned end drops a message
            return messages[: (_align_up(end) - batch.start) // INDEX_RECORD_SIZE]
        beyond = self._message_ids_between(part, _align_up(end), batch_end)
        return [m for m in messages if m.message_id not in beyond]

    def _message_ids_between(self, part: PartitionRef, low: int, high: int) -> set[int]:
        """Ids of this partition's messages at index positions in ``[low, high)`` (via a second read)."""
        _register(self.broker, part, self.read_group, low, self.filters, self.retry_s)
        ids: set[int] = set()
        while True:
            fetch = self._fetch(part)
            if fetch is None or fetch.start >= high:
                return ids
            ids.update(m.messageId for m in fetch.messages)
