"""Two RocketMQ broker groups, one down at a time (issue 23 part 8): a group that is down stalls only its own
queues, and streams ride out its restart.

The name server forgets a group the moment it stops (a graceful stop unregisters it; a crash closes its
connection): its queues leave the topic's route and the cluster at once. So:

* a running pull stream keeps reading the live group's queues while the other group is stopped, keeps the
  stopped group's queues in its offsets, and reads them on from there when the group is back;
* a query started while a group is down plans the live group's queues, and the down group's join when it
  is back, from their min offset (as any queue new to a query does): nothing is left out or read twice;
* a batch read planned while a group is down fails naming the group, never returns part of the data;
* the sink writes on to the live group's queues while the other group is down (crashed), and every row of
  every committed batch is in the brokers once.

One two-group stack for the module (a PRESTART piece); each test has one short outage.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.readers import RocketMQBatchReader
from tubespark.errors import PartitionsUnavailableError, unwrap
from tubespark.rocketmq.client.client import RocketMQClient, all_queues
from tubespark.rocketmq.client.producer import BatchProducer
from tubespark.rocketmq.spark.options import RocketMQOptions

pytestmark = [pytest.mark.integration, pytest.mark.spark]

GROUPS = ("broker-a", "broker-b")


@contextlib.contextmanager
def _groups_stack(_tmp: Path) -> Iterator[Any]:
    from tubespark_testbed.rocketmq import RocketMQStack

    stack = RocketMQStack.two_groups()
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


PRESTART = {"groups_stack": _groups_stack}  # started ahead of this module (tubespark_testbed/prestart.py)
PRESTART_LIGHT = True  # a cluster: mostly waiting while it starts, so it may start beside another


@pytest.fixture(scope="module")
def groups_stack(prestarted) -> Any:
    return prestarted("groups_stack")


def in_broker(stack, topic: str) -> int:
    """Messages the topic's queues hold, over every group the route lists now."""
    with RocketMQClient([stack.namesrv_address]) as client:
        return sum(high - low for low, high in client.bounds(all_queues(client, [topic], refresh=True)).values())


def produce(stack, topic: str, values: list[bytes]) -> None:
    """Send ``values`` (small batches, so they spread over every writable queue) and wait until stored."""
    before = in_broker(stack, topic)
    with RocketMQClient([stack.namesrv_address]) as client:
        producer = BatchProducer(client, batch_messages=10)
        for value in values:
            producer.add(topic, value, {})
        producer.flush()
    wait_for("the messages to reach the queues", lambda: in_broker(stack, topic) >= before + len(values), 30)


def wait_for(what: str, probe: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def pull_stream(spark, stack, topic: str, name: str, checkpoint: Path):
    frame = (spark.readStream.format("rocketmq").option("namesrv", stack.namesrv_address).option("topic", topic)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "120")
             .option("failoverTimeoutMs", "10000").option("requestTimeoutMs", "2000").load()
             .select("value", "brokerName", "queueId", "queueOffset"))
    return (frame.writeStream.format("memory").queryName(name).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="300 milliseconds").start())


def file_stream(spark, stack, topic: str, out: Path):
    """A pull stream into parquet files (a sink that restarts from its checkpoint, unlike the memory sink)."""
    frame = (spark.readStream.format("rocketmq").option("namesrv", stack.namesrv_address).option("topic", topic)
             .option("startingOffsets", "earliest").option("failoverTimeoutMs", "10000")
             .option("requestTimeoutMs", "2000").load().select("value"))
    return (frame.writeStream.format("parquet").option("path", str(out / "data"))
            .option("checkpointLocation", str(out / "ck")).trigger(processingTime="300 milliseconds").start())


def file_values(spark, out: Path) -> list[bytes]:
    if not (out / "data").exists():
        return []
    return [r.value for r in spark.read.schema("value binary").parquet(str(out / "data")).collect()]


def rows_of(spark, query, name: str) -> list[Any]:
    assert query.exception() is None, query.exception()
    return spark.sql(f"select value, brokerName, queueId, queueOffset from {name}").collect()


def test_a_stopped_group_stalls_only_its_queues_and_streams_read_on_once_it_is_back(spark, groups_stack, tmp_path):
    stack = groups_stack
    topic = stack.create_topic("grp_" + uuid.uuid4().hex[:8], 2)  # 2 queues on each group
    sent = [f"before{i}".encode() for i in range(200)]
    produce(stack, topic, sent)
    # a topic on broker-b alone, read by a query that will be restarted on its checkpoint while broker-b is down
    solo = stack.create_topic("grpb_" + uuid.uuid4().hex[:8], 2, groups=["broker-b"])
    solo_sent = [f"solo{i}".encode() for i in range(40)]
    produce(stack, solo, solo_sent)
    solo_out = tmp_path / "solo"
    solo_query = file_stream(spark, stack, solo, solo_out)
    try:
        wait_for("the broker-b-only stream", lambda: len(file_values(spark, solo_out)) >= len(solo_sent))
    finally:
        solo_query.stop()
    running, fresh = "grp_run_" + uuid.uuid4().hex[:6], "grp_new_" + uuid.uuid4().hex[:6]
    query = pull_stream(spark, stack, topic, running, tmp_path / "run")
    late: Any = None
    try:
        wait_for("the stream to read what was sent", lambda: len(rows_of(spark, query, running)) >= len(sent))
        assert {r.brokerName for r in rows_of(spark, query, running)} == set(GROUPS)

        broker_b = stack.node("broker-b")
        stack.stop_broker(broker_b)  # graceful: it unregisters, the name server forgets broker-b at once
        stack.wait_unrouted(topic, "broker-b")
        batches_before = len(query.recentProgress)
        during = [f"during{i}".encode() for i in range(150)]
        produce(stack, topic, during)  # broker-a only: the route lists no other group now
        sent += during
        wait_for("the live group's messages, while broker-b is down", lambda: len(rows_of(spark, query, running))
                 >= len(sent))
        moved = [p for p in query.recentProgress[batches_before:] if p["numInputRows"]]
        assert moved, "no micro-batch read broker-a's queues while broker-b was down"

        # a batch read planned now: broker-b's queues are known to this process (it was routed to them)
        options = RocketMQOptions.from_raw({"namesrv": stack.namesrv_address, "topic": topic}, mode="read")
        with pytest.raises(PartitionsUnavailableError, match="broker-b") as caught:
            RocketMQBatchReader(options).partitions()
        assert set(caught.value.unavailable) == {"broker-b"}
        # the same through Spark, whose planner runs in a Python worker of its own: queues the offsets name
        ending = json.dumps({f"{topic}:{g}:{q}": -1 for g in GROUPS for q in range(2)})
        with pytest.raises(Exception, match="PartitionsUnavailableError") as spark_caught:
            (spark.read.format("rocketmq").option("namesrv", stack.namesrv_address).option("topic", topic)
             .option("endingOffsets", ending).load().count())
        assert isinstance(unwrap(spark_caught.value), PartitionsUnavailableError), spark_caught.value
        assert "broker group broker-b" in str(unwrap(spark_caught.value))

        # restarted on its checkpoint in a fresh Python process while its topic has no route: its offsets say
        # the topic's queues are on broker-b, not registered now: an outage, not an unknown topic
        solo_query = file_stream(spark, stack, solo, solo_out)
        time.sleep(2.0)  # several triggers with no route for the topic
        assert solo_query.exception() is None, solo_query.exception()
        assert solo_query.isActive

        # a new query while broker-b is down: broker-a's queues now, broker-b's when it is back
        late = pull_stream(spark, stack, topic, fresh, tmp_path / "new")
        wait_for("the new query to read broker-a's messages",
                 lambda: set(during) <= {r.value for r in rows_of(spark, late, fresh)})

        stack.restart_broker(broker_b)
        stack.wait_routed(topic, "broker-b")
        after = [f"after{i}".encode() for i in range(150)]
        produce(stack, topic, after)
        sent += after
        solo_after = [f"soloafter{i}".encode() for i in range(40)]
        stack.wait_routed(solo, "broker-b")
        produce(stack, solo, solo_after)
        solo_sent += solo_after
        wait_for("the broker-b-only stream to read on", lambda: len(file_values(spark, solo_out)) >= len(solo_sent))
        assert solo_query.exception() is None, solo_query.exception()
        wait_for("every message in the running query", lambda: len(rows_of(spark, query, running)) >= len(sent))
        wait_for("every message in the new query", lambda: len(rows_of(spark, late, fresh)) >= len(sent))
        time.sleep(1.0)  # a few more triggers: nothing may be read twice
        rows, late_rows = rows_of(spark, query, running), rows_of(spark, late, fresh)
    finally:
        query.stop()
        solo_query.stop()
        if late is not None:
            late.stop()
    solo_values = file_values(spark, solo_out)
    assert sorted(solo_values) == sorted(solo_sent), "the restarted broker-b-only query lost or repeated messages"
    for got in (rows, late_rows):
        values = [r.value for r in got]
        assert len(values) == len(set(values)), "a message was read twice"
        assert set(values) == set(sent)
    # broker-b's queues resumed where the running query stood: its rows are one run of offsets per queue
    for queue in range(2):
        offsets = sorted(r.queueOffset for r in rows if r.brokerName == "broker-b" and r.queueId == queue)
        assert offsets == list(range(len(offsets)))
    assert {r.brokerName for r in rows if r.value.startswith(b"after")} == set(GROUPS)
    assert in_broker(stack, topic) == len(sent)


def test_the_sink_writes_on_to_the_live_group_while_the_other_crashed_every_row_once(spark, groups_stack,
                                                                                      tmp_path):
    stack = groups_stack
    topic = stack.create_topic("grps_" + uuid.uuid4().hex[:8], 2)
    source = tmp_path / "in"
    source.mkdir()
    files = 0
    written: list[str] = []

    def write_file(tag: str, rows: int = 40) -> None:
        nonlocal files
        values = [f"{tag}-{files}-{i}" for i in range(rows)]
        staging = tmp_path / f"{files}.tmp"
        staging.write_text("".join(json.dumps({"value": v}) + "\n" for v in values))
        staging.rename(source / f"{files:04d}.json")  # whole files only: the file source lists the directory
        files += 1
        written.extend(values)

    frame = (spark.readStream.schema("value string").option("maxFilesPerTrigger", "1").json(str(source)))
    query = (frame.writeStream.format("rocketmq").option("namesrv", stack.namesrv_address).option("topic", topic)
             .option("batchMaxMessages", "8").option("outageTimeoutMs", "30000").option("requestTimeoutMs", "2000")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="300 milliseconds").start())

    def landed() -> bool:
        assert query.exception() is None, query.exception()
        return in_broker(stack, topic) >= len(written)

    def committed() -> bool:  # while broker-b is down the route (so in_broker) leaves its queues out
        assert query.exception() is None, query.exception()
        return sum(p["numInputRows"] for p in query.recentProgress) >= len(written)

    try:
        for _ in range(3):
            write_file("before")
        wait_for("the rows before the crash", landed)
        stack.kill(stack.node("broker-b"))  # a crash: no unregistering, its connection to the name server closes
        for _ in range(3):
            write_file("during")
            time.sleep(0.4)
        wait_for("the batches written while broker-b is down to commit", committed)
        stack.restart_broker(stack.node("broker-b"))
        stack.wait_routed(topic, "broker-b")
        for _ in range(2):
            write_file("after")
        wait_for("the rows after broker-b is back", landed)
    finally:
        query.stop()
    rows = (spark.read.format("rocketmq").option("namesrv", stack.namesrv_address).option("topic", topic).load()
            .select("value", "brokerName").collect())
    values = [r.value.decode() for r in rows]
    assert len(values) == len(set(values)), "a row is in the broker twice"
    assert set(values) == set(written)
    assert {r.brokerName for r in rows if r.value.startswith(b"during")} == {"broker-a"}
    assert in_broker(stack, topic) == len(written)


def test_a_range_read_waits_for_its_crashed_group_and_reads_the_range_once_or_fails_retriably(groups_stack,
                                                                                               caplog):
    """A pull read task whose range is on a group that crashes mid-range (issue 23 part 8, read_through_outage):
    it waits for the group past the old budget (``failoverTimeoutMs``, after which it used to fail with
    RangeReadError and stop the query), saying so in a WARNING, and reads the rest of the range once the group is
    back: every offset once. While the group is down, a read with a short ``outageTimeoutMs`` fails after it with
    the retriable BrokerUnavailableError. The broker's store survives a kill -9 (it writes before acknowledging)."""
    import logging
    import threading

    from tubespark.errors import BrokerUnavailableError, RangeReadError
    from tubespark.rocketmq.spark.read_task import PullRange, read_range

    stack = groups_stack
    topic = stack.create_topic("grpr_" + uuid.uuid4().hex[:8], 1, groups=["broker-b"])
    sent = [f"r{i}".encode() for i in range(600)]  # past the 8 pulls of 32 the reader keeps in flight
    produce(stack, topic, sent)
    task = PullRange(topic, "broker-b", 0, 0, len(sent))
    failover_s = 2.0
    raw = {"namesrv": stack.namesrv_address, "topic": topic, "requestTimeoutMs": "1000",
           "failoverTimeoutMs": str(int(failover_s * 1000))}
    waiting = RocketMQOptions.from_raw({**raw, "outageTimeoutMs": "120000"}, mode="read")
    brief = RocketMQOptions.from_raw({**raw, "outageTimeoutMs": "3000"}, mode="read")
    node = stack.node("broker-b")
    what = f"read of queue {task.mq.key} [0, {len(sent)})"
    rows: list[tuple[int, bytes]] = []

    def take(batch) -> None:
        rows.extend(zip(batch.column("queueOffset").to_pylist(), batch.column("value").to_pylist(), strict=True))

    restarter = threading.Thread(target=stack.restart_broker, args=(node,), daemon=True)
    with caplog.at_level(logging.WARNING, logger="tubespark.core.outage"):
        reading = read_range(task, waiting)
        take(next(reading))
        stack.kill(node)  # a crash: its connection to the name server closes, the route loses broker-b at once
        down = time.monotonic()
        with pytest.raises(BrokerUnavailableError) as caught:
            list(read_range(task, brief))
        failed_after = time.monotonic() - down
        restarter.start()
        try:
            for batch in reading:
                take(batch)
        finally:
            restarter.join(120)
        waited = time.monotonic() - down
    error = caught.value
    assert error.retriable and isinstance(error.__cause__, RangeReadError)
    assert str(error).startswith(f"{what}: the broker was unreachable for ") and "outageTimeoutMs (now 3000)" in str(
        error)
    assert 3.0 <= failed_after < 3.0 + 2 * failover_s + 5, "bounded by outageTimeoutMs (+ one reader attempt)"
    assert waited > failover_s + 3.0, "the group was down past the reader's own budget"
    assert [offset for offset, _ in rows] == list(range(len(sent))), "every offset of the range once, in order"
    assert sorted(value for _, value in rows) == sorted(sent)
    messages = [r.getMessage() for r in caplog.records if r.name == "tubespark.core.outage"]
    assert any(m.startswith(f"{what}: waiting for the broker") and "(outageTimeoutMs=120000)" in m
               for m in messages), messages  # the long read's (the short one's says 3000)
    assert any(m.startswith(f"{what}: the broker answers again") for m in messages), messages
