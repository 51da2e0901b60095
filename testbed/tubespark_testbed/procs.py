"""Child JVM processes that die with us.

Each JVM runs in its own session/process group so a signal reaches the whole tree, and, on Linux,
with ``PR_SET_DEATHSIG`` so the kernel kills it if the Python process dies without running any cleanup
(SIGKILL, OOM killer). ``atexit`` covers the ordinary exits; the deathsig covers the rest.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tubespark.core.retry import RetryPolicy, poll
from tubespark_testbed.errors import ClusterError

_PR_SET_DEATHSIG = 1


def _deathsig_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` arming PR_SET_DEATHSIG, or None where it cannot be used.

    The kernel sends the signal when the *thread* that forked exits, not the process. Forking from a
    short-lived worker thread would therefore kill the JVM when that thread ends, so we only arm it
    when starting from the main thread and rely on atexit otherwise. (Never from another thread, however
    long it lives: a fork with a ``preexec_fn`` runs Python's after-fork hooks in the child, which drop
    every other thread's state there, the main thread's included; a py4j connection held in its
    thread-local is then finalized in the child, whose ``shutdown()`` of the shared socket breaks the
    parent's Spark gateway connection. The next call opens a new one, on a JVM thread without the active
    session, and a write to a Python data source fails with DATA_SOURCE_NOT_FOUND.)
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    prctl = libc.prctl

    def arm() -> None:
        prctl(_PR_SET_DEATHSIG, signal.SIGKILL, 0, 0, 0)

    return arm


def tail(path: Path, lines: int = 40) -> str:
    """Last ``lines`` lines of a log file, or a note that it is missing; for error messages.

    Reads the file's end in growing chunks (64 KiB first) until it holds ``lines`` lines or the whole file,
    so a long-running server's log still yields as many lines as asked.
    """
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            chunk = 64 * 1024
            while True:
                fh.seek(max(0, size - chunk))
                data = fh.read()
                if chunk >= size or data.count(b"\n") > lines:
                    break
                chunk *= 4
            text = data.decode(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


class JavaProcess:
    """One JVM of the cluster: started with stdout/stderr in ``<log_dir>/<name>.out``."""

    def __init__(self, name: str, argv: list[str], *, log_dir: Path, cwd: Path, env: dict[str, str],
                 secrets: tuple[str, ...] = ()) -> None:
        self.name = name
        self._secrets = secrets  # masked in diagnostics(): the server may log them
        self.argv = argv
        self.out_path = log_dir / f"{name}.out"
        self.log_path = log_dir / f"{name}.log"
        self.cwd = cwd
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    def start(self) -> None:
        with self.out_path.open("ab") as out:
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self.cwd,
                    env=self.env,
                    start_new_session=True,
                    preexec_fn=_deathsig_preexec(),  # noqa: PLW1509 - armed only from the main thread
                )
            except OSError as exc:
                raise ClusterError(f"cannot start {self.name}: {exc} ({self.argv[0]})") from exc
        self.paused = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def diagnostics(self, lines: int = 40) -> str:
        """Tails of the process's stdout and log4j file, whichever say something."""
        parts = [f"--- {self.out_path.name} ---\n{tail(self.out_path, lines)}"]
        if self.log_path.exists():
            parts.append(f"--- {self.log_path.name} ---\n{tail(self.log_path, lines)}")
        text = "\n".join(parts)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def check_alive(self) -> None:
        """Raise :class:`ClusterError` with the log tail if the JVM has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise ClusterError(f"{self.name} exited with code {self.proc.returncode}\n{self.diagnostics()}")

    def pause(self) -> None:
        """SIGSTOP the JVM: a stall, not a crash (its sockets stay open; nothing answers until :meth:`resume`)."""
        if not self.alive():
            raise ClusterError(f"{self.name} is not running, so it cannot be paused")
        _signal_group(self.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        self.paused = True

    def resume(self) -> None:
        """SIGCONT a paused JVM."""
        if self.alive():
            _signal_group(self.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        self.paused = False

    def kill(self) -> None:
        """SIGKILL the JVM at once, as a crash or ``kill -9`` would (no shutdown hooks, no flush)."""
        self.stop(grace_s=0.0)

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after ``grace_s`` (0: SIGKILL at once)."""
        proc = self.proc
        if proc is None:
            return
        # Signal the group only while the leader is unreaped: afterwards its pid (= pgid) may be reused.
        # A JVM forks no children, so nothing of ours is left in the group once the leader is gone.
        if proc.poll() is None:
            if self.paused:  # a stopped process would only act on SIGTERM once continued
                self.resume()
            if grace_s > 0:
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=grace_s)
                    return
                except subprocess.TimeoutExpired:
                    pass
            _signal_group(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired as exc:
                raise ClusterError(f"{self.name} (pid {proc.pid}) did not die after SIGKILL") from exc


def stop_all(procs: list[JavaProcess], grace_s: float) -> list[str]:
    """Stop several JVMs at once: SIGTERM to all, then one shared ``grace_s`` before SIGKILL of the rest.

    What stopping them one after the other would cost ``grace_s`` each (a JVM busy in its shutdown
    hooks), this costs once. Returns the errors of those that would not die, as text.
    """
    live = [p for p in procs if p.proc is not None and p.proc.poll() is None]
    for p in live:
        assert p.proc is not None
        _signal_group(p.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in live:
        assert p.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    errors = []
    for p in live:
        try:
            p.stop(grace_s=0.0)  # SIGKILL whatever is left
        except ClusterError as exc:
            errors.append(str(exc))
    return errors


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def wait_until(
    what: str,
    probe: Callable[[], bool],
    *,
    timeout_s: float,
    interval_s: float = 0.25,
    watch: list[JavaProcess] | None = None,
    on_timeout: Callable[[], str] | None = None,
) -> None:
    """Poll ``probe`` every ``interval_s`` until it returns true; fail fast if a watched JVM dies.

    Raises :class:`ClusterError` on timeout, with ``on_timeout()``'s diagnostics: a cluster that does
    not come up must say why. The steady interval (no growing backoff) keeps start-up fast.
    """

    def alive_and_ready() -> bool:
        for p in watch or []:
            p.check_alive()
        return probe()

    policy = RetryPolicy(timeout_s=timeout_s, backoff_s=interval_s, max_backoff_s=interval_s, log_level=logging.DEBUG)
    if not poll(alive_and_ready, policy, what=f"waiting for {what}"):
        detail = on_timeout() if on_timeout else ""
        raise ClusterError(f"timed out after {timeout_s:.0f}s waiting for {what}\n{detail}".rstrip())
