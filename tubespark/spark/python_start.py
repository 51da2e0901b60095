"""Spark's Python processes start fast enough for a busy machine: a pip-installed PySpark imported with bytecode.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the ``PYTHONPATH`` of every Python process it starts
(``PythonUtils.sparkPythonPath``): the daemon of each worker module and one process per streaming Python source
(``PythonStreamingSourceRunner``, started without a daemon). Python never writes bytecode for modules it imports
from a zip, so each such process compiles PySpark's modules again: 1.15-1.7 CPU-seconds to import the streaming
source runner from the zip against 0.45-0.58 from the installed package (a 2-core Xeon). Spark gives a streaming
source's process a fixed 10 s to do that and connect back (``PythonWorkerFactory.createSimpleWorker``); on a
loaded machine it did not always make it: ``Python worker failed to connect back``
(docs/troubleshooting/busy-machine.md).

A pip-installed PySpark is its own ``SPARK_HOME`` (``site-packages/pyspark``): the zip holds the same files as the
package beside it. :func:`spark_python` gives the path of a small shell script that drops that zip from
``PYTHONPATH`` when ``$SPARK_HOME/__init__.py`` exists (the pip layout) and runs the interpreter it was made
for, so the same PySpark is imported from the package, with its ``__pycache__``. A Spark distribution
(``SPARK_HOME`` without ``__init__.py``) keeps its zip: nothing changes what Spark computes. Point
``PYSPARK_PYTHON`` at it before the session starts: :func:`use_spark_python` does that unless the user set
``PYSPARK_PYTHON`` (never overridden) or ``TUBESPARK_SPARK_PYTHON=default`` turns it off.

The script is written once per interpreter (its name carries a hash of its text) under the user's cache
directory; it is a POSIX shell script, so elsewhere (Windows) the interpreter itself is the answer.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import tempfile
from pathlib import Path

ENV = "TUBESPARK_SPARK_PYTHON"
"""``default``: leave ``PYSPARK_PYTHON`` alone (:func:`use_spark_python` sets nothing)."""

PREFIX = "spark-python-"
"""The scripts' file-name prefix: a script is never wrapped again."""

_SCRIPT = """#!/bin/sh
# Written by tubespark (tubespark/spark/python_start.py): Spark's Python process, importing a pip-installed
# PySpark from its package (with bytecode) rather than from $SPARK_HOME/python/lib/pyspark.zip (compiled again
# by every process). A Spark distribution (no $SPARK_HOME/__init__.py) keeps its zip.
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
    """The script's text for the interpreter ``python``."""
    return _SCRIPT % {"python": shlex.quote(python)}


def cache_directory() -> Path:
    """Where the scripts go: ``$XDG_CACHE_HOME/tubespark`` (``~/.cache/tubespark``), or the temp dir when the home
    directory cannot be written (a service account)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    preferred = Path(base) / "tubespark"
    try:
        preferred.mkdir(parents=True, exist_ok=True)
        if os.access(preferred, os.W_OK):
            return preferred
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / f"tubespark-{os.getuid()}"


def write_script(python: str, directory: Path | None = None) -> Path:
    """The script for ``python`` in ``directory`` (:func:`cache_directory` by default), written once per content."""
    text = script_text(python)
    where = directory or cache_directory()
    path = where / f"{PREFIX}{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    if not path.is_file() or path.read_text() != text:
        where.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, path)  # atomic: two processes may write it at once
    return path


def spark_python(python: str | None = None, directory: Path | None = None) -> str:
    """What to put in ``PYSPARK_PYTHON`` so Spark's Python processes start from a pip-installed PySpark's
    bytecode: the script for ``python`` (this interpreter by default). ``python`` itself where no POSIX shell
    runs the script (Windows), or when it already is such a script."""
    target = python or sys.executable
    if os.name != "posix" or Path(target).name.startswith(PREFIX):
        return target
    return str(write_script(target, directory))


def use_spark_python(directory: Path | None = None) -> str | None:
    """Set ``PYSPARK_PYTHON`` to :func:`spark_python` unless the user set it (never overridden) or
    ``TUBESPARK_SPARK_PYTHON=default``; the value set, or None when nothing was set. Call it before the Spark
    session starts: PySpark reads ``PYSPARK_PYTHON`` when it creates the SparkContext."""
    if os.environ.get("PYSPARK_PYTHON") or os.environ.get(ENV, "").strip().lower() == "default":
        return None
    os.environ["PYSPARK_PYTHON"] = spark_python(directory=directory)
    return os.environ["PYSPARK_PYTHON"]


if __name__ == "__main__":  # export PYSPARK_PYTHON=$(python -m tubespark.spark.python_start)
    print(spark_python(sys.argv[1] if len(sys.argv) > 1 else None))
