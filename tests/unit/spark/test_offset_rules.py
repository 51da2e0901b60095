"""The rules for offsets a user names, as every broker's readers apply them (tubespark.spark.offset_rules)."""

from __future__ import annotations

import pytest

from tubespark.errors import OptionError
from tubespark.spark.offset_rules import (
    OffsetUnits,
    check_named_partitions,
    check_offset,
    check_range,
    resolve_checked,
)
from tubespark.spark.offsets import EARLIEST, LATEST

TUBEMQ = OffsetUnits(28, "max offset")


def test_a_json_key_the_topics_do_not_have_fails_naming_it_and_those_they_have() -> None:
    listed = ["t:0", "t:1"]
    with pytest.raises(OptionError, match=r"option startingOffsets names a partition the topics do not have: t:7; "
                                          r"they have t:0, t:1 \(keys are topic:partition\)"):
        check_named_partitions("startingOffsets", {"t:0": 5, "t:7": 1}, listed, listing="keys are topic:partition")
    check_named_partitions("startingOffsets", {"t:0": 5, "t:1": -2}, listed)
    check_named_partitions("startingOffsets", "earliest", listed)  # a word names no partition
    # a key the broker does not list now but may have (its broker is down) is for the unavailable rules
    check_named_partitions("endingOffsets", {"t:9": 3}, listed, exists=lambda key: key == "t:9")


def test_a_long_partition_list_is_cut_short() -> None:
    listed = [f"t:{i}" for i in range(40)]
    with pytest.raises(OptionError, match=r"they have t:0, t:1, .* and 28 more"):
        check_named_partitions("endingOffsets", {"u:0": 1}, listed)


def test_tubemq_offsets_must_sit_on_an_index_record() -> None:
    with pytest.raises(OptionError, match=r"option startingOffsets: offset 5 of 1:t:0 is not on a message boundary "
                                          r"\(offsets are multiples of 28, the index record size\); use one of the "
                                          r"nearest valid ones, 0 or 28"):
        check_offset("startingOffsets", "1:t:0", 5, 280, TUBEMQ)
    with pytest.raises(OptionError, match="the nearest valid ones, 56 or 84"):
        check_offset("endingOffsets", "1:t:0", 57, 280, TUBEMQ)
    check_offset("startingOffsets", "1:t:0", 84, 280, TUBEMQ)
    check_offset("startingOffsets", "1:t:0", 280, 280, TUBEMQ)  # the end itself: nothing yet, a boundary


def test_offsets_that_count_messages_are_all_boundaries_but_none_beyond_the_end() -> None:
    check_offset("startingOffsets", "t:b:0", 5, 9)
    with pytest.raises(OptionError, match=r"option startingOffsets: t:b:0 is at 10, beyond the partition's max "
                                          r"offset 9: use latest or an offset up to 9"):
        check_offset("startingOffsets", "t:b:0", 10, 9)
    seq = OffsetUnits(1, "next sequence number", "sequence number")
    with pytest.raises(OptionError, match="beyond the partition's next sequence number 9: use latest or a "
                                          "sequence number up to 9"):
        check_offset("endingOffsets", "t:0", 12, 9, seq)


def test_words_resolve_to_the_bounds_and_numbers_are_checked() -> None:
    assert resolve_checked("startingOffsets", "earliest", "k", low=28, high=280, default=LATEST, units=TUBEMQ) == 28
    assert resolve_checked("startingOffsets", {"k": -1}, "k", low=28, high=280, default=EARLIEST, units=TUBEMQ) == 280
    assert resolve_checked("startingOffsets", {"j": 56}, "k", low=28, high=280, default=EARLIEST, units=TUBEMQ) == 28
    assert resolve_checked("startingOffsets", {"k": 56}, "k", low=28, high=280, default=EARLIEST, units=TUBEMQ) == 56
    with pytest.raises(OptionError, match="not on a message boundary"):
        resolve_checked("startingOffsets", {"k": 57}, "k", low=28, high=280, default=EARLIEST, units=TUBEMQ)


def test_an_end_before_its_start_fails() -> None:
    check_range("k", 5, 5)
    with pytest.raises(OptionError, match="for k the starting offset 6 is after the ending one 5: fix startingOffsets "
                                          "or endingOffsets"):
        check_range("k", 6, 5)


def test_a_start_below_the_first_offset_is_data_loss_on_every_broker_unless_fail_on_data_loss_is_false(caplog):
    """One rule for TubeMQ, TANK and RocketMQ, batch reads and new streams (issue 38): before, TANK's stream called it
    an OptionError, TubeMQ's and RocketMQ's batch reads planned it and left their read tasks to find the gap."""
    from tubespark.errors import DataLossError
    from tubespark.spark.offset_rules import resolve_start

    with pytest.raises(DataLossError, match=r"option startingOffsets: t:0 is at 2, below the partition's first "
                                            r"available offset 6.*failOnDataLoss=false to read from 6"):
        resolve_start("startingOffsets", {"t:0": 2}, "t:0", low=6, high=9, default=EARLIEST)
    with caplog.at_level("WARNING"):
        assert resolve_start("startingOffsets", {"t:0": 2}, "t:0", low=6, high=9, default=EARLIEST,
                             fail_on_data_loss=False) == 6
    assert "failOnDataLoss=false: reading from 6" in caplog.text
    assert resolve_start("startingOffsets", {"t:0": 7}, "t:0", low=6, high=9, default=EARLIEST) == 7
    assert resolve_start("startingOffsets", EARLIEST, "t:0", low=6, high=9, default=EARLIEST) == 6
    assert resolve_start("startingOffsets", {"t:0": 2}, "t:0", low=None, high=9, default=EARLIEST) == 2  # low unknown
