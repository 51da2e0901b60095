"""The CI guard (tests/conftest.py, .ci/run): with CI set, no test may be skipped and CI stays red.

Each case runs a real pytest session (pytester, in a subprocess so the environment is its own) on a tiny
test file, with the project's actual ``tests/conftest.py`` as that session's conftest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parents[2]
ROOT = TESTS.parent

SKIPPING = {
    "in_the_test": "import pytest\n\ndef test_x():\n    pytest.skip('no Jupyter here')\n",
    "in_a_fixture": ("import pytest\n\n@pytest.fixture\ndef cluster():\n    pytest.skip('no cluster')\n\n"
                     "def test_x(cluster):\n    pass\n"),
    "by_marker": "import pytest\n\n@pytest.mark.skip(reason='later')\ndef test_x():\n    pass\n",
    "whole_module": ("import pytest\n\nnbclient = pytest.importorskip('no_such_module_for_the_ci_guard')\n\n"
                     "def test_x():\n    pass\n"),
}


def _session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str, ci: str | None):
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makepyfile(test_guarded=source, test_other="def test_ok():\n    pass\n")
    monkeypatch.delenv("TUBESPARK_SKIP_INTEGRATION", raising=False)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")


@pytest.mark.parametrize("where", sorted(SKIPPING))
def test_a_skip_fails_the_run_in_ci(pytester, monkeypatch, where):
    result = _session(pytester, monkeypatch, SKIPPING[where], "true")
    assert result.ret != 0, result.stdout.str()
    outcomes = result.parseoutcomes()
    assert "skipped" not in outcomes or where == "whole_module", outcomes
    if where != "whole_module":  # the skipped test is reported as failed (or errored, in its fixture)
        assert outcomes.get("failed", 0) + outcomes.get("errors", outcomes.get("error", 0)) == 1, outcomes
        result.stdout.fnmatch_lines(["*skipped in CI, where every test must run*"])
    else:  # skipped at collection: no test report to turn, the session's exit status carries it
        result.stdout.fnmatch_lines(["*CI: 1 skipped (none allowed in CI)*"])


@pytest.mark.parametrize("where", sorted(SKIPPING))
def test_the_same_skips_stay_skips_outside_ci(pytester, monkeypatch, where):
    result = _session(pytester, monkeypatch, SKIPPING[where], None)
    assert result.ret == 0, result.stdout.str()
    assert result.parseoutcomes().get("skipped") == 1


def test_ci_values(pytester, monkeypatch):
    for value, fails in (("true", True), ("1", True), ("TRUE", True), ("false", False), ("", False)):
        result = _session(pytester, monkeypatch, SKIPPING["in_the_test"], value)
        assert (result.ret != 0) is fails, (value, result.stdout.str())


def test_skip_integration_switch_fails_in_ci_before_starting_a_cluster(pytester, monkeypatch):
    """The real integration conftest: with CI and TUBESPARK_SKIP_INTEGRATION the cluster fixture fails."""
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.mkpydir("integration")
    (pytester.path / "integration" / "conftest.py").write_text((TESTS / "integration" / "conftest.py").read_text())
    (pytester.path / "integration" / "test_needs_cluster.py").write_text(
        "def test_x(tubemq_cluster):\n    raise AssertionError('the cluster fixture should not have run')\n")
    monkeypatch.setenv("TUBESPARK_SKIP_INTEGRATION", "1")
    monkeypatch.setenv("CI", "true")
    # pytester's HOME is a fresh directory, so the conftest would find no Spark start-up archive there and make
    # one in the background: a Spark JVM left running after this session, beside the rest of the unit tests
    monkeypatch.setenv("TUBESPARK_SPARK_JVM", "default")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*TUBESPARK_SKIP_INTEGRATION is set in CI*"])
    monkeypatch.delenv("CI")  # locally the switch still skips
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0
    result.assert_outcomes(skipped=1)


def test_ci_run_refuses_the_skip_integration_switch():
    """``.ci/run`` stops at once (exit 2) when TUBESPARK_SKIP_INTEGRATION is set, before installing anything.

    PYTHON=false makes a missing check fail fast too (exit 1 from the pip step) instead of running CI here.
    """
    bash = shutil.which("bash")
    assert bash
    env = {**os.environ, "TUBESPARK_SKIP_INTEGRATION": "1", "PYTHON": "false"}
    run = subprocess.run([bash, str(ROOT / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "TUBESPARK_SKIP_INTEGRATION=1 is set" in run.stderr
