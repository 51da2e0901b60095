"""Ctrl-C in a command running Spark jobs (tubespark/apps/interrupt.py), with a real SIGINT and a Spark double.

Issue 39 item 5: PySpark's handler called ``cancelAllJobs()`` from inside the signal handler while the main
thread was blocked in py4j (``reentrant call``), and Spark logged every killed task: 269 lines for one Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest

from tubespark.apps.interrupt import CtrlC


class SparkDouble:
    """What CtrlC uses of a session: log4j's root level through the context's JVM view, and cancelAllJobs,
    recorded with the thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []
        self.cancelled = threading.Event()
        self.sparkContext = self
        log4j = SimpleNamespace(Level=SimpleNamespace(OFF="OFF"),
                                core=SimpleNamespace(config=SimpleNamespace(Configurator=self)))
        self._jvm = SimpleNamespace(org=SimpleNamespace(apache=SimpleNamespace(logging=SimpleNamespace(log4j=log4j))))

    def setRootLevel(self, level: str) -> None:  # noqa: N802 - log4j's Configurator.setRootLevel
        self.calls.append((f"setRootLevel({level})", threading.current_thread() is threading.main_thread()))

    def cancelAllJobs(self) -> None:  # noqa: N802 - PySpark's name
        self.calls.append(("cancelAllJobs", threading.current_thread() is threading.main_thread()))
        self.cancelled.set()


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs on the main thread at its next bytecode


def _python_work(handler: CtrlC) -> None:
    with handler.installed():
        ctrl_c()
        pytest.fail("not interrupted")


def test_outside_a_spark_call_ctrl_c_interrupts_at_once() -> None:
    handler = CtrlC()
    with pytest.raises(KeyboardInterrupt):
        _python_work(handler)
    assert handler.requested


def test_during_a_spark_call_the_jobs_are_cancelled_from_another_thread_with_spark_s_log_off() -> None:
    spark = SparkDouble()
    handler = CtrlC()
    handler.spark = spark
    finished: list[bool] = []

    def job() -> None:
        with handler.installed(), handler.spark_call():
            ctrl_c()  # the main thread is "in py4j": not interrupted there
            finished.append(spark.cancelled.wait(5))  # the blocked call returns once its job is cancelled

    with pytest.raises(KeyboardInterrupt):
        job()
    assert finished == [True]
    assert spark.calls == [("setRootLevel(OFF)", False), ("cancelAllJobs", False)]


def test_the_cancelled_job_s_failure_is_the_interruption_and_a_second_ctrl_c_is_ignored() -> None:
    handler = CtrlC()
    handler.spark = SparkDouble()

    def failing_job() -> None:
        with handler.installed(), handler.spark_call():
            ctrl_c()
            ctrl_c()  # while stopping: ignored
            raise RuntimeError("Job 3 cancelled as part of cancellation of all jobs")

    with pytest.raises(KeyboardInterrupt) as caught:
        failing_job()
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_the_handler_before_is_restored_and_taken_back_after_a_session_replaced_it() -> None:
    before = signal.getsignal(signal.SIGINT)
    handler = CtrlC()
    with handler.installed():
        signal.signal(signal.SIGINT, signal.default_int_handler)  # what a SparkContext does when it starts
        handler.take_back()
        assert signal.getsignal(signal.SIGINT) == handler.on_signal
    assert signal.getsignal(signal.SIGINT) == before
