"""The error hierarchy and the TubeMQ errCode mapping."""

from __future__ import annotations

import pytest

from tubespark import errors
from tubespark.errors import (
    AuthError,
    BadRequestError,
    BrokerError,
    GroupConflictError,
    NoDataError,
    NotRegisteredError,
    PartitionOccupiedError,
    ServerBusyError,
    TubeSparkError,
    UnknownTopicError,
)
from tubespark.tubemq.wire.errcodes import error_for_code


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
    (503, ServerBusyError, True),
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


def test_every_public_error_derives_from_tubespark_error() -> None:
    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert len(classes) > 15
    assert all(issubclass(cls, TubeSparkError) for cls in classes)


@pytest.mark.parametrize(("child", "parent"), [
    (errors.BadTokenError, errors.CodecError),
    (errors.FrameTooLargeError, errors.CodecError),
    (errors.TruncatedFrameError, errors.CodecError),
    (errors.ProtobufDecodeError, errors.CodecError),
    (errors.ChecksumMismatchError, errors.CodecError),
    (errors.MessageTooLargeError, errors.MessageFormatError),
    (errors.RpcTimeoutError, errors.BrokerConnectionError),
    (errors.NoMasterAvailableError, errors.BrokerConnectionError),
    (errors.StandbyMasterError, errors.RpcError),
])
def test_hierarchy(child: type, parent: type) -> None:
    assert issubclass(child, parent)


def test_retriable_flags_of_transport_errors() -> None:
    assert errors.BrokerConnectionError("x").retriable
    assert errors.RpcTimeoutError("x").retriable
    assert errors.StandbyMasterError("n", "m").retriable
    assert not errors.RpcError("n", "m").retriable
    assert not errors.BadTokenError("x").retriable


def test_option_error_is_also_a_value_error() -> None:
    assert isinstance(errors.OptionError("bad"), ValueError)
