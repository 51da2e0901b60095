"""What a stopping stream leaves as its group's offsets on the broker (the hand-over to the group's next reader).

Spark tells the reader that a batch completed only by planning the next trigger from its end, so a query stopped
after its last batch and before another trigger (a ``processingTime`` interval, ``Trigger.Once``) used to leave
the group one batch behind its checkpoint, and a consumer taking over read that batch again. The reader, given
the query's ``checkpointLocation`` too, reads the commit log when it stops (docs/spark/commit-timing.md).

The reader runs for real against the fake master and broker, built the way Spark builds it (the data source's
``streamReader``) and called in Spark's order; each test writes the checkpoint files Spark would have written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from tests.doubles.fakebroker import FakeBroker, FakeMaster
from tests.unit.tubemq.conftest import stream_readers, two_partitions
from tubespark.errors import OptionError
from tubespark.spark.stream_engine import StreamEngine
from tubespark.tubemq.spark.source import TubeMQDataSource

GROUP = "stop_group"
TOPIC = "topic_stop"
FAST = {"connectTimeoutMs": "1000", "requestTimeoutMs": "2000", "heartbeatIntervalMs": "50",
        "assignmentTimeoutMs": "5000", "startingOffsets": "earliest"}


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with two_partitions(TOPIC) as fake:
        yield fake


@pytest.fixture
def make_reader(monkeypatch, master: FakeMaster, broker: FakeBroker) -> Iterator:
    with stream_readers(monkeypatch, master, broker, TOPIC, {"group": GROUP, **FAST}) as make:
        yield make


def spark_planned(checkpoint: Path, batch: int, end: dict) -> None:
    """What Spark writes before it runs ``batch`` (``OffsetSeqLog``: version, metadata, one line per source)."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795926045704,"conf":{}}\n' + json.dumps(end))


def spark_committed(checkpoint: Path, batch: int) -> None:
    """What Spark writes once ``batch`` completed (``CommitLog``), with the ``.crc`` Hadoop writes beside it."""
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (checkpoint / "commits" / f".{batch}.crc").write_bytes(b"crc")


def group_offsets(broker: FakeBroker) -> tuple[int | None, ...]:
    return tuple(broker.stored_offset(GROUP, ref) for ref in broker.partitions(TOPIC))


def run_one_batch(reader: StreamEngine, start: dict) -> dict:
    """Spark's calls for one batch: plan it from ``start`` (the previous batch's end), then run it."""
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end != start
    reader.commit(start)  # Spark's commit of the batch before, after writing this one's offsets
    reader.partitions(start, end)
    return end


@pytest.mark.parametrize("checkpoint_form", ["path", "file-uri"])
def test_stop_stores_the_end_of_the_last_batch_the_checkpoint_committed(make_reader, broker, tmp_path,
                                                                        checkpoint_form):
    checkpoint = tmp_path / "ck"
    location = str(checkpoint) if checkpoint_form == "path" else f"file:{checkpoint}"
    reader = make_reader(checkpointLocation=location)
    start = reader.initialOffset()
    end = run_one_batch(reader, start)
    spark_planned(checkpoint, 0, end)
    spark_committed(checkpoint, 0)  # ... and the query is stopped before another trigger
    assert group_offsets(broker) == (0, 0), "planning batch 0 stores where it starts"
    reader.stop()
    assert group_offsets(broker) == (280, 840), "the group is left at the checkpoint's last committed end"


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "in-flight"])
def test_only_a_batch_the_newest_commit_holds_is_stored(make_reader, broker, tmp_path, committed):
    checkpoint = tmp_path / "ck"
    p0, _ = broker.partitions(TOPIC)
    reader = make_reader(checkpointLocation=str(checkpoint))
    end0 = run_one_batch(reader, reader.initialOffset())
    for batch in range(10):  # batch ids are numbers: commits/9 is older than commits/10
        spark_planned(checkpoint, batch, end0)
        spark_committed(checkpoint, batch)
    broker.append(p0, b"late-1", b"late-2")
    end10 = run_one_batch(reader, end0)  # planning it stored end0 on the broker
    spark_planned(checkpoint, 10, end10)
    if committed:
        spark_committed(checkpoint, 10)
    reader.stop()
    if committed:
        assert group_offsets(broker) == (336, 840)
    else:  # stopped while batch 10 ran: a restart replays it, a consumer taking over must read it too
        assert group_offsets(broker) == (280, 840)


def test_without_the_checkpoint_stop_leaves_the_end_the_last_trigger_was_planned_from(make_reader, broker):
    reader = make_reader()
    start = dict.fromkeys(reader.initialOffset(), 28)
    run_one_batch(reader, start)  # committed or not: nothing tells the reader before it stops
    reader.stop()
    assert group_offsets(broker) == (28, 28)


def test_a_commit_log_that_cannot_be_read_leaves_the_planned_start(make_reader, broker, tmp_path, caplog):
    checkpoint = tmp_path / "ck"
    reader = make_reader(checkpointLocation=str(checkpoint))
    run_one_batch(reader, reader.initialOffset())
    spark_committed(checkpoint, 0)  # a commit without its offsets file: which batch it was cannot be told
    reader.stop()
    assert group_offsets(broker) == (0, 0)
    assert "cannot read the query's commit log" in caplog.text


def test_a_second_stop_does_not_join_the_group_again(make_reader, broker, master, tmp_path):
    checkpoint = tmp_path / "ck"
    reader = make_reader(checkpointLocation=str(checkpoint))
    end = run_one_batch(reader, reader.initialOffset())
    spark_planned(checkpoint, 0, end)
    spark_committed(checkpoint, 0)
    reader.stop()
    reader.stop()  # the runner's own stop() after the SIGTERM hook's, then atexit's
    assert master.consumers == {}, "the member left its group and did not come back"
    assert group_offsets(broker) == (280, 840)


def test_a_bad_checkpoint_location_is_an_option_error(make_reader):
    reader = TubeMQDataSource({"master": "127.0.0.1:1", "topic": TOPIC, "group": GROUP,
                               "checkpointLocation": "nosuchfs://bucket/ck"}).streamReader(None)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="checkpointLocation"):
        reader.initialOffset()
