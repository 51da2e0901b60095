"""Deferred ranges (issue 23 part 2): a read task whose broker went down mid-batch left ``[reached, end)`` of
its range unread and reported it; the shared engine moves that partition back in the next batch's offsets,
with a ``#from`` mark, so the remainder is read (with what came after it) once the broker is back, every
message once, and Spark's offset log alone replays it. The reports are real files (tubespark/core/deferred.py)
in a temporary directory; the broker is a table of bounds."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from tubespark.core.deferred import Deferral, DeferredRanges
from tubespark.core.shared_dir import SharedDirError
from tubespark.spark.offsets import BatchOffsets
from tubespark.spark.planning import Bounds
from tubespark.spark.stream_engine import StreamEngine, Survey


class _Engine(StreamEngine):
    """Partitions ``a`` and ``b``; ``down`` ones are unavailable; every group offset stored is kept."""

    def __init__(self, options: Any, reports: DeferredRanges | None = None) -> None:
        super().__init__(options)
        self.reports = reports
        self.high: dict[str, int] = {"a": 100, "b": 100}
        self.down: set[str] = set()
        self.stored: list[dict[str, int]] = []

    def start_offsets(self) -> dict[str, int]:
        return {"a": 0, "b": 0}

    def survey(self, start: Mapping[str, int]) -> Survey:
        return Survey(bounds={k: Bounds(0, h) for k, h in self.high.items() if k not in self.down},
                      unavailable=dict.fromkeys(self.down, "broker down"))

    def read_tasks(self, ranges: Mapping[str, tuple[int, int]]) -> Sequence[InputPartition]:
        return [InputPartition((key, low, high)) for key, (low, high) in sorted(ranges.items())]

    def read_partition(self, partition: InputPartition) -> Iterator[Any]:
        return iter(())

    def store_offsets(self, offsets: Mapping[str, int]) -> None:
        self.stored.append(dict(offsets))

    def deferred_ranges(self) -> DeferredRanges | None:
        return self.reports


def _options(**limits: Any) -> SimpleNamespace:
    base = {"max_offsets_per_trigger": None, "max_bytes_per_trigger": None, "min_offsets_per_trigger": None,
            "max_trigger_delay_ms": 900_000, "fail_on_data_loss": True}
    return SimpleNamespace(**{**base, **limits})


@pytest.fixture
def reports(tmp_path) -> DeferredRanges:
    return DeferredRanges(str(tmp_path), "group-tubespark-read")


def _ranges(engine: _Engine, start: dict[str, int], end: dict[str, int]) -> dict[str, tuple[int, int]]:
    return {task.value[0]: (task.value[1], task.value[2]) for task in engine.partitions(start, end)}


# previous end (a batch that read a:[40,100) and b:[40,100)), the report, a down?, limit -> next end, its ranges
CASES = [
    pytest.param(Deferral("a", 40, 100, 60), True, None,
                 {"a": 60, "a#from": 60, "b": 100}, {}, id="broker-still-down: a moves back, plans nothing"),
    pytest.param(Deferral("a", 40, 100, 60), False, None,
                 {"a": 100, "a#from": 60, "b": 100}, {"a": (60, 100)}, id="broker-back: the remainder in one range"),
    pytest.param(Deferral("a", 40, 100, 40), False, None,
                 {"a": 100, "a#from": 40, "b": 100}, {"a": (40, 100)}, id="nothing-read: the whole range again"),
    pytest.param(Deferral("a", 20, 80, 30), False, None,
                 {"a": 100, "b": 100}, {}, id="stale-report: its end is not a's offset, ignored"),
    pytest.param(Deferral("c", 40, 100, 60), False, None,
                 {"a": 100, "b": 100}, {}, id="another-querys-partition: ignored"),
    pytest.param(Deferral("a", 40, 100, 60), False, 20,
                 {"a": 80, "a#from": 60, "b": 100}, {"a": (60, 80)}, id="admission-counts-the-remainder"),
]


@pytest.mark.parametrize(("report", "down", "max_rows", "want_end", "want_ranges"), CASES)
def test_the_next_batch_after_a_deferral(reports, report, down, max_rows, want_end, want_ranges):
    engine = _Engine(_options(max_offsets_per_trigger=max_rows), reports)
    if down:
        engine.down.add("a")
    start = {"a": 100, "b": 100, "a#last": 7, "b#last": 8}
    reports.record(report)
    limit = ReadAllAvailable() if max_rows is None else ReadMaxRows(max_rows)
    end = engine.latestOffset(dict(start), limit)
    if want_end == {"a": 100, "b": 100}:
        assert end == start, "no deferral: the very same offsets, no batch"
        assert reports.take({report.key: report.end}) == ({report.key: report} if report.key == "c" else {})
        return
    assert {k: v for k, v in end.items() if not k.endswith("#last")} == want_end
    assert "a#last" not in end or end["a"] != 60, "the fingerprint of the unread old end is dropped"
    assert end.get("b#last") == 8
    assert _ranges(engine, start, end) == want_ranges
    assert engine.stored[0]["a"] == report.reached, "the group offset is stored at the remainder's start"
    assert engine.deferrals == [report]


def test_the_moved_offset_is_carried_while_the_broker_is_down_and_read_once_when_it_is_back(reports):
    engine = _Engine(_options(), reports)
    engine.down.add("a")
    batch1 = {"a": 100, "b": 100}
    reports.record(Deferral("a", 40, 100, 60))
    batch2 = engine.latestOffset(dict(batch1), ReadAllAvailable())
    engine.commit(batch1)  # Spark commits a batch after planning the next: never past the remainder's start
    assert engine.stored[-1]["a"] == 60
    engine.high["b"] = 150
    batch3 = engine.latestOffset(dict(batch2), ReadAllAvailable())
    assert BatchOffsets.parse(batch3).positions == {"a": 60, "b": 150}
    assert _ranges(engine, batch2, batch3) == {"b": (100, 150)}, "a plans nothing while down"
    assert reports.take({"a": 100}) == {}, "the consumed report was deleted as stale"
    engine.commit(batch2)
    assert engine.stored[-1]["a"] == 60
    engine.down.clear()
    engine.high["a"] = 130
    batch4 = engine.latestOffset(dict(batch3), ReadAllAvailable())
    assert _ranges(engine, batch3, batch4) == {"a": (60, 130)}
    batch5 = engine.latestOffset(dict(batch4), ReadAllAvailable())
    assert batch5 == batch4, "nothing more: no batch, no remainder read twice"
    engine.commit(batch4)
    assert engine.stored[-1] == {"a": 130, "b": 150}


def test_a_restarted_driver_finds_the_report_again(reports):
    """The report is deleted only once a later batch's start no longer ends there: a driver that died between
    planning and Spark writing the offset log plans the same deferral again."""
    reports.record(Deferral("a", 40, 100, 60))
    first = _Engine(_options(), reports).latestOffset({"a": 100, "b": 100}, ReadAllAvailable())
    again = _Engine(_options(), reports).latestOffset({"a": 100, "b": 100}, ReadAllAvailable())
    assert first == again == {"a": 100, "a#from": 60, "b": 100}


def test_without_a_reports_directory_nothing_moves():
    engine = _Engine(_options())
    start = {"a": 100, "b": 100}
    assert engine.latestOffset(dict(start), ReadAllAvailable()) == start


def test_a_complete_attempt_clears_an_earlier_attempts_report(reports):
    reports.record(Deferral("a", 40, 100, 60))
    reports.complete("a", 40, 100)
    assert reports.take({"a": 100}) == {}


def test_a_reports_directory_that_cannot_be_read_plans_no_batch(reports, monkeypatch):
    """Planning on without the reports could pass over a remainder for good: no batch until they can be read."""
    engine = _Engine(_options(), reports)
    engine.high["b"] = 150
    start = {"a": 100, "b": 100}

    def unreachable(positions):
        raise SharedDirError("cannot list", option="deferredRangesPath", location="x")

    monkeypatch.setattr(reports, "take", unreachable)
    assert engine.latestOffset(dict(start), ReadAllAvailable()) == start
    monkeypatch.undo()
    assert engine.latestOffset(dict(start), ReadAllAvailable()) == {"a": 100, "b": 150}
