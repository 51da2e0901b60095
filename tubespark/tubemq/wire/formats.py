"""The text formats TubeMQ packs inside protobuf string fields (separators ``# : @ , =``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from tubespark.errors import MessageFormatError
from tubespark.tubemq.wire.constants import PARTITION_STORE_BASE

DEFAULT_BROKER_PORT = 8123
DEFAULT_BROKER_TLS_PORT = 8124
"""What a blank port in a broker info means to a client that talks TLS (docs/tubemq/tls.md): a master
called on its TLS port lists brokers by their TLS ports and leaves the port blank when it is 8124."""
MAX_TOPIC_PARTITIONS = 10_000
"""Most partitions one topic info line may expand to: its counts are multiplied out, so a few digits from
the peer would otherwise make millions of objects (far more than any real topic has)."""


@dataclass(frozen=True, order=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str, default_port: int = DEFAULT_BROKER_PORT) -> BrokerInfo:
        """``brokerId:ip:port``; a blank port means ``default_port`` (8123, or 8124 over TLS)."""
        parts = text.split(":")
        if len(parts) != 3:
            raise MessageFormatError(f"bad broker info {text!r}, expected brokerId:ip:port")
        try:
            port = int(parts[2]) if parts[2].strip() else default_port
            if not 0 <= port <= 0xFFFF:  # else it fails far from the wire, as an untyped ValueError on connect
                raise MessageFormatError(f"bad broker info {text!r}: port {port} is outside 0..65535")
            return cls(int(parts[0]), parts[1], port)
        except ValueError as exc:
            raise MessageFormatError(f"bad broker info {text!r}") from exc


@dataclass(frozen=True, order=True)
class PartitionRef:
    """One queue: a partition of a topic on a broker. ``key`` is TubeMQ's ``brokerId:topic:partitionId``."""

    broker_id: int
    topic: str
    partition_id: int
    host: str = ""
    port: int = 0

    @property
    def key(self) -> str:
        return f"{self.broker_id}:{self.topic}:{self.partition_id}"

    @property
    def broker(self) -> BrokerInfo:
        return BrokerInfo(self.broker_id, self.host, self.port)

    @cached_property
    def address(self) -> str:
        """``host:port`` of its broker (``broker.address``), made once: a batch send reads it for every
        message, and building a ``BrokerInfo`` and the text each time cost 0.5 us of a sink row."""
        return f"{self.host}:{self.port}"

    @property
    def store_id(self) -> int:
        return self.partition_id // PARTITION_STORE_BASE

    def wire_string(self) -> str:
        """``brokerId:host:port#topic:partitionId`` (broker heartbeats, subscribe info)."""
        return f"{self.broker_id}:{self.host}:{self.port}#{self.topic}:{self.partition_id}"

    @classmethod
    def parse_wire(cls, text: str) -> PartitionRef:
        """Inverse of :meth:`wire_string`."""
        broker_part, sep, topic_part = text.partition("#")
        if not sep:
            raise MessageFormatError(f"bad partition string {text!r}, expected brokerId:host:port#topic:id")
        broker = BrokerInfo.parse(broker_part)
        try:
            topic, partition_id = _split_topic_partition(topic_part)
        except ValueError as exc:
            raise MessageFormatError(f"bad partition string {text!r}, expected brokerId:host:port#topic:id") from exc
        return cls(broker.broker_id, topic, partition_id, broker.host, broker.port)

    @classmethod
    def parse_key(cls, key: str) -> tuple[int, str, int]:
        """Split a partition key ``brokerId:topic:partitionId`` (no address)."""
        broker, sep, rest = key.partition(":")
        try:
            if not sep:
                raise ValueError("no ':'")
            return (int(broker), *_split_topic_partition(rest))
        except ValueError as exc:
            raise MessageFormatError(f"bad partition key {key!r}, expected brokerId:topic:partitionId") from exc


def _split_topic_partition(text: str) -> tuple[str, int]:
    """``topic:partitionId`` (the tail of keys and wire strings) -> ``(topic, id)``; ValueError if malformed."""
    topic, sep, partition_id = text.rpartition(":")
    if not sep or not topic:
        raise ValueError(f"expected topic:partitionId, got {text!r}")
    return topic, int(partition_id)


def subscribe_info(consumer_id: str, group: str, part: PartitionRef) -> str:
    """``consumerId@group#brokerId:host:port#topic:partitionId``."""
    return f"{consumer_id}@{group}#{part.wire_string()}"


def parse_subscribe_info(text: str) -> tuple[str, str, PartitionRef]:
    """Inverse of :func:`subscribe_info`: ``(consumerId, group, partition)``."""
    head, sep, rest = text.partition("#")
    consumer_id, sep2, group = head.rpartition("@")
    if not sep or not sep2:
        raise MessageFormatError(f"bad subscribe info {text!r}")
    return consumer_id, group, PartitionRef.parse_wire(rest)


@dataclass(frozen=True)
class TopicLayout:
    """A producer heartbeat's ``topicInfos`` entry: which partitions a topic has on which brokers."""

    topic: str
    partitions: tuple[PartitionRef, ...]
    max_msg_size: int | None

    @classmethod
    def parse(cls, text: str, brokers: dict[int, BrokerInfo]) -> TopicLayout:
        """``topic#brokerId:partNum:storeNum,...#maxMsgSize``; ids are ``store*10000 + index``."""
        segments = text.split("#")
        if len(segments) < 2 or not segments[0]:
            raise MessageFormatError(f"bad topic info {text!r}")
        topic = segments[0]
        parts: list[PartitionRef] = []
        for item in filter(None, segments[1].split(",")):
            try:
                broker_id, part_num, store_num = (int(x) for x in item.split(":"))
            except ValueError as exc:
                raise MessageFormatError(f"bad topic info item {item!r} in {text!r}") from exc
            if not 0 <= part_num <= PARTITION_STORE_BASE or store_num < 0:
                # ids are store * 10000 + index: more than 10000 partitions per store would collide
                raise MessageFormatError(f"bad partition/store count in {item!r} of {text!r}")
            if len(parts) + part_num * store_num > MAX_TOPIC_PARTITIONS:
                raise MessageFormatError(f"topic info {text[:200]!r} expands to more than {MAX_TOPIC_PARTITIONS} "
                                         f"partitions (at {item!r})")
            broker = brokers.get(broker_id, BrokerInfo(broker_id, "", 0))
            parts.extend(
                PartitionRef(broker_id, topic, store * PARTITION_STORE_BASE + index, broker.host, broker.port)
                for store in range(store_num) for index in range(part_num))
        max_size = None
        if len(segments) > 2 and segments[2].strip():
            try:
                max_size = int(segments[2])
            except ValueError as exc:
                raise MessageFormatError(f"bad max message size in {text!r}") from exc
        return cls(topic, tuple(sorted(parts)), max_size)


@dataclass(frozen=True)
class ConfiguredDeployment:
    """One item of a client-balance ``topicMetaInfoList`` entry: a topic's deployment on one broker as the master's
    configuration holds it, listed whether that broker runs or not (docs/tubemq/brokers.md)."""

    topic: str
    broker_id: int
    num_stores: int
    num_partitions: int
    subscribable: bool
    """statusId 1: the broker runs and the topic is open to consumers there now; 0: anything else."""

    @classmethod
    def parse_all(cls, text: str) -> list[ConfiguredDeployment]:
        """``topic#brokerId:numTopicStores:numPartitions:statusId,...`` (stores before partitions, unlike a
        producer's ``topicInfos``)."""
        topic, sep, items = text.partition("#")
        if not sep or not topic:
            raise MessageFormatError(f"bad topic meta info {text[:200]!r}, expected topic#brokerId:stores:parts:status")
        out: list[ConfiguredDeployment] = []
        total = 0
        for item in filter(None, items.split(",")):
            try:
                broker_id, stores, parts, status = (int(x) for x in item.split(":"))
            except ValueError as exc:
                raise MessageFormatError(f"bad topic meta info item {item!r} in {text[:200]!r}") from exc
            if not 0 <= parts <= PARTITION_STORE_BASE or stores < 0:
                raise MessageFormatError(f"bad store/partition count in {item!r} of {text[:200]!r}")
            total += parts * stores
            if total > MAX_TOPIC_PARTITIONS:
                raise MessageFormatError(f"topic meta info {text[:200]!r} expands to more than "
                                         f"{MAX_TOPIC_PARTITIONS} partitions (at {item!r})")
            out.append(cls(topic, broker_id, stores, parts, status == 1))
        return out
