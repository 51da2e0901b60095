"""TANK's stream guarantees across outages, through Spark, against the TANK test double.

No real TANK broker can be had here: TANK exists only as C++ source that neither these tests nor CI can build or
run, so ``tests/doubles/tank_broker.py`` plays the broker (its docstring lists the protocol facts it follows);
it stops and starts again on the same port with its data, as a restarted broker would.

What the contract suite (tests/integration/contract/) already runs for TANK is not repeated here: a stream killed
with kill -9 and restarted on its checkpoint, a broker restart of 3 s under a read and a write stream, empty
plans, the sink's round trip. These cover what only TANK's reader promises (tubespark/tank/spark/stream_reader.py):

* a query restarted on its checkpoint while its broker is down plans from the checkpoint and waits for the
  broker, then reads on from exactly where it stopped;
* a broker down for a while (several triggers, read tasks mid-range over a backlog) plans nothing meanwhile and
  the query goes on once it is back: every message once.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from tests.doubles.tank_broker import TankBroker
from tests.integration.contract.runs import assert_running, committed_batches, wait_for
from tests.integration.tank.test_spark import new_topic, produce, reader

pytestmark = [pytest.mark.integration, pytest.mark.spark]

DOWN_S = 12.0
"""A while: four times the contract suite's restart, many 200 ms triggers."""


def sink_values(spark, out: Path) -> list[bytes]:
    if not (out / "_spark_metadata").exists():
        return []
    return [bytes(r.value) for r in spark.read.parquet(str(out)).select("value").collect()]


def start(spark, broker: TankBroker, topic: str, out: Path, checkpoint: Path, **options: str):
    return (reader(spark, broker, topic, startingOffsets="earliest", **options).select("value").writeStream
            .format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def assert_each_once(got: list[bytes], expected: list[bytes]) -> None:
    counts = Counter(got)
    assert set(counts) == set(expected), f"{len(set(expected) - set(counts))} lost, " \
                                         f"{len(set(counts) - set(expected))} never sent"
    assert max(counts.values()) == 1, f"read twice: {[v for v, n in counts.items() if n > 1][:5]}"


def test_a_stream_restarted_on_its_checkpoint_while_the_broker_is_down_waits_and_resumes_exactly(spark, tmp_path):
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    with TankBroker() as broker:
        topic = new_topic(broker, 3)
        produce(broker, topic, 3, 0, 300, per_bundle=10)
        query = start(spark, broker, topic, out, checkpoint, maxOffsetsPerTrigger="30")
        try:
            wait_for(lambda: committed_batches(checkpoint) >= 2, 60, "the first batches", query)
        finally:
            query.stop()
        done = committed_batches(checkpoint)
        assert 2 <= done < 10, f"{done} batches of 30 out of 300: the query was not stopped mid-stream"

        broker.stop()
        query = start(spark, broker, topic, out, checkpoint, maxOffsetsPerTrigger="30")  # the same query
        try:
            time.sleep(5)
            assert_running("while its broker was down at its restart", query)
            assert committed_batches(checkpoint) == done, "a batch committed while the broker was down"
            broker.start()  # same port, same data
            produce(broker, topic, 3, 300, 60, per_bundle=10)
            wait_for(lambda: len(sink_values(spark, out)) >= 360, 120, "the restarted query to read everything",
                     query)
            time.sleep(1)  # a few more triggers: nothing may be read twice
            got = sink_values(spark, out)
        finally:
            query.stop()
    assert_each_once(got, [b"v%07d" % n for n in range(360)])


def test_a_broker_down_for_a_while_mid_backlog_loses_and_repeats_nothing(spark, tmp_path):
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    with TankBroker() as broker:
        topic = new_topic(broker, 2)
        produce(broker, topic, 2, 0, 1000, per_bundle=10)
        query = start(spark, broker, topic, out, checkpoint, maxOffsetsPerTrigger="100", fetchSizeBytes="256")
        try:
            wait_for(lambda: committed_batches(checkpoint) >= 2, 60, "the first batches", query)
            broker.stop()
            down_at = committed_batches(checkpoint)
            assert down_at < 9, f"{down_at} batches of 100 out of 1000: the backlog was read before the outage"
            time.sleep(DOWN_S)
            assert_running(f"while its broker was down {DOWN_S:.0f} s", query)
            broker.start()  # same port, same data
            produce(broker, topic, 2, 1000, 100, per_bundle=10)
            wait_for(lambda: len(sink_values(spark, out)) >= 1100, 120, "the query to read on after the outage",
                     query)
            time.sleep(1)
            got = sink_values(spark, out)
        finally:
            query.stop()
    assert_each_once(got, [b"v%07d" % n for n in range(1100)])
