"""The benchmark harness (``python -m bench``) end to end at smoke size, with the cheap cases only.

Not a timed test: it proves the command runs against a real cluster and real Spark and writes the JSON
the Performance page (docs/performance/index.md) describes (expected keys, positive rates, the broker's JVM flags).
The bench starts its own TubeMQ cluster (its broker on Java's default flags), so this costs ~40 s of
cluster start-up plus a minute of Spark; it runs in the background from the start of the integration
tests (in ``./dev test``'s long lane, beside the rolling soak: tubespark_testbed/lanes.py), and the test
waits for it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[3]
CASES = ("tubespark_batch", "tubespark_batch_pure", "ceiling", "kafka_batch", "kafka_batch_tuned", "tubespark_sink",
         "kafka_sink", "java_consume", "java_produce")


@dataclass(frozen=True)
class Run:
    proc: concurrent.futures.Future  # the finished subprocess.CompletedProcess
    out: Path
    chart: Path


@contextlib.contextmanager
def _bench_run(tmp: Path) -> Iterator[Run]:
    """The bench at smoke size, started ahead of the test in the background (tubespark_testbed/prestart.py):
    most of it is its own cluster's start-up wait."""
    out, chart = tmp / "smoke.json", tmp / "smoke.png"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "testbed"), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "bench", "--size", "smoke", "--cores", "2", "--sizes", "100",
           "--cases", ",".join(CASES), "--repeats", "2", "--warmup", "0", "--out", str(out), "--chart", str(chart)]
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bench-smoke") as pool:
        yield Run(pool.submit(subprocess.run, cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1100),
                  out, chart)


PRESTART = {"bench": _bench_run}


@pytest.mark.timeout(1200)
def test_bench_smoke_writes_the_expected_json(prestarted):
    run = prestarted("bench")
    out, chart = run.out, run.chart
    proc = run.proc.result()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "ratios of medians" in proc.stdout

    doc = json.loads(out.read_text())
    assert {"profile", "config", "host", "spark", "tubemq", "kafka", "results", "ratios", "latency", "memory",
            "errors", "durations"} <= doc.keys()
    assert doc["profile"] == "smoke" and doc["errors"] == []
    assert doc["tubemq"]["broker_jvm"] == "default"
    assert not any("TieredStopAtLevel" in flag for flag in doc["tubemq"]["broker_jvm_flags"])
    assert any("TieredStopAtLevel" in flag for flag in doc["tubemq"]["testbed_broker_jvm_flags"])

    by_case = {r["case"]: r for r in doc["results"]}
    assert set(by_case) == set(CASES)
    for name, record in by_case.items():
        assert {"kind", "system", "size", "cores", "rows", "median_seconds", "rows_per_s", "mb_per_s",
                "rows_per_s_per_core", "runs", "short_runs", "error"} <= record.keys(), name
        assert record["error"] is None, (name, record["error"])
        assert len(record["runs"]) == 2, name
        assert record["rows_per_s"] > 0 and record["mb_per_s"] > 0, name
        assert record["size"] == 100 and record["cores"] == 2
        if record["uses_spark"]:
            assert record["rows_per_s_per_core"] == pytest.approx(record["rows_per_s"] / 2, rel=1e-3)
    assert by_case["tubespark_batch"]["rows"] == doc["config"]["read_rows"]["100"]

    # what a figure must say of itself (issue 24): commit, CPU model and cores, JVM flags, the hot path; and CPU per
    # row per role beside rows/s (the broker's for the cases that have one)
    assert doc["commit"] not in ("", "?") and doc["host"]["cpu_model"] not in ("", "?") and doc["host"]["cpus"] >= 1
    assert doc["spark"]["jvm_flags"] and doc["hot_path"]["tubespark_batch"].startswith(("compiled", "pure-python"))
    for name in ("tubespark_batch", "tubespark_batch_pure", "kafka_batch", "kafka_batch_tuned", "tubespark_sink"):
        cpu = by_case[name]["cpu_us_per_row"]
        assert cpu["spark_side_us_per_row"] > 0 and cpu["broker_us_per_row"] > 0, (name, cpu)
        assert all("cpu_s" in run for run in by_case[name]["runs"]), name
    assert by_case["tubespark_batch_pure"]["rows"] == by_case["tubespark_batch"]["rows"]

    names = {r["name"] for r in doc["ratios"]}
    assert {"tubespark_batch/ceiling", "tubespark_batch/java_consume", "tubespark_sink/java_produce",
            "tubespark_batch/kafka_batch_tuned", "tubespark_batch/tubespark_batch_pure",
            "cpu tubespark_batch/kafka_batch"} <= names
    assert all(r["value"] > 0 for r in doc["ratios"])
    assert chart.stat().st_size > 0
