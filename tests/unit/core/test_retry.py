"""The retry helper: bounds, backoff, which errors are retried, polling. A fake clock: no real sleeping."""

from __future__ import annotations

import logging

import pytest

from tubespark.core.retry import RetryPolicy, call_with_retry, is_retriable, poll
from tubespark.errors import AuthError, BrokerConnectionError, NoDataError, ServerBusyError
from tubespark.tubemq.errors import PartitionOccupiedError


class FakeTime:
    """A clock that only moves when the code under test sleeps; records every sleep."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


class Failing:
    """A callable that raises the given errors in turn, then returns ``result``."""

    def __init__(self, *errors: BaseException, result: str = "ok") -> None:
        self.errors = list(errors)
        self.result = result
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result


def busy() -> ServerBusyError:
    return ServerBusyError(503, "busy")


def run(fn: Failing, policy: RetryPolicy, t: FakeTime) -> str:
    return call_with_retry(fn, policy, what="test call", sleep=t.sleep, clock=t.clock)


def test_returns_after_retriable_errors() -> None:
    t = FakeTime()
    fn = Failing(busy(), BrokerConnectionError("reset"))
    assert run(fn, RetryPolicy(attempts=5), t) == "ok"
    assert fn.calls == 3
    assert len(t.sleeps) == 2


def test_attempt_bound_reraises_the_last_error() -> None:
    t = FakeTime()
    last = busy()
    fn = Failing(busy(), busy(), last, result="never")
    with pytest.raises(ServerBusyError) as info:
        run(fn, RetryPolicy(attempts=3), t)
    assert info.value is last
    assert fn.calls == 3
    assert len(t.sleeps) == 2  # no sleep after the last try


def test_one_attempt_means_no_retry() -> None:
    t = FakeTime()
    fn = Failing(busy())
    with pytest.raises(ServerBusyError):
        run(fn, RetryPolicy(attempts=1), t)
    assert (fn.calls, t.sleeps) == (1, [])


def test_deadline_bound_stops_retrying_and_never_sleeps_past_it() -> None:
    t = FakeTime()
    fn = Failing(*[busy() for _ in range(100)])
    with pytest.raises(ServerBusyError):
        run(fn, RetryPolicy(timeout_s=5.0, backoff_s=1.0, max_backoff_s=1.0), t)
    assert t.now == pytest.approx(105.0)  # the last wait was cut short to end exactly at the deadline
    assert 5 <= fn.calls <= 11  # waits of 0.5-1 s fill 5 s; one more try right at the deadline
    assert all(s <= 1.0 for s in t.sleeps)


def test_the_first_bound_reached_wins() -> None:
    t = FakeTime()
    fn = Failing(*[busy() for _ in range(100)])
    with pytest.raises(ServerBusyError):
        run(fn, RetryPolicy(timeout_s=1000.0, attempts=4), t)
    assert fn.calls == 4
    t2 = FakeTime()
    fn2 = Failing(*[busy() for _ in range(100)])
    with pytest.raises(ServerBusyError):
        run(fn2, RetryPolicy(timeout_s=0.0, attempts=100), t2)
    assert fn2.calls == 1


def test_non_retriable_errors_are_raised_at_once() -> None:
    t = FakeTime()
    fn = Failing(AuthError(415, "bad signature"))
    with pytest.raises(AuthError):
        run(fn, RetryPolicy(attempts=10), t)
    assert (fn.calls, t.sleeps) == (1, [])
    plain = Failing(ValueError("a bug, not a broker"))
    with pytest.raises(ValueError, match="a bug"):
        run(plain, RetryPolicy(attempts=10), t)
    assert plain.calls == 1


def test_retry_on_exception_types_narrows_the_filter() -> None:
    t = FakeTime()
    occupied = PartitionOccupiedError(410, "held elsewhere")
    fn = Failing(occupied, busy())  # busy is retriable, but not what this caller retries
    with pytest.raises(ServerBusyError):
        run(fn, RetryPolicy(attempts=5, retry_on=PartitionOccupiedError), t)
    assert fn.calls == 2
    both = Failing(occupied, busy())
    assert run(both, RetryPolicy(attempts=5, retry_on=(PartitionOccupiedError, ServerBusyError)), t) == "ok"


def test_retry_on_predicate() -> None:
    t = FakeTime()
    fn = Failing(KeyError("a"), KeyError("b"))
    assert run(fn, RetryPolicy(attempts=5, retry_on=lambda exc: isinstance(exc, KeyError)), t) == "ok"
    no = Failing(busy())
    with pytest.raises(ServerBusyError):
        run(no, RetryPolicy(attempts=5, retry_on=lambda exc: False), t)
    assert no.calls == 1


def test_default_filter_is_the_retriable_flag() -> None:
    assert is_retriable(NoDataError(404, "none"))
    assert is_retriable(BrokerConnectionError("x"))
    assert not is_retriable(AuthError(401, "no"))
    assert not is_retriable(RuntimeError("x"))


def test_backoff_doubles_up_to_the_cap_with_jitter_in_the_upper_half() -> None:
    policy = RetryPolicy(attempts=10, backoff_s=0.5, max_backoff_s=3.0)
    ceilings = {1: 0.5, 2: 1.0, 3: 2.0, 4: 3.0, 9: 3.0}
    for retry, ceiling in ceilings.items():
        delays = [policy.delay(retry) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (retry, min(delays), max(delays))
        assert len(set(delays)) > 1  # jittered, not fixed
    steady = RetryPolicy(attempts=3, backoff_s=0.25, max_backoff_s=0.25)
    assert all(0.125 <= steady.delay(n) <= 0.25 for n in range(1, 20))


def test_sleeps_follow_the_backoff() -> None:
    t = FakeTime()
    fn = Failing(*[busy() for _ in range(4)])
    run(fn, RetryPolicy(attempts=5, backoff_s=1.0, max_backoff_s=4.0), t)
    for sleep, ceiling in zip(t.sleeps, (1.0, 2.0, 4.0, 4.0), strict=True):
        assert ceiling / 2 <= sleep <= ceiling


@pytest.mark.parametrize("kwargs", [
    {},  # no bound at all
    {"attempts": 0},
    {"timeout_s": -1.0},
    {"attempts": 3, "backoff_s": 0.0},
    {"attempts": 3, "backoff_s": 2.0, "max_backoff_s": 1.0},
])
def test_bad_policies_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message differs per case
        RetryPolicy(**kwargs)


def test_each_retry_is_logged_with_what_and_why(caplog: pytest.LogCaptureFixture) -> None:
    t = FakeTime()
    with caplog.at_level(logging.INFO, logger="tubespark.core.retry"):
        call_with_retry(Failing(busy()), RetryPolicy(attempts=3), what="register x", sleep=t.sleep, clock=t.clock)
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert "register x" in record.getMessage() and "ServerBusyError" in record.getMessage()
    assert "try 2/3" in record.getMessage()


# --- poll ------------------------------------------------------------------------------------------


def test_poll_returns_the_first_truthy_result() -> None:
    t = FakeTime()
    answers = iter([None, False, [], "ready", "later"])
    assert poll(lambda: next(answers), RetryPolicy(timeout_s=10.0), what="x", sleep=t.sleep, clock=t.clock) == "ready"
    assert len(t.sleeps) == 3


def test_poll_returns_none_at_the_deadline() -> None:
    t = FakeTime()
    calls = []
    result = poll(lambda: calls.append(1), RetryPolicy(timeout_s=3.0, backoff_s=0.5, max_backoff_s=0.5),
                  what="never", sleep=t.sleep, clock=t.clock)
    assert result is None
    assert t.now == pytest.approx(103.0)
    assert 6 <= len(calls) <= 13


def test_poll_attempt_bound() -> None:
    t = FakeTime()
    calls = []
    assert poll(lambda: calls.append(1), RetryPolicy(attempts=4), what="x", sleep=t.sleep, clock=t.clock) is None
    assert (len(calls), len(t.sleeps)) == (4, 3)


def test_poll_lets_probe_errors_through() -> None:
    t = FakeTime()
    fn = Failing(busy())  # retriable, but poll retries on results, not on errors
    with pytest.raises(ServerBusyError):
        poll(fn, RetryPolicy(timeout_s=10.0), what="x", sleep=t.sleep, clock=t.clock)
    assert fn.calls == 1


def test_poll_log_level_is_the_policys(caplog: pytest.LogCaptureFixture) -> None:
    t = FakeTime()
    answers = iter([None, None, 1])
    with caplog.at_level(logging.DEBUG, logger="tubespark.core.retry"):
        poll(lambda: next(answers), RetryPolicy(timeout_s=9.0, log_level=logging.DEBUG), what="quiet wait",
             sleep=t.sleep, clock=t.clock)
    assert [r.levelno for r in caplog.records] == [logging.DEBUG, logging.DEBUG]
    assert all("quiet wait" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("policy", "tries", "elapsed_s", "allowed"), [
    (RetryPolicy(attempts=3), 2, 0.0, True),
    (RetryPolicy(attempts=3), 3, 0.0, False),  # attempts counts every try, the first included
    (RetryPolicy(attempts=1), 1, 0.0, False),  # 1: no retry
    (RetryPolicy(timeout_s=5.0), 100, 4.9, True),
    (RetryPolicy(timeout_s=5.0), 1, 5.0, False),  # no new try at the deadline
    (RetryPolicy(timeout_s=0.0), 1, 0.0, False),
    (RetryPolicy(timeout_s=5.0, attempts=3), 3, 1.0, False),  # the first bound reached wins
    (RetryPolicy(timeout_s=5.0, attempts=3), 2, 5.5, False),
])
def test_allows_is_the_bound_every_loop_shares(policy: RetryPolicy, tries: int, elapsed_s: float,
                                               allowed: bool) -> None:
    assert policy.allows(tries, elapsed_s) is allowed


def test_a_loop_that_counts_its_own_tries_stops_where_call_with_retry_stops() -> None:
    policy = RetryPolicy(timeout_s=1.0, attempts=4, backoff_s=0.3, max_backoff_s=0.3)
    t = FakeTime()
    fn = Failing(*[busy() for _ in range(10)])
    with pytest.raises(ServerBusyError):
        run(fn, policy, t)
    own = 1
    while policy.allows(own, sum(t.sleeps[:own - 1])):  # tries take no time here: only the waits between
        own += 1
    assert own == fn.calls


def test_no_backoff_outside_core_computes_its_own_exponent() -> None:
    """A retry loop's waits are :meth:`RetryPolicy.delay`'s (doubling, capped, jittered), not ``2 ** n`` of its
    own: the TANK producer's re-sends had one (issue 38)."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[3] / "tubespark"
    own = [f"{path.relative_to(package)}:{node.lineno}: {ast.unparse(node)}"
           for path in sorted(package.rglob("*.py")) if path.relative_to(package).parts[0] != "core"
           for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and not isinstance(node.right, ast.Constant)]
    assert not own, own
