"""tubespark: Apache Spark <-> Apache InLong TubeMQ, in pure Python."""

from __future__ import annotations

from typing import Any

from tubespark.errors import TubeSparkError
from tubespark.version import __version__

__all__ = ["TubeSparkError", "__version__", "package_zip", "register"]


def register(spark: Any) -> None:
    """Make ``format("tubemq")``, ``format("tank")`` and ``format("rocketmq")`` available in ``spark``.

    Refuses a PySpark older than 4.2 with :class:`~tubespark.errors.UnsupportedSparkError`. On a Spark
    Connect session each class goes through a stand-in that carries tubespark's code, so the server's
    driver-side processes and executors load it even where nobody installed it (Spark's streaming
    source process does not see ``addArtifacts`` zips; see :mod:`tubespark.spark.connect`).
    """
    from tubespark.spark.compat import require_supported_pyspark

    require_supported_pyspark()  # before the imports below, which fail on an older PySpark with an ImportError
    from tubespark.rocketmq.spark.source import RocketMQDataSource
    from tubespark.spark.connect import is_connect_session, portable_data_source
    from tubespark.tank.spark.source import TankDataSource
    from tubespark.tubemq.spark.source import TubeMQDataSource

    connect = is_connect_session(spark)
    for source in (TubeMQDataSource, TankDataSource, RocketMQDataSource):
        spark.dataSource.register(portable_data_source(source) if connect else source)


def package_zip(directory: str | None = None) -> str:
    """Write this tubespark as a zip (in ``directory``, default the temp dir) and return its path.

    For shipping the code instead of installing it: ``spark.addArtifacts(tubespark.package_zip(),
    pyfile=True)`` on Spark Connect, ``--py-files`` with spark-submit. Same code, same file name.
    """
    from tubespark.spark.connect import write_package_zip

    return write_package_zip(directory)
