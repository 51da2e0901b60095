"""A wheel that installs anywhere, with the oldest PySpark the range admits.

``python -m build`` makes tubespark's sdist and, from it, the wheel; the test bed's wheel is built from a
copy of ``testbed/`` and ``conf/tubemq``. Both go into a fresh venv, away from the checkout (its own
working directory, no ``PYTHONPATH``), as ``tubespark[cluster]`` next to the lower bound of the declared
pyspark range (the main environment runs the newest release in it). There ``roundtrip_job.py`` writes,
reads and streams (admission control and Trigger.AvailableNow, which the lower bound must have) with no call to
``tubespark.register`` (PySpark's data source discovery finds the wheel's ``pyspark_tubemq``), and
``python -m tubespark demo`` runs the demo on its own embedded cluster from the wheels alone. The wheel
built from the sdist holds the compiled hot path and uses it (``tubespark --version`` says so).

pip's cache keeps the PySpark wheel it builds from the sdist, so only the first run on a machine pays
for the download and the build (about 40 s here).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[3]
JOB = Path(__file__).resolve().parents[1] / "roundtrip_job.py"
ROWS = 400


def oldest_pyspark() -> str:
    """The lower bound of the spark extra's pyspark range, as a release (4.2 -> 4.2.0)."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]["spark"]
    spec = next(Requirement(r).specifier for r in extras if Requirement(r).name == "pyspark")
    lower = next(s.version for s in spec if s.operator == ">=")
    parts = lower.split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def _run(command: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-5000:]}"
    return done


class Venv:
    def __init__(self, root: Path, work: Path) -> None:
        self.python = root / "bin" / "python"
        self.work = work
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_DRIVER_PYTHON")}
        self.env["PYSPARK_PYTHON"] = str(self.python)

    def run(self, *args: object, timeout: float = 600, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return _run([self.python, *args], cwd=cwd or self.work, env=self.env, timeout=timeout)


@dataclass(frozen=True)
class Built:
    venv: Venv
    demo: concurrent.futures.Future  # the demo run from the wheels, started as soon as they were installed


@contextlib.contextmanager
def _wheel_venv(base: Path) -> Iterator[Built]:
    dist = base / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, ROOT], timeout=300)  # sdist, then wheel
    src = base / "src"  # the test bed's wheel takes ../conf/tubemq: build it from a copy, not in the checkout
    shutil.copytree(ROOT / "testbed", src / "testbed",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    shutil.copytree(ROOT / "conf" / "tubemq", src / "conf" / "tubemq")
    _run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", dist, src / "testbed"], timeout=300)
    names = sorted(p.name for p in dist.iterdir())
    # tubespark's wheel holds the compiled hot path, so its tag names the interpreter and platform
    # (cp311-cp311-linux_x86_64); the test bed's is pure Python
    assert [re.sub(r"-[^-]+-(py3-none-any|cp\d+-cp\d+-[\w.]+)\.whl$|-[^-]+\.tar\.gz$", "", n) for n in names] == \
        ["tubespark", "tubespark", "tubespark_testbed"], names  # sdist + wheel, and the test bed's wheel
    core = next(dist.glob("tubespark-*.whl"))
    assert "-py3-none-any" not in core.name, f"{core.name}: the compiled hot path did not build from the sdist"
    assert any(n.startswith("tubespark/tubemq/wire/_native.") and n.endswith(".so")
               for n in zipfile.ZipFile(core).namelist()), f"{core.name} lacks the compiled hot path"
    testbed = next(dist.glob("tubespark_testbed-*.whl"))
    work = base / "work"
    work.mkdir()
    _run([sys.executable, "-m", "venv", base / "venv"], timeout=120)
    venv = Venv(base / "venv", work)
    # by file, not by name: nothing may come from the checkout or from an index's "tubespark"
    venv.run("-m", "pip", "install", "--disable-pip-version-check", "-q", f"{core}[cluster]", testbed,
             f"pyspark=={oldest_pyspark()}", timeout=900)
    # The demo run (its own cluster: mostly start-up wait) goes alongside the other tests, in a directory of its own.
    (base / "demo").mkdir()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="wheel-demo") as pool:
        yield Built(venv, pool.submit(venv.run, "-m", "tubespark", "demo", "--seconds", "15", timeout=600,
                                      cwd=base / "demo"))


# Built (and the demo started) ahead of this module, in the background (tubespark_testbed/prestart.py).
PRESTART = {"wheels": _wheel_venv}


@pytest.fixture(scope="module")
def built(prestarted) -> Built:
    return prestarted("wheels")


@pytest.fixture(scope="module")
def wheel_venv(built: Built) -> Venv:
    return built.venv


def test_the_wheel_alone_runs_on_the_oldest_pyspark(wheel_venv: Venv, tubemq_cluster, topic_factory) -> None:
    where = json.loads(wheel_venv.run("-c", "import json, pyspark, tubespark, tubespark_testbed.config as c; "
                                      "print(json.dumps([pyspark.__version__, tubespark.__file__, "
                                      "str(c.conf_dir())]))").stdout)
    prefix = str(wheel_venv.python.parent.parent)
    assert where[0] == oldest_pyspark()
    assert where[1].startswith(prefix) and where[2].startswith(prefix), where  # not the checkout
    shutil.copy(JOB, wheel_venv.work / JOB.name)
    done = wheel_venv.run(JOB.name, tubemq_cluster.master_address, topic_factory(), topic_factory(),
                          wheel_venv.work, "--rows", ROWS)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["pyspark"] == oldest_pyspark() and result["tubespark_file"].startswith(prefix)
    # the job calls no tubespark.register: PySpark's data source discovery found the wheel's pyspark_tubemq
    assert result["registered"] is False, result
    assert result["read"] == ROWS and result["copied"] == ROWS and result["copied_matches"], result
    assert sum(result["stream_batches"]) == ROWS and max(result["stream_batches"]) <= ROWS // 4, result


def test_the_wheel_uses_its_compiled_hot_path(wheel_venv: Venv) -> None:
    """Built from the sdist, installed from the wheel: ``tubespark --version`` names the compiled module, and
    ``TUBESPARK_NO_EXTENSIONS=1`` switches the same installation to pure Python."""
    prefix = str(wheel_venv.python.parent.parent)
    said = wheel_venv.run("-m", "tubespark", "--version").stdout
    assert f"TubeMQ wire hot path (fetch decoding, sends): compiled ({prefix}" in said, said
    wheel_venv.env["TUBESPARK_NO_EXTENSIONS"] = "1"
    try:
        said = wheel_venv.run("-m", "tubespark", "--version").stdout
    finally:
        del wheel_venv.env["TUBESPARK_NO_EXTENSIONS"]
    assert "TubeMQ wire hot path (fetch decoding, sends): pure-python (TUBESPARK_NO_EXTENSIONS is set)" in said, said


def test_demo_runs_from_the_wheels(built: Built) -> None:
    done = built.demo.result()
    read = re.search(r"Demo finished: the stream read (\d+) events", done.stdout)
    assert read and int(read.group(1)) > 0, done.stdout[-2000:]
