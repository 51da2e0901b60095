"""The fenced code blocks of README.md and the documentation site (docs/**/*.md), and the marker each carries.

The rule (issue 39): a code block a reader may copy is either run by a test or says, visibly in the source,
why it is not. The marker is an HTML comment on the line right before the opening fence (GitHub and the
site render neither):

* ``<!-- run by: tests/integration/core/test_readme_example.py -->``: that test runs the block. The test
  takes its blocks through :func:`run_by` with its own path, so the marker is what selects the code it runs:
  a block marked for a test is a block that test runs, and a test that stopped asking for its blocks fails
  tests/unit/tooling/test_docs_site.py.
* ``<!-- not run: why -->``: not runnable as written (it needs a Spark cluster, installs packages, is sample
  output, ...); the reason is required and says where the same thing is tested, where it is.

tests/unit/tooling/test_docs_site.py fails on a block without either marker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_BY = re.compile(r"^\s*<!-- run by: (\S+) -->\s*$")
NOT_RUN = re.compile(r"^\s*<!-- not run: (.*?) -->\s*$")
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language, its code and its marker (``None``: unmarked)."""

    path: Path
    line: int
    """1-based line of the opening fence."""
    lang: str
    code: str
    run_by: str | None
    not_run: str | None

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    """README.md and every Markdown page of the site, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` (indented ones inside lists too), with the marker on the line before it."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence, lang = opening.groups()
        end = index + 1
        while end < len(lines) and not re.match(rf"^\s*{fence[0]}{{{len(fence)},}}\s*$", lines[end]):
            end += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[index + 1:end]]
        before = lines[index - 1] if index else ""
        run = RUN_BY.match(before)
        skip = NOT_RUN.match(before)
        found.append(Block(path, index + 1, lang, "\n".join(body) + "\n", run.group(1) if run else None,
                           skip.group(1).strip() if skip else None))
        index = end + 1
    return found


def run_by(path: Path, test_file: str) -> list[str]:
    """The code of the blocks of ``path`` marked ``run by: <test_file>`` (a path relative to the repository),
    in reading order: what that test runs."""
    return [block.code for block in blocks(path) if block.run_by == test_file]


def dangling_markers(path: Path) -> list[int]:
    """Lines of ``path`` holding a marker that no fence follows (a block removed, its marker left behind)."""
    lines = path.read_text().splitlines()
    return [number + 1 for number, line in enumerate(lines)
            if (RUN_BY.match(line) or NOT_RUN.match(line))
            and not (number + 1 < len(lines) and _FENCE.match(lines[number + 1]))]
