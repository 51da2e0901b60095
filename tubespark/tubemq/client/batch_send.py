"""The producer's batched send: a whole list of messages pipelined, one counter and condition per batch.

The per-message path (:meth:`Producer.send_async` + :meth:`Producer.flush`) makes two futures (three
conditions), takes a semaphore and a lock per message and waits on each future in turn: most of a
small message's CPU. Here a batch keeps, per broker address, a queue of messages and a window of at most
``max_in_flight`` requests on the wire; a window goes out in one socket write
(:meth:`tubespark.core.framed.FramedConnection.call_many`), and the answers each receive brings are
appended, with their messages' tags, to one list under one condition that the sending thread waits on;
it sleeps until half of what is on the wire is answered (:data:`WAKE_SHARE`, at most :data:`GATHER_S`),
settles every answer that gathered meanwhile and refills the window in one write. Against the real
broker, waking on every receive cost a context switch per message and GIL hand-overs between the two
threads (issue 24); the bounded wait keeps a peer that delays small writes (Nagle, a delayed ACK of
40 ms) from stalling a window, since the refill then carries the ACK.

Semantics are the per-message path's: a message is acknowledged or the batch fails; a retriable failure
(busy broker, lost connection, no answer within twice the request timeout) is re-sent after the same
backoff, at most ``max_retries`` times; a broker that fails a send is shielded and a message the producer
placed goes to another broker's partition. After the first unrecoverable error no new message is sent,
the ones on the wire are settled, and the error is raised. Messages to one partition leave in list order
(a re-sent one may land after later ones, as before).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tubespark.core.outage import OutageWindow, backoff
from tubespark.core.retry import RetryPolicy
from tubespark.errors import BrokerConnectionError, RpcTimeoutError, TubeSparkError
from tubespark.tubemq.client.common import ClientSettings, check
from tubespark.tubemq.net.connection import Connection, ConnectionPool
from tubespark.tubemq.wire.errcodes import ErrCode
from tubespark.tubemq.wire.formats import PartitionRef
from tubespark.tubemq.wire.send import SendAnswer, SendRequest, encode_send_frames, parse_send_response


class Sender(Protocol):
    """What a batch needs of its producer (:class:`~tubespark.tubemq.client.producer.Producer` is one).

    Declared here rather than imported, so that this module does not import the producer that imports it
    (no import cycle), and the batch uses only the producer's public face: placement, shielding, the
    connections and the broker credentials are the producer's to keep; the batch asks for them.
    """

    settings: ClientSettings
    max_in_flight: int
    max_retries: int
    outage_s: float

    @property
    def pool(self) -> ConnectionPool: ...

    @property
    def probing(self) -> bool: ...

    def broker_auth(self) -> tuple[int, str] | None: ...

    def choose_partition(self, topic: str, key_hash: int | None = None) -> PartitionRef: ...

    def shield(self, part: PartitionRef, exc: TubeSparkError) -> None: ...

    def acknowledged_by(self, part: PartitionRef) -> None: ...


@dataclass(slots=True)
class Prepared:
    """A message encoded once and placed (:meth:`Producer.prepare`); a batch send fills in where it landed.

    ``placed``: the producer chose the partition, so a re-send may go to another broker's partition.
    After :meth:`Producer.send_prepared` returns, ``partition`` is where the broker stored it and
    ``append_offset``/``message_id``/``append_time_ms`` are the broker's answer.
    """

    request: SendRequest
    partition: PartitionRef
    placed: bool
    key_hash: int | None
    message_id: int = 0
    append_offset: int = -1
    append_time_ms: int = 0


MAX_WINDOW_BYTES = 1024 * 1024
"""Payload bytes one write of a window holds at most (beyond the first message): bounds the memory of a
window of large messages, which the in-flight count alone would let reach ``max_in_flight`` MiB."""

WAKE_SHARE = 0.5
"""The sender sleeps until this share of the requests on the wire is answered (or :data:`GATHER_S` passed):
against the real broker, waking per receive cost about one context switch per message, and the two threads
fought over the GIL (issue 24: 15.7 -> 10 us of CPU per 100 B message, the same msgs/s)."""
GATHER_S = 0.002
"""The longest the sender waits for :data:`WAKE_SHARE` of the answers before settling what it has: bounds
what gathering costs when answers trickle (a peer that holds small writes for a delayed ACK: the refill
the sender then writes carries the ACK)."""

_SUCCESS_CODES = frozenset((0, int(ErrCode.SUCCESS)))

_Sent = tuple[int, Connection, int, float]
"""A request on the wire: (the message's index, its connection, correlation id, deadline)."""


class BatchSend:
    """One :meth:`Producer.send_prepared` call; also the :class:`~tubespark.core.framed.BatchSink` of its
    answers (``resolve``/``reject`` run on the connections' reader threads)."""

    def __init__(self, producer: Sender, items: Sequence[Prepared]) -> None:
        self.producer = producer
        self.items = items
        self.window = max(1, producer.max_in_flight)
        self.policy = RetryPolicy(attempts=producer.max_retries + 1, backoff_s=0.2, max_backoff_s=2.0)
        self.wait_s = producer.settings.request_timeout_s * 2
        self.timeout_ms = max(1, int(producer.settings.request_timeout_s * 1000))
        self.cond = threading.Condition(threading.Lock())
        self.answers: list[tuple[int, SendAnswer | BaseException]] = []  # (tag, answer or error), under cond
        self.sent: dict[int, _Sent] = {}  # tag -> the request on the wire; only the sender thread touches it
        self.queues: dict[str, deque[int]] = {}  # broker address -> indexes of messages waiting to go out
        self.on_wire: dict[str, int] = {}  # broker address -> requests in flight
        self.retries: list[tuple[float, int, int]] = []  # heap of (due, tie-break, index) of re-sends waiting
        self.tries: dict[int, int] = {}  # index -> failed tries (only messages that failed once)
        self.outage = OutageWindow(producer.outage_s)  # after the retries: a broker restarting is waited for
        self.tag = 0
        self.error: TubeSparkError | None = None
        self.acknowledged = 0
        self.wake_at = 1  # answers gathered before the reader threads wake the sender, under cond

    # --- BatchSink (reader threads) ---------------------------------------------------------------

    def resolve_many(self, answers: list[tuple[int, object]]) -> None:
        with self.cond:
            self.answers.extend(answers)  # type: ignore[arg-type]  # parse_send_response's SendAnswers
            if len(self.answers) >= self.wake_at:
                self.cond.notify()

    def reject(self, tag: int, error: BaseException) -> None:
        with self.cond:  # a failure wakes the sender at once: it may end the batch, or re-send
            self.answers.append((tag, error))
            self.cond.notify()

    # --- the sender -----------------------------------------------------------------------------

    def run(self) -> int:
        """Send every message; return how many were acknowledged, or raise the first unrecoverable error."""
        queues = self.queues
        for index, item in enumerate(self.items):
            address = item.partition.address
            queue = queues.get(address)
            if queue is None:
                queue = queues[address] = deque()
            queue.append(index)
        while True:
            now = time.monotonic()
            if self.error is None:
                self._due(now)
                for address, queue in queues.items():
                    if queue and self.on_wire.get(address, 0) < self.window:
                        self._send(address, queue)
            if not self.sent and (self.error is not None or not self.retries):
                break
            timeout = self._next_event(now)
            wake_at = max(1, int(len(self.sent) * WAKE_SHARE)) if self.error is None else 1
            with self.cond:
                if len(self.answers) < wake_at:
                    self.wake_at = wake_at
                    self.cond.wait(timeout if wake_at == 1 else min(timeout, GATHER_S))
                    self.wake_at = 1
                answers, self.answers = self.answers, []
            self._settle_all(answers)
            self._expire(time.monotonic())
        if self.error is not None:
            raise self.error
        return self.acknowledged

    def _next_event(self, now: float) -> float:
        """How long the sender may sleep: until the oldest request's deadline or the next re-send is due."""
        until = self.wait_s
        if self.sent:
            until = min(until, next(iter(self.sent.values()))[3] - now)
        if self.retries and self.error is None:
            until = min(until, self.retries[0][0] - now)
        return max(0.0, until)

    def _due(self, now: float) -> None:
        """Queue the re-sends whose backoff ended, on their (possibly new) partition's broker."""
        producer = self.producer
        while self.retries and self.retries[0][0] <= now:
            index = heapq.heappop(self.retries)[2]
            item = self.items[index]
            if item.placed:  # shielding may have moved it; choose_partition skips shielded brokers
                try:
                    item.partition = producer.choose_partition(item.request.topic, item.key_hash)
                except TubeSparkError as exc:  # no partition served now (its brokers restarting): a failed try
                    self._failed(index, None, exc)
                    continue
                item.request = item.request._replace(partition_id=item.partition.partition_id)
            address = item.partition.address
            self.queues.setdefault(address, deque()).appendleft(index)

    def _send(self, address: str, queue: deque[int]) -> None:
        """Put up to a window's free room of ``address``'s queue on the wire, in one write of at most about
        :data:`MAX_WINDOW_BYTES` (at least one message)."""
        room = self.window - self.on_wire.get(address, 0)
        items = self.items
        indexes: list[int] = []
        size = 0
        while queue and len(indexes) < room and size < MAX_WINDOW_BYTES:
            index = queue.popleft()
            indexes.append(index)
            size += len(items[index].request.data)
        producer = self.producer
        auth = producer.broker_auth()
        requests = [items[i].request for i in indexes]
        timeout_ms = self.timeout_ms
        first = self.tag
        self.tag += len(indexes)
        tags = range(first, self.tag)
        try:
            conn = producer.pool.get(address)
            ids = conn.call_framed_many(
                lambda serials: encode_send_frames(requests, serials, timeout_ms, auth), parse_send_response, self,
                tags)
        except TubeSparkError as exc:  # not connected, or the connection closed: nothing reached the wire
            for index in indexes:
                self._failed(index, None, exc)
            return
        self.on_wire[address] = self.on_wire.get(address, 0) + len(indexes)
        deadline = time.monotonic() + self.wait_s
        sent = self.sent
        for tag, index, correlation_id in zip(tags, indexes, ids, strict=True):
            sent[tag] = (index, conn, correlation_id, deadline)

    def _settle_all(self, answers: list[tuple[int, SendAnswer | BaseException]]) -> None:
        """:meth:`_settle` each answer, in order, with a success's bookkeeping inlined: a window of
        acknowledgements is most of what the sender does (issue 24; 0.4 of 1.1 us per message)."""
        sent, items, on_wire, outage, producer = self.sent, self.items, self.on_wire, self.outage, self.producer
        acknowledged = 0
        probing = producer.probing  # once per window: a broker coming back is said at its next window at worst
        for tag, answer in answers:
            if type(answer) is not SendAnswer or not answer[0] or answer[1] not in _SUCCESS_CODES:
                self._settle(tag, answer)
                continue
            entry = sent.pop(tag, None)
            if entry is None:  # it timed out already and was re-sent or failed
                continue
            item = items[entry[0]]
            on_wire[item.partition.address] -= 1  # the listed address (conn's may be mapped)
            item.message_id, item.append_time_ms, item.append_offset = answer[3:6]
            acknowledged += 1
            if outage.since is not None:
                outage.clear()
            if probing:
                producer.acknowledged_by(item.partition)
        self.acknowledged += acknowledged

    def _settle(self, tag: int, answer: SendAnswer | BaseException) -> None:
        entry = self.sent.pop(tag, None)
        if entry is None:  # it timed out already and was re-sent or failed
            return
        index, conn, _id, _deadline = entry
        item = self.items[index]
        self.on_wire[item.partition.address] -= 1  # the listed address (conn's may be mapped)
        if isinstance(answer, SendAnswer) and answer.success and answer.errCode in (0, ErrCode.SUCCESS):
            item.message_id, item.append_offset, item.append_time_ms = (answer.messageId, answer.appendOffset,
                                                                        answer.appendTime)
            self.acknowledged += 1
            self.outage.clear()
            self.producer.acknowledged_by(item.partition)
            return
        try:
            if isinstance(answer, BaseException):
                raise answer
            check(answer, f"send to {item.partition.key}")
        except TubeSparkError as exc:
            self._failed(index, conn, exc)
        except Exception as exc:  # noqa: BLE001 - cancelled or unexpected: surface, never lose
            self._failed(index, conn, BrokerConnectionError(f"send to {item.partition.key} failed: {exc!r}"))

    def _expire(self, now: float) -> None:
        """Fail the requests unanswered past their deadline (oldest first) with RpcTimeoutError."""
        sent = self.sent
        while sent:
            tag, (index, conn, correlation_id, deadline) = next(iter(sent.items()))
            if deadline > now:
                return
            del sent[tag]
            self.on_wire[self.items[index].partition.address] -= 1
            conn.forget([correlation_id])
            key = self.items[index].partition.key
            self._failed(index, conn, RpcTimeoutError(f"no response to send to {key} within {self.wait_s:.1f}s"))

    def _failed(self, index: int, conn: Connection | None, exc: TubeSparkError) -> None:
        """A try of message ``index`` failed: shield its broker as the per-message path does, and re-send it
        after the backoff, or keep the error when it is not retriable or the tries are spent."""
        item = self.items[index]
        producer = self.producer
        # Reconnect rather than reuse a broken socket. A call that only timed out leaves the connection up
        # while the broker answers others on it, but not when it sent nothing for as long (stalled or
        # half-open: a socket that never answers again and never fails on its own), as the per-message path.
        if conn is not None and isinstance(exc, RpcTimeoutError):
            producer.pool.drop_if_quiet(item.partition.address, self.wait_s)
        elif conn is not None and isinstance(exc, BrokerConnectionError):
            conn.close()  # the pool opens a new one on the next get
        if isinstance(exc, BrokerConnectionError) or getattr(exc, "code", None) == ErrCode.SERVICE_UNAVAILABLE:
            producer.shield(item.partition, exc)
        tries = self.tries[index] = self.tries.get(index, 0) + 1
        if self.error is None and self.policy.should_retry(exc) and tries <= producer.max_retries:
            heapq.heappush(self.retries, (time.monotonic() + self.policy.delay(tries), index, index))
            return
        if self.error is None and self.outage.allows(exc):  # the per-message path's ride_out, as bookkeeping
            pause = min(backoff(tries - producer.max_retries), self.outage.remaining())
            heapq.heappush(self.retries, (time.monotonic() + pause, index, index))
            return
        if self.error is None:
            error = self.outage.error(exc, f"send to {item.partition.key}")
            self.error = error if isinstance(error, TubeSparkError) else exc
