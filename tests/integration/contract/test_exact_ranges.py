"""A batch read returns exactly the messages of ``[startingOffsets, endingOffsets)`` of each partition: none
outside, none twice, none missing, however ``maxRecordsPerPartition`` splits the ranges into tasks."""

from __future__ import annotations

import json

import pytest

from tests.integration.contract.brokers import Broker
from tests.integration.contract.runs import values

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def rows(frame, broker: Broker) -> list[tuple[str, int, bytes]]:
    picked = frame.selectExpr(f"{broker.key_column} AS key", f"{broker.offset_column} AS offset", "value")
    return sorted((r.key, r.offset, bytes(r.value)) for r in picked.collect())


def test_batch_reads_exactly_the_planned_ranges(spark, broker: Broker):
    topic = broker.new_topic()
    broker.produce(topic, values(48, "range"))
    held = broker.held(topic)
    assert len(held) == broker.partitions and all(len(m) >= 8 for m in held.values()), held
    # from each partition's third message to its second-to-last (exclusive): ends inside the partition
    starts = {key: messages[2][0] for key, messages in held.items()}
    ends = {key: messages[-2][0] for key, messages in held.items()}
    frame = broker.batch(spark, topic, startingOffsets=json.dumps(starts), endingOffsets=json.dumps(ends),
                         maxRecordsPerPartition="3")
    expected = sorted((key, offset, value) for key, messages in held.items() for offset, value in messages
                      if starts[key] <= offset < ends[key])
    assert rows(frame, broker) == expected
    assert frame.rdd.getNumPartitions() > broker.partitions  # the ranges were split into several tasks each
    everything = sorted((key, offset, value) for key, messages in held.items() for offset, value in messages)
    assert rows(broker.batch(spark, topic), broker) == everything  # default: earliest to latest
