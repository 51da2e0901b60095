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

Faults (issue 10): a read survives a connection reset, a broker slower than the request timeout, a
broker that stops answering or answers with another serial number. A fetch whose answer was lost may
still have moved the broker's position (the broker counted the batch as in flight, and the next
auto-commit fetch would fold it in and skip it), so a failed fetch is never simply sent again: the
reader drops what it had fetched but not yielded yet, registers the read group again at the end of
the last batch it yielded (a batch boundary the broker reported) and fetches from there. Nothing is
yielded twice and nothing is skipped. Tries are bounded by one :class:`RetryPolicy` (``retry_s``, with
backoff) per batch; after that :class:`~tubespark.errors.RangeReadError` (not retriable: the budget was
the retry) names the broker, the partition, the range and how far the read got, with the last fault as
its cause, whatever kind of retriable fault it was (a lost connection, a busy broker, a stale holder).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass

from tubespark.core.retry import RetryPolicy, call_with_retry, poll
from tubespark.errors import BrokerConnectionError, DataLossError, NoDataError, RangeReadError, TubeSparkError
from tubespark.tubemq.client.broker import BrokerClient, Fetch, Position
from tubespark.tubemq.errors import PartitionOccupiedError
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE
from tubespark.tubemq.wire.fetch import Columns, ValueArena
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
    except BrokerConnectionError:
        raise  # the broker is silent or gone: a release would wait a second timeout (it expires the probe itself)
    except BaseException:
        _release(broker, part, probe_group)
        raise
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


@dataclass
class _Cursor:
    """Where one range read stands: everything of ``[start, next_offset)`` was yielded, and only that.

    ``pending`` is a fetched batch not yielded yet (its end is learnt from the next fetch), ``decoded``
    its messages once decoded (while the next fetch is in flight); ``open``
    says whether the read group is registered at the broker for this read right now.
    """

    part: PartitionRef
    start: int
    end: int
    next_offset: int
    pending: Fetch | None = None
    decoded: Columns | None = None
    open: bool = False
    done: bool = False
    yielded: int = 0
    faults: int = 0
    broken: bool = False  # the last try failed on the connection (silent, reset, refused)


class RangeReader:
    """Reads ``[start, end)`` of one partition under a private read group.

    Args:
        broker: a BrokerClient whose client id is used for the read group's registration.
        read_group: a group used by nobody else for this partition at the same time.
        filters: streamIds (msgType) to filter on the broker.
        fail_on_data_loss: when ``start`` is below the store's min offset (retention removed it),
            raise DataLossError; when false, read from min and count the loss in ``lost_offsets``.
        retry_s: how long to wait out broker faults (a broken or silent connection, busy, moved, a
            stale holder) before a batch is given up with :class:`RangeReadError`.
        data_wait_s: how long data below ``end`` that is not visible yet is waited for before it counts
            as lost (default ``retry_s``; a read task keeps it long while its ``retry_s`` is one short attempt).
    """

    def __init__(self, broker: BrokerClient, read_group: str, *, filters: tuple[str, ...] = (),
                 fail_on_data_loss: bool = True, verify_checksums: bool = True, retry_s: float = 60.0,
                 data_wait_s: float | None = None, arena: ValueArena | None = None) -> None:
        """``arena``: where the fetches' values go (a read task's, so that its batches of several fetches take
        them with no copy); None: each fetch's into a buffer of its own."""
        self.broker = broker
        self.arena = arena
        self.read_group = read_group
        self.filters = tuple(filters)
        self.fail_on_data_loss = fail_on_data_loss
        self.verify_checksums = verify_checksums
        self.retry_s = retry_s
        self.lost_offsets = 0
        self.resumes = 0
        """How often a read registered again after a fault (for tests and logs)."""
        self._fault_retry = RetryPolicy(timeout_s=retry_s, backoff_s=0.2, max_backoff_s=2.0)
        # Data below ``end`` that is not visible yet (a filtered read served from flushed files only)
        # is waited for; when it never comes, the broker lost it.
        self._data_wait = RetryPolicy(timeout_s=retry_s if data_wait_s is None else data_wait_s, backoff_s=0.2,
                                      max_backoff_s=1.0)

    def read(self, part: PartitionRef, start: int, end: int) -> Iterator[ReceivedMessage]:
        """Yield every message of ``part`` in ``[start, end)``, in order, exactly once."""
        for batch in self.read_batches(part, start, end):
            yield from batch

    def read_batches(self, part: PartitionRef, start: int, end: int) -> Generator[list[ReceivedMessage]]:
        """Like :meth:`read`, one list per broker fetch (nothing is buffered beyond one fetch)."""
        for columns in self.read_columns(part, start, end):
            yield columns.messages()

    def read_columns(self, part: PartitionRef, start: int, end: int) -> Iterator[Columns]:
        """Like :meth:`read_batches`, each fetch's messages as columns (the Spark read's fast path).

        Each step to the next batch is retried on retriable faults for ``retry_s``, resuming at the end
        of the last yielded batch; see the module docstring.
        """
        start = _align_up(start)
        if end <= start:
            return
        cursor = _Cursor(part, start, end, start)
        try:
            while True:
                batch = self._next_batch(cursor)
                if batch is None:
                    return
                cursor.yielded += len(batch)
                yield batch
        finally:
            # Not after a connection fault: the release would wait a timeout more past the read's budget, on
            # a broker that expires the registration itself (consumerRegTimeoutMs).
            if not cursor.broken:
                _release(self.broker, part, self.read_group)

    def _next_batch(self, cursor: _Cursor) -> Columns | None:
        """The next batch (``None`` at the end), retrying faults; RangeReadError once they persist."""
        started = time.monotonic()
        try:
            return call_with_retry(lambda: self._step(cursor), self._fault_retry,
                                   what=f"read {cursor.part.key} [{cursor.next_offset}, {cursor.end}) "
                                        f"from {cursor.part.broker.address}")
        except TubeSparkError as exc:
            if not exc.retriable:
                raise  # data loss, a bad request, a checksum: retrying cannot help, the type says what it is
            part = cursor.part
            text = (f"reading partition {part.key} from broker {part.broker.address} failed: offsets "
                    f"[{cursor.start}, {cursor.end}) were planned, every message below {cursor.next_offset} was "
                    f"read ({cursor.yielded} messages); gave up after {cursor.faults} faults in "
                    f"{time.monotonic() - started:.1f}s (retry budget {self.retry_s:g}s); check that the broker is "
                    f"up (Spark retries the task)")
            raise RangeReadError(f"{text}: {type(exc).__name__}: {exc}", broker=part.broker.address,
                                 partition=part.key, start=cursor.start, end=cursor.end, reached=cursor.next_offset,
                                 messages=cursor.yielded, tries=cursor.faults) from exc

    def _step(self, cursor: _Cursor) -> Columns | None:
        """One try at the next batch. A failure forgets the registration and the unyielded batch, so the
        next try registers again at ``cursor.next_offset``: the end of what was yielded."""
        try:
            batch = self._advance(cursor)
        except Exception as exc:
            cursor.faults += 1
            cursor.broken = isinstance(exc, BrokerConnectionError)
            cursor.open, cursor.pending, cursor.decoded = False, None, None
            if getattr(exc, "retriable", False):
                log.info("reading %s from %s: %s; resuming at %d", cursor.part.key, cursor.part.broker.address,
                         exc, cursor.next_offset)
            raise
        cursor.broken = False
        return batch

    def _open(self, cursor: _Cursor) -> None:
        """Register the read group at ``cursor.next_offset``; check what the broker still holds there."""
        part, wanted = cursor.part, cursor.next_offset
        if wanted != cursor.start:
            self.resumes += 1
        position = self.broker.register(part, self.read_group, offset=wanted, filters=self.filters).offset
        if position > wanted:
            gap = f"offsets [{wanted}, {position}) of {part.key} are gone (below the broker's minimum {position})"
            if self.fail_on_data_loss:
                raise DataLossError(gap + "; set failOnDataLoss=false to skip lost data")
            log.warning("%s; skipping them", gap)
            self.lost_offsets += position - wanted
            cursor.next_offset = position
        elif position < wanted:
            raise DataLossError(f"{part.key}: planned start {wanted} is beyond the broker's max offset "
                                f"{position}; the partition was truncated or recreated, or the checkpoint is another "
                                f"cluster's: start the query from a new checkpoint")
        cursor.open, cursor.pending, cursor.decoded = True, None, None

    def _advance(self, cursor: _Cursor) -> Columns | None:
        if cursor.done:
            return None
        if not cursor.open:
            self._open(cursor)
        part, end = cursor.part, cursor.end
        while True:
            fetch = self._fetch_decoding(cursor)
            if fetch is None:
                # The position reached the index max. Commit to learn where the pending batch ended.
                batch_end = self.broker.commit(part, self.read_group).offset
                if cursor.pending is not None:
                    last = self._emit(cursor, batch_end)
                    cursor.done = batch_end >= end
                    return last
                if batch_end >= end:
                    cursor.done = True
                    return None
                fetch = poll(lambda: self._fetch(part), self._data_wait,
                             what=f"{part.key}: data between {batch_end} and the planned end {end}")
                if fetch is None:
                    raise DataLossError(f"{part.key}: the broker's max offset stays at {batch_end}, below the "
                                        f"planned end {end}; data was removed or the broker lost it: start the "
                                        f"query from a new checkpoint, or check the broker's store")
            batch = self._emit(cursor, fetch.start) if cursor.pending is not None else None
            if fetch.start >= end:
                cursor.done = True
            else:
                cursor.pending, cursor.decoded = fetch, None
            if batch is not None:
                return batch
            if cursor.done:
                return None

    def _fetch_decoding(self, cursor: _Cursor) -> Fetch | None:
        """:meth:`_fetch`, decoding the pending batch while the broker works on the request.

        The request goes out exactly when the blocking fetch would send it (after the previous batch was
        yielded), so the wire sequence, and where a fault resumes, stay the same; only the decode moves
        into the broker's round trip. A decode error cancels the request (its answer is dropped). With the
        compiled twin the messages were decoded into buffers when the answer arrived, in the one walk that
        checked it (``parse_fetch_reply``); what is left here is their attribute texts, and the errors of the
        messages' contents (a checksum, an attribute prefix), raised here by either twin.
        """
        pending_fetch = self.broker.fetch_async(cursor.part, self.read_group, last_consumed=True,
                                                verify=self.verify_checksums, arena=self.arena)
        if cursor.pending is not None and cursor.decoded is None:
            try:
                cursor.decoded = cursor.pending.columns(self.verify_checksums)
            except BaseException:
                pending_fetch.cancel()
                raise
        try:
            return pending_fetch.result()
        except NoDataError:  # retriable for a consumer, but here it is the answer: nothing more yet
            return None

    def _emit(self, cursor: _Cursor, batch_end: int) -> Columns:
        """Cut the pending batch at ``batch_end``/``end``; from now on the read resumes at ``batch_end``."""
        assert cursor.pending is not None
        messages = cursor.decoded if cursor.decoded is not None else cursor.pending.columns(self.verify_checksums)
        messages = self._cut(cursor.part, cursor.pending, messages, batch_end, cursor.end)
        cursor.pending, cursor.decoded, cursor.next_offset = None, None, batch_end
        return messages

    def _fetch(self, part: PartitionRef) -> Fetch | None:
        """One fetch with auto-commit of the previous batch; ``None`` when the position reached max.

        Never retried here: an answer lost on the way may have moved the broker's position (see the
        module docstring), so every fault goes back to :meth:`_step`, which registers again.
        """
        try:
            return self.broker.fetch(part, self.read_group, last_consumed=True, verify=self.verify_checksums,
                                     arena=self.arena)
        except NoDataError:  # retriable for a consumer, but here it is the answer: nothing more yet
            return None

    def _cut(self, part: PartitionRef, batch: Fetch, messages: Columns, batch_end: int,
             end: int) -> Columns:
        """The ``messages`` of ``batch`` (which spans ``[batch.start, batch_end)``) that lie below ``end``."""
        if batch_end <= end:
            return messages
        if batch_end - batch.start == INDEX_RECORD_SIZE * len(messages):  # dense: message k is at start + 28k
            # message k is in range when start + 28k < end: round up, or an unaligned end drops a message
            return messages.head((_align_up(end) - batch.start) // INDEX_RECORD_SIZE)
        return messages.without_ids(self._message_ids_between(part, _align_up(end), batch_end))

    def _message_ids_between(self, part: PartitionRef, low: int, high: int) -> set[int]:
        """Ids of this partition's messages at index positions in ``[low, high)`` (via a second read).

        This moves the registration past ``end``; the read ends right after the cut, and a fault here
        makes the step register again at the cut batch's start.
        """
        self.broker.register(part, self.read_group, offset=low, filters=self.filters)
        ids: set[int] = set()
        while True:
            fetch = self._fetch(part)
            if fetch is None or fetch.start >= high:
                return ids
            ids.update(fetch.columns(self.verify_checksums).message_ids)  # (a read task's answer is not kept)
