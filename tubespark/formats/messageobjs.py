"""MessageObjs: InLong's protobuf record list (DataProxy's ``msgEnType=1`` payload on TubeMQ).

From InLong's ``inlong-sdk/sdk-common/src/main/proto/ProxySdk.proto`` (package
``org.apache.inlong.sdk.commons.protocol``; no jar on Maven Central carries it, the field numbers are
taken from the .proto in apache/inlong)::

    message MessageObj {
      int64 msgTime = 1;               // ms
      string sourceIp = 2;
      bytes body = 3;
      map<string, string> params = 4;  // on the wire: repeated {string key = 1; string value = 2;}
    }
    message MessageObjs { repeated MessageObj msgs = 1; }

The payload is the serialized ``MessageObjs``, optionally compressed as the TubeMQ attribute
``compressType`` says: 0 none, 1 gzip, 2 Snappy (a raw block, as snappy-java's ``Snappy.compress``).

This tiny schema is decoded by hand with a bounded reader rather than through generated code: every
length is checked against the bytes left, nesting is fixed at three levels. Strict where protobuf
runtimes are lenient: a known field with the wrong wire type, group wire types, field number 0, an
over-long varint, or a string that is not UTF-8 raise :class:`PayloadFormatError`; unknown fields are
skipped (that is protobuf's compatibility rule, not damage). proto3 cannot tell 0 or "" from absent:
an absent (or 0) ``msgTime`` decodes to ``data_time=0`` and an absent (or empty) ``sourceIp`` to
``source_ip=""``, as InLong's generated ``getMsgTime()`` / ``getSourceIp()`` give them, so a row reads
what InLong's consumers read (``msgTime`` 1970-01-01 00:00 UTC for a record without a time). A
gzip-compressed payload of 0 bytes is an empty ``MessageObjs`` (no records), as InLong's ``GzipUtils``
reads it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from tubespark.formats.common import (
    DEFAULT_MAX_DECOMPRESSED,
    Budget,
    Record,
    decode_utf8,
    gzip_compress,
    gzip_decompress,
    snappy_compress,
    snappy_decompress,
)
from tubespark.formats.errors import PayloadEncodeError, PayloadFormatError, UnsupportedPayloadError

__all__ = [
    "COMPRESS_GZIP",
    "COMPRESS_NONE",
    "COMPRESS_SNAPPY",
    "decode_messageobjs",
    "encode_messageobjs",
]

COMPRESS_NONE = 0
COMPRESS_GZIP = 1
COMPRESS_SNAPPY = 2

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_WHAT = "MessageObjs"


def _varint(buf: memoryview, pos: int, end: int, what: str) -> tuple[int, int]:
    value = 0
    for i in range(10):
        if pos >= end:
            raise PayloadFormatError(f"{what}: truncated varint")
        b = buf[pos]
        pos += 1
        if i == 9 and b > 1:
            raise PayloadFormatError(f"{what}: varint longer than 64 bits")
        value |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return value, pos
    raise PayloadFormatError(f"{what}: varint longer than 10 bytes")


def _fields(buf: memoryview, pos: int, end: int, what: str) -> Iterable[tuple[int, int, int | memoryview]]:
    """``(field number, wire type, value)``: an int for varint/fixed, a view for length-delimited."""
    while pos < end:
        key, pos = _varint(buf, pos, end, what)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise PayloadFormatError(f"{what}: field number 0")
        value: int | memoryview
        if wire == _VARINT:
            value, pos = _varint(buf, pos, end, what)
        elif wire == _LEN:
            n, pos = _varint(buf, pos, end, what)
            if n > end - pos:
                raise PayloadFormatError(f"{what}: field {number} needs {n} bytes, {end - pos} left")
            value, pos = buf[pos : pos + n], pos + n
        elif wire in (_I64, _I32):
            size = 8 if wire == _I64 else 4
            if size > end - pos:
                raise PayloadFormatError(f"{what}: truncated fixed-size field {number}")
            value, pos = int.from_bytes(buf[pos : pos + size], "little"), pos + size
        else:
            raise PayloadFormatError(f"{what}: unsupported wire type {wire} (field {number})")
        yield number, wire, value


def _expect(wire: int, want: int, name: str, what: str) -> None:
    if wire != want:
        raise PayloadFormatError(f"{what}: field {name} has wire type {wire}, expected {want}")


def _map_entry(view: memoryview, what: str) -> tuple[str, str]:
    key = value = ""
    for number, wire, v in _fields(view, 0, len(view), what):
        if number in (1, 2):
            _expect(wire, _LEN, "params key/value", what)
            text = decode_utf8(cast(memoryview, v), f"{what} params")
            if number == 1:
                key = text
            else:
                value = text
    return key, value


def _message_obj(view: memoryview, what: str) -> Record:
    msg_time, source_ip, body = 0, "", b""
    params: dict[str, str] = {}
    for number, wire, v in _fields(view, 0, len(view), what):
        if number == 1:
            _expect(wire, _VARINT, "msgTime", what)
            n = cast(int, v)
            msg_time = n - (1 << 64) if n >= 1 << 63 else n
        elif number == 2:
            _expect(wire, _LEN, "sourceIp", what)
            source_ip = decode_utf8(cast(memoryview, v), f"{what} sourceIp")
        elif number == 3:
            _expect(wire, _LEN, "body", what)
            body = bytes(cast(memoryview, v))
        elif number == 4:
            _expect(wire, _LEN, "params", what)
            key, value = _map_entry(cast(memoryview, v), what)
            params[key] = value  # protobuf map semantics: a later entry wins
    return Record(body, params, msg_time, source_ip)  # proto3 defaults as InLong gives them: 0 and ""


def decode_messageobjs(
    payload: bytes | bytearray | memoryview,
    compress_type: int = COMPRESS_NONE,
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
) -> list[Record]:
    """The records of a (possibly compressed) serialized ``MessageObjs``: body, ``params`` as
    attributes, ``msgTime`` as data time, ``sourceIp``."""
    budget = Budget(max_decompressed)
    if compress_type == COMPRESS_GZIP:
        raw: bytes | memoryview = gzip_decompress(payload, budget, _WHAT)
    elif compress_type == COMPRESS_SNAPPY:
        raw = snappy_decompress(payload, budget, _WHAT)
    elif compress_type == COMPRESS_NONE:
        raw = payload if isinstance(payload, bytes) else bytes(payload)
    else:
        raise UnsupportedPayloadError(f"{_WHAT}: unknown compressType {compress_type}")
    buf = memoryview(raw)
    records: list[Record] = []
    for number, wire, v in _fields(buf, 0, len(buf), _WHAT):
        if number == 1:
            _expect(wire, _LEN, "msgs", _WHAT)
            records.append(_message_obj(cast(memoryview, v), f"{_WHAT} msgs[{len(records)}]"))
    return records


# ------------------------------------------------------------------------------------------ encoding


def _put_varint(out: bytearray, value: int) -> None:
    value &= (1 << 64) - 1
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise PayloadEncodeError(f"{what}: text with an unpaired surrogate: {text!r}") from e


def _put_len(out: bytearray, number: int, data: bytes) -> None:
    _put_varint(out, (number << 3) | _LEN)
    _put_varint(out, len(data))
    out += data


def encode_messageobjs(records: Iterable[Record], compress_type: int = COMPRESS_NONE) -> bytes:
    """Serialize records as ``MessageObjs`` (then compress per ``compress_type``). Publish with the
    TubeMQ attributes ``msgEnType=1`` and ``compressType=<compress_type>``."""
    if compress_type not in (COMPRESS_NONE, COMPRESS_GZIP, COMPRESS_SNAPPY):
        raise PayloadEncodeError(f"unknown compressType {compress_type}")
    out = bytearray()
    for rec in records:
        if not isinstance(rec, Record):
            raise PayloadEncodeError(f"encode_messageobjs takes Records, got {type(rec).__name__}")
        obj = bytearray()
        if rec.data_time:
            if not -(2**63) <= rec.data_time < 2**63:
                raise PayloadEncodeError(f"msgTime {rec.data_time} does not fit an int64")
            _put_varint(obj, (1 << 3) | _VARINT)
            _put_varint(obj, rec.data_time)
        if rec.source_ip:
            _put_len(obj, 2, _utf8(rec.source_ip, "sourceIp"))
        if rec.body:
            _put_len(obj, 3, bytes(rec.body))
        for key, value in rec.attributes.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise PayloadEncodeError(f"params keys and values must be str, got {key!r}={value!r}")
            entry = bytearray()
            _put_len(entry, 1, _utf8(key, "params key"))
            _put_len(entry, 2, _utf8(value, "params value"))
            _put_len(obj, 4, bytes(entry))
        _put_len(out, 1, bytes(obj))
    raw = bytes(out)
    if compress_type == COMPRESS_GZIP:
        return gzip_compress(raw)
    if compress_type == COMPRESS_SNAPPY:
        return snappy_compress(raw)
    return raw
