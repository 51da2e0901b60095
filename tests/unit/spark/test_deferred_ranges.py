"""Deferred ranges (issue 23 part 2, issue 37 part 1): a read task whose broker went down mid-batch left
``[reached, end)`` of its range unread and reported it; the shared engine moves that partition back in the next
batch's offsets, with a ``#from`` mark, so the remainder is read (with what came after it) once the broker is back,
every message once, and Spark's offset log alone replays it. The reports are real files (tubespark/core/deferred.py)
in a temporary directory, under the query's token (the ``#deferrals`` mark of its offsets); the broker is a table
of bounds."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from tubespark.core.deferred import Deferral, DeferredRanges, TaskDeferral
from tubespark.core.shared_dir import SharedDirError
from tubespark.errors import DataLossError
from tubespark.spark.broker import Broker, Deferring, Range, Survey
from tubespark.spark.offsets import BatchOffsets
from tubespark.spark.planning import Bounds
from tubespark.spark.stream_engine import StreamEngine


class _Broker(Broker):
    """Partitions ``a`` and ``b``; ``down`` ones are unavailable; every group offset stored is kept."""

    def __init__(self, options: Any, *, batch: bool = False) -> None:
        super().__init__(options, batch=batch)
        self.high: dict[str, int] = {"a": 100, "b": 100}
        self.down: set[str] = set()
        self.stored: list[dict[str, int]] = []

    def start_offsets(self) -> dict[str, int]:
        return {"a": 0, "b": 0}

    def survey(self, start: Mapping[str, int]) -> Survey:
        return Survey(bounds={k: Bounds(0, h) for k, h in self.high.items() if k not in self.down},
                      unavailable=dict.fromkeys(self.down, "broker down"))

    def read_tasks(self, ranges: Sequence[Range], defer: Deferring = None) -> Sequence[InputPartition]:
        return [InputPartition((key, low, high, defer)) for key, low, high in sorted(ranges)]

    def read(self, task: InputPartition, *, driver: bool = False) -> Iterator[Any]:
        return iter(())

    def store_offsets(self, offsets: Mapping[str, int]) -> None:
        self.stored.append(dict(offsets))


def _engine(options: Any) -> StreamEngine:
    return StreamEngine(_Broker(options))


def _broker(engine: StreamEngine) -> _Broker:
    assert isinstance(engine.broker, _Broker)
    return engine.broker


TOKEN = 4242
"""The query's token in the offsets of these tests (a real query draws it at its first deferring plan)."""


def _options(path: Any = None, **limits: Any) -> SimpleNamespace:
    base = {"max_offsets_per_trigger": None, "max_bytes_per_trigger": None, "min_offsets_per_trigger": None,
            "max_trigger_delay_ms": 900_000, "fail_on_data_loss": True, "defer_on_outage": True,
            "deferred_ranges_path": None if path is None else str(path), "outage_timeout_ms": 0}
    return SimpleNamespace(**{**base, **limits})


@pytest.fixture
def reports(tmp_path) -> DeferredRanges:
    """The reports of the query whose offsets carry ``#deferrals``: TOKEN (its earlier plans marked them)."""
    found = DeferredRanges(str(tmp_path), TOKEN)
    found.establish()
    return found


def _ranges(engine: StreamEngine, start: dict[str, int], end: dict[str, int]) -> dict[str, tuple[int, int]]:
    return {task.value[0]: (task.value[1], task.value[2]) for task in engine.partitions(start, end)}


def _run_task(engine: StreamEngine, start: dict[str, int], end: dict[str, int], key: str, reached: int | None) -> None:
    """Run ``key``'s task of the batch ``(start, end]`` as an executor would: its broker goes down at ``reached``
    (it defers, when it may) or it reads the whole range (``None``)."""
    (task,) = [t for t in engine.partitions(start, end) if t.value[0] == key]
    _key, low, high, where = task.value
    if where is None:
        return  # it waits for its broker and reads the whole range
    deferral = TaskDeferral(where, key, low, high)
    if reached is None or not deferral(reached):
        deferral.finish()


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
    engine = _engine(_options(reports.location, max_offsets_per_trigger=max_rows))
    if down:
        _broker(engine).down.add("a")
    start = {"a": 100, "b": 100, "a#last": 7, "b#last": 8, "#deferrals": TOKEN}
    want_end = {**want_end, "#deferrals": TOKEN}
    reports.record(report)
    limit = ReadAllAvailable() if max_rows is None else ReadMaxRows(max_rows)
    end = engine.latestOffset(dict(start), limit)
    if want_end == {"a": 100, "b": 100, "#deferrals": TOKEN}:
        assert end == start, "no deferral: the very same offsets, no batch"
        assert reports.take({report.key: report.end}) == ({report.key: report} if report.key == "c" else {})
        return
    assert {k: v for k, v in end.items() if not k.endswith("#last")} == want_end
    assert "a#last" not in end or end["a"] != 60, "the fingerprint of the unread old end is dropped"
    assert end.get("b#last") == 8
    assert _ranges(engine, start, end) == want_ranges
    assert _broker(engine).stored[0]["a"] == report.reached, "the group offset is stored at the remainder's start"
    assert engine.deferrals == [report]


def test_the_moved_offset_is_carried_while_the_broker_is_down_and_read_once_when_it_is_back(reports):
    engine = _engine(_options(reports.location))
    _broker(engine).down.add("a")
    batch1 = {"a": 100, "b": 100, "#deferrals": TOKEN}
    reports.record(Deferral("a", 40, 100, 60))
    batch2 = engine.latestOffset(dict(batch1), ReadAllAvailable())
    engine.commit(batch1)  # Spark commits a batch after planning the next: never past the remainder's start
    assert _broker(engine).stored[-1]["a"] == 60
    state = engine.partitions_state["a"]  # the one record of partition a: where its remainder starts, and why
    assert (state.floor, engine.partitions_state.summary()) == (60, {"a": "unavailable", "b": "readable"})
    _broker(engine).high["b"] = 150
    batch3 = engine.latestOffset(dict(batch2), ReadAllAvailable())
    assert BatchOffsets.parse(batch3).positions == {"a": 60, "b": 150}
    assert _ranges(engine, batch2, batch3) == {"b": (100, 150)}, "a plans nothing while down"
    assert reports.take({"a": 100}) == {}, "the consumed report was deleted as stale"
    engine.commit(batch2)
    assert _broker(engine).stored[-1]["a"] == 60
    _broker(engine).down.clear()
    _broker(engine).high["a"] = 130
    batch4 = engine.latestOffset(dict(batch3), ReadAllAvailable())
    assert _ranges(engine, batch3, batch4) == {"a": (60, 130)}
    batch5 = engine.latestOffset(dict(batch4), ReadAllAvailable())
    assert batch5 == batch4, "nothing more: no batch, no remainder read twice"
    assert (state.floor, state.latest, engine.partitions_state.summary()) == (None, 130, {"a": "readable",
                                                                                       "b": "readable"})
    engine.commit(batch4)
    assert _broker(engine).stored[-1] == {"a": 130, "b": 150}
    assert BatchOffsets.parse(batch4).deferrals == TOKEN, "the query keeps its token for life"


def test_a_restarted_driver_finds_the_report_again(reports):
    """The report is deleted only once a later batch's start no longer ends there: a driver that died between
    planning and Spark writing the offset log plans the same deferral again."""
    reports.record(Deferral("a", 40, 100, 60))
    start = {"a": 100, "b": 100, "#deferrals": TOKEN}
    first = _engine(_options(reports.location)).latestOffset(dict(start), ReadAllAvailable())
    again = _engine(_options(reports.location)).latestOffset(dict(start), ReadAllAvailable())
    assert first == again == {"a": 100, "a#from": 60, "b": 100, "#deferrals": TOKEN}


def test_by_default_read_tasks_wait_for_their_broker_and_nothing_is_reported(tmp_path):
    """No ``deferredRangesPath``: no place is known to outlive the driver and to be seen by the executors (a temp
    dir is gone when the driver is rescheduled elsewhere), so tasks wait for their broker and lose nothing; the
    offsets carry no token."""
    engine = _engine(_options())
    engine.deferral_scope = lambda: "orders-tubespark-read"  # type: ignore[attr-defined]  # the old group key
    start = {"a": 0, "b": 0}
    end = engine.latestOffset(dict(start), ReadAllAvailable())
    assert end == {"a": 100, "b": 100}, "no #deferrals token"
    assert all(task.value[3] is None for task in engine.partitions(start, end)), "every task waits"


def test_two_queries_with_one_group_name_on_two_clusters_lose_nothing_through_one_directory(tmp_path):
    """Issue 37, the silent loss: two streaming queries with the same consumer group name on two clusters, their
    drivers on one host and one reports directory. Cluster A's broker dies under a batch and A's task reports the
    unread rest of its range; B, planning while its own partition of the same key stands elsewhere, must neither
    take nor delete A's report. Before, both were keyed by the group name and the partition key, B deleted A's
    report as stale, and A's remainder [60, 100) was never read, with no error. (``deferral_scope`` was the engine's
    hook that keyed the reports by group; set here, this test shows that loss on the code before the fix. The engine
    has no such hook now.)"""
    shared = tmp_path / "shared"
    query_a, query_b = _engine(_options(shared)), _engine(_options(shared))
    for engine in (query_a, query_b):
        engine.deferral_scope = lambda: "orders-tubespark-read"  # type: ignore[attr-defined]  # the old group key
    _broker(query_b).high = {"a": 70, "b": 70}  # the same partition keys ("1:soak:0" on any default install)
    a_start, b_start = {"a": 0, "b": 0}, {"a": 0, "b": 0}
    a_end = query_a.latestOffset(dict(a_start), ReadAllAvailable())
    b_end = query_b.latestOffset(dict(b_start), ReadAllAvailable())
    _run_task(query_a, a_start, a_end, "a", reached=60)  # A's broker dies at offset 60 of [0, 100)
    _run_task(query_a, a_start, a_end, "b", reached=None)
    for key in ("a", "b"):
        _run_task(query_b, b_start, b_end, key, reached=None)
    _broker(query_b).high = {"a": 90, "b": 90}
    b_next = query_b.latestOffset(dict(b_end), ReadAllAvailable())  # B plans (and cleans) first
    assert "a#from" not in b_next, "B took nothing of A's"
    _broker(query_a).down.add("a")
    a_next = query_a.latestOffset(dict(a_end), ReadAllAvailable())
    assert a_next["a"] == 60 and a_next["a#from"] == 60, f"A's unread rest [60, 100) must be read: {a_next}"
    assert query_a.deferrals == [Deferral("a", 0, 100, 60)]


def test_a_driver_restarted_where_the_reports_are_not_stops_rather_than_take_the_batch_as_read(reports, tmp_path):
    """A local-mode job rescheduled on another machine (its checkpoint on shared storage, the reports directory
    gone): the batch that ended may have left a range unread, and only the missing directory says which, so the
    query stops with DataLossError naming deferredRangesPath; failOnDataLoss=false goes on (said), with a new
    token."""
    reports.record(Deferral("a", 40, 100, 60))
    start = {"a": 100, "b": 100, "#deferrals": TOKEN}
    elsewhere = tmp_path / "another-machine"
    with pytest.raises(DataLossError, match=r"deferredRangesPath \(directory query-4242\).*same directory"):
        _engine(_options(elsewhere)).latestOffset(dict(start), ReadAllAvailable())
    with pytest.raises(DataLossError, match="deferredRangesPath is not set now"):
        _engine(_options()).latestOffset(dict(start), ReadAllAvailable())
    lenient = _engine(_options(elsewhere, fail_on_data_loss=False))
    _broker(lenient).high["b"] = 150
    end = lenient.latestOffset(dict(start), ReadAllAvailable())
    assert BatchOffsets.parse(end).positions == {"a": 100, "b": 150}
    assert BatchOffsets.parse(end).deferrals not in (None, TOKEN)
    assert DeferredRanges(str(elsewhere), BatchOffsets.parse(end).deferrals).found()


def test_a_batch_replayed_where_the_reports_are_not_reports_there_and_the_next_plan_takes_it(reports, tmp_path):
    """A restart on another machine before Spark committed the last batch: Spark replays it whole, its tasks report
    in the new directory, and that is the batch's proof: the next plan takes the replay's deferral, no error."""
    start, end = {"a": 40, "b": 40, "#deferrals": TOKEN}, {"a": 100, "b": 100, "#deferrals": TOKEN}
    elsewhere = _engine(_options(tmp_path / "another-machine"))
    _run_task(elsewhere, start, end, "a", reached=70)  # the replay: a's broker is down from 70
    _run_task(elsewhere, start, end, "b", reached=None)
    _broker(elsewhere).down.add("a")
    nxt = elsewhere.latestOffset(dict(end), ReadAllAvailable())
    assert nxt == {"a": 70, "a#from": 70, "b": 100, "#deferrals": TOKEN}


def test_a_new_query_draws_its_token_once_and_marks_its_directory(tmp_path):
    engine = _engine(_options(tmp_path))
    start = {"a": 0, "b": 0}
    end = engine.latestOffset(dict(start), ReadAllAvailable())
    token = BatchOffsets.parse(end).deferrals
    assert token is not None and DeferredRanges(str(tmp_path), token).found()
    _broker(engine).high = {"a": 200, "b": 200}
    assert BatchOffsets.parse(engine.latestOffset(dict(end), ReadAllAvailable())).deferrals == token
    other = _engine(_options(tmp_path)).latestOffset(dict(start), ReadAllAvailable())
    assert BatchOffsets.parse(other).deferrals != token, "another query never gets the same directory"


def test_a_complete_attempt_clears_an_earlier_attempts_report(reports):
    reports.record(Deferral("a", 40, 100, 60))
    reports.complete("a", 40, 100)
    assert reports.take({"a": 100}) == {}


def test_a_reports_directory_that_cannot_be_read_plans_no_batch(reports, monkeypatch):
    """Planning on without the reports could pass over a remainder for good: no batch until they can be read."""
    engine = _engine(_options(reports.location))
    _broker(engine).high["b"] = 150
    start = {"a": 100, "b": 100, "#deferrals": TOKEN}

    def unreachable(self, positions):
        raise SharedDirError("cannot list", option="deferredRangesPath", location="x")

    monkeypatch.setattr(DeferredRanges, "take", unreachable)
    assert engine.latestOffset(dict(start), ReadAllAvailable()) == start
    monkeypatch.undo()
    assert engine.latestOffset(dict(start), ReadAllAvailable()) == {"a": 100, "b": 150, "#deferrals": TOKEN}
