"""The lanes of cluster tests (tubespark_testbed/lanes.py): which modules go where, and the quiet turns."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from tubespark_testbed import lanes

INTEGRATION = Path(__file__).resolve().parents[2] / "integration"


def test_every_side_module_exists_and_the_quiet_modules_run_in_the_main_lane():
    modules = {p.relative_to(INTEGRATION).as_posix() for p in INTEGRATION.rglob("test_*.py")}
    assert modules >= lanes.SIDE_MODULES, sorted(lanes.SIDE_MODULES - modules)
    quiet = {m for m in modules if "PRESTART_QUIET = True" in (INTEGRATION / m).read_text()}
    assert quiet and not any(lanes.in_lane(m, lanes.SIDE) for m in quiet)  # the lock gives quiet turns to the main


def test_the_long_lane_takes_the_soak_when_three_lanes_run_and_the_main_lane_otherwise(monkeypatch):
    assert {p.relative_to(INTEGRATION).as_posix() for p in INTEGRATION.rglob("test_*.py")} >= lanes.LONG_MODULES
    assert not lanes.LONG_MODULES & lanes.SIDE_MODULES
    soak = "tubemq/test_soak.py"
    assert lanes.lane_of(soak, 3) == lanes.LONG and lanes.in_lane(soak, lanes.LONG)
    assert lanes.lane_of(soak, 2) == lanes.MAIN and not lanes.in_lane(soak, lanes.LONG, 2)
    assert lanes.lane_of("contract/test_sink.py", 3) == lanes.MAIN
    monkeypatch.delenv(lanes.COUNT_ENV, raising=False)
    assert lanes.lane_count() == 3
    monkeypatch.setenv(lanes.COUNT_ENV, "2")
    assert lanes.lane_count() == 2
    monkeypatch.setenv(lanes.COUNT_ENV, "4")
    with pytest.raises(ValueError, match="TUBESPARK_LANES='4'"):
        lanes.lane_count()


def test_the_modules_that_start_a_local_connect_server_share_one_lane():
    """Each binds Connect's default port: in two lanes they could run at once, and one's client reach the other."""
    starts = {p.relative_to(INTEGRATION).as_posix() for p in INTEGRATION.rglob("test_*.py")
              if any(s in p.read_text() for s in ('"--connect"', "spark-pipelines", ".remote("))}
    assert starts == lanes.CONNECT_SERVER_MODULES
    assert all(len({lanes.lane_of(m, count) for m in starts}) == 1 for count in (2, 3))


def test_the_lane_comes_from_the_environment_and_a_wrong_one_is_refused(monkeypatch):
    monkeypatch.delenv(lanes.LANE_ENV, raising=False)
    assert lanes.lane() is None
    monkeypatch.setenv(lanes.LANE_ENV, "side")
    assert lanes.lane() == lanes.SIDE
    monkeypatch.setenv(lanes.LANE_ENV, "left")
    with pytest.raises(ValueError, match="TUBESPARK_LANE='left'"):
        lanes.lane()


def _in_thread(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_a_quiet_test_waits_for_the_other_lanes_test_under_way_and_holds_that_lane_back(tmp_path):
    lock = tmp_path / "quiet.lock"
    quiet_lane, other_lane = lanes.QuietTurns(lock), lanes.QuietTurns(lock)
    events: list[str] = []
    other_test = other_lane.test(quiet=False)
    other_test.__enter__()

    def quiet_run() -> None:
        with quiet_lane.test(quiet=True):
            events.append("quiet test 1")
        with quiet_lane.test(quiet=True):
            events.append("quiet test 2")
        time.sleep(0.3)  # the other lane may not start a test until this lane's next test is not quiet
        with quiet_lane.test(quiet=False):
            events.append("loud test")

    quiet = _in_thread(quiet_run)
    time.sleep(0.3)
    assert events == []  # the other lane's test is still under way
    events.append("other test 1 ends")
    other_test.__exit__(None, None, None)
    time.sleep(0.1)

    def next_other_test() -> None:
        with other_lane.test(quiet=False):
            events.append("other test 2")

    other_next = _in_thread(next_other_test)
    quiet.join(5)
    other_next.join(5)
    assert events[:3] == ["other test 1 ends", "quiet test 1", "quiet test 2"]
    assert set(events[3:]) == {"loud test", "other test 2"}
    quiet_lane.close()
    other_lane.close()


def test_tests_that_are_not_quiet_run_side_by_side(tmp_path):
    lock = tmp_path / "quiet.lock"
    one, two = lanes.QuietTurns(lock), lanes.QuietTurns(lock)
    with one.test(quiet=False):
        both = _in_thread(lambda: two.test(quiet=False).__enter__())
        both.join(2)
        assert not both.is_alive()
    one.close()
    two.close()


def test_a_lane_that_dies_lets_the_other_go_on(tmp_path):
    lock = tmp_path / "quiet.lock"
    quiet_lane = lanes.QuietTurns(lock)
    quiet_lane.test(quiet=True).__enter__()
    quiet_lane.close()  # the process's end closes the files, and with them the locks
    other_lane = lanes.QuietTurns(lock)
    done = _in_thread(lambda: other_lane.test(quiet=False).__enter__())
    done.join(2)
    assert not done.is_alive()
    other_lane.close()
