"""The sink and a topic the name server does not route yet, on the real 5.3.3 broker (issue 26, part 5).

The testbed's broker has ``autoCreateTopicEnable=true`` (RocketMQ's default, and so the template topic
``TBW102`` with the inherit permission). By default the sink still refuses an unrouted topic, with an error
that says what to do (a typo must not become a topic); with ``autoCreateTopic=true`` it sends over
``TBW102``'s route and the broker creates the topic on the first send, as for RocketMQ's Java producer.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tubespark.errors import UnknownTopicError
from tubespark.rocketmq.client.client import RocketMQClient, all_queues
from tubespark.rocketmq.client.producer import AUTO_CREATE_QUEUES, BatchProducer

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_the_sink_creates_an_unrouted_topic_only_when_asked(spark, rocketmq_stack):
    broker_conf = (rocketmq_stack.node("broker-a").directory / "broker.conf").read_text()
    assert "autoCreateTopicEnable=true" in broker_conf.splitlines()
    assert rocketmq_stack.client.route("TBW102", refresh=True).write_queues()  # the template topic's route

    topic = "auto" + uuid.uuid4().hex[:8]
    # the sink's producer, without the option
    with RocketMQClient([rocketmq_stack.namesrv_address]) as client, pytest.raises(UnknownTopicError) as refused:
        BatchProducer(client).queues(topic)
    first = str(refused.value).split("\n", 1)[0]
    assert "check the `topic` option" in first and "autoCreateTopic=true" in first, first
    assert not refused.value.retriable
    with RocketMQClient([rocketmq_stack.namesrv_address]) as client, pytest.raises(UnknownTopicError) as unread:
        client.route(topic)  # what a read of it meets: the first line says what to do too
    assert "check the `topic` option" in str(unread.value).split("\n", 1)[0], unread.value

    values = [f"v{i}" for i in range(30)]
    writer = (spark.createDataFrame([(v,) for v in values], "value string").write.format("rocketmq")
              .option("namesrv", rocketmq_stack.namesrv_address).option("topic", topic).mode("append"))
    writer.option("autoCreateTopic", "true").save()

    deadline = time.monotonic() + 30  # the broker registers the topic it created, and dispatches, asynchronously
    with RocketMQClient([rocketmq_stack.namesrv_address]) as client:
        while True:
            try:
                if sum(h - low for low, h in client.bounds(all_queues(client, [topic], refresh=True)).values()) \
                        >= len(values):
                    break
            except UnknownTopicError:
                pass
            assert time.monotonic() < deadline, "the created topic was not routed, or its rows not in its queues"
            time.sleep(0.1)
        assert [q.write_queues for q in client.route(topic).queues] == [AUTO_CREATE_QUEUES]
    rows = (spark.read.format("rocketmq").option("namesrv", rocketmq_stack.namesrv_address).option("topic", topic)
            .load().collect())
    assert sorted(r.value for r in rows) == sorted(v.encode() for v in values)
