"""tubespark: Apache Spark <-> Apache InLong TubeMQ, TANK and RocketMQ, speaking each broker's protocol in Python
(TubeMQ's hot wire paths have a compiled C twin, with a complete pure-Python twin where it is not built)."""

from __future__ import annotations

from tubespark.apps.registry import register
from tubespark.errors import TubeSparkError, typed_errors, unwrap
from tubespark.version import __version__

__all__ = ["TubeSparkError", "__version__", "package_zip", "register", "spark_python", "typed_errors", "unwrap",
           "use_spark_python"]


def package_zip(directory: str | None = None) -> str:
    """Write this tubespark as a zip (in ``directory``, default the temp dir) and return its path.

    For shipping the code instead of installing it: ``spark.addArtifacts(tubespark.package_zip(),
    pyfile=True)`` on Spark Connect, ``--py-files`` with spark-submit. Same code, same file name.
    """
    from tubespark.spark.connect import write_package_zip

    return write_package_zip(directory)


def spark_python(python: str | None = None) -> str:
    """What to put in ``PYSPARK_PYTHON`` so Spark's Python processes start in time on a busy machine.

    Spark's streaming-source process must start and connect back within a fixed 10 s; with a pip-installed
    PySpark it compiles PySpark from ``pyspark.zip`` every time (1.15-1.7 CPU-s) unless started through this
    script, which imports the installed package's bytecode instead (0.45-0.58). ``python``: the interpreter to run
    (this one by default). ``os.environ.setdefault("PYSPARK_PYTHON", tubespark.spark_python())`` before the
    session starts; see docs/troubleshooting/busy-machine.md.
    """
    from tubespark.spark.python_start import spark_python as script

    return script(python)


def use_spark_python() -> str | None:
    """Set ``PYSPARK_PYTHON`` to :func:`spark_python` unless it is set already (a user's choice is never
    overridden) or ``TUBESPARK_SPARK_PYTHON=default``; the value set, or None. Call before the session starts."""
    from tubespark.spark.python_start import use_spark_python as use

    return use()
