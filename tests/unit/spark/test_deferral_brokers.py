"""Which streams leave a down broker's range to the next batch, for every broker (issue 23 parts 2 and 8, issue 37
part 1; the one rule is :meth:`tubespark.spark.stream_engine.StreamEngine.deferring`).

A report must outlive the driver that planned the range and be seen by no other query: only a ``deferredRangesPath``
given to the query is known to outlive the driver as its checkpoint does, so every broker's stream defers only into
one (under its token, tests/unit/spark/test_deferred_ranges.py) and otherwise its tasks wait, whatever group it
has. The readers are built as Spark builds them; none of them connects for this (no broker runs here).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.readers import PullStreamReader, TankStreamReader, TubeStreamReader
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.spark.stream_engine import StreamEngine
from tubespark.tank.spark.options import TankOptions
from tubespark.tubemq.spark.options import TubeMQOptions

OWN = "<a directory given to the query>"


def tubemq(**extra: str) -> StreamEngine:
    raw = {"master": "127.0.0.1:1", "topic": "events", "group": "orders", **extra}
    return TubeStreamReader(TubeMQOptions.from_raw(raw, mode="read"))


def rocketmq(**extra: str) -> StreamEngine:
    return PullStreamReader(RocketMQOptions.from_raw({"namesrv": "127.0.0.1:1", "topic": "events", **extra},
                                                     mode="read"))


def tank(**extra: str) -> StreamEngine:
    return TankStreamReader(TankOptions.from_raw({"broker": "127.0.0.1:1", "topic": "events", **extra}, mode="read"))


# (reader, options, whether its tasks defer)
CASES = [
    pytest.param(tubemq, {}, False, id="tubemq: a group alone: tasks wait"),
    pytest.param(tubemq, {"deferredRangesPath": OWN}, True, id="tubemq: given dir"),
    pytest.param(tubemq, {"deferredRangesPath": OWN, "deferOnOutage": "false"}, False,
                 id="tubemq: deferOnOutage=false"),
    pytest.param(rocketmq, {"group": "orders"}, False, id="rocketmq: a group alone: tasks wait"),
    pytest.param(rocketmq, {}, False, id="rocketmq without group or dir: waits"),
    pytest.param(rocketmq, {"deferredRangesPath": OWN}, True, id="rocketmq: given dir"),
    pytest.param(tank, {}, False, id="tank without dir: waits"),
    pytest.param(tank, {"deferredRangesPath": OWN}, True, id="tank: given dir"),
    pytest.param(tank, {"deferredRangesPath": OWN, "deferOnOutage": "false"}, False,
                 id="tank: deferOnOutage=false"),
]


@pytest.mark.parametrize(("make", "extra", "defers"), CASES)
def test_a_stream_defers_only_into_a_directory_given_to_it(make: Callable[..., StreamEngine],
                                                           extra: dict[str, str], defers: bool, tmp_path) -> None:
    options = {k: str(tmp_path / "own") if v == OWN else v for k, v in extra.items()}
    reader = make(**options)
    assert reader.deferring() is defers
    reader._task_token = 7  # what partitions() takes from a batch end's #deferrals mark
    defer = reader.task_deferral()
    if not defers:
        assert defer is None, "its tasks wait for their broker"
        return
    assert defer == (str(tmp_path / "own"), 7, reader.run_id)
