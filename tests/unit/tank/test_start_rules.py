"""TANK: offsets a user names that the topic cannot serve fail at the start (tubespark.spark.offset_rules)."""

from __future__ import annotations

import time

import pytest

from tests.doubles.tank_broker import TankBroker
from tests.readers import TankBatchReader, TankStreamReader
from tubespark.errors import OptionError
from tubespark.tank.spark.options import TankOptions
from tubespark.tank.wire.bundle import encode_bundle


@pytest.fixture
def broker():
    with TankBroker({"events": 2}) as fake:
        now = int(time.time() * 1000)
        for partition in (0, 1):
            fake.append_bundle("events", partition, encode_bundle([b"a", b"b", b"c"], [now] * 3))
        yield fake


def options(broker: TankBroker, **raw: str) -> TankOptions:
    return TankOptions.from_raw({"broker": broker.address, "topic": "events", **raw}, mode="read")


@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets"])
def test_a_batch_read_naming_a_partition_the_topic_does_not_have_fails(broker, option):
    with pytest.raises(OptionError, match=rf"option {option} names a partition the topics do not have: events:5; "
                                          r"they have events:0, events:1"):
        TankBatchReader(options(broker, **{option: '{"events:0": 1, "events:5": 1}'})).partitions()


def test_a_stream_naming_a_partition_the_topic_does_not_have_fails(broker):
    reader = TankStreamReader(options(broker, startingOffsets='{"events:5": 1}'))
    try:
        with pytest.raises(OptionError, match="names a partition the topics do not have: events:5; they have "
                                              "events:0, events:1"):
            reader.initialOffset()
    finally:
        reader.broker.close()


def test_a_start_beyond_the_next_sequence_number_fails_batch_and_stream(broker):
    beyond = f'{{"events:0": {broker.high_water_mark("events", 0) + 6}}}'
    with pytest.raises(OptionError, match=r"events:0 is at .* beyond the partition's next sequence number"):
        TankBatchReader(options(broker, startingOffsets=beyond)).partitions()
    reader = TankStreamReader(options(broker, startingOffsets=beyond))
    try:
        with pytest.raises(OptionError, match="beyond the partition's next sequence number"):
            reader.initialOffset()
    finally:
        reader.broker.close()
