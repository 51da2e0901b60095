"""``tubespark backfill`` runs without Spark's console stage bar (issue 25 item 11), and Ctrl-C ends it with one
line, exit 130, nothing running and ``--output`` as it was (issue 39 item 5).

The bar (``[Stage 3:=====>   (2 + 2) / 4]``) interleaved with the backfill's own progress lines. PySpark turns it
on for every session it launches itself, as for a shell, so the backfill's session turns it off. Checked on the
SparkContext the backfill builds, in a process of its own as the command runs (one JVM start, ~5 s; no cluster):
the context holds no progress bar. A test session cannot show it: the suite's shared session sets the option
itself and ``getOrCreate`` would hand the backfill that session.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import bodies, produce

SCRIPT = """
import json
from tubespark.apps.backfill import backfill_session
spark = backfill_session("export")
context = spark.sparkContext
print(json.dumps({"option": context.getConf().get("spark.ui.showConsoleProgress"),
                  "bar": context._jsc.sc().progressBar().isDefined()}))
spark.stop()
"""


def test_the_backfill_session_has_no_console_stage_bar() -> None:
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": "--master local[1] --conf spark.ui.enabled=false pyspark-shell"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state == {"option": "false", "bar": False}, state


def _descendants(pid: int) -> set[int]:
    """Every live process under ``pid`` (the Spark JVM, its Python workers), from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(stat.parent.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if Path(f"/proc/{pid}").exists()
            and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"}


@pytest.mark.integration
@pytest.mark.spark
def test_ctrl_c_during_an_export_says_one_line_exits_130_and_leaves_the_output_as_it_was(tubemq_cluster,
                                                                                        topic_factory, tmp_path):
    """Before: 269 lines of py4j and Java tracebacks, and a ``_temporary/`` folder in ``--output`` (``overwrite``
    had deleted the old files first). Ctrl-C (SIGINT to the process group) while the export's tasks run."""
    topic = topic_factory(partitions=1, stores=4)
    produce(tubemq_cluster.master_address, topic, bodies([b"x" * 100] * 1000))
    out = tmp_path / "export"
    out.mkdir()
    (out / "old.json").write_text('{"value": "b2xk"}\n')  # --mode overwrite: must stay until the export ends
    cli = Path(sys.executable).parent / "tubespark"
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": "--master local[1] --conf spark.ui.enabled=false pyspark-shell"}
    proc = subprocess.Popen([str(cli), "backfill", "export", "--master", tubemq_cluster.master_address,
                             "--topic", topic, "--output", str(out), "--format", "json", "--mode", "overwrite",
                             "--max-records-per-partition", "5"],  # 200 tasks: running when the line shows
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    before: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            before.append(line)
            if re.match(r"  export: \d+/\d+ tasks", line):
                break
        else:
            pytest.fail("the export ended before its tasks ran:\n" + "".join(before)[-3000:])
        spark_processes = _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        started = time.monotonic()
        after = proc.stderr.read()
        code = proc.wait(timeout=120)
        stopping_s = time.monotonic() - started
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert after.splitlines() == [f"export: interrupted (Ctrl-C): nothing written, {out} is as it was"], after
    assert code == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no staging directory left beside it
    assert sorted(p.name for p in out.iterdir()) == ["old.json"]
    assert spark_processes and not _alive(spark_processes), "Spark's JVM (or a worker) outlived the command"
    print(f"stopped {stopping_s:.1f}s after Ctrl-C")
