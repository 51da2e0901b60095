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
uses; :func:`ride_out` wraps a call that can simply be made again; :func:`read_through_outage` is the same
rule for a read task's exact range (a micro-batch planned before its broker went down), where "again" means
"from where the read stood".

**Never answered is not down** (issue 37 part 4). ``outageTimeoutMs`` is for a broker that was serving and went
down; an address that never answered is most often a wrong option, and waiting fifteen minutes for it hides the
mistake. So the window depends on what this process knows of the address the user gave (the *entry point*:
TANK's ``broker``, TubeMQ's ``master``, RocketMQ's ``namesrv``; each broker's client declares it,
:func:`declare`):

* **seen alive**: some address of the entry point sent a well-formed answer of its protocol in this process (the
  first frame a :class:`~tubespark.core.framed.FramedConnection` decodes, or TANK's greeting Ping, tells
  :func:`saw_alive`), or evidence from elsewhere vouches for it (:func:`vouch`: a sink's driver passes what it
  saw to its write tasks, :mod:`tubespark.spark.writers`; a sink stream's checkpoint); then an outage is waited
  for ``outage_s``, as above. An accepted TCP connection is not an answer (issue 37's rule, one place for every
  broker): a port that accepts and never speaks the protocol (another service, a stuck proxy, a port-forward to
  nothing) is an address that never answered;
* **never seen alive**: a connection to it that cannot be opened, or that opened and failed or timed out before
  its peer answered (the error's ``address``, :func:`unanswered`), is tried for :data:`FIRST_CONTACT_S` only,
  then fails as :class:`~tubespark.errors.NeverAnsweredError` naming the option (not retriable, not a connection
  error: nothing above waits for it again);
* addresses the entry point led to (TubeMQ brokers the master lists, RocketMQ brokers of a route, a TANK leader
  a broker named) are known to the deployment, because something that answered named them: they are always
  waited for.

The rule reads only the error (:func:`never_answered`) and this process's record, so every caller of
:class:`OutageWindow` and :func:`ride_out` (sink checks, producers, a stream's start) follows it without
knowing it. A range read (:func:`read_through_outage`) never fails fast: a read task exists only because its
driver planned it from a broker that answered, or from a checkpoint whose offsets name the partition, which is
evidence the endpoint served this query before.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from tubespark.errors import BrokerConnectionError, BrokerUnavailableError, NeverAnsweredError, RangeReadError

log = logging.getLogger(__name__)

T = TypeVar("T")
E = TypeVar("E", bound=BrokerConnectionError)

OutageTest = Callable[[BaseException], bool]


def is_unreachable(exc: BaseException) -> bool:
    """The default outage test: the connection failed, broke or timed out, or a broker says its topic is
    unserved for now (all :class:`~tubespark.errors.BrokerConnectionError`)."""
    return isinstance(exc, BrokerConnectionError)


FIRST_CONTACT_S = 3.0
"""How long an entry point never seen alive is tried before :class:`NeverAnsweredError`: a broker started a moment
after the query (a compose file's order) still makes it; with the 3 s connect timeout of the last try, and a
caller's few quick retries, the error comes within 10 s."""


@dataclass(frozen=True)
class Endpoint:
    """An address option the user gave: ``option`` (its name), ``addresses`` (its ``host:port`` values, any of
    which may answer) and ``role`` (what runs there, for the message: "TANK broker", "TubeMQ master")."""

    option: str
    addresses: tuple[str, ...]
    role: str


_lock = threading.Lock()
_alive: set[str] = set()
_entry_points: dict[str, Endpoint] = {}


def declare(option: str, addresses: Iterable[str], role: str) -> Endpoint:
    """Record that ``addresses`` are the value of the user's ``option`` (a client calls it when it is made)."""
    endpoint = Endpoint(option, tuple(addresses), role)
    with _lock:
        for address in endpoint.addresses:
            _entry_points[address] = endpoint
    return endpoint


def saw_alive(address: str) -> None:
    """``address`` sent a well-formed answer of its protocol in this process (not merely accepted a connection)."""
    with _lock:
        _alive.add(address)


def unanswered(error: E, address: str) -> E:
    """``error`` marked as the failure of a connection to ``address`` before it answered anything (a connect that
    failed, or a connection whose peer never sent a well-formed frame): :func:`never_answered` then asks whether
    ``address`` ever answered in this process. A mark already there (the connect's own) is kept."""
    if not error.address:
        error.address = address
    return error


def vouch(addresses: Iterable[str]) -> None:
    """Evidence from elsewhere (the driver that planned this task saw them answer): count them as seen alive."""
    with _lock:
        _alive.update(addresses)


def alive_addresses() -> frozenset[str]:
    """Every address seen alive (or vouched for) in this process: what a driver hands to its tasks."""
    with _lock:
        return frozenset(_alive)


def forget_all() -> None:
    """Forget every address seen alive and every entry point (tests: each starts as a new process would)."""
    with _lock:
        _alive.clear()
        _entry_points.clear()


def never_answered(exc: BaseException) -> Endpoint | None:
    """The entry point ``exc`` could not connect to, when no address of it was ever seen alive in this process;
    ``None`` otherwise (not a failed connect, an address the entry point led to, or one seen alive).

    Looks along ``exc``'s causes: a broker's "no master answers" or "no name server answered" is raised from the
    last failed connect."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        address = getattr(current, "address", "") if isinstance(current, BrokerConnectionError) else ""
        if address:
            with _lock:
                endpoint = _entry_points.get(address)
                if endpoint is None or any(a in _alive for a in endpoint.addresses):
                    return None
            return endpoint
        current = current.__cause__ or current.__context__
    return None


def never_answered_error(endpoint: Endpoint, exc: BaseException, what: str, waited_s: float) -> NeverAnsweredError:
    """The typed error for an entry point that never answered, naming its option and what to do."""
    where = ",".join(endpoint.addresses)
    tried = f"tried for {waited_s:.0f} s: " if waited_s >= 1 else ""
    error = NeverAnsweredError(
        f"{what}: the {endpoint.role} at {where} (option `{endpoint.option}`) never answered in this process "
        f"({tried}{type(exc).__name__}: {exc}); check the `{endpoint.option}` option (host and port) and that the "
        f"{endpoint.role} runs there. Only a {endpoint.role} that answered once is waited for (outageTimeoutMs)",
        option=endpoint.option, addresses=endpoint.addresses)
    error.__cause__ = exc
    return error


@contextmanager
def named_if_never_answered(what: str) -> Iterator[None]:
    """Raise :class:`NeverAnsweredError` in place of a connection error to an entry point never seen alive, for a
    call that does not wait for outages (a batch read's plan on the driver fails after its own short retries): the
    same typed error, naming the option, as every waiting path gives."""
    try:
        yield
    except BrokerConnectionError as exc:
        endpoint = never_answered(exc)
        if endpoint is None:
            raise
        raise never_answered_error(endpoint, exc, what, 0.0) from exc


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
        self.tried_since: float | None = None  # when the caller's first try began (:meth:`trying`)
        self.first_contact = False  # the last outage error was a connect to an entry point never seen alive

    def trying(self) -> None:
        """The caller starts its first try now: a first contact's :data:`FIRST_CONTACT_S` counts from here, so a
        try that spends seconds on its own retries before it fails does not get the whole bound again."""
        if self.tried_since is None:
            self.tried_since = self.clock()

    def allows(self, exc: BaseException) -> bool:
        """Whether ``exc`` is an outage error and the outage is still within its window."""
        if not self.is_outage(exc):
            return False
        now = self.clock()
        if self.since is None:
            self.since = now
        self.first_contact = never_answered(exc) is not None
        return now < self._start() + self._bound()

    def _start(self) -> float:
        """Where the window starts: the first outage error, or for a first contact the caller's first try."""
        since = self.clock() if self.since is None else self.since
        if self.first_contact and self.tried_since is not None:
            return min(since, self.tried_since)
        return since

    def _bound(self) -> float:
        """The window: ``outage_s``, or :data:`FIRST_CONTACT_S` for an entry point never seen alive."""
        return min(self.outage_s, FIRST_CONTACT_S) if self.first_contact else self.outage_s

    def remaining(self) -> float:
        if self.since is None:
            return 0.0
        return max(0.0, self._start() + self._bound() - self.clock())

    def clear(self) -> None:
        self.since = None
        self.tried_since = None

    def error(self, exc: BaseException, what: str) -> BaseException:
        """What to raise when ``exc`` ends the tries: an outage waited for becomes :class:`BrokerUnavailableError`
        saying how long, an entry point never seen alive :class:`NeverAnsweredError` naming its option; anything
        else (and any error when ``outage_s`` is 0) is ``exc`` itself."""
        if not self.is_outage(exc) or self.outage_s == 0:
            return exc  # 0: the caller asked for no wait, so it gets the error as it came
        endpoint = never_answered(exc)
        if endpoint is not None:
            return never_answered_error(endpoint, exc, what, self.clock() - self._start())
        error = BrokerUnavailableError(f"{what}: the broker was still unreachable after {self.outage_s:.0f} s; "
                                       f"start it, or raise outageTimeoutMs to wait longer: {exc}")
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
    window.trying()
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


WARN_EVERY_S = 30.0
"""While a range read waits for its broker: how often the WARNING that it still waits is repeated."""


DEFERRING_ATTEMPT_S = 2.0
"""A streaming task that can leave its range to the next batch (:mod:`tubespark.core.deferred`) retries a broker
on its own this long: a few reconnects to a crashed broker's closed port, or the one request a silent broker
does not answer (its ``requestTimeoutMs`` bounds that attempt)."""


def read_attempt_s(retry_s: float, request_timeout_s: float, *, deferring: bool = False) -> float:
    """How long a range reader retries on its own before :func:`read_through_outage` looks at the fault: two
    request timeouts (two tries of a silent broker), at least 5 s, at most the reader's whole ``retry_s``;
    :data:`DEFERRING_ATTEMPT_S` for a task that defers (``deferring``).

    Short, so the WARNING of a read waiting for its broker comes within seconds; the wait itself is bounded by
    :func:`read_through_outage`, not by this. Shorter still when the task defers: with 2 task slots and 3
    streams, 6 tasks each spending 20 s (2 x the default requestTimeoutMs) on a crashed broker's closed port held
    every stream for about 40 s (the ten-minute outage run); what a deferring task leaves is read by the next
    batch, so trying longer buys nothing."""
    if deferring:
        return min(retry_s, DEFERRING_ATTEMPT_S)
    return min(retry_s, max(5.0, 2 * request_timeout_s))


def read_through_outage(read: Callable[[int], Iterable[T]], *, start: int, retry_s: float, outage_s: float,
                        what: str, is_outage: OutageTest = is_unreachable, warn_every_s: float = WARN_EVERY_S,
                        defer: Callable[[int], bool] | None = None,
                        sleep: Callable[[float], None] = time.sleep,
                        clock: Callable[[], float] = time.monotonic) -> Iterator[T]:
    """Yield what ``read(start)`` yields; when the read gives up on its broker, wait for it and read on.

    Why: a micro-batch planned just before a broker crashed (or replayed after a restart) has a range on it,
    and failing the task stops the query for nothing (a restarted query replays the same range on the same
    down broker). So the task waits, as the sink does (issue 23 part 2):

    * ``read(offset)`` reads the range from ``offset`` and raises :class:`RangeReadError` when its own
      retries are spent; ``reached`` says where to go on (everything below it was yielded);
    * a fault whose cause is an outage (``is_outage``: the broker refuses, drops or does not answer) is
      waited for with capped backoff until ``outage_s`` (``outageTimeoutMs``) have passed without progress,
      logging a WARNING naming ``what`` at once and every ``warn_every_s``, then the read resumes at
      ``reached``; after the whole wait it fails with :class:`BrokerUnavailableError` (retriable);
    * any other retriable fault (a busy broker, data not visible yet) keeps the reader's ``retry_s``
      without progress, then its :class:`RangeReadError` is raised; other errors pass through at once.

    ``defer`` (a streaming task, :mod:`tubespark.core.deferred`): at the first outage fault, ``defer(offset)``
    is asked to hand ``[offset, end)`` to the next micro-batch; when it says yes the read ends there (its
    rows so far are the task's), otherwise it waits as above.

    ``outage_s == 0`` (or below ``retry_s``) leaves the reader's ``retry_s`` as the only bound. After an outage
    fault, other faults get ``retry_s`` from that fault on (a restarted broker answers "not ready" for a moment).
    Every wait is bounded by the deadline, and every call of ``read`` by its own socket timeouts: the read never
    stalls more than ``max(retry_s, outage_s) + retry_s`` plus one reader attempt.
    """
    offset = start
    progress = clock()  # the last item handed out (or the start)
    unreachable = progress  # the later of that and the last outage fault: a restarted broker that answers
    # "not ready" (or busy) gets the reader's whole budget from there, not what is left of it after the outage
    waiting_since: float | None = None
    warned_at: float | None = None
    tries = 0
    while True:
        try:
            for item in read(offset):
                if waiting_since is not None:
                    log.warning("%s: the broker answers again after %.0f s; reading on from offset %d", what,
                                clock() - waiting_since, offset)
                    waiting_since = warned_at = None
                tries = 0
                yield item
                progress = unreachable = clock()  # after the consumer took the item: its time is no broker's
            if waiting_since is not None:
                log.warning("%s: the broker answers again after %.0f s; the rest of the range was read", what,
                            clock() - waiting_since)
            return
        except RangeReadError as exc:
            offset = max(offset, exc.reached)
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            outage = is_outage(cause)
            now = clock()
            if outage:
                unreachable = now
                if defer is not None:
                    if defer(offset):
                        log.warning("%s: the broker is unreachable (%s: %s); this task ends at offset %d and the "
                                    "next micro-batch reads on from there once the broker is back", what,
                                    type(cause).__name__, cause, offset)
                        return
                    defer = None  # asked once: wait as before
            since = progress if outage else unreachable
            budget = max(retry_s, outage_s) if outage else retry_s
            if now - since >= budget:
                if outage and outage_s > 0:
                    raise BrokerUnavailableError(
                        f"{what}: the broker was unreachable for {now - progress:.0f} s; start it and retry "
                        f"(a task retry or a restarted query reads on from offset {offset}, below which every "
                        f"message was read), or raise outageTimeoutMs (now {outage_s * 1000:.0f}) to wait longer: "
                        f"{type(cause).__name__}: {cause}") from exc
                raise
            tries += 1
            pause = min(backoff(tries), since + budget - now)
            if waiting_since is None:
                waiting_since = now
            if warned_at is None or now - warned_at >= warn_every_s:
                warned_at = now
                log.warning("%s: waiting for the broker (%s: %s); read up to offset %d, %.0f s without progress, "
                            "failing after %.0f s (outageTimeoutMs=%.0f)", what, type(cause).__name__, cause,
                            offset, now - progress, budget, outage_s * 1000)
            sleep(pause)
            if outage:
                unreachable = clock()  # still down as far as anyone knows when the next attempt starts
