"""PySpark 4's data source discovery finds tubespark's three formats (issue 39 part 1).

PySpark registers the ``DefaultSource`` of every top-level ``pyspark_*`` module of the workers' Python, once per
driver JVM (``pyspark/sql/worker/lookup_data_sources.py``). These tests run that very lookup (its ``_main``) over
this checkout's modules, check the modules cost nothing to import and never raise (a raise there fails the lookup of
every Python data source of the session), and that the distribution ships them and an editable install lists them.
The real wheel in a fresh Spark session, and Spark Connect: tests/integration/core/test_wheel.py and
tests/integration/spark/test_connect.py.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tubespark.apps import registry
from tubespark.apps.registry import FORMATS, data_sources, discovery_hook
from tubespark.errors import UnsupportedSparkError

ROOT = Path(__file__).resolve().parents[3]
MODULES = [f"pyspark_{name}" for name in FORMATS]

_HIDE_TUBESPARK = """
import sys
class _Hide:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "tubespark" or name.startswith("tubespark."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _Hide)
"""


def _run(code: str, *, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _lookup() -> dict[str, type]:
    """What PySpark's lookup process would send the JVM: its own ``_main``, its output decoded."""
    from pyspark.serializers import read_int
    from pyspark.sql.worker import lookup_data_sources
    from pyspark.worker_util import pickleSer

    out = io.BytesIO()
    lookup_data_sources._main(io.BytesIO(), out)
    out.seek(0)
    found = {}
    for _ in range(read_int(out)):
        name = out.read(read_int(out)).decode("utf-8")
        found[name] = pickleSer._read_with_length(out)
    return found


def test_pysparks_own_lookup_registers_the_three_formats_under_their_names():
    found = _lookup()
    assert {name: found[name] for name in FORMATS} == {source.name(): source for source in data_sources()}
    assert sorted(FORMATS) == sorted(source.name() for source in data_sources())


def test_each_module_names_its_format_and_gives_the_real_data_source_class():
    for name, module in zip(FORMATS, MODULES, strict=True):
        imported = __import__(module)
        assert imported.DefaultSource.name() == name
        assert imported.DefaultSource.__module__ == f"tubespark.{name}.spark.source"  # pickled by reference
        with pytest.raises(AttributeError):
            imported.NotThere  # noqa: B018  # a module attribute that is not there is still an AttributeError


def test_the_modules_import_nothing_heavy():
    """Spark's lookup imports every pyspark_* module; ours load PySpark, pyarrow or pandas only when asked for the
    class (importing the module alone loads tubespark's root: errors, version, the registry)."""
    done = _run("import json, sys\n" + "".join(f"import {m}\n" for m in MODULES) +
                "print(json.dumps(sorted({n.split('.')[0] for n in sys.modules} & {'pyspark', 'pyarrow', 'pandas', "
                "'py4j', 'google', 'cramjam', 'fsspec', 'requests'})))", cwd=Path("/"))
    assert json.loads(done.stdout) == []


def test_without_tubespark_the_modules_import_and_the_lookup_skips_them():
    """A Python that has the pyspark_* files but cannot import tubespark: nothing raises, PySpark's lookup finds
    nothing (Spark then says DATA_SOURCE_NOT_FOUND, which tubespark.unwrap explains)."""
    done = _run(_HIDE_TUBESPARK + "import io\n" + "".join(f"import {m}\n" for m in MODULES) +
                f"assert not any(hasattr(m, 'DefaultSource') for m in ({', '.join(MODULES)},))\n"
                "from pyspark.sql.worker import lookup_data_sources\n"
                "out = io.BytesIO(); lookup_data_sources._main(io.BytesIO(), out)\n"
                "print(out.getvalue()[:4].hex())")
    assert done.stdout.strip() == "00000000"  # zero data sources, and no exception


def test_a_tubespark_that_cannot_serve_is_skipped_with_one_line_on_stderr(monkeypatch, capsys):
    def refuse() -> tuple:
        raise UnsupportedSparkError("tubespark needs PySpark 4.2 or newer; found 4.1.0")

    monkeypatch.setattr(registry, "data_sources", refuse)
    hook = discovery_hook("tank")
    with pytest.raises(AttributeError, match="DefaultSource of pyspark_tank is unavailable: UnsupportedSparkError"):
        hook("DefaultSource")
    said = capsys.readouterr().err
    assert said == ("tubespark: format('tank') is not registered by PySpark's data source discovery in "
                    f"{sys.executable}: UnsupportedSparkError: tubespark needs PySpark 4.2 or newer; found 4.1.0\n")
    with pytest.raises(ValueError, match="no tubespark format 'kafka'"):
        discovery_hook("kafka")


def test_the_distribution_ships_the_modules_and_editable_installs_list_them():
    with (ROOT / "pyproject.toml").open("rb") as f:
        setuptools = tomllib.load(f)["tool"]["setuptools"]
    assert sorted(setuptools["py-modules"]) == sorted(MODULES)
    assert all((ROOT / f"{m}.py").is_file() for m in MODULES)
    # pkgutil (PySpark's lookup) does not see what setuptools' default editable finder maps: ./dev and .ci/run
    # install in compat mode, which puts the checkout itself on sys.path
    for script in (ROOT / "dev", ROOT / ".ci" / "run"):
        installs = [line for line in script.read_text(encoding="utf-8").splitlines() if "pip install" in line]
        assert installs and all("editable_mode=compat" in line for line in installs), (script, installs)
