"""The shape issue 38 gave the planners, guarded: one stream engine and one batch engine for every broker, each
holding the broker's small object, never subclassed; nothing in the shared Spark layer that speaks for one broker.

Both checks failed on the code before: TubeMQ's, TANK's and RocketMQ's stream readers derived from
``StreamEngine``, and the engine's message about reused offsets named "TubeMQ's own durability window"."""

from __future__ import annotations

import ast
import re
from itertools import pairwise
from pathlib import Path

import pytest

from tubespark.rocketmq.spark.source import RocketMQDataSource
from tubespark.spark.broker import Broker
from tubespark.tank.spark.source import TankDataSource
from tubespark.tubemq.spark.source import TubeMQDataSource

PACKAGE = Path(__file__).resolve().parents[3] / "tubespark"
ENGINES = {"StreamEngine", "BatchEngine"}
BROKER_WORDS = re.compile(r"\b(TubeMQ|tubemq|RocketMQ|rocketmq|TANK|tank)\b")
SPEAKS_FOR_BROKERS = {"options.py", "tls_options.py"}
"""Shared modules whose strings name brokers by design: the option tables per broker, TLS option names."""


def _trees() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), str(path))) for path in sorted(PACKAGE.rglob("*.py"))]


def test_no_module_subclasses_an_engine():
    found = [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}" for path, tree in _trees()
             for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
             and any(isinstance(base, ast.Name) and base.id in ENGINES for base in node.bases)]
    assert found == [], f"an engine holds a broker's object instead: {found}"


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            ids.add(id(body[0].value))
    for node in ast.walk(tree):  # an attribute's docstring: a string statement right after an assignment
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for first, second in pairwise(body):
            if isinstance(first, (ast.Assign, ast.AnnAssign)) and isinstance(second, ast.Expr) \
                    and isinstance(second.value, ast.Constant):
                ids.add(id(second.value))
    return ids


def test_the_shared_spark_layer_says_nothing_in_one_brokers_name():
    found = []
    for path, tree in _trees():
        if path.parent != PACKAGE / "spark" or path.name in SPEAKS_FOR_BROKERS:
            continue
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and BROKER_WORDS.search(node.value):
                found.append(f"{path.name}:{node.lineno} {node.value[:80]!r}")
    assert found == [], f"a message of one broker in the shared layer: {found}"


@pytest.mark.parametrize("source", [TubeMQDataSource, TankDataSource, RocketMQDataSource])
def test_every_format_declares_its_broker_object(source):
    assert issubclass(source.adapter, Broker) and source.adapter.name == source.format
