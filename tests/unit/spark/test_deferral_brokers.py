"""Which streams leave a down broker's range to the next batch, and where their reports live, for every broker
(issue 23 parts 2 and 8; the one rule is :meth:`tubespark.spark.stream_engine.StreamEngine.deferred_ranges`).

A report must outlive the driver that planned the range: written just before the driver dies, it is found by the
restarted one (same options, a new run), else the unread rest of the range is lost. So reports are kept under a
key that stays the same across restarts, a consumer group; a query without one (TANK, RocketMQ pull without
``group``) defers only into a ``deferredRangesPath`` set for it alone, and otherwise its tasks wait. The readers
are built as Spark builds them; none of them connects for this (no broker runs here).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tubespark.core.deferred import Deferral, DeferredRanges
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.stream_reader import PullStreamReader
from tubespark.spark.stream_engine import StreamEngine
from tubespark.tank.spark.options import TankOptions
from tubespark.tank.spark.stream_reader import TankStreamReader
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.stream_reader import TubeStreamReader

OWN = "<the query's own directory>"


def tubemq(**extra: str) -> StreamEngine:
    raw = {"master": "127.0.0.1:1", "topic": "events", "group": "orders", **extra}
    return TubeStreamReader(TubeMQOptions.from_raw(raw, mode="read"))


def rocketmq(**extra: str) -> StreamEngine:
    return PullStreamReader(RocketMQOptions.from_raw({"namesrv": "127.0.0.1:1", "topic": "events", **extra},
                                                     mode="read"))


def tank(**extra: str) -> StreamEngine:
    return TankStreamReader(TankOptions.from_raw({"broker": "127.0.0.1:1", "topic": "events", **extra}, mode="read"))


# (reader, options, the reports' scope or None: tasks wait, where: OWN or the default directory)
CASES = [
    pytest.param(tubemq, {}, "orders-tubespark-read", "default", id="tubemq: its read group"),
    pytest.param(tubemq, {"deferredRangesPath": OWN}, "orders-tubespark-read", OWN, id="tubemq: group, given dir"),
    pytest.param(tubemq, {"deferOnOutage": "false"}, None, None, id="tubemq: deferOnOutage=false"),
    pytest.param(rocketmq, {"group": "orders"}, "rocketmq:orders", "default", id="rocketmq: its group"),
    pytest.param(rocketmq, {}, None, None, id="rocketmq without group or dir: waits"),
    pytest.param(rocketmq, {"deferredRangesPath": OWN}, "rocketmq", OWN, id="rocketmq without group: own dir"),
    pytest.param(tank, {}, None, None, id="tank without dir: waits"),
    pytest.param(tank, {"deferredRangesPath": OWN}, "tank", OWN, id="tank: own dir"),
    pytest.param(tank, {"deferredRangesPath": OWN, "deferOnOutage": "false"}, None, None,
                 id="tank: deferOnOutage=false"),
]


@pytest.mark.parametrize(("make", "extra", "scope", "where"), CASES)
def test_where_a_query_keeps_its_reports_and_a_restarted_driver_finds_them(
        make: Callable[..., StreamEngine], extra: dict[str, str], scope: str | None, where: str | None,
        tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("tubespark.core.deferred.DEFAULT_BASE", str(tmp_path / "default"))
    options = {k: str(tmp_path / "own") if v == OWN else v for k, v in extra.items()}
    first = make(**options)
    defer = first.task_deferral()
    if scope is None:
        assert defer is None, "its tasks wait for their broker"
        assert first.deferred_ranges() is None
        return
    assert defer is not None
    location, found, run_id = defer
    assert (location, found, run_id) == (str(tmp_path / ("own" if where == OWN else where)), scope, first.run_id)
    reports = DeferredRanges(location, found)
    assert reports.visible(run_id), "tasks see the driver's marker"
    reports.record(Deferral("events:0", 40, 100, 60))  # a task's report, just before the driver dies
    again = make(**options)  # the restarted driver: same options, another run
    assert again.run_id != first.run_id
    taken = again.deferred_ranges()
    assert taken is not None and taken.take({"events:0": 100}) == {"events:0": Deferral("events:0", 40, 100, 60)}
    again.stop()
    assert not reports.visible(again.run_id), "a stopped query withdraws its marker"
