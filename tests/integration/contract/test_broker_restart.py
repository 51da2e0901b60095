"""A broker restarted under running streams stops neither the read stream nor the write stream: both
carry on once it is back (down at least ``DOWN_S`` seconds), the read stream reads every message once and
every row the write stream committed is in the broker."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from pyspark.sql import functions as F

from tests.integration.contract.brokers import Broker
from tests.integration.contract.runs import assert_running, values, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_a_broker_restart_stops_neither_the_read_nor_the_write_stream(spark, broker: Broker, tmp_path):
    read_topic, write_topic = broker.new_topic(), broker.new_topic()
    name = f"restart_{uuid.uuid4().hex[:8]}"
    reading = (broker.stream(spark, read_topic, startingOffsets="earliest").select("value").writeStream
               .format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "read"))
               .trigger(processingTime="300 milliseconds").start())
    writing = (spark.readStream.format("rate").option("rowsPerSecond", "20").load()
               .select(F.format_string("rate-%06d", "value").alias("value")).writeStream.queryName(f"{name}_sink")
               .format(broker.format)
               .options(**broker.connection(), topic=write_topic)
               .option("checkpointLocation", str(tmp_path / "write")).trigger(processingTime="1 second")
               .start())

    def read() -> list[bytes]:
        return [bytes(r.value) for r in spark.sql(f"select value from {name}").collect()]

    def written_batches() -> int:
        return sum(1 for p in writing.recentProgress if p["numInputRows"])

    try:
        before, after = values(40, "before"), values(40, "after")
        broker.produce(read_topic, before)
        wait_for(lambda: set(before) <= set(read()) and written_batches() >= 2, 90, "both streams to run",
                 reading, writing)

        broker.restart()
        restarted = written_batches()
        assert_running("during the broker restart", reading, writing)

        broker.produce(read_topic, after)
        wait_for(lambda: set(after) <= set(read()), 90, "the read stream to read what came after the restart",
                 reading, writing)
        wait_for(lambda: written_batches() >= restarted + 3, 60, "the write stream to go on after the restart",
                 reading, writing)
        time.sleep(1)  # a few more triggers: nothing may be read twice
        got = Counter(read())
    finally:
        reading.stop()
        writing.stop()
    assert set(got) == set(before + after) and max(got.values()) == 1, got.most_common(3)
    committed = sum(p["numInputRows"] for p in writing.recentProgress)  # the rate source counts from 0
    assert len(writing.recentProgress) < 100, "recentProgress no longer holds every batch"
    held = set(broker.held_values(write_topic))
    missing = [i for i in range(committed) if f"rate-{i:06d}".encode() not in held]
    assert not missing, f"{len(missing)} of the {committed} committed rows are not in the broker: {missing[:5]}"
