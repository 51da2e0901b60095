"""Shared test set-up: a local-mode SparkSession for the integration tests that need real Spark, and the CI
guard against silent skips.

**No skips in CI.** When ``CI`` is set (``true``/``1``/``yes``, as CI services and ``.ci/run`` set it), a
skipped test is a failure: a test that skips itself (``pytest.skip``, a skipping fixture such as the
cluster's with ``TUBESPARK_SKIP_INTEGRATION``, ``importorskip`` of Jupyter's packages) is reported as
failed with the skip's reason, and a run in which anything was skipped (including a whole module at
collection) exits non-zero. Locally skips stay skips. ``tests/unit/tooling/test_ci_guard.py`` proves the guard.
"""

from __future__ import annotations

import os
import sys

import pytest

CI_VALUES = ("1", "true", "yes")


def running_in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs the real local TubeMQ cluster (and Java)")
    config.addinivalue_line("markers", "spark: needs a real local Spark session")


def expected_hot_path() -> str:
    """The hot path this run must use: pure-python under TUBESPARK_NO_EXTENSIONS=1, else compiled."""
    from tubespark.core.native import COMPILED, PURE_PYTHON, extensions_disabled

    return PURE_PYTHON if extensions_disabled() else COMPILED


def pytest_report_header(config: pytest.Config) -> str:
    from tubespark.tubemq.wire.twin import HOT_PATH

    return f"tubespark hot path: {HOT_PATH}"


def pytest_sessionstart(session: pytest.Session) -> None:
    """In CI the suite runs twice, with and without the compiled twins (.ci/run): each run must really use
    the path it is meant to test. The build makes the extension optional (no compiler, no twin), so a
    failed build would otherwise pass CI silently on the pure-Python path. Locally (a worktree without
    ``setup.py build_ext --inplace``) the pure-Python path is fine."""
    from tubespark.tubemq.wire.twin import HOT_PATH

    if running_in_ci() and not HOT_PATH.startswith(expected_hot_path()):
        pytest.exit(f"CI: the tests must run on the {expected_hot_path()} hot path, but this process uses "
                    f"{HOT_PATH}", returncode=3)


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        return f"{longrepr[2]} ({longrepr[0]}:{longrepr[1]})"
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if running_in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = (f"skipped in CI, where every test must run (CI={os.environ.get('CI')}): "
                           f"{_skip_reason(report)}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Backstop for skips no test report carries (a module skipped at collection): fail the run in CI."""
    if not running_in_ci():
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        if reporter is not None:
            reporter.write_line(f"CI: {len(skipped)} skipped (none allowed in CI):", red=True, bold=True)
            for report in skipped:
                reporter.write_line(f"  {report.nodeid}: {_skip_reason(report)}", red=True)
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
               .config("spark.python.worker.faulthandler.enabled", "true")  # a crashed worker's stack in the log
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    tubespark.register(session)
    yield session
    session.stop()
