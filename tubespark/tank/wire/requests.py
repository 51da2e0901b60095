"""TANK requests and their responses, as bytes (docs/tank/protocol.md#fetch to #status).

Each request is a frozen dataclass with ``msg_id`` and ``payload(request_id)`` (what
:data:`tubespark.tank.wire.frame.FRAMING` sends) and a ``decode`` for its response payload. A response
decoder checks every count and length against the bytes that are there before it builds anything, and
refuses trailing bytes, so a broker that speaks another layout fails loudly at the first answer.

The produce response lists error bytes in request order without naming topics or partitions, so only
the request that was sent can decode it: :meth:`ProduceRequest.decode` is bound to its request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tubespark.tank.errors import TankProtocolError, TruncatedFieldError
from tubespark.tank.wire.codes import (
    CLIENT_VERSION,
    FETCH_BOUNDARY,
    FETCH_OK,
    FETCH_OTHER_LEADER,
    FETCH_SPARSE_FIRST,
    PRODUCE_OTHER_LEADER,
    UNKNOWN_TOPIC_MARK,
    WHOLE_TOPIC_CODES,
    MsgType,
)
from tubespark.tank.wire.primitives import U8, U16, U32, U64, UINT64_MAX, Cursor, encode_str8, encode_varint

MAX_FETCH_SIZE = 64 * 1024 * 1024
"""The broker caps a partition's fetch size and a request's min bytes here (docs/tank/protocol.md#fetch)."""
MAX_TOPIC_NAME = 64


def check_topic_name(topic: str) -> bytes:
    """The topic as ``str8`` bytes; at most 64 characters (TANK's limit), not empty."""
    if not topic or len(topic) > MAX_TOPIC_NAME:
        raise TankProtocolError(f"topic name {topic!r}: 1 to {MAX_TOPIC_NAME} characters")
    return encode_str8(topic, "topic name")


def _wrap_truncation(what: str, exc: TruncatedFieldError) -> TankProtocolError:
    return TankProtocolError(f"{what} is shorter than its fields: {exc}")


# --- fetch (0x2) -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FetchPartition:
    partition: int
    seq: int
    fetch_size: int


@dataclass(frozen=True)
class FetchRequest:
    """Consume request: ``topics`` is ``[(topic, [FetchPartition, ...]), ...]``."""

    topics: Sequence[tuple[str, Sequence[FetchPartition]]]
    client_id: str = ""
    max_wait_ms: int = 0
    min_bytes: int = 0
    msg_id: int = field(default=MsgType.CONSUME, init=False)

    def payload(self, request_id: int) -> bytes:
        if len(self.topics) > 0xFF:
            raise TankProtocolError(f"a fetch names at most 255 topics, not {len(self.topics)}")
        if not 0 <= self.min_bytes <= MAX_FETCH_SIZE or not 0 <= self.max_wait_ms <= UINT64_MAX:
            raise TankProtocolError("fetch min bytes or max wait out of range")
        parts = [U16.pack(CLIENT_VERSION), U32.pack(request_id), encode_str8(self.client_id, "client id"),
                 U64.pack(self.max_wait_ms), U32.pack(self.min_bytes), U8.pack(len(self.topics))]
        for topic, partitions in self.topics:
            if not 0 < len(partitions) <= 0xFF:
                raise TankProtocolError(f"a fetch names 1 to 255 partitions of a topic, not {len(partitions)}")
            parts += [check_topic_name(topic), U8.pack(len(partitions))]
            for p in partitions:
                if not 0 <= p.partition < UNKNOWN_TOPIC_MARK or not 0 <= p.seq <= UINT64_MAX or \
                        not 0 < p.fetch_size <= MAX_FETCH_SIZE:
                    raise TankProtocolError(f"fetch of partition {p.partition} from {p.seq}, size {p.fetch_size}: "
                                            f"out of range")
                parts += [U16.pack(p.partition), U64.pack(p.seq), U32.pack(p.fetch_size)]
        return b"".join(parts)

    def decode(self, payload: bytes) -> FetchResponse:
        return FetchResponse.decode(payload)


@dataclass(frozen=True)
class FetchedPartition:
    """One partition of a fetch response.

    ``error`` is 0 (data), 0xFE is folded into ``sparse_first`` with error 0, 0x01 is a boundary fault
    (``first_available`` set), anything else an error whose ``leader`` is set for 0xFC. ``base_seq`` is
    ``None`` when the first bundle is sparse. ``chunk`` is the partition's bundles.
    """

    topic: str
    partition: int
    error: int
    base_seq: int | None = None
    high_water_mark: int = 0
    chunk: bytes = b""
    first_available: int | None = None
    leader: str | None = None
    sparse_first: bool = False


@dataclass(frozen=True)
class FetchResponse:
    request_id: int
    partitions: tuple[FetchedPartition, ...]
    unknown_topics: tuple[str, ...] = ()

    @staticmethod
    def decode(payload: bytes) -> FetchResponse:
        cur = Cursor(payload, "fetch response")
        try:
            header_len = cur.u32("header length")
            chunks_at = cur.pos + header_len
            if chunks_at > len(payload):
                raise TankProtocolError(f"fetch response header of {header_len} bytes in a {len(payload)}-byte payload")
            cur.end = chunks_at
            request_id = cur.u32("request id")
            heads: list[tuple[str, int, int, int | None, int, int, int | None, str | None, bool]] = []
            unknown: list[str] = []
            for _ in range(cur.u8("topic count")):
                topic = cur.str8("topic name")
                count = cur.u8("partition count")
                if cur.peek_u16("partition id") == UNKNOWN_TOPIC_MARK:
                    cur.u16("unknown topic mark")
                    unknown.append(topic)
                    continue
                for _ in range(count):
                    pid = cur.u16("partition id")
                    code = cur.u8("errorOrFlags")
                    if code in (FETCH_OK, FETCH_SPARSE_FIRST):
                        base = cur.u64("base sequence number") if code == FETCH_OK else None
                        hw = cur.u64("high-water mark")
                        heads.append((topic, pid, FETCH_OK, base, hw, cur.u32("chunk length"), None, None,
                                      code == FETCH_SPARSE_FIRST))
                    elif code == FETCH_BOUNDARY:
                        cur.u64("base sequence number")
                        hw = cur.u64("high-water mark")
                        chunk_len = cur.u32("chunk length")
                        heads.append((topic, pid, code, None, hw, chunk_len, cur.u64("first available"), None,
                                      False))
                    elif code == FETCH_OTHER_LEADER:
                        heads.append((topic, pid, code, None, 0, 0, None, cur.endpoint("leader"), False))
                    else:
                        heads.append((topic, pid, code, None, 0, 0, None, None, False))
            cur.done()
        except TruncatedFieldError as exc:
            raise _wrap_truncation("fetch response header", exc) from None
        total = sum(h[5] for h in heads)
        if chunks_at + total != len(payload):
            raise TankProtocolError(f"fetch response: chunks of {total} bytes announced, {len(payload) - chunks_at} "
                                    f"bytes follow the header")
        parts = []
        pos = chunks_at
        for topic, pid, code, base, hw, chunk_len, first, leader, sparse in heads:
            parts.append(FetchedPartition(topic, pid, code, base, hw, payload[pos:pos + chunk_len], first, leader,
                                          sparse))
            pos += chunk_len
        return FetchResponse(request_id, tuple(parts), tuple(unknown))


# --- produce (0x1, 0x5) -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProduceBundle:
    partition: int
    bundle: bytes
    base_seq: int | None = None  # ProduceWithSeqnum only


@dataclass(frozen=True)
class ProduceResult:
    topic: str
    partition: int
    code: int
    leader: str | None = None


@dataclass(frozen=True)
class ProduceRequest:
    """Produce bundles: ``topics`` is ``[(topic, [ProduceBundle, ...]), ...]``; each partition once per topic.

    ``with_seqnum`` sends ProduceWithSeqnum (0x5): every bundle needs its ``base_seq``.
    """

    topics: Sequence[tuple[str, Sequence[ProduceBundle]]]
    client_id: str = ""
    required_acks: int = 1
    ack_timeout_ms: int = 0
    with_seqnum: bool = False

    @property
    def msg_id(self) -> int:
        return MsgType.PRODUCE_WITH_SEQNUM if self.with_seqnum else MsgType.PRODUCE

    def payload(self, request_id: int) -> bytes:
        if not 0 < len(self.topics) <= 0xFF:
            raise TankProtocolError(f"a produce names 1 to 255 topics, not {len(self.topics)}")
        parts = [U16.pack(CLIENT_VERSION), U32.pack(request_id), encode_str8(self.client_id, "client id"),
                 U8.pack(self.required_acks), U32.pack(self.ack_timeout_ms), U8.pack(len(self.topics))]
        for topic, bundles in self.topics:
            if not 0 < len(bundles) <= 0xFF:
                raise TankProtocolError(f"a produce names 1 to 255 partitions of a topic, not {len(bundles)}")
            if len({b.partition for b in bundles}) != len(bundles):
                raise TankProtocolError(f"topic {topic}: a partition may appear once per produce request")
            parts += [check_topic_name(topic), U8.pack(len(bundles))]
            for b in bundles:
                if not 0 <= b.partition < UNKNOWN_TOPIC_MARK:
                    raise TankProtocolError(f"partition id {b.partition} out of range")
                parts += [U16.pack(b.partition), encode_varint(len(b.bundle))]
                if self.with_seqnum:
                    if b.base_seq is None:
                        raise TankProtocolError("ProduceWithSeqnum needs a base sequence number per bundle")
                    parts.append(U64.pack(b.base_seq))
                parts.append(b.bundle)
        return b"".join(parts)

    def decode(self, payload: bytes) -> tuple[ProduceResult, ...]:
        """Per partition of this request, in request order, the broker's code (docs/tank/protocol.md#produce)."""
        cur = Cursor(payload, "produce response")
        results: list[ProduceResult] = []
        try:
            cur.u32("request id")
            for topic, bundles in self.topics:
                first = cur.u8(f"code of {topic}")
                if first in WHOLE_TOPIC_CODES:
                    results.extend(ProduceResult(topic, b.partition, first) for b in bundles)
                    continue
                for i, b in enumerate(bundles):
                    code = first if i == 0 else cur.u8(f"code of {topic}/{b.partition}")
                    leader = cur.endpoint("leader") if code == PRODUCE_OTHER_LEADER else None
                    results.append(ProduceResult(topic, b.partition, code, leader))
            cur.done()
        except TruncatedFieldError as exc:
            raise _wrap_truncation("produce response", exc) from None
        return tuple(results)


# --- DiscoverPartitions (0x6) -------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionInfo:
    """A partition's ``[first_available, high_water_mark]``; ``error`` 0 or the reason byte (0xFB/0xFC/0xFD)."""

    partition: int
    first_available: int
    high_water_mark: int
    error: int = 0
    leader: str | None = None


@dataclass(frozen=True)
class DiscoverPartitionsRequest:
    topic: str
    partitions: Sequence[int] = ()
    msg_id: int = field(default=MsgType.DISCOVER_PARTITIONS, init=False)

    def payload(self, request_id: int) -> bytes:
        return U32.pack(request_id) + check_topic_name(self.topic) + b"".join(U16.pack(p) for p in self.partitions)

    def decode(self, payload: bytes) -> tuple[PartitionInfo, ...] | None:
        """The partitions (all, ids 0..n-1, or the listed ones in order); ``None`` for an unknown topic."""
        cur = Cursor(payload, "DiscoverPartitions response")
        try:
            cur.u32("request id")
            topic = cur.str8("topic")
            if topic != self.topic:
                raise TankProtocolError(f"DiscoverPartitions answered for topic {topic!r}, asked {self.topic!r}")
            count = cur.u16("partition count")
            if count == 0:
                cur.done()
                return None
            if self.partitions and count != len(self.partitions):
                raise TankProtocolError(f"DiscoverPartitions answered {count} partitions, asked {len(self.partitions)}")
            if count * 16 > cur.remaining:
                raise TankProtocolError(f"DiscoverPartitions announces {count} partitions in {cur.remaining} bytes")
            ids = list(self.partitions) or list(range(count))
            infos = []
            for pid in ids:
                first, hw = cur.u64("first available"), cur.u64("high-water mark")
                if first == UINT64_MAX and hw == UINT64_MAX:
                    reason = cur.u8("reason")
                    leader = cur.endpoint("leader") if reason == FETCH_OTHER_LEADER else None
                    infos.append(PartitionInfo(pid, 0, 0, reason, leader))
                else:
                    infos.append(PartitionInfo(pid, first, hw))
            cur.done()
        except TruncatedFieldError as exc:
            raise _wrap_truncation("DiscoverPartitions response", exc) from None
        return tuple(infos)


# --- CreateTopic (0x7) --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateTopicRequest:
    topic: str
    partitions: int
    config: str = ""
    msg_id: int = field(default=MsgType.CREATE_TOPIC, init=False)

    def payload(self, request_id: int) -> bytes:
        if not 0 <= self.partitions <= 0xFFFF:
            raise TankProtocolError(f"partition count {self.partitions} out of range")
        config = self.config.encode()
        return (U32.pack(request_id) + check_topic_name(self.topic) + U16.pack(self.partitions)
                + encode_varint(len(config)) + config)

    def decode(self, payload: bytes) -> int:
        """The broker's code: 0 created, 1 exists, others see docs/tank/protocol.md#createtopic."""
        cur = Cursor(payload, "CreateTopic response")
        try:
            cur.u32("request id")
            cur.str8("topic")
            code = cur.u8("error")
            cur.done()
        except TruncatedFieldError as exc:
            raise _wrap_truncation("CreateTopic response", exc) from None
        return code


# --- DiscoverTopics (0xB) -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicInfo:
    name: str
    enabled: bool
    partitions: int
    replication_factor: int | None = None


@dataclass(frozen=True)
class DiscoverTopicsRequest:
    flags: int = 0
    msg_id: int = field(default=MsgType.DISCOVER_TOPICS, init=False)

    def payload(self, request_id: int) -> bytes:
        return U32.pack(request_id) + U8.pack(self.flags)

    def decode(self, payload: bytes) -> tuple[TopicInfo, ...]:
        cur = Cursor(payload, "DiscoverTopics response")
        try:
            cur.u32("request id")
            count = cur.u32("topic count")
            cluster = cur.u8("cluster aware") != 0
            if count * 4 > cur.remaining:  # each topic takes at least 4 bytes
                raise TankProtocolError(f"DiscoverTopics announces {count} topics in {cur.remaining} bytes")
            topics = []
            for _ in range(count):
                name = cur.str8("topic name")
                enabled = cur.u8("enabled") != 0
                partitions = cur.u16("partitions")
                rf = cur.u8("replication factor") if cluster else None
                topics.append(TopicInfo(name, enabled, partitions, rf))
            cur.done()
        except TruncatedFieldError as exc:
            raise _wrap_truncation("DiscoverTopics response", exc) from None
        return tuple(topics)


# --- Status (0xA) -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerStatus:
    global_flags: int
    cluster_aware: bool
    topics: int
    partitions: int
    open_partitions: int
    open_partitions_time: int
    startup_ts: int
    version: int


@dataclass(frozen=True)
class StatusRequest:
    msg_id: int = field(default=MsgType.STATUS, init=False)

    def payload(self, request_id: int) -> bytes:
        return U32.pack(request_id)

    def decode(self, payload: bytes) -> BrokerStatus:
        cur = Cursor(payload, "Status response")
        try:
            cur.u32("request id")
            flags = cur.u8("global flags")
            cluster = cur.u8("cluster aware") != 0
            if cluster:
                raise TankProtocolError("Status of a cluster-aware broker: its cluster section is not documented "
                                        "well enough to parse (docs/tank/protocol.md#status)")
            status = BrokerStatus(flags, cluster, cur.u32("topics"), cur.u32("partitions"), cur.u32("open partitions"),
                                  cur.u32("open partitions time"), cur.u32("startup time"), cur.u32("version"))
            cur.done()
        except TruncatedFieldError as exc:
            raise _wrap_truncation("Status response", exc) from None
        return status
