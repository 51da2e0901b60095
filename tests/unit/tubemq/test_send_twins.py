"""The twins of the sink's wire path and of the response envelope give the same bytes, fields and errors.

``SendRequest.envelope`` (compiled ``encode_send`` vs protobuf + ``encode_request``) must be byte-identical
for every field combination; ``parse_send_answer``, ``decode_response`` and ``parse_send_response`` (both in
one compiled call, the producer's reader thread) must give the same values or the same typed error, for real
answers, every error case and the fuzz corpus of test_fuzz_decoders.py.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.core.test_fuzz_decoders import ENVELOPE_RESPONSE_SEEDS, FUZZ, byte_inputs, survives
from tubespark.core.framed_io import BytesReader
from tubespark.core.native import PURE_PYTHON
from tubespark.errors import TubeSparkError
from tubespark.tubemq.errors import ProtobufDecodeError, RpcError
from tubespark.tubemq.wire import send, twin
from tubespark.tubemq.wire.constants import (
    BEGIN_TOKEN,
    MAX_BLOCK_SIZE,
    MAX_BLOCKS_PER_FRAME,
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    Method,
    ServiceType,
)
from tubespark.tubemq.wire.envelope import decode_request, decode_response, encode_exception, encode_response
from tubespark.tubemq.wire.frame import encode_frame, read_frame
from tubespark.tubemq.wire.message import checksum
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb
from tubespark.tubemq.wire.send import (
    SendAnswer,
    SendRequest,
    encode_send_frames,
    parse_send_answer,
    parse_send_response,
)

NATIVE = twin.loaded()
TWINS_FUZZ = settings(FUZZ, deadline=timedelta(milliseconds=500))
"""FUZZ's inputs and example count; each example runs both twins (and the memory tracing of ``survives``), so
its deadline is five times the 100 ms one decoder gets."""
CLIENT = "producer_10.0.0.1-4242-1700000000000-1-tubespark-0.1.0"


def both(call: Callable[[], object]) -> tuple[object, object]:
    """``call()``'s outcome with the compiled twin (where loaded) and with the pure-Python one."""
    def outcome() -> object:
        try:
            return "ok", call()
        except (TubeSparkError, ValueError, TypeError) as exc:
            return "error", type(exc), str(exc)

    compiled = outcome()
    with twin.pure_python():
        pure = outcome()
    return compiled, pure


REQUESTS = {
    "plain": SendRequest(CLIENT, "orders", 3, b"x" * 100, 0, 12345, 0x0A000001),
    "attributes": SendRequest(CLIENT, "orders", 0, b"\x00\x00\x00\x05a=b,cbody", 1, 7, -1062731519, "s",
                              "202401021530"),
    "negatives": SendRequest(CLIENT, "t" * 64, -1, b"", -5, -(2**31), -(2**31), "", "202401021530"),
    "unicode": SendRequest("c\u00e9\U0001f600", "topic_\u00fc", 2**31 - 1, bytes(range(256)) * 400, 2**31 - 1,
                           2**31 - 1, 2**31 - 1, "stream \u3000", ""),
    "nul bytes": SendRequest("a\x00b", "t\x00", 1, b"\x00", 0, 0, 0, "\x00", "\x00"),
}
AUTHS = [None, (0, ""), (123456789012, ""), (-1, "user 1700000000000 42 c2lnbmF0dXJl")]


@pytest.mark.parametrize("name", sorted(REQUESTS))
@pytest.mark.parametrize("auth", AUTHS)
@pytest.mark.parametrize("timeout_ms", [1, 10_000, 2**40])
def test_request_envelopes_are_byte_identical(name: str, auth: tuple[int, str] | None, timeout_ms: int) -> None:
    request = REQUESTS[name]
    compiled, pure = both(lambda: request.envelope(timeout_ms, auth))
    assert compiled == pure and compiled[0] == "ok"
    decoded = decode_request(pure[1])
    assert decoded.method == Method.SEND_MESSAGE and decoded.timeout_ms == timeout_ms
    assert bpb.SendMessageRequestP2B.FromString(decoded.request) == request.message(auth)


@pytest.mark.parametrize("request_", [
    SendRequest(CLIENT, "t", 2**31, b"x", 0, 0, 0),  # out of int32 range: protobuf refuses it
    SendRequest(CLIENT, "t", 0, b"x", 0, 0, 0, "\udcff"),  # not encodable as UTF-8
    SendRequest(CLIENT, "t", 0, b"x", 0, 0, 0),  # a timeout of 0: the server would drop it
], ids=["partition out of range", "surrogate msgType", "zero timeout"])
def test_requests_the_compiled_twin_refuses_fail_as_in_python(request_: SendRequest) -> None:
    timeout = 0 if request_.topic == "t" and request_.partition_id == 0 and request_.msg_type == "" else 1000
    compiled, pure = both(lambda: request_.envelope(timeout))
    assert compiled == pure and compiled[0] == "error"


ANSWERS = {
    "ok": bpb.SendMessageResponseB2P(success=True, errCode=200, errMsg="OK", messageId=2**40, appendTime=17,
                                     appendOffset=28 * 10**9),
    "minimal": bpb.SendMessageResponseB2P(success=True, errCode=200, errMsg=""),
    "busy": bpb.SendMessageResponseB2P(success=False, errCode=503, errMsg="server busy \u00e9", requireAuth=True),
    "negative": bpb.SendMessageResponseB2P(success=False, errCode=-1, errMsg="x", messageId=-5, appendOffset=-1),
}
BAD_ANSWERS = {
    "no errMsg": bpb.SendMessageResponseB2P(success=True, errCode=200).SerializePartialToString(),
    "errMsg not UTF-8": bpb.SendMessageResponseB2P(success=True, errCode=200, errMsg="").SerializeToString()[:-1]
    + b"\x02\xff\xfe",
    "truncated": ANSWERS["ok"].SerializeToString()[:-2],
    "garbage": b"\xff\xff\xff",
}


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_answers_parse_alike(name: str) -> None:
    data = ANSWERS[name].SerializeToString()
    compiled, pure = both(lambda: parse_send_answer(data))
    assert compiled == pure and compiled[0] == "ok"
    if NATIVE is not None:
        assert NATIVE.decode_send_answer(data) is not None  # taken by the compiled code itself


@pytest.mark.parametrize("name", sorted(BAD_ANSWERS))
def test_bad_answers_fail_alike(name: str) -> None:
    compiled, pure = both(lambda: parse_send_answer(BAD_ANSWERS[name]))
    assert compiled == pure and compiled[0] == "error" and compiled[1] is ProtobufDecodeError


ENVELOPES = [
    encode_response(Method.SEND_MESSAGE, ANSWERS["ok"].SerializeToString()),
    encode_response(Method.GET_MESSAGE, b""),
    encode_response(Method.GET_MESSAGE, bytes(range(256)) * 1000),
    encode_exception("org.apache.inlong.tubemq.corerpc.exception.StandbyException", "standby"),
    encode_exception("java.lang.RuntimeException", "boom", fatal=True),
    encode_response(Method.SEND_MESSAGE, b"x") + b"trailing bytes are ignored",
]


@pytest.mark.parametrize("index", range(len(ENVELOPES)))
def test_response_envelopes_decode_alike(index: int) -> None:
    compiled, pure = both(lambda: decode_response(ENVELOPES[index]))
    assert compiled == pure
    if index < 3 and NATIVE is not None:
        assert NATIVE.decode_response(ENVELOPES[index]) is not None
    if index in (3, 4):
        assert issubclass(compiled[1], RpcError)


@TWINS_FUZZ
@given(byte_inputs([*ENVELOPE_RESPONSE_SEEDS, *ENVELOPES]))
def test_fuzz_response_envelopes_decode_alike(data: bytes) -> None:
    survives(lambda: decode_response(data), len(data))
    compiled, pure = both(lambda: decode_response(data))
    assert compiled == pure


@TWINS_FUZZ
@given(byte_inputs([a.SerializeToString() for a in ANSWERS.values()] + list(BAD_ANSWERS.values())))
def test_fuzz_answers_parse_alike(data: bytes) -> None:
    survives(lambda: parse_send_answer(data), len(data))
    compiled, pure = both(lambda: parse_send_answer(data))
    assert compiled == pure


SEND_RESPONSES = {
    **{f"answer {name}": encode_response(Method.SEND_MESSAGE, answer.SerializeToString())
       for name, answer in ANSWERS.items()},
    **{f"bad answer {name}": encode_response(Method.SEND_MESSAGE, data) for name, data in BAD_ANSWERS.items()},
    "standby": ENVELOPES[3],
    "fatal exception": ENVELOPES[4],
    "trailing bytes": encode_response(Method.SEND_MESSAGE, ANSWERS["ok"].SerializeToString()) + b"\x00\x01",
    "garbage": b"\x05\x01\x02\x03",
    "nothing": b"",
}


@pytest.mark.parametrize("name", sorted(SEND_RESPONSES))
def test_send_responses_decode_alike(name: str) -> None:
    """The one compiled call gives what decode_response + parse_send_answer give: the same SendAnswer, or the
    same typed error (RpcError for an exception, ProtobufDecodeError for garbage)."""
    payload = SEND_RESPONSES[name]
    compiled, pure = both(lambda: parse_send_response(payload))
    assert compiled == pure
    if compiled[0] == "ok":
        assert type(compiled[1]) is SendAnswer
    else:
        assert compiled[1] is ProtobufDecodeError or issubclass(compiled[1], RpcError)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_a_send_response_takes_the_compiled_lane(name: str) -> None:
    """Valid answers are decoded by the compiled code itself (a silent fallback would pass the equality)."""
    if NATIVE is None:
        assert twin.HOT_PATH.startswith(PURE_PYTHON)
        return
    payload = SEND_RESPONSES[f"answer {name}"]
    answer = NATIVE.decode_send_response(payload, SendAnswer)
    assert type(answer) is SendAnswer
    assert answer == parse_send_answer(decode_response(payload)[1])


def test_a_send_response_needs_a_tuple_type() -> None:
    if NATIVE is None:
        assert twin.HOT_PATH.startswith(PURE_PYTHON)
        return
    with pytest.raises(TypeError):
        NATIVE.decode_send_response(SEND_RESPONSES["answer ok"], dict)


@TWINS_FUZZ
@given(byte_inputs([*SEND_RESPONSES.values(), *ENVELOPE_RESPONSE_SEEDS]))
def test_fuzz_send_responses_decode_alike(data: bytes) -> None:
    survives(lambda: parse_send_response(data), len(data))
    compiled, pure = both(lambda: parse_send_response(data))
    assert compiled == pure


@TWINS_FUZZ
@given(st.text(max_size=40), st.text(max_size=70), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=300),
       st.integers(-(2**31), 2**31 - 1), st.text(max_size=12), st.text(max_size=12),
       st.one_of(st.none(), st.tuples(st.integers(-(2**63), 2**63 - 1), st.text(max_size=30))))
def test_fuzz_request_envelopes_are_byte_identical(client: str, topic: str, partition: int, data: bytes, flag: int,
                                                   msg_type: str, msg_time: str,
                                                   auth: tuple[int, str] | None) -> None:
    request = SendRequest(client, topic, partition, data, flag, flag ^ 5, -flag - 1 if flag > -(2**31) else 0,
                          msg_type, msg_time)
    compiled, pure = both(lambda: request.envelope(30_000, auth))
    assert compiled == pure


def test_the_compiled_twin_encodes_requests_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """No silent fallback: with the pure-Python encoder out of reach, every request still encodes."""
    if NATIVE is None:
        assert twin.HOT_PATH.startswith("pure-python")
        return

    def unreachable(*args: object) -> bytes:
        raise AssertionError("the pure-Python encoder ran")

    monkeypatch.setattr(send, "encode_request", unreachable)
    for request in REQUESTS.values():
        for auth in AUTHS:
            assert decode_request(request.envelope(1000, auth)).method == Method.SEND_MESSAGE


# --- a window of requests in one call: encode_send_frames ---------------------------------------------------


def _frames_one_by_one(requests: list[SendRequest], serials: list[int], timeout_ms: int,
                       auth: tuple[int, str] | None) -> bytes:
    """The reference: each request's envelope framed on its own, as the per-message path sends them."""
    return b"".join(encode_frame(serial, request.envelope(timeout_ms, auth))
                    for request, serial in zip(requests, serials, strict=True))


@pytest.mark.parametrize("auth", AUTHS)
@pytest.mark.parametrize("timeout_ms", [1, 10_000, 2**40])
def test_a_window_of_frames_is_byte_identical_to_framing_each_request(auth: tuple[int, str] | None,
                                                                      timeout_ms: int) -> None:
    requests = list(REQUESTS.values()) * 2  # "unicode" spans 13 blocks of 8 KiB
    serials = [1, 2**31 - 1, 7, 0, 42, 3, 99, 100, 2**31 - 2, 5]
    compiled, pure = both(lambda: encode_send_frames(requests, serials, timeout_ms, auth))
    assert compiled == pure == ("ok", _frames_one_by_one(requests, serials, timeout_ms, auth))
    reader = BytesReader(pure[1])  # type: ignore[index]
    for request, serial in zip(requests, serials, strict=True):
        got_serial, payload = read_frame(reader)
        assert got_serial == serial and decode_request(payload).request == request.message(auth).SerializeToString()
    if NATIVE is not None:  # the fast lane itself, no fallback
        assert NATIVE.encode_send_frames(requests, serials, auth, Method.SEND_MESSAGE, ServiceType.BROKER_WRITE,
                                         PROTOCOL_VERSION, timeout_ms, BEGIN_TOKEN, MAX_BLOCK_SIZE,
                                         MAX_BLOCKS_PER_FRAME) == pure[1]


def test_an_empty_window_is_no_bytes() -> None:
    assert both(lambda: encode_send_frames([], [], 1000)) == (("ok", b""), ("ok", b""))


@pytest.mark.parametrize(("requests", "timeout_ms"), [
    ([REQUESTS["plain"], SendRequest(CLIENT, "t", 2**31, b"x", 0, 0, 0)], 1000),  # int32 overflow
    ([SendRequest(CLIENT, "t", 0, b"x", 0, 0, 0, "\udcff"), REQUESTS["plain"]], 1000),  # not UTF-8
    ([REQUESTS["plain"]], 0),  # a timeout of 0
    ([SendRequest(CLIENT, "t", 0, b"x" * MAX_FRAME_BYTES, 0, 0, 0)], 1000),  # more blocks than a frame holds
], ids=["partition out of range", "surrogate msgType", "zero timeout", "frame too large"])
def test_windows_the_compiled_twin_refuses_end_as_in_python(requests: list[SendRequest], timeout_ms: int) -> None:
    serials = list(range(1, len(requests) + 1))
    compiled, pure = both(lambda: encode_send_frames(requests, serials, timeout_ms))
    assert compiled == pure
    if pure[0] == "ok":
        assert pure[1] == _frames_one_by_one(requests, serials, timeout_ms, None)


@TWINS_FUZZ
@given(st.lists(st.tuples(st.text(max_size=20), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=200),
                          st.text(max_size=8), st.text(max_size=8)), max_size=8),
       st.one_of(st.none(), st.tuples(st.integers(-(2**63), 2**63 - 1), st.text(max_size=30))))
def test_fuzz_windows_are_byte_identical(fields: list[tuple[str, int, bytes, str, str]],
                                         auth: tuple[int, str] | None) -> None:
    requests = [SendRequest(CLIENT, topic, number, data, number, number ^ 3, 0, msg_type, msg_time)
                for topic, number, data, msg_type, msg_time in fields]
    serials = [(k * 7919) & 0x7FFFFFFF for k in range(len(requests))]
    compiled, pure = both(lambda: encode_send_frames(requests, serials, 30_000, auth))
    assert compiled == pure
    if pure[0] == "ok":
        assert pure[1] == _frames_one_by_one(requests, serials, 30_000, auth)


# --- arguments of the wrong kind: one answer from both twins (issue 24) --------------------------------------
# The compiled twin once took a bool as an int (True sent as 1), a bytearray or memoryview as a body and bytes
# as text, all of which protobuf (the pure-Python twin) refuses; and it sent an empty signed token where the
# pure twin leaves a None one out. The compiled code now takes only what the pure twin takes alike and hands
# everything else to it, so a caller sees the pure twin's bytes or its error, whichever twin is loaded.


class _Flag(enum.IntEnum):
    ONE = 1


WRONG_KINDS: dict[str, object] = {
    "True": True, "False": False, "numpy bool": np.bool_(True), "None": None, "float": 1.0,
    "bytearray": bytearray(b"x"), "memoryview": memoryview(b"x"), "bytes": b"c", "bytes not UTF-8": b"\xff",
    "str": "x", "surrogate": "\udcff", "2**70": 2**70, "numpy int64": np.int64(3), "IntEnum": _Flag.ONE,
}
"""Values of every kind a caller might pass for any field; some are right for some fields (the pure twin
encodes numpy ints and UTF-8 bytes for text), most are not, and the twins must agree on each."""
BASE = SendRequest(CLIENT, "t", 1, b"x", 0, 0, 0, "s", "202401021530")


def any_outcome(call: Callable[[], object]) -> tuple[object, object]:
    """``both``, for any exception (protobuf's own EncodeError included): the twins must agree on it too."""
    def outcome() -> object:
        try:
            return "ok", call()
        except Exception as exc:  # noqa: BLE001 - what is compared is which one, and its text
            return "error", type(exc), str(exc)

    compiled = outcome()
    with twin.pure_python():
        pure = outcome()
    return compiled, pure


@pytest.mark.parametrize("field", SendRequest._fields)
@pytest.mark.parametrize("kind", sorted(WRONG_KINDS))
def test_a_field_of_any_kind_gives_one_answer(field: str, kind: str) -> None:
    request = BASE._replace(**{field: WRONG_KINDS[kind]})
    compiled, pure = any_outcome(lambda: request.envelope(1000))
    assert compiled == pure
    compiled, pure = any_outcome(lambda: encode_send_frames([BASE, request], [1, 2], 1000))
    assert compiled == pure


@pytest.mark.parametrize("kind", sorted(WRONG_KINDS))
@pytest.mark.parametrize("place", ["visit token", "signed token", "timeout", "serial", "auth"])
def test_call_arguments_of_any_kind_give_one_answer(kind: str, place: str) -> None:
    value = WRONG_KINDS[kind]
    auth: object = {"visit token": (value, "token"), "signed token": (5, value), "auth": value}.get(place)
    timeout = value if place == "timeout" else 1000
    serial = value if place == "serial" else 1
    if place != "serial":
        assert operator.eq(*any_outcome(lambda: BASE.envelope(timeout, auth)))  # type: ignore[arg-type]
    assert operator.eq(*any_outcome(lambda: encode_send_frames([BASE], [serial], timeout,  # type: ignore[arg-type]
                                                               auth)))  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [True, False, bytearray(b"x"), memoryview(b"x"), b"c"],
                         ids=["True", "False", "bytearray", "memoryview", "bytes"])
def test_the_compiled_twin_itself_refuses_what_protobuf_refuses(value: object) -> None:
    """The defect itself, at the compiled function: a bool for an int, a bytes-like that is not bytes for the
    body, bytes for text; each raises for send.py to hand to the pure twin (never encoded as something else)."""
    if NATIVE is None:
        assert twin.HOT_PATH.startswith("pure-python")
        return
    fields: list[object] = [CLIENT, "t", 1, b"x", 0, 0, 0, None, None, None, Method.SEND_MESSAGE,
                            ServiceType.BROKER_WRITE, PROTOCOL_VERSION, 1000]
    places = [2, 4, 5, 6, 13] if isinstance(value, bool) else [0, 1] if isinstance(value, bytes) else [3]
    for place in places:
        with pytest.raises(TypeError):
            NATIVE.encode_send(*fields[:place], value, *fields[place + 1:])
    if isinstance(value, bool):
        with pytest.raises(TypeError):
            NATIVE.encode_send(*fields[:9], (value, ""), *fields[10:])


def test_a_window_of_plain_tuples_is_not_taken_for_send_requests() -> None:
    """The pure twin calls SendRequest.envelope; a plain 9-tuple has none, so the compiled one refuses it too."""
    compiled, pure = any_outcome(lambda: encode_send_frames([tuple(BASE)], [1], 1000))  # type: ignore[list-item]
    assert compiled == pure and pure[0] == "error" and pure[1] is AttributeError


@pytest.mark.parametrize("kind", ["None", "str", "float", "True"])
def test_decoders_given_no_bytes_raise_one_error(kind: str) -> None:
    value = WRONG_KINDS[kind]
    envelope = encode_response(Method.SEND_MESSAGE, ANSWERS["ok"].SerializeToString())
    for call in (lambda: parse_send_answer(value), lambda: decode_response(value)):  # type: ignore[arg-type]
        compiled, pure = any_outcome(call)
        assert compiled == pure and pure[0] == "error"
    for convert in (bytearray, memoryview):  # bytes-like: protobuf reads them, so both twins do
        data = convert(ANSWERS["ok"].SerializeToString())
        assert operator.eq(*any_outcome(lambda: parse_send_answer(data)))  # type: ignore[arg-type]  # noqa: B023
        wrapped = convert(envelope)
        assert operator.eq(*any_outcome(lambda: decode_response(wrapped)))  # type: ignore[arg-type]  # noqa: B023


# --- a sink batch's requests in one call: build_requests ---------------------------------------------------


def _requests_one_by_one(payloads: list[bytes], partition_ids: list[int], flags: list[int] | None,
                         msg_types: list[str] | None, msg_times: list[str] | None) -> list[SendRequest]:
    """The reference: each request built as ``Producer.prepare`` builds one (``checksum`` of message.py)."""
    return [SendRequest(CLIENT, "orders", partition_id, payload, flags[i] if flags else 0, checksum(payload), 42,
                        msg_types[i] if msg_types else "", msg_times[i] if msg_times else "")
            for i, (payload, partition_id) in enumerate(zip(payloads, partition_ids, strict=True))]


def _built(payloads: object, partition_ids: object, flags: object = None, msg_types: object = None,
           msg_times: object = None) -> tuple[object, object]:
    """Both twins' outcome, each request with its type (a tuple equals a SendRequest of the same fields)."""
    def call() -> object:
        built = send.build_requests(CLIENT, "orders", 42, payloads, partition_ids, flags, msg_types,  # type: ignore[arg-type]
                                    msg_times)  # type: ignore[arg-type]
        return [(type(request), request) for request in built]
    return both(call)


BATCHES = {
    "bare": ([b"x" * 100, b"\x00", b"y" * 70_000], [3, 10_001, 2**40], None, None, None),
    "attributes": ([b"\x00\x00\x00\x05a=b,cbody", b"z"], [0, 1], [1, 0], ["s", ""], ["202401021530", ""]),
    "empty": ([], [], None, None, None),
}


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_a_batch_of_requests_is_identical_to_building_each(name: str) -> None:
    payloads, partition_ids, flags, msg_types, msg_times = BATCHES[name]
    compiled, pure = _built(payloads, partition_ids, flags, msg_types, msg_times)
    expected = _requests_one_by_one(payloads, partition_ids, flags, msg_types, msg_times)
    assert compiled == pure == ("ok", [(SendRequest, request) for request in expected])
    if NATIVE is not None:  # the fast lane itself, no fallback
        built = NATIVE.build_requests(SendRequest, CLIENT, "orders", 42, payloads, partition_ids, flags, msg_types,
                                      msg_times)
        assert built == expected and all(type(request) is SendRequest for request in built)


@pytest.mark.parametrize("args", [
    ([b"a", bytearray(b"b")], [0, 1]),  # a payload that is not bytes: the pure twin takes it
    ((b"a",), [0]),  # not lists
    ([b"a", b"b"], [0]),  # unequal lengths
    ([b"a"], [0], [0, 1]),
    ([b"a"], [0], None, ["s", "t"]),
    ([b"a"], [0], None, None, "ab"),
    ([None], [0]),  # not a payload at all
], ids=["bytearray", "tuple", "short partitions", "long flags", "long msg_types", "str msg_times", "None"])
def test_batches_the_compiled_twin_refuses_end_as_in_python(args: tuple[object, ...]) -> None:
    compiled, pure = _built(*args)
    assert compiled == pure


@TWINS_FUZZ
@given(st.lists(st.tuples(st.binary(max_size=300), st.integers(-(2**70), 2**70), st.integers(0, 1),
                          st.text(max_size=8), st.text(max_size=14)), max_size=20),
       st.booleans())
def test_fuzz_batches_of_requests_are_identical(rows: list[tuple[bytes, int, int, str, str]], bare: bool) -> None:
    payloads = [row[0] for row in rows]
    partition_ids = [row[1] for row in rows]
    columns = (None, None, None) if bare else ([row[2] for row in rows], [row[3] for row in rows],
                                               [row[4] for row in rows])
    compiled, pure = _built(payloads, partition_ids, *columns)
    assert compiled == pure == ("ok", [(SendRequest, r) for r in _requests_one_by_one(payloads, partition_ids,
                                                                                       *columns)])
