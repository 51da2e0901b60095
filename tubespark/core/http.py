"""The one way tubespark speaks HTTP: a form POST with a JSON answer, over a ``requests`` session.

Why a helper and not ``requests.post`` at each call site: every call needs the same three things, and each
was easy to forget. An explicit connect *and* read timeout (a web port behind a black-holed route or a
server that accepts and never answers would otherwise hold a Spark planner or a CLI without end). A bounded
retry of what is safe to retry: a connection whose opening timed out sent nothing, so it is tried again
for every call (one refused is not: nothing listens there); a broken connection or a 5xx answer only for a
call the caller says is idempotent (a query), since a modify call may have been carried out. A read that
timed out is not tried again: a server that did not answer within the timeout rarely does the next time, and
the caller's timeout would silently
become several. So a call takes at most ``RETRIES + 1`` connect timeouts (plus the backoff) and one read
timeout: with the default 10 s, no longer than a urllib call took before. And one wording of the failures,
raised as the caller's own typed error (:class:`~tubespark.tubemq.errors.AdminApiError` for TubeMQ's admin
APIs), so a user sees the URL, the operation and why, in one line, never a page of HTML.

The retries are core's :class:`~tubespark.core.retry.RetryPolicy` (jittered backoff, one INFO line per
retry), not urllib3's ``Retry`` on the adapter: urllib3 logs a WARNING for every connection it retries, so a
planner that asks a master which is down would warn twice per call in the user's Spark log for what the
planner then handles (tests/unit/tubemq/test_placement.py checks such a read warns about nothing). The
session's adapter retries nothing itself (``max_retries=0``), so each try is exactly one request.

A session per call: admin calls are rare (planning, monitoring, the test bed's deployments), and a session
shared across threads or inherited by a forked Spark worker is a hazard for no gain; within a call the
session keeps the connection for the tries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tubespark.core.retry import RetryPolicy, call_with_retry
from tubespark.errors import TubeSparkError

if TYPE_CHECKING:  # requests is imported by the first call: ~0.17 CPU-s that defining or planning a source never
    import requests  # needs (docs/troubleshooting/busy-machine.md)

CONNECT_TIMEOUT_S = 3.0
"""The longest a connection may take to open (less when the caller's timeout is shorter): a web port that
does not answer SYN costs this, not the whole read timeout, per try."""
RETRIES = 2
"""Tries after the first for a connection that could not be opened (any call), and for a broken connection
or a 5xx answer (idempotent calls only)."""
RETRIED_STATUSES = frozenset((500, 502, 503, 504))


def _never_opened(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection that could not be opened (unresolvable, connect timeout): nothing was sent,
    so any call may be sent again."""
    import requests
    from urllib3.exceptions import ConnectTimeoutError

    if not isinstance(exc, requests.ConnectionError):
        return False
    reason = getattr(exc.args[0], "reason", exc.args[0]) if exc.args else None
    return isinstance(exc, requests.ConnectTimeout) or isinstance(reason, ConnectTimeoutError)


def _refused(exc: BaseException) -> bool:
    """Whether the connection was refused (ECONNREFUSED anywhere in its causes): not tried again, since nothing
    listens on that port now, which a second try a moment later does not change, and a caller probing a guessed
    web port (a master's 8080) must learn that at once, not after the backoff."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or "Connection refused" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _worth_again(idempotent: bool) -> Callable[[BaseException], bool]:
    import requests

    def again(exc: BaseException) -> bool:
        if _refused(exc):  # nothing listens there: trying again a moment later changes nothing
            return False
        if _never_opened(exc):
            return True
        if not idempotent or isinstance(exc, requests.ReadTimeout):
            return False
        if isinstance(exc, requests.HTTPError):
            return exc.response is not None and exc.response.status_code in RETRIED_STATUSES
        return isinstance(exc, requests.ConnectionError)  # broken mid-call: a query is simply asked again
    return again


def post_form(url: str, form: Mapping[str, str], *, timeout_s: float, idempotent: bool, what: str,
              error: Callable[[str], TubeSparkError]) -> bytes:
    """POST ``form`` (URL-encoded) to ``url`` and return the answer's body.

    ``timeout_s`` bounds each read (and, up to :data:`CONNECT_TIMEOUT_S`, each connect); ``idempotent``: the
    call may be sent again after a broken connection or a 5xx answer. ``what`` names the operation in errors.
    Raises ``error(message)`` when the server cannot be reached or answers an HTTP error status.
    """
    import requests
    from requests.adapters import HTTPAdapter

    timeout = (min(CONNECT_TIMEOUT_S, timeout_s), timeout_s)
    policy = RetryPolicy(attempts=RETRIES + 1, backoff_s=0.2, max_backoff_s=1.0, retry_on=_worth_again(idempotent))
    with requests.Session() as session:
        adapter = HTTPAdapter(max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)

        def attempt() -> bytes:
            # a standby TubeMQ master answers 302 to its active peer: that is its answer, not a page to follow
            response = session.post(url, data=dict(form), timeout=timeout, allow_redirects=False)
            if idempotent and response.status_code in RETRIED_STATUSES:
                response.raise_for_status()  # an HTTPError, to try again
            if response.status_code >= 300:
                raise error(f"HTTP {response.status_code} from {url} ({what}): {describe_body(response.content)}")
            return response.content

        try:
            return call_with_retry(attempt, policy, what=f"{what} at {url}")
        except requests.HTTPError as exc:  # still 5xx after the retries
            status = exc.response.status_code if exc.response is not None else 0
            body = exc.response.content if exc.response is not None else b""
            raise error(f"HTTP {status} from {url} ({what}): {describe_body(body)}") from None
        except requests.RequestException as exc:
            raise error(f"cannot reach {url} ({what}): {_reason(exc)}") from exc


def post_form_json(url: str, form: Mapping[str, str], *, timeout_s: float, idempotent: bool, what: str,
                   error: Callable[[str], TubeSparkError]) -> Any:
    """:func:`post_form`, the answer parsed as JSON; ``error`` also when it is not JSON."""
    body = post_form(url, form, timeout_s=timeout_s, idempotent=idempotent, what=what, error=error)
    try:
        return json.loads(body)
    except ValueError:
        raise error(f"non-JSON answer from {url} ({what}): {describe_body(body)}") from None


_TITLE = re.compile(rb"<title>(.*?)</title>", re.I | re.S)
_WRAPPING = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>: |HTTPS?Connection(?:Pool)?\(host=[^)]*\): ")


def describe_body(raw: bytes) -> str:
    """An answer that is not the admin API's JSON, in a line: an HTML page (a web server's error page, another
    server's console) by its title, not its markup; anything else by its first 200 characters."""
    head = raw[:4096].lstrip()
    if head[:1] == b"<":
        title = _TITLE.search(head)
        name = " ".join(title.group(1).decode(errors="replace").split()) if title else ""
        return f"an HTML page ({name!r}), not the admin API" if name else "an HTML page, not the admin API"
    return repr(raw[:200].decode(errors="replace"))


def _reason(exc: requests.RequestException) -> str:
    """Why a request failed, without requests' and urllib3's wrapping (the URL is in the message already):
    "HTTPConnectionPool(host=..., port=...): Max retries exceeded with url: ... (Caused by NewConnectionError(
    "HTTPConnection(host=..., port=...): Failed to establish a new connection: [Errno 111] Connection refused"))"
    says "Failed to establish a new connection: [Errno 111] Connection refused"."""
    cause: object = exc.args[0] if exc.args else exc
    cause = getattr(cause, "reason", cause)  # urllib3's MaxRetryError carries the last failure
    return _WRAPPING.sub("", str(cause))
