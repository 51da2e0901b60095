"""``tubespark backfill`` runs without Spark's console stage bar (issue 25 item 11).

The bar (``[Stage 3:=====>   (2 + 2) / 4]``) interleaved with the backfill's own progress lines. PySpark turns it
on for every session it launches itself, as for a shell, so the backfill's session turns it off. Checked on the
SparkContext the backfill builds, in a process of its own as the command runs (one JVM start, ~5 s; no cluster):
the context holds no progress bar. A test session cannot show it: the suite's shared session sets the option
itself and ``getOrCreate`` would hand the backfill that session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
