"""The error hierarchy: one root, the shared kinds, one module per broker, one meaning of ``retriable``.

What a user relies on: every error tubespark raises is a ``TubeSparkError``; the shared module holds
only broker-neutral kinds and each broker's own errors sit in ``tubespark.<broker>.errors``; the names
the documentation tells users about import from where they always did; ``retriable`` is true exactly when the
same call may succeed after a backoff (tubespark/errors.py's docstring), which is what the retry helper
filters on. Plus the TubeMQ errCode mapping.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import traceback
from pathlib import Path

import pytest

from tubespark import errors
from tubespark.core.retry import RetryPolicy, call_with_retry
from tubespark.errors import (
    AuthError,
    BadRequestError,
    BrokerError,
    DataLossError,
    NoDataError,
    OptionError,
    RangeReadError,
    ServerBusyError,
    TubeSparkError,
    UnknownTopicError,
    unwrap,
)
from tubespark.tubemq.errors import GroupConflictError, NotRegisteredError, PartitionOccupiedError, ServiceStoppedError
from tubespark.tubemq.wire.errcodes import error_for_code

PACKAGE = Path(__file__).resolve().parents[3] / "tubespark"
ERROR_MODULES = ("tubespark.errors", "tubespark.tubemq.errors", "tubespark.tank.errors", "tubespark.rocketmq.errors",
                 "tubespark.formats.errors")
BROKER_MODULES = {"tubemq": "tubespark.tubemq.errors", "tank": "tubespark.tank.errors",
                  "rocketmq": "tubespark.rocketmq.errors"}


def _classes(module_name: str) -> dict[str, type]:
    module = importlib.import_module(module_name)
    return {name: cls for name, cls in vars(module).items()
            if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == module_name}


def _defined_exceptions() -> dict[str, set[str]]:
    """Every class in the package whose bases name an error (read from the source: nothing is imported)."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "pb" in path.relative_to(PACKAGE).parts:
            continue
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(base).endswith(("Error", "Exception")) for base in node.bases):
                found.setdefault(module, set()).add(node.name)
    return found


# --- where errors live -----------------------------------------------------------------------------


def test_errors_are_defined_only_in_the_error_modules() -> None:
    stray = {module: names for module, names in _defined_exceptions().items() if module not in ERROR_MODULES}
    assert not stray, "define errors in tubespark/errors.py or <broker>/errors.py"


@pytest.mark.parametrize("module_name", ERROR_MODULES)
def test_every_error_class_is_a_tubespark_error(module_name: str) -> None:
    classes = _classes(module_name)
    assert classes, f"{module_name} defines no errors"
    assert [name for name, cls in classes.items() if not issubclass(cls, TubeSparkError)] == []


def test_the_shared_module_holds_only_broker_neutral_kinds() -> None:
    shared = set(_classes("tubespark.errors"))
    assert {"TubeSparkError", "CodecError", "MessageFormatError", "BrokerConnectionError", "RpcTimeoutError",
            "TlsError", "BrokerError", "ServerBusyError", "UnknownTopicError", "AuthError", "OptionError",
            "DataLossError", "RangeReadError", "UnsupportedSparkError", "AvailableNowIncompleteError",
            "ForeignCheckpointError"} <= shared
    for module_name in BROKER_MODULES.values():
        assert not shared & set(_classes(module_name)), "a class is defined twice"
    tubemq_only = {"BadTokenError", "ProtobufDecodeError", "RpcError", "StandbyMasterError", "NoMasterAvailableError",
                   "NotAMasterError", "PartitionOccupiedError", "NotRegisteredError", "GroupConflictError",
                   "AdminApiError", "ConfigurationUnknownError", "BundleParseError"}
    assert tubemq_only <= set(_classes("tubespark.tubemq.errors")) and not tubemq_only & shared


@pytest.mark.parametrize(("broker", "names"), [
    ("tubemq", {"BadTokenError", "ProtobufDecodeError", "RpcError", "StandbyMasterError", "NoMasterAvailableError",
                "ServerNotReadyError", "ServiceStoppedError", "NotAMasterError", "PartitionOccupiedError",
                "NotRegisteredError", "GroupConflictError",
                "AdminApiError", "ConfigurationUnknownError", "BundleParseError"}),
    ("tank", {"TankProtocolError", "BundleFormatError", "TruncatedFieldError", "LeaderMovedError",
              "BoundaryFaultError"}),
    ("rocketmq", {"NoNameServerAvailableError", "NoPermissionError", "OffsetOutOfRangeError",
                  "FilterNotSupportedError", "AccessDeniedError"}),
])
def test_each_broker_has_its_own_error_module(broker: str, names: set[str]) -> None:
    assert set(_classes(BROKER_MODULES[broker])) == names


@pytest.mark.parametrize(("module_name", "name"), [
    # the error names the documentation (README.md, docs/) tells users about, where they live ...
    ("tubespark", "TubeSparkError"),
    ("tubespark.errors", "DataLossError"),
    ("tubespark.errors", "ForeignCheckpointError"),
    ("tubespark.errors", "AuthError"),
    ("tubespark.errors", "TlsError"),
    ("tubespark.errors", "UnsupportedSparkError"),
    ("tubespark.errors", "RangeReadError"),
    ("tubespark.tubemq.errors", "BundleParseError"),
    ("tubespark.tubemq.errors", "PartitionOccupiedError"),
    ("tubespark.rocketmq.errors", "FilterNotSupportedError"),
    ("tubespark.rocketmq.errors", "AccessDeniedError"),
    # ... and where the ones that moved could be imported from before
    ("tubespark.tubemq.client.ranges", "RangeReadError"),
    ("tubespark.tank.client.ranges", "RangeReadError"),
    ("tubespark.tubemq.spark.read_task", "BundleParseError"),
    ("tubespark.tubemq.spark.adapter", "AssignmentUnavailableError"),  # now AvailableNowIncompleteError
])
def test_documented_names_are_importable(module_name: str, name: str) -> None:
    assert issubclass(getattr(importlib.import_module(module_name), name), TubeSparkError)


# --- what retriable means --------------------------------------------------------------------------

RETRIABLE = {
    # passing conditions of the connection or the server: the same call may succeed after a backoff
    "BrokerConnectionError", "RpcTimeoutError", "BrokerUnavailableError", "NoDataError", "ServerBusyError",
    "RangeReadError",
    "StandbyMasterError", "ServerNotReadyError", "ServiceStoppedError", "NoMasterAvailableError",
    "PartitionOccupiedError", "NotRegisteredError",
    "LeaderMovedError", "NoNameServerAvailableError", "NoPermissionError",
    "PartitionsUnavailableError",  # a broker that does not serve now may come back
}


@pytest.mark.parametrize("module_name", ERROR_MODULES)
def test_retriable_is_set_exactly_on_passing_conditions(module_name: str) -> None:
    """A complete table, so a new class has to be placed on one side of the rule."""
    flags = {name: cls.retriable for name, cls in _classes(module_name).items()}
    assert {name for name, flag in flags.items() if flag} == RETRIABLE & set(flags)


def test_range_read_errors_of_every_broker_are_the_one_retriable_class() -> None:
    """One class, one meaning: TubeMQ's used to be retriable and TANK's not."""
    from tubespark.rocketmq.client import ranges as rocketmq_ranges
    from tubespark.tank.client import ranges as tank_ranges
    from tubespark.tubemq.client import ranges as tubemq_ranges

    for module in (tubemq_ranges, tank_ranges, rocketmq_ranges):
        assert module.RangeReadError is RangeReadError
    error = RangeReadError("gave up", partition="t/0", start=1, end=9, reached=4, broker="h:1", messages=3, tries=2)
    assert error.retriable and str(error) == "gave up"
    assert (error.partition, error.start, error.end, error.reached, error.broker, error.messages, error.tries) == (
        "t/0", 1, 9, 4, "h:1", 3, 2)


def test_the_retry_helper_retries_what_is_retriable_and_nothing_else() -> None:
    def failing(exc: Exception) -> int:
        calls = 0

        def fn() -> None:
            nonlocal calls
            calls += 1
            raise exc

        with pytest.raises(type(exc)):
            call_with_retry(fn, RetryPolicy(attempts=3, backoff_s=0.001, max_backoff_s=0.001), what="test",
                            sleep=lambda _s: None)
        return calls

    gave_up = RangeReadError("x", partition="p", start=0, end=1, reached=0)
    assert failing(gave_up) == 3 and failing(ServerBusyError(503, "busy")) == 3
    assert failing(errors.DataLossError("gone")) == 1 and failing(UnknownTopicError(403, "no")) == 1
    assert failing(errors.TlsError("untrusted")) == 1 and failing(errors.CodecError("bad bytes")) == 1


# --- the TubeMQ errCode mapping --------------------------------------------------------------------


@pytest.mark.parametrize(("code", "cls", "retriable"), [
    (404, NoDataError, True),
    (410, PartitionOccupiedError, True),
    (412, PartitionOccupiedError, True),
    (411, NotRegisteredError, True),
    (403, UnknownTopicError, False),
    (431, UnknownTopicError, False),
    (415, AuthError, False),
    (450, AuthError, False),
    (455, AuthError, False),
    *[(code, GroupConflictError, False) for code in range(424, 431)],
    (400, BadRequestError, False),
    (500, ServerBusyError, True),
    (503, ServiceStoppedError, True),
])
def test_error_for_code(code: int, cls: type[BrokerError], retriable: bool) -> None:
    err = error_for_code(code, "server says no", context="get 1:t:0")
    assert type(err) is cls
    assert err.code == code
    assert err.retriable is retriable
    assert err.server_message == "server says no"


@pytest.mark.parametrize("code", [0, 201, 523, 999, -1])
def test_unknown_code_is_a_plain_tubemq_error(code: int) -> None:
    err = error_for_code(code, "?")
    assert type(err) is BrokerError
    assert not err.retriable


@pytest.mark.parametrize("code", [423, 431])
def test_codes_next_to_the_group_conflict_range_are_not_conflicts(code: int) -> None:
    assert not isinstance(error_for_code(code, ""), GroupConflictError)


def test_message_names_code_and_context() -> None:
    text = str(error_for_code(410, "partition held by c2", context="register 1:orders:0"))
    assert "410" in text and "register 1:orders:0" in text and "partition held by c2" in text
    assert str(error_for_code(400, "bad")) == "TubeMQ error 400: bad"


@pytest.mark.parametrize(("child", "parent"), [
    ("tubespark.tubemq.errors.BadTokenError", "tubespark.errors.CodecError"),
    ("tubespark.errors.FrameTooLargeError", "tubespark.errors.CodecError"),
    ("tubespark.errors.TruncatedFrameError", "tubespark.errors.CodecError"),
    ("tubespark.tubemq.errors.ProtobufDecodeError", "tubespark.errors.CodecError"),
    ("tubespark.errors.ChecksumMismatchError", "tubespark.errors.CodecError"),
    ("tubespark.errors.MessageTooLargeError", "tubespark.errors.MessageFormatError"),
    ("tubespark.errors.RpcTimeoutError", "tubespark.errors.BrokerConnectionError"),
    ("tubespark.tubemq.errors.NoMasterAvailableError", "tubespark.errors.BrokerConnectionError"),
    ("tubespark.tubemq.errors.StandbyMasterError", "tubespark.tubemq.errors.RpcError"),
    ("tubespark.tubemq.errors.BundleParseError", "tubespark.errors.CodecError"),
    ("tubespark.tank.errors.TankProtocolError", "tubespark.errors.MessageFormatError"),
    ("tubespark.tank.errors.TruncatedFieldError", "tubespark.tank.errors.TankProtocolError"),
    ("tubespark.tank.errors.LeaderMovedError", "tubespark.errors.ServerBusyError"),
    ("tubespark.tank.errors.BoundaryFaultError", "tubespark.errors.BrokerError"),
    ("tubespark.rocketmq.errors.NoNameServerAvailableError", "tubespark.errors.BrokerConnectionError"),
    ("tubespark.rocketmq.errors.NoPermissionError", "tubespark.errors.BrokerError"),
    ("tubespark.formats.errors.PayloadFormatError", "tubespark.errors.CodecError"),
])
def test_hierarchy(child: str, parent: str) -> None:
    def load(dotted: str) -> type:
        module, _, name = dotted.rpartition(".")
        return getattr(importlib.import_module(module), name)

    assert issubclass(load(child), load(parent))


def test_flags_and_fields_of_transport_errors() -> None:
    from tubespark.tubemq.errors import BadTokenError, RpcError, StandbyMasterError

    assert errors.BrokerConnectionError("x").retriable
    assert errors.RpcTimeoutError("x").retriable
    assert StandbyMasterError("n", "m").retriable
    assert not RpcError("n", "m").retriable
    assert not BadTokenError("x").retriable


def test_option_error_is_also_a_value_error() -> None:
    assert isinstance(errors.OptionError("bad"), ValueError)


# --- unwrap: the typed error back from Spark's wrapper ----------------------------------------------


def _traceback_of(error: BaseException) -> str:
    """The traceback text Spark keeps of an error raised in a Python worker (``traceback.format_exc()``)."""
    try:
        raise error
    except BaseException:  # noqa: BLE001 - formatted, as PySpark's worker does
        return traceback.format_exc()


class _SparkLikeError(Exception):
    """Stands for the text of Spark's exceptions, which need a JVM to exist (the contract suite unwraps real ones)."""


@pytest.mark.parametrize("wrap", [
    lambda tb: f"An exception was thrown from the Python worker:\n{tb}",  # PythonException, a task's error
    lambda tb: f"[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: {tb} SQLSTATE: 38000",
    lambda tb: (f"[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: {tb} SQLSTATE: 38000 "
                f"SQLSTATE: XXKST\n=== Streaming Query ===\nIdentifier: [id = 1]\n"),
], ids=["PythonException", "AnalysisException", "StreamingQueryException"])
def test_unwrap_rebuilds_the_typed_error_from_sparks_text(wrap):
    original = UnknownTopicError(431, "topic x is not deployed", broker="TubeMQ")
    error = unwrap(_SparkLikeError(wrap(_traceback_of(original))))
    assert type(error) is UnknownTopicError and str(error) == str(original) and error.retriable is False
    occupied = PartitionOccupiedError(410, "held by another member; try again\nsecond line")
    moved = unwrap(_SparkLikeError(wrap(_traceback_of(occupied))))
    assert type(moved) is PartitionOccupiedError and str(moved) == str(occupied)  # a message of two lines
    assert moved.retriable is True


def test_unwrap_takes_the_last_tubespark_line_and_leaves_foreign_errors_alone():
    try:
        try:
            raise OptionError("option group is required")
        except OptionError:
            raise DataLossError("offsets [0, 5) of 1:t:0 are gone; set failOnDataLoss=false") from None
    except DataLossError:
        text = traceback.format_exc()
    assert type(unwrap(_SparkLikeError(text))) is DataLossError
    assert unwrap(_SparkLikeError("[TABLE_OR_VIEW_NOT_FOUND] The table `x` cannot be found.")) is None
    assert unwrap(_SparkLikeError("ValueError: tubespark.errors is not mentioned as a class")) is None
    unknown = unwrap(_SparkLikeError("tubespark.errors.NoSuchError: from a newer tubespark"))
    assert type(unknown) is TubeSparkError and "NoSuchError: from a newer tubespark" in str(unknown)


def test_unwrap_returns_an_error_that_never_went_through_spark():
    error = OptionError("option x")
    assert unwrap(error) is error
    outer = RuntimeError("wrapped in-process")
    outer.__cause__ = error
    assert unwrap(outer) is error
