"""TubeMQ: offsets a user names that the topic cannot serve fail at the start (tubespark.spark.offset_rules),
against the fakes of test_planning.py: an offset inside a 28-byte index record, a partition the topic does not
have, a start beyond the max offset."""

# ruff: noqa: F811  (the fixtures of test_planning.py, imported, are parameters here)
from __future__ import annotations

import pytest

from tests.readers import TubeBatchReader
from tests.unit.tubemq.test_planning import FAST, TOPIC, broker, keys, make_reader, web  # noqa: F401
from tubespark.errors import OptionError
from tubespark.tubemq.spark.options import TubeMQOptions


def batch(master, **raw: str) -> TubeBatchReader:
    return TubeBatchReader(TubeMQOptions.from_raw({"master": master.address, "topic": TOPIC, **FAST, **raw},
                                                  mode="read"))


@pytest.mark.parametrize(("option", "offset", "nearest"), [("startingOffsets", 5, "0 or 28"),
                                                           ("endingOffsets", 141, "140 or 168")])
def test_a_batch_offset_inside_an_index_record_fails_naming_the_nearest_valid_ones(master, keys, option, offset,
                                                                                    nearest):
    with pytest.raises(OptionError, match=rf"option {option}: offset {offset} of {keys[0]} is not on a message "
                                          rf"boundary \(offsets are multiples of 28, the index record size\); use one "
                                          rf"of the nearest valid ones, {nearest}"):
        batch(master, **{option: f'{{"{keys[0]}": {offset}}}'}).plan()


def test_a_stream_start_inside_an_index_record_fails(make_reader, keys):
    reader = make_reader(startingOffsets=f'{{"{keys[1]}": 33}}')
    with pytest.raises(OptionError, match=rf"offset 33 of {keys[1]} is not on a message boundary.* 28 or 56"):
        reader.initialOffset()


def test_a_batch_start_beyond_the_max_offset_fails_naming_it(master, keys):
    with pytest.raises(OptionError, match=rf"option startingOffsets: {keys[0]} is at 308, beyond the partition's max "
                                          r"offset 280"):
        batch(master, startingOffsets=f'{{"{keys[0]}": 308}}').plan()


@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets"])
def test_a_batch_read_naming_a_partition_the_topic_does_not_have_fails(master, broker, keys, option):
    wrong = f"{broker.broker_id}:{TOPIC}:7"
    with pytest.raises(OptionError, match=rf"option {option} names a partition the topics do not have: {wrong}; "
                                          rf"they have {keys[0]}, {keys[1]} \(keys are brokerId:topic:partitionId"):
        batch(master, **{option: f'{{"{keys[0]}": 28, "{wrong}": 28}}'}).plan()


def test_a_stream_naming_a_partition_the_topic_does_not_have_fails(make_reader, broker, keys, web):
    wrong = f"{broker.broker_id}:{TOPIC}:7"
    reader = make_reader(masterWebUrl=web.url, startingOffsets=f'{{"{keys[0]}": 28, "{wrong}": 28}}')
    with pytest.raises(OptionError, match=rf"names a partition the topics do not have: {wrong}; they have "
                                          rf"{keys[0]}, {keys[1]}"):
        reader.initialOffset()


def test_a_stream_naming_another_topics_partition_fails_without_a_web_api(make_reader, broker, keys):
    wrong = f"{broker.broker_id}:other_topic:0"
    with pytest.raises(OptionError, match=f"names a partition the topics do not have: {wrong};"):
        make_reader(startingOffsets=f'{{"{wrong}": 0}}').initialOffset()
