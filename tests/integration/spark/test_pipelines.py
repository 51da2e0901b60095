"""Issue 41 item 3: the declarative pipeline of docs/guide/pipelines.md, run by ``spark-pipelines run`` from the
pip-installed PySpark against the session's TubeMQ cluster.

The page's blocks are the example project (examples/pipelines/tubemq_summary: its spec and its definitions file,
shown verbatim) and the command that runs it. The test publishes eleven messages with known stream ids and
message times, runs that command as written in a copy of the project (a triggered run: each streaming flow reads
what is there and the run ends), and reads the summary topic back: one message per closed minute and stream id,
with the right count, and nothing else (the last minute stays open in the watermark's state).

``spark-pipelines`` starts a local Spark Connect server whose Python (``PYSPARK_PYTHON``, this environment's) has
tubespark, so PySpark's data source discovery registers ``format("tubemq")`` there: the definitions call nothing.
It costs two JVM start-ups (the launcher, then spark-submit's driver with the Connect server), the
``events`` flow and the stateful summary flow (a batch of data and the no-data batch that closes the windows).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.doc_blocks import ROOT, run_by
from tests.integration.tubemq.group_consumer import Consumer
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.wire.message import OutgoingMessage

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ME = "tests/integration/spark/test_pipelines.py"
PAGE = ROOT / "docs" / "guide" / "pipelines.md"
PROJECT = Path("examples") / "pipelines" / "tubemq_summary"
STORAGE = "file:///tmp/tubespark-pipeline/storage"
"""The spec's ``storage`` (an absolute URI, as Spark 4.3 requires). The copy the test runs stores under its own
``tmp_path`` instead, so runs side by side on one host (two checkouts' test suites) never share checkpoints."""

EVENTS = ([("clicks", "202601011000")] * 3 + [("views", "202601011000")] + [("clicks", "202601011001")] * 2
          + [("views", "202601011002")] * 4 + [("clicks", "202601011010")])
"""(streamId, msgTime) of each message published: the last one, ten minutes on, moves the watermark past the
first three minutes, whose windows are then closed and written; its own minute stays open."""
SUMMARY = {
    ("clicks", "202601011000", 3), ("views", "202601011000", 1),
    ("clicks", "202601011001", 2), ("views", "202601011002", 4),
}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def publish(master: str, topic: str) -> None:
    with Producer(master) as producer:
        producer.publish([topic], timeout_s=60)
        for index, (stream_id, minute) in enumerate(EVENTS):
            producer.send_async(topic, OutgoingMessage(f"event {index}".encode(), msg_type=stream_id,
                                                       msg_time=minute))
        assert len(producer.flush()) == len(EVENTS)


def read_back(master: str, topic: str, expected: int) -> list[tuple[str, str, dict]]:
    """Every message of ``topic`` as (streamId, msgTime, JSON body): polls until ``expected`` came, then once more
    so that one too many shows."""
    got: list[tuple[str, str, dict]] = []
    with Consumer(master, f"pipeline_check_{uuid.uuid4().hex[:8]}", [topic], start="earliest") as consumer:
        consumer.session.wait_for_partitions(1, timeout_s=60)
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            batch = consumer.poll(timeout_s=5.0)
            if batch is not None:
                got += [(m.msg_type, m.msg_time, json.loads(m.data)) for m in batch.messages]
        extra = consumer.poll(timeout_s=3.0)
        got += [(m.msg_type, m.msg_time, json.loads(m.data)) for m in extra.messages] if extra else []
    return got


def test_the_pipeline_streams_a_topic_into_a_table_and_sends_per_minute_counts_back(tubemq_cluster, topic_factory,
                                                                                     tmp_path):
    spec, definitions, command = run_by(PAGE, ME)
    assert spec == (ROOT / PROJECT / "spark-pipeline.yml").read_text(), "the page shows the example's spec"
    assert definitions == (ROOT / PROJECT / "transformations" / "summary.py").read_text(), \
        "the page shows the example's definitions"
    shutil.copytree(ROOT / PROJECT, tmp_path / PROJECT)  # the catalog's table files go next to the spec
    copied_spec = tmp_path / PROJECT / "spark-pipeline.yml"
    assert STORAGE in spec
    copied_spec.write_text(spec.replace(STORAGE, (tmp_path / "storage").as_uri()))
    master, source, summary = tubemq_cluster.master_address, topic_factory(), topic_factory()
    publish(master, source)

    env = {**os.environ, "TUBEMQ_MASTER": master, "PIPELINE_SOURCE_TOPIC": source,
           "PIPELINE_SUMMARY_TOPIC": summary}
    env.setdefault("PYSPARK_PYTHON", sys.executable)  # else the test bed's start-up script (sparkpython.py)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    started, cpu = time.monotonic(), _children_cpu_s()
    done = subprocess.run(["bash", "-e", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    print(f"spark-pipelines run: {time.monotonic() - started:.0f} s, {_children_cpu_s() - cpu:.0f} CPU-s "
          f"(its JVMs and Pythons), load average {os.getloadavg()[0]:.1f}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert "Run is COMPLETED" in done.stdout + done.stderr, done.stdout[-3000:]

    got = read_back(master, summary, len(SUMMARY))
    as_sent = {(stream_id, minute, body["count"]) for stream_id, minute, body in got}
    assert len(got) == len(SUMMARY) and as_sent == SUMMARY, got
    for stream_id, minute, body in got:  # the body says the same as the message's stream id and time
        assert body["streamId"] == stream_id, body
        assert body["minute"] == f"{minute[:4]}-{minute[4:6]}-{minute[6:8]}T{minute[8:10]}:{minute[10:]}:00.000Z"

    # the streaming table holds every message of the source topic
    table = pq.read_table(tmp_path / PROJECT / "spark-warehouse" / "events").to_pydict()
    assert sorted(table["body"]) == sorted(f"event {index}" for index in range(len(EVENTS))), table
