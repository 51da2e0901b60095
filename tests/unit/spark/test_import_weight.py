"""What Spark's Python processes pay to import tubespark (docs/troubleshooting/busy-machine.md).

Spark imports a source's module in every Python process that unpickles the source (the streaming-source
process, the planner's and the executors' workers) and imports each installed ``pyspark_*`` module when a session
starts (its data source lookup). Those modules define and plan; what only a call needs is imported by the call:
``requests`` (~0.17 CPU-s, the admin HTTP calls) and ``pyarrow.compute`` (~0.1 CPU-s, one driver-side sampling).
A plain ``import tubespark`` (``tubespark.register``, ``tubespark.spark_python``) imports no Spark library at all.
Each check runs in a fresh interpreter, so what an earlier test imported does not hide a regression.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

ROOT_MUST_NOT = ("pyspark", "pyarrow", "numpy", "pandas", "requests", "urllib3", "google.protobuf")
SOURCE_MUST_NOT = ("requests", "urllib3", "pyarrow.compute", "pandas")
SOURCES = ("tubespark.tubemq.spark.source", "tubespark.tank.spark.source", "tubespark.rocketmq.spark.source")
DISCOVERY = ("pyspark_tubemq", "pyspark_tank", "pyspark_rocketmq")
"""The modules PySpark's data source lookup imports at session start, where installed."""

PROBE = """
import importlib, json, sys
found = {}
for name in sys.argv[1].split(","):
    before = set(sys.modules)
    importlib.import_module(name)
    found[name] = sorted(m for m in set(sys.modules) - before if m in sys.argv[2].split(","))
print(json.dumps(found))
"""


def heavy_imports(modules: tuple[str, ...], heavy: tuple[str, ...]) -> dict[str, list[str]]:
    """Which of ``heavy`` each of ``modules`` brings in, imported in that order in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", PROBE, ",".join(modules), ",".join(heavy)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: pulled for name, pulled in json.loads(done.stdout).items() if pulled}


def test_import_tubespark_imports_no_spark_library_and_no_client() -> None:
    assert heavy_imports(("tubespark",), ROOT_MUST_NOT) == {}


def test_the_modules_spark_imports_leave_what_only_a_call_needs_to_the_call() -> None:
    installed = tuple(name for name in DISCOVERY if importlib.util.find_spec(name) is not None)
    assert heavy_imports((*installed, *SOURCES), SOURCE_MUST_NOT) == {}
