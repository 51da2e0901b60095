"""A stream killed with ``kill -9`` (driver JVM, Python workers and all) restarts from its checkpoint and its
sink ends up holding every message exactly once: nothing lost, nothing read twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.contract.brokers import Broker
from tests.integration.contract.runs import committed_batches, values, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

JOB = Path(__file__).resolve().parents[1] / "stream_job.py"


def sink_values(spark, out: Path) -> list[bytes]:
    if not (out / "_spark_metadata").exists():
        return []
    return [bytes(r.value) for r in spark.read.parquet(str(out)).select("value").collect()]


def test_a_killed_stream_restarts_from_its_checkpoint_without_loss_or_duplicates(spark, broker: Broker, tmp_path):
    topic = broker.new_topic()
    first, second = values(300, "first"), values(100, "second")
    broker.produce(topic, first)
    options = {**broker.stream_options(), "topic": topic, "startingOffsets": "earliest",
               "maxOffsetsPerTrigger": "20"}
    checkpoint, out = tmp_path / "ck", tmp_path / "out"
    job = subprocess.Popen([sys.executable, str(JOB), broker.format, json.dumps(options), str(checkpoint), str(out),
                            "run"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                           text=True)
    try:
        wait_for(lambda: committed_batches(checkpoint) >= 3 or job.poll() is not None, 120,
                 "the job to commit batches")
        assert job.poll() is None, job.stdout.read() if job.stdout else ""
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # mid-stream: 300 messages at 20 a batch are far from read
        job.wait(30)
    done = committed_batches(checkpoint)
    assert 3 <= done < 15, f"{done} batches committed: the kill was not mid-stream"

    broker.produce(topic, second)
    # the same query, restarted; with larger batches from here (the batch planned before the kill is replayed as
    # the checkpoint holds it), so the rest is a few batches, not 17 of 20 messages each
    restarted = {**options, "maxOffsetsPerTrigger": "150"}
    query = (spark.readStream.format(broker.format).options(**restarted).load()
             .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: len(sink_values(spark, out)) >= len(first) + len(second), 180,
                 "the restarted stream to read everything", query)
        got = Counter(sink_values(spark, out))
    finally:
        query.stop()
    assert set(got) == set(first + second), f"{len(set(first + second) - set(got))} messages lost"
    assert max(got.values()) == 1, f"read twice: {[v for v, n in got.items() if n > 1][:5]}"
