"""Slave-acting-master (RIP-32): a pull stream keeps reading when broker-a's master dies mid-stream, from the
slave the name server puts in its place, and goes back to the master when it returns; nothing is lost or
read twice. Pop keeps working against the acting master (its checkpoints escape to broker-b's master).

Its own stack: name server (supportActingMaster) + broker-a master/slave + broker-b master.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tubespark.rocketmq.client.client import RocketMQClient, all_queues
from tubespark.rocketmq.client.pop import PopConsumer, pop_until
from tubespark.rocketmq.client.producer import BatchProducer
from tubespark.rocketmq.wire import headers
from tubespark.rocketmq.wire.route import MessageQueue

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@contextlib.contextmanager
def _ha_stack(_tmp: Path) -> Iterator[Any]:
    from tubespark_testbed.rocketmq import RocketMQStack

    stack = RocketMQStack.acting_master()
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


PRESTART = {"ha_stack": _ha_stack}  # started ahead of this module (tubespark_testbed/prestart.py)
PRESTART_LIGHT = True  # a cluster: mostly waiting while it starts, so it may start beside another


@pytest.fixture(scope="module")
def ha_stack(prestarted) -> Any:
    return prestarted("ha_stack")


def produce(client: RocketMQClient, topic: str, values: list[bytes]) -> None:
    producer = BatchProducer(client, batch_messages=50, retries=10)
    for value in values:
        producer.add(topic, value, {})
    producer.flush()


def wait_for(what: str, probe, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def replicated(client: RocketMQClient, stack, topic: str) -> bool:
    """Whether broker-a's slave holds everything its master holds."""
    master, slave = stack.node("broker-a", 0).address, stack.node("broker-a", 1).address
    for queue in range(2):
        ask = headers.max_offset_request(topic, queue)
        high = headers.read_offset(client.call_address(master, ask, "max"), "max")
        if headers.read_offset(client.call_address(slave, headers.max_offset_request(topic, queue), "max"),
                               "max") < high:
            return False
    return True


def test_reads_follow_the_acting_master_and_back(spark, ha_stack, tmp_path):
    topic = "ha_" + uuid.uuid4().hex[:8]
    ha_stack.create_topic(topic, 2)
    client = RocketMQClient([ha_stack.namesrv_address])
    sent = [f"before{i}".encode() for i in range(400)]
    produce(client, topic, sent)
    wait_for("broker-a's slave to replicate", lambda: replicated(client, ha_stack, topic))
    name = "ha_" + uuid.uuid4().hex[:6]
    frame = (spark.readStream.format("rocketmq").option("namesrv", ha_stack.namesrv_address).option("topic", topic)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "150")
             .option("failoverTimeoutMs", "60000").option("requestTimeoutMs", "3000").load()
             .select("value", "brokerName"))
    query = (frame.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="300 milliseconds").start())

    def seen() -> list:
        assert query.exception() is None, query.exception()
        return spark.sql(f"select value, brokerName from {name}").collect()

    try:
        wait_for("the stream to start reading", lambda: len(seen()) > 0)
        master = ha_stack.node("broker-a", 0)
        slave = ha_stack.node("broker-a", 1)
        ha_stack.kill(master)  # mid-stream: a crash, the name server notices by heartbeat timeout

        def acting() -> bool:
            route = client.route(topic, refresh=True)
            group = next(q for q in route.queues if q.broker_name == "broker-a")
            return route.brokers["broker-a"].addresses.get(0) == slave.address and group.perm == 4
        wait_for("the name server to make broker-a's slave its acting master", acting)
        during = [f"during{i}".encode() for i in range(200)]
        produce(client, topic, during)  # writes go to broker-b only: broker-a is read-only now
        sent += during
        wait_for("every message, broker-a's from its acting master", lambda: len(seen()) >= len(sent))

        # pop against the acting master: its checkpoints are escaped to broker-b's master
        popper = PopConsumer(client, "hapop" + uuid.uuid4().hex[:6], topic, invisible_ms=20000, poll_ms=300)
        popped = [p for p in pop_until(popper, 1000, idle_rounds=2) if p.broker_name == "broker-a"]
        assert len({p.message.body for p in popped}) == 200  # broker-a's 400/2 messages of the first round
        popper.ack([p.receipt for p in popped])

        ha_stack.restart_broker(master)
        wait_for("broker-a's master to be back in the route",
                 lambda: client.route(topic, refresh=True).brokers["broker-a"].addresses.get(0) == master.address
                 and next(q for q in client.route(topic).queues if q.broker_name == "broker-a").perm == 6,
                 timeout=120)
        after = [f"after{i}".encode() for i in range(300)]
        produce(client, topic, after)
        sent += after
        wait_for("the messages written after the master returned", lambda: len(seen()) >= len(sent))
        time.sleep(1.5)  # a few more triggers: nothing may be read twice
        rows = seen()
    finally:
        query.stop()
        client.close()
    values = [r.value for r in rows]
    assert len(values) == len(set(values)), "a message was read twice (an offset moved back)"
    assert set(values) == set(sent)
    assert {r.brokerName for r in rows if r.value.startswith(b"after")} == {"broker-a", "broker-b"}
    with RocketMQClient([ha_stack.namesrv_address]) as fresh:
        queues = all_queues(fresh, [topic])
        assert MessageQueue(topic, "broker-a", 0) in queues
        total = sum(high - low for low, high in fresh.bounds(queues).values())
    assert total == len(sent)
