"""The formats tubespark registers in a Spark session: ``tubemq``, ``tank`` and ``rocketmq``.

Registering needs every broker's data source, so it sits above the brokers, here, and not in the package root:
the root re-exports :func:`register` as ``tubespark.register``, and applications (the backfill) take it from
here without importing the root, which would make the root an import target of the layers it sits above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSource


def data_sources() -> tuple[type[DataSource], ...]:
    """tubespark's data source classes, in registration order; ``cls.name()`` is the format's name.

    Refuses a PySpark older than 4.2 with :class:`~tubespark.errors.UnsupportedSparkError` first: the sources'
    modules fail on an older PySpark with a bare ``ImportError``.
    """
    from tubespark.spark.compat import require_supported_pyspark

    require_supported_pyspark()
    from tubespark.rocketmq.spark.source import RocketMQDataSource
    from tubespark.tank.spark.source import TankDataSource
    from tubespark.tubemq.spark.source import TubeMQDataSource

    return TubeMQDataSource, TankDataSource, RocketMQDataSource


def register(spark: Any) -> None:
    """Make ``format("tubemq")``, ``format("tank")`` and ``format("rocketmq")`` available in ``spark``.

    Refuses a PySpark older than 4.2 with :class:`~tubespark.errors.UnsupportedSparkError`. On a Spark
    Connect session each class goes through a stand-in that carries tubespark's code, so the server's
    driver-side processes and executors load it even where nobody installed it (Spark's streaming
    source process does not see ``addArtifacts`` zips; see :mod:`tubespark.spark.connect`).
    """
    sources = data_sources()
    from tubespark.spark.connect import is_connect_session, portable_data_source

    connect = is_connect_session(spark)
    for source in sources:
        spark.dataSource.register(portable_data_source(source) if connect else source)
