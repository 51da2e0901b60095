"""Set-up started in the background, ahead of the tests that need it (the integration suite's conftest).

Why: most of a TubeMQ cluster's start is waiting (the master holds a new broker and its topics back
for a fixed ~30 s), and a RocketMQ stack, a wheel build or a demo run waits on disk, network or timers as
much as on the CPU. On a 2-core CI machine that time is better spent running the tests before them. So
the integration conftest plans, from the collected tests, every piece of set-up a test module declares,
and starts them in the background, in the order the tests will need them, before the modules that need
them.
When a module's fixture asks for its piece it gets it at once, or waits for the start under way, or
(not started yet) starts it itself. Nothing is shared that was not shared before: each piece is still
made for one module (or the session), by the same code, and torn down when that module ends.

A test module declares its pieces at module level::

    @contextlib.contextmanager
    def _cluster(tmp: Path):                  # a fresh directory of its own
        with LocalCluster(settings=..., topics=[...]) as cluster:
            yield cluster

    PRESTART = {"cluster": _cluster}
    PRESTART_QUIET = True                     # optional: start nothing else while this module runs

    @pytest.fixture(scope="module")
    def cluster(prestarted):
        return prestarted("cluster")

``PRESTART_LIGHT = True`` says a module's pieces are clusters that mostly wait (a TubeMQ master holds a new
broker back for ~30 s; a JVM's start is a short burst): they count half against the limit below, so the next
module's cluster starts while this module's runs, where a demo, a wheel build or a bench run (CPU all along)
waits its turn. ``PRESTART_QUIET`` is for a module whose figures a JVM starting next to it could spoil (the soak's
recovery times). Session pieces (the shared clusters) start as soon as the tests are collected; module
pieces only once :meth:`Prestarter.open` says the tests that need them began (``./dev test`` runs the
unit tests first, and their timings stay their own). ``TUBESPARK_PRESTART=0`` starts nothing in the
background (everything starts when asked, as a plain fixture would); ``TUBESPARK_PRESTART_AHEAD``
(default 1: a run with two heavy pieces beside the tests starved timing-sensitive tests on 2 cores) is how
many modules' pieces may be up or starting at once (a light piece: half of one).

Each piece starts in a thread of its own, which lives until the piece is torn down. JVMs started there
are not armed with ``PR_SET_DEATHSIG`` (see :mod:`tubespark_testbed.procs` for why not from a thread
other than the main one); ``atexit`` and the session's teardown stop them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

Factory = Callable[[Path], contextlib.AbstractContextManager[Any]]

PENDING, STARTING, READY, FAILED, RELEASED = "pending", "starting", "ready", "failed", "released"


@dataclass(eq=False)
class Piece:
    key: str                   # "<module>:<name>", or "session:<name>"
    factory: Factory
    owner: str | None          # the module whose end releases it; None: the session's end
    last_user: str | None = None  # a session piece: the test after whose teardown nothing needs it any more
    light: bool = False        # mostly waiting (a cluster): counts half against ``ahead``
    state: str = PENDING
    value: Any = None
    error: BaseException | None = None
    started_by: str = ""       # "background" or "inline"
    seconds: float = 0.0       # how long the start took
    waited: float = 0.0        # how long the test waited for it
    tmp: Path | None = None    # the piece's own directory, removed with it
    _cm: contextlib.AbstractContextManager[Any] | None = None
    done: threading.Event = field(default_factory=threading.Event)      # started (or failed)
    released: threading.Event = field(default_factory=threading.Event)  # torn down: its thread may end


class Prestarter:
    """Starts planned pieces in the background, in order, at most ``ahead`` module pieces up at once."""

    def __init__(self, *, background: bool = True, ahead: int = 2) -> None:
        self._background = background
        self._ahead = max(1, ahead)
        self._pieces: dict[str, Piece] = {}
        self._order: list[Piece] = []
        self._cond = threading.Condition()
        self._quiet = False
        self._modules_open = False  # module pieces wait for the first test that needs the suite (see open)
        self._stopping = False
        self._scheduler: threading.Thread | None = None
        self._threads: list[threading.Thread] = []

    # --- planning (main thread, before the first test) ---------------------------------------------

    def plan(self, key: str, factory: Factory, owner: str | None, *, light: bool = False,
             last_user: str | None = None) -> None:
        if key not in self._pieces:
            piece = Piece(key, factory, owner, last_user, light)
            self._pieces[key] = piece
            self._order.append(piece)

    def start(self) -> None:
        if self._background and self._order and self._scheduler is None:
            self._scheduler = threading.Thread(target=self._schedule, name="tubespark-prestart", daemon=True)
            self._scheduler.start()

    # --- the tests' side (main thread) ---------------------------------------------------------------

    def get(self, key: str, factory: Factory | None = None, owner: str | None = None) -> Any:
        """The started piece ``key``: ready now, after the background start under way, or started here."""
        with self._cond:
            piece = self._pieces.get(key)
            if piece is None or piece.state == RELEASED:  # not planned, or asked again after its module ended
                if factory is None and piece is None:
                    raise KeyError(f"nothing planned as {key!r}")
                piece = Piece(key, factory or piece.factory,  # type: ignore[union-attr]
                              owner if piece is None else piece.owner)
                self._pieces[key] = piece
            mine = piece.state == PENDING
            if mine:
                piece.state = STARTING
        if mine:
            self._enter(piece, "inline")
        else:
            t0 = time.monotonic()
            piece.done.wait()
            piece.waited = time.monotonic() - t0
        if piece.error is not None:
            raise piece.error
        return piece.value

    def set_quiet(self, quiet: bool) -> None:
        with self._cond:
            self._quiet = quiet
            self._cond.notify_all()

    def open(self) -> None:
        """Let module pieces start too (until now only session pieces did: a run that starts with other
        tests, e.g. the unit tests, keeps their timings to itself)."""
        with self._cond:
            self._modules_open = True
            self._cond.notify_all()

    def release(self, owner: str | None, *, everything: bool = False) -> list[str]:
        """Tear down the pieces of module ``owner`` (all pieces: ``everything``); the errors, as text."""
        return self._release(lambda piece: everything or (piece.owner is not None and piece.owner == owner))

    def release_after(self, test: str) -> list[str]:
        """Tear down the session pieces whose last user is ``test`` (a node id): a server idles on CPU the
        tests after it need (an idle RocketMQ broker costs some 10% of a core)."""
        return self._release(lambda piece: piece.last_user == test)

    def _release(self, chosen: Callable[[Piece], bool]) -> list[str]:
        errors: list[str] = []
        for piece in list(self._pieces.values()):
            if not chosen(piece):
                continue
            with self._cond:
                if piece.state in (PENDING, RELEASED):  # never started, or already gone: nothing to tear down
                    piece.state = RELEASED
                    piece.done.set()
                    piece.released.set()
                    self._cond.notify_all()
                    continue
            piece.done.wait()  # a start under way finishes first
            with self._cond:
                cm, piece._cm = piece._cm, None
                was = piece.state
                piece.state = RELEASED
            if cm is not None and was == READY:
                try:
                    cm.__exit__(None, None, None)
                except Exception as exc:  # noqa: BLE001 - reported by the caller, the rest still stops
                    errors.append(f"{piece.key}: {type(exc).__name__}: {exc}")
            if piece.tmp is not None:
                shutil.rmtree(piece.tmp, ignore_errors=True)
            with self._cond:
                piece.released.set()
                self._cond.notify_all()
        return errors

    def stop(self) -> list[str]:
        """Start nothing more, tear everything down (a start under way finishes first), end the threads."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        errors = self.release(None, everything=True)
        for thread in [self._scheduler, *self._threads]:
            if thread is not None:
                thread.join(timeout=60)
        return errors

    def report(self) -> list[str]:
        return [f"{p.key}: {p.state}, started {p.started_by or '-'} in {p.seconds:.0f} s, "
                f"a test waited {p.waited:.0f} s for it" for p in self._pieces.values() if p.started_by]

    # --- the background ------------------------------------------------------------------------------

    def _held(self) -> float:
        return sum(_weight(p) for p in self._pieces.values() if p.owner is not None and p.state in (STARTING, READY))

    def _schedule(self) -> None:
        for piece in self._order:
            with self._cond:
                while not self._stopping and piece.state == PENDING and (self._quiet or (
                        piece.owner is not None and (not self._modules_open
                                                     or self._held() + _weight(piece) > self._ahead))):
                    self._cond.wait(timeout=1.0)
                if self._stopping:
                    return
                if piece.state != PENDING:
                    continue
                piece.state = STARTING
                thread = threading.Thread(target=self._start_and_hold, args=(piece,), daemon=True,
                                          name=f"tubespark-prestart-{piece.key}")
                self._threads.append(thread)
            thread.start()

    def _start_and_hold(self, piece: Piece) -> None:
        self._enter(piece, "background")
        piece.released.wait()

    def _enter(self, piece: Piece, by: str) -> None:
        piece.started_by = by
        t0 = time.monotonic()
        try:
            piece.tmp = Path(tempfile.mkdtemp(prefix="tubespark-" + re.sub(r"\W", "_", piece.key) + "-"))
            cm = piece.factory(piece.tmp)
            value = cm.__enter__()
        except BaseException as exc:  # noqa: BLE001 - handed to the test that asks for the piece
            with self._cond:
                piece.error, piece.state = exc, FAILED
        else:
            with self._cond:
                piece.value, piece._cm, piece.state = value, cm, READY
        piece.seconds = time.monotonic() - t0
        with self._cond:
            piece.done.set()
            self._cond.notify_all()
        log.info("prestart %s: %s by %s in %.1f s", piece.key, piece.state, by, piece.seconds)


def _weight(piece: Piece) -> float:
    return 0.5 if piece.light else 1.0


def enabled() -> bool:
    return os.environ.get("TUBESPARK_PRESTART", "1").strip().lower() not in ("0", "false", "no")


def ahead() -> int:
    return int(os.environ.get("TUBESPARK_PRESTART_AHEAD", "1"))
