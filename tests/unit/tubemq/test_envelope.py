"""The RPC envelope: three varint-delimited protobufs inside a frame's blocks."""

from __future__ import annotations

import random

import pytest

from tubespark.errors import CodecError, TubeSparkError
from tubespark.tubemq.errors import ProtobufDecodeError, RpcError, StandbyMasterError
from tubespark.tubemq.wire.constants import FLAG_REQUEST, FLAG_RESPONSE, PROTOCOL_VERSION, Method, ServiceType
from tubespark.tubemq.wire.envelope import (
    decode_request,
    decode_response,
    delimited,
    encode_exception,
    encode_request,
    encode_response,
    parse_message,
)
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb
from tubespark.tubemq.wire.pb import master_service_pb2 as mpb
from tubespark.tubemq.wire.pb import rpc_pb2

STANDBY = "org.apache.inlong.tubemq.corerpc.exception.StandbyException"


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def split_delimited(buf: bytes) -> list[bytes]:
    """Cut an envelope into its messages by hand (independent of the code under test)."""
    parts, pos = [], 0
    while pos < len(buf):
        length = shift = 0
        while True:
            byte = buf[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        parts.append(buf[pos:pos + length])
        pos += length
    return parts


def delimited_raw(body: bytes) -> bytes:
    return varint(len(body)) + body


def response_prefix(status: int = rpc_pb2.ResponseHeader.SUCCESS) -> bytes:
    return (delimited(rpc_pb2.RpcConnHeader(flag=FLAG_RESPONSE))
            + delimited(rpc_pb2.ResponseHeader(status=status, protocolVer=PROTOCOL_VERSION)))


# --- requests ---------------------------------------------------------------------------------------


def test_request_round_trip() -> None:
    inner = bpb.GetMessageRequestC2B(clientId="c1", partitionId=10001, groupName="g", topicName="t")
    payload = encode_request(Method.GET_MESSAGE, ServiceType.BROKER_READ, inner, 10_000)

    decoded = decode_request(payload)
    assert decoded.service_type == ServiceType.BROKER_READ
    assert decoded.method == Method.GET_MESSAGE
    assert decoded.timeout_ms == 10_000
    assert parse_message(bpb.GetMessageRequestC2B, decoded.request) == inner


def test_request_layout_matches_the_spec() -> None:
    inner = mpb.CloseRequestP2M(clientId="p")
    conn, header, body = split_delimited(encode_request(Method.PRODUCER_CLOSE, ServiceType.MASTER, inner, 3000))
    assert rpc_pb2.RpcConnHeader.FromString(conn).flag == FLAG_REQUEST
    h = rpc_pb2.RequestHeader.FromString(header)
    assert (h.serviceType, h.protocolVer) == (1, 3)
    b = rpc_pb2.RequestBody.FromString(body)
    assert (b.method, b.timeout, b.request) == (3, 3000, inner.SerializeToString())


def test_request_envelope_straddling_a_large_inner_message() -> None:
    inner = bpb.SendMessageRequestP2B(clientId="p", topicName="t", partitionId=0, data=b"\x00" * 200_000,
                                      flag=0, checkSum=-1, sentAddr=0x7F000001)
    decoded = decode_request(encode_request(Method.SEND_MESSAGE, ServiceType.BROKER_WRITE, inner, 5000))
    assert parse_message(bpb.SendMessageRequestP2B, decoded.request).data == b"\x00" * 200_000


@pytest.mark.parametrize("timeout_ms", [0, -1])
def test_non_positive_timeout_is_rejected(timeout_ms: int) -> None:
    with pytest.raises(ValueError, match="timeout_ms must be positive"):
        encode_request(Method.GET_MESSAGE, ServiceType.BROKER_READ, bpb.GetMessageRequestC2B(), timeout_ms)


def test_a_response_is_not_accepted_as_a_request() -> None:
    with pytest.raises(ProtobufDecodeError):
        decode_request(encode_response(17, b""))


# --- responses --------------------------------------------------------------------------------------


def test_success_response_gives_method_and_data() -> None:
    data = bpb.CommitOffsetResponseB2C(success=True, errCode=200, errMsg="OK", currOffset=280).SerializeToString()
    assert decode_response(encode_response(Method.COMMIT_OFFSET, data)) == (Method.COMMIT_OFFSET, data)


def test_success_response_with_empty_data() -> None:
    assert decode_response(encode_response(13, b"")) == (13, b"")


def test_error_response_raises_rpc_error() -> None:
    with pytest.raises(RpcError) as info:
        decode_response(encode_exception("java.lang.IllegalStateException", "consumer not registered"))
    err = info.value
    assert type(err) is RpcError
    assert err.exception_name == "java.lang.IllegalStateException"
    assert err.server_message == "consumer not registered"
    assert err.fatal is False
    assert not err.retriable
    assert "IllegalStateException" in str(err) and "consumer not registered" in str(err)


NOT_READY = "org.apache.inlong.tubemq.corerpc.exception.ServerNotReadyException"


@pytest.mark.parametrize("fatal", [False, True])
def test_a_server_not_running_yet_is_retriable(fatal: bool) -> None:
    """A restarted broker's RPC port accepts connections a moment before its RPC server runs; calls then get
    this exception (seen on 2.4.0 in the rolling soak, right after a graceful restart). The same call succeeds
    a moment later: a read task that failed on it stopped the query."""
    with pytest.raises(RpcError) as info:
        decode_response(encode_exception(NOT_READY, "IPC server unable to read call parameters:RpcServer is not "
                                                    "running yet", fatal=fatal))
    assert info.value.retriable and info.value.exception_name == NOT_READY


def test_fatal_response_sets_fatal() -> None:
    with pytest.raises(RpcError) as info:
        decode_response(encode_exception("java.lang.Exception", "IPC server unable to read call parameters",
                                         fatal=True))
    assert info.value.fatal is True


@pytest.mark.parametrize("name", [STANDBY, "com.apache.tubemq.corerpc.exception.StandbyException"])
def test_standby_exception_maps_to_retriable_standby_error(name: str) -> None:
    with pytest.raises(StandbyMasterError) as info:
        decode_response(encode_exception(name, "127.0.0.1:8715 is not master now"))
    assert info.value.retriable
    assert info.value.exception_name == name


def test_exception_body_built_by_hand_decodes() -> None:
    body = rpc_pb2.RspExceptionBody(exceptionName="x.y.IOException", stackTrace="broken pipe")
    with pytest.raises(RpcError) as info:
        decode_response(response_prefix(rpc_pb2.ResponseHeader.ERROR) + delimited(body))
    assert (info.value.exception_name, info.value.server_message) == ("x.y.IOException", "broken pipe")


def test_a_request_is_not_accepted_as_a_response() -> None:
    payload = encode_request(5, 1, mpb.HeartRequestC2M(clientId="c", groupName="g", reportSubscribeInfo=False),
                             1000)
    with pytest.raises(ProtobufDecodeError):
        decode_response(payload)


# --- malformed envelopes ----------------------------------------------------------------------------


def valid_response() -> bytes:
    return encode_response(17, bpb.GetMessageResponseB2C(success=True, errCode=200).SerializeToString())


def test_every_truncation_of_a_response_is_a_decode_error() -> None:
    payload = valid_response()
    for cut in range(len(payload)):
        with pytest.raises(ProtobufDecodeError):
            decode_response(payload[:cut])


@pytest.mark.parametrize("garbage", [b"", b"\xff", b"\xff" * 11, b"\x80\x80\x80", b"\x05\x01\x02"])
def test_garbage_is_a_decode_error(garbage: bytes) -> None:
    with pytest.raises(ProtobufDecodeError):
        decode_response(garbage)
    with pytest.raises(ProtobufDecodeError):
        decode_request(garbage)


def test_length_prefix_beyond_the_remaining_bytes() -> None:
    body = rpc_pb2.RspResponseBody(method=17, data=b"abc").SerializeToString()
    payload = response_prefix() + varint(len(body) + 1) + body
    with pytest.raises(ProtobufDecodeError, match="claims"):
        decode_response(payload)
    huge = response_prefix() + varint(2**62) + body
    with pytest.raises(ProtobufDecodeError):
        decode_response(huge)


def test_bytes_that_are_not_a_protobuf_are_a_decode_error() -> None:
    bad = b"\x0f\xff\xff"  # field 1 with wire type 7: invalid
    with pytest.raises(ProtobufDecodeError):
        decode_response(response_prefix() + varint(len(bad)) + bad)


def test_inner_message_that_does_not_parse() -> None:
    with pytest.raises(ProtobufDecodeError):
        parse_message(bpb.GetMessageResponseB2C, b"\x0f\xff\xff")


def test_inner_message_missing_required_fields() -> None:
    partial = bpb.GetMessageResponseB2C(success=True).SerializePartialToString()  # errCode is required
    with pytest.raises(ProtobufDecodeError, match="errCode"):
        parse_message(bpb.GetMessageResponseB2C, partial)


def test_response_body_without_data_is_rejected() -> None:
    body = rpc_pb2.RspResponseBody(method=17).SerializePartialToString()
    with pytest.raises(ProtobufDecodeError, match="data"):
        decode_response(response_prefix() + delimited_raw(body))


def test_connection_header_without_flag_is_rejected() -> None:
    payload = (delimited_raw(b"") + delimited(rpc_pb2.ResponseHeader(status=0))
               + delimited(rpc_pb2.RspResponseBody(method=17, data=b"")))
    with pytest.raises(ProtobufDecodeError, match="flag"):
        decode_response(payload)


def test_unknown_response_status_is_not_taken_as_success() -> None:
    header = b"\x08\x07"  # status = 7: not SUCCESS/ERROR/FATAL
    body = rpc_pb2.RspResponseBody(method=17, data=b"").SerializeToString()
    payload = delimited(rpc_pb2.RpcConnHeader(flag=1)) + delimited_raw(header) + delimited_raw(body)
    with pytest.raises(ProtobufDecodeError):
        decode_response(payload)


def test_exception_name_that_is_not_utf8_is_a_decode_error() -> None:
    body = b"\x0a\x03\xff\xfe\xfd"  # exceptionName = three bytes that are not UTF-8
    with pytest.raises(ProtobufDecodeError, match="exceptionName"):
        decode_response(response_prefix(rpc_pb2.ResponseHeader.ERROR) + delimited_raw(body))


def test_inner_string_that_is_not_utf8_is_a_decode_error() -> None:
    inner = b"\x0a\x02\xc3\x28" + b"\x12\x01g" + b"\x20\x00"  # clientId = invalid UTF-8
    with pytest.raises(ProtobufDecodeError, match="clientId"):
        parse_message(mpb.HeartRequestC2M, inner)
    nested = mpb.HeartResponseM2C(success=True, errCode=200, errMsg="").SerializeToString()
    nested += b"\x22\x03\x22\x01\xff"  # event.subscribeInfo[0] = b"\xff"
    with pytest.raises(ProtobufDecodeError, match=r"event\.subscribeInfo"):
        parse_message(mpb.HeartResponseM2C, nested)


def test_mutated_envelopes_only_raise_typed_errors() -> None:
    rng = random.Random(7)
    bases = [valid_response(), encode_exception(STANDBY, "not master"),
             encode_exception("java.lang.Exception", "boom", fatal=True)]
    seen: set[type] = set()
    for i in range(3000):
        buf = bytearray(bases[i % len(bases)])
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        try:
            _method, data = decode_response(bytes(buf))
            parse_message(bpb.GetMessageResponseB2C, data)
        except TubeSparkError as exc:
            error = exc
        else:
            continue
        assert isinstance(error, CodecError | RpcError), error
        if isinstance(error, RpcError):
            assert isinstance(error.exception_name, str) and isinstance(error.server_message, str)
        seen.add(type(error))
    assert ProtobufDecodeError in seen
