"""tubespark's ``PYSPARK_PYTHON`` start-up script (tubespark/spark/python_start.py), run as Spark runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tubespark
from tubespark.spark import python_start

WHERE_FROM = ["-c", "import pyspark, sys; print(pyspark.__file__); print(sys.argv[1:])", "a b", "c"]


def test_a_pip_installed_pyspark_is_imported_from_its_package_with_its_bytecode(tmp_path: Path) -> None:
    import pyspark

    home = Path(pyspark.__file__).parent
    zipped = home / "python" / "lib" / "pyspark.zip"
    if not (home / "__init__.py").is_file() or not zipped.is_file():
        pytest.skip("PySpark is not pip-installed here")  # a Spark distribution keeps its zip (nothing to do)
    script = python_start.spark_python(sys.executable, tmp_path)
    env = {**os.environ, "SPARK_HOME": str(home), "PYTHONPATH": f"{zipped}:{os.environ.get('PYTHONPATH', '')}"}
    plain = subprocess.run([sys.executable, *WHERE_FROM], env=env, capture_output=True, text=True, timeout=60,
                           check=True).stdout.splitlines()
    started = subprocess.run([script, *WHERE_FROM], env=env, capture_output=True, text=True, timeout=60,
                             check=True).stdout.splitlines()
    assert plain[0].startswith(str(zipped))  # what Spark's PYTHONPATH does to a plain interpreter
    assert started == [str(home / "__init__.py"), "['a b', 'c']"]  # the package, arguments as given


def test_use_never_overrides_a_user_s_pyspark_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/venv/bin/python")
    monkeypatch.delenv(python_start.ENV, raising=False)
    assert python_start.use_spark_python(tmp_path) is None
    assert os.environ["PYSPARK_PYTHON"] == "/venv/bin/python"


def test_use_sets_the_script_when_unset_and_can_be_turned_off(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setenv(python_start.ENV, "default")
    assert python_start.use_spark_python(tmp_path) is None
    assert "PYSPARK_PYTHON" not in os.environ
    monkeypatch.delenv(python_start.ENV)
    chosen = python_start.use_spark_python(tmp_path)
    assert chosen is not None and os.environ["PYSPARK_PYTHON"] == chosen and os.access(chosen, os.X_OK)
    assert f"exec {sys.executable} " in Path(chosen).read_text()
    assert python_start.spark_python(chosen) == chosen  # a script is never wrapped again


def test_the_package_root_offers_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = tubespark.spark_python()
    assert path.startswith(str(tmp_path / "tubespark")) and os.access(path, os.X_OK)
    printed = subprocess.run([sys.executable, "-m", "tubespark.spark.python_start"], capture_output=True, text=True,
                             timeout=60, check=True, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert printed.stdout.strip() == path  # export PYSPARK_PYTHON=$(python -m tubespark.spark.python_start)
