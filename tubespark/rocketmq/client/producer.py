"""A batch producer: messages gathered per queue into SEND_BATCH_MESSAGE requests, many in flight.

Why batches per queue: a batch send stores all its messages in one queue with one request, so the cost
per message is a few bytes of framing instead of a round trip. Rows without a key fill one queue's batch
and then move to the next queue (round robin by batch, so every queue gets whole batches); rows with a
key go to ``crc32(key) % queues`` so equal keys stay in one queue while the route is unchanged.

Many requests stay in flight (``max_in_flight`` over all queues, one per queue: a broker stores concurrent
sends to one queue in any order, observed with 5.3.3, so a second batch for a queue waits for the first's
answer and the messages of a queue keep the order they were added in); :meth:`BatchProducer.flush` returns
only when every batch was acknowledged. A batch that fails with a retriable error (broken connection,
busy broker, a group that became read-only because its master died) is sent again, after a route
refresh, to a writable queue: at-least-once, never a silent drop.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import zlib
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field

from tubespark.core.outage import OutageWindow
from tubespark.core.retry import RetryPolicy
from tubespark.errors import MessageTooLargeError, TubeSparkError, UnknownTopicError
from tubespark.rocketmq.client.client import RocketMQClient
from tubespark.rocketmq.net.connection import wait
from tubespark.rocketmq.wire import headers
from tubespark.rocketmq.wire.frame import Command
from tubespark.rocketmq.wire.message import batch_entry, encode_properties
from tubespark.rocketmq.wire.route import MessageQueue

log = logging.getLogger(__name__)

MAX_BATCH_BYTES = 4 * 1024 * 1024
"""A broker refuses a batch body above its max message size (4 MiB by default)."""
AUTO_CREATE_QUEUES = 4
"""Queues per broker of a topic a send creates (at most the template topic's): the Java producer's
``defaultTopicQueueNums``."""


@dataclass
class _Batch:
    mq: MessageQueue
    entries: list[bytes] = field(default_factory=list)
    size: int = 0
    attempts: int = 0
    future: Future[Command] | None = None
    address: str = ""
    outage: OutageWindow | None = None


class _Ids:
    """Client message ids (``UNIQ_KEY``): a per-process random prefix and a counter, unique and cheap."""

    def __init__(self) -> None:
        self.prefix = os.urandom(10).hex().upper()
        self.count = 0
        self.lock = threading.Lock()

    def next(self) -> str:
        with self.lock:
            self.count += 1
            return f"{self.prefix}{self.count:012X}"


_IDS = _Ids()


class BatchProducer:
    """Not thread-safe: one per writing task (it shares the client's connections)."""

    def __init__(self, client: RocketMQClient, *, group: str = "tubespark_producer", max_in_flight: int = 64,
                 batch_messages: int = 256, batch_bytes: int = 1024 * 1024, retries: int = 3,
                 outage_s: float = 0.0, auto_create: bool = False) -> None:
        if not 0 < batch_bytes <= MAX_BATCH_BYTES:
            raise ValueError(f"batch_bytes must be in 1..{MAX_BATCH_BYTES}")
        self.client = client
        self.group = group
        self.max_in_flight = max_in_flight
        self.batch_messages = batch_messages
        self.batch_bytes = batch_bytes
        self.retries = retries
        self.outage_s = outage_s
        """After ``retries``: how long a batch whose broker is unreachable is sent again (``core.outage``)."""
        self.auto_create = auto_create
        """Send to a topic the name server does not route over the template topic's route (see :meth:`queues`)."""
        self._templated: set[str] = set()  # topics sent to over the template topic's route
        self._open: dict[MessageQueue, _Batch] = {}
        self._sticky: dict[str, int] = {}
        self._inflight: deque[_Batch] = deque()
        self._busy: dict[MessageQueue, int] = {}  # batches in flight per queue (0 or 1)
        self._queues: dict[str, list[MessageQueue]] = {}
        self.sent_messages = 0
        self.sent_bytes = 0

    # --- queues -------------------------------------------------------------------------------------

    def queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        """The writable queues of ``topic``. One the name server does not route fails with UnknownTopicError,
        unless ``auto_create``: then its queues are those the template topic ``TBW102`` has on each broker
        (at most :data:`AUTO_CREATE_QUEUES`), and a broker with ``autoCreateTopicEnable=true`` creates the
        topic with as many queues on the first send, as the Java producer has it (docs/rocketmq/protocol.md,
        "Topics a send creates"). Once the name server routes the topic, a refresh takes its own route."""
        if refresh or topic not in self._queues:
            try:
                queues = self.client.route(topic, refresh=refresh).write_queues()
                self._templated.discard(topic)
            except UnknownTopicError as exc:
                if not self.auto_create:
                    raise UnknownTopicError(exc.code, exc.server_message, context=exc.context, advice=(
                        "check the `topic` option, or create the topic first (mqadmin updateTopic), or set "
                        "autoCreateTopic=true to have a broker with autoCreateTopicEnable=true create it on the "
                        "first send; the name server also forgets a topic whose broker groups are all "
                        "stopped")) from exc
                queues = self._template_queues(topic, refresh)
            if not queues:
                raise UnknownTopicError(0, "no writable queue (no broker group with a live master)",
                                        context=f"topic {topic}", advice="start a broker group's master, or "
                                        "check the topic's write queues (mqadmin updateTopic)")
            self._queues[topic] = queues
        return self._queues[topic]

    def _template_queues(self, topic: str, refresh: bool) -> list[MessageQueue]:
        try:
            template = self.client.route(headers.DEFAULT_TOPIC, refresh=refresh)
        except UnknownTopicError as exc:
            raise UnknownTopicError(exc.code, f"the name server routes neither topic {topic} nor the template "
                                    f"topic {headers.DEFAULT_TOPIC}, so no broker creates topics on a send "
                                    f"(autoCreateTopicEnable=false)", context=f"topic {topic}",
                                    advice="create the topic first (mqadmin updateTopic), or set "
                                    "autoCreateTopicEnable=true on the brokers") from exc
        self._templated.add(topic)
        return [MessageQueue(topic, mq.broker_name, mq.queue_id) for mq in template.write_queues()
                if mq.queue_id < AUTO_CREATE_QUEUES]

    def _write_address(self, mq: MessageQueue) -> str:
        """The master of ``mq``'s group, from the template topic's route while the topic has none of its own."""
        topic = headers.DEFAULT_TOPIC if mq.topic in self._templated else mq.topic
        return self.client.write_address(MessageQueue(topic, mq.broker_name, mq.queue_id))

    def _queue_for(self, topic: str, key: str | None) -> MessageQueue:
        queues = self.queues(topic)
        if key is not None:
            return queues[zlib.crc32(key.encode()) % len(queues)]
        return queues[self._sticky.setdefault(topic, 0) % len(queues)]

    # --- sending ------------------------------------------------------------------------------------

    def add(self, topic: str, body: bytes, properties: Mapping[str, str], *, key: str | None = None,
            with_id: bool = True) -> None:
        """Queue one message; it is sent with its queue's batch (see :meth:`flush`)."""
        props = dict(properties)
        if with_id:
            props.setdefault("UNIQ_KEY", _IDS.next())
        entry = batch_entry(body, encode_properties(props))
        if len(entry) > self.batch_bytes and len(entry) > MAX_BATCH_BYTES:
            raise MessageTooLargeError(f"a message of {len(body)} bytes exceeds the broker's {MAX_BATCH_BYTES}-byte "
                                       f"limit: make the row's value smaller")
        mq = self._queue_for(topic, key)
        batch = self._open.get(mq)
        if batch is not None and batch.size + len(entry) > self.batch_bytes:
            self._close(mq)
            batch = None
        if batch is None:
            batch = self._open[mq] = _Batch(mq)
        batch.entries.append(entry)
        batch.size += len(entry)
        if len(batch.entries) >= self.batch_messages or batch.size >= self.batch_bytes:
            self._close(mq)

    def _close(self, mq: MessageQueue) -> None:
        batch = self._open.pop(mq)
        if mq.topic in self._sticky:  # round robin by batch for rows without a key
            self._sticky[mq.topic] += 1
        self._dispatch(batch)

    def _dispatch(self, batch: _Batch) -> None:
        while self._inflight and (len(self._inflight) >= self.max_in_flight or self._busy.get(batch.mq)):
            self._settle(self._inflight.popleft())
        self._busy[batch.mq] = self._busy.get(batch.mq, 0) + 1
        batch.attempts += 1
        batch.address = ""
        body = b"".join(batch.entries)
        try:  # no route or no connection now: the batch fails like a send, and _settle decides on a retry
            batch.address = self._write_address(batch.mq)
            templated = batch.mq.topic in self._templated
            cmd = headers.send_request(group=self.group, topic=batch.mq.topic, queue_id=batch.mq.queue_id,
                                       born_ms=int(time.time() * 1000), properties="", body=body, batch=True,
                                       queue_nums=AUTO_CREATE_QUEUES if templated else
                                       len(self.queues(batch.mq.topic)))
            batch.future = self.client.call_async(batch.address, cmd, defer=True)
        except TubeSparkError as exc:
            failed: Future[Command] = Future()
            failed.set_exception(exc)
            batch.future = failed
        self._inflight.append(batch)

    def _settle(self, batch: _Batch) -> None:
        """Wait for one batch's answer; resend it elsewhere after a retriable failure."""
        assert batch.future is not None
        self._busy[batch.mq] -= 1
        what = f"batch send of {len(batch.entries)} messages to {batch.mq.key}"
        try:
            if batch.address:
                self.client.connection(batch.address).send_deferred()  # deferred frames go out before the wait
            headers.read_send(wait(batch.future, self.client.settings.request_timeout_s, what), what)
        except TubeSparkError as exc:
            self._resend(batch, exc, what)
            return
        self.sent_messages += len(batch.entries)
        self.sent_bytes += batch.size

    def _resend(self, batch: _Batch, exc: TubeSparkError, what: str) -> None:
        """Send ``batch`` again after a retriable failure, following a fresh route: ``retries`` times, then for
        as long as its broker stays unreachable within ``outage_s``; raise when neither allows another try."""
        window = batch.outage or OutageWindow(self.outage_s)
        batch.outage = window
        while True:
            if not exc.retriable or (batch.attempts > self.retries and not window.allows(exc)):
                final = window.error(exc, what)
                if final is exc:
                    raise exc
                raise final from exc
            log.info("%s failed (%s); sending it again after a route refresh (try %d)", what, exc, batch.attempts + 1)
            time.sleep(RetryPolicy(attempts=self.retries + 1, backoff_s=0.2, max_backoff_s=2.0)
                       .delay(min(batch.attempts, 8)))
            try:
                queues = self.queues(batch.mq.topic, refresh=True)
                if batch.mq not in queues:
                    batch.mq = queues[batch.attempts % len(queues)]
            except TubeSparkError as again:  # no route now (its brokers are away): counts as a failed try
                batch.attempts += 1
                exc = again
                continue
            self._dispatch(batch)
            return

    def flush(self) -> None:
        """Send every open batch and wait until all batches are acknowledged (raises the first failure)."""
        for mq in list(self._open):
            self._close(mq)
        while self._inflight:
            self._settle(self._inflight.popleft())

    def abandon(self) -> None:
        """Forget open and in-flight batches (after a failure; what was sent stays sent)."""
        self._open.clear()
        for batch in self._inflight:
            if batch.future is not None:
                batch.future.cancel()
        self._inflight.clear()
        self._busy.clear()
