"""Exact offset ranges of one queue: every message of ``[start, end)``, in order, once.

Why pipelined: a broker answers a pull with at most 32 messages (and 256 KiB) by default, so one pull at
a time is a round trip per 32 messages. Offsets of a queue are consecutive, so the reader keeps several
pulls in flight for consecutive windows ``[o, o+n)``, ``[o+n, o+2n)`` ..., drops whatever an answer holds
beyond its window, and fills a window the broker answered only partly before moving on.

The range's end was planned from the broker's max offset, so every offset below it existed. An answer
starting *above* the window (the queue's minimum moved past it: retention) is data loss: raised as
:class:`DataLossError`, or logged and skipped when ``fail_on_data_loss`` is off. An answer with no data
below the end (a slave acting for a dead master that had not replicated everything yet) is retried until
``retry_s`` passes, following the route: the data comes back with the master. Then, as for a broker
that does not answer, the read fails with :class:`~tubespark.errors.RangeReadError` (retriable, the last
fault as its cause).

With a filter (:class:`~tubespark.rocketmq.wire.filter.Filter`), offsets still run over every message:
the broker skips the ones that do not match, so an answer's offsets have holes and a pull whose scanned
chunk matched nothing answers PULL_RETRY_IMMEDIATELY with ``nextBeginOffset`` past that chunk; both move
the read on (never past ``end``), and only a queue minimum above the position counts as loss. Messages
the broker passed on a tag hash collision are dropped here (:meth:`Filter.keeps`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Generator, Iterator
from concurrent.futures import Future

from tubespark.core.retry import RetryPolicy, call_with_retry
from tubespark.errors import BrokerConnectionError, DataLossError, NoDataError, RangeReadError, TubeSparkError
from tubespark.rocketmq.client.client import RocketMQClient
from tubespark.rocketmq.net.connection import wait
from tubespark.rocketmq.wire import headers
from tubespark.rocketmq.wire.filter import ALL, Filter
from tubespark.rocketmq.wire.frame import Command
from tubespark.rocketmq.wire.message import StoredMessage, decode_stored
from tubespark.rocketmq.wire.route import MessageQueue

log = logging.getLogger(__name__)

PULL_BATCH = 32
"""Messages asked for per pull: what a broker sends at most by default (``maxTransferCountOnMessageInMemory``)."""
DEFAULT_DEPTH = 8


class RangeReader:
    """Reads exact ranges of queues with ``group`` (the broker auto-creates the subscription group)."""

    def __init__(self, client: RocketMQClient, group: str, *, depth: int = DEFAULT_DEPTH,
                 fail_on_data_loss: bool = True, verify_crc: bool = False, retry_s: float = 60.0,
                 flt: Filter = ALL) -> None:
        self.client = client
        self.filter = flt
        self.group = group
        self.depth = max(1, depth)
        self.fail_on_data_loss = fail_on_data_loss
        self.verify_crc = verify_crc
        self.retry_s = retry_s
        self.lost: list[tuple[str, int, int]] = []
        """``(queue, from, to)`` of every range skipped as lost (fail_on_data_loss off)."""

    def read(self, mq: MessageQueue, start: int, end: int) -> Iterator[list[StoredMessage]]:
        """Messages of ``[start, end)`` in order, in lists of up to one pull each.

        Each answer is one call under core's :class:`RetryPolicy` (``retry_s``, jittered backoff, the errors'
        own ``retriable``): a fault ends the pipeline, the next try opens one from where the read stands (after
        a lost connection or an answer without the data, on a re-read route), and every answer that moves the
        read on starts the budget afresh. When the budget runs out the read fails with RangeReadError.
        """
        pos = start
        policy = RetryPolicy(timeout_s=self.retry_s, backoff_s=0.2, max_backoff_s=2.0)
        pipeline: Generator[tuple[list[StoredMessage], int], None, None] | None = None
        failures = 0
        refresh = False

        def step() -> tuple[list[StoredMessage], int] | None:
            """The pipeline's next answer (None: it ended), opening one from ``pos`` first."""
            nonlocal pipeline, failures, refresh
            try:
                if pipeline is None:
                    address = self.client.read_candidates(mq, refresh=refresh)[0]
                    pipeline = self._pipeline(address, mq, pos, end)
                return next(pipeline, None)
            except TubeSparkError as exc:
                pipeline = None
                failures += 1
                refresh = refresh or isinstance(exc, (BrokerConnectionError, NoDataError))  # the route may move
                raise

        try:
            while pipeline is not None or pos < end:
                try:
                    answer = call_with_retry(step, policy, what=f"reading {mq.key} at offset {pos}")
                except TubeSparkError as exc:
                    if not policy.should_retry(exc):
                        raise
                    raise self._gave_up(mq, start, end, pos, failures, exc) from exc
                if answer is None:
                    pipeline = None
                    continue
                failures = 0
                batch, pos = answer
                if batch:
                    yield batch
        finally:
            if pipeline is not None:
                pipeline.close()  # cancels its pulls in flight

    def _gave_up(self, mq: MessageQueue, start: int, end: int, pos: int, tries: int,
                 exc: TubeSparkError) -> RangeReadError:
        """The error for a range whose retry budget ran out at ``pos`` (``exc``: the last, retriable, fault)."""
        return RangeReadError(f"{mq.key}: reading [{start}, {end}) failed at {pos} after {self.retry_s:g} s of "
                              f"retries; check that its broker group is up (Spark retries the task): {exc}",
                              partition=mq.key, start=start, end=end, reached=pos, tries=tries)

    def _pull(self, address: str, mq: MessageQueue, low: int, high: int) -> Future[Command]:
        cmd = headers.pull_request(group=self.group, topic=mq.topic, queue_id=mq.queue_id, offset=low,
                                   max_messages=min(PULL_BATCH, high - low), now_ms=int(time.time() * 1000),
                                   flt=self.filter)
        return self.client.call_async(address, cmd)

    def _pipeline(self, address: str, mq: MessageQueue, start: int,
                  end: int) -> Generator[tuple[list[StoredMessage], int], None, None]:
        """``(messages, next offset)`` of consecutive windows from ``start``; raises on a failed pull."""
        windows: deque[tuple[int, int, Future[Command]]] = deque()
        issued = start
        timeout = self.client.settings.request_timeout_s

        def top_up() -> None:
            nonlocal issued
            while len(windows) < self.depth and issued < end:
                high = min(issued + PULL_BATCH, end)
                windows.append((issued, high, self._pull(address, mq, issued, high)))
                issued = high

        try:
            top_up()
            while windows:
                low, high, future = windows.popleft()
                pos = low
                while pos < high:
                    result = headers.read_pull(wait(future, timeout, f"pull of {mq.key} at {pos}"),
                                               f"pull of {mq.key} at {pos}")
                    messages, pos = self._take(mq, result, pos, high)
                    yield messages, pos
                    if pos < high:  # the broker sent part of the window: ask for the rest before going on
                        future = self._pull(address, mq, pos, high)
                top_up()
        finally:
            for _low, _high, future in windows:
                future.cancel()

    def _take(self, mq: MessageQueue, result: headers.PullResult, pos: int,
              high: int) -> tuple[list[StoredMessage], int]:
        """The messages of one answer inside ``[pos, high)`` and the offset to continue from."""
        if not self.filter.everything:
            return self._take_filtered(mq, result, pos, high)
        if result.status == headers.FOUND:
            messages = [m for m in decode_stored(result.body, verify_crc=self.verify_crc)
                        if pos <= m.queue_offset < high]
            if not messages:
                first = result.next_offset if result.next_offset > pos else None
                if first is None:
                    raise NoDataError(0, f"pull at {pos} returned nothing of [{pos}, {high})",
                                      context=mq.key)
                return [], self._lost(mq, pos, min(first, high))
            if messages[0].queue_offset > pos:
                self._lost(mq, pos, messages[0].queue_offset)
            expected = messages[0].queue_offset
            for m in messages:  # consecutive offsets: a hole inside one answer is a broker bug, not retention
                if m.queue_offset != expected:
                    raise DataLossError(f"{mq.key}: pull answer jumps from offset {expected} to {m.queue_offset}; "
                                        f"check the broker's store (run the query again to read the range again)")
                expected += 1
            return messages, expected
        if result.status == headers.OFFSET_MOVED or (result.status == headers.NOT_FOUND and result.min_offset > pos):
            return [], self._lost(mq, pos, min(max(result.min_offset, result.next_offset), high))
        # not found below the planned end, or "retry": this member does not hold it (yet)
        raise NoDataError(0, f"the broker has no message at {pos} (its max offset is {result.max_offset}), below "
                             f"the planned end {high}", context=mq.key)

    def _take_filtered(self, mq: MessageQueue, result: headers.PullResult, pos: int,
                       high: int) -> tuple[list[StoredMessage], int]:
        """:meth:`_take` under a filter: holes in the offsets are messages the broker skipped, and the read
        goes on from the answer's ``nextBeginOffset`` (the end of what the broker scanned), also when the
        scan matched nothing (PULL_RETRY_IMMEDIATELY); a queue minimum above ``pos`` is retention."""
        if result.status in (headers.FOUND, headers.RETRY) and result.min_offset > pos:
            return [], self._lost(mq, pos, min(result.min_offset, high))
        if result.status == headers.FOUND:
            messages = [m for m in decode_stored(result.body, verify_crc=self.verify_crc)
                        if pos <= m.queue_offset < high]
            reached = max([result.next_offset] + [m.queue_offset + 1 for m in messages])
            if reached <= pos:
                raise NoDataError(0, f"pull at {pos} returned nothing of [{pos}, {high})", context=mq.key)
            return [m for m in messages if self.filter.keeps(m.tags)], min(reached, high)
        if result.status == headers.RETRY and result.next_offset > pos:  # a scanned chunk without a match
            return [], min(result.next_offset, high)
        if result.status == headers.OFFSET_MOVED or (result.status == headers.NOT_FOUND and result.min_offset > pos):
            return [], self._lost(mq, pos, min(max(result.min_offset, result.next_offset), high))
        raise NoDataError(0, f"the broker has no message at {pos} (its max offset is {result.max_offset}), below "
                             f"the planned end {high}", context=mq.key)

    def _lost(self, mq: MessageQueue, low: int, high: int) -> int:
        if high <= low:
            raise NoDataError(0, f"no progress at offset {low}", context=mq.key)
        message = f"{mq.key}: offsets [{low}, {high}) are gone from the broker (retention)"
        if self.fail_on_data_loss:
            raise DataLossError(f"{message}; set failOnDataLoss=false to skip them")
        log.warning("%s; failOnDataLoss=false: skipping them", message)
        self.lost.append((mq.key, low, high))
        return high
