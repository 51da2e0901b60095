"""The test suite's Spark driver flags (tubespark_testbed/sparkjvm.py), without starting Spark."""

from __future__ import annotations

import os
from pathlib import Path

from tubespark_testbed import sparkjvm


def test_options_are_the_fast_flags_and_the_archive_quietly():
    assert sparkjvm.options(None) == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    with_archive = sparkjvm.options(Path("/cache/spark-cds-x.jsa")).split()
    assert with_archive[:2] == ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    assert "-XX:SharedArchiveFile=/cache/spark-cds-x.jsa" in with_archive and "-Xlog:cds=off" in with_archive


def test_apply_keeps_what_was_set_after_its_own_and_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(sparkjvm, "archive_path", lambda: None)
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Dmine=1")
    monkeypatch.delenv(sparkjvm.ENV, raising=False)
    assert sparkjvm.apply_to_environment() == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dmine=1"
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Dmine=1")
    monkeypatch.setenv(sparkjvm.ENV, "default")
    assert sparkjvm.apply_to_environment() is None
    assert os.environ["SPARK_SUBMIT_OPTS"] == "-Dmine=1"
