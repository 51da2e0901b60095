"""Counting messages from offsets when several partitions share a store's index."""

from __future__ import annotations

from tubespark.tubemq.client.store_counts import exact_messages, max_messages
from tubespark.tubemq.wire.formats import PartitionRef


def ref(broker: int, partition_id: int, topic: str = "t") -> PartitionRef:
    return PartitionRef(broker, topic, partition_id)


def test_partitions_of_one_store_over_one_range_count_its_records_once():
    # 2 partitions per store (ids 0, 1 in store 0): 100 records in [0, 2800) are 100 messages between them
    ranges = {ref(1, 0): (0, 2800), ref(1, 1): (0, 2800)}
    assert exact_messages(ranges) == max_messages(ranges) == 100  # not 200: one record, one message


def test_dense_stores_count_each_range():
    ranges = {ref(1, 0): (0, 280), ref(1, 10000): (56, 280), ref(2, 0): (0, 28)}
    assert exact_messages(ranges) == max_messages(ranges) == 10 + 8 + 1


def test_different_ranges_in_one_store_give_only_an_upper_bound():
    ranges = {ref(1, 0): (0, 280), ref(1, 1): (140, 560)}  # the union [0, 560): at most 20 messages
    assert exact_messages(ranges) is None and max_messages(ranges) == 20
    apart = {ref(1, 0): (0, 280), ref(1, 1): (560, 840)}
    assert max_messages(apart) == 20
    # an empty range next to a full one: the full one's records may be the other partition's
    assert exact_messages({ref(1, 0): (0, 280), ref(1, 1): (280, 280)}) is None
    assert max_messages({ref(1, 0): (0, 280), ref(1, 1): (280, 280)}) == 10


def test_stores_are_told_apart_by_broker_topic_and_store():
    ranges = {ref(1, 0): (0, 280), ref(2, 0): (0, 280), ref(1, 0, "u"): (0, 280), ref(1, 10001): (0, 280)}
    assert exact_messages(ranges) == 40
