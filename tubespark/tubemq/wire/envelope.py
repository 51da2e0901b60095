"""The RPC envelope inside a frame: three varint-delimited protobufs.

Request:  ``RpcConnHeader{flag=0} | RequestHeader | RequestBody{method, timeout, request}``
Response: ``RpcConnHeader{flag=1} | ResponseHeader{status} | RspResponseBody | RspExceptionBody``

Failure has two shapes on the wire and both end up typed here: an RPC-level exception (status ERROR
or FATAL with a Java class name) becomes :class:`RpcError`; business errors live inside the
method's response message and are the client layer's concern.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Protocol, TypeVar, cast

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from tubespark.tubemq.errors import ProtobufDecodeError, RpcError, ServerNotReadyError, StandbyMasterError
from tubespark.tubemq.wire import twin
from tubespark.tubemq.wire.blocks import Blocks
from tubespark.tubemq.wire.constants import FLAG_REQUEST, FLAG_RESPONSE, PROTOCOL_VERSION
from tubespark.tubemq.wire.pb import rpc_pb2

_MAX_VARINT_BYTES = 10

M = TypeVar("M", bound=Message)


class _ReportsMissingFields(Protocol):
    """``Message.FindInitializationErrors``: every protobuf runtime has it, the typing stubs omit it."""

    def FindInitializationErrors(self) -> list[str]: ...  # noqa: N802 - protobuf's name


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def delimited(message: Message) -> bytes:
    """Serialise with a varint length prefix (protobuf's writeDelimitedTo)."""
    body = message.SerializeToString()
    return _varint(len(body)) + body


@functools.cache
def _has_strings(descriptor: Descriptor) -> bool:
    """Whether messages of this type can hold a string field anywhere (cached; skips e.g. TransferedMessage)."""
    pending, seen = [descriptor], set()
    while pending:
        desc = pending.pop()
        if desc.full_name in seen:
            continue
        seen.add(desc.full_name)
        for field in desc.fields:
            if field.type == FieldDescriptor.TYPE_STRING:
                return True
            if field.message_type is not None:
                pending.append(field.message_type)
    return False


def _non_utf8_field(message: Message) -> str | None:
    """Path of the first string field whose bytes were not UTF-8, else None.

    Python protobuf hands such proto2 fields back as ``bytes`` instead of raising, which would surface
    later as a TypeError far from the wire; a Java peer always writes valid UTF-8.
    """
    if not _has_strings(message.DESCRIPTOR):
        return None
    for field, value in message.ListFields():
        values = value if field.is_repeated else (value,)
        if field.type == FieldDescriptor.TYPE_STRING:
            if any(isinstance(v, bytes) for v in values):
                return field.name
        elif field.message_type is not None and _has_strings(field.message_type):
            for item in values:
                inner = _non_utf8_field(item)
                if inner is not None:
                    return f"{field.name}.{inner}"
    return None


def _parse_into(message: Message, data: bytes | memoryview) -> None:
    """``ParseFromString`` plus the checks Python protobuf skips: required fields present, strings UTF-8."""
    name = type(message).__name__
    try:
        message.ParseFromString(data)  # type: ignore[arg-type]  # upb takes any buffer: a fetch answer's view
    except DecodeError as exc:
        raise ProtobufDecodeError(f"cannot decode {name}: {exc}") from exc
    if not message.IsInitialized():
        missing = ", ".join(cast(_ReportsMissingFields, message).FindInitializationErrors())
        raise ProtobufDecodeError(f"cannot decode {name}: required field(s) missing: {missing}")
    bad = _non_utf8_field(message)
    if bad is not None:
        raise ProtobufDecodeError(f"cannot decode {name}: string field {bad} is not valid UTF-8")


def _read_delimited(buf: bytes, pos: int, message: Message) -> int:
    """Parse one delimited message from ``buf[pos:]`` into ``message``; return the next position."""
    length = shift = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= len(buf):
            raise ProtobufDecodeError(f"envelope ends inside a length prefix of {type(message).__name__}")
        byte = buf[pos + i]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            pos += i + 1
            break
    else:
        raise ProtobufDecodeError("length prefix longer than 10 bytes")
    if length > len(buf) - pos:
        raise ProtobufDecodeError(f"{type(message).__name__} claims {length} bytes, "
                                  f"{len(buf) - pos} remain in the frame")
    _parse_into(message, buf[pos:pos + length])
    return pos + length


def parse_message(cls: type[M], data: bytes | memoryview) -> M:
    """Parse a method's inner request or response message, mapping failures to our error type."""
    message = cls()
    _parse_into(message, data)
    return message


def encode_request(method: int, service_type: int, request: Message, timeout_ms: int) -> bytes:
    """Envelope bytes for one call. ``timeout_ms`` is mandatory: the server drops requests older than it."""
    if timeout_ms <= 0:
        raise ValueError("timeout_ms must be positive: the server drops requests with a zero timeout")
    return b"".join((
        delimited(rpc_pb2.RpcConnHeader(flag=FLAG_REQUEST)),
        delimited(rpc_pb2.RequestHeader(serviceType=service_type, protocolVer=PROTOCOL_VERSION)),
        delimited(rpc_pb2.RequestBody(method=method, timeout=timeout_ms,
                                      request=request.SerializeToString())),
    ))


@dataclass(frozen=True)
class DecodedRequest:
    service_type: int
    method: int
    timeout_ms: int
    request: bytes


def decode_request(payload: bytes) -> DecodedRequest:
    """Inverse of :func:`encode_request` (used by tests and by fault-injection peers)."""
    conn, header, body = rpc_pb2.RpcConnHeader(), rpc_pb2.RequestHeader(), rpc_pb2.RequestBody()
    pos = _read_delimited(payload, 0, conn)
    if conn.flag != FLAG_REQUEST:
        raise ProtobufDecodeError(f"expected a request (flag 0), got flag {conn.flag}")
    pos = _read_delimited(payload, pos, header)
    _read_delimited(payload, pos, body)
    return DecodedRequest(header.serviceType, body.method, body.timeout, body.request)


def encode_response(method: int, data: bytes) -> bytes:
    """A successful response envelope (the peer side of :func:`decode_response`)."""
    return b"".join((
        delimited(rpc_pb2.RpcConnHeader(flag=FLAG_RESPONSE)),
        delimited(rpc_pb2.ResponseHeader(status=rpc_pb2.ResponseHeader.SUCCESS,
                                         protocolVer=PROTOCOL_VERSION)),
        delimited(rpc_pb2.RspResponseBody(method=method, data=data)),
    ))


def encode_exception(exception_name: str, text: str, *, fatal: bool = False) -> bytes:
    """An exception response envelope, as the server writes when a handler throws."""
    status = rpc_pb2.ResponseHeader.FATAL if fatal else rpc_pb2.ResponseHeader.ERROR
    return b"".join((
        delimited(rpc_pb2.RpcConnHeader(flag=FLAG_RESPONSE)),
        delimited(rpc_pb2.ResponseHeader(status=status, protocolVer=PROTOCOL_VERSION)),
        delimited(rpc_pb2.RspExceptionBody(exceptionName=exception_name, stackTrace=text)),
    ))


def decode_response(payload: bytes | Blocks) -> tuple[int, bytes]:
    """Return ``(method, data)`` of a successful response; raise :class:`RpcError` for an exception.

    The compiled twin (:mod:`~tubespark.tubemq.wire.twin`) takes the common case, a success in the usual
    encoding; everything else, exceptions and garbage included, is decided here. A payload left in its
    blocks (:class:`~tubespark.tubemq.wire.blocks.Blocks`) is joined first: only the fetch reads them in place.
    """
    if isinstance(payload, Blocks):
        payload = payload.join()
    compiled = twin.native()
    if compiled is not None:
        decoded: tuple[int, bytes] | None = compiled.decode_response(payload)
        if decoded is not None:
            return decoded
    conn, header = rpc_pb2.RpcConnHeader(), rpc_pb2.ResponseHeader()
    pos = _read_delimited(payload, 0, conn)
    if conn.flag != FLAG_RESPONSE:
        raise ProtobufDecodeError(f"expected a response (flag 1), got flag {conn.flag}")
    pos = _read_delimited(payload, pos, header)
    if header.status == rpc_pb2.ResponseHeader.SUCCESS:
        body = rpc_pb2.RspResponseBody()
        _read_delimited(payload, pos, body)
        return body.method, body.data
    exc = rpc_pb2.RspExceptionBody()
    _read_delimited(payload, pos, exc)
    raise rpc_exception(exc.exceptionName, exc.stackTrace, fatal=header.status == rpc_pb2.ResponseHeader.FATAL)


def decode_response_view(payload: bytes | Blocks) -> tuple[int, bytes | memoryview | Blocks]:
    """:func:`decode_response` with the data as a view of ``payload`` where the compiled twin is sure of the
    envelope (``locate_response``): a fetch answer is half a MiB, which the copy cost every fetch. A payload
    left in its blocks gives its data the same way (``locate_blocks``: a narrower :class:`Blocks`). The
    pure-Python twin is :func:`decode_response` itself (same method, same data bytes, same errors)."""
    compiled = twin.native()
    if compiled is not None:
        if isinstance(payload, Blocks):
            found: tuple[int, int, int] | None = compiled.locate_blocks(payload.raw)
            if found is not None:
                return found[0], payload.narrowed(found[1], found[2])
            return decode_response(payload)
        located: tuple[int, int, int] | None = compiled.locate_response(payload)
        if located is not None:
            method, start, length = located
            return method, memoryview(payload)[start:start + length]
    return decode_response(payload)


def rpc_exception(name: str, text: str, *, fatal: bool) -> RpcError:
    """Map a server exception class name to our type (by suffix: the package varies by protocol version)."""
    if name.endswith("StandbyException"):
        return StandbyMasterError(name, text, fatal=fatal)
    if name.endswith("ServerNotReadyException"):
        return ServerNotReadyError(name, text, fatal=fatal)
    return RpcError(name, text, fatal=fatal)
