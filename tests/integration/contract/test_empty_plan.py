"""A batch read that plans nothing returns an empty DataFrame with the source's columns: an empty topic,
``startingOffsets=latest``, and a start equal to the end in every partition.

PySpark runs one task with partition ``None`` when a reader plans no partition, so a reader must read
nothing from it."""

from __future__ import annotations

import json

import pytest

from tests.integration.contract.brokers import Broker
from tests.integration.contract.runs import values

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
