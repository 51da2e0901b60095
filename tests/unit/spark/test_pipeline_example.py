"""The declarative pipeline example (examples/pipelines/tubemq_summary), without Spark: its spec loads with
PySpark's own loader, and its definitions file declares the table, sink and flow that
tests/integration/spark/test_pipelines.py runs, with options format("tubemq") accepts.

A fake ``spark`` records what the query functions ask of it; PySpark's registry context collects what the
``dp`` decorators register (what ``spark-pipelines`` does before it sends them to the server).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from pyspark.pipelines.cli import load_pipeline_spec
from pyspark.pipelines.graph_element_registry import (
    GraphElementRegistry,
    graph_element_registration_context,
)
from pyspark.pipelines.output import Sink, StreamingTable

from tests.doc_blocks import ROOT
from tubespark.tubemq.spark.options import TubeMQOptions

PROJECT = ROOT / "examples" / "pipelines" / "tubemq_summary"


class Recorder(GraphElementRegistry):
    def __init__(self) -> None:
        self.outputs: dict[str, Any] = {}
        self.flows: dict[str, Any] = {}

    def register_output(self, output: Any) -> None:
        self.outputs[output.name] = output

    def register_flow(self, flow: Any) -> None:
        self.flows[flow.name] = flow

    def register_auto_cdc_flow(self, flow: Any) -> None:
        raise AssertionError("the example has no Auto CDC flow")

    def register_sql(self, sql_text: str, file_path: Path) -> None:
        raise AssertionError("the example has no SQL file")


class FakeSpark:
    """``spark.readStream.format(...).option(...).load().selectExpr(...)`` and ``spark.sql(...)``, recorded."""

    def __init__(self) -> None:
        self.source_format: str | None = None
        self.options: dict[str, str] = {}
        self.sql_text: str | None = None

    @property
    def readStream(self) -> FakeSpark:  # noqa: N802 - PySpark's name
        return self

    def format(self, name: str) -> FakeSpark:
        self.source_format = name
        return self

    def option(self, key: str, value: str) -> FakeSpark:
        self.options[key] = value
        return self

    def load(self) -> FakeSpark:
        return self

    def selectExpr(self, *columns: str) -> str:  # noqa: N802 - PySpark's name
        return "events"

    def sql(self, text: str) -> str:
        self.sql_text = text
        return "summary"


def load_definitions(monkeypatch: pytest.MonkeyPatch, spark: FakeSpark) -> Recorder:
    monkeypatch.setenv("TUBEMQ_MASTER", "10.0.0.1:8715")
    monkeypatch.setenv("PIPELINE_SOURCE_TOPIC", "clicks_in")
    monkeypatch.setenv("PIPELINE_SUMMARY_TOPIC", "clicks_per_minute")
    path = PROJECT / "transformations" / "summary.py"
    module_spec = importlib.util.spec_from_file_location("summary", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module.__dict__["spark"] = spark  # what spark-pipelines does (pyspark/pipelines/cli.py)
    registry = Recorder()
    with graph_element_registration_context(registry):
        module_spec.loader.exec_module(module)
    return registry


def test_the_spec_loads_with_an_absolute_storage_and_the_definitions_folder() -> None:
    spec = load_pipeline_spec(PROJECT / "spark-pipeline.yml")
    assert spec.name == "tubemq_summary"
    assert spec.storage.startswith("file:///"), "Spark 4.3 refuses a relative storage (PIPELINE_STORAGE_ROOT_INVALID)"
    assert [library.include for library in spec.libraries] == ["transformations/**/*"]
    assert sorted(p.name for p in PROJECT.glob("transformations/**/*") if p.is_file()) == ["summary.py"]


def test_the_definitions_declare_a_streaming_table_a_tubemq_sink_and_a_flow_into_it(monkeypatch) -> None:
    spark = FakeSpark()
    registry = load_definitions(monkeypatch, spark)
    assert set(registry.outputs) == {"events", "tubemq_summary"}
    assert isinstance(registry.outputs["events"], StreamingTable)
    sink = registry.outputs["tubemq_summary"]
    assert isinstance(sink, Sink) and sink.format == "tubemq"
    assert dict(sink.options) == {"master": "10.0.0.1:8715", "topic": "clicks_per_minute"}
    assert {name: flow.target for name, flow in registry.flows.items()} == {
        "events": "events", "per_minute_counts": "tubemq_summary"}

    assert registry.flows["events"].func() == "events" and spark.source_format == "tubemq"
    assert spark.options["topic"] == "clicks_in" and spark.options["master"] == "10.0.0.1:8715"
    assert registry.flows["per_minute_counts"].func() == "summary"
    assert "FROM STREAM(events) WATERMARK msgTime" in (spark.sql_text or "")


def test_the_read_and_sink_options_are_ones_format_tubemq_accepts(monkeypatch) -> None:
    """A misspelt or misplaced option in the example fails here, with the OptionError a run would raise."""
    spark = FakeSpark()
    registry = load_definitions(monkeypatch, spark)
    registry.flows["events"].func()
    read = TubeMQOptions.from_raw(spark.options, mode="read")
    assert read.topics == ("clicks_in",) and read.group == "pipeline_summary"
    write = TubeMQOptions.from_raw(dict(registry.outputs["tubemq_summary"].options), mode="write")
    assert write.topics == ("clicks_per_minute",)
