"""The pure parts of tubespark.tubemq.spark.monitoring: offsets -> backlog, progress -> samples, tables."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from tubespark.tubemq.errors import AdminApiError
from tubespark.tubemq.spark.monitoring import (
    LagHistory,
    LagListener,
    PartitionLag,
    backlog_messages,
    broker_offsets,
    format_lag_table,
    parse_admin_offsets,
    parse_offsets,
    sample_from_progress,
)

K0, K1 = "1:t:0", "1:t:1"


def test_parse_offsets_accepts_tubemq_offsets_only() -> None:
    assert parse_offsets(json.dumps({K0: 28, K1: 0})) == {K0: 28, K1: 0}
    assert parse_offsets({K0: 56}) == {K0: 56}
    assert parse_offsets({K0: 56, K0 + "#last": 7, "1:t#origin": 20261125074442}) == {K0: 56}  # marks are no lag
    for other in (None, "", "not json", "{}", '{"topic": {"0": 5}}', '{"a": 1}', json.dumps({K0: "x"}), "42"):
        assert parse_offsets(other) is None


def test_backlog_is_in_messages_and_never_negative() -> None:
    assert backlog_messages({K0: 28, K1: 280}, {K0: 28 * 11, K1: 140}) == {K0: 10, K1: 0}
    assert backlog_messages({}, {K0: 280}) == {K0: 0}  # unknown end: nothing known to be behind


def _progress(batch: int, end: dict, latest: dict | None, rows: int = 5) -> dict:
    return {"id": "q1", "batchId": batch, "timestamp": "2024-05-01T10:00:00.000Z",
            "sources": [{"description": "tubemq", "endOffset": json.dumps(end),
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


def test_history_is_bounded() -> None:
    history = LagHistory(max_samples=2)
    for batch in range(5):
        history.add("q", sample_from_progress(_progress(batch, {K0: 0}, {K0: 28})))
    assert [s.batch_id for s in history.samples("q")] == [3, 4]
    assert history.samples("nope") == [] and LagHistory().samples() == []


def test_partition_lag_and_table() -> None:
    known = PartitionLag(K0, 28, 28 * 11, 28 * 3)
    unknown = PartitionLag(K1, 0, 280, None)
    assert known.backlog == 8 and known.retained == 10
    assert unknown.backlog is None
    assert PartitionLag(K0, 280, 560, 0).backlog == 10  # committed below min: only what is retained
    table = format_lag_table([known, unknown])
    lines = table.splitlines()
    assert lines[0].split() == ["partition", "min_offset", "max_offset", "committed_offset", "backlog_messages"]
    assert lines[1].split() == [K0, "28", "308", "84", "8"]
    assert lines[2].split() == [K1, "0", "280", "?", "?"]
    assert "offsets are positions in the broker's index (28 per message); the backlog counts messages" in table
    assert "total backlog: 8 messages" in table and "pass --broker-web" in table


def test_lag_table_with_broker_web_says_the_group_never_committed() -> None:
    """Issue 25 item 7: with --broker-web given, an unknown committed offset is a group that never committed
    there; the table must not tell the user to pass the option they passed."""
    table = format_lag_table([PartitionLag(K0, 0, 280, None), PartitionLag(K1, 0, 56, 28)], group="my_etl",
                             broker_web=True)
    assert "--broker-web" not in table
    assert "group my_etl has no committed offset on the broker for 1 of 2 partitions (it never committed" in table
    assert "total backlog: 1 messages" in table


class _JettyPage(http.server.BaseHTTPRequestHandler):
    """What a web server that is not a broker's admin API answers: an HTML error page."""

    def do_POST(self) -> None:
        body = (b"<html>\n<head>\n<meta http-equiv=\"Content-Type\" content=\"text/html\"/>\n<title>Error 404 Not "
                b"Found</title>\n</head>\n<body><h2>HTTP ERROR 404</h2>\n<pre>Not Found</pre>\n<hr><i><small>"
                b"Powered by Jetty://</small></i></body>\n</html>\n")
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_lag_with_a_wrong_broker_web_url_says_what_to_pass() -> None:
    """Issue 25 item 7: a URL that is no broker admin API gives one line naming the page and the fix, not the
    page's markup."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _JettyPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(AdminApiError) as info:
            broker_offsets(url, "g", "t")
    finally:
        server.shutdown()
        server.server_close()
    text = str(info.value)
    assert "<" not in text and "\n" not in text, text
    assert f"the broker web URL {url} did not answer as a TubeMQ broker's admin API: HTTP 404 from {url}/ " in text
    assert "an HTML page ('Error 404 Not Found'), not the admin API" in text
    assert "--broker-web http://BROKER:8081" in text


def test_parse_admin_offsets() -> None:
    answer = {"result": True, "dataSet": [{"topicName": "t", "subInfo": [{"offsets": [
        {"partitionId": 0, "curOffset": 280, "maxOffset": 560, "offsetLag": 280},
        {"partitionId": 1, "curOffset": -1, "maxOffset": 140, "offsetLag": 56},
        {"partitionId": 2}]}]}, {"topicName": "other", "subInfo": [{"offsets": [{"partitionId": 0, "curOffset": 1}]}]}]}
    assert parse_admin_offsets(answer, "t") == {0: 280, 1: 84}
    assert parse_admin_offsets({}, "t") == {}
