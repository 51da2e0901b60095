"""One way to retry a call and to wait for a condition, for every loop in tubespark.

Before this module each client loop had its own bound (attempts here, a deadline there), its own
fixed sleep and its own idea of which errors are worth another try. Now a loop states a
:class:`RetryPolicy` and hands the work to :func:`call_with_retry` (retry a call that raises) or
:func:`poll` (repeat a probe until it reports success). As in aiokafka, *which* errors are retried is
decided by the errors themselves (``retriable``, see :mod:`tubespark.errors`) unless a caller narrows
it, and *how long* to wait between tries is one base delay that doubles up to a cap, with jitter so
that many clients that failed together do not come back together.

Rules, the same for both functions:

* A try is always made at least once. The policy's bound (``timeout_s`` measured from the first try,
  and/or ``attempts`` counting every try) decides whether another try is made; the wait before it is
  shortened so that it never sleeps past the deadline.
* :func:`call_with_retry` re-raises the last error when the bound is exhausted, or at once when the
  error is not one to retry.
* :func:`poll` returns the probe's first truthy result, or ``None`` when the bound is exhausted. It
  does not catch exceptions: a probe that fails raises straight through. The caller turns ``None``
  into the error that fits (it knows what it was waiting for).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

RetryFilter = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
"""Which errors to retry: exception types, or a predicate on the exception."""


def is_retriable(exc: BaseException) -> bool:
    """The default filter: errors that say ``retriable`` (tubespark's errors set the flag by class)."""
    return bool(getattr(exc, "retriable", False))


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to try again, and what to try again on.

    Args:
        timeout_s: no new try starts after this many seconds since the first one.
        attempts: at most this many tries in all (1 means no retry).
        backoff_s: the wait after the first failed try; each later wait doubles...
        max_backoff_s: ...up to this cap. ``max_backoff_s == backoff_s`` gives a steady interval.
        retry_on: exception types or a predicate; ``None`` retries errors whose ``retriable`` is true.
            Only :func:`call_with_retry` uses it.
        log_level: level of the line logged before each wait. INFO by default, because a retry means
            something went wrong; routine waits (a consumer with nothing to read) pass DEBUG.

    At least one of ``timeout_s`` and ``attempts`` is required: a loop without a bound is a hang.
    """

    timeout_s: float | None = None
    attempts: int | None = None
    backoff_s: float = 0.2
    max_backoff_s: float = 2.0
    retry_on: RetryFilter | None = None
    log_level: int = logging.INFO

    def __post_init__(self) -> None:
        if self.timeout_s is None and self.attempts is None:
            raise ValueError("a RetryPolicy needs timeout_s or attempts (or both)")
        if self.timeout_s is not None and self.timeout_s < 0:
            raise ValueError(f"timeout_s must be >= 0, not {self.timeout_s}")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, not {self.attempts}")
        if not 0 < self.backoff_s <= self.max_backoff_s:
            raise ValueError(f"need 0 < backoff_s <= max_backoff_s, not {self.backoff_s} and {self.max_backoff_s}")

    def delay(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1 = the second try): exponential, capped, jittered.

        The jitter keeps half of the delay fixed and draws the other half, i.e. the wait lies in
        ``[d/2, d]`` for the capped exponential ``d``: clients spread out, yet none retries at once.
        """
        ceiling = min(self.max_backoff_s, self.backoff_s * 2.0 ** (retry - 1))
        return ceiling * random.uniform(0.5, 1.0)

    def allows(self, tries: int, elapsed_s: float = 0.0) -> bool:
        """Whether the bound allows another try after ``tries`` tries, the first ``elapsed_s`` seconds ago.

        For loops that keep their own count (a pipelined sender whose failures come back one request at a
        time); :func:`call_with_retry` and :func:`poll` ask it too, so every loop's bound means the same.
        """
        if self.attempts is not None and tries >= self.attempts:
            return False
        return self.timeout_s is None or elapsed_s < self.timeout_s

    def should_retry(self, exc: BaseException) -> bool:
        """Whether ``exc`` is an error this policy retries (see ``retry_on``)."""
        rule = self.retry_on
        if rule is None:
            return is_retriable(exc)
        if isinstance(rule, type | tuple):
            return isinstance(exc, rule)
        return bool(rule(exc))



class _Tries:
    """The bookkeeping of one retry loop: the deadline, the count of tries, the logged waits.

    Shared by :func:`call_with_retry` and :func:`poll`, so the two cannot drift apart.
    """

    def __init__(self, policy: RetryPolicy, what: str, sleep: Callable[[float], None],
                 clock: Callable[[], float]) -> None:
        self.policy = policy
        self.what = what
        self.sleep = sleep
        self.clock = clock
        self.started = clock()
        self.deadline = None if policy.timeout_s is None else self.started + policy.timeout_s
        self.count = 0

    def another(self) -> bool:
        """Whether the bound allows one more try after the ``count`` made so far."""
        return self.policy.allows(self.count, self.clock() - self.started)

    def wait(self, reason: str) -> None:
        """Log why and sleep before the next try, never past the deadline."""
        pause = self.policy.delay(self.count)
        if self.deadline is not None:
            pause = max(0.0, min(pause, self.deadline - self.clock()))
        limit = f"/{self.policy.attempts}" if self.policy.attempts is not None else ""
        log.log(self.policy.log_level, "%s: %s; try %d%s in %.2fs", self.what, reason, self.count + 1, limit, pause)
        self.sleep(pause)


def call_with_retry(fn: Callable[[], T], policy: RetryPolicy, *, what: str,
                    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> T:
    """Return ``fn()``, calling it again after errors the policy retries, within the policy's bound.

    ``what`` names the operation in the log ("register consumer x in group g"). An error the policy
    does not retry is raised at once; when the bound is exhausted the last error is raised.
    """
    tries = _Tries(policy, what, sleep, clock)
    while True:
        tries.count += 1
        try:
            return fn()
        except Exception as exc:
            if not policy.should_retry(exc) or not tries.another():
                raise
            tries.wait(f"retrying after {type(exc).__name__}: {exc}")


def poll(probe: Callable[[], T], policy: RetryPolicy, *, what: str,
         sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> T | None:
    """Call ``probe`` until it returns something truthy and return that; ``None`` once the bound is exhausted.

    ``what`` names the awaited condition in the log ("partitions of topic t"). Exceptions from the
    probe are not caught (``retry_on`` is not used): wrap the probe's own call in
    :func:`call_with_retry` when its errors deserve retries too. ``sleep`` may be any blocking wait,
    e.g. a condition variable's, so a poll can wake early when something changes.
    """
    tries = _Tries(policy, what, sleep, clock)
    while True:
        tries.count += 1
        result = probe()
        if result:
            return result
        if not tries.another():
            return None
        tries.wait("not yet")
