"""tubespark.apps.lag: a query's per-partition lag from Spark's progress, for every format tubespark registers."""

from __future__ import annotations

import json

from tubespark.apps.lag import (
    OFFSET_FORMS,
    LagHistory,
    LagListener,
    form_of,
    parse_offsets,
    progress_lag,
    sample_from_progress,
)

K0, K1 = "1:demo:0", "1:demo:10000"  # TubeMQ keys: brokerId:topic:partitionId
STREAM = "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStreamWithTriggerAvailableNow@1a2b3c"
"""How Spark's progress describes every Python streaming source: by its JVM object, never by its format."""


def test_parse_offsets_accepts_tubespark_offsets_only() -> None:
    assert parse_offsets(json.dumps({K0: 28, K1: 0})) == {K0: 28, K1: 0}
    assert parse_offsets({K0: 56}) == {K0: 56}
    assert parse_offsets({K0: 56, K0 + "#last": 7, "1:demo#origin": 20261125074442}) == {K0: 56}  # marks are no lag
    assert parse_offsets({"events:0": 5, "events:0#from": 2, "#deferrals": 9}) == {"events:0": 5}  # TANK
    assert parse_offsets({"orders:broker-a:3": 17}) == {"orders:broker-a:3": 17}  # RocketMQ
    for other in (None, "", "not json", "{}", '{"topic": {"0": 5}}', '{"a": 1}', json.dumps({K0: "x"}), "42",
                  json.dumps({"popBatch": 3, "popRun": "ab12"}), json.dumps({"#deferrals": 9})):
        assert parse_offsets(other) is None


def test_each_format_is_told_by_its_keys_and_offset_steps() -> None:
    assert form_of({K0: 280, K1: 0}).format == "tubemq"  # type: ignore[union-attr]
    assert form_of({"events:0": 5}).format == "tank"  # type: ignore[union-attr]
    assert form_of({"orders:broker-a:0": 56}).format == "rocketmq"  # type: ignore[union-attr]
    # TubeMQ's shape, but TubeMQ offsets are multiples of 28 (positions of 28-byte index records): a RocketMQ
    # topic named "1" on a broker named "demo"
    assert form_of({K0: 56}, {K0: 57}).format == "rocketmq"  # type: ignore[union-attr]
    assert form_of({K0: 5, "events:0": 5}) is None and form_of({}) is None  # one source is one format


def test_the_lag_knows_every_format_tubespark_registers() -> None:
    """A fourth broker registered without its offset form would give no lag: this fails first."""
    from tubespark.apps.registry import data_sources

    assert {form.format for form in OFFSET_FORMS} == {source.name() for source in data_sources()}


def _progress(batch: int, end: dict, latest: dict | None, rows: int = 5) -> dict:
    return {"id": "q1", "batchId": batch, "timestamp": "2024-05-01T10:00:00.000Z",
            "sources": [{"description": STREAM, "endOffset": json.dumps(end),
                         "latestOffset": json.dumps(latest) if latest is not None else None,
                         "numInputRows": rows, "inputRowsPerSecond": "NaN", "processedRowsPerSecond": 12.5}]}


def test_sample_from_progress_dict() -> None:
    sample = sample_from_progress(_progress(3, {K0: 280, K1: 28}, {K0: 560, K1: 28}))
    assert sample is not None
    assert sample.batch_id == 3 and sample.num_input_rows == 5
    assert sample.backlog == {K0: 10, K1: 0} and sample.total_backlog == 10
    assert sample.input_rows_per_second == 0.0 and sample.processed_rows_per_second == 12.5
    assert sample.at == 1714557600.0
    # no latestOffset reported (older PySpark): backlog 0 rather than a guess
    assert sample_from_progress(_progress(4, {K0: 280}, None)).backlog == {K0: 0}
    # never negative; a partition without an end yet (unknown where the query stands) is not counted behind
    assert sample_from_progress(_progress(5, {K0: 560}, {K0: 280, K1: 280})).backlog == {K0: 0, K1: 0}


def test_sample_ignores_other_sources() -> None:
    progress = {"batchId": 1, "sources": [{"endOffset": '{"kafka_topic": {"0": 10}}', "numInputRows": 3}]}
    assert sample_from_progress(progress) is None
    assert sample_from_progress(json.dumps(_progress(1, {K0: 0}, {K0: 28}))).backlog == {K0: 1}


class _Obj:
    def __init__(self, **kw) -> None:
        self.__dict__.update(kw)


def test_listener_records_history_per_query_from_progress_objects() -> None:
    listener = LagListener()
    for batch, end in enumerate((0, 280, 560)):
        source = _Obj(endOffset=json.dumps({K0: end}), latestOffset=json.dumps({K0: 560}), numInputRows=10,
                      inputRowsPerSecond=5.0, processedRowsPerSecond=7.0)
        progress = _Obj(id="abc", batchId=batch, timestamp=f"2024-05-01T10:00:0{batch}.000Z", sources=[source])
        listener.onQueryProgress(_Obj(progress=progress))
    samples = listener.history.samples("abc")
    assert [s.total_backlog for s in samples] == [20, 10, 0]
    assert listener.history.latest_backlog() == {K0: 0}
    rows = listener.history.to_rows("abc")
    assert len(rows) == 3 and rows[0]["partition"] == K0 and rows[0]["inputRowsPerSecond"] == 5.0


def _listen(progresses: list[_Obj]) -> LagListener:
    listener = LagListener()
    for progress in progresses:
        listener.onQueryProgress(_Obj(progress=progress))
    return listener


def _stream_progress(query: str, batch: int, *sources: tuple[dict, dict]) -> _Obj:
    """A progress object as PySpark hands a listener: one source per (endOffset, latestOffset)."""
    return _Obj(id=query, batchId=batch, timestamp=f"2024-05-01T10:00:0{batch}.000Z", sources=[
        _Obj(description=STREAM, endOffset=json.dumps(end), latestOffset=json.dumps(latest), numInputRows=30,
             inputRowsPerSecond=3.0, processedRowsPerSecond=6.0) for end, latest in sources])


def test_listener_records_a_tank_querys_backlog() -> None:
    """TANK offsets are sequence numbers under ``topic:partition`` keys (one ``:``): before the lag was broker-
    neutral the listener took them for no tubespark source and recorded nothing for a TANK query."""
    a, b = "events:0", "events:1"
    marks = {f"{a}#last": 811, f"{a}#from": 70, "#deferrals": 4001}  # the shared engine's marks, in every format
    listener = _listen([_stream_progress("tank-q", batch, ({a: end, b: 40, **marks}, {a: 130, b: 40}))
                        for batch, end in enumerate((70, 100, 130))])
    assert [s.backlog for s in listener.history.samples("tank-q")] == [{a: 60, b: 0}, {a: 30, b: 0}, {a: 0, b: 0}]
    assert listener.history.samples("tank-q")[0].num_input_rows == 30


def test_listener_records_a_rocketmq_querys_backlog_in_messages() -> None:
    """RocketMQ queue offsets step by one a message: before, they were divided by TubeMQ's 28 (30 behind read as
    1, 3 as 0)."""
    a, b = "orders:broker-a:0", "orders:broker-b:1"
    listener = _listen([_stream_progress("rmq-q", 7, ({a: 100, b: 57}, {a: 130, b: 60}))])
    assert listener.history.latest_backlog("rmq-q") == {a: 30, b: 3}
    assert progress_lag(json.dumps({"batchId": 7, "sources": [
        {"description": STREAM, "endOffset": {a: 100, b: 57}, "latestOffset": {a: 130, b: 60}}]})) == {a: 30, b: 3}


def test_a_query_over_several_formats_counts_each_in_its_own_steps() -> None:
    """A query joining a TubeMQ and a TANK stream: 28 offset units a message on the one, 1 on the other."""
    progress = _stream_progress("both", 1, ({K0: 280}, {K0: 560}), ({"events:0": 5}, {"events:0": 9}))
    assert _listen([progress]).history.latest_backlog("both") == {K0: 10, "events:0": 4}


def test_history_is_bounded() -> None:
    history = LagHistory(max_samples=2)
    for batch in range(5):
        history.add("q", sample_from_progress(_progress(batch, {K0: 0}, {K0: 28})))
    assert [s.batch_id for s in history.samples("q")] == [3, 4]
    assert history.samples("nope") == [] and LagHistory().samples() == []


