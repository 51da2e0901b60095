"""The start rules every broker must keep where a topic cannot serve what the user named, and a batch read's rule
for a broker that is down (issue 38: the contract the shared read planner meets):

* a ``startingOffsets`` number below a partition's first available offset (retention removed what was there),
  batch and stream alike: ``failOnDataLoss=true`` (the default) fails with a :class:`DataLossError` naming the
  partition, its first available offset and the number asked for; ``failOnDataLoss=false`` reads from the first
  available offset and says so in a WARNING;
* a ``startingOffsets`` number between two messages: where offsets count bytes of index records (TubeMQ) it is
  an :class:`OptionError` naming the two nearest valid offsets; where they count messages (TANK, RocketMQ) every
  number is a message, and the read starts exactly there;
* a batch read while the broker holding its partitions is down: ``onUnavailablePartitions=fail`` (the default)
  fails with a :class:`PartitionsUnavailableError` naming the broker and a partition; ``skip`` plans the rest
  (here, with one broker: nothing) and logs a WARNING that it ``LEAVES OUT`` partitions.

Spark runs a reader's planning in a Python worker, whose log this process cannot see: each WARNING is checked by
planning the same read in this process (the broker's ``DataSource``, as Spark calls it), the rows through Spark.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

import pytest

from tests.integration.contract.brokers import EXPIRING, Broker
from tests.integration.contract.runs import available_now_batches, values
from tubespark.errors import DataLossError, OptionError, PartitionsUnavailableError, TubeSparkError, unwrap

pytestmark = [pytest.mark.integration, pytest.mark.spark]

OLD, NEW = 5, 3
"""Messages per partition before and after the offset retention removes everything below (TANK: two bundles)."""


def data_source(broker: Broker, options: dict[str, str]) -> Any:
    """The broker's ``DataSource`` as Spark makes it for these options (to plan in this process)."""
    from tubespark.rocketmq.spark.source import RocketMQDataSource
    from tubespark.tank.spark.source import TankDataSource
    from tubespark.tubemq.spark.source import TubeMQDataSource

    cls = {"tubemq": TubeMQDataSource, "rocketmq": RocketMQDataSource, "tank": TankDataSource}[broker.format]
    return cls(options)


def plan_batch(broker: Broker, topic: str, **options: str) -> list[Any]:
    source = data_source(broker, {**broker.connection(), "topic": topic, **options})
    return list(source.reader(source.schema()).partitions())


def plan_stream_start(broker: Broker, topic: str, **options: str) -> None:
    """A new query's first trigger: its start and its first batch's ranges."""
    source = data_source(broker, {**broker.stream_options(), "topic": topic, **options})
    reader = source.streamReader(source.schema())
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        reader.partitions(start, end)
    finally:
        reader.stop()


def failure(run: Any) -> tuple[TubeSparkError | None, str]:
    """Run ``run`` expecting it to raise; our typed error in it, and the whole text for the report."""
    with pytest.raises(Exception) as raised:  # noqa: PT011 (any wrapper: the typed error is asserted next)
        run()
    return unwrap(raised.value), str(raised.value)[-2000:]  # Spark's wrapper -> ours


def stream_failure(spark, broker: Broker, topic: str, tmp_path, **options: str) -> tuple[TubeSparkError | None, str]:
    def run() -> None:
        query = (broker.stream(spark, topic, **options).writeStream.format("noop")
                 .option("checkpointLocation", str(tmp_path / f"ck{time.monotonic_ns()}")).start())
        try:
            query.awaitTermination(60)  # raises the query's error once it stopped with one
        finally:
            query.stop()
        pytest.fail("the stream did not fail within 60 s")

    return failure(run)


def stream_values(spark, broker: Broker, topic: str, tmp_path, **options: str) -> list[bytes]:
    frame = broker.stream(spark, topic, **options)
    return sorted(v for batch in available_now_batches(frame, tmp_path / f"ck{time.monotonic_ns()}") for v in batch)


def batch_values(spark, broker: Broker, topic: str, **options: str) -> list[bytes]:
    return sorted(bytes(r.value) for r in broker.batch(spark, topic, **options).select("value").collect())


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# --- 1. a start below the first available offset -------------------------------------------------------


@pytest.fixture(scope="module")
def expired(broker: Broker) -> tuple[str, dict[str, int], dict[str, list[tuple[int, bytes]]]]:
    """A topic whose every partition lost its first :data:`OLD` messages to retention: ``(topic, a start below
    each partition's first available offset, what each holds now)``."""
    topic = broker.new_topic()
    broker.produce(topic, values(OLD * broker.partitions, "old"))
    before = broker.held(topic)
    broker.produce(topic, values(NEW * broker.partitions, "new"))
    held = broker.held(topic)
    firsts = {key: messages[len(before[key])][0] for key, messages in held.items()}
    for key, first in firsts.items():
        broker.expire(topic, key, first)  # skips where the broker cannot
    held = broker.held(topic)
    assert {key: messages[0][0] for key, messages in held.items()} == firsts, held
    assert all(value.startswith(b"new-") for messages in held.values() for _o, value in messages), held
    below = {key: before[key][1][0] for key in held}  # the second message retention removed: neither end
    return topic, below, held


def assert_names_the_loss(error: TubeSparkError | None, text: str, below: dict[str, int],
                          held: dict[str, list[tuple[int, bytes]]]) -> None:
    assert isinstance(error, DataLossError), text
    message = str(error)
    named = [key for key in held if key in message]
    assert named, f"the error names no partition: {message}"
    key = named[0]
    assert "startingOffsets" in message and re.search(rf"\b{below[key]}\b", message), \
        f"the error does not name startingOffsets {below[key]} of {key}: {message}"
    assert re.search(rf"\b{held[key][0][0]}\b", message), \
        f"the error does not name {key}'s first available offset {held[key][0][0]}: {message}"


@pytest.mark.parametrize("broker", list(EXPIRING), indirect=True)
def test_a_start_below_the_first_available_offset_fails_as_data_loss(spark, broker: Broker, expired, tmp_path):
    topic, below, held = expired
    start = json.dumps(below)
    error, text = failure(lambda: broker.batch(spark, topic, startingOffsets=start).collect())
    assert_names_the_loss(error, text, below, held)
    error, text = stream_failure(spark, broker, topic, tmp_path, startingOffsets=start)
    assert_names_the_loss(error, text, below, held)


@pytest.mark.parametrize("broker", list(EXPIRING), indirect=True)
def test_a_start_below_the_first_available_offset_reads_from_it_without_fail_on_data_loss(
        spark, broker: Broker, expired, tmp_path, caplog):
    topic, below, held = expired
    options = {"startingOffsets": json.dumps(below), "failOnDataLoss": "false"}
    everything = sorted(value for messages in held.values() for _o, value in messages)
    assert batch_values(spark, broker, topic, **options) == everything
    assert stream_values(spark, broker, topic, tmp_path, **options) == everything
    for plan in (plan_batch, plan_stream_start):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            plan(broker, topic, **options)
        said = [w for w in warnings(caplog) if any(key in w for key in held)]
        assert said, f"{plan.__name__}: no WARNING names the partitions read from their first available offset: " \
                     f"{warnings(caplog)}"


# --- 2. a start between two messages ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def filled(broker: Broker) -> tuple[str, dict[str, list[tuple[int, bytes]]]]:
    topic = broker.new_topic()
    broker.produce(topic, values(5 * broker.partitions, "boundary"))
    held = broker.held(topic)
    assert len(held) == broker.partitions and all(len(m) >= 4 for m in held.values()), held
    return topic, held


def test_a_start_off_a_message_boundary_fails_naming_the_nearest_or_starts_at_that_message(
        spark, broker: Broker, filled, tmp_path):
    topic, held = filled
    if broker.record_size > 1:  # offsets count index bytes: a number between two records is no message
        key, messages = sorted(held.items())[0]
        low, high = messages[2][0], messages[3][0]
        start = json.dumps({key: low + broker.record_size // 2})
        for error, text in (failure(lambda: broker.batch(spark, topic, startingOffsets=start).collect()),
                            stream_failure(spark, broker, topic, tmp_path, startingOffsets=start)):
            assert isinstance(error, OptionError), text
            assert key in str(error) and re.search(rf"\b{low}\b.*\b{high}\b", str(error)), str(error)
        return
    # offsets count messages: every number is one, and the read starts exactly at it
    starts = {key: messages[2][0] for key, messages in held.items()}
    expected = sorted(value for key, messages in held.items() for offset, value in messages if offset >= starts[key])
    frame = broker.batch(spark, topic, startingOffsets=json.dumps(starts))
    picked = frame.selectExpr(f"{broker.key_column} AS key", f"{broker.offset_column} AS offset", "value")
    got = sorted((r.key, r.offset, bytes(r.value)) for r in picked.collect())
    assert got == sorted((key, offset, value) for key, messages in held.items() for offset, value in messages
                         if offset >= starts[key])  # from that message on, in every partition: nothing before it
    assert stream_values(spark, broker, topic, tmp_path, startingOffsets=json.dumps(starts)) == expected


# --- 3. a batch read while the broker is down --------------------------------------------------------------


@pytest.mark.parametrize("broker", ["rocketmq", "tank"], indirect=True)  # TubeMQ: the same case on three brokers,
def test_a_batch_read_while_the_broker_is_down_fails_naming_it_unless_skipped(spark, broker: Broker, filled, caplog):
    # tests/integration/tubemq/test_brokers.py::test_a_gracefully_stopped_broker_fails_a_batch_read_naming_it_unless_
    # skipped (one run of it fits CI's time budget)
    """The read names its partitions (``startingOffsets`` JSON): a RocketMQ name server keeps no record of a
    stopped group, so only a read that names its queues (or a process that saw them) can know what is missing."""
    topic, held = filled
    named = json.dumps({key: messages[0][0] for key, messages in held.items()})
    server = broker.server_of(sorted(held)[0])
    broker.stop(topic)
    try:
        # planned here, in the process that saw the broker answer: Spark plans in a Python worker that may never
        # have seen it (then a TANK broker, the only address, fails as one that never answered: NeverAnsweredError)
        started = time.monotonic()
        error, text = failure(lambda: plan_batch(broker, topic, startingOffsets=named))
        assert isinstance(error, PartitionsUnavailableError), text
        assert server in str(error) and sorted(held)[0] in str(error), str(error)
        assert time.monotonic() - started < 120, "the read waited for the broker instead of failing"

        # skip: planned here, where its WARNING shows (through Spark too it costs a TubeMQ read 30 s more)
        with caplog.at_level(logging.WARNING):
            planned = plan_batch(broker, topic, startingOffsets=named, onUnavailablePartitions="skip")
        assert planned == [], "a read of a topic on one broker that is down has nothing else to read"
        assert [w for w in warnings(caplog) if "LEAVES OUT" in w and server in w], warnings(caplog)
    finally:
        broker.start()
    everything = sorted(value for messages in held.values() for _o, value in messages)
    assert batch_values(spark, broker, topic, startingOffsets=named) == everything  # back: all of it
