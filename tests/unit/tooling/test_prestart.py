"""The integration suite's background starter (tubespark_testbed/prestart.py), with fake pieces: order, the
limit on pieces up at once, starting inline what the thread has not reached, errors, quiet modules, teardown."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tubespark_testbed.prestart import Prestarter


class Log:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.lock = threading.Lock()
        self.tmp: dict[str, Path] = {}

    def add(self, event: str) -> None:
        with self.lock:
            self.events.append(event)

    def piece(self, name: str, *, fail: bool = False, gate: threading.Event | None = None):
        @contextlib.contextmanager
        def factory(tmp: Path) -> Iterator[str]:
            assert tmp.is_dir()
            self.tmp[name] = tmp
            if gate is not None:
                gate.wait(5)
            self.add(f"start {name} {threading.current_thread().name}")
            if fail:
                raise RuntimeError(f"{name} failed")
            try:
                yield f"value {name}"
            finally:
                self.add(f"stop {name}")

        return factory


def wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_pieces_start_in_order_ahead_of_use_and_stop_with_their_module():
    log = Log()
    starter = Prestarter(ahead=2)
    starter.plan("session:cluster", log.piece("cluster"), None)
    for module in ("a", "b", "c"):
        starter.plan(f"{module}:x", log.piece(module), module)
    starter.start()
    wait_for(lambda: len(log.events) == 1)
    time.sleep(0.1)
    assert len(log.events) == 1  # module pieces wait for open()
    starter.open()
    wait_for(lambda: len(log.events) == 3)
    time.sleep(0.1)
    # the session piece does not count: a and b are up (each started in its own thread), c waits for a's module
    assert log.events[0].split()[1] == "cluster" and {e.split()[1] for e in log.events[1:]} == {"a", "b"}
    assert all("tubespark-prestart-" in e for e in log.events)
    assert starter.get("a:x") == "value a"
    assert starter.release("a") == []
    wait_for(lambda: any(e.startswith("start c tubespark-prestart-") for e in log.events))
    assert "stop a" in log.events and not log.tmp["a"].exists()
    assert starter.get("b:x") == "value b" and starter.get("session:cluster") == "value cluster"
    assert starter.stop() == []
    assert {"stop b", "stop c", "stop cluster"} <= set(log.events)


def test_a_session_piece_stops_after_its_last_user_and_the_other_session_pieces_stay():
    log = Log()
    starter = Prestarter()
    starter.plan("session:rocketmq", log.piece("rocketmq"), None, last_user="t.py::test_b")
    starter.plan("session:tubemq", log.piece("tubemq"), None)
    starter.start()
    assert starter.get("session:rocketmq") == "value rocketmq" and starter.get("session:tubemq") == "value tubemq"
    assert starter.release_after("t.py::test_a") == [] and "stop rocketmq" not in log.events
    assert starter.release_after("t.py::test_b") == []
    assert "stop rocketmq" in log.events and not log.tmp["rocketmq"].exists()
    assert "stop tubemq" not in log.events
    assert starter.stop() == []
    assert log.events.count("stop rocketmq") == 1 and "stop tubemq" in log.events


def test_a_piece_the_thread_has_not_reached_starts_inline():
    log = Log()
    starter = Prestarter(ahead=1)
    starter.plan("a:x", log.piece("a"), "a")
    starter.plan("b:x", log.piece("b"), "b")
    starter.open()
    starter.start()
    wait_for(lambda: len(log.events) == 1)
    assert starter.get("b:x") == "value b"  # a is held, so the thread waits: b starts here
    assert log.events[1] == f"start b {threading.current_thread().name}"
    starter.stop()


def test_light_pieces_count_half_so_the_next_cluster_starts_while_one_is_in_use():
    log = Log()
    starter = Prestarter(ahead=1)
    starter.plan("a:x", log.piece("a"), "a", light=True)
    starter.plan("b:x", log.piece("b"), "b", light=True)
    starter.plan("c:x", log.piece("c"), "c", light=True)
    starter.plan("d:x", log.piece("d"), "d")
    starter.open()
    starter.start()
    try:
        wait_for(lambda: len(log.events) == 2)
        time.sleep(0.1)
        assert {e.split()[1] for e in log.events} == {"a", "b"}  # two light pieces fill one place; c waits
        assert starter.release("a") == []
        wait_for(lambda: any(e.startswith("start c") for e in log.events))
        assert starter.release("b") == []
        time.sleep(0.1)
        assert not any(e.startswith("start d") for e in log.events)  # a heavy piece needs the whole place
        assert starter.release("c") == []
        wait_for(lambda: any(e.startswith("start d") for e in log.events))
    finally:
        starter.stop()  # a failure here must not leave its threads to the next test


def test_errors_reach_the_test_that_asks_and_unplanned_pieces_start_when_asked():
    log = Log()
    starter = Prestarter(background=False)
    starter.plan("a:x", log.piece("a", fail=True), "a")
    with pytest.raises(RuntimeError, match="a failed"):
        starter.get("a:x")
    assert starter.get("b:y", log.piece("b"), "b") == "value b"
    assert starter.release("b") == [] and log.events[-1] == "stop b"
    assert starter.get("b:y", log.piece("b"), "b") == "value b"  # asked again after its module ended: again
    starter.stop()


def test_a_waiting_test_gets_the_piece_the_thread_is_starting():
    log, gate = Log(), threading.Event()
    starter = Prestarter(ahead=1)
    starter.plan("a:x", log.piece("a", gate=gate), "a")
    starter.open()
    starter.start()
    threading.Timer(0.2, gate.set).start()
    assert starter.get("a:x") == "value a"
    assert log.events == ["start a tubespark-prestart-a:x"]
    starter.stop()


def test_nothing_starts_while_a_quiet_module_runs():
    log = Log()
    starter = Prestarter(ahead=3)
    starter.set_quiet(True)
    starter.plan("a:x", log.piece("a"), "a")
    starter.open()
    starter.start()
    time.sleep(0.3)
    assert log.events == []
    starter.set_quiet(False)
    wait_for(lambda: log.events == ["start a tubespark-prestart-a:x"])
    starter.stop()


def test_the_thread_that_started_a_piece_lives_until_the_piece_is_torn_down():
    """The piece's context manager is entered and exited in one thread, which holds it while it is up."""
    log = Log()
    starter = Prestarter(ahead=1)
    starter.plan("a:x", log.piece("a"), "a")
    starter.open()
    starter.start()
    assert starter.get("a:x") == "value a"
    time.sleep(0.1)
    (thread,) = [t for t in threading.enumerate() if t.name == "tubespark-prestart-a:x"]
    assert thread.is_alive()
    starter.release("a")
    thread.join(5)
    assert not thread.is_alive()
    starter.stop()
