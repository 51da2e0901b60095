"""RocketMQ: offsets a user names that the topic cannot serve fail at the start (tubespark.spark.offset_rules),
against the stream reader tests' in-memory double. A running query's own offset above a lagging slave's max
still waits (test_stream_reader.py::test_a_serving_broker_behind_the_query_is_waited_for)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.readers import RocketMQBatchReader
from tests.unit.rocketmq.test_stream_reader import Q0, Q1, FakeRocketMQ, make_reader
from tubespark.errors import OptionError
from tubespark.rocketmq.spark import adapter
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.wire.route import MessageQueue

DOWN = "orders:broker-b:3"  # a queue of a broker group that is not registered now


class Routed(FakeRocketMQ):
    """The double with routes and down groups (``down``: broker group -> its known queues)."""

    def __init__(self, queues: dict[str, tuple[int, int]]) -> None:
        super().__init__(queues)
        self.down: dict[str, tuple[MessageQueue, ...]] = {}

    def route(self, topic: str, *, refresh: bool = False) -> Any:
        return SimpleNamespace(read_queues=lambda: [MessageQueue.parse_key(k) for k in self.queues])

    def down_groups(self, topic: str, route: Any) -> dict[str, tuple[MessageQueue, ...]]:
        return {group: tuple(q for q in queues if q.topic == topic) for group, queues in self.down.items()}

    def __enter__(self) -> Routed:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Routed:
    fake = Routed({Q0: (0, 30), Q1: (0, 10)})
    def queues(client: object, topics: object, refresh: bool = False) -> list[MessageQueue]:
        return sorted(MessageQueue.parse_key(k) for k in fake.queues)

    for module in (adapter,):
        monkeypatch.setattr(module, "all_queues", queues)
    monkeypatch.setattr(adapter, "RocketMQClient", lambda namesrvs, settings: fake)
    return fake


def batch(**raw: str) -> RocketMQBatchReader:
    return RocketMQBatchReader(RocketMQOptions.from_raw({"namesrv": "127.0.0.1:9876", "topic": "orders", **raw},
                                                        mode="read"))


def test_a_stream_start_above_a_queues_max_fails_instead_of_waiting(cluster: Routed) -> None:
    reader = make_reader(cluster, startingOffsets=f'{{"{Q0}": 31}}')
    with pytest.raises(OptionError, match=rf"option startingOffsets: {Q0} is at 31, beyond the partition's max offset "
                                          r"30: use latest or an offset up to 30"):
        reader.initialOffset()
    assert make_reader(cluster, startingOffsets=f'{{"{Q0}": 30}}').initialOffset() == {Q0: 30, Q1: 0}


def test_a_batch_start_above_a_queues_max_fails_naming_it(cluster: Routed) -> None:
    with pytest.raises(OptionError, match=rf"{Q0} is at 31, beyond the partition's max offset 30"):
        batch(startingOffsets=f'{{"{Q0}": 31}}', endingOffsets=f'{{"{Q0}": 30}}').partitions()


@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets"])
def test_a_batch_read_naming_a_queue_the_topic_does_not_have_fails(cluster: Routed, option: str) -> None:
    spec = f'{{"{Q0}": 3, "orders:broker-a:7": 3}}'
    with pytest.raises(OptionError, match=rf"option {option} names a partition the topics do not have: "
                                          rf"orders:broker-a:7; they have {Q0}, {Q1} \(keys are "
                                          r"topic:brokerName:queueId; `mqadmin topicRoute"):
        batch(**{option: spec}).partitions()


def test_a_stream_naming_a_queue_the_topic_does_not_have_fails(cluster: Routed) -> None:
    reader = make_reader(cluster, startingOffsets='{"orders:broker-a:7": 3, "other:broker-a:0": 1}')
    with pytest.raises(OptionError, match="names partitions the topics do not have: orders:broker-a:7, "
                                          "other:broker-a:0;"):
        reader.initialOffset()


def test_a_queue_of_a_group_that_is_down_is_no_unknown_queue(cluster: Routed) -> None:
    cluster.down = {"broker-b": (MessageQueue.parse_key(DOWN),)}
    assert make_reader(cluster, startingOffsets=f'{{"{DOWN}": 3}}').initialOffset() == {Q0: 0, Q1: 0}
