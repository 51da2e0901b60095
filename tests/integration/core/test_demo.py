"""The README's first command: the demo on its own embedded cluster, stopped after a few seconds.

Each test runs the demo in a process of its own, with its own cluster; most of a run is the cluster's
start-up wait. So the runs start ahead of this module in the background (tubespark_testbed/prestart.py),
two at a time (``LANES``): the Ctrl-C-while-streaming run in one lane, the short one (Ctrl-C 5 s into the
cluster's start) and then the 20-second run in the other (three at once starved the 20-second run of its
first batch on the shared 2-core machine), and each test checks its run's result.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _run_for_20_seconds() -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tubespark_testbed", "demo", "--seconds", "20"],
                          capture_output=True, text=True, timeout=400)


# --- Ctrl-C (issue 16): the demo's usual end, at any moment, prints no traceback and no ERROR ------

NOISE = re.compile(r"Traceback|\bERROR\b|Exception|\bWARN\b")
SPARK_BANNER = ('Setting default log level to "ERROR".', "WARNING: Using incubator modules")
"""Lines every PySpark start prints, whatever happens next."""


def noise(text: str) -> list[str]:
    """The lines of ``text`` that look like an error, a warning or a stack trace."""
    return [line for line in text.splitlines() if NOISE.search(line) and not line.startswith(SPARK_BANNER)]


def _interrupt_demo(when: re.Pattern[str], *, delay_s: float = 0.0, timeout_s: float = 300) -> tuple[int, str, str]:
    """Run the demo, send SIGINT to its whole process group (what Ctrl-C in a terminal does) ``delay_s``
    after a stdout line matches ``when``; return its exit code, stdout and stderr. Every wait is bounded: a demo
    that never prints the line, or ignores the SIGINT, is killed and its output is in the assertion."""
    proc = subprocess.Popen([sys.executable, "-m", "tubespark_testbed", "demo"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    out: list[str] = []
    err: list[str] = []
    lines: queue.Queue[str | None] = queue.Queue()

    def read_stdout() -> None:
        for line in proc.stdout:
            out.append(line)
            lines.put(line)
        lines.put(None)

    readers = [threading.Thread(target=read_stdout, daemon=True),
               threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout_s
    try:
        while (line := lines.get(timeout=max(0.1, deadline - time.monotonic()))) is not None:
            if when.search(line):
                time.sleep(delay_s)
                os.killpg(proc.pid, signal.SIGINT)
                break
            assert time.monotonic() < deadline, "".join(out)[-2000:]
        code = proc.wait(timeout=120)
    except (queue.Empty, subprocess.TimeoutExpired) as exc:
        raise AssertionError(f"the demo did not end in time ({exc!r}); its output:\n" + "".join(out)[-2000:]
                             + "".join(err)[-2000:]) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for reader in readers:
        reader.join(timeout=10)
    return code, "".join(out), "".join(err)


def _ctrl_c_while_the_cluster_starts() -> tuple[int, str, str]:
    # 5 s in, ZooKeeper and the master are up and the broker is starting (about 40 s in all)
    return _interrupt_demo(re.compile(r"^Starting a local TubeMQ cluster"), delay_s=5)


def _ctrl_c_while_streaming() -> tuple[int, str, str]:
    return _interrupt_demo(re.compile(r"last batch [1-9]\d* rows"))


LANES: tuple[dict[str, Callable[[], Any]], ...] = (
    {"Ctrl-C while streaming": _ctrl_c_while_streaming},
    {"Ctrl-C while the cluster starts": _ctrl_c_while_the_cluster_starts, "20 seconds": _run_for_20_seconds},
)
"""Two lanes, each running its demos one after the other. A run is mostly its cluster's start (~38 s, of which
30 s the master's hard-coded ``wait_sub``, idle), so the 20-second run starts ~10 s after the Ctrl-C one
(behind the short run): its cluster's JVMs start while the other cluster waits, and its 20 s of streaming
meet the other run's Ctrl-C and shutdown at most, not its first batch."""


@contextlib.contextmanager
def _demo_runs(_tmp: Path) -> Iterator[dict[str, concurrent.futures.Future]]:
    with contextlib.ExitStack() as pools:  # the pools wait for every run at the end
        runs: dict[str, concurrent.futures.Future] = {}
        for index, lane in enumerate(LANES):
            pool = pools.enter_context(concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"demo-{index}"))
            runs.update({name: pool.submit(run) for name, run in lane.items()})
        yield runs


PRESTART = {"demo_runs": _demo_runs}


@pytest.fixture(scope="module")
def demo_runs(prestarted) -> dict[str, concurrent.futures.Future]:
    return prestarted("demo_runs")


def test_demo_streams_events_and_shuts_down_cleanly(demo_runs):
    done = demo_runs["20 seconds"].result()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert re.search(r"group lag: \d+ messages behind \(by partition id, store\*10000\+partition: 0: \d+",
                     done.stdout), done.stdout[-2000:]
    users = [int(n) for n in re.findall(r"^\|(?:orders|clicks)\s*\|\d+\s*\|[\d.E]+\s*\|(\d+)\s*\|$", done.stdout, re.M)]
    assert users and max(users) <= 50, done.stdout[-2000:]  # 50 users: exact, not "52 of 50"
    read = int(re.search(r"Demo finished: the stream read (\d+) events", done.stdout).group(1))
    assert read > 0


def test_ctrl_c_while_the_cluster_starts_is_quiet(demo_runs):
    code, out, err = demo_runs["Ctrl-C while the cluster starts"].result()
    assert "Stopped (Ctrl-C) before the stream read anything. Everything was shut down." in out, out + err
    assert not noise(out + err), out + err
    assert code == 130


def test_ctrl_c_while_streaming_is_quiet(demo_runs):
    code, out, err = demo_runs["Ctrl-C while streaming"].result()
    assert code == 0, out[-2000:] + err[-3000:]
    assert "\nStopping ...\n" in out, out[-2000:]  # (the batch running at Ctrl-C may print after it)
    assert re.search(r"Demo finished: the stream read [1-9]\d* events\. Everything was shut down\.", out), out[-2000:]
    assert not noise(out + err), err[-3000:]
