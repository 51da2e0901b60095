"""The packaging facts that matter, read from pyproject.toml without building anything.

* one version source: ``tubespark/version.py`` ``__version__``, read by setuptools (dynamic ``attr``) and
  re-exported as ``tubespark.__version__``;
* pyspark is a version range whose two ends are tested (4.2.0 in test_wheel.py's fresh venv, 4.3.x in the
  main environment), not a pin, and the runtime check refuses what lies below it;
* ``tubespark[cluster]`` brings the test bed, which plugs ``tubespark demo`` into the command line;
* the tubespark distribution ships neither ``tubespark_testbed`` nor the ``conf/tubemq`` cluster
  templates: those belong to ``testbed/`` and install where ``tubespark_testbed.config.conf_dir()`` looks.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[3]


def _load(path: Path) -> dict:
    with path.open("rb") as f:
        return tomllib.load(f)


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return _load(ROOT / "pyproject.toml")


@pytest.fixture(scope="module")
def testbed_pyproject() -> dict:
    return _load(ROOT / "testbed" / "pyproject.toml")


VERSION_FILE = ROOT / "tubespark" / "version.py"


def _init_version() -> str:
    tree = ast.parse(VERSION_FILE.read_text(encoding="utf-8"))
    values = [node.value.value for node in tree.body
              if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets)
              and isinstance(node.value, ast.Constant)]
    assert len(values) == 1, "tubespark/version.py must assign __version__ exactly once, to a string literal"
    return values[0]


def test_single_version_source(pyproject: dict) -> None:
    project = pyproject["project"]
    assert "version" not in project
    assert "version" in project["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tubespark.version.__version__"}
    Version(_init_version())  # a valid PEP 440 version


def test_setuptools_reads_the_version_and_the_package_root_exports_it() -> None:
    from setuptools.config.expand import read_attr

    import tubespark

    assert read_attr("tubespark.version.__version__", root_dir=ROOT) == _init_version()
    assert tubespark.__version__ == _init_version()


def test_version_is_written_nowhere_else() -> None:
    setup_py = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert not re.search(r"\bversion\s*=", setup_py)
    assert re.search(r"setup\(\s*\)", setup_py), "setup.py is a bare shim: setup() with no arguments"
    literal = re.compile(r"""["'][^"'\n]*\b""" + re.escape(_init_version()) + r"""\b[^"'\n]*["']""")
    offenders = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tubespark").rglob("*.py"))
                 if p != VERSION_FILE and literal.search(p.read_text(encoding="utf-8"))]
    assert not offenders, f"version literal repeated in {offenders}: import tubespark.version.__version__ instead"


def _pyspark_requirements(pyproject: dict) -> dict[str, Requirement]:
    extras = pyproject["project"]["optional-dependencies"]
    found = {}
    for extra, reqs in extras.items():
        for req in map(Requirement, reqs):
            if req.name == "pyspark":
                found[extra] = req
    return found


def test_pyspark_is_a_tested_range(pyproject: dict) -> None:
    reqs = _pyspark_requirements(pyproject)
    assert set(reqs) == {"spark", "connect", "test"}
    assert len({str(r.specifier) for r in reqs.values()}) == 1, "the extras must agree on pyspark"
    assert "connect" in reqs["connect"].extras and "connect" in reqs["test"].extras
    spec = reqs["spark"].specifier
    operators = {s.operator for s in spec}
    assert not operators & {"==", "==="}, f"pyspark is pinned ({spec}); it should be a range"
    assert ">=" in operators and "<" in operators, f"pyspark needs a lower and an upper bound ({spec})"
    assert spec.contains("4.3.0"), "4.3.x is the version the main suite runs on"
    assert spec.contains("4.2.0"), "4.2.0 is the oldest end, installed by test_wheel.py"
    assert not spec.contains("4.1.4"), "the admission-control API the stream reader uses arrived in 4.2"
    from tubespark.spark.compat import MIN_PYSPARK

    lower = next(s.version for s in spec if s.operator == ">=")
    assert tuple(int(x) for x in lower.split(".")[:2]) == MIN_PYSPARK, "the runtime check and pyproject disagree"


def test_cluster_extra_brings_the_testbed_and_its_demo_command(pyproject: dict, testbed_pyproject: dict) -> None:
    cluster = {Requirement(r).name: Requirement(r) for r in pyproject["project"]["optional-dependencies"]["cluster"]}
    assert set(cluster) == {"tubespark", "tubespark-testbed"}
    assert cluster["tubespark"].extras == {"spark"}, "the demo runs Spark"
    assert testbed_pyproject["project"]["name"] == "tubespark-testbed"
    plugins = testbed_pyproject["project"]["entry-points"]["tubespark.commands"]
    assert plugins == {"demo": "tubespark_testbed.__main__:demo_main"}
    assert not any("Do Not Upload" in c for c in testbed_pyproject["project"].get("classifiers", [])), \
        "the cluster extra needs tubespark-testbed on the index"


def test_pyspark_is_not_a_core_dependency(pyproject: dict) -> None:
    assert all(Requirement(r).name != "pyspark" for r in pyproject["project"]["dependencies"])


def test_tubespark_distribution_excludes_the_testbed(pyproject: dict) -> None:
    find = pyproject["tool"]["setuptools"]["packages"]["find"]
    include = find["include"]
    assert any(fnmatch.fnmatchcase("tubespark", pat) for pat in include)
    assert any(fnmatch.fnmatchcase("tubespark.tubemq.wire", pat) for pat in include)
    for name in ("tubespark_testbed", "tubespark_testbed.config", "testbed", "tests"):
        assert not any(fnmatch.fnmatchcase(name, pat) for pat in include), f"{name} would be packaged"
    data = pyproject["tool"]["setuptools"].get("data-files", {})
    assert not any("tubemq" in target or any("conf/tubemq" in src for src in srcs) for target, srcs in data.items())
    assert "share/tubespark/conf/spark" in data
    assert "share/tubespark/conf/tubespark" in data


def test_testbed_installs_the_cluster_templates_where_conf_dir_looks(testbed_pyproject: dict) -> None:
    setuptools_cfg = testbed_pyproject["tool"]["setuptools"]
    assert any(fnmatch.fnmatchcase("tubespark_testbed", pat) for pat in setuptools_cfg["packages"]["find"]["include"])
    assert setuptools_cfg["package-data"]["tubespark_testbed"] == ["templates/*"]
    srcs = setuptools_cfg["data-files"]["share/tubespark/conf/tubemq"]
    assert any((ROOT / "testbed" / src).parent.resolve() == ROOT / "conf" / "tubemq" for src in srcs)
    config_py = (ROOT / "testbed" / "tubespark_testbed" / "config.py").read_text(encoding="utf-8")
    assert '"share" / "tubespark" / "conf" / "tubemq"' in config_py


def test_console_script_and_tool_config(pyproject: dict) -> None:
    assert pyproject["project"]["scripts"] == {"tubespark": "tubespark.cli:main"}
    tool = pyproject["tool"]
    pytest_cfg = tool["pytest"]["ini_options"]
    assert pytest_cfg["pythonpath"] == [".", "testbed"]
    assert {m.split(":")[0] for m in pytest_cfg["markers"]} >= {"integration", "spark"}
    assert not (ROOT / "pytest.ini").exists() and not (ROOT / "ruff.toml").exists(), "config lives in pyproject.toml"
    assert "tubespark/tubemq/wire/pb" in tool["ruff"]["extend-exclude"]
    assert tool["mypy"]["files"]
