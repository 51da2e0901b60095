"""The formats tubespark registers in a Spark session: ``tubemq``, ``tank`` and ``rocketmq``.

Registering needs every broker's data source, so it sits above the brokers, here, and not in the package root:
the root re-exports :func:`register` as ``tubespark.register``, and applications (the backfill) take it from
here without importing the root, which would make the root an import target of the layers it sits above.

**Discovery: nothing to call.** PySpark 4 looks, once per Spark driver JVM and when a session first needs a Python
data source, for every top-level module on the path of the Python it starts for that (``PYSPARK_DRIVER_PYTHON``,
else ``PYSPARK_PYTHON``, else ``python3``) whose name starts with ``pyspark_`` and that has a ``DefaultSource`` (a
``DataSource`` subclass), and registers it under ``DefaultSource.name()``
(``pyspark/sql/worker/lookup_data_sources.py``). The wheel ships three such modules, ``pyspark_tubemq``,
``pyspark_tank`` and ``pyspark_rocketmq``, each a few lines around :func:`discovery_hook`. That lookup imports every
``pyspark_*`` module and any exception it raises fails the lookup of *every* Python data source of the session, so
the modules import nothing heavy and never raise: ``DefaultSource`` is a module attribute made on first access (PEP
562), and a tubespark that cannot serve (a PySpark outside its range, a missing dependency) says why on stderr and
is skipped, as Spark's ``hasattr`` check skips a module without the attribute. The user then gets Spark's
``[DATA_SOURCE_NOT_FOUND]``, which :func:`tubespark.errors.unwrap` turns into
:class:`~tubespark.errors.DataSourceNotFoundError` saying what to install where.

:func:`register` stays for code that calls it, for Spark Connect clients whose server lacks tubespark, and for a
Spark whose lookup runs another interpreter. Spark lets a session's registration replace a discovered source (it
logs a warning that it did), and both name the same class, so calling it after discovery, or twice, is harmless.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSource

FORMATS = ("tubemq", "tank", "rocketmq")
"""The format names, in registration order; each is the ``name()`` of one of :func:`data_sources`' classes, and the
suffix of the top-level module PySpark's discovery finds it by (``pyspark_<format>``)."""


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


def discovery_hook(format_name: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``pyspark_<format_name>``: gives ``DefaultSource``, the format's data source
    class, when PySpark's discovery asks for it (and not at the module's import, which stays free).

    Any failure to provide it (tubespark refuses this PySpark, a dependency is missing) is written to stderr in one
    line and raised as ``AttributeError``, the one exception ``hasattr`` (Spark's check) takes for "not here": the
    lookup of every other data source goes on, and ``format(...)`` of this one says it is not found.
    """
    if format_name not in FORMATS:
        raise ValueError(f"no tubespark format {format_name!r}: expected one of {', '.join(FORMATS)}")

    def module_getattr(name: str) -> Any:
        if name != "DefaultSource":
            raise AttributeError(f"module 'pyspark_{format_name}' has no attribute {name!r}")
        try:
            return next(source for source in data_sources() if source.name() == format_name)
        except Exception as exc:  # any failure here would fail Spark's lookup of every data source
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
            print(f"tubespark: format({format_name!r}) is not registered by PySpark's data source discovery in "
                  f"{sys.executable}: {reason}", file=sys.stderr, flush=True)
            raise AttributeError(f"DefaultSource of pyspark_{format_name} is unavailable: {reason}") from exc

    return module_getattr
