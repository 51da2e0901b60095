"""Shared test set-up: a local-mode SparkSession for the integration tests that need real Spark."""

from __future__ import annotations

import os
import sys

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs the real local TubeMQ cluster (and Java)")
    config.addinivalue_line("markers", "spark: needs a real local Spark session")


@pytest.fixture(scope="session")
def spark():
    """One local[2] Spark session for the whole run (starting Spark costs seconds)."""
    from pyspark.sql import SparkSession

    import tubespark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[2]").appName("tubespark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    tubespark.register(session)
    yield session
    session.stop()
