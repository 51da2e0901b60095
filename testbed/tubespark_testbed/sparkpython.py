"""The test bed's Spark Python processes start through tubespark's start-up script (tubespark/spark/python_start.py).

The script (a ``PYSPARK_PYTHON`` that imports a pip-installed PySpark from its package, with bytecode, instead of
compiling ``pyspark.zip`` again in every process Spark starts) is the product's; the test bed only decides where
it goes (the artifacts cache) and, unlike a user's session, wraps the interpreter a test's environment named in
``PYSPARK_PYTHON`` too (the suite's runner sets it to the interpreter itself). ``TUBESPARK_SPARK_PYTHON=default``
leaves ``PYSPARK_PYTHON`` alone. A test that sets ``PYSPARK_PYTHON`` itself (a venv's interpreter, a standalone
cluster's) runs without the script.
"""

from __future__ import annotations

import os
from pathlib import Path

from tubespark.spark.python_start import ENV, spark_python, write_script
from tubespark_testbed.artifacts import cache_root

__all__ = ["ENV", "apply_to_environment", "write_script"]


def apply_to_environment(directory: Path | None = None) -> str | None:
    """Point ``PYSPARK_PYTHON`` at the script of the interpreter it named (or this one); the value set, or None
    (turned off). Applying it twice keeps the first script."""
    if os.environ.get(ENV, "").strip().lower() == "default":
        return None
    os.environ["PYSPARK_PYTHON"] = spark_python(os.environ.get("PYSPARK_PYTHON") or None, directory or cache_root())
    return os.environ["PYSPARK_PYTHON"]
