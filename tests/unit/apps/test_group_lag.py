"""``tubespark lag``'s pure parts (tubespark.apps.group_lag): a TubeMQ group's partitions -> backlog, the table,
the broker admin API's answers."""

from __future__ import annotations

import pytest

from tests.doubles.fakeweb import FormServer, Reply
from tubespark.apps.group_lag import PartitionLag, broker_offsets, format_lag_table, parse_admin_offsets
from tubespark.tubemq.errors import AdminApiError

K0, K1 = "1:t:0", "1:t:1"


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


class _JettyPage(FormServer):
    """What a web server that is not a broker's admin API answers: an HTML error page."""

    def reply(self, form: dict[str, str]) -> Reply:
        return 404, "text/html", (
            b"<html>\n<head>\n<meta http-equiv=\"Content-Type\" content=\"text/html\"/>\n<title>Error 404 Not "
            b"Found</title>\n</head>\n<body><h2>HTTP ERROR 404</h2>\n<pre>Not Found</pre>\n<hr><i><small>"
            b"Powered by Jetty://</small></i></body>\n</html>\n")


def test_lag_with_a_wrong_broker_web_url_says_what_to_pass() -> None:
    """Issue 25 item 7: a URL that is no broker admin API gives one line naming the page and the fix, not the
    page's markup."""
    with _JettyPage() as server, pytest.raises(AdminApiError) as info:
        broker_offsets(server.url, "g", "t")
    url = server.url
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
