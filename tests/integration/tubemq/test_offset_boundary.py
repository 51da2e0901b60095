"""A TubeMQ offset in ``startingOffsets`` / ``endingOffsets`` JSON that is not on a message boundary fails at the
start, naming the partition, the offset and the nearest valid ones (issue 37).

TubeMQ offsets are byte positions of 28-byte index records (docs/tubemq/protocol.md "Index offsets"); the
range reader rounds a position inside a record up to the next one, so ``startingOffsets`` 5 read all but the
first message of 4,000 without a word. TANK's sequence numbers and RocketMQ's queue offsets count messages:
every number in bounds is a boundary there, so this check is TubeMQ's alone.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.contract.brokers import TubeMQ, new_name
from tests.integration.contract.runs import values
from tubespark.errors import OptionError, unwrap

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def read(spark, broker: TubeMQ, topic: str, how: str, **options: str) -> None:
    """A batch read of ``topic`` collected, or a stream of it run until it fails (40 s at most)."""
    if how == "batch":
        broker.batch(spark, topic, **options).collect()
        return
    query = broker.stream(spark, topic, **options).writeStream.format("noop").queryName(new_name("boundary_")).start()
    try:
        query.awaitTermination(40)  # raises the query's failure
    finally:
        query.stop()


def test_an_offset_inside_an_index_record_fails_naming_the_valid_ones(spark, tubemq_cluster, topic_factory):
    broker = TubeMQ(tubemq_cluster, topic_factory)
    topic = broker.new_topic()
    broker.produce(topic, values(40, "boundary"))
    held = broker.held(topic)
    key = sorted(held)[0]
    assert [offset for offset, _ in held[key][:2]] == [0, 28], held[key][:2]
    cases = [("startingOffsets", 5, "batch", "0 or 28"), ("endingOffsets", 33, "batch", "28 or 56"),
             ("startingOffsets", 5, "stream", "0 or 28")]
    for option, offset, how, nearest in cases:
        with pytest.raises(Exception, match="OptionError") as raised:
            read(spark, broker, topic, how, **{option: json.dumps({key: offset})})
        error = unwrap(raised.value)
        assert isinstance(error, OptionError), repr(raised.value)
        assert f"option {option}: offset {offset} of {key} is not on a message boundary" in str(error), str(error)
        assert f"use one of the nearest valid ones, {nearest}" in str(error), str(error)
    rows = broker.batch(spark, topic, startingOffsets=json.dumps({key: 28})).count()
    assert rows == sum(len(m) for m in held.values()) - 1  # on a boundary: read from the second message on
