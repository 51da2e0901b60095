"""``tubespark backfill``'s help and progress summary (issue 25 item 11), without Spark."""

from __future__ import annotations

import argparse
import contextlib
import io
import time

import pytest

from tubespark.apps.backfill import parser
from tubespark.apps.progress import Progress


def help_text(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser().parse_args([*argv, "--help"])
    return out.getvalue()


@pytest.mark.parametrize("argv", [(), ("export",), ("publish",)])
def test_help_has_no_docstring_markup_and_every_option_says_what_it_is(argv: tuple[str, ...]) -> None:
    text = help_text(*argv)
    assert "``" not in text and "\\\n" not in text, text
    assert "exit codes:" in text
    commands = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        silent = [a.option_strings for a in command._actions if not a.help]
        assert not silent, (name, silent)


def test_each_command_lists_its_own_exit_codes() -> None:
    """Issue 39: ``backfill publish --help`` listed the export's exit codes (3, --on-unavailable-partitions)."""
    export, publish = (help_text(name).split("exit codes:")[1] for name in ("export", "publish"))
    assert "\n  3    with --on-unavailable-partitions skip" in export
    assert "\n  3 " not in publish and "unavailable" not in publish and "files" not in publish, publish
    assert "130  interrupted (Ctrl-C): nothing written, --output is as it was" in export
    assert "130  interrupted (Ctrl-C): the rows acknowledged before stay in the topic" in publish


def test_the_rate_is_over_the_time_tasks_ran_not_spark_s_start() -> None:
    progress = Progress(None, "export", poll_s=0.2)  # type: ignore[arg-type]
    t0 = progress.started
    progress.observe(t0 + 6.0, done=0, running=0)  # Spark starting: no task yet
    progress.observe(t0 + 6.8, done=0, running=2)
    progress.observe(t0 + 7.4, done=2, running=0)
    line = progress.summary(2000, 160_000, now=t0 + 7.5)  # 0.2 MB/s: 0.25 would round either way
    assert line == ("export: 2,000 rows, 0.2 MB in 7.5s; 2,500 rows/s, 0.2 MB/s over the 0.8s tasks ran (the first "
                    "6.8s: Spark starting its tasks)")


def test_a_job_too_quick_to_see_gets_the_rate_over_the_whole_time() -> None:
    progress = Progress(None, "publish")  # type: ignore[arg-type]
    assert progress.summary(100, 1_000_000, now=progress.started + 2.0) == (
        "publish: 100 rows, 1.0 MB in 2.0s (50 rows/s, 0.5 MB/s)")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Tracker:
    """Spark's status tracker with one stage of 4 tasks, 1 done and 2 running."""

    def __init__(self) -> None:
        self.sparkContext = self

    def statusTracker(self) -> _Tracker:  # noqa: N802 - PySpark's name
        return self

    def getActiveStageIds(self) -> list[int]:  # noqa: N802
        return [3]

    def getStageInfo(self, stage_id: int) -> argparse.Namespace:  # noqa: N802
        return argparse.Namespace(numCompletedTasks=1, numTasks=4, numActiveTasks=2)


def test_on_a_terminal_the_progress_is_one_line_updated_in_place_and_cleared() -> None:
    out = _Terminal()
    with Progress(_Tracker(), "export", out=out, poll_s=0.01):  # type: ignore[arg-type]
        time.sleep(0.2)
    text = out.getvalue()
    assert "\n" not in text and text.startswith("\r\x1b[K  export: 1/4 tasks, 0s") and text.endswith("\r\x1b[K")


def test_after_ctrl_c_the_progress_prints_nothing_more() -> None:
    out = _Terminal()
    with Progress(_Tracker(), "export", out=out, poll_s=0.01, quiet=lambda: True):  # type: ignore[arg-type]
        time.sleep(0.1)
    assert out.getvalue() == ""
