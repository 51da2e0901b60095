"""Trigger.AvailableNow reads everything up to the end it fixed when it started, in as many batches as the
read limit needs, and stops: messages produced while it runs are left for the next run."""

from __future__ import annotations

import pytest

from tests.integration.contract.brokers import Broker
from tests.integration.contract.runs import available_now_batches, values

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_available_now_reads_to_the_end_fixed_at_start_and_stops(spark, broker: Broker, tmp_path):
    topic = broker.new_topic()
    before, during, after = values(60, "before"), values(20, "during"), values(8, "after")
    broker.produce(topic, before)
    produced_during: list[int] = []

    def produce_during_the_first_batch(batch_id: int) -> None:
        if not produced_during:
            produced_during.append(batch_id)
            broker.produce(topic, during)

    frame = broker.stream(spark, topic, startingOffsets="earliest", maxOffsetsPerTrigger="20")
    checkpoint = tmp_path / "ck"
    batches = available_now_batches(frame, checkpoint, on_batch=produce_during_the_first_batch)
    assert produced_during, "no batch ran"
    assert sorted(v for batch in batches for v in batch) == sorted(before)  # nothing of what came later
    assert len(batches) >= 3, [len(b) for b in batches]  # it went on after the first batch, to its end
    # the next run from the same checkpoint reads the rest: what came during the first, and since
    broker.produce(topic, after)
    rest = available_now_batches(frame, checkpoint)
    assert sorted(v for batch in rest for v in batch) == sorted(during + after)
