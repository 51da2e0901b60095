"""The wrapper the test bed puts in PYSPARK_PYTHON (tubespark_testbed/sparkpython.py), run as Spark runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tubespark_testbed import sparkpython

PRINT_PATH = ["-c", "import os, sys; print(os.environ.get('PYTHONPATH', '')); print(sys.argv[1:])", "a b", "c"]


def _run(script: Path, spark_home: Path, pythonpath: str) -> tuple[str, str]:
    env = {**os.environ, "SPARK_HOME": str(spark_home), "PYTHONPATH": pythonpath}
    out = subprocess.run([str(script), *PRINT_PATH], env=env, capture_output=True, text=True, timeout=60, check=True)
    path, args = out.stdout.splitlines()
    return path, args


def test_a_pip_installed_pyspark_is_imported_from_its_package_not_its_zip(tmp_path):
    home = tmp_path / "site-packages" / "pyspark"  # pip's layout: SPARK_HOME is the package
    (home / "python" / "lib").mkdir(parents=True)
    (home / "__init__.py").write_text("")
    script = sparkpython.write_script(sys.executable, tmp_path / "bin")
    lib = home / "python" / "lib"
    path, args = _run(script, home, f"{lib}/pyspark.zip:{lib}/py4j-0.10.9.9-src.zip:/repo:/with space/x")
    assert path == f"{lib}/py4j-0.10.9.9-src.zip:/repo:/with space/x"
    assert args == "['a b', 'c']"  # arguments pass through as given


def test_a_spark_distribution_keeps_its_zip(tmp_path):
    home = tmp_path / "spark-4.3.0-bin"  # a distribution: no __init__.py, the zip is where PySpark lives
    (home / "python" / "lib").mkdir(parents=True)
    script = sparkpython.write_script(sys.executable, tmp_path / "bin")
    zipped = f"{home}/python/lib/pyspark.zip:/repo"
    assert _run(script, home, zipped)[0] == zipped


def test_apply_wraps_the_interpreter_named_once_and_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.delenv(sparkpython.ENV, raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    first = sparkpython.apply_to_environment(tmp_path)
    assert first is not None and Path(first).name.startswith("spark-python-") and os.access(first, os.X_OK)
    assert f"exec {sys.executable} " in Path(first).read_text()
    assert sparkpython.apply_to_environment(tmp_path) == first  # applied again: not a wrapper of the wrapper
    monkeypatch.setenv("PYSPARK_PYTHON", "/venv/bin/python")
    monkeypatch.setenv(sparkpython.ENV, "default")
    assert sparkpython.apply_to_environment(tmp_path) is None
    assert os.environ["PYSPARK_PYTHON"] == "/venv/bin/python"
