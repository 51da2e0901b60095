"""Topic routes (GET_ROUTEINFO_BY_TOPIC's JSON body) and the queues they give readers and writers.

A route lists the topic's broker groups (``queueDatas``: queue counts and permission per group) and each
group's members (``brokerDatas``: broker id -> address, id 0 the master). When a group's master is gone
and slave-acting-master is on, the name server clears WRITE on the group and moves the acting slave's
address to id 0, so a client that always talks to id 0 reads from the acting master without knowing it
(docs/rocketmq/protocol.md, "Routes" and "Acting master").
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tubespark.errors import CodecError

PERM_READ = 0x4
PERM_WRITE = 0x2
MASTER_ID = 0
MAX_QUEUES_PER_GROUP = 1024
"""More read or write queues than this in one group is taken as a corrupt route, not planned."""


@dataclass(frozen=True, order=True)
class MessageQueue:
    """One queue: ``(topic, brokerName, queueId)``. ``key`` is how offsets name it: ``topic:broker:queue``."""

    topic: str
    broker_name: str
    queue_id: int

    @property
    def key(self) -> str:
        return f"{self.topic}:{self.broker_name}:{self.queue_id}"

    @staticmethod
    def parse_key(key: str) -> MessageQueue:
        """The queue a key names; ValueError for anything else. Topics hold no ``:``, queue ids are digits."""
        topic, sep, rest = key.partition(":")
        broker, sep2, queue = rest.rpartition(":")
        if not sep or not sep2 or not topic or not broker or not queue.isdigit() or str(int(queue)) != queue:
            raise ValueError(f"bad queue key {key!r}, expected topic:brokerName:queueId")
        return MessageQueue(topic, broker, int(queue))


@dataclass(frozen=True)
class QueueData:
    broker_name: str
    read_queues: int
    write_queues: int
    perm: int

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


@dataclass(frozen=True)
class BrokerData:
    cluster: str
    broker_name: str
    addresses: dict[int, str]
    acting_master: bool

    @property
    def master(self) -> str | None:
        return self.addresses.get(MASTER_ID)

    def read_address(self) -> str | None:
        """Where reads of this group go: id 0 (the master, or the acting master the name server put there),
        else the member with the smallest id (a slave serves reads of what it replicated)."""
        if not self.addresses:
            return None
        return self.addresses.get(MASTER_ID) or self.addresses[min(self.addresses)]


@dataclass(frozen=True)
class TopicRoute:
    topic: str
    queues: tuple[QueueData, ...]
    brokers: dict[str, BrokerData]

    def read_queues(self) -> list[MessageQueue]:
        """Every queue a consumer reads: each readable group's read queues (whoever serves them)."""
        out = [MessageQueue(self.topic, q.broker_name, i)
               for q in self.queues if q.readable and q.broker_name in self.brokers for i in range(q.read_queues)]
        return sorted(out)

    def write_queues(self) -> list[MessageQueue]:
        """Queues a producer may send to: writable groups that have a live master (id 0)."""
        out = [MessageQueue(self.topic, q.broker_name, i) for q in self.queues
               if q.writable and self.brokers.get(q.broker_name) and self.brokers[q.broker_name].master
               for i in range(q.write_queues)]
        return sorted(out)

    def read_address(self, broker_name: str) -> str | None:
        broker = self.brokers.get(broker_name)
        return broker.read_address() if broker else None

    def write_address(self, broker_name: str) -> str | None:
        broker = self.brokers.get(broker_name)
        return broker.master if broker else None


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CodecError(f"route: {what} is not an integer: {value!r}")
    return value


def parse_route(topic: str, body: bytes) -> TopicRoute:
    """The route of ``topic`` from its JSON body (standard JSON: ask with ``acceptStandardJsonOnly``)."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CodecError(f"route of {topic} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CodecError(f"route of {topic} is not a JSON object")
    queues = []
    for item in doc.get("queueDatas") or ():
        if not isinstance(item, dict):
            raise CodecError(f"route of {topic}: a queueData is not an object")
        data = QueueData(str(item.get("brokerName", "")), _int(item.get("readQueueNums", 0), "readQueueNums"),
                         _int(item.get("writeQueueNums", 0), "writeQueueNums"), _int(item.get("perm", 0), "perm"))
        if not (0 <= data.read_queues <= MAX_QUEUES_PER_GROUP and 0 <= data.write_queues <= MAX_QUEUES_PER_GROUP):
            raise CodecError(f"route of {topic}: {data.broker_name} claims {data.read_queues} read / "
                             f"{data.write_queues} write queues")
        queues.append(data)
    brokers = {}
    for item in doc.get("brokerDatas") or ():
        if not isinstance(item, dict) or not isinstance(item.get("brokerAddrs") or {}, dict):
            raise CodecError(f"route of {topic}: a brokerData is not an object with a brokerAddrs map")
        try:
            addresses = {int(k): str(v) for k, v in (item.get("brokerAddrs") or {}).items()}
        except ValueError:
            raise CodecError(f"route of {topic}: broker ids are not integers: {item.get('brokerAddrs')}") from None
        name = str(item.get("brokerName", ""))
        brokers[name] = BrokerData(str(item.get("cluster", "")), name, addresses, bool(item.get("enableActingMaster")))
    return TopicRoute(topic, tuple(queues), brokers)
