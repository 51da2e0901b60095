"""The one rule for a broker that is down or restarting (tubespark/core/outage.py): outage errors are tried
again until ``outage_s`` after the first of them, then fail as the retriable ``BrokerUnavailableError``;
every other error keeps its own rule."""

from __future__ import annotations

import pytest

from tubespark.core.outage import OutageWindow, read_through_outage, ride_out
from tubespark.errors import (
    BrokerConnectionError,
    BrokerUnavailableError,
    DataLossError,
    RangeReadError,
    ServerBusyError,
    UnknownTopicError,
)


class Clock:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(seconds, 0.01)


def failing(errors: list[Exception], result: str = "done"):
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return result

    return call, calls


def test_an_outage_shorter_than_the_window_is_ridden_out():
    clock = Clock()
    call, calls = failing([BrokerConnectionError("refused"), BrokerUnavailableError("no route now")])
    assert ride_out(call, outage_s=30, what="send", sleep=clock.sleep, clock=clock) == "done"
    assert len(calls) == 3 and len(clock.sleeps) == 2


def test_an_outage_longer_than_the_window_fails_retriable_naming_the_wait_with_the_last_error_as_cause():
    clock = Clock()
    call, calls = failing([BrokerConnectionError(f"refused {i}") for i in range(1000)])
    with pytest.raises(BrokerUnavailableError, match=r"send: the broker was still unreachable after 5 s; start it, "
                                                     r"or raise outageTimeoutMs to wait longer: refused") as caught:
        ride_out(call, outage_s=5, what="send", sleep=clock.sleep, clock=clock)
    assert caught.value.retriable
    assert isinstance(caught.value.__cause__, BrokerConnectionError)
    assert 100.0 + 5 <= clock.now <= 100.0 + 5 + 2.5  # waited the window, never much past it
    assert max(clock.sleeps) <= 2.0 and len(calls) > 3


def test_an_unknown_topic_is_no_outage_and_fails_at_once():
    clock = Clock()
    call, calls = failing([UnknownTopicError(17, "No topic route info")])
    with pytest.raises(UnknownTopicError):
        ride_out(call, outage_s=30, what="send", sleep=clock.sleep, clock=clock)
    assert len(calls) == 1 and clock.sleeps == []


def test_no_window_gives_the_first_error_as_it_came():
    clock = Clock()
    call, _calls = failing([BrokerConnectionError("refused")])
    with pytest.raises(BrokerConnectionError, match=r"^refused$") as caught:
        ride_out(call, outage_s=0, what="send", sleep=clock.sleep, clock=clock)
    assert type(caught.value) is BrokerConnectionError


def test_a_broker_own_outage_test_decides_what_is_waited_for():
    clock = Clock()
    call, _calls = failing([BrokerConnectionError("master refused")])
    with pytest.raises(BrokerConnectionError, match="master refused"):
        ride_out(call, outage_s=30, what="check", is_outage=lambda e: isinstance(e, BrokerUnavailableError),
                 sleep=clock.sleep, clock=clock)
    assert clock.sleeps == []


def test_the_window_starts_at_the_first_outage_error_and_a_success_closes_it():
    clock = Clock()
    window = OutageWindow(10, clock=clock)
    assert not window.allows(UnknownTopicError(0, "no"))  # not an outage: no window opens
    assert window.since is None
    assert window.allows(BrokerConnectionError("down"))
    clock.now += 9
    assert window.allows(BrokerConnectionError("down")) and window.remaining() == pytest.approx(1)
    clock.now += 1
    assert not window.allows(BrokerConnectionError("down"))
    window.clear()
    assert window.allows(BrokerConnectionError("down again"))  # a new outage gets the whole window


# --- a read task's range: read_through_outage -------------------------------------------------------------


def range_error(reached: int, cause: Exception) -> RangeReadError:
    error = RangeReadError(f"gave up at {reached}", partition="p", start=0, end=100, reached=reached)
    error.__cause__ = cause
    return error


class Ranges:
    """A range reader: ``script`` says, per call, how many items it yields (one per offset) before it fails with
    the given cause; a call past the script reads to the end."""

    def __init__(self, script: list[tuple[int, Exception]], clock: Clock, end: int = 10) -> None:
        self.script = script
        self.clock = clock
        self.end = end
        self.starts: list[int] = []

    def __call__(self, offset: int):
        self.starts.append(offset)
        if self.script:
            count, cause = self.script.pop(0)
            yield from range(offset, offset + count)
            self.clock.now += 5  # the reader's own attempt took its time
            raise range_error(offset + count, cause)
        yield from range(offset, self.end)


def test_a_range_read_waits_for_its_broker_resumes_where_it_stood_and_warns_once_then_periodically(caplog):
    clock = Clock()
    down = [(0, BrokerConnectionError("refused"))] * 30  # about 3 minutes of 5-s attempts and backoff
    reader = Ranges([(3, BrokerConnectionError("reset")), *down], clock)
    with caplog.at_level("WARNING", logger="tubespark.core.outage"):
        got = list(read_through_outage(reader, start=0, retry_s=60, outage_s=600, what="read of p [0, 10)",
                                       warn_every_s=30, sleep=clock.sleep, clock=clock))
    assert got == list(range(10)), "each item once, in order"
    assert reader.starts == [0] + [3] * 31
    waits = [r.getMessage() for r in caplog.records if "waiting for the broker" in r.getMessage()]
    elapsed = 31 * 5 + sum(clock.sleeps)
    # at once, then at the first retry 30 s or more after the last one (the retries are about 6 s apart)
    assert 1 + elapsed // 37 <= len(waits) <= 1 + elapsed // 30
    assert waits[0].startswith("read of p [0, 10): waiting for the broker (BrokerConnectionError: reset)")
    assert "read up to offset 3" in waits[0] and "outageTimeoutMs=600000" in waits[0]
    assert "answers again" in caplog.records[-1].getMessage()
    assert max(clock.sleeps) <= 2.0, "capped backoff"


def test_a_range_read_fails_retriably_once_the_outage_lasts_the_whole_window_without_progress():
    clock = Clock()
    reader = Ranges([(2, BrokerConnectionError("refused"))] + [(0, BrokerConnectionError("refused"))] * 1000, clock)
    started = clock.now
    with pytest.raises(BrokerUnavailableError, match=r"read of p: the broker was unreachable for 12\d s; start it and "
                       r"retry \(a task retry or a restarted query reads on from offset 2, below which every "
                       r"message was read\), "
                       r"or raise outageTimeoutMs \(now 120000\)") as caught:
        list(read_through_outage(reader, start=0, retry_s=60, outage_s=120, what="read of p", sleep=clock.sleep,
                                 clock=clock))
    assert 120 <= clock.now - started <= 120 + 5 + 1, "bounded by the window (+ the attempt under way)"
    assert caught.value.retriable and isinstance(caught.value.__cause__, RangeReadError)


def test_progress_restarts_the_window():
    clock = Clock()
    refused = BrokerConnectionError("refused")
    reader = Ranges([(1, refused), (0, refused), (1, refused), (0, refused), (1, refused), (0, refused)], clock)
    started = clock.now
    got = list(read_through_outage(reader, start=0, retry_s=1, outage_s=12, what="r", sleep=clock.sleep,
                                   clock=clock))
    assert got == list(range(10))
    assert clock.now - started > 30, "three outages of about 10 s, each shorter than the window after an item"


def test_other_faults_keep_the_readers_budget_and_other_errors_pass_at_once():
    clock = Clock()
    busy = ServerBusyError(503, "busy")
    reader = Ranges([(0, busy)] * 100, clock)
    with pytest.raises(RangeReadError) as caught:
        list(read_through_outage(reader, start=0, retry_s=20, outage_s=600, what="r", sleep=clock.sleep,
                                 clock=clock))
    assert caught.value.__cause__ is busy and clock.now - 100 < 20 + 5 + 2

    def lost(offset: int):
        raise DataLossError("gone")
        yield offset

    with pytest.raises(DataLossError):
        list(read_through_outage(lost, start=0, retry_s=20, outage_s=600, what="r", sleep=clock.sleep, clock=clock))


def test_no_outage_window_raises_the_readers_own_error():
    clock = Clock()
    reader = Ranges([(0, BrokerConnectionError("refused"))] * 100, clock)
    with pytest.raises(RangeReadError):
        list(read_through_outage(reader, start=0, retry_s=10, outage_s=0, what="r", sleep=clock.sleep, clock=clock))
    assert clock.now - 100 < 10 + 5 + 2


def test_after_an_outage_a_broker_that_answers_busy_gets_the_readers_whole_budget():
    """A restarted broker answers "not ready" or "busy" for a moment: that fault must not fail the read because
    the outage before it already used the reader's budget."""
    clock = Clock()
    refused, busy = BrokerConnectionError("refused"), ServerBusyError(503, "starting")
    reader = Ranges([(1, refused)] + [(0, refused)] * 10 + [(0, busy)], clock)
    got = list(read_through_outage(reader, start=0, retry_s=10, outage_s=600, what="r", sleep=clock.sleep,
                                   clock=clock))
    assert got == list(range(10))
