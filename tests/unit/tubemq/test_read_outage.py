"""A read task whose range is on a broker that goes down waits for it (issue 23 part 2): ``outageTimeoutMs``.

A micro-batch planned just before a broker crashes (or replayed after a query restart) has a range on that
broker. Its read task used to retry for ``6 x requestTimeoutMs`` and fail, which stops the query (local
mode has no task retries) for nothing: the restarted query replays the same range on the same down broker.
Now the task waits for the broker, logging a WARNING naming broker, partition and range, reads the range
once the broker is back (each message once), and fails with the retriable ``BrokerUnavailableError`` only
after the whole ``outageTimeoutMs``.

The broker is the scripted fake behind the testbed's fault proxy; "down" is the proxy stopped (open
connections dropped, new ones refused, as a killed broker's port does), "back" a new proxy on the same port.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator

import pytest
from tubespark_testbed.faultproxy import FaultProxy

from tests.doubles.fakebroker import FakeBroker
from tubespark.core.deferred import Deferral, DeferredRanges
from tubespark.core.outage import DEFERRING_ATTEMPT_S, read_attempt_s
from tubespark.errors import BrokerConnectionError, BrokerUnavailableError, RangeReadError, ServerBusyError
from tubespark.tubemq.spark import read_task
from tubespark.tubemq.spark.adapter import QueueRange, read_range
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.constants import Method
from tubespark.tubemq.wire.message import OutgoingMessage

N = 40
BATCH = 4
REQUEST_TIMEOUT_MS = 300
OLD_BUDGET_S = 6 * REQUEST_TIMEOUT_MS / 1000
"""What a read task retried before it failed, before this change (and still with outageTimeoutMs=0)."""
DOWN_S = 2 * OLD_BUDGET_S + 0.5


class Link:
    """A broker's port that can go down and come back: a fault proxy to the fake broker, restarted on its port."""

    def __init__(self, broker: FakeBroker) -> None:
        self.target = broker.address
        self.proxy = FaultProxy(self.target).start()
        self.host, port = self.proxy.address.rsplit(":", 1)
        self.port = int(port)

    def down(self) -> None:
        self.proxy.stop()

    def up(self) -> None:
        self.proxy = FaultProxy(self.target, port=self.port).start()

    def close(self) -> None:
        self.proxy.stop()


@pytest.fixture(autouse=True)
def batch_per_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests take the broker down once the task handed its first fetch's rows on: a batch per fetch."""
    monkeypatch.setattr(read_task, "BATCH_ROWS", 1)


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker(batch_size=BATCH) as fake:
        yield fake


@pytest.fixture
def link(broker: FakeBroker) -> Iterator[Link]:
    link = Link(broker)
    yield link
    link.close()


@pytest.fixture
def task(broker: FakeBroker, link: Link) -> QueueRange:
    [ref] = broker.add_topic("outage")
    broker.append(ref, *(OutgoingMessage(b"m%d" % k) for k in range(N)))
    return QueueRange(broker.broker_id, link.host, link.port, "outage", ref.partition_id, 0, 28 * N,
                      "outage_reader", "outage_client")


def options(outage_ms: int, request_timeout_ms: int = REQUEST_TIMEOUT_MS) -> TubeMQOptions:
    return TubeMQOptions.from_raw({"master": "127.0.0.1:1", "topic": "outage", "connectTimeoutMs": "300",
                                   "requestTimeoutMs": str(request_timeout_ms), "outageTimeoutMs": str(outage_ms)},
                                  mode="read")


def read_with_outage(task: QueueRange, link: Link, outage_ms: int, *, back_after_s: float | None,
                     request_timeout_ms: int = REQUEST_TIMEOUT_MS) -> list[bytes]:
    """Read the task's range; after its first batch the broker goes down (and comes back after ``back_after_s``)."""
    values: list[bytes] = []
    timer = threading.Timer(back_after_s, link.up) if back_after_s is not None else None
    try:
        for batch in read_range(task, options(outage_ms, request_timeout_ms)):
            values.extend(batch.column("value").to_pylist())
            if len(values) == BATCH:
                link.down()
                if timer is not None:
                    timer.start()
    finally:
        if timer is not None:
            timer.join(back_after_s + 5)  # the broker is back (or never went down) before the next test
    return values


def test_a_read_waits_past_the_old_budget_for_a_broker_that_comes_back(task, link, caplog):
    """Fails before the change: RangeReadError after 6 x requestTimeoutMs (1.8 s), the broker back after 4.1 s."""
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="tubespark.core.outage"):
        values = read_with_outage(task, link, 20_000, back_after_s=DOWN_S)
    elapsed = time.monotonic() - started
    assert values == [b"m%d" % k for k in range(N)], "every message of the range once, in order"
    assert elapsed >= DOWN_S
    waits = [r.getMessage() for r in caplog.records if "waiting for the broker" in r.getMessage()]
    assert waits, "a WARNING says what the task waits for"
    assert len(waits) <= 2, "once, then every 30 s: not at every retry"
    address = f"{link.host}:{link.port}"
    assert (f"read of partition {task.ref.key} [0, {28 * N}) from broker {address}: waiting for the broker"
            in waits[0]) and f"read up to offset {28 * BATCH}" in waits[0]
    assert any("the broker answers again" in r.getMessage() for r in caplog.records)


def test_a_broker_down_for_the_whole_outage_time_fails_the_task_retriably(task, link):
    outage_ms = 3000
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError) as caught:
        read_with_outage(task, link, outage_ms, back_after_s=None)
    elapsed = time.monotonic() - started
    assert outage_ms / 1000 <= elapsed < outage_ms / 1000 + OLD_BUDGET_S + 2, "bounded by the option (+ one attempt)"
    error = caught.value
    assert error.retriable
    text = str(error)
    assert task.ref.key in text and f"{link.host}:{link.port}" in text and "outageTimeoutMs (now 3000)" in text
    assert f"reads on from offset {28 * BATCH}, below which every message was read" in text
    assert isinstance(error.__cause__, RangeReadError) and isinstance(error.__cause__.__cause__, BrokerConnectionError)


def test_outage_timeout_zero_keeps_the_readers_own_budget(task, link):
    started = time.monotonic()
    with pytest.raises(RangeReadError):
        read_with_outage(task, link, 0, back_after_s=None)
    assert time.monotonic() - started < OLD_BUDGET_S + 2


def test_a_busy_broker_is_no_outage_and_keeps_the_readers_budget(task, broker):
    """A broker that answers, but busy (500), is not waited for for outageTimeoutMs: its budget stays 6 x
    requestTimeoutMs, and the error says what it was."""
    broker.inject(Method.GET_MESSAGE, 500, times=10_000)
    started = time.monotonic()
    with pytest.raises(RangeReadError) as caught:
        list(read_range(task, options(60_000)))
    assert time.monotonic() - started < OLD_BUDGET_S + 3
    assert isinstance(caught.value.__cause__, ServerBusyError)


# --- a streaming task leaves the rest of its range to the next batch (tubespark/core/deferred.py) -------------


def _stream_task(task: QueueRange, location: str) -> QueueRange:
    return dataclasses.replace(task, defer=(location, "outage_reader", "run1"))


def test_a_stream_task_gives_up_after_the_grace_and_reports_the_rest(task, link, tmp_path, caplog):
    """Fails before the change (no deferral): the task waits the whole outageTimeoutMs (60 s here)."""
    reports = DeferredRanges(str(tmp_path), "outage_reader")
    reports.announce("run1")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="tubespark.core.outage"):
        values = read_with_outage(_stream_task(task, str(tmp_path)), link, 60_000, back_after_s=None)
    elapsed = time.monotonic() - started
    assert values == [b"m%d" % k for k in range(BATCH)], "the rows read before the broker went down"
    assert elapsed < read_attempt_s(OLD_BUDGET_S, REQUEST_TIMEOUT_MS / 1000) + 3, "one short try, no wait"
    assert reports.take({task.ref.key: task.end}) == {
        task.ref.key: Deferral(task.ref.key, 0, 28 * N, 28 * BATCH)}
    assert any("the next micro-batch reads on from there" in r.getMessage() for r in caplog.records)


def test_a_stream_task_leaves_a_crashed_broker_after_a_short_try_whatever_the_request_timeout(task, link, tmp_path):
    """Fails before the change: the task tried the closed port for 2 x requestTimeoutMs (10 s here, 20 s by
    default) before leaving its range to the next batch; with 2 task slots and 3 streams that held every stream
    for about 40 s in the ten-minute outage run."""
    reports = DeferredRanges(str(tmp_path), "outage_reader")
    reports.announce("run1")
    started = time.monotonic()
    values = read_with_outage(_stream_task(task, str(tmp_path)), link, 60_000, back_after_s=None,
                              request_timeout_ms=5_000)
    assert values == [b"m%d" % k for k in range(BATCH)]
    assert time.monotonic() - started < DEFERRING_ATTEMPT_S + 2.5
    assert reports.take({task.ref.key: task.end}) == {
        task.ref.key: Deferral(task.ref.key, 0, 28 * N, 28 * BATCH)}


def test_a_stream_task_on_a_stopping_broker_reports_the_rest_at_once(task, broker, tmp_path):
    """A broker in a graceful stop answers every read 503 ("Read StoreService temporary unavailable!") until its
    port closes. Fails before the change: 503 was a busy broker, so the stream's task spent the reader's whole
    budget on it (36 s seen in a rolling restart) and then failed instead of leaving the rest to the next batch."""
    reports = DeferredRanges(str(tmp_path), "outage_reader")
    reports.announce("run1")
    broker.inject(Method.GET_MESSAGE, 503, times=10_000, text="Read StoreService temporary unavailable!")
    rows = sum(batch.num_rows for batch in read_range(_stream_task(task, str(tmp_path)), options(60_000)))
    assert rows == 0
    assert reports.take({task.ref.key: task.end}) == {task.ref.key: Deferral(task.ref.key, 0, 28 * N, 0)}


def test_a_stream_task_that_cannot_share_its_report_waits_as_before(task, link, tmp_path, caplog):
    """No driver marker in the directory (an executor on another machine than a driver-local directory): the
    report would be lost, so the task waits for its broker and says once how to get the non-blocking behaviour."""
    with caplog.at_level(logging.WARNING, logger="tubespark.core.deferred"):
        values = read_with_outage(_stream_task(task, str(tmp_path / "elsewhere")), link, 20_000,
                                  back_after_s=DOWN_S)
    assert values == [b"m%d" % k for k in range(N)]
    assert any("set deferredRangesPath" in r.getMessage() for r in caplog.records)


def test_a_stream_task_that_reads_everything_clears_an_earlier_attempts_report(task, tmp_path):
    reports = DeferredRanges(str(tmp_path), "outage_reader")
    reports.announce("run1")
    reports.record(Deferral(task.ref.key, 0, 28 * N, 28 * BATCH))
    rows = sum(batch.num_rows for batch in read_range(_stream_task(task, str(tmp_path)), options(60_000)))
    assert rows == N
    assert reports.take({task.ref.key: task.end}) == {}, "a replayed batch that read it all leaves no remainder"


def test_a_read_task_takes_its_answers_on_its_own_thread(task, monkeypatch):
    """Issue 24: a read task sends one fetch at a time and waits for it, so its connection has no reader thread
    (``caller_reads``): each fetch's answer is read by the task's thread, without a hand-over between threads."""
    started: list[str] = []
    original = threading.Thread.start

    def recording_start(self: threading.Thread) -> None:
        started.append(self.name)
        original(self)

    monkeypatch.setattr(threading.Thread, "start", recording_start)
    values = [v for batch in read_range(task, options(0)) for v in batch.column("value").to_pylist()]
    monkeypatch.undo()
    assert values == [b"m%d" % k for k in range(N)]
    assert not [name for name in started if name.startswith("tubespark-rx-")], started
