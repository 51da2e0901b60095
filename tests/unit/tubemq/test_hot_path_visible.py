"""What a user sees of the hot path on an executor: the same Arrow batches from both twins, and one INFO line
per process naming the twin that decoded them (``tubespark --version`` says the same: tests/integration/core/
test_wheel.py).

``QueueRange`` and ``read_range`` are imported from where batch reads get them: the executor module's name may
change, the batch reader always hands it tasks."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.doubles.fakebroker import FakeBroker
from tubespark.core import native
from tubespark.tubemq.spark.adapter import QueueRange, read_range
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire import twin
from tubespark.tubemq.wire.message import OutgoingMessage


@pytest.fixture
def task() -> Iterator[QueueRange]:
    with FakeBroker(batch_size=7) as broker:
        [ref] = broker.add_topic("hot_path")
        broker.append(ref, *(OutgoingMessage(b"v%d" % k, msg_type=f"s{k % 2}", msg_time="202401021530",
                                             attributes={"k": str(k % 3)}) for k in range(30)),
                      *(b"plain %d" % k for k in range(5)))
        yield QueueRange(broker.broker_id, broker.host, broker.port, "hot_path", ref.partition_id, 0, 35 * 28,
                         "hot_path_reader", "hot_path_client")


def _rows(task: QueueRange, attributes: bool) -> list[dict]:
    options = TubeMQOptions.from_raw({"master": "127.0.0.1:1", "topic": "hot_path",
                                      "includeAttributes": str(attributes).lower()}, mode="read")
    return [row for batch in read_range(task, options) for row in batch.to_pylist()]


@pytest.mark.parametrize("attributes", [False, True])
def test_both_twins_give_the_executor_the_same_rows(task: QueueRange, attributes: bool) -> None:
    compiled = _rows(task, attributes)
    with twin.pure_python():
        pure = _rows(task, attributes)
    assert compiled == pure and len(compiled) == 35
    assert [r["streamId"] for r in compiled[:3]] == ["s0", "s1", "s0"] and compiled[-1]["streamId"] is None


def test_the_executor_says_once_which_twin_decodes(task: QueueRange, caplog: pytest.LogCaptureFixture,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_announced", set())  # as in a fresh Python worker
    with caplog.at_level(logging.INFO, logger="tubespark.hotpath"):
        _rows(task, False)
        _rows(task, False)
    lines = [r.getMessage() for r in caplog.records if r.name == "tubespark.hotpath"]
    assert lines == [f"tubespark TubeMQ wire hot path: {twin.HOT_PATH}"]
    assert twin.HOT_PATH.startswith("pure-python" if twin.loaded() is None else "compiled (")
