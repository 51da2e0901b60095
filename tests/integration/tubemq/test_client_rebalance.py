"""Server-balanced consumer groups against the real TubeMQ master: split, join, leave, nothing lost.

* Two members of one group split a 4-partition topic through the master's rebalance events: each
  holds 2, together all 4, none both -- and the broker's registrations say the same.
* A third member joins and later leaves (cleanly: it stops polling, then closes) while a producer keeps
  sending. Every produced message is consumed at least once and, because each hand-over releases a
  partition with "last batch consumed" before the master gives it to the next member, none twice.

The cluster's balance period is a few seconds; heartbeats every second make the hand-overs quick.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable

import pytest

from tests.integration.tubemq.group_consumer import Consumer
from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.wire.message import OutgoingMessage

pytestmark = [pytest.mark.integration]

PUBLISH_TIMEOUT_S = 240.0
REBALANCE_TIMEOUT_S = 60.0  # a few balance periods plus event hand-over
DRAIN_TIMEOUT_S = 60.0
FAST = ClientSettings(heartbeat_interval_s=1)


@pytest.fixture(scope="module")
def topic(topic_factory) -> str:
    return topic_factory(partitions=4, stores=1)


def _wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def _holdings(consumers: dict[str, Consumer]) -> dict[str, set[str]]:
    return {name: set(c.session.held()) for name, c in consumers.items()}


def _split(holdings: dict[str, set[str]], sizes: tuple[int, ...] | None = None) -> bool:
    """All 4 partitions held, none by two members, and (optionally) these many per member."""
    everything = [p for held in holdings.values() for p in held]
    if len(everything) != 4 or len(set(everything)) != 4:
        return False
    return sizes is None or sorted(len(h) for h in holdings.values()) == sorted(sizes)


def _broker_view(tubemq_cluster, topic: str, group: str) -> dict[str, str]:
    """The broker's registrations: ``{partition key: consumer id}``."""
    answer = tubemq_cluster.broker_admin("admin_get_partition_reginfo", topicName=topic, groupName=group)
    view = {}
    for row in answer.get("dataSet", []):
        _group, topic_name, partition_id = row["Partition"].split(":")
        view[f"{tubemq_cluster.broker_id}:{topic_name}:{partition_id}"] = row["Consumer"]
    return view


def test_two_members_split_the_partitions(tubemq_cluster, topic):
    group = f"rb_split_{uuid.uuid4().hex[:10]}"
    master = tubemq_cluster.master_address
    with Consumer(master, group, [topic], settings=FAST) as c1, Consumer(master, group, [topic], settings=FAST) as c2:
        members = {"c1": c1, "c2": c2}
        assert _wait_until(lambda: _split(_holdings(members), (2, 2)), REBALANCE_TIMEOUT_S), _holdings(members)
        holdings = _holdings(members)
        assert len(holdings["c1"]) == 2 and len(holdings["c2"]) == 2
        assert not holdings["c1"] & holdings["c2"]
        assert holdings["c1"] | holdings["c2"] == {f"{tubemq_cluster.broker_id}:{topic}:{i}" for i in range(4)}
        # Ownership is real where it is enforced: the broker registered each partition to its holder.
        expected = {key: c.client_id for c in members.values() for key in c.session.held()}
        assert _wait_until(lambda: _broker_view(tubemq_cluster, topic, group) == expected, 10.0), (
            _broker_view(tubemq_cluster, topic, group), expected)


class _Poller(threading.Thread):
    """Polls one consumer until stopped and records which member received each message body."""

    def __init__(self, name: str, consumer: Consumer, received: dict[bytes, list[str]], lock: threading.Lock):
        super().__init__(name=f"poller-{name}", daemon=True)
        self.member, self.consumer, self.received, self.lock = name, consumer, received, lock
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                batch = self.consumer.poll(timeout_s=0.5)
                if batch is not None:
                    with self.lock:
                        for message in batch.messages:
                            self.received[message.data].append(self.member)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def halt(self) -> None:
        self.stop.set()
        self.join(timeout=30)
        assert not self.is_alive(), f"poller {self.member} did not stop"
        assert self.error is None, f"poller {self.member} failed: {self.error!r}"


class _Sender(threading.Thread):
    """Sends numbered messages (round-robin over the partitions) until stopped."""

    def __init__(self, producer: Producer, topic: str, tag: str):
        super().__init__(name="sender", daemon=True)
        self.producer, self.topic, self.tag = producer, topic, tag
        self.sent: list[bytes] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                body = f"{self.tag}-{len(self.sent):06d}".encode()
                self.producer.send(self.topic, OutgoingMessage(body))
                self.sent.append(body)
                time.sleep(0.004)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def halt(self) -> None:
        self.stop.set()
        self.join(timeout=30)
        assert self.error is None, f"sender failed: {self.error!r}"


class _OverlapMonitor(threading.Thread):
    """Samples every member's holdings; any partition held by two members at once is recorded."""

    def __init__(self, members: dict[str, Consumer]):
        super().__init__(name="overlap-monitor", daemon=True)
        self.members = members
        self.overlaps: list[dict[str, set[str]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            holdings = _holdings(dict(self.members))
            everything = [p for held in holdings.values() for p in held]
            if len(everything) != len(set(everything)):
                self.overlaps.append(holdings)


def test_member_joins_and_leaves_while_producing(tubemq_cluster, topic):
    group = f"rb_churn_{uuid.uuid4().hex[:10]}"
    master = tubemq_cluster.master_address
    received: dict[bytes, list[str]] = defaultdict(list)
    lock = threading.Lock()
    members: dict[str, Consumer] = {}
    pollers: dict[str, _Poller] = {}

    def join(name: str) -> None:
        members[name] = Consumer(master, group, [topic], settings=FAST, start="earliest").start()
        pollers[name] = _Poller(name, members[name], received, lock)
        pollers[name].start()

    monitor = _OverlapMonitor(members)
    with Producer(master) as producer:
        producer.publish([topic], timeout_s=PUBLISH_TIMEOUT_S)
        sender = _Sender(producer, topic, group)
        try:
            join("c1")
            join("c2")
            monitor.start()
            assert _wait_until(lambda: _split(_holdings(members), (2, 2)), REBALANCE_TIMEOUT_S), _holdings(members)
            sender.start()
            time.sleep(2.0)

            join("c3")
            assert _wait_until(lambda: bool(members["c3"].session.held()) and _split(_holdings(members)),
                               REBALANCE_TIMEOUT_S), f"c3 never got a partition: {_holdings(members)}"
            c3_held = set(members["c3"].session.held())
            time.sleep(3.0)  # c3 consumes for a while

            # c3 leaves cleanly: stop polling, then close (releases its partitions as consumed).
            pollers["c3"].halt()
            c3 = members.pop("c3")
            c3.close()
            assert _wait_until(lambda: _split(_holdings(members), (2, 2)), REBALANCE_TIMEOUT_S), (
                f"c1 and c2 did not take back c3's partitions {sorted(c3_held)}: {_holdings(members)}")
            time.sleep(2.0)
        finally:
            sender.halt()
        sent = list(sender.sent)
        assert len(sent) > 500, f"the sender only sent {len(sent)} messages"

        try:
            _wait_until(lambda: all(body in received for body in sent), DRAIN_TIMEOUT_S)
            time.sleep(2.0)  # a late duplicate would arrive now
        finally:
            monitor.stop.set()
            monitor.join(timeout=5)
            for name in list(pollers):
                if pollers[name].is_alive():
                    pollers[name].halt()
            for consumer in members.values():
                consumer.close()

    with lock:
        got = {body: list(who) for body, who in received.items()}
    missing = [body for body in sent if body not in got]
    duplicated = {body: who for body, who in got.items() if len(who) > 1}
    by_member = defaultdict(int)
    for who in got.values():
        for name in who:
            by_member[name] += 1
    print(f"sent {len(sent)}, received {sum(by_member.values())} ({dict(by_member)})")
    assert not missing, f"{len(missing)} of {len(sent)} messages never consumed, e.g. {missing[:5]}"
    assert set(got) <= set(sent), "received messages nobody sent"
    assert not duplicated, (f"{len(duplicated)} messages consumed more than once across clean hand-overs, "
                            f"e.g. {list(duplicated.items())[:5]}")
    assert by_member["c3"] > 0, "the third member held partitions but consumed nothing"
    assert not monitor.overlaps, f"a partition was held by two members at once: {monitor.overlaps[:3]}"
