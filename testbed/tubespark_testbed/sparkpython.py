"""Start-up speed of the Python processes Spark starts for the tests: PySpark imported with its bytecode cache.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the ``PYTHONPATH`` of every Python process it starts
(``PythonUtils.sparkPythonPath``): the daemon of each worker module (the data source planner's, the workers'),
and one process per streaming Python source (``PythonStreamingSourceRunner``, not through a daemon). Python
never writes bytecode for modules it imports from a zip, so each such process compiles PySpark's modules again:
about 1.2 CPU-seconds to import ``pyspark.sql.streaming.python_streaming_source_runner`` from the zip against
0.45 from the installed package, measured on the 2026-11-28 2-core Intel Xeon. A streaming source's process must
do that and connect back within Spark's fixed 10 s (``PythonWorkerFactory.createSimpleWorker``), which a loaded
2-core machine did not always give it.

A pip-installed PySpark is its own ``SPARK_HOME`` (``site-packages/pyspark``): the zip holds the same files as the
package beside it. :func:`apply_to_environment` points ``PYSPARK_PYTHON`` at a small shell script that drops that
zip from ``PYTHONPATH`` when ``$SPARK_HOME/__init__.py`` exists (the pip layout) and runs the interpreter
``PYSPARK_PYTHON`` named before (this one by default), so the same PySpark is imported from the package, with
its ``__pycache__``. A Spark distribution (``SPARK_HOME`` without ``__init__.py``) keeps its zip. Nothing changes
what Spark computes; ``TUBESPARK_SPARK_PYTHON=default`` leaves ``PYSPARK_PYTHON`` alone. A test that sets
``PYSPARK_PYTHON`` itself (a venv's interpreter, a standalone cluster's) runs without the script.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from pathlib import Path

from tubespark_testbed.artifacts import cache_root

ENV = "TUBESPARK_SPARK_PYTHON"

_SCRIPT = """#!/bin/sh
# Written by tubespark_testbed/sparkpython.py: Spark's Python process, importing a pip-installed PySpark from its
# package (with bytecode) rather than from $SPARK_HOME/python/lib/pyspark.zip (compiled again by every process).
if [ -n "$SPARK_HOME" ] && [ -f "$SPARK_HOME/__init__.py" ]; then
  set -f
  kept=""
  old_ifs=$IFS
  IFS=:
  for entry in $PYTHONPATH; do
    case "$entry" in
      */python/lib/pyspark.zip) ;;
      *) kept="${kept:+$kept:}$entry" ;;
    esac
  done
  IFS=$old_ifs
  set +f
  PYTHONPATH=$kept
  export PYTHONPATH
fi
exec %(python)s "$@"
"""


def script_text(python: str) -> str:
    """The wrapper's text for the interpreter ``python``."""
    return _SCRIPT % {"python": shlex.quote(python)}


def write_script(python: str, directory: Path | None = None) -> Path:
    """The wrapper for ``python`` in ``directory`` (the artifacts cache by default), written once per content."""
    text = script_text(python)
    where = directory or cache_root()
    path = where / f"spark-python-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    if not path.is_file() or path.read_text() != text:
        where.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, path)  # atomic: two lanes may write it at once
    return path


def apply_to_environment(directory: Path | None = None) -> str | None:
    """Point ``PYSPARK_PYTHON`` at the wrapper of the interpreter it named (or this one); the value set, or None
    (turned off). Applying it twice keeps the first wrapper."""
    if os.environ.get(ENV, "").strip().lower() == "default":
        return None
    current = os.environ.get("PYSPARK_PYTHON") or sys.executable
    if Path(current).name.startswith("spark-python-"):
        return current
    os.environ["PYSPARK_PYTHON"] = str(write_script(current, directory))
    return os.environ["PYSPARK_PYTHON"]
