"""tubespark: Apache Spark <-> Apache InLong TubeMQ, in pure Python."""

from __future__ import annotations

from tubespark.apps.registry import register
from tubespark.errors import TubeSparkError, typed_errors, unwrap
from tubespark.version import __version__

__all__ = ["TubeSparkError", "__version__", "package_zip", "register", "typed_errors", "unwrap"]


def package_zip(directory: str | None = None) -> str:
    """Write this tubespark as a zip (in ``directory``, default the temp dir) and return its path.

    For shipping the code instead of installing it: ``spark.addArtifacts(tubespark.package_zip(),
    pyfile=True)`` on Spark Connect, ``--py-files`` with spark-submit. Same code, same file name.
    """
    from tubespark.spark.connect import write_package_zip

    return write_package_zip(directory)
