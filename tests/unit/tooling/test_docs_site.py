"""The documentation site builds strictly, and every code block of it and of the README is run or says why not.

Issue 39 item 2: the README became a front door and the rest a MkDocs (Material) site under docs/. What CI
holds it to:

* ``mkdocs build --strict`` passes: mkdocs.yml's ``validation`` settings make a link to a missing page, a
  link to an anchor no heading makes, an absolute link and a page left out of the nav warnings, and
  ``--strict`` fails on any warning. A second build of a two-page site with a broken anchor shows those
  settings do catch one. Links to other sites are not fetched (CI is offline); they are not checked.
* Every fenced block of README.md and docs/**/*.md has a marker on the line before it (tests/doc_blocks.py):
  ``<!-- run by: <test> -->``, where that test reads the page's blocks through ``doc_blocks.run_by``, or
  ``<!-- not run: <why> -->``.
* The one block whose runner is this file (Troubleshooting's ``unwrap`` example) runs here, against the text
  Spark gives a driver for a tubespark error raised in a Python worker.

The build takes about 3-5 s and needs nothing but the ``test`` extra (mkdocs-material).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import yaml
from markdown.extensions.toc import slugify

from tests.doc_blocks import ROOT, blocks, dangling_markers, doc_files, run_by
from tubespark.errors import BrokerUnavailableError, TubeSparkError, UnknownTopicError

ME = "tests/unit/tooling/test_docs_site.py"
QUIET = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about MkDocs 2, printed on every build


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``config`` (not ``-q``: it hides the warnings ``--strict`` counts, so a broken
    link passed)."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=120, cwd=config.parent, env=QUIET)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "options" / "index.html").is_file()
    assert (tmp_path / "site" / "performance" / "2026-11-25-steady-b.png").is_file()  # the charts come along
    # ARCHITECTURE.md stays at the root and is included, not copied: its text is on the How it works page
    assert "tubespark speaks each broker" in (tmp_path / "site" / "architecture" / "index.html").read_text()


def test_the_validation_settings_fail_a_broken_anchor_and_a_missing_page(tmp_path: Path) -> None:
    """The site's own settings, on a site of two pages: a link to an anchor its target page lacks fails the
    strict build, and so does a link to a page that does not exist; fixing both makes it pass."""
    settings = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config = {key: settings[key] for key in ("theme", "validation")}
    config.update(site_name="check", docs_dir="docs", nav=["index.md", "other.md"])
    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A heading\n")
    page = tmp_path / "docs" / "index.md"
    for body, fails_on in [("[x](other.md#no-such-heading)", "no-such-heading"), ("[x](gone.md)", "gone.md")]:
        page.write_text(f"# Home\n\n{body}\n")
        done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
        assert done.returncode != 0 and fails_on in done.stderr, done.stderr[-2000:]
    page.write_text("# Home\n\n[x](other.md#a-heading)\n")
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-2000:]


_POINTER = re.compile(r"docs/([\w/.-]+\.md)(?:#([\w-]+))?")


def test_every_pointer_into_the_docs_names_a_page_and_heading_that_exist() -> None:
    """Error messages, docstrings and config examples send users to ``docs/<page>.md#<anchor>`` (issue 39 moved
    the README's sections there): each page must exist and each anchor be one of its headings' (slugged as the
    site's table of contents does), so following a message's pointer lands on the right place."""
    sources = [path for folder in ("tubespark", "tests", "scripts", "testbed", "bench", "conf", "protos")
               for path in (ROOT / folder).rglob("*") if path.is_file() and path.suffix not in {".pyc", ".so", ".jar"}]
    pointers = [(source, match) for source in [*sources, ROOT / "ARCHITECTURE.md", ROOT / "README.md"]
                for match in _POINTER.finditer(source.read_text(errors="replace"))]
    assert len(pointers) > 50, len(pointers)
    for source, match in pointers:
        page = ROOT / "docs" / match.group(1)
        where = f"{source.relative_to(ROOT)}: {match.group(0)}"
        assert page.is_file(), f"{where}: no such page"
        if match.group(2):
            text = page.read_text()
            anchors = {slugify(heading, "-") for heading in re.findall(r"^#+ (.+?)\s*$", text, re.M)}
            assert match.group(2) in anchors | set(re.findall(r'id="([^"]+)"', text)), f"{where}: no such heading"

def _all_blocks() -> list:
    return [block for path in doc_files() for block in blocks(path)]


def test_every_code_block_is_run_by_a_test_or_marked_not_run() -> None:
    every = _all_blocks()
    assert len(every) >= 30, len(every)  # the walker finds the blocks (README alone has 8)
    unmarked = [block.where() for block in every if block.run_by is None and block.not_run is None]
    assert not unmarked, ("code blocks neither run by a test nor marked: put <!-- run by: tests/...py --> (and have "
                          "that test run it through tests/doc_blocks.run_by) or <!-- not run: why --> on the line "
                          f"before each: {unmarked}")
    assert not [block.where() for block in every if block.not_run is not None and len(block.not_run) < 10], \
        "a <!-- not run: --> marker must say why"
    dangling = {str(path.relative_to(ROOT)): lines for path in doc_files() if (lines := dangling_markers(path))}
    assert not dangling, f"markers with no code block right after them: {dangling}"


def test_each_block_marked_run_by_a_test_is_read_by_that_test() -> None:
    """The named test exists and takes that page's blocks through ``run_by``: a block marked for a test that does
    not read its page would claim a run that never happens."""
    for block in _all_blocks():
        if block.run_by is None:
            continue
        test = ROOT / block.run_by
        assert test.is_file() and test.name.startswith("test_"), f"{block.where()}: {block.run_by} is no test file"
        source = test.read_text()
        page = block.path.relative_to(ROOT / "docs").as_posix() if block.path.parent != ROOT else block.path.name
        assert "run_by(" in source and page in source, \
            f"{block.where()} is marked run by {block.run_by}, which does not read {page}'s blocks"


def test_the_readme_is_a_front_door() -> None:
    """At most ~300 lines, the three brokers named in its first paragraph, a venv in its install."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    first = readme.split("\n\n", 2)[1]
    assert all(name in first for name in ("TubeMQ", "TANK", "RocketMQ")), first
    assert "python3 -m venv .venv && . .venv/bin/activate" in readme


# --- Troubleshooting's unwrap example ------------------------------------------------------------------------


class _SparkError(Exception):
    """Stands for Spark's exception on the driver: only the Python worker's traceback text reaches it."""


def _spark_failing_with(text: str) -> object:
    """A ``spark`` whose ``read.format(...).option(...)...load().count()`` raises ``text`` as Spark would."""

    class Chain:
        def __getattr__(self, name: str) -> object:
            return self

        def __call__(self, *args: object, **kwargs: object) -> object:
            return self

        def count(self) -> int:
            raise _SparkError(text)

    return Chain()


def _worker_trace(error: BaseException) -> str:
    """The text of Spark's exception for ``error`` raised in a Python worker (as tests/unit/core/test_errors.py
    makes it: the worker's formatted traceback inside Spark's message, the JVM's stack after it)."""
    try:
        raise error
    except BaseException:  # noqa: BLE001 - formatted, as PySpark's worker does
        trace = traceback.format_exc()
    return (f"An exception was thrown from the Python worker:\n{trace}\nJVM stacktrace:\n"
            "org.apache.spark.api.python.PythonException: ...\n\tat org.apache.spark.api.python.BasePythonRunner\n")


@pytest.mark.parametrize(("raised", "printed"), [
    (UnknownTopicError(431, "topic events is not deployed: check the topic option", broker="TubeMQ"), "fix the job: "),
    (BrokerUnavailableError("broker 1:127.0.0.1:8123 was still unreachable after 900 s; start it"),
     "try again later: "),
], ids=["a mistake", "a retriable error"])
def test_the_troubleshooting_unwrap_block_sorts_the_errors_as_it_says(raised: TubeSparkError, printed: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    [code] = run_by(ROOT / "docs/troubleshooting/index.md", ME)
    exec(code, {"spark": _spark_failing_with(_worker_trace(raised))})  # the page's own block
    assert capsys.readouterr().out.strip() == f"{printed}{raised}"


def test_the_troubleshooting_unwrap_block_raises_what_it_cannot_sort() -> None:
    [code] = run_by(ROOT / "docs/troubleshooting/index.md", ME)
    with pytest.raises(_SparkError):  # not a tubespark error at all: re-raised as it came
        exec(code, {"spark": _spark_failing_with(_worker_trace(ValueError("something else")))})
