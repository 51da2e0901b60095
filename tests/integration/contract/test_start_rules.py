"""Offsets a user names that a topic cannot serve fail at the start, on every broker, naming the partition:
a ``startingOffsets`` number beyond a partition's end (batch and stream), and ``startingOffsets`` /
``endingOffsets`` JSON naming a partition the topic does not have (batch and stream). Before, a stream
waited for ever on the first (RocketMQ) and every read ignored the second."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.integration.contract.brokers import Broker
from tests.integration.contract.runs import values
from tubespark.errors import OptionError, unwrap

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def no_such_partition(key: str) -> str:
    """``key`` with its partition number (the last field on every broker) replaced by one past any topic's."""
    return key.rsplit(":", 1)[0] + ":99"


def beyond(messages: list[tuple[int, bytes]]) -> int:
    """A valid offset (a message boundary) ten messages past a partition's last one."""
    step = messages[1][0] - messages[0][0]  # 1 where offsets count messages, 28 on TubeMQ
    return messages[-1][0] + 10 * step


def fails_at_start(spark, run) -> OptionError:
    started = time.monotonic()
    with pytest.raises(Exception, match="OptionError") as raised:
        run()
    error = unwrap(raised.value)  # Spark's wrapper (AnalysisException, StreamingQueryException...) -> ours
    assert isinstance(error, OptionError), repr(raised.value)
    assert time.monotonic() - started < 60  # at the start, not after a wait
    return error


def stream_fails(spark, broker: Broker, topic: str, **options: str) -> OptionError:
    def run() -> None:
        query = broker.stream(spark, topic, **options).writeStream.format("noop").start()
        try:
            query.awaitTermination(40)  # raises the query's error once it stopped with one
        finally:
            query.stop()
        pytest.fail("the stream did not fail within 40 s")

    return fails_at_start(spark, run)


@pytest.fixture(scope="module")
def filled(broker: Broker) -> tuple[str, dict[str, list[tuple[int, bytes]]]]:
    topic = broker.new_topic()
    broker.produce(topic, values(16, "rules"))
    held = broker.held(topic)
    assert len(held) == broker.partitions and all(len(m) >= 2 for m in held.values()), held
    return topic, held


def test_a_start_beyond_the_partitions_end_fails_naming_it(spark, broker: Broker, filled):
    topic, held = filled
    key, messages = sorted(held.items())[0]
    start = json.dumps({key: beyond(messages)})
    error = fails_at_start(spark, lambda: broker.batch(spark, topic, startingOffsets=start).collect())
    assert key in str(error) and "beyond" in str(error), str(error)
    error = stream_fails(spark, broker, topic, startingOffsets=start)
    assert key in str(error) and "beyond" in str(error), str(error)


@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets", "stream startingOffsets"])
def test_json_naming_a_partition_the_topic_does_not_have_fails(spark, broker: Broker, filled, option: str):
    topic, held = filled
    real = sorted(held)[0]
    wrong = no_such_partition(real)
    spec = json.dumps({real: held[real][0][0], wrong: held[real][0][0]})
    if option.startswith("stream"):
        error = stream_fails(spark, broker, topic, startingOffsets=spec)
    else:
        error = fails_at_start(spark, lambda: broker.batch(spark, topic, **{option: spec}).collect())
    text, name = str(error), option.rsplit(maxsplit=1)[-1]
    assert re.search(rf"option {name} names a partition the topics do not have: {re.escape(wrong)}",
                     text), text
    assert all(key in text for key in held), f"the error does not list the partitions that exist: {text}"
