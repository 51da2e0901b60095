"""Riding out a broker outage: a broker that is down or restarting is waited for, within one bound.

A broker restarted under a running query (a rolling restart, a crash and a supervisor's restart) is
unreachable for seconds to minutes: its port refuses connections, the TubeMQ master lists no partition of
its topics, the RocketMQ name server has no route for them. Every writer and every producer used to give
up after its few ``sendRetries`` (about a second), so a 3-second restart stopped a sink stream. Here is
the one rule they all follow instead (issue 23 part 8):

* an error that says *the broker is unreachable* (:func:`is_unreachable`: a broken, refused or silent
  connection, :class:`~tubespark.errors.BrokerUnavailableError`) is tried again, with capped backoff, until
  ``outage_s`` (the ``outageTimeoutMs`` option) after the first such error, then fails as
  :class:`~tubespark.errors.BrokerUnavailableError` (retriable) with the last error as its cause;
* any other error keeps its own rule (a caller's ``sendRetries``, or failing at once): an unknown topic,
  a refused login, bad bytes are not outages and are never waited for.

Which answers of a broker mean "unreachable" rather than "not there" is the broker's to say (its folder
turns an ambiguous answer into ``BrokerUnavailableError`` only where it has evidence the topic exists);
this module only counts the time. :class:`OutageWindow` is the bookkeeping a producer's own retry loop
uses; :func:`ride_out` wraps a call that can simply be made again.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from tubespark.errors import BrokerConnectionError, BrokerUnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")

OutageTest = Callable[[BaseException], bool]


def is_unreachable(exc: BaseException) -> bool:
    """The default outage test: the connection failed, broke or timed out, or a broker says its topic is
    unserved for now (all :class:`~tubespark.errors.BrokerConnectionError`)."""
    return isinstance(exc, BrokerConnectionError)


class OutageWindow:
    """How long a run of outage errors has lasted, and whether to try again after one more.

    ``allows(exc)`` starts the window at the first outage error and says yes until ``outage_s`` after it;
    ``clear()`` (after a success) closes it, so the next outage gets the whole window again.
    """

    def __init__(self, outage_s: float, is_outage: OutageTest = is_unreachable,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.outage_s = max(0.0, outage_s)
        self.is_outage = is_outage
        self.clock = clock
        self.since: float | None = None

    def allows(self, exc: BaseException) -> bool:
        """Whether ``exc`` is an outage error and the outage is still within its window."""
        if not self.is_outage(exc):
            return False
        now = self.clock()
        if self.since is None:
            self.since = now
        return now - self.since < self.outage_s

    def remaining(self) -> float:
        return 0.0 if self.since is None else max(0.0, self.since + self.outage_s - self.clock())

    def clear(self) -> None:
        self.since = None

    def error(self, exc: BaseException, what: str) -> BaseException:
        """What to raise when ``exc`` ends the tries: an outage waited for becomes :class:`BrokerUnavailableError`
        saying how long; anything else (and any error when ``outage_s`` is 0) is ``exc`` itself."""
        if not self.is_outage(exc) or self.outage_s == 0:
            return exc  # 0: the caller asked for no wait, so it gets the error as it came
        error = BrokerUnavailableError(f"{what}: the broker was still unreachable after {self.outage_s:.0f} s "
                                       f"(outageTimeoutMs): {exc}")
        error.__cause__ = exc
        return error


def backoff(tries: int, *, base_s: float = 0.25, cap_s: float = 2.0) -> float:
    """The wait before try ``tries + 1`` of an outage: doubling from ``base_s`` up to ``cap_s``, jittered."""
    return min(cap_s, base_s * 2.0 ** min(max(tries - 1, 0), 16)) * random.uniform(0.5, 1.0)


def ride_out(fn: Callable[[], T], *, outage_s: float, what: str, is_outage: OutageTest = is_unreachable,
             sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> T:
    """Return ``fn()``, calling it again after outage errors until ``outage_s`` after the first of them.

    Any other error is raised at once; an outage that lasts the whole window ends in
    :class:`BrokerUnavailableError` (see :meth:`OutageWindow.error`).
    """
    window = OutageWindow(outage_s, is_outage, clock)
    tries = 0
    while True:
        tries += 1
        try:
            return fn()
        except Exception as exc:
            if not window.allows(exc):
                error = window.error(exc, what)
                if error is exc:
                    raise
                raise error from exc
            pause = min(backoff(tries), window.remaining())
            log.warning("%s: the broker is unreachable (%s: %s); trying again in %.1f s, for up to %.0f s more",
                        what, type(exc).__name__, exc, pause, window.remaining())
            sleep(pause)
