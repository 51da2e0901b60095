"""Ctrl-C in a command that runs Spark jobs: the jobs are cancelled, the command ends with one line and exit 130.

PySpark's own SIGINT handler calls ``cancelAllJobs()`` from inside the signal handler, on the main thread, which
is usually blocked in a py4j call (the job's ``save()``): py4j refuses the nested call (``reentrant call``), the
job's failure comes back as a ``Py4JJavaError``, and Spark logs every killed task: 269 lines for one Ctrl-C of
``tubespark backfill export``. :class:`CtrlC` replaces it while a command runs. Outside a Spark call it raises
``KeyboardInterrupt`` at once (planning talks to brokers from Python, every socket call bounded). During one
(:meth:`CtrlC.spark_call`) it silences Spark's log and cancels the jobs from another thread, on a py4j connection
of its own; the blocked call then returns (or fails) and :meth:`CtrlC.spark_call` raises ``KeyboardInterrupt``
there, so the command unwinds through its ``finally`` blocks (staged output removed, session stopped) and says
what was left. A second Ctrl-C while it stops is ignored: stopping half-way would leave the JVM's work behind.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

EXIT_INTERRUPTED = 130
"""What a shell reports for a command ended by SIGINT (128 + 2)."""


class CtrlC:
    """SIGINT handling for one command run; :meth:`installed` while it runs, :attr:`spark` once a session exists."""

    def __init__(self) -> None:
        self.requested = False
        self.spark: Any = None
        self._in_spark = 0
        self._cancelling: threading.Thread | None = None
        self._installed = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[CtrlC]:
        """This handler for SIGINT while the block runs (only the main thread may set one: elsewhere nothing
        changes), the one before it restored after."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, self.on_signal)
        self._installed = True
        try:
            yield self
        finally:
            self._installed = False
            signal.signal(signal.SIGINT, previous)

    def take_back(self) -> None:
        """This handler again, after something replaced it (a SparkContext installs PySpark's when it starts)."""
        if self._installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self.on_signal)

    @contextlib.contextmanager
    def spark_call(self) -> Iterator[None]:
        """Around calls into Spark (a job, a read's planning): Ctrl-C cancels the jobs rather than interrupting
        py4j; ``KeyboardInterrupt`` is raised when the call has returned or failed."""
        self._in_spark += 1
        try:
            yield
        except Exception:
            if self.requested:
                raise KeyboardInterrupt from None  # the cancelled job's failure is the interruption, not an error
            raise
        finally:
            self._in_spark -= 1
        if self.requested:
            raise KeyboardInterrupt

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """The SIGINT handler."""
        if self.requested:
            return  # already stopping
        self.requested = True
        if not self._in_spark:
            raise KeyboardInterrupt
        if self.spark is not None:  # else the session is starting: the call's end raises KeyboardInterrupt
            self._cancelling = threading.Thread(target=self._cancel, name="tubespark-cancel", daemon=True)
            self._cancelling.start()

    def _cancel(self) -> None:
        """Cancel every job, Spark's logging off first: the killed tasks' errors are the interruption itself.

        The root level goes to OFF through log4j itself, not ``SparkContext.setLogLevel``: that one also lifts
        the WARN filter Spark puts on a shell-launched session's console (its root level stays INFO), and a
        task thread that had checked INFO before the level changed then printed its line past the lifted
        filter (a CI run: "INFO Executor: Running task 0.0" after Ctrl-C, above the one line promised)."""
        try:
            context = self.spark.sparkContext
            log4j = context._jvm.org.apache.logging.log4j
            log4j.core.config.Configurator.setRootLevel(log4j.Level.OFF)
            context.cancelAllJobs()
        except Exception:  # noqa: BLE001 - the session is going anyway: stopping it ends the jobs too
            pass

    def wait_cancelled(self, timeout_s: float = 30.0) -> None:
        """Until the cancel call has been made (the session may then be stopped)."""
        if self._cancelling is not None:
            self._cancelling.join(timeout_s)


def end_gateway(timeout_s: float = 30.0) -> None:
    """After ``spark.stop()``: end the JVM PySpark launched for this process (it exits when its stdin closes), so
    nothing runs once the command has said it stopped. Nothing to do under spark-submit (the JVM is the parent)."""
    from pyspark import SparkContext

    gateway = getattr(SparkContext, "_gateway", None)
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    with contextlib.suppress(Exception):
        gateway.shutdown()  # type: ignore[union-attr]
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        proc.wait(timeout_s)
    except Exception:  # noqa: BLE001 - still running after the wait: end it
        proc.kill()
        proc.wait(5)
    SparkContext._gateway = None
    SparkContext._jvm = None
