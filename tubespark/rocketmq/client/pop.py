"""Pop consumption (RIP-19): the broker balances, the client owns no queue, acks close the loop.

A pop asks one broker for up to 32 messages of a topic from any of its queues (``queueId=-1``); the broker
hides them for ``invisible_ms`` and moves the group's offset at once. Unless acked within that time, they
come back (through the group's retry topic), so a consumer that dies or stalls never strands a queue and
delivery is at-least-once (docs/rocketmq/protocol.md, "Pop").

Acks go by batch: receipts of one pop share a checkpoint (start offset, pop time, queue, revive queue), so
one BATCH_ACK_MESSAGE entry carries all of them as a bitset; receipts are grouped by broker here.

A filter travels in the pop (``expType``/``exp``); the broker moves the group past messages that do not
match. It compares tag hashes only, so a message popped on a hash collision is acked here at once and not
returned: left alone it would come back after every invisible time (:mod:`tubespark.rocketmq.wire.filter`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from tubespark.core.framed import wait as wait_future
from tubespark.errors import TubeSparkError, UnknownTopicError
from tubespark.rocketmq.client.client import RocketMQClient
from tubespark.rocketmq.wire import headers
from tubespark.rocketmq.wire.filter import ALL, Filter
from tubespark.rocketmq.wire.frame import Command
from tubespark.rocketmq.wire.message import StoredMessage, decode_stored
from tubespark.rocketmq.wire.pop import Receipt, receipts_for, retry_topic
from tubespark.rocketmq.wire.route import MessageQueue

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Popped:
    """One popped message and the receipt that acks it."""

    message: StoredMessage
    receipt: str
    broker_name: str


class PopConsumer:
    """Pops ``topic`` for ``group`` from every broker group of its route."""

    def __init__(self, client: RocketMQClient, group: str, topic: str, *, invisible_ms: int = 60000,
                 poll_ms: int = 1000, init_mode: int = headers.INIT_MODE_MIN, verify_crc: bool = False,
                 flt: Filter = ALL) -> None:
        self.client = client
        self.filter = flt
        self.dropped = 0
        """Messages popped on a tag hash collision and acked without being returned."""
        self.group = group
        self.topic = topic
        self.invisible_ms = invisible_ms
        self.poll_ms = poll_ms
        self.init_mode = init_mode
        self.verify_crc = verify_crc

    def brokers(self, *, refresh: bool = False) -> list[str]:
        """Broker groups with readable queues of the topic."""
        route = self.client.route(self.topic, refresh=refresh)
        return sorted({q.broker_name for q in route.read_queues()})

    def pop(self, broker_name: str, max_messages: int = headers.MAX_POP_MESSAGES, *,
            poll_ms: int | None = None) -> list[Popped]:
        """One pop from ``broker_name``; ``[]`` when nothing arrived within the poll time."""
        poll = self.poll_ms if poll_ms is None else poll_ms
        what = f"pop of {self.topic} from {broker_name} for {self.group}"
        address = self.client.read_candidates(MessageQueue(self.topic, broker_name, 0))[0]
        cmd = headers.pop_request(group=self.group, topic=self.topic, max_messages=max_messages,
                                  invisible_ms=self.invisible_ms, poll_ms=poll, born_ms=int(time.time() * 1000),
                                  init_mode=self.init_mode, flt=self.filter)
        # the broker holds a long poll up to ``poll`` ms: wait that long on top of the call timeout
        response = self.client.connection(address).call(cmd, self.client.settings.request_timeout_s + poll / 1000, what)
        result = headers.read_pop(response, what)
        if not result.found:
            return []
        messages = decode_stored(result.body, verify_crc=self.verify_crc)
        receipts = receipts_for(messages, broker_name=broker_name, pop_time=result.pop_time,
                                invisible_ms=result.invisible_ms, revive_qid=result.revive_qid,
                                start_offset_info=result.start_offset_info, msg_offset_info=result.msg_offset_info)
        for message in messages:  # redelivered messages carry the original topic; normal ones already do
            message.topic = self.topic
        popped = [Popped(m, r, broker_name) for m, r in zip(messages, receipts, strict=True)]
        unwanted = [p.receipt for p in popped if not self.filter.keeps(p.message.tags)]
        if unwanted:
            try:
                self.ack(unwanted)
                self.dropped += len(unwanted)
            except TubeSparkError as exc:  # they come back after the invisible time and are acked then
                log.warning("ack of %d messages popped on a tag hash collision failed: %s", len(unwanted), exc)
            popped = [p for p in popped if self.filter.keeps(p.message.tags)]
        return popped

    def ack_one(self, receipt: str) -> None:
        """ACK_MESSAGE of one receipt (the real topic and queue come from the receipt)."""
        parsed = Receipt.parse(receipt)
        what = f"ack of {self.topic} offset {parsed.offset} on {parsed.broker_name}"
        address = self.client.read_candidates(MessageQueue(self.topic, parsed.broker_name, 0))[0]
        cmd = headers.ack_request(group=self.group, real_topic=parsed.real_topic(self.topic, self.group),
                                  queue_id=parsed.queue_id, offset=parsed.offset, receipt=receipt)
        headers.read_ok(self.client.call_address(address, cmd, what), what)

    def change_invisible(self, receipt: str, invisible_ms: int) -> str:
        """Hide one message ``invisible_ms`` more from now; returns its new receipt (the old one is void)."""
        renewed = self.change_invisible_many([receipt], invisible_ms)
        if isinstance(renewed[0], TubeSparkError):
            raise renewed[0]
        return renewed[0]

    def change_invisible_many(self, receipts: Sequence[str], invisible_ms: int) -> list[str | TubeSparkError]:
        """CHANGE_MESSAGE_INVISIBLETIME of each receipt, all in flight at once (the broker has no batch form):
        per receipt its new receipt, or the error that left it unchanged.

        The broker writes a new checkpoint of that one message (start offset = the message's offset, pop time
        = now) and acks the old one, so only the new receipt acks the message from then on; the answer
        carries the new pop time, invisible time and revive queue, and the receipt is built from them as
        RocketMQ's Java client does (docs/rocketmq/protocol.md, "Changing the invisible time")."""
        sent: list[tuple[Receipt, str, Future[Command] | TubeSparkError]] = []
        for text in receipts:
            parsed = Receipt.parse(text)
            what = f"change invisible time of {self.topic} offset {parsed.offset} on {parsed.broker_name}"
            try:
                address = self.client.read_candidates(MessageQueue(self.topic, parsed.broker_name, 0))[0]
                cmd = headers.change_invisible_request(
                    group=self.group, real_topic=parsed.real_topic(self.topic, self.group), queue_id=parsed.queue_id,
                    offset=parsed.offset, receipt=text, invisible_ms=invisible_ms)
                sent.append((parsed, what, self.client.call_async(address, cmd)))
            except TubeSparkError as exc:
                sent.append((parsed, what, exc))
        out: list[str | TubeSparkError] = []
        for parsed, what, pending in sent:
            if isinstance(pending, TubeSparkError):
                out.append(pending)
                continue
            try:
                result = headers.read_change_invisible(
                    wait_future(pending, self.client.settings.request_timeout_s, what), what)
            except TubeSparkError as exc:
                out.append(exc)
                continue
            out.append(str(Receipt(parsed.offset, result.pop_time, result.invisible_ms, result.revive_qid,
                                   parsed.kind, parsed.broker_name, parsed.queue_id, parsed.offset)))
        return out

    def ack(self, receipts: Iterable[str]) -> int:
        """Batch-ack ``receipts``; returns how many were sent. Raises the first broker's failure after
        trying every broker."""
        by_broker: dict[str, dict[tuple[str, int, int, int, int, int], list[int]]] = {}  # -> ack group -> offsets
        for text in receipts:
            r = Receipt.parse(text)
            key = (r.kind, r.ck_offset, r.queue_id, r.revive_qid, r.pop_time, r.invisible_ms)
            by_broker.setdefault(r.broker_name, {}).setdefault(key, []).append(r.offset)
        sent = 0
        failure: TubeSparkError | None = None
        for broker, groups in sorted(by_broker.items()):
            entries = [headers.BatchAckEntry(self.group, self.topic, kind, ck, queue, revive, pop_time, invisible,
                                             tuple(sorted(offsets)))
                       for (kind, ck, queue, revive, pop_time, invisible), offsets in sorted(groups.items())]
            what = f"batch ack of {sum(len(e.offsets) for e in entries)} messages on {broker}"
            try:
                address = self.client.read_candidates(MessageQueue(self.topic, broker, 0))[0]
                headers.read_ok(self.client.call_address(address, headers.batch_ack_request(broker, entries), what),
                                what)
                sent += sum(len(e.offsets) for e in entries)
            except TubeSparkError as exc:
                log.warning("%s failed (the messages reappear after their invisible time): %s", what, exc)
                failure = failure or exc
        if failure is not None:
            raise failure
        return sent

    def positions(self) -> dict[str, tuple[int, int]]:
        """``{queue key: (max offset, group offset)}`` of the topic's and its retry topics' read queues (whose
        offsets could be read this time). The group's offset moves when a message is popped; a group with no
        offset counts from the queue's start (from its last message with ``startingOffsets=latest``)."""
        out: dict[str, tuple[int, int]] = {}
        for topic in (self.topic, retry_topic(self.topic, self.group, "1"), retry_topic(self.topic, self.group, "2")):
            try:
                queues = self.client.route(topic).read_queues()
            except UnknownTopicError:
                continue
            bounds = self.client.bounds(queues, follow=False)
            for mq in queues:
                if mq.key not in bounds:
                    continue
                low, high = bounds[mq.key]
                try:
                    done = self.client.consumer_offset(self.group, mq)
                except TubeSparkError as exc:
                    log.info("offset of %s on %s unknown this time: %s", self.group, mq.key, exc)
                    continue
                if done is None and self.init_mode == headers.INIT_MODE_MAX and topic == self.topic:
                    done = max(low, high - 1)
                out[mq.key] = (high, low if done is None else done)
        return out

    def backlog(self, target: Mapping[str, int] | None = None) -> int:
        """Messages not popped yet by the group (topic and its retry topics): max offsets minus the group's
        offsets, which a pop moves at once. With ``target`` (``{queue key: offset}``), only those below it:
        what was there when ``target`` was taken (:meth:`positions`), the rest of a ``Trigger.AvailableNow``
        run."""
        total = 0
        for key, (high, done) in self.positions().items():
            end = high if target is None else min(high, target.get(key, 0))
            total += max(0, end - done)
        return total


def pop_until(consumer: PopConsumer, limit: int, *, idle_rounds: int = 1, deadline_s: float | None = None,
              on_pop: Callable[[list[Popped]], None] | None = None) -> list[Popped]:
    """Pop from every broker in turn until ``limit`` messages, ``idle_rounds`` rounds in a row gave nothing,
    or ``deadline_s`` seconds passed. ``on_pop`` sees each pop's messages as they arrive: a holder that keeps
    them hidden (:class:`~tubespark.rocketmq.client.keeper.Keeper`) must hold the first pop's from then on,
    not once the last pop is in, or their invisible time runs while the rest are popped."""
    out: list[Popped] = []
    idle = 0
    start = time.monotonic()
    brokers: Sequence[str] = consumer.brokers()
    while len(out) < limit and idle < idle_rounds:
        got = 0
        for broker in brokers:
            want = min(headers.MAX_POP_MESSAGES, limit - len(out))
            if want <= 0:
                break
            try:
                popped = consumer.pop(broker, want)
            except TubeSparkError as exc:
                if not exc.retriable:
                    raise
                log.info("pop from %s failed (another broker or the next round goes on): %s", broker, exc)
                popped = []
            if popped and on_pop is not None:
                on_pop(popped)
            out.extend(popped)
            got += len(popped)
        idle = idle + 1 if got == 0 else 0
        if deadline_s is not None and time.monotonic() - start > deadline_s:
            break
        if got == 0:
            brokers = consumer.brokers(refresh=True)
    return out
