"""The one rule for a broker that is down or restarting (tubespark/core/outage.py): outage errors are tried
again until ``outage_s`` after the first of them, then fail as the retriable ``BrokerUnavailableError``;
every other error keeps its own rule."""

from __future__ import annotations

import pytest

from tubespark.core.outage import OutageWindow, ride_out
from tubespark.errors import BrokerConnectionError, BrokerUnavailableError, UnknownTopicError


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
    with pytest.raises(BrokerUnavailableError, match=r"send: the broker was still unreachable after 5 s "
                                                     r"\(outageTimeoutMs\): refused") as caught:
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
