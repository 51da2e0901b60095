"""Every row of the fault tables is backed by a named test that exists (issue 37 part 8).

The tables, on the documentation site's Guarantees page (docs/guarantees.md: `### TubeMQ faults`, `## TANK
guarantees`, `## RocketMQ guarantees`; they were the README's until issue 39), say what tubespark
does when something breaks; their last column names the tests that prove it. A promise whose test was renamed or
removed would go on reading as proven, so each cell must name at least one test file under ``tests/`` that exists
(``path.py``, a path relative to ``tests/``, ``tests/unit/...`` or ``tests/integration/...``, or a bare file name
that is unique in its broker's integration folder), and each ``file.py::name`` must name a test function (or a
test defined under that name) in that file; ``file.py::prefix*`` names the tests whose names start so.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TESTS = ROOT / "tests"
PAGE = ROOT / "docs" / "guarantees.md"
TABLE_HEADINGS = ("### TubeMQ faults", "## TANK guarantees", "## RocketMQ guarantees")
_REF = re.compile(r"`([\w/.-]+\.py)(?:::(\w+\*?))?")


def _rows() -> list[tuple[str, str]]:
    """(heading, row) of every row of the fault tables."""
    lines = PAGE.read_text().splitlines()
    out: list[tuple[str, str]] = []
    heading = ""
    in_table = False
    for line in lines:
        if line.startswith("#"):
            heading = line.strip()
        if not line.startswith("|"):
            in_table = False
        elif line.startswith("| situation |"):
            in_table = heading in TABLE_HEADINGS
        elif in_table and not line.startswith("|---"):
            out.append((heading, line))
    return out


def _resolve(path: str, heading: str) -> list[Path]:
    """The test files ``path`` may mean."""
    candidates = [ROOT / path, TESTS / path, TESTS / "integration" / path, TESTS / "unit" / path]
    broker = dict(zip(TABLE_HEADINGS, ("tubemq", "tank", "rocketmq"), strict=True))
    candidates.append(TESTS / "integration" / broker[heading] / path)
    found = [c for c in candidates if c.is_file()]
    if not found and "/" not in path:
        found = sorted(TESTS.rglob(path))
    return found


ROWS = _rows()


def test_the_tables_are_found() -> None:
    headings = {heading for heading, _ in ROWS}
    assert headings == set(TABLE_HEADINGS), f"fault tables not found under {set(TABLE_HEADINGS) - headings}"


@pytest.mark.parametrize(("heading", "row"), ROWS, ids=[f"{h.strip('# ')}: {r[2:60]}" for h, r in ROWS])
def test_every_row_names_a_test_that_exists(heading: str, row: str) -> None:
    proved_by = row.rstrip(" |").rsplit(" | ", 1)[-1]
    refs = _REF.findall(proved_by)
    tests = [(path, name) for path, name in refs if Path(path).name.startswith("test_")]
    assert tests, f"no test named for: {row[:160]}"
    for path, name in tests:
        files = _resolve(path, heading)
        assert files, f"{path} (named for: {row[:100]}) is no file under tests/"
        if name:  # ``name*``: any test whose name starts so
            pattern = re.escape(name[:-1]) + r"\w*" if name.endswith("*") else re.escape(name) + r"\b"
            defined = [f for f in files if re.search(rf"^\s*(async )?def {pattern}|^\s*{pattern} = ", f.read_text(),
                                                     re.M)]
            assert defined, f"{path}::{name} (named for: {row[:100]}) is not defined there"
