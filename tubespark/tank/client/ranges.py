"""Exact range reads: every message with ``start <= seq < end`` of one partition, once, in order.

What makes a TANK range read exact (docs/tank/protocol.md#chunks, #sequence-numbers):

* a chunk starts at a bundle boundary, so messages below the wanted number arrive too: dropped;
* decoding stops at the first message at or past ``end`` (or past the high-water mark), so a range
  never reads into the next micro-batch's;
* a chunk's last bundle may be cut short: the reader keeps what was whole, fetches again from the next
  number it needs with a fetch size of at least the whole cut bundle (doubling it when a cut told too
  little), up to the broker's 64 MiB cap;
* sparse bundles leave gaps in the numbers: a range is done when the next number it needs is at or past
  ``end``, not when it has seen ``end - start`` messages.

Faults: a retriable error (connection lost, timeout, no leader) is retried from the last number handed
out, with core's jittered backoff, for ``retry_s``; a moved leader is followed; after that the read
fails with :class:`~tubespark.errors.RangeReadError` (retriable, its cause chained). When the broker no longer
has numbers the range planned (retention removed them: a boundary fault below the first available
number; or the broker's high-water mark went back below ``end``), ``fail_on_data_loss`` decides: raise
:class:`DataLossError` naming the partition and numbers, or log it and go on with what exists.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from tubespark.core.retry import RetryPolicy, call_with_retry
from tubespark.errors import BrokerConnectionError, DataLossError, RangeReadError, TubeSparkError
from tubespark.tank.client.broker import ClientSettings, TankClient
from tubespark.tank.errors import BoundaryFaultError, LeaderMovedError, TankProtocolError
from tubespark.tank.wire.bundle import MessageColumns, decode_chunk
from tubespark.tank.wire.requests import MAX_FETCH_SIZE, FetchedPartition

log = logging.getLogger(__name__)

DEFAULT_FETCH_SIZE = 1024 * 1024
MAX_STALLS = 8
"""Fetches in a row that move no further (after the fetch size reached the cap) before the broker's
answers count as broken."""


class RangeReader:
    """Reads ranges of one broker's partitions. Not thread-safe: one per task."""

    def __init__(self, address: str, settings: ClientSettings | None = None, *,
                 fetch_size: int = DEFAULT_FETCH_SIZE, retry_s: float = 60.0, fail_on_data_loss: bool = True) -> None:
        self.settings = settings or ClientSettings()
        self.client = TankClient(address, self.settings)
        self.fetch_size = max(1, min(fetch_size, MAX_FETCH_SIZE))
        self.retry_s = retry_s
        self.fail_on_data_loss = fail_on_data_loss
        self.lost: list[tuple[str, int, int, int]] = []
        """``(topic, partition, from, to)`` of numbers found missing with ``fail_on_data_loss`` off."""
        self.refetches = 0
        """Fetches repeated because a chunk's last bundle was cut short."""

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[MessageColumns]:
        """Yield the messages of ``[start, end)`` as columns, one batch per fetch (never an empty one)."""
        seq = start
        fetch_size = self.fetch_size
        stalls = 0
        where = f"{topic}/{partition}"
        while seq < end:
            part = self._fetch(topic, partition, seq, fetch_size, start, end)
            if isinstance(part, int):  # a boundary fault with failOnDataLoss off: where to go on
                seq = part
                continue
            stop = min(end, part.high_water_mark + 1)
            out = MessageColumns()
            result = decode_chunk(part.chunk, part.base_seq, low=seq, stop=stop, out=out)
            if out:
                yield out
            if result.reached_end and stop == end:
                return
            after = result.next_seq if result.next_seq is not None else seq
            if result.cut:
                self.refetches += 1
                grown = max(fetch_size, min(result.need, MAX_FETCH_SIZE))
                if after <= seq and grown == fetch_size:
                    grown = min(fetch_size * 2, MAX_FETCH_SIZE)
                fetch_size = grown
            if after > seq:
                seq, stalls = after, 0
                continue
            if not result.cut and (not part.chunk or result.reached_end) and part.high_water_mark < seq:
                self._missing(where, part.high_water_mark + 1, end,
                              f"the broker's high-water mark {part.high_water_mark} is below the planned end {end}")
                return
            stalls += 1
            if (stalls > MAX_STALLS and fetch_size >= MAX_FETCH_SIZE) or stalls > 4 * MAX_STALLS:
                raise TankProtocolError(f"{where}: {stalls} fetches from {seq} in a row brought nothing usable "
                                        f"(chunk of {len(part.chunk)} bytes, fetch size {fetch_size})")

    def _fetch(self, topic: str, partition: int, seq: int, fetch_size: int, start: int,
               end: int) -> FetchedPartition | int:
        """The partition's chunk from ``seq``, or (numbers gone, failOnDataLoss off) the number to go on from."""
        where = f"{topic}/{partition}"

        def attempt() -> FetchedPartition:
            try:
                return self.client.fetch(topic, partition, seq, fetch_size)
            except LeaderMovedError as exc:
                log.info("%s: following the leader to %s", where, exc.address)
                self.client.close()
                self.client = TankClient(exc.address, self.settings, entry_point=False)
                raise
            except BrokerConnectionError:
                self.client.reset()
                raise

        try:
            return call_with_retry(attempt, RetryPolicy(timeout_s=self.retry_s, backoff_s=0.1, max_backoff_s=2.0),
                                   what=f"fetch {where} from {seq}")
        except BoundaryFaultError as exc:
            if seq < exc.first_available:
                self._missing(where, seq, min(exc.first_available, end),
                              f"the broker's first available number is {exc.first_available} (retention removed "
                              f"the rest)")
                return exc.first_available
            self._missing(where, exc.high_water_mark + 1, end,
                          f"the broker's high-water mark {exc.high_water_mark} is below {seq}")
            return end
        except TubeSparkError as exc:
            if not exc.retriable:
                raise
            raise RangeReadError(f"{where}: reading [{start}, {end}) failed at {seq} after {self.retry_s:.0f} s of "
                                 f"retries; check that the broker is up (Spark retries the task): {exc}",
                                 partition=where, start=start, end=end, reached=seq,
                                 broker=self.client.address) from exc

    def _missing(self, where: str, low: int, high: int, why: str) -> None:
        message = f"partition {where}: numbers [{low}, {high}) were planned but are gone: {why}"
        if self.fail_on_data_loss:
            raise DataLossError(f"{message}. Set failOnDataLoss=false to read what is left")
        topic, _, partition = where.rpartition("/")
        self.lost.append((topic, int(partition), low, high))
        log.warning("%s; failOnDataLoss=false: going on", message)
