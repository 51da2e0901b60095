"""The ``#last@`` marks (issue 37 part 5): a bounded history of batch ends' fingerprints, and where a partition
resumes after its broker lost acknowledged messages and reused their offsets (tubespark/spark/marks.py), through
the shared engine against a broker that is a list of message ids."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from tubespark.errors import BrokerConnectionError, DataLossError
from tubespark.spark.broker import Broker, Deferring, Range, Survey
from tubespark.spark.marks import OLDER_MARKS, RECENT_MARKS, START, find_divergence, thin
from tubespark.spark.offsets import BatchOffsets
from tubespark.spark.planning import Bounds
from tubespark.spark.stream_engine import StreamEngine

# --- the offsets JSON -----------------------------------------------------------------------------------


def test_offsets_written_before_the_marks_parse_as_before():
    """A batch end as the previous version wrote it (every mark it knew): the same positions, starts,
    fingerprints and origins; no history."""
    old = {"1:t:0": 280, "1:t:1": 56, "1:t:1#from": 28, "1:t:2": 84, "1:t:2#skip": 84, "1:t:0#last": 157411193,
           "1:t#origin": 20261125074442}
    batch = BatchOffsets.parse(old)
    assert batch.positions == {"1:t:0": 280, "1:t:1": 56, "1:t:2": 84}
    assert batch.starts == {"1:t:1": 28, "1:t:2": 84} and batch.fingerprints == {"1:t:0": 157411193}
    assert batch.origins == {"1:t": 20261125074442} and batch.history == {}


def test_history_marks_round_trip_and_stay_out_of_the_positions():
    batch = BatchOffsets({"1:t:0": 280}, {}, {"1:t:0": 9}, {}, {"1:t:0": {0: START, 224: 7}, "1:t:9": {5: 1}})
    raw = batch.to_spark()
    assert raw == {"1:t:0": 280, "1:t:0#last": 9, "1:t:0#last@0": -1, "1:t:0#last@224": 7}  # only held partitions
    again = BatchOffsets.parse(raw)
    assert again.positions == {"1:t:0": 280} and again.history == {"1:t:0": {0: START, 224: 7}}
    assert BatchOffsets.parse({"a": 1, "a#last@x": 3, "a#last@": 4}).history == {}  # no mark of ours: ignored


# --- keeping marks: bounded, logarithmically spaced --------------------------------------------------------


def _run(batches: int, size: Callable[[], int]) -> tuple[dict[int, int], int]:
    """A query reading ``batches`` batches of ``size()`` offsets from 0: its marks, kept as the engine keeps them."""
    marks: dict[int, int] = {0: START}
    position = 0
    for number in range(batches):
        marks[position] = marks.get(position, number + 1)
        position += size()
        marks = thin(marks, position)
    return marks, position



def test_a_long_running_query_keeps_a_bounded_history_with_its_recent_batch_ends():
    rng = random.Random(7)
    marks, position = _run(20_000, lambda: rng.randint(1, 2_000))
    assert len(marks) <= 1 + RECENT_MARKS + OLDER_MARKS
    assert marks[0] == START, "where the query began is kept"
    ends = sorted(marks)[-RECENT_MARKS:]
    assert all(marks[offset] != START for offset in ends) and position - ends[0] <= RECENT_MARKS * 2_000


@pytest.mark.parametrize("seed", range(5))
def test_a_loss_resumes_at_most_three_times_its_depth_below_where_the_new_messages_begin(seed):
    """Wherever the loss begins (L), the highest mark at or below it is close: within one batch while L lies among
    the recent batch ends, within 3x the loss's depth (plus a batch) further back, within the marks' reach."""
    rng = random.Random(seed)
    marks, position = _run(20_000, lambda: rng.randint(1, 100))
    reach = position - min(offset for offset in marks if marks[offset] != START)
    for _ in range(500):
        depth = rng.randint(1, reach)
        lost_from = position - depth
        resume = max(offset for offset in marks if offset <= lost_from)
        assert lost_from - resume <= 3 * depth + 100


# --- finding where to resume ---------------------------------------------------------------------------------


def _broker(read: Sequence[int], lost_from: int, new: int = 1000) -> Mapping[int, int]:
    """What the broker holds below each offset: the query's messages up to ``lost_from``, new ones above."""
    return {offset: read[offset - 1] if offset <= lost_from else new + offset for offset in range(1, len(read) + 50)}


def test_the_highest_mark_the_broker_still_holds_is_where_to_resume():
    read = list(range(1, 101))  # message ids the query read at offsets 0..99
    marks = {0: START, **{offset: read[offset - 1] for offset in (10, 40, 60, 70, 80, 90)}}
    held = _broker(read, lost_from=64)
    asked: list[int] = []

    def fingerprint(offset: int) -> int:
        asked.append(offset)
        return held[offset]

    found = find_divergence(marks, differs=100, held_below=140, read=fingerprint)
    assert (found.resume, found.differs, found.reads, found.begins) == (60, 70, 4, False)
    assert asked == [90, 80, 70, 60]


def test_marks_above_the_broker_end_are_lost_without_a_read_and_a_start_mark_needs_none():
    marks = {5: START, 20: 1, 30: 2}
    found = find_divergence(marks, differs=40, held_below=25, read=lambda offset: -7)
    assert (found.resume, found.differs, found.reads, found.begins) == (5, 20, 1, True)


def test_a_mark_with_nothing_left_to_tell_counts_as_changed_and_no_start_mark_leaves_none():
    found = find_divergence({20: 1, 30: 2}, differs=40, held_below=50, read=lambda offset: None)
    assert (found.resume, found.differs, found.reads) == (None, 20, 2)


# --- through the engine -------------------------------------------------------------------------------------


class _Broker(Broker):
    """One partition ``p``: ``log`` holds its messages (offset = index); fingerprints are the messages' ids."""

    def __init__(self, options: Any, *, batch: bool = False) -> None:
        super().__init__(options, batch=batch)
        self.log: list[str] = []
        self.unreadable_below = -1  # fingerprint reads at or below this offset fail (the broker is flapping)

    def start_offsets(self) -> dict[str, int]:
        return {"p": 0}

    def survey(self, start: Mapping[str, int]) -> Survey:
        return Survey(bounds={"p": Bounds(0, len(self.log))})

    def read_tasks(self, ranges: Sequence[Range], defer: Deferring = None) -> Sequence[InputPartition]:
        return [InputPartition((key, low, high)) for key, low, high in sorted(ranges)]

    def read(self, task: InputPartition, *, driver: bool = False) -> Iterator[Any]:
        return iter(())

    def fingerprint(self, key: str, offset: int) -> int | None:
        if offset <= self.unreadable_below:
            raise BrokerConnectionError("the broker is restarting")
        return None if offset == 0 or offset > len(self.log) else hash(self.log[offset - 1]) & 0x7FFFFFFF

    def values(self, start: Mapping[str, int], end: Mapping[str, int]) -> list[str]:
        return [self.log[offset] for low, high in BatchOffsets.parse(end).ranges(BatchOffsets.parse(start).positions)
                .values() for offset in range(low, high)]


def _options(fail_on_data_loss: bool) -> SimpleNamespace:
    return SimpleNamespace(max_offsets_per_trigger=None, max_bytes_per_trigger=None, min_offsets_per_trigger=None,
                           max_trigger_delay_ms=900_000, fail_on_data_loss=fail_on_data_loss, defer_on_outage=False,
                           deferred_ranges_path="", outage_timeout_ms=0)


def _read_ten_one_at_a_time(fail_on_data_loss: bool) -> tuple[StreamEngine, dict[str, int]]:
    engine = StreamEngine(_Broker(_options(fail_on_data_loss)))
    engine.broker.log = [f"old{i}" for i in range(10)]
    end = engine.initialOffset()
    for _ in range(10):
        end = engine.latestOffset(end, ReadMaxRows(1))
    assert end["p"] == 10
    return engine, end


def _lose_and_refill(engine: StreamEngine, keep: int, refill: int) -> None:
    engine.broker.log[keep:] = [f"new{i}" for i in range(refill)]


def test_reused_offsets_resume_exactly_where_the_broker_lost_them_when_every_batch_end_is_a_mark(caplog):
    engine, end = _read_ten_one_at_a_time(fail_on_data_loss=False)
    _lose_and_refill(engine, keep=7, refill=12)  # old7..old9 lost, new0..new11 at offsets 7..18
    restarted = StreamEngine(_Broker(_options(False)))
    restarted.broker.log = engine.broker.log
    with caplog.at_level("WARNING", logger="tubespark.spark.stream_engine"):
        after = restarted.latestOffset(end, ReadAllAvailable())
    assert restarted.broker.values(end, after) == [f"new{i}" for i in range(12)]
    assert "L in [7, 7]" in caplog.text and "read a second time (at most 0 offsets)" in caplog.text
    assert "the broker lost the messages at offsets [L, 10) (3 to 3 offsets" in caplog.text


def test_fail_on_data_loss_true_stops_the_query_and_names_where_false_resumes():
    engine, end = _read_ten_one_at_a_time(fail_on_data_loss=True)
    _lose_and_refill(engine, keep=7, refill=12)
    restarted = StreamEngine(_Broker(_options(True)))
    restarted.broker.log = engine.broker.log
    with pytest.raises(DataLossError, match=r"^partition p: offsets this query read were reused.*Set "
                                            r"failOnDataLoss=false to continue from offset 7\."):
        restarted.latestOffset(end, ReadAllAvailable())


def test_marks_that_cannot_be_read_yet_hold_the_partition_instead_of_skipping(caplog):
    engine, end = _read_ten_one_at_a_time(fail_on_data_loss=False)
    _lose_and_refill(engine, keep=7, refill=12)
    restarted = StreamEngine(_Broker(_options(False)))
    restarted.broker.log = engine.broker.log
    restarted.broker.unreadable_below = 8  # the check at 10 reads, the marks at 8 and below fail
    with caplog.at_level("WARNING", logger="tubespark.spark.stream_engine"):
        assert restarted.latestOffset(end, ReadAllAvailable()) == end, "no batch: nothing read at reused offsets"
    assert "cannot be read yet to tell where the loss began" in caplog.text and restarted.data_losses == []
    restarted.broker.unreadable_below = -1
    after = restarted.latestOffset(end, ReadAllAvailable())
    assert restarted.broker.values(end, after) == [f"new{i}" for i in range(12)]
