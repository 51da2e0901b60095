"""The per-broker adapters of the contract suite: everything a contract test needs to know about a broker.

A contract test is written once and runs against every broker through :class:`Broker`:

* ``format`` and ``connection()``: ``spark.read.format(b.format).options(**b.connection())`` reaches it;
  ``connection(address)`` points the same options at another address (the bad-options test's listener);
* ``stream_options()``: what each new streaming query needs besides that (TubeMQ: its own consumer group);
* ``new_topic()``: a fresh, empty topic of :attr:`Broker.partitions` partitions, ready for reads and writes;
* ``produce(topic, values)``: send the values spread over the partitions with the broker's own client;
  it returns once they are readable;
* ``held(topic)``: what the broker holds, read back with the broker's own client (not through Spark):
  ``{partition key: [(offset, value), ...]}`` in offset order, the keys and offsets being the ones
  ``startingOffsets``/``endingOffsets`` JSON takes and a row's :attr:`Broker.key_column` /
  :attr:`Broker.offset_column` show;
* ``restart()``: stop the broker, keep it down :data:`DOWN_S` seconds at least, start it again on the same
  port with the same data, and return once it serves; ``stop(topic)`` and ``start()`` are its two halves
  (``stop`` returns once a read of ``topic`` would find the broker down);
* ``server_of(key)``: how an error names the broker that holds partition ``key``;
* ``record_size``: offset units per message (TubeMQ's offsets are byte positions of 28-byte index records,
  the others count messages, so every number is a message boundary there);
* ``expire(topic, key, offset)``: remove partition ``key``'s messages below ``offset`` as retention would, so
  ``offset`` becomes its first available one. Only the TANK double can do that within a test: the real servers
  delete old data only in their own periodic cleanup (see each class), so there it skips the test.

The brokers: TubeMQ and RocketMQ are the real servers of the test session (``tubemq_cluster`` and
``rocketmq_stack`` in ``tests/integration/conftest.py``); TANK is the documented double
(``tests/doubles/tank_broker.py``), one for the whole suite.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from tests.doubles.tank_broker import TankBroker
from tests.integration.helpers import bodies
from tests.integration.helpers import produce as tubemq_produce

NAMES = ("tubemq", "rocketmq", "tank")
EXPIRING = ("tank",)
"""The brokers whose old data a test can remove (:meth:`Broker.expire`); the others say why not in
``cannot_expire`` (TubeMQ's case runs on tests/integration/tubemq/test_data_loss.py's own cluster)."""
DOWN_S = 3.0
"""How long a restarted broker stays down at least (a JVM's own start adds to it)."""

Held = dict[str, list[tuple[int, bytes]]]


def new_name(prefix: str) -> str:
    """Letters, digits and underscores: a valid topic or group name on every broker."""
    return f"{prefix}{uuid.uuid4().hex[:10]}"


class Broker(ABC):
    """One broker as the contract suite sees it (see the module docstring)."""

    name: str
    format: str
    partitions = 4
    key_column: str
    """SQL expression of a row's partition key (the key of ``startingOffsets`` JSON)."""
    offset_column: str

    @abstractmethod
    def connection(self, address: str | None = None) -> dict[str, str]: ...

    def stream_options(self) -> dict[str, str]:
        return self.connection()

    @abstractmethod
    def new_topic(self) -> str: ...

    @abstractmethod
    def produce(self, topic: str, values: Sequence[bytes]) -> None: ...

    @abstractmethod
    def held(self, topic: str) -> Held: ...

    record_size = 1

    @abstractmethod
    def stop(self, topic: str) -> None: ...

    @abstractmethod
    def start(self) -> None: ...

    def restart(self) -> None:
        """Stop, stay down :data:`DOWN_S` seconds, start on the same port with the same data."""
        self.stop("")
        time.sleep(DOWN_S)
        self.start()

    @abstractmethod
    def server_of(self, key: str) -> str: ...

    cannot_expire = "no way to delete old data on demand"

    def expire(self, topic: str, key: str, offset: int) -> None:
        """Make ``offset`` the first available offset of partition ``key`` (see the module docstring)."""
        raise AssertionError(f"{self.name} cannot remove old data within a test: {self.cannot_expire}")

    def batch(self, spark: Any, topic: str, **options: str) -> Any:
        """``spark.read`` of ``topic`` (a DataFrame)."""
        return spark.read.format(self.format).options(**{**self.connection(), "topic": topic, **options}).load()

    def stream(self, spark: Any, topic: str, **options: str) -> Any:
        """``spark.readStream`` of ``topic`` as a new query (a streaming DataFrame)."""
        return (spark.readStream.format(self.format).options(**{**self.stream_options(), "topic": topic, **options})
                .load())

    def held_values(self, topic: str) -> list[bytes]:
        return [value for messages in self.held(topic).values() for _offset, value in messages]

    def __repr__(self) -> str:
        return self.name


class TubeMQ(Broker):
    """The session's real TubeMQ cluster. A topic of 4 partitions is 4 stores of one partition each, so
    every partition has its own index and its offsets are exact (0, 28, 56, ...)."""

    name = format = "tubemq"
    key_column = "partitionKey"
    offset_column = "offset"
    record_size = 28
    cannot_expire = ("the session cluster's broker deletes expired segments only in its cleanup pass (at most once "
                     "a minute, default every 3 minutes) and only whole segments (64 MiB here): a partition whose "
                     "first offset is above 0 takes a dedicated cluster and minutes of waiting; "
                     "tests/integration/tubemq/test_data_loss.py has one and covers the case (batch and stream)")
    released_s = 40.0
    """How long the master may take to release a stopped broker's partitions (its heartbeat timeout is 10 s here; a
    graceful stop is released at once)."""

    def __init__(self, cluster: Any, topic_factory: Callable[..., str]) -> None:
        self.cluster = cluster
        self.topic_factory = topic_factory

    def connection(self, address: str | None = None) -> dict[str, str]:
        """The master, and its web API (``masterWebUrl``): the configuration that tells a broker that is down
        from a partition that is gone, as a production deployment gives it."""
        if address is not None:
            return {"master": address}
        return {"master": self.cluster.master_address, "masterWebUrl": ",".join(self.cluster.master_web_urls)}

    def stream_options(self) -> dict[str, str]:
        return {**self.connection(), "group": new_name("contract_"), "heartbeatIntervalMs": "1000"}

    def new_topic(self) -> str:
        return self.topic_factory(partitions=1, stores=self.partitions)

    def produce(self, topic: str, values: Sequence[bytes]) -> None:
        tubemq_produce(self.cluster.master_address, topic, bodies(list(values)))

    def held(self, topic: str) -> Held:
        from tubespark.tubemq.client.broker import BrokerClient
        from tubespark.tubemq.client.common import new_client_id
        from tubespark.tubemq.client.metadata import topic_partitions
        from tubespark.tubemq.client.ranges import RangeReader, probe_bounds

        held: Held = {}
        for part in topic_partitions(self.cluster.master_address, [topic])[topic]:
            broker = BrokerClient(new_client_id("contract"))
            try:
                bounds = probe_bounds(broker, part, new_name("contract_probe_"))
                reader = RangeReader(broker, new_name("contract_read_"))
                held[part.key] = [(m.offset, m.data)
                                  for m in reader.read(part, bounds.min_offset, bounds.max_offset)]
            finally:
                broker.close()
        return held

    def stop(self, topic: str) -> None:
        """A clean stop (SIGTERM): the broker flushes what it acknowledged. A kill -9 would lose its memory
        cache, TubeMQ's own durability window, which tubemq/test_faults_*.py cover with their own clusters.
        Returns once the master lists none of ``topic``'s partitions (it released the broker)."""
        from tubespark.tubemq.client.metadata import topic_partitions

        self.cluster.process("broker").stop(grace_s=10.0)
        deadline = time.monotonic() + self.released_s
        while topic and topic_partitions(self.cluster.master_address, [topic], timeout_s=5, missing_ok=True)[topic]:
            assert time.monotonic() < deadline, f"the master still lists {topic} after {self.released_s:.0f} s"
            time.sleep(0.5)

    def start(self) -> None:
        self.cluster.restart("broker", kill=False)  # already stopped: starts it, waits until topics serve

    def server_of(self, key: str) -> str:
        return f"broker {key.split(':', 1)[0]}"  # brokerId:topic:partitionId


class RocketMQ(Broker):
    """The session's real RocketMQ name server + broker ``broker-a``; a topic of 4 queues."""

    name = format = "rocketmq"
    key_column = "queueKey"
    offset_column = "queueOffset"
    cannot_expire = ("the broker deletes commit log files only when they are older than fileReservedTime (hours) "
                     "or the disk is nearly full, and the session's commit log holds every topic: removing old "
                     "data would take other tests' messages too")

    def __init__(self, stack: Any) -> None:
        self.stack = stack

    def connection(self, address: str | None = None) -> dict[str, str]:
        return {"namesrv": address or self.stack.namesrv_address}

    def new_topic(self) -> str:
        return str(self.stack.create_topic(new_name("contract_"), self.partitions))

    def _client(self) -> Any:
        from tubespark.rocketmq.client.client import RocketMQClient

        return RocketMQClient([self.stack.namesrv_address])

    def _total(self, client: Any, topic: str) -> int:
        from tubespark.rocketmq.client.client import all_queues

        return sum(high - low for low, high in client.bounds(all_queues(client, [topic], refresh=True)).values())

    def produce(self, topic: str, values: Sequence[bytes]) -> None:
        from tubespark.rocketmq.client.producer import BatchProducer

        with self._client() as client:
            before = self._total(client, topic)
            producer = BatchProducer(client, batch_messages=1)  # batches go round robin: one message each
            for value in values:
                producer.add(topic, value, {})
            producer.flush()
            deadline = time.monotonic() + 30  # the broker dispatches to its queues asynchronously
            while self._total(client, topic) < before + len(values):
                assert time.monotonic() < deadline, "sent messages did not reach the queues"
                time.sleep(0.1)

    def held(self, topic: str) -> Held:
        from tubespark.rocketmq.client.client import all_queues
        from tubespark.rocketmq.client.ranges import RangeReader

        held: Held = {}
        with self._client() as client:
            queues = all_queues(client, [topic], refresh=True)
            bounds = client.bounds(queues)
            reader = RangeReader(client, new_name("contract_read_"))
            for mq in queues:
                low, high = bounds[mq.key]
                held[mq.key] = [(m.queue_offset, m.body) for batch in reader.read(mq, low, high) for m in batch]
        return held

    def stop(self, topic: str) -> None:
        """A clean stop (SIGTERM: the broker unregisters from the name server at once)."""
        self.stack.node("broker-a").process.stop(grace_s=10.0)

    def start(self) -> None:
        node = self.stack.node("broker-a")
        self.stack.restart_broker(node)
        self.stack.wait_registered(node)

    def server_of(self, key: str) -> str:
        return key.split(":")[1]  # topic:brokerName:queueId


class Tank(Broker):
    """The TANK double of the suite (one broker, in this process, reached over TCP like a real one)."""

    name = format = "tank"
    key_column = "concat(topic, ':', CAST(partition AS STRING))"
    offset_column = "offset"

    def __init__(self, double: TankBroker) -> None:
        self.double = double

    def connection(self, address: str | None = None) -> dict[str, str]:
        return {"broker": address or self.double.address}

    def new_topic(self) -> str:
        name = new_name("contract_")
        self.double.create_topic(name, self.partitions)
        return name

    def produce(self, topic: str, values: Sequence[bytes]) -> None:
        """Round robin: value ``i`` goes to partition ``i % partitions``, one bundle per partition."""
        from tubespark.tank.client.producer import Producer
        from tubespark.tank.wire.bundle import encode_bundle

        now_ms = int(time.time() * 1000)
        bundles = {}
        for p in range(self.partitions):
            mine = list(values[p::self.partitions])
            if mine:
                bundles[p] = encode_bundle(mine, [now_ms] * len(mine))
        producer = Producer(self.double.address)
        try:
            producer.send(topic, bundles)
            producer.flush()
        finally:
            producer.close()

    def held(self, topic: str) -> Held:
        from tubespark.tank.client.broker import TankClient
        from tubespark.tank.client.ranges import RangeReader

        held: Held = {}
        with TankClient(self.double.address) as client:
            infos = client.partitions(topic)
        with RangeReader(self.double.address) as reader:
            for info in infos:
                batches = reader.read(topic, info.partition, info.first_available, info.high_water_mark + 1)
                held[f"{topic}:{info.partition}"] = [(seq, value) for c in batches
                                                     for seq, value in zip(c.seqs, c.values, strict=True)]
        return held

    def stop(self, topic: str) -> None:
        """Close the listener and every connection (new connections fail at once); the data stays."""
        self.double.stop()

    def start(self) -> None:
        """Listen again on the same port."""
        self.double.start()

    def server_of(self, key: str) -> str:
        return self.double.address

    def expire(self, topic: str, key: str, offset: int) -> None:
        """Retention in the double: the bundles wholly below ``offset`` go (``offset`` must start a bundle)."""
        partition = int(key.rsplit(":", 1)[1])
        self.double.drop_before(topic, partition, offset)
