"""Thin clients for the master's and the broker's HTTP admin APIs.

Both servers answer errors with HTTP 200 and ``{"result": false, "errCode": ..., "errMsg": ...}``, so the
status code alone says nothing; every call here checks ``result`` and raises :class:`AdminApiError`.
HTTP itself is core's helper (:mod:`tubespark.core.http`: timeouts, a bounded retry of the queries, one
wording of the failures). Monitoring reads the broker's offsets through it, and the local test cluster
(``tubespark_testbed``) deploys brokers and topics with it.
"""

from __future__ import annotations

import json
from typing import Any

from tubespark.core.http import post_form_json
from tubespark.tubemq.errors import AdminApiError

DEFAULT_HTTP_TIMEOUT_S = 10.0
ADMIN_USER = "tubespark"

# Read-only master methods. Everything else is a modify call that needs the auth token and an
# operator name; query handlers would treat createUser/modifyUser as *filters*, so we must not add them.
_QUERY_PREFIXES = ("admin_query_", "admin_get_", "admin_list_")


def http_get_json(url: str, params: dict[str, Any], *, timeout: float = DEFAULT_HTTP_TIMEOUT_S) -> Any:
    """POST ``params`` as a form to ``url`` and parse the JSON answer; :class:`AdminApiError` when that fails.

    POST rather than GET so long values (``offsetJsonInfo``) are not limited by URL length; both servers
    read form fields from either. A query (``admin_query_...``) changes nothing, so a 5xx answer is asked
    again (:mod:`tubespark.core.http`); a modify call is sent again only when its connection never opened.
    """
    method = str(params.get("method"))
    form = {k: _to_param(v) for k, v in params.items() if v is not None}
    return post_form_json(url, form, timeout_s=timeout, idempotent=method.startswith(_QUERY_PREFIXES),
                          what=method, error=AdminApiError)


def _to_param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set)):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _check(answer: Any, method: str, where: str) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise AdminApiError(f"{where} {method}: unexpected answer {answer!r}")
    if answer.get("result") is not True:
        raise AdminApiError(
            f"{where} {method} failed: errCode={answer.get('errCode')} errMsg={answer.get('errMsg')}"
        )
    return answer


class MasterAdmin:
    """``http://<master>:<webPort>/webapi.htm?method=...``; adds auth token and operator to modify calls."""

    def __init__(self, web_url: str, auth_token: str, *, timeout: float = DEFAULT_HTTP_TIMEOUT_S) -> None:
        self.url = web_url.rstrip("/") + "/webapi.htm"
        self.auth_token = auth_token
        self.timeout = timeout

    def __call__(self, method: str, **params: Any) -> dict[str, Any]:
        """Run ``method``; return the parsed JSON; raise :class:`AdminApiError` when ``result`` is false."""
        timeout = params.pop("_timeout", self.timeout)
        if not method.startswith(_QUERY_PREFIXES):
            params.setdefault("confModAuthToken", self.auth_token)
            params.setdefault("createUser", ADMIN_USER)
            params.setdefault("modifyUser", ADMIN_USER)
        answer = http_get_json(self.url, {"method": method, **params}, timeout=timeout)
        return _check(answer, method, "master")


class BrokerAdmin:
    """``http://<broker>:<webPort>/?method=...``: no token; modify calls still want ``modifyUser``."""

    def __init__(self, web_url: str, *, timeout: float = DEFAULT_HTTP_TIMEOUT_S) -> None:
        self.url = web_url.rstrip("/") + "/"
        self.timeout = timeout

    def __call__(self, method: str, **params: Any) -> dict[str, Any]:
        """Run ``method``; return the parsed JSON; raise :class:`AdminApiError` when ``result`` is false."""
        timeout = params.pop("_timeout", self.timeout)
        if not method.startswith(_QUERY_PREFIXES):
            params.setdefault("modifyUser", ADMIN_USER)
        answer = http_get_json(self.url, {"method": method, **params}, timeout=timeout)
        return _check(answer, method, "broker")
