"""Numbers fixed by the TubeMQ wire protocol (values from docs/tubemq/protocol.md, names ours)."""

from __future__ import annotations

import enum

BEGIN_TOKEN = 0xFF7FF4FE
"""Every frame starts with this big-endian int32."""

MAX_BLOCK_SIZE = 8192
"""Envelope bytes are cut into blocks of at most this size (Java and Go peers do the same)."""

MAX_BLOCKS_PER_FRAME = 3584
"""(20 MiB + 8 MiB) / 8 KiB: the server rejects frames announcing more blocks."""

MAX_FRAME_BYTES = MAX_BLOCKS_PER_FRAME * MAX_BLOCK_SIZE

FLAG_REQUEST = 0
FLAG_RESPONSE = 1

PROTOCOL_VERSION = 3
"""The Java client's version; the server names its exception classes ``org.apache.inlong.tubemq...``."""

INDEX_RECORD_SIZE = 28
"""Bytes of one index record: consumer offsets are positions in the index file, in steps of this."""

PARTITION_STORE_BASE = 10000
"""Partition ids are ``storeId * 10000 + index``."""

MSG_FLAG_HAS_ATTRIBUTES = 0x1

ATTR_MSG_TYPE = "$msgType$"
ATTR_MSG_TIME = "$msgTime$"


class ServiceType(enum.IntEnum):
    MASTER = 1
    BROKER_READ = 2
    BROKER_WRITE = 3


class Method(enum.IntEnum):
    PRODUCER_REGISTER = 1
    PRODUCER_HEARTBEAT = 2
    PRODUCER_CLOSE = 3
    CONSUMER_REGISTER = 4
    CONSUMER_HEARTBEAT = 5
    CONSUMER_CLOSE = 6
    SEND_MESSAGE = 13
    BROKER_REGISTER = 15
    BROKER_HEARTBEAT = 16
    GET_MESSAGE = 17
    COMMIT_OFFSET = 18
    CONSUMER_REGISTER_V2 = 20
    CONSUMER_GET_PART_META = 22


class RegisterOp(enum.IntEnum):
    REGISTER = 31
    UNREGISTER = 32


class ReadStatus(enum.IntEnum):
    """``readStatus`` of a broker registration: where a group with no stored offset starts."""

    FROM_STORED_OR_MIN = 0
    FROM_MAX_IF_NEW = 1
    FROM_MAX_ALWAYS = 2


class EventType(enum.IntEnum):
    CONNECT = 1
    DISCONNECT = 2
    REPORT = 3
    REFRESH = 4
    STOP_REBALANCE = 5
    ONLY_CONNECT = 10
    ONLY_DISCONNECT = 20


class EventStatus(enum.IntEnum):
    TODO = 0
    PROCESSING = 1
    DONE = 2
    FAILED = -2
