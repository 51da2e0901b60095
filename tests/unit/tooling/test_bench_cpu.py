"""bench/cpu.py counts the CPU of a role's processes, also of those that exit during the run."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.cpu import CpuMeter, per_row

BURN = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"


def test_a_child_that_burns_and_exits_counts_for_the_workers_not_the_jvm() -> None:
    meter = CpuMeter(os.getpid(), {"broker": []})  # this process plays the Spark JVM, its children the workers
    before = meter.snapshot()
    subprocess.run([sys.executable, "-c", BURN], check=True)  # exits and is reaped before the second snapshot
    used = CpuMeter.delta(before, meter.snapshot())
    assert used["python_workers"] >= 0.35, used
    assert used["spark_jvm"] < 0.35, used


def test_a_broker_pid_is_metered_while_it_runs() -> None:
    child = subprocess.Popen([sys.executable, "-c", BURN + "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        meter = CpuMeter(None, {"tubemq": [child.pid]})
        before = meter.snapshot()
        while CpuMeter.delta(before, meter.snapshot())["tubemq"] < 0.2:
            pass
        assert per_row(CpuMeter.delta(before, meter.snapshot()), 100_000, "tubemq")["broker_us_per_row"] >= 2.0
    finally:
        child.communicate(b"")
