"""The TANK and RocketMQ tables of the documentation site hold to the code: every test a guarantee row names
exists (and the named function is in it), and every error class a troubleshooting row names is one tubespark
raises. The tables were the README's until issue 39; they are on docs/guarantees.md (`## TANK guarantees`,
`## RocketMQ guarantees`) and docs/troubleshooting/index.md (`## TANK`, `## RocketMQ`).

Why: those tables are written by hand next to the generated option tables (scripts/docs_options.py); a
renamed test or error class would leave a promise that nothing holds any more.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tubespark.errors
import tubespark.rocketmq.errors
import tubespark.tank.errors

ROOT = Path(__file__).resolve().parents[3]
GUARANTEES = ROOT / "docs" / "guarantees.md"
TROUBLESHOOTING = ROOT / "docs" / "troubleshooting" / "index.md"


def section(page: Path, title: str) -> str:
    """The text under ``## <title>`` of ``page`` up to the next heading."""
    return page.read_text().split(f"\n## {title}\n", 1)[1].split("\n#", 1)[0]


def table_cells(text: str, column: int) -> list[str]:
    """Cell ``column`` of every body row of the markdown tables in ``text``."""
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    return [re.split(r"(?<!\\)\|", row)[column + 1] for row in rows[1:]]


def cited_tests(cell: str) -> list[tuple[Path, str | None]]:
    """``(file, function or None)`` for each test reference in a "held by" cell; ``::name`` alone continues
    the file before it; a path without ``tests/`` is under tests/integration/."""
    found: list[tuple[Path, str | None]] = []
    for ref in re.findall(r"`([^`]+)`", cell):
        if ref.startswith("::"):
            found.append((found[-1][0], ref[2:]))
            continue
        path, _, name = ref.partition("::")
        full = ROOT / path if path.startswith("tests/") else ROOT / "tests" / "integration" / path
        found.append((full, name or None))
    return found


@pytest.mark.parametrize("title", ["TANK guarantees", "RocketMQ guarantees"])
def test_every_guarantee_names_tests_that_exist(title):
    cells = table_cells(section(GUARANTEES, title), 2)
    assert len(cells) >= 10, cells
    for cell in cells:
        refs = cited_tests(cell)
        assert refs, f"a row of {title} names no test: {cell}"
        for path, name in refs:
            assert path.is_file(), f"{title}: {path.relative_to(ROOT)} does not exist"
            if name:
                assert re.search(rf"^def {re.escape(name)}\(", path.read_text(), re.M), \
                    f"{title}: {path.relative_to(ROOT)} has no test {name}"


ERROR_MODULES = (tubespark.errors, tubespark.rocketmq.errors, tubespark.tank.errors)


@pytest.mark.parametrize("title", ["TANK", "RocketMQ"])
def test_every_troubleshooting_error_is_a_tubespark_error(title):
    cells = table_cells(section(TROUBLESHOOTING, title), 1)
    assert len(cells) >= 8, cells
    names = [name for cell in cells for name in re.findall(r"`+(\w+Error): ", cell)]
    assert len(names) >= 8, names
    for name in names:
        kind = next((getattr(m, name) for m in ERROR_MODULES if hasattr(m, name)), None)
        assert isinstance(kind, type) and issubclass(kind, tubespark.errors.TubeSparkError), name
