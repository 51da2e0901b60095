"""tubespark on Spark Connect without tubespark on the server, the PySpark range check, and ``tubespark demo``.

The Connect stand-in (``tubespark.spark.connect.portable_data_source``) is checked the way a Connect
server uses it, without Spark: the class is cloudpickled as PySpark's Connect client does, loaded in a
Python that cannot import tubespark (``tests/python_without_tubespark.py``), asked for a reader and a
writer there (as the driver-side processes do), and those are pickled again and loaded in a second such
Python with another temp directory (as an executor does, with nothing left behind by the first).
tests/integration/spark/test_connect.py runs the same through a real local Connect server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pyspark import cloudpickle

import tubespark
from tests.python_without_tubespark import python_without_tubespark
from tubespark import cli
from tubespark.errors import UnsupportedSparkError
from tubespark.spark import compat
from tubespark.spark.connect import is_connect_session, portable_data_source, write_package_zip
from tubespark.tank.spark.source import TankDataSource
from tubespark.tubemq.spark.source import TubeMQDataSource

OPTIONS = {"master": "127.0.0.1:1", "topic": "events", "group": "etl_group"}

# What a driver-side process does: load the class, build a reader (writers need a reachable master: the
# integration test has those), send it on, as the planner sends it inside the read function.
DRIVER_SIDE = r"""
import pickle, sys
source_cls = pickle.loads(sys.stdin.buffer.read())
assert not any(m == "tubespark" or m.startswith("tubespark.") for m in sys.modules), "class was sent by reference"
source = source_cls(OPTIONS)
reader = source.reader(None)
from pyspark import cloudpickle
sys.stdout.buffer.write(cloudpickle.dumps((source_cls.name(), reader)))
"""

# What an executor does: load the reader it was sent.
EXECUTOR_SIDE = r"""
import json, pickle, sys
name, reader = pickle.loads(sys.stdin.buffer.read())
import tubespark
print(json.dumps({"name": name, "reader": type(reader).__module__ + "." + type(reader).__qualname__,
                  "reader_is_shipped": type(reader).__reduce_ex__ is not object.__reduce_ex__,
                  "tubespark": tubespark.__file__}))
"""


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return python_without_tubespark(tmp_path_factory.mktemp("bare") / "venv")


def _run(python: Path, script: str, stdin: bytes, tmpdir: Path) -> bytes:
    tmpdir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([str(python), "-c", script.replace("OPTIONS", repr(OPTIONS))], input=stdin,
                          capture_output=True, timeout=120, cwd=tmpdir, env={"PATH": "/usr/bin:/bin",
                                                                             "TMPDIR": str(tmpdir)})
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout


def test_the_stand_in_and_what_it_returns_load_where_tubespark_is_not_installed(bare_python: Path,
                                                                                  tmp_path: Path) -> None:
    blob = cloudpickle.dumps(portable_data_source(TubeMQDataSource))
    sent = _run(bare_python, DRIVER_SIDE, blob, tmp_path / "driver")
    assert [p.name for p in (tmp_path / "driver").glob("tubespark-*.zip")], "the driver side wrote no zip"
    seen = json.loads(_run(bare_python, EXECUTOR_SIDE, sent, tmp_path / "executor"))
    assert seen["name"] == "tubemq"
    assert seen["reader"] == "tubespark.spark.batch_engine.BatchEngine"
    assert not seen["reader_is_shipped"], "the executor gets the plain class back"
    # the executor loaded tubespark from the zip the reader carried, written to its own temp dir
    assert seen["tubespark"].startswith(str(tmp_path / "executor")), seen


def test_without_the_stand_in_the_server_cannot_load_the_class(bare_python: Path, tmp_path: Path) -> None:
    """The failure the stand-in exists for (so the test above can tell it from a Python that has tubespark)."""
    done = subprocess.run([str(bare_python), "-c", "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"],
                          input=cloudpickle.dumps(TubeMQDataSource), capture_output=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0
    assert b"No module named 'tubespark'" in done.stderr


class _DataSources:
    def __init__(self) -> None:
        self.registered: list[type] = []

    def register(self, cls: type) -> None:
        self.registered.append(cls)


def _session(module: str) -> object:
    session = type("SparkSession", (), {"__module__": module})()
    session.dataSource = _DataSources()  # type: ignore[attr-defined]
    return session


def test_register_uses_the_stand_in_on_connect_sessions_only() -> None:
    classic, connect = _session("pyspark.sql.session"), _session("pyspark.sql.connect.session")
    assert not is_connect_session(classic) and is_connect_session(connect)
    tubespark.register(classic)
    tubespark.register(connect)
    originals = classic.dataSource.registered  # type: ignore[attr-defined]
    stand_ins = connect.dataSource.registered  # type: ignore[attr-defined]
    assert TubeMQDataSource in originals and TankDataSource in originals
    assert [c.name() for c in stand_ins] == [c.name() for c in originals]
    assert not any(issubclass(c, tuple(originals)) for c in stand_ins)
    assert all("<locals>" in c.__qualname__ for c in stand_ins), "cloudpickle sends only such classes by value"


@pytest.mark.parametrize("version", ["4.1.4", "4.0.0", "3.5.9"])
def test_an_older_pyspark_is_refused_with_one_message(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", version)
    session = _session("pyspark.sql.session")
    with pytest.raises(UnsupportedSparkError, match=rf"needs PySpark >= 4\.2, found {version}.*AvailableNow"):
        tubespark.register(session)
    assert session.dataSource.registered == []  # type: ignore[attr-defined]
    import importlib

    import tubespark.spark.source as source_module  # every broker's source.py imports it first: one guard
    with pytest.raises(UnsupportedSparkError, match=f"found {version}"):  # imported by hand: refused at import,
        importlib.reload(source_module)  # before the PySpark imports an old version fails with ImportError


@pytest.mark.parametrize("version", ["4.2.0", "4.3.0", "4.3.1.dev0", "5.0.0"])
def test_supported_versions_pass(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", version)
    compat.require_supported_pyspark()


def test_package_zip_is_the_package_and_named_by_its_content(tmp_path: Path) -> None:
    first, second = write_package_zip(tmp_path), tubespark.package_zip(str(tmp_path))
    assert first == second and Path(first).parent == tmp_path
    names = zipfile.ZipFile(first).namelist()
    assert "tubespark/__init__.py" in names and "tubespark/tubemq/spark/source.py" in names
    assert not [n for n in names if "__pycache__" in n or not n.endswith(".py")]
    done = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                           "import tubespark.tubemq.spark.source as s; print(s.__file__)", first],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith(first), done.stderr[-2000:]


def test_demo_without_the_cluster_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "entry_points", lambda **_: ())
    assert cli.main(["demo", "--seconds", "5"]) == 2
    assert "pip install 'tubespark[cluster]'" in capsys.readouterr().err


def test_demo_comes_from_the_testbed_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    from tubespark_testbed import __main__ as testbed_main

    seen: list[tuple[list[str], str]] = []
    monkeypatch.setattr(testbed_main, "main", lambda argv, prog: seen.append((argv, prog)) or 0)
    assert cli.main(["demo", "--seconds", "5"]) == 0
    assert seen == [(["demo", "--seconds", "5"], "tubespark")]  # its help says "tubespark demo"
