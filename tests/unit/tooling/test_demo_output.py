"""The demo's lines: its lag line (issue 25 item 11: ``p0=3, p10000=0`` named partitions nobody had explained),
why a stream read nothing and its help (issue 39: "the stream read 0 events" and rc=1 with no reason given;
``tubespark demo --help`` said ``python -m tubespark_testbed demo``)."""

from __future__ import annotations

import contextlib
import io
import re
import time

import pytest
from tubespark_testbed.demo import Produced, format_group_lag, stage, why_nothing_read

from tubespark.cli import main as tubespark_main


def test_lag_line_totals_and_explains_partition_ids() -> None:
    answer = {"result": True, "dataSet": [{"topicName": "demo_events", "subInfo": [{"offsets": [
        {"partitionId": 10000, "offsetLag": 0}, {"partitionId": 0, "offsetLag": 84},
        {"partitionId": 30000, "offsetLag": 28}, {"partitionId": 20000, "offsetLag": 0}]}]}]}
    assert format_group_lag(answer) == ("group lag: 4 messages behind (by partition id, store*10000+partition: "
                                        "0: 3, 10000: 0, 20000: 0, 30000: 1)")


def test_a_group_that_never_committed() -> None:
    assert format_group_lag({"result": True, "dataSet": []}) == "group lag: not committed yet"


def test_a_stream_that_died_on_spark_s_start_up_timeout_says_so_and_where_the_cure_is() -> None:
    why = why_nothing_read(query_error="[STREAM_FAILED] Query [id = 1] terminated with exception: Python worker "
                                       "failed to connect back.", produced=Produced(sent=900), streamed_s=20)
    assert why.startswith("the stream stopped with an error: [STREAM_FAILED]")
    assert "docs/troubleshooting/busy-machine.md" in why


@pytest.mark.parametrize(("produced", "expected"), [
    (Produced(sent=12, error="cannot reach 127.0.0.1:8715"),
     "the producer stopped with an error after 12 messages: cannot reach 127.0.0.1:8715"),
    (Produced(), "the producer had not sent a message yet (the cluster took the whole time)"),
    (Produced(sent=3000), "the producer sent 3000 messages, but no micro-batch ended in the 15 s the stream ran"),
])
def test_a_stream_that_read_nothing_says_which_part_did_not_happen(produced: Produced, expected: str) -> None:
    assert why_nothing_read(query_error=None, produced=produced, streamed_s=15.2).startswith(expected)


def test_a_start_up_stage_says_it_is_still_going_and_how_long_it_took(capsys: pytest.CaptureFixture[str]) -> None:
    with stage("TubeMQ cluster start", every_s=0.05):
        time.sleep(0.12)
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"  \.\.\. TubeMQ cluster start: \d+ s so far", out[0]), out
    assert re.fullmatch(r"  TubeMQ cluster start: done in \d+ s", out[-1]), out


def test_tubespark_demo_help_names_the_command_the_user_typed() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        tubespark_main(["demo", "--help"])
    assert out.getvalue().startswith("usage: tubespark demo [-h] [--seconds SECONDS]"), out.getvalue()
