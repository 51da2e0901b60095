"""The HTTP helper (tubespark/core/http.py) and the TubeMQ admin clients on it, against a scripted local server:
what is retried (a connection never opened: always; a 5xx or a broken connection: queries only; a read that
timed out: never), that every call is bounded by its timeouts, and the one-line errors a user sees."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.doubles.fakepeer import closed_port_address
from tests.doubles.fakeweb import FormServer, Reply
from tubespark.core.http import RETRIES, post_form, post_form_json
from tubespark.tubemq.client.admin import BrokerAdmin, MasterAdmin
from tubespark.tubemq.errors import AdminApiError

OK = {"result": True, "errCode": 0, "errMsg": "OK", "data": []}


class Scripted(FormServer):
    """A web server answering each POST with the next of ``script`` (status, body; ``None``: drop the
    connection without answering), then ``OK``; ``forms`` holds every form it received."""

    def __init__(self) -> None:
        self.script: list[tuple[int, bytes] | None] = []
        super().__init__()

    def reply(self, form: dict[str, str]) -> Reply:
        step = self.script.pop(0) if self.script else (200, json.dumps(OK).encode())
        return None if step is None else (step[0], "text/html", step[1])


@pytest.fixture
def web() -> Iterator[Scripted]:
    server = Scripted()
    yield server
    server.close()


def _busy(times: int) -> list[tuple[int, bytes] | None]:
    return [(503, b"<html><title>Service Unavailable</title></html>")] * times


def test_a_query_answered_5xx_is_asked_again_and_its_answer_returned(web: Scripted) -> None:
    web.script = _busy(RETRIES)
    answer = MasterAdmin(web.url, "token")("admin_query_topic_deploy_info", topicName="t")
    assert answer == OK
    assert len(web.forms) == RETRIES + 1
    assert web.forms[-1] == {"method": "admin_query_topic_deploy_info", "topicName": "t"}  # no token on a query


def test_a_modify_call_answered_5xx_is_not_sent_again(web: Scripted) -> None:
    web.script = _busy(1)
    with pytest.raises(AdminApiError) as info:
        MasterAdmin(web.url, "token")("admin_add_broker_configure", brokerId=1)
    assert str(info.value) == (f"HTTP 503 from {web.url}/webapi.htm (admin_add_broker_configure): an HTML page "
                               f"('Service Unavailable'), not the admin API")
    assert len(web.forms) == 1
    assert web.forms[0]["confModAuthToken"] == "token" and web.forms[0]["modifyUser"] == "tubespark"


def test_a_query_still_5xx_after_the_retries_says_so_in_one_line(web: Scripted) -> None:
    web.script = _busy(RETRIES + 1)
    with pytest.raises(AdminApiError, match=r"^HTTP 503 from .*/ \(admin_query_offset\): an HTML page "
                                            r"\('Service Unavailable'\), not the admin API$"):
        BrokerAdmin(web.url)("admin_query_offset", groupName="g")
    assert len(web.forms) == RETRIES + 1


@pytest.mark.parametrize(("method", "tries"), [("admin_query_cluster_topic_view", RETRIES + 1),
                                              ("admin_delete_topic", 1)])
def test_a_connection_broken_mid_call_is_tried_again_only_for_a_query(web: Scripted, method: str,
                                                                      tries: int) -> None:
    web.script = [None] * (RETRIES + 1)
    with pytest.raises(AdminApiError, match=rf"^cannot reach {web.url}/webapi.htm \({method}\): "):
        MasterAdmin(web.url, "token")(method)
    assert len(web.forms) == tries


def test_a_closed_port_is_named_in_one_line_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing listens there: a second try a moment later changes nothing, and a planner probing a guessed web port
    (a master's 8080) must not wait out a backoff for it (half a second per call, many calls per CI run)."""
    url = f"http://{closed_port_address()}"
    started = time.monotonic()
    with caplog.at_level(logging.INFO), pytest.raises(AdminApiError) as info:
        MasterAdmin(url, "token")("admin_add_topic", topicName="t")
    text = str(info.value)
    assert text.startswith(f"cannot reach {url}/webapi.htm (admin_add_topic): ") and "Connection refused" in text
    assert "HTTPConnection" not in text and "Max retries" not in text and "\n" not in text, text
    assert time.monotonic() - started < 0.5 * 3  # one refused connect (ms), not the backoff of tries (~0.5 s)
    assert [r for r in caplog.records if "admin_add_topic at" in r.getMessage()] == [], "tried again"
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []  # a planner handles it: no warning


def test_a_server_that_never_answers_fails_within_its_read_timeout_once() -> None:
    """A read that timed out is not tried again: the caller's timeout bounds the call."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    started = time.monotonic()
    try:
        with pytest.raises(AdminApiError, match=r"Read timed out"):
            post_form(url, {"method": "admin_query_offset"}, timeout_s=0.5, idempotent=True, what="admin_query_offset",
                      error=AdminApiError)
        elapsed = time.monotonic() - started
    finally:
        server.close()
        for conn in accepted:
            conn.close()
    assert 0.5 <= elapsed < 1.5  # one read timeout (3x margin); each try of the read again would add 0.5 s


def test_an_answer_that_is_not_json_is_named(web: Scripted) -> None:
    web.script = [(200, b"not json at all")]
    with pytest.raises(AdminApiError, match=r"^non-JSON answer from .* \(q\): 'not json at all'$"):
        post_form_json(web.url, {}, timeout_s=2, idempotent=True, what="q", error=AdminApiError)


def test_a_redirect_is_the_answer_not_a_page_to_follow(web: Scripted) -> None:
    """A standby TubeMQ master answers every admin call 302 (to its active peer): the caller must see that answer
    (the test bed tells a standby by it), not whatever the redirect leads to. requests follows redirects unless
    told not to; the test bed's standby check timed out until it was told."""
    web.script = [(302, b"Please send your request to the master Node")]
    with pytest.raises(AdminApiError, match=r"HTTP 302 from .*Please send your request to the master Node"):
        MasterAdmin(web.url, "token")("admin_query_broker_run_status", brokerId=1)
    assert len(web.forms) == 1, "asked once: a redirect is no failure to try again"
