"""The first line of every user-facing error says what happened and what to do (issue 25, item 5).

A user sees our error as the last line of Spark's traceback (or its first, through ``tubespark.errors.unwrap``):
that one line must carry the fix, not only the symptom. Two checks:

* every message template that constructs a user-facing error in the package (read from the source, so a new
  raise site is held to it too) has an action in its first line: an imperative (``set ...``, ``check ...``,
  ``use ...``, ``start ...``) or the form an option expects (``expected ...``, ``needs ...``);
* the error paths that need no cluster are walked for real (option parsing, TLS failures, the brokers' answer
  codes, an unreachable master, a foreign checkpoint, a partial batch read, Spark's wrapper) and the first
  line of what they raise is held to the same rule.
"""

from __future__ import annotations

import ast
import re
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.doubles.fakepeer import closed_port_address
from tubespark.core.tls import handshake_timeout, tls_failure
from tubespark.errors import TubeSparkError, unwrap
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.wire import codes as rocketmq_codes
from tubespark.spark.origins import Origin, OriginMarks
from tubespark.spark.unavailable import settle_unavailable
from tubespark.tank.spark.options import TankOptions
from tubespark.tank.wire import codes as tank_codes
from tubespark.tubemq.client.common import check
from tubespark.tubemq.net.master import MasterChannel
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.errcodes import ErrCode
from tubespark.tubemq.wire.pb import master_service_pb2 as mpb

PACKAGE = Path(__file__).resolve().parents[3] / "tubespark"

_DO = ("set|use|pass|check|start|create|deploy|give|name|point|wait|retry|run|install|add|remove|fix|ask|map|"
       "make|renew|connect|fill|call|raise|lower|delete|choose|read|write")
ACTION = re.compile(rf"(?:(?:^|[:;.(,]\s*|\b(?:or|and|then|to)\s+)(?:{_DO})|\bexpected|\bneeds?|\bmust|"
                    rf"\btakes?|\bdid you mean)\b", re.IGNORECASE)
"""An action in a line: an imperative at the start of a clause, or the form an option expects."""

USER_FACING = frozenset({
    "OptionError", "DataLossError", "ForeignCheckpointError", "UnknownTopicError", "AuthError", "BrokerError",
    "BrokerUnavailableError", "NoMasterAvailableError", "NotAMasterError", "NoNameServerAvailableError", "TlsError",
    "PartitionsUnavailableError", "AvailableNowIncompleteError", "UnsupportedSparkError", "RangeReadError",
    "MessageTooLargeError", "GroupConflictError", "NeverAnsweredError",
})
"""Errors a user meets and can act on. Not here: the codec's (bytes that do not decode: a bug or a broken
peer, nothing to set), the retriable ones the layers retry themselves (busy, not registered, no data), the
InLong encoder's (PayloadEncodeError names the record field at fault) and the admin API's (AdminApiError
relays the master's own answer)."""
BROKER_ERRORS = frozenset({"UnknownTopicError", "AuthError", "BrokerError", "GroupConflictError"})
"""Classes whose message is the second argument (after the code) and whose ``advice`` joins it."""
BUILT_BY_A_HELPER = {("core/tls.py", "TLS to {} failed: {}"): "TLS verify 10"}
"""Templates whose action comes from a helper's text the scan cannot follow -> the walked path below that
raises it."""


def first_line_says_what_to_do(text: str) -> bool:
    return bool(ACTION.search(text.split("\n", 1)[0]))


# --- every construction in the source ------------------------------------------------------------------


def _constants() -> dict[str, dict[str, str]]:
    """Module (path relative to the package) -> its module-level string constants."""
    found: dict[str, dict[str, str]] = {}
    for path in PACKAGE.rglob("*.py"):
        values: dict[str, str] = {}
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                text = _literal(node.value, {})
                if text is not None:
                    values.update({t.id: text for t in targets if isinstance(t, ast.Name)})
        found[str(path.relative_to(PACKAGE))] = values
    return found


def _literal(node: ast.expr, names: dict[str, str]) -> str | None:
    """A string expression's text with every value it formats as ``{}`` (a known constant as its text; a
    variable named like a fix, ``hint``/``advice``, as ``{hint}``, which the rule reads as an action)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_literal(v, names) or "" if isinstance(v, ast.Constant) else _formatted(v, names)
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left, names), _literal(node.right, names)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.IfExp):
        return _literal(node.body, names)
    return None


def _formatted(node: ast.expr, names: dict[str, str]) -> str:
    value = node.value if isinstance(node, ast.FormattedValue) else node
    if isinstance(value, ast.Name):
        if value.id in names:
            return names[value.id]
        if re.search(r"hint|advice", value.id, re.IGNORECASE):
            return "; check {hint}"
    return "{}"


def _imported(tree: ast.Module, constants: dict[str, dict[str, str]]) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tubespark."):
            module = str(Path(*node.module.split(".")[1:]).with_suffix(".py"))
            names.update({a.asname or a.name: constants[module][a.name] for a in node.names
                          if a.name in constants.get(module, {})})
    return names


def constructions() -> Iterator[tuple[str, int, str, str]]:
    """(module, line, class, first line of the message template) of every user-facing error built in the package."""
    constants = _constants()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = str(path.relative_to(PACKAGE))
        tree = ast.parse(path.read_text())
        names = {**_imported(tree, constants), **constants[module]}
        scopes: dict[int, dict[str, str]] = {}  # a call's line -> the strings its function assigned to names
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef):
                local = dict(names)
                for node in ast.walk(function):
                    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0],
                                                                                              ast.Name):
                        text = _literal(node.value, local)
                        if text is not None:
                            local[node.targets[0].id] = text
                scopes.update(dict.fromkeys(range(function.lineno, (function.end_lineno or 0) + 1), local))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in USER_FACING):
                continue
            known = scopes.get(node.lineno, names)
            at = 1 if node.func.id in BROKER_ERRORS else 0
            parts = [node.args[at]] if len(node.args) > at else []
            parts += [k.value for k in node.keywords if k.arg in ("message", "advice")]
            text = "; ".join(t if t is not None else "{}" for t in (_literal(p, known) for p in parts))
            yield module, node.lineno, node.func.id, text.split("\n", 1)[0]


def test_the_source_scan_finds_the_constructions() -> None:
    """The scan itself: it sees every kind of site (a guard against a scan that finds nothing and passes)."""
    found = list(constructions())
    kinds = {kind for _, _, kind, _ in found}
    assert len(found) > 100 and {"OptionError", "DataLossError", "UnknownTopicError", "TlsError"} <= kinds
    assert not first_line_says_what_to_do("partition 1:t:0 no longer exists")
    assert first_line_says_what_to_do("partition 1:t:0 no longer exists; set failOnDataLoss=false to skip it")
    assert not first_line_says_what_to_do("offsets are gone\nset failOnDataLoss=false")  # the first line only


def test_every_user_facing_message_template_says_what_to_do() -> None:
    missing = [f"{module}:{line} {kind}: {text}" for module, line, kind, text in constructions()
               if re.fullmatch(r"(\{\})*", text) is None  # relays another error's text, checked where it is made
               and not first_line_says_what_to_do(text)
               and (module, text) not in BUILT_BY_A_HELPER]
    assert not missing, "first lines without an action:\n" + "\n".join(missing)
    assert set(BUILT_BY_A_HELPER.values()) <= set(PATHS)


# --- the paths that need no cluster, walked ------------------------------------------------------------


def _raised(call: Callable[[], object]) -> TubeSparkError:
    """What ``call`` raises, or the error it builds for its caller to raise (the TLS and code mappers)."""
    try:
        built = call()
    except TubeSparkError as exc:
        return exc
    assert isinstance(built, TubeSparkError), f"no error: {built!r}"
    return built


def _verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    error.verify_code, error.verify_message, error.reason = code, message, "CERTIFICATE_VERIFY_FAILED"
    return error


def _ssl_error(reason: str) -> ssl.SSLError:
    error = ssl.SSLError(1, f"[SSL: {reason}] ...")
    error.reason = reason
    return error


def _answer(code: int, text: str = "refused") -> SimpleNamespace:
    return SimpleNamespace(success=False, errCode=code, errMsg=text)


def _unreachable_master() -> None:
    channel = MasterChannel(closed_port_address(), connect_timeout_s=1.0, request_timeout_s=1.0)
    try:
        channel.call(0, mpb.CloseRequestP2M(), mpb.CloseResponseM2P)
    finally:
        channel.close()


def _foreign_checkpoint() -> None:
    source = SimpleNamespace(scope=lambda key: key.rsplit(":", 1)[0],
                             ask=lambda scopes: {s: Origin(6, "at 6") for s in scopes},
                             describe=lambda mark: f"at {mark}", name=lambda scope: f"topic {scope}",
                             advice="Set the web API to tell.")
    marks = OriginMarks(source)
    marks.check(["1:t:0"], {"1:t": 5})


TUBEMQ = {"master": "127.0.0.1:8715", "topic": "events", "group": "etl_group"}
TANK = {"broker": "127.0.0.1:1", "topic": "events"}
ROCKETMQ = {"namesrv": "127.0.0.1:1", "topic": "events"}

PATHS: dict[str, Callable[[], object]] = {
    "misspelled option": lambda: TubeMQOptions.from_raw({**TUBEMQ, "maxOffsetPerTrigger": "5"}, mode="read"),
    "unknown option": lambda: TankOptions.from_raw({**TANK, "colour": "blue"}, mode="read"),
    "no topic": lambda: RocketMQOptions.from_raw({"namesrv": "127.0.0.1:1"}, mode="read"),
    "no master": lambda: TubeMQOptions.from_raw({"topic": "events"}, mode="read"),
    "bad number": lambda: TubeMQOptions.from_raw({**TUBEMQ, "maxOffsetsPerTrigger": "many"}, mode="read"),
    "bad duration": lambda: TankOptions.from_raw({**TANK, "requestTimeoutMs": "soon"}, mode="read"),
    "bad offsets JSON": lambda: TubeMQOptions.from_raw({**TUBEMQ, "startingOffsets": "{"}, mode="read"),
    "bad group": lambda: RocketMQOptions.from_raw({**ROCKETMQ, "group": "a b"}, mode="read"),
    "bad regex": lambda: TubeMQOptions.from_raw({"master": "h:1", "topicPattern": "("}, mode="read"),
    "password without user": lambda: TubeMQOptions.from_raw({**TUBEMQ, "auth.password": "x"}, mode="read"),
    "TLS file without TLS": lambda: TubeMQOptions.from_raw({**TUBEMQ, "tubemq.tlsCaFile": "/ca.pem"}, mode="read"),
    "TLS unreadable CA": lambda: TubeMQOptions.from_raw({**TUBEMQ, "tubemq.tlsEnable": "true",
                                                         "tubemq.tlsCaFile": "/nonexistent/ca.pem"}, mode="read"),
    **{f"TLS verify {code}": (lambda code=code, text=text: tls_failure("h:1", _verify_error(code, text)))
       for code, text in [(10, "certificate has expired"), (9, "not yet valid"), (62, "Hostname mismatch"),
                          (19, "self-signed certificate in certificate chain"), (23, "certificate revoked")]},
    **{f"TLS {reason}": (lambda reason=reason: tls_failure("h:1", _ssl_error(reason)))
       for reason in ["SSLV3_ALERT_BAD_CERTIFICATE", "TLSV1_ALERT_PROTOCOL_VERSION", "WRONG_VERSION_NUMBER",
                      "NO_CIPHERS_AVAILABLE"]},
    "TLS silent handshake": lambda: handshake_timeout("h:1", 2.0),
    **{f"TubeMQ {code.name}": (lambda code=code: check(_answer(code), "register"))
       for code in [ErrCode.FORBIDDEN, ErrCode.TOPIC_NOT_DEPLOYED, ErrCode.CERTIFICATE_FAILURE,
                    ErrCode.CONSUME_GROUP_FORBIDDEN, ErrCode.CONSUME_CONTENT_FORBIDDEN,
                    ErrCode.CLIENT_INCONSISTENT_CONSUMETYPE, ErrCode.PARTITION_UNPUBLISHABLE]},
    "RocketMQ unknown topic": lambda: rocketmq_codes.error_for_code(rocketmq_codes.TOPIC_NOT_EXIST, "not exist"),
    "TANK unknown topic": lambda: tank_codes.produce_error(tank_codes.PRODUCE_UNKNOWN_TOPIC, "events/0"),
    "TANK unknown partition": lambda: tank_codes.fetch_error(tank_codes.FETCH_UNKNOWN_PARTITION, "events/9"),
    "master unreachable": _unreachable_master,
    "foreign checkpoint": _foreign_checkpoint,
    "partial batch read": lambda: settle_unavailable(("events",), "fail", {3: ("3:events:0",)},
                                                     {3: "broker 3 (down)"}, total=4),
}


@pytest.mark.parametrize("name", sorted(PATHS))
def test_the_first_line_of_what_a_user_meets_says_what_to_do(name: str) -> None:
    error = _raised(PATHS[name])
    assert first_line_says_what_to_do(str(error)), f"{type(error).__name__}: {error}"


def test_the_first_line_survives_sparks_wrapper() -> None:
    """What ``unwrap`` gives back from Spark's text starts with the same line, action included."""
    error = _raised(PATHS["misspelled option"])
    wrapped = RuntimeError(f"[PYTHON_DATA_SOURCE_ERROR] failed\nTraceback (most recent call last):\n  ...\n"
                           f"{type(error).__module__}.{type(error).__name__}: {error}\n\nJVM stacktrace:\n...")
    back = unwrap(wrapped)
    assert back is not None and str(back).split("\n", 1)[0] == str(error).split("\n", 1)[0]
    assert first_line_says_what_to_do(str(back))
