"""A broker group that is down is not a topic that is gone, nor queues that never were (issue 23 part 8).

The RocketMQ name server forgets a group the moment its last member stops or its connection closes: the
group leaves the cluster and every route, with nothing left to tell it from a group that never held the
topic. Seen on a real two-group stack (tests/integration/rocketmq/test_broker_groups.py): a batch read
planned while ``broker-b`` was stopped returned ``broker-a``'s rows only, without a word. The evidence the
connector keeps instead is what this process was routed to, and the queues a checkpoint or the offsets
options name; against it, a batch read fails naming the group, and a query restarted while the only group
of its topic is down waits for it instead of failing as an unknown topic.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.readers import RocketMQBatchReader
from tests.unit.rocketmq.test_client_ranges import LOCAL, AnsweringNameServer
from tubespark.errors import BrokerUnavailableError, PartitionsUnavailableError, UnknownTopicError
from tubespark.rocketmq.client import client as client_module
from tubespark.rocketmq.client.client import ClientSettings, RocketMQClient, remember
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.wire import codes
from tubespark.rocketmq.wire.frame import FLAG_RESPONSE, Command
from tubespark.rocketmq.wire.route import MessageQueue


def _route(groups: list[str]) -> bytes:
    queues = ", ".join(f'{{"brokerName": "{g}", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}}' for g in groups)
    brokers = ", ".join(f'{{"cluster": "c", "brokerName": "{g}", "brokerAddrs": {{"0": "127.0.0.1:1"}}}}'
                        for g in groups)
    return f'{{"queueDatas": [{queues}], "brokerDatas": [{brokers}]}}'.encode()


class GroupsNameServer(AnsweringNameServer):
    """Routes ``topics[name]`` (broker groups) and registers ``live`` groups, as a name server that forgets a
    stopped group does: tests stop a group by taking it out of both."""

    def __init__(self) -> None:
        super().__init__(codes.SUCCESS)
        self.topics: dict[str, list[str]] = {}
        self.live = ["broker-a", "broker-b"]

    def answer(self, request: Command) -> Command:
        if request.code == codes.GET_BROKER_CLUSTER_INFO:
            table = ",".join(f'"{g}":{{"brokerAddrs":{{0:"127.0.0.1:1"}},"brokerName":"{g}"}}' for g in self.live)
            return Command(codes.SUCCESS, flag=FLAG_RESPONSE, body=f'{{"brokerAddrTable":{{{table}}}}}'.encode())
        topic = request.ext.get("topic", "")
        groups = [g for g in self.topics.get(topic, []) if g in self.live]
        if not groups:
            return Command(codes.TOPIC_NOT_EXIST, remark="No topic route info in name server", flag=FLAG_RESPONSE)
        return Command(codes.SUCCESS, flag=FLAG_RESPONSE, body=_route(groups))

    def stop_group(self, group: str) -> None:
        self.live.remove(group)


@pytest.fixture
def namesrv(monkeypatch: pytest.MonkeyPatch) -> Iterator[GroupsNameServer]:
    monkeypatch.setattr(client_module, "_seen", {})  # a fresh process: it knows no queue yet
    monkeypatch.setattr(client_module, "_away", {})
    server = GroupsNameServer()
    yield server
    server.close()


def _batch(namesrv: GroupsNameServer, topic: str, **extra: str) -> RocketMQBatchReader:
    options = {"namesrv": namesrv.address, "topic": topic, "requestTimeoutMs": "5000", "connectTimeoutMs": "5000",
               **extra}
    return RocketMQBatchReader(RocketMQOptions.from_raw(options, mode="read"))


def test_a_batch_read_while_a_group_this_process_was_routed_to_is_down_fails_naming_it(namesrv):
    namesrv.topics["orders"] = ["broker-a", "broker-b"]
    with RocketMQClient([namesrv.address], LOCAL) as seen:  # e.g. an earlier read of this driver
        assert {mq.broker_name for mq in seen.route("orders").read_queues()} == {"broker-a", "broker-b"}
    namesrv.stop_group("broker-b")
    with pytest.raises(PartitionsUnavailableError, match="broker group broker-b") as caught:
        _batch(namesrv, "orders").partitions()  # before: planned broker-a's queues only, in silence
    assert caught.value.unavailable == {"broker-b": ("orders:broker-b:0", "orders:broker-b:1")}
    assert caught.value.retriable
    assert "2 of its 4 partitions" in str(caught.value)


def test_queues_the_offsets_name_are_known_in_a_fresh_process(namesrv):
    namesrv.topics["orders"] = ["broker-a", "broker-b"]
    namesrv.stop_group("broker-b")
    reader = _batch(namesrv, "orders", endingOffsets='{"orders:broker-a:0": 0, "orders:broker-b:1": 5}')
    with pytest.raises(PartitionsUnavailableError) as caught:
        reader.partitions()
    assert caught.value.unavailable == {"broker-b": ("orders:broker-b:1",)}


def test_a_known_group_that_runs_but_no_longer_routes_the_topic_had_it_removed_not_down(namesrv):
    remember([MessageQueue("orders", "broker-b", 0)])
    namesrv.topics["orders"] = ["broker-a"]  # broker-b is registered: the topic was deleted there
    with RocketMQClient([namesrv.address], LOCAL) as client:
        assert client.down_groups("orders", client.route("orders")) == {}
        assert "broker-b" not in client_module.remembered("orders")


def test_a_restarted_query_whose_topic_lives_only_on_a_down_group_waits_instead_of_unknown_topic(namesrv):
    namesrv.topics["solo"] = ["broker-b"]
    namesrv.stop_group("broker-b")  # broker-a still runs: "no broker registered" does not apply
    with RocketMQClient([namesrv.address], LOCAL) as fresh:
        with pytest.raises(UnknownTopicError):  # nothing known of the topic: it may as well not exist
            fresh.route("solo")
        remember([MessageQueue("solo", "broker-b", 0)])  # the restarted query's checkpoint names its queue
        with pytest.raises(BrokerUnavailableError, match="knows its queues on broker-b, not registered now"):
            fresh.route("solo")  # before: UnknownTopicError, and the restarted query failed


def test_a_group_registered_again_but_not_routing_its_topic_yet_is_still_down_until_failover_s(namesrv):
    """Seen in a two-lane CI run: broker-b registered again while the name server had no route yet for the topic
    that lives on it alone, and the query restarted during the outage took that for a topic removed there and
    stopped (UnknownTopicError). Found away moments ago, it is still an outage, for ``failover_s``."""
    namesrv.topics["solo"] = ["broker-b"]
    namesrv.stop_group("broker-b")
    remember([MessageQueue("solo", "broker-b", 0)])  # the restarted query's checkpoint
    settings = ClientSettings(connect_timeout_s=5.0, request_timeout_s=5.0, failover_s=30.0)
    with RocketMQClient([namesrv.address], settings) as client:
        with pytest.raises(BrokerUnavailableError, match="not registered now"):
            client.route("solo")
        namesrv.live.append("broker-b")  # registered again: its topic not routed yet
        namesrv.topics["solo"] = []
        with pytest.raises(BrokerUnavailableError, match="registered again moments ago"):
            client.route("solo")
        namesrv.topics["solo"] = ["broker-a"]  # a running query's view: broker-b is not down, just not routing
        assert set(client.down_groups("solo", client.route("solo"))) == {"broker-b"}
        client_module._away["broker-b"] -= 31.0  # failover_s has passed since it was found away (no 30 s sleep):
        # a registered group that does not route the topic had it removed
        assert client.down_groups("solo", client.route("solo", refresh=True)) == {}
    namesrv.topics["solo"] = []
    with RocketMQClient([namesrv.address], settings) as fresh, pytest.raises(UnknownTopicError):
        fresh.route("solo")
