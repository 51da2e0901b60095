"""The layer rules of ARCHITECTURE.md, checked on every import in the package (lazy ones included).

A broker folder stacks ``errors`` (its own error classes) < ``wire`` (bytes <-> messages, no sockets) <
``net`` < ``client`` < ``spark``, and holds nothing else; all of them build on the shared ``tubespark.errors``,
``tubespark.version``, ``tubespark.core`` and ``tubespark.formats``; a broker's ``errors`` imports nothing but the
shared errors; the shared Spark layer ``tubespark.spark`` knows no broker; no broker imports another.
Applications (``tubespark.apps``: the backfill, lag, the format registry) sit above every broker and may import
any of them; only the package root and the command line (``tubespark``, ``tubespark.cli``, ``tubespark.__main__``)
import applications, and nothing imports those three: no layer and no application imports the package root.
The connector never imports the test bed. The checker is plain AST walking, so a violation names file, line and
the rule it breaks.

Two more rules keep modules apart: no import cycle between the package's modules (``TYPE_CHECKING`` and lazy
imports count: a cycle is two modules that cannot be read, or changed, one without the other), and no module
uses a ``_private`` name of another module (an attribute another module defines and this one does not, or a
``_name`` imported from outside its own package): what a module offers the others is its public face.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "tubespark"
BROKER_LAYERS = ("errors", "wire", "net", "client", "spark")
SHARED = ("tubespark.errors", "tubespark.version", "tubespark.core", "tubespark.formats")
SPARK_LIBS = ("pyspark", "pyarrow", "pandas")
ENTRY_MODULES = ("tubespark", "tubespark.__main__", "tubespark.cli")
"""The package root and the command line: above everything, imported by nothing in the package."""
APPS = "tubespark.apps"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str | ast.Module, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """Every module ``source`` (text, or its syntax tree) imports, as absolute names, with line numbers."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source) if isinstance(source, str) else source):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            found.extend((node.lineno, f"{name}.{alias.name}") for alias in node.names)
    return found


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _broker_and_layer(module: str) -> tuple[str, str] | None:
    """``("tubemq", "client")`` for ``tubespark.tubemq.client.group``; ``None`` outside broker folders."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "tubespark" or parts[1] in ("core", "spark", "formats", "errors", "version",
                                                                 "cli", "__main__", "apps"):
        return None
    return parts[1], (parts[2] if len(parts) > 2 else "")


def violation(module: str, imported: str) -> str | None:
    """Why ``module`` may not import ``imported``, or ``None`` when the import is allowed."""
    if _within(imported, "tubespark_testbed"):
        return "the connector never imports the test bed"
    if module in ENTRY_MODULES:
        return None
    if imported in ENTRY_MODULES or imported.startswith("tubespark.__"):
        return ("no layer or application imports the package root or the command line (they sit above every "
                "layer and import the applications; the version is tubespark.version, register is in "
                "tubespark.apps.registry)")
    if _within(imported, APPS) and not _within(module, APPS):
        return ("only the package root and the command line import tubespark.apps (applications sit above the "
                "brokers: a layer that needs one's code holds it itself)")
    if _within(module, APPS):
        return None  # an application may use every layer below it, and Spark
    own = _broker_and_layer(module)
    spark_allowed = _within(module, "tubespark.spark") or (own is not None and own[1] == "spark")
    if any(_within(imported, lib) for lib in SPARK_LIBS) and not spark_allowed:
        return "only Spark layers import pyspark/pyarrow/pandas"
    if own is not None and own[1] == "wire" and imported.partition(".")[0] in ("socket", "ssl", "threading"):
        return "the wire codec is bytes only: no sockets or threads"
    if not _within(imported, "tubespark"):
        return None
    if own is not None and own[1] == "errors" and not _within(imported, "tubespark.errors"):
        return "a broker's errors module imports only the shared errors (it is the bottom of the broker's layers)"
    if any(_within(module, shared) for shared in SHARED):
        if any(_within(imported, shared) for shared in SHARED):
            return None
        return "shared foundations import only shared foundations"
    if _within(module, "tubespark.spark"):
        if any(_within(imported, shared) for shared in (*SHARED, "tubespark.spark")):
            return None
        return "the shared Spark layer knows no broker"
    if own is None:
        return None
    if any(_within(imported, shared) for shared in (*SHARED, "tubespark.spark")):
        return None if own[1] == "spark" or not _within(imported, "tubespark.spark") else \
            "only a broker's Spark layer imports the shared Spark layer"
    target = _broker_and_layer(imported)
    if target is None:
        return f"{imported} is not a layer a broker may import"
    if target[0] != own[0]:
        return "no broker imports another broker"
    if own[1] not in BROKER_LAYERS or target[1] not in BROKER_LAYERS:
        return None if own[1] not in BROKER_LAYERS else f"{imported} is above the broker's layers"
    if BROKER_LAYERS.index(target[1]) > BROKER_LAYERS.index(own[1]):
        return f"{own[1]} may not import the higher layer {target[1]}"
    return None


def _package_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "pb" not in p.relative_to(PACKAGE).parts)


@cache
def _sources() -> dict[str, tuple[Path, ast.Module]]:
    """Every module of the package, parsed once: module name -> (file, syntax tree)."""
    return {module_name(p): (p, ast.parse(p.read_text())) for p in _package_files()}


def import_graph(sources: Mapping[str, tuple[Path, str | ast.Module]]) -> dict[str, set[str]]:
    """Which of the given modules each one imports (``from a.b import c`` is module ``a.b.c`` when there is
    one, else ``a.b``); lazy and ``TYPE_CHECKING`` imports included."""
    graph: dict[str, set[str]] = {}
    for module, (path, source) in sources.items():
        graph[module] = set()
        for _line, name in imports_of(source, module, path.name == "__init__.py"):
            parts = name.split(".")
            target = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in sources),
                          None)
            if target is not None and target != module:
                graph[module].add(target)
    return graph


def import_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle (as a path that ends where it starts) per back edge a depth-first walk of ``graph`` meets."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the walk's path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target, path)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    return cycles


def private_names(tree: ast.Module) -> set[str]:
    """The ``_names`` (not dunders) a module defines: functions, classes, attributes and variables it sets."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Attribute, ast.Name)) and isinstance(node.ctx, ast.Store):
            names.add(node.attr if isinstance(node, ast.Attribute) else node.id)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def private_reaches(module: str, tree: ast.Module, others: Mapping[str, set[str]],
                    is_package: bool = False) -> list[str]:
    """Where ``module`` uses another module's ``_private`` name: ``x._name`` (``x`` not ``self``/``cls``)
    of a name only other modules of the package (``others``: module -> its private names) define, or
    ``from m import _name`` unless ``m`` is its own package (a package's private modules and names are its
    modules' to share, as ``wire/twin.py`` loads ``wire/_native``)."""
    own = private_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                and node.attr not in own):
            owners = sorted(other for other, names in others.items() if other != module and node.attr in names)
            if owners:
                found.append(f"line {node.lineno}: {ast.unparse(node)} (private to {', '.join(owners)})")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _within(node.module or "", "tubespark"):
            package = module if is_package else module.rpartition(".")[0]
            for alias in node.names:
                if (alias.name.startswith("_") and not alias.name.startswith("__")
                        and node.module != package):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name} (private to "
                                 f"{node.module})")
    return found


def test_every_import_respects_the_layers() -> None:
    broken = []
    for path in _package_files():
        module = module_name(path)
        for line, imported in imports_of(path.read_text(), module, path.name == "__init__.py"):
            why = violation(module, imported)
            if why:
                broken.append(f"{path.relative_to(ROOT)}:{line} imports {imported}: {why}")
    assert not broken, "\n".join(broken)


def test_no_import_cycle_between_the_packages_modules() -> None:
    graph = import_graph(_sources())
    assert not import_cycles(graph), "\n".join(" -> ".join(cycle) for cycle in import_cycles(graph))


def test_no_module_uses_another_modules_private_names() -> None:
    sources = _sources()
    privates = {module: private_names(tree) for module, (_path, tree) in sources.items()}
    broken = [f"{path.relative_to(ROOT)} {where}" for module, (path, tree) in sources.items()
              for where in private_reaches(module, tree, privates, path.name == "__init__.py")]
    assert not broken, "\n".join(broken)


def test_the_cycle_checker_finds_a_cycle_through_a_type_checking_import() -> None:
    sources: dict[str, tuple[Path, str | ast.Module]] = {
        "tubespark.b.client.producer": (Path("producer.py"), "from tubespark.b.client.batch import Batch"),
        "tubespark.b.client.batch": (Path("batch.py"), "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                         "    from tubespark.b.client.producer import Producer"),
        "tubespark.b.client.common": (Path("common.py"), "import tubespark.b.client.batch"),
    }
    assert import_cycles(import_graph(sources)) == [
        ["tubespark.b.client.batch", "tubespark.b.client.producer", "tubespark.b.client.batch"]]
    del sources["tubespark.b.client.batch"]
    assert import_cycles(import_graph(sources)) == []


@pytest.mark.parametrize(("source", "reached"), [
    ("def send(producer):\n    producer._shield(part, exc)", "producer._shield"),
    ("class Batch:\n    def run(self):\n        self.producer._acknowledged_by(part)",
     "self.producer._acknowledged_by"),
    ("from tubespark.b.client.producer import _log_placement", "import _log_placement"),
    ("def f(p):\n    return p._visit_token", "p._visit_token"),
])
def test_the_private_checker_catches_a_reach_into_another_module(source: str, reached: str) -> None:
    others = {"tubespark.b.client.producer": {"_shield", "_acknowledged_by", "_visit_token", "_log_placement"}}
    found = private_reaches("tubespark.b.client.batch", ast.parse(source), others)
    assert len(found) == 1 and reached in found[0], found


@pytest.mark.parametrize("source", [
    "class A:\n    def f(self):\n        return self._shield",  # its own
    "class A:\n    def __init__(self):\n        self._shield = 1\n    def same(self, other):\n"
    "        return other._shield",  # a name this module defines: another instance of its own class
    "def f(item):\n    return item._replace(x=1)",  # a namedtuple's API, defined by no module of the package
    "import sys\nsys._getframe()",
    "from tubespark.b.wire import _native",  # a private module of its own package
    "from __future__ import annotations",
])
def test_the_private_checker_allows_what_is_not_another_modules(source: str) -> None:
    others = {"tubespark.b.client.producer": {"_shield"}, "tubespark.b.wire": {"_native"}}
    assert private_reaches("tubespark.b.wire.twin", ast.parse(source), others) == []


def test_the_checker_sees_the_package() -> None:
    modules = {module_name(p) for p in _package_files()}
    assert {"tubespark.errors", "tubespark.tubemq.wire.frame", "tubespark.tubemq.net.connection",
            "tubespark.tubemq.client.group", "tubespark.tubemq.spark.source", "tubespark.tank.wire.bundle",
            "tubespark.tank.net.connection", "tubespark.tank.client.ranges", "tubespark.tank.spark.source",
            "tubespark.rocketmq.wire.frame", "tubespark.rocketmq.net.connection", "tubespark.rocketmq.client.ranges",
            "tubespark.rocketmq.spark.source", "tubespark.version", "tubespark.tubemq.errors", "tubespark.tank.errors",
            "tubespark.rocketmq.errors", "tubespark.apps.registry", "tubespark.apps.backfill", "tubespark.apps.lag",
            "tubespark.apps.group_lag", "tubespark.cli"} <= modules


def test_a_broker_folder_holds_only_its_layers() -> None:
    """An application in a broker's folder (the backfill job once lived in tubespark/tubemq/) sits below nothing
    that may import it: it goes in tubespark.apps."""
    strays = sorted(str(path.relative_to(ROOT)) for path in _package_files()
                    if (own := _broker_and_layer(module_name(path))) is not None and own[1] not in ("", *BROKER_LAYERS))
    assert not strays, strays


@pytest.mark.parametrize(("module", "source", "rule"), [
    ("tubespark.tubemq.wire.frame", "from tubespark.tubemq.net.connection import Connection", "higher layer"),
    ("tubespark.tubemq.net.master", "import tubespark.tubemq.client.group", "higher layer"),
    ("tubespark.tubemq.client.group", "from tubespark.tubemq.spark import options", "higher layer"),
    ("tubespark.tubemq.client.group", "def f():\n    from tubespark.tubemq.spark.options import X", "higher layer"),
    ("tubespark.apps.lag", "from tubespark_testbed.local import LocalCluster", "test bed"),
    ("tubespark.core.retry", "from tubespark.tubemq.wire import errcodes", "shared foundations"),
    ("tubespark.spark.arrow", "from tubespark.tubemq.wire.message import ReceivedMessage", "knows no broker"),
    ("tubespark.tank.client.fetch", "from tubespark.tubemq.client.broker import BrokerClient", "another broker"),
    ("tubespark.tubemq.wire.frame", "import socket", "bytes only"),
    ("tubespark.rocketmq.wire.frame", "import threading", "bytes only"),
    ("tubespark.rocketmq.net.connection", "from tubespark.rocketmq.client.client import RocketMQClient",
     "higher layer"),
    ("tubespark.rocketmq.client.ranges", "from tubespark.tubemq.client.broker import BrokerClient", "another broker"),
    ("tubespark.tubemq.client.ranges", "import pyarrow as pa", "Spark layers"),
    ("tubespark.tubemq.wire.frame", "from ..net import connection", "higher layer"),
    ("tubespark.tubemq.client.common", "from tubespark import register", "package root"),
    ("tubespark.tubemq.client.common", "from tubespark import __version__", "package root"),
    ("tubespark.core.framed", "import tubespark", "package root"),
    ("tubespark.tubemq.errors", "from tubespark.tubemq.wire.errcodes import ErrCode", "only the shared errors"),
    ("tubespark.tank.errors", "from tubespark.core.retry import RetryPolicy", "only the shared errors"),
    ("tubespark.rocketmq.errors", "from tubespark.tank.errors import TankProtocolError", "only the shared errors"),
    ("tubespark.tank.wire.codes", "from tubespark.rocketmq.errors import NoPermissionError", "another broker"),
    ("tubespark.errors", "from tubespark.tubemq.errors import RpcError", "shared foundations"),
    ("tubespark.tubemq.backfill", "def main():\n    import tubespark", "package root"),
    ("tubespark.tubemq.spark.batch_reader", "from tubespark.cli import main", "command line"),
    ("tubespark.apps.backfill", "import tubespark", "package root"),
    ("tubespark.apps.lag", "from tubespark import register", "package root"),
    ("tubespark.apps.registry", "from tubespark.__main__ import main", "package root"),
    ("tubespark.tubemq.spark.stream_reader", "from tubespark.apps.lag import LagListener", "import tubespark.apps"),
    ("tubespark.tubemq.client.group", "def f():\n    from tubespark.apps import group_lag", "import tubespark.apps"),
    ("tubespark.spark.source", "from tubespark.apps.registry import register", "import tubespark.apps"),
    ("tubespark.core.options", "import tubespark.apps.backfill", "import tubespark.apps"),
])
def test_the_checker_catches_each_kind_of_break(module: str, source: str, rule: str) -> None:
    reasons = [violation(module, name) for _line, name in imports_of(source, module)]
    assert any(reason and rule in reason for reason in reasons), reasons


@pytest.mark.parametrize(("module", "source"), [
    ("tubespark.tubemq.spark.stream_reader", "from tubespark.tubemq.client.group import GroupSession"),
    ("tubespark.tubemq.spark.read_task", "from tubespark.spark.arrow import x\nimport pyarrow"),
    ("tubespark.tubemq.net.connection", "from tubespark.core.framed import FramedConnection"),
    ("tubespark.tubemq.client.broker", "from tubespark.tubemq.wire.pb import broker_service_pb2"),
    ("tubespark.cli", "from tubespark.apps.group_lag import group_lag"),
    ("tubespark.cli", "from tubespark import __version__"),
    ("tubespark", "from tubespark.apps.registry import register"),
    ("tubespark.apps.backfill", "from tubespark.apps.registry import register\nimport pyspark"),
    ("tubespark.apps.backfill", "from tubespark.tubemq.client.store_counts import exact_messages"),
    ("tubespark.apps.lag", "from tubespark.tank.spark.options import TERMS\nfrom tubespark.spark.planning import x"),
    ("tubespark.apps.group_lag", "from tubespark.tubemq.client.broker import BrokerClient"),
    ("tubespark.tubemq.client.common", "from tubespark.version import __version__"),
    ("tubespark.tubemq.wire.frame", "from tubespark.tubemq.errors import BadTokenError"),
    ("tubespark.tank.spark.read_task", "from tubespark.tank.errors import LeaderMovedError"),
    ("tubespark.rocketmq.net.connection", "from ..errors import NoPermissionError"),
    ("tubespark.rocketmq.errors", "from tubespark.errors import BrokerError"),
])
def test_the_checker_allows_downward_imports(module: str, source: str) -> None:
    assert [violation(module, name) for _line, name in imports_of(source, module)] == [None] * len(
        imports_of(source, module))
