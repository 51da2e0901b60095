"""An export's output appears whole or not at all (tubespark/apps/staging.py): issue 39 item 5, an interrupted
``tubespark backfill export`` left ``_temporary/`` in ``--output`` (and ``overwrite`` had deleted the old files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doubles.local_files import LocalFiles
from tubespark.apps.staging import StagedOutput, staging_path
from tubespark.errors import OptionError


def _write_job(path: str, *names: str) -> None:
    """What Spark leaves when a job is cut short: its files under _temporary/."""
    for name in names:
        target = Path(path) / "_temporary" / "0" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(name)


def _interrupted_job(staged: StagedOutput) -> None:
    with staged:
        _write_job(staged.path, "part-0.json")
        raise KeyboardInterrupt


def _committed_job(staged: StagedOutput) -> None:
    with staged:
        Path(staged.path).mkdir()
        (Path(staged.path) / "part-0.json").write_text("new")
        staged.commit()


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_staging_directory_is_a_hidden_sibling_of_the_output() -> None:
    assert staging_path("/data/events/", "ab12") == "/data/.events.tubespark-staging-ab12"
    assert staging_path("hdfs://nn:8020/x/out", "t") == "hdfs://nn:8020/x/.out.tubespark-staging-t"
    assert staging_path("out", "t") == ".out.tubespark-staging-t"


def test_an_interrupted_export_leaves_no_output_and_no_staging(tmp_path: Path) -> None:
    output = tmp_path / "export"
    with pytest.raises(KeyboardInterrupt):
        _interrupted_job(StagedOutput(LocalFiles(), str(output), replace=False))
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_overwrite_leaves_the_old_output_as_it_was(tmp_path: Path) -> None:
    output = tmp_path / "export"
    output.mkdir()
    (output / "old.json").write_text("old")
    with pytest.raises(KeyboardInterrupt):
        _interrupted_job(StagedOutput(LocalFiles(), str(output), replace=True))
    assert tree(tmp_path) == {"export/old.json": "old"}


def test_a_committed_overwrite_replaces_the_old_output(tmp_path: Path) -> None:
    output = tmp_path / "export"
    output.mkdir()
    (output / "old.json").write_text("old")
    _committed_job(StagedOutput(LocalFiles(), str(output), replace=True))
    assert tree(tmp_path) == {"export/part-0.json": "new"}


def test_a_refused_rename_puts_the_old_output_back(tmp_path: Path) -> None:
    output = tmp_path / "export"
    output.mkdir()
    (output / "old.json").write_text("old")
    with pytest.raises(OSError, match="could not rename"):
        _committed_job(StagedOutput(LocalFiles(fail_rename_to=str(output)), str(output), replace=True))
    assert tree(tmp_path) == {"export/old.json": "old"}


def test_an_existing_output_is_refused_before_any_work_naming_the_option_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "export").mkdir()
    with pytest.raises(OptionError, match=r"option --output: .*export exists; pass --mode overwrite"):
        StagedOutput(LocalFiles(), str(tmp_path / "export"), replace=False).check()
