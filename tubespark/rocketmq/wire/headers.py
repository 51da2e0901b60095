"""Request builders and response readers for the calls tubespark makes.

Header fields go by the Java field names of the server's request-header classes (one-letter names for
SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE), every value as a string (docs/rocketmq/protocol.md, "Requests").
Response readers turn a response :class:`Command` into a typed result or raise the typed error of its code.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tubespark.errors import CodecError
from tubespark.rocketmq.wire import codes
from tubespark.rocketmq.wire.filter import ALL, Filter
from tubespark.rocketmq.wire.frame import Command, request

DEFAULT_TOPIC = "TBW102"
"""The template topic the broker auto-creates topics from (a required SEND header field)."""

PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4
INIT_MODE_MIN, INIT_MODE_MAX = 0, 1
MAX_POP_MESSAGES = 32
"""The broker refuses a pop of more than 32 messages (INVALID_PARAMETER)."""


def _check(response: Command, what: str, *, ok: Sequence[int] = (codes.SUCCESS,)) -> Command:
    if response.code not in ok:
        raise codes.error_for_code(response.code, response.remark, context=what)
    return response


# --- name server ------------------------------------------------------------------------------------


def route_request(topic: str) -> Command:
    """GET_ROUTEINFO_BY_TOPIC; ``acceptStandardJsonOnly`` so even an older name server quotes its map keys."""
    return request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": True})


def cluster_info_request() -> Command:
    """GET_BROKER_CLUSTER_INFO: the broker groups registered at the name server now."""
    return request(codes.GET_BROKER_CLUSTER_INFO)


def registered_brokers(response: Command, what: str) -> int | None:
    """How many broker groups a GET_BROKER_CLUSTER_INFO answer lists; ``None`` when the answer cannot be read."""
    groups = registered_groups(response, what)
    return None if groups is None else len(groups)


def registered_groups(response: Command, what: str) -> frozenset[str] | None:
    """The broker groups (``brokerName``) a GET_BROKER_CLUSTER_INFO answer lists; ``None`` when the answer
    cannot be read. The name server drops a group when its last member stops or its connection closes.

    The body is fastjson, whose maps may have unquoted integer keys (``{0:"host:port"}``); only the keys of
    ``brokerAddrTable`` matter here, so those integer keys are quoted before parsing.
    """
    _check(response, what)
    text = response.body.decode("utf-8", "replace")
    try:
        doc = json.loads(re.sub(r'([{,])\s*(-?\d+)\s*:', r'\1"\2":', text))
    except ValueError:
        return None
    table = doc.get("brokerAddrTable") if isinstance(doc, dict) else None
    return frozenset(str(name) for name in table) if isinstance(table, dict) else None


# --- admin ----------------------------------------------------------------------------------------


def create_topic_request(topic: str, queues: int, *, perm: int = 6) -> Command:
    """UPDATE_AND_CREATE_TOPIC on one broker: ``queues`` read and write queues (test clusters, tools)."""
    return request(codes.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": DEFAULT_TOPIC, "readQueueNums": queues, "writeQueueNums": queues,
        "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False})


# --- offsets ---------------------------------------------------------------------------------------


def max_offset_request(topic: str, queue_id: int) -> Command:
    return request(codes.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id, "committed": True})


def min_offset_request(topic: str, queue_id: int) -> Command:
    return request(codes.GET_MIN_OFFSET, {"topic": topic, "queueId": queue_id})


def read_offset(response: Command, what: str) -> int:
    return _check(response, what).field_int("offset")


def query_consumer_offset_request(group: str, topic: str, queue_id: int) -> Command:
    return request(codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": queue_id,
                                                 "setZeroIfNotFound": False})


def read_consumer_offset(response: Command, what: str) -> int | None:
    """The group's committed offset, ``None`` when it has none for the queue (QUERY_NOT_FOUND)."""
    if response.code == codes.QUERY_NOT_FOUND:
        return None
    offset = _check(response, what).field_int("offset")
    return None if offset < 0 else offset


def update_consumer_offset_request(group: str, topic: str, queue_id: int, offset: int) -> Command:
    return request(codes.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": queue_id,
                                                  "commitOffset": offset})


def read_ok(response: Command, what: str) -> None:
    _check(response, what)


# --- send -------------------------------------------------------------------------------------------


def send_request(*, group: str, topic: str, queue_id: int, born_ms: int, properties: str, body: bytes,
                 batch: bool = False, flag: int = 0, queue_nums: int = 4) -> Command:
    """SEND_MESSAGE_V2 (one message) or SEND_BATCH_MESSAGE (``body`` from :func:`encode_batch_body`)."""
    fields: dict[str, object] = {"a": group, "b": topic, "c": DEFAULT_TOPIC, "d": queue_nums, "e": queue_id,
                                 "f": 0, "g": born_ms, "h": flag, "i": properties, "j": 0, "k": False}
    if batch:
        fields["m"] = True
    return request(codes.SEND_BATCH_MESSAGE if batch else codes.SEND_MESSAGE_V2, fields, body)


@dataclass(frozen=True)
class SendResult:
    """Where the broker stored a send: its queue and the first offset (a batch's messages follow it)."""

    queue_id: int
    queue_offset: int
    msg_id: str
    confirmed: bool
    """False for "stored but flush/slave not confirmed" answers (the message is in the queue all the same)."""


def read_send(response: Command, what: str) -> SendResult:
    _check(response, what, ok=(codes.SUCCESS, *codes.STORED_NOT_CONFIRMED))
    return SendResult(response.field_int("queueId"), response.field_int("queueOffset"),
                      response.ext.get("msgId", ""), response.code == codes.SUCCESS)


# --- pull -------------------------------------------------------------------------------------------


def pull_request(*, group: str, topic: str, queue_id: int, offset: int, max_messages: int, now_ms: int,
                 suspend_ms: int = 0, commit_offset: int | None = None, flt: Filter = ALL) -> Command:
    """PULL_MESSAGE with the subscription in the request (sysFlag's subscription bit, ``subscription``,
    ``expressionType``, ``subVersion``), so no heartbeat must register it first."""
    sys_flag = PULL_FLAG_SUBSCRIPTION
    if suspend_ms > 0:
        sys_flag |= PULL_FLAG_SUSPEND
    if commit_offset is not None:
        sys_flag |= PULL_FLAG_COMMIT_OFFSET
    return request(codes.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
        "maxMsgNums": max_messages, "sysFlag": sys_flag, "commitOffset": commit_offset or 0,
        "suspendTimeoutMillis": suspend_ms, "subscription": flt.sub_string, "subVersion": now_ms,
        "expressionType": flt.kind})


FOUND, NOT_FOUND, RETRY, OFFSET_MOVED = "found", "not_found", "retry", "offset_moved"


@dataclass(frozen=True)
class PullResult:
    """A pull answer: status, the offset to ask for next, the queue's bounds and the raw message records."""

    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    body: bytes
    suggest_broker_id: int


_PULL_STATUS = {codes.SUCCESS: FOUND, codes.PULL_NOT_FOUND: NOT_FOUND, codes.PULL_RETRY_IMMEDIATELY: RETRY,
                codes.PULL_OFFSET_MOVED: OFFSET_MOVED}


def read_pull(response: Command, what: str) -> PullResult:
    status = _PULL_STATUS.get(response.code)
    if status is None:
        raise codes.error_for_code(response.code, response.remark, context=what)
    return PullResult(status, response.field_int("nextBeginOffset"), response.field_int("minOffset"),
                      response.field_int("maxOffset"), response.body if status == FOUND else b"",
                      response.field_int_or("suggestWhichBrokerId", 0))


# --- pop, ack, invisible time -----------------------------------------------------------------------


def pop_request(*, group: str, topic: str, max_messages: int, invisible_ms: int, poll_ms: int, born_ms: int,
                queue_id: int = -1, init_mode: int = INIT_MODE_MIN, flt: Filter = ALL) -> Command:
    """POP_MESSAGE from every read queue of the topic (``queue_id=-1``); the broker balances, nobody owns a queue.

    ``born_ms`` must be the client's current wall-clock time: the broker refuses (POLLING_TIMEOUT) a pop
    whose ``now - born - poll`` exceeds 500 ms.
    """
    if not 0 < max_messages <= MAX_POP_MESSAGES:
        raise ValueError(f"a pop takes 1..{MAX_POP_MESSAGES} messages, not {max_messages}")
    return request(codes.POP_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "maxMsgNums": max_messages,
        "invisibleTime": invisible_ms, "pollTime": poll_ms, "bornTime": born_ms, "initMode": init_mode,
        "expType": flt.kind, "exp": flt.sub_string, "order": False})


@dataclass(frozen=True)
class PopResult:
    """A pop answer: its checkpoint data (shared by all its messages) and the raw message records."""

    found: bool
    pop_time: int
    invisible_ms: int
    revive_qid: int
    rest: int
    start_offset_info: str
    msg_offset_info: str
    body: bytes


def read_pop(response: Command, what: str) -> PopResult:
    if response.code in (codes.POLLING_TIMEOUT, codes.PULL_NOT_FOUND):
        return PopResult(False, 0, 0, 0, response.field_int_or("restNum", 0), "", "", b"")
    _check(response, what)
    return PopResult(True, response.field_int("popTime"), response.field_int("invisibleTime"),
                     response.field_int("reviveQid"), response.field_int_or("restNum", 0),
                     response.ext.get("startOffsetInfo", ""), response.ext.get("msgOffsetInfo", ""), response.body)


def ack_request(*, group: str, real_topic: str, queue_id: int, offset: int, receipt: str) -> Command:
    """ACK_MESSAGE of one popped message; ``real_topic`` is the retry topic for a redelivered one."""
    return request(codes.ACK_MESSAGE, {"consumerGroup": group, "topic": real_topic, "queueId": queue_id,
                                       "extraInfo": receipt, "offset": offset})


def change_invisible_request(*, group: str, real_topic: str, queue_id: int, offset: int, receipt: str,
                             invisible_ms: int) -> Command:
    return request(codes.CHANGE_MESSAGE_INVISIBLETIME, {
        "consumerGroup": group, "topic": real_topic, "queueId": queue_id, "extraInfo": receipt, "offset": offset,
        "invisibleTime": invisible_ms})


@dataclass(frozen=True)
class InvisibleResult:
    pop_time: int
    invisible_ms: int
    revive_qid: int


def read_change_invisible(response: Command, what: str) -> InvisibleResult:
    _check(response, what)
    return InvisibleResult(response.field_int("popTime"), response.field_int("invisibleTime"),
                           response.field_int("reviveQid"))


@dataclass(frozen=True)
class BatchAckEntry:
    """Acks of many offsets popped under one checkpoint (same group, topic kind, queue, pop time)."""

    group: str
    topic: str
    retry: str
    start_offset: int
    queue_id: int
    revive_qid: int
    pop_time: int
    invisible_ms: int
    offsets: tuple[int, ...]


def java_bitset_bytes(bits: Sequence[int]) -> bytes:
    """Java ``BitSet.toByteArray()`` of the set ``bits``: bit i is byte i//8, bit i%8; no trailing zero bytes."""
    if not bits:
        return b""
    if min(bits) < 0:
        raise ValueError("bit indexes must be >= 0")
    out = bytearray(max(bits) // 8 + 1)
    for bit in bits:
        out[bit // 8] |= 1 << (bit % 8)
    return bytes(out)


def bitset_indexes(data: bytes) -> list[int]:
    """The set bits of a Java ``BitSet.toByteArray()`` (the inverse of :func:`java_bitset_bytes`)."""
    return [i * 8 + b for i, byte in enumerate(data) for b in range(8) if byte >> b & 1]


def batch_ack_request(broker_name: str, entries: Sequence[BatchAckEntry]) -> Command:
    """BATCH_ACK_MESSAGE: one JSON body, per checkpoint a bitset of offsets relative to its start offset."""
    acks = []
    for entry in entries:
        relative = [offset - entry.start_offset for offset in entry.offsets]
        if any(r < 0 for r in relative):
            raise ValueError(f"offsets {entry.offsets} lie before the checkpoint start {entry.start_offset}")
        acks.append({"c": entry.group, "t": entry.topic, "r": entry.retry, "so": entry.start_offset,
                     "q": entry.queue_id, "rq": entry.revive_qid, "pt": entry.pop_time, "it": entry.invisible_ms,
                     "b": base64.b64encode(java_bitset_bytes(relative)).decode()})
    body = json.dumps({"brokerName": broker_name, "acks": acks}, separators=(",", ":")).encode()
    return request(codes.BATCH_ACK_MESSAGE, None, body)


def decode_batch_ack_body(body: bytes) -> tuple[str, list[BatchAckEntry]]:
    """The inverse of :func:`batch_ack_request`'s body (for tests and captured traffic)."""
    try:
        doc = json.loads(body)
        entries = [BatchAckEntry(a["c"], a["t"], a["r"], int(a["so"]), int(a["q"]), int(a["rq"]), int(a["pt"]),
                                 int(a["it"]),
                                 tuple(int(a["so"]) + i for i in bitset_indexes(base64.b64decode(a["b"]))))
                   for a in doc["acks"]]
        return str(doc["brokerName"]), entries
    except (ValueError, KeyError, TypeError) as exc:
        raise CodecError(f"batch ack body does not parse: {exc}") from None
