"""freeze_worker_heap: once per process, only inside a Spark task, and never what later tasks leave behind."""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Iterator

import pytest
from pyspark import TaskContext

from tubespark.spark import worker_heap
from tubespark.spark.worker_heap import NO_FREEZE_ENV, freeze_worker_heap


@pytest.fixture
def in_task(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As inside a Spark task (a TaskContext is set); the process's heap unfrozen and forgotten afterwards."""
    monkeypatch.delenv(NO_FREEZE_ENV, raising=False)
    worker_heap._frozen.pop(os.getpid(), None)
    TaskContext._setTaskContext(TaskContext())
    try:
        yield
    finally:
        TaskContext._setTaskContext(None)
        gc.unfreeze()
        worker_heap._frozen.pop(os.getpid(), None)


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_outside_a_task_nothing_is_frozen() -> None:
    assert TaskContext.get() is None
    before = gc.get_freeze_count()
    assert freeze_worker_heap() is False
    assert gc.get_freeze_count() == before


def test_the_first_task_freezes_and_later_ones_do_not(in_task: None) -> None:
    assert freeze_worker_heap() is True
    frozen = gc.get_freeze_count()
    assert frozen > 1000  # the modules, classes and functions this process holds
    assert freeze_worker_heap() is False
    assert gc.get_freeze_count() == frozen


def test_what_a_task_makes_after_the_freeze_is_still_collected(in_task: None) -> None:
    freeze_worker_heap()
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a cycle only the collector frees
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None


def test_the_switch_turns_it_off(in_task: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NO_FREEZE_ENV, "1")
    before = gc.get_freeze_count()
    assert freeze_worker_heap() is False
    assert gc.get_freeze_count() == before


def test_a_later_task_freezes_again_what_the_first_one_loaded(in_task: None) -> None:
    """The first task loads modules after its freeze (pyarrow imports pandas on its first conversion): a later
    task finds them young and freezes them too, so the collection after each task does not walk them."""
    assert freeze_worker_heap() is True
    loaded = [[k] for k in range(worker_heap.REFREEZE_ABOVE + 100)]  # long-lived objects made after the freeze
    assert freeze_worker_heap() is True
    assert not any(o is loaded for o in gc.get_objects())  # frozen now: no collection walks them
    assert freeze_worker_heap() is False  # and nothing more to freeze


def test_switched_off_no_later_task_freezes_either(in_task: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NO_FREEZE_ENV, "1")
    assert freeze_worker_heap() is False
    loaded = [[k] for k in range(worker_heap.REFREEZE_ABOVE + 100)]
    assert freeze_worker_heap() is False and loaded
    assert gc.get_freeze_count() == 0


def test_a_process_freezes_a_bounded_number_of_times(in_task: None) -> None:
    """Each refreeze keeps the setup of the task that makes it: a workload bringing thousands of new objects to
    every task stops being frozen after MAX_FREEZES (it is collected as before instead of kept for good)."""
    held = []
    froze = []
    for _ in range(worker_heap.MAX_FREEZES + 2):
        held.append([[k] for k in range(worker_heap.REFREEZE_ABOVE + 100)])
        froze.append(freeze_worker_heap())
    assert froze == [True] * worker_heap.MAX_FREEZES + [False, False]
    assert any(o is held[-1] for o in gc.get_objects())  # the last ones stay young: collected as before
