"""Pop receipts (the broker's "extraInfo"): what a popped message must be acked or re-timed with.

A receipt is eight space-separated fields: checkpoint start offset, pop time, invisible time, revive queue,
topic kind (0 normal, 1 and 2 the group's retry topic in its two naming schemes), broker name, queue id,
the message's queue offset. The broker sends the shared parts once per pop (header fields ``popTime``,
``invisibleTime``, ``reviveQid``, plus per queue ``startOffsetInfo`` and ``msgOffsetInfo``); a client
builds each message's receipt from them, except for messages redelivered from the retry topic, which
arrive with their receipt already in the ``POP_CK`` property and must keep it
(docs/rocketmq/protocol.md, "Pop").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tubespark.errors import CodecError
from tubespark.rocketmq.wire.message import POP_CK, StoredMessage

RETRY_PREFIX = "%RETRY%"
NORMAL, RETRY_V1, RETRY_V2 = "0", "1", "2"
ORDER_REVIVE_QUEUE = 999


def topic_kind(topic: str) -> str:
    """The receipt's topic-kind field for messages read from ``topic``."""
    if topic.startswith(RETRY_PREFIX):
        return RETRY_V2 if "+" in topic else RETRY_V1
    return NORMAL


def retry_topic(topic: str, group: str, kind: str) -> str:
    """The topic an ack must name: ``topic`` itself, or the group's retry topic for a redelivered message."""
    if kind == NORMAL:
        return topic
    if kind == RETRY_V1:
        return f"{RETRY_PREFIX}{group}_{topic}"
    if kind == RETRY_V2:
        return f"{RETRY_PREFIX}{group}+{topic}"
    raise CodecError(f"unknown receipt topic kind {kind!r}")


@dataclass(frozen=True)
class Receipt:
    ck_offset: int
    pop_time: int
    invisible_ms: int
    revive_qid: int
    kind: str
    broker_name: str
    queue_id: int
    offset: int

    def __str__(self) -> str:
        return (f"{self.ck_offset} {self.pop_time} {self.invisible_ms} {self.revive_qid} {self.kind} "
                f"{self.broker_name} {self.queue_id} {self.offset}")

    @staticmethod
    def parse(text: str) -> Receipt:
        parts = text.split(" ")
        if len(parts) != 8:
            raise CodecError(f"a pop receipt has 8 space-separated fields, not {len(parts)}: {text!r}")
        try:
            return Receipt(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), parts[4], parts[5],
                           int(parts[6]), int(parts[7]))
        except ValueError:
            raise CodecError(f"a pop receipt has a non-numeric field: {text!r}") from None

    @property
    def orderly(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QUEUE

    def real_topic(self, topic: str, group: str) -> str:
        return retry_topic(topic, group, self.kind)


def parse_queue_info(text: str) -> dict[tuple[str, int], list[int]]:
    """``startOffsetInfo`` / ``msgOffsetInfo``: ``kind qid n[,n...]`` entries joined by ``;``."""
    out: dict[tuple[str, int], list[int]] = {}
    if not text:
        return out
    for entry in text.split(";"):
        parts = entry.split(" ")
        if len(parts) != 3:
            raise CodecError(f"pop offset info entry {entry!r} does not have 3 fields")
        try:
            key = (parts[0], int(parts[1]))
            values = [int(v) for v in parts[2].split(",")]
        except ValueError:
            raise CodecError(f"pop offset info entry {entry!r} is not numeric") from None
        if key in out:
            raise CodecError(f"pop offset info names queue {key} twice")
        out[key] = values
    return out


def receipts_for(messages: Sequence[StoredMessage], *, broker_name: str, pop_time: int, invisible_ms: int,
                 revive_qid: int, start_offset_info: str, msg_offset_info: str) -> list[str]:
    """The receipt of each popped message, in order (kept from ``POP_CK`` when the broker set it)."""
    starts = parse_queue_info(start_offset_info)
    listed = parse_queue_info(msg_offset_info)
    first_seen: dict[tuple[str, int], int] = {}
    out = []
    for message in messages:
        given = message.properties.get(POP_CK)
        if given:
            out.append(given)
            continue
        kind = topic_kind(message.topic)
        key = (kind, message.queue_id)
        if starts:
            if key not in starts:
                raise CodecError(f"popped message of queue {message.queue_id} has no checkpoint in startOffsetInfo")
            if key in listed and message.queue_offset not in listed[key]:
                raise CodecError(f"popped offset {message.queue_offset} of queue {message.queue_id} is not in "
                                 f"msgOffsetInfo {listed[key]}")
            ck = starts[key][0]
        else:  # an old broker without offset info: the checkpoint starts at the queue's first popped message
            ck = first_seen.setdefault(key, message.queue_offset)
        out.append(str(Receipt(ck, pop_time, invisible_ms, revive_qid, kind, broker_name, message.queue_id,
                               message.queue_offset)))
    return out
