"""TANK's message ids and error codes, and the typed errors they become.

docs/tank/protocol.md#message-types, #fetch, #produce. Callers branch on the error classes and their
``retriable`` flag (the shared kinds of :mod:`tubespark.errors` and TANK's own in
:mod:`tubespark.tank.errors`), never on the numbers.
"""

from __future__ import annotations

from enum import IntEnum

from tubespark.errors import BadRequestError, BrokerError, ServerBusyError, UnknownTopicError
from tubespark.tank.errors import LeaderMovedError


class MsgType(IntEnum):
    """Frame message ids (docs/tank/protocol.md#message-types)."""

    PRODUCE = 0x1
    CONSUME = 0x2
    PING = 0x3
    PRODUCE_WITH_SEQNUM = 0x5
    DISCOVER_PARTITIONS = 0x6
    CREATE_TOPIC = 0x7
    STATUS = 0xA
    DISCOVER_TOPICS = 0xB


RESPONSE_TYPES = frozenset({MsgType.PRODUCE, MsgType.CONSUME, MsgType.PING, MsgType.DISCOVER_PARTITIONS,
                            MsgType.CREATE_TOPIC, MsgType.STATUS, MsgType.DISCOVER_TOPICS})
"""What a broker may send to a client (0x5 is answered with 0x1)."""

CLIENT_VERSION = 2
"""The client version tubespark sends in fetch and produce requests (0 is reserved by the broker; 3+ adds
cluster-only fields)."""

# fetch errorOrFlags (docs/tank/protocol.md#fetch)
FETCH_OK = 0x00
FETCH_BOUNDARY = 0x01
FETCH_SYSTEM_ERROR = 0xFB
FETCH_OTHER_LEADER = 0xFC
FETCH_NO_LEADER = 0xFD
FETCH_SPARSE_FIRST = 0xFE
FETCH_UNKNOWN_PARTITION = 0xFF
UNKNOWN_TOPIC_MARK = 0xFFFF

# produce codes (docs/tank/protocol.md#produce)
PRODUCE_OK = 0x00
PRODUCE_UNKNOWN_PARTITION = 0x01
PRODUCE_IO_FAULT = 0x02
PRODUCE_NO_ISR_ACKS = 0x03
PRODUCE_NOT_ENOUGH_REPLICAS = 0x04
PRODUCE_INVALID_SEQNUMS = 0x0A
PRODUCE_OTHER_LEADER = 0xFC
PRODUCE_NO_LEADER = 0xFD
PRODUCE_READ_ONLY = 0xFE
PRODUCE_UNKNOWN_TOPIC = 0xFF
WHOLE_TOPIC_CODES = frozenset({PRODUCE_READ_ONLY, PRODUCE_UNKNOWN_TOPIC})

PRODUCE_MESSAGES = {
    PRODUCE_UNKNOWN_PARTITION: "unknown partition",
    PRODUCE_IO_FAULT: "I/O fault on the broker",
    PRODUCE_NO_ISR_ACKS: "acknowledgements from the in-sync replicas missing",
    PRODUCE_NOT_ENOUGH_REPLICAS: "not enough replicas",
    PRODUCE_INVALID_SEQNUMS: "invalid sequence numbers",
    PRODUCE_OTHER_LEADER: "another node leads the partition",
    PRODUCE_NO_LEADER: "no leader",
    PRODUCE_READ_ONLY: "the broker is read-only",
    PRODUCE_UNKNOWN_TOPIC: "unknown topic",
}

# CreateTopic codes (docs/tank/protocol.md#createtopic)
CREATE_MESSAGES = {1: "already exists", 2: "system error", 4: "bad config", 5: "read-only broker",
                   10: "invalid request (no partitions or a bad name)", 11: "unsupported"}
CREATE_EXISTS = 1


def fetch_error(code: int, context: str, *, leader: str | None = None, broker: str = "") -> BrokerError:
    """The error for a fetch partition's ``errorOrFlags`` (not OK, not sparse, not a boundary fault)."""
    if code == FETCH_UNKNOWN_PARTITION:
        return UnknownTopicError(code, "unknown partition", context=context, broker=broker,
                                 advice="check the partitions the offsets options name")
    if code == FETCH_OTHER_LEADER:
        return LeaderMovedError(code, "another node leads the partition", address=leader or "?", context=context,
                                broker=broker)
    if code == FETCH_NO_LEADER:
        return ServerBusyError(code, "no leader for the partition", context=context, broker=broker)
    if code == FETCH_SYSTEM_ERROR:
        return ServerBusyError(code, "system error (the broker could not open the partition's log)",
                               context=context, broker=broker)
    return BadRequestError(code, "unknown fetch error code", context=context, broker=broker)


def produce_error(code: int, context: str, *, leader: str | None = None, broker: str = "") -> BrokerError:
    """The error for a produce code other than 0 (docs/tank/protocol.md#produce)."""
    message = PRODUCE_MESSAGES.get(code, "unknown produce error code")
    if code in (PRODUCE_UNKNOWN_PARTITION, PRODUCE_UNKNOWN_TOPIC):
        return UnknownTopicError(code, message, context=context, broker=broker,
                                 advice="check the `topic` option and the partitions the rows name, or create the "
                                        "topic on the TANK broker first")
    if code == PRODUCE_OTHER_LEADER:
        return LeaderMovedError(code, message, address=leader or "?", context=context, broker=broker)
    if code in (PRODUCE_IO_FAULT, PRODUCE_NO_ISR_ACKS, PRODUCE_NOT_ENOUGH_REPLICAS, PRODUCE_NO_LEADER):
        return ServerBusyError(code, message, context=context, broker=broker)
    return BadRequestError(code, message, context=context, broker=broker)
