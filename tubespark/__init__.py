"""tubespark: Apache Spark <-> Apache InLong TubeMQ, in pure Python."""

from __future__ import annotations

from typing import Any

from tubespark.errors import TubeSparkError

__version__ = "0.1.0"
__all__ = ["TubeSparkError", "__version__", "register"]


def register(spark: Any) -> None:
    """Make ``format("tubemq")`` available in ``spark`` (a SparkSession)."""
    from tubespark.tubemq.spark.source import TubeMQDataSource

    spark.dataSource.register(TubeMQDataSource)
