"""Which PySpark tubespark runs on, checked before anything is planned.

The lower bound is PySpark 4.2, where Python stream readers got admission control (``ReadLimit``,
``maxOffsetsPerTrigger`` through ``getDefaultReadLimit``) and ``SupportsTriggerAvailableNow``. On 4.1 a
Python stream reader has neither, and cannot even tell that it runs under ``Trigger.AvailableNow``: Spark
wraps it and asks for the latest offset once, so a run would stop after one batch capped by
``maxOffsetsPerTrigger``, or with a partition the master had not yet handed over left unread, and report
success. 4.0 also lacks ``DataSourceStreamArrowWriter``, which the streaming sink is built on. A version
check up front turns what would be a wrong result (4.1) or an ``ImportError`` deep in a module (4.0) into
one message that names the version and the fix. The upper bound is pyproject.toml's, enforced by pip.
"""

from __future__ import annotations

import re

from tubespark.errors import UnsupportedSparkError

MIN_PYSPARK = (4, 2)


def pyspark_version() -> tuple[int, int]:
    """(major, minor) of the installed PySpark, read without importing its SQL modules."""
    import pyspark

    found = re.match(r"(\d+)\.(\d+)", pyspark.__version__)
    if found is None:  # a build with an unparsable version: let the imports decide
        return MIN_PYSPARK
    return int(found.group(1)), int(found.group(2))


def require_supported_pyspark() -> None:
    """Raise :class:`UnsupportedSparkError` on a PySpark older than :data:`MIN_PYSPARK`."""
    version = pyspark_version()
    if version < MIN_PYSPARK:
        import pyspark

        wanted = ".".join(map(str, MIN_PYSPARK))
        raise UnsupportedSparkError(
            f"tubespark needs PySpark >= {wanted}, found {pyspark.__version__}: Python stream readers get "
            f"admission control (maxOffsetsPerTrigger) and Trigger.AvailableNow only from {wanted} on, and "
            f"tubespark's streaming guarantees rest on both. Install a supported PySpark with "
            f"pip install 'tubespark[spark]' (or 'pyspark>={wanted}')."
        )
