"""The start gate of ``./dev test``: the cluster tests' session starts beside the unit tests (so its clusters come up
meanwhile) and runs no test until the unit tests have ended (``TUBESPARK_START_GATE``, tests/integration/conftest.py).

Each case runs a real pytest session over one integration module with ``--collect-only`` (which plans but starts no
cluster), in a subprocess whose environment is its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MODULE = "tests/integration/tubemq/test_tls.py"
COLLECT = [sys.executable, "-m", "pytest", MODULE, "--collect-only", "-q", "-p", "no:cacheprovider"]


def _env(gate: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    return {**env, "TUBESPARK_START_GATE": str(gate), "TUBESPARK_SPARK_JVM": "default"}


def _collect(gate: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(COLLECT, cwd=ROOT, env=_env(gate), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def test_the_cluster_tests_wait_for_the_gate_then_run(tmp_path):
    gate = tmp_path / "unit-tests-ended"
    run = _collect(gate)
    try:
        time.sleep(6.0)  # its start and collection take ~3 s here
        assert run.poll() is None, f"the session did not wait for the gate:\n{run.communicate()[0]}"
        gate.touch()
        out, _ = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 0, out
    assert "tests collected" in out or "test collected" in out, out


def test_a_gate_whose_directory_is_removed_ends_the_run_instead_of_waiting_for_ever(tmp_path):
    work = tmp_path / "work"  # ./dev test removes its gate's directory when it exits, however it exits
    work.mkdir()
    run = _collect(work / "unit-tests-ended")
    try:
        time.sleep(6.0)
        assert run.poll() is None
        work.rmdir()
        out, _ = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 3 and "ended before it opened" in out, out


def test_a_gate_whose_parent_died_ends_the_run_instead_of_waiting_for_ever(tmp_path):
    # a parent that starts the session and is then killed, as a ./dev test killed with SIGKILL would be
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen({COLLECT!r}, stdout=open(sys.argv[1], 'w'), stderr=subprocess.STDOUT)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n"), str(tmp_path / "out.txt")],
        cwd=ROOT, env=_env(tmp_path / "never-created"), stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
        time.sleep(6.0)
        assert _alive(child), (tmp_path / "out.txt").read_text()
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 60
    try:
        while _alive(child):
            assert time.monotonic() < deadline, "the session still waits for a gate nobody will open"
            time.sleep(0.2)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
    assert "ended before it opened" in (tmp_path / "out.txt").read_text()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (an exited child of a dead parent is a zombie until init reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False
