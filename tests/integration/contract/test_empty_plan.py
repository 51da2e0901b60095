"""A batch read that plans nothing returns an empty DataFrame with the source's columns: an empty topic,
``startingOffsets=latest``, and a start equal to the end in every partition. A stream with nothing new plans no
micro-batch: on an empty topic and on a topic read to its end, nothing more is committed to its checkpoint.

PySpark runs one task with partition ``None`` when a reader plans no partition, so a reader must read
nothing from it."""

from __future__ import annotations

import json

import pytest

from tests.integration.contract.brokers import Broker
from tests.integration.contract.runs import available_now_batches, committed_batches, values

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def assert_empty(frame) -> None:
    assert "value" in frame.columns
    assert frame.collect() == []
    assert frame.count() == 0


def test_an_empty_topic_reads_as_an_empty_frame(spark, broker: Broker):
    assert_empty(broker.batch(spark, broker.new_topic()))


@pytest.fixture(scope="module")
def topic(broker: Broker) -> str:
    """A topic with two messages in every partition (shared by the tests that do not change it)."""
    name = broker.new_topic()
    broker.produce(name, values(2 * broker.partitions, "some"))
    return name


def test_starting_at_latest_reads_as_an_empty_frame(spark, broker: Broker, topic: str):
    assert_empty(broker.batch(spark, topic, startingOffsets="latest"))


def test_start_equal_to_end_everywhere_reads_as_an_empty_frame(spark, broker: Broker, topic: str):
    middle = {key: messages[1][0] for key, messages in broker.held(topic).items()}
    assert len(middle) == broker.partitions
    assert_empty(broker.batch(spark, topic, startingOffsets=json.dumps(middle), endingOffsets=json.dumps(middle)))


def test_a_stream_with_nothing_new_plans_no_batch(spark, broker: Broker, tmp_path):
    """Trigger.AvailableNow runs of one query: with nothing new a run ends without a micro-batch (a source that
    planned an empty one each trigger would fill the checkpoint for nothing), and reads exactly what came since
    once there is something. A new query's first batch is Spark's own (it runs one whenever a source has no
    committed offset yet), so only what follows it counts."""
    topic, checkpoint = broker.new_topic(), tmp_path / "ck"
    frame = broker.stream(spark, topic, startingOffsets="earliest")
    assert available_now_batches(frame, checkpoint) == []  # an empty topic: no rows
    first = committed_batches(checkpoint)
    assert first <= 1, f"{first} batches on an empty topic"
    assert available_now_batches(frame, checkpoint) == []
    assert committed_batches(checkpoint) == first, "a run on an empty topic planned a micro-batch"

    sent = values(2 * broker.partitions, "once")
    broker.produce(topic, sent)
    assert sorted(v for batch in available_now_batches(frame, checkpoint) for v in batch) == sorted(sent)
    done = committed_batches(checkpoint)
    assert available_now_batches(frame, checkpoint) == []  # read to its end: nothing new since
    assert committed_batches(checkpoint) == done, "a run with nothing new planned a micro-batch"
