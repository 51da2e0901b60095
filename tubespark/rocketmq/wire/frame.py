"""Remoting frames: a command (code, opaque, flags, string header fields, body) <-> bytes.

A frame is big-endian ``total:i32`` (everything after itself), ``typeAndHeaderLen:i32`` (serialize type in
the top byte, header length in the low 24 bits), the header, then the body. The header is either JSON or
RocketMQ's binary map; a server answers in *its* configured type whatever the request used, so both are
decoded (docs/rocketmq/protocol.md, "Frames").

Requests are written with JSON headers by default: the pop family's codes (2000xx) do not fit the binary
header's 16-bit code, and the name server's route answer depends on ``version`` which both carry.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from tubespark.core.framed_io import Reader
from tubespark.errors import CodecError, FrameTooLargeError
from tubespark.rocketmq.wire.codes import BINARY_CODE_LIMIT

JSON, ROCKETMQ = 0, 1
"""Serialize types, as the top byte of the second frame word."""

VERSION = 479
"""The client version we announce: RocketMQ 5.3.3's ordinal. Above 401 the name server answers routes in
standard JSON; above 475 a server that is shutting down answers GO_AWAY instead of dropping requests."""

LANGUAGE = "PYTHON"
LANGUAGES = {"JAVA": 0, "CPP": 1, "DOTNET": 2, "PYTHON": 3, "DELPHI": 4, "ERLANG": 5, "RUBY": 6, "OTHER": 7,
             "HTTP": 8, "GO": 9, "PHP": 10, "OMS": 11, "RUST": 12, "NODE_JS": 13}
_LANGUAGE_NAMES = {code: name for name, code in LANGUAGES.items()}

FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Largest frame we accept from a peer. A pull answer holds at most a few MiB (the broker caps each
transfer), a single message at most its 4 MiB default limit; 64 MiB leaves room without being unbounded."""
MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""Largest frame a broker accepts by default (``com.rocketmq.remoting.frameMaxLength``)."""
MAX_HEADER_BYTES = 0xFFFFFF

_I32 = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")
_BIN_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag


@dataclass
class Command:
    """One remoting command: a request we send or a response (or server request) we read.

    ``ext`` holds the custom header fields as strings, as the protocol carries them; ``serialize_type`` is
    the header type it arrived in (or is to be written in).
    """

    code: int
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    version: int = VERSION
    language: str = LANGUAGE
    serialize_type: int = JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def field_int(self, name: str) -> int:
        """A required numeric header field; CodecError when it is missing or not a number."""
        value = self.ext.get(name)
        if value is None:
            raise CodecError(f"response {self.code} lacks header field {name!r}")
        try:
            return int(value)
        except ValueError:
            raise CodecError(f"header field {name}={value!r} is not a number") from None

    def field_int_or(self, name: str, default: int) -> int:
        return self.field_int(name) if self.ext.get(name) not in (None, "") else default


def request(code: int, fields: Mapping[str, object] | None = None, body: bytes = b"", *,
            oneway: bool = False) -> Command:
    """A request command; ``fields`` become header strings (``True`` -> ``"true"``), ``None`` values are left out."""
    ext: dict[str, str] = {}
    for key, value in (fields or {}).items():
        if value is None:
            continue
        ext[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return Command(code, ext, body, flag=FLAG_ONEWAY if oneway else 0)


# --- encoding ---------------------------------------------------------------------------------------


def encode_json_header(cmd: Command, opaque: int) -> bytes:
    doc: dict[str, object] = {"code": cmd.code, "language": cmd.language, "version": cmd.version, "opaque": opaque,
                              "flag": cmd.flag, "extFields": cmd.ext, "serializeTypeCurrentRPC": "JSON"}
    if cmd.remark is not None:
        doc["remark"] = cmd.remark
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode()


def encode_binary_header(cmd: Command, opaque: int) -> bytes:
    """The RocketMQ binary header; CodecError for a code or version above 16 bits (the pop family)."""
    if not -0x8000 <= cmd.code <= BINARY_CODE_LIMIT or not 0 <= cmd.version <= BINARY_CODE_LIMIT:
        raise CodecError(f"request code {cmd.code} / version {cmd.version} does not fit the binary header "
                         f"(16 bits); send it with a JSON header")
    parts = [_BIN_FIXED.pack(cmd.code, LANGUAGES.get(cmd.language, LANGUAGES["OTHER"]), cmd.version, opaque,
                             cmd.flag)]
    remark = (cmd.remark or "").encode()
    parts += [_I32.pack(len(remark)), remark]
    entries = []
    for key, value in cmd.ext.items():
        k, v = key.encode(), value.encode()
        entries += [struct.pack(">h", len(k)), k, _I32.pack(len(v)), v]
    ext = b"".join(entries)
    parts += [_I32.pack(len(ext)), ext]
    return b"".join(parts)


def encode_command(cmd: Command, opaque: int, serialize_type: int = JSON) -> bytes:
    """The whole frame of ``cmd`` with ``opaque`` as its request id."""
    header = encode_json_header(cmd, opaque) if serialize_type == JSON else encode_binary_header(cmd, opaque)
    if len(header) > MAX_HEADER_BYTES:
        raise CodecError(f"a header of {len(header)} bytes exceeds the 24-bit header length")
    total = 4 + len(header) + len(cmd.body)
    if total + 4 > MAX_REQUEST_BYTES:
        raise FrameTooLargeError(f"a request of {total + 4} bytes exceeds the broker's {MAX_REQUEST_BYTES}-byte "
                                 f"frame limit")
    return _PREFIX.pack(total, (serialize_type << 24) | len(header)) + header + cmd.body


# --- decoding ---------------------------------------------------------------------------------------


def read_frame(reader: Reader, max_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """One frame from ``reader``, without its length word; the length is checked before reading."""
    (total,) = _I32.unpack(reader.read_exactly(4))
    if total < 4:
        raise CodecError(f"frame length {total} is shorter than its header-length word")
    if total > max_bytes:
        raise FrameTooLargeError(f"frame of {total} bytes exceeds the {max_bytes}-byte limit")
    return reader.read_exactly(total)


def _split(frame: bytes) -> tuple[int, bytes, memoryview]:
    if len(frame) < 4:
        raise CodecError("frame shorter than its header-length word")
    (word,) = struct.unpack_from(">I", frame)
    serialize_type, header_len = word >> 24, word & MAX_HEADER_BYTES
    if header_len > len(frame) - 4:
        raise CodecError(f"header length {header_len} exceeds the frame's {len(frame) - 4} bytes")
    view = memoryview(frame)
    return serialize_type, bytes(view[4:4 + header_len]), view[4 + header_len:]


def decode_command(frame: bytes) -> Command:
    """A whole frame (without the length word) -> :class:`Command`; CodecError for anything malformed."""
    serialize_type, header, body = _split(frame)
    if serialize_type == JSON:
        cmd = decode_json_header(header)
    elif serialize_type == ROCKETMQ:
        cmd = decode_binary_header(header)
    else:
        raise CodecError(f"unknown serialize type {serialize_type}")
    cmd.body = bytes(body)
    return cmd


def peek_identity(frame: bytes) -> tuple[int, int]:
    """``(opaque, flag)`` of a frame, decoding only its header (to route it to the waiting call)."""
    serialize_type, header, _body = _split(frame)
    if serialize_type == ROCKETMQ:
        if len(header) < _BIN_FIXED.size:
            raise CodecError("binary header shorter than its fixed part")
        _code, _lang, _version, opaque, flag = _BIN_FIXED.unpack_from(header)
        return opaque, flag
    cmd = decode_json_header(header) if serialize_type == JSON else None
    if cmd is None:
        raise CodecError(f"unknown serialize type {serialize_type}")
    return cmd.opaque, cmd.flag


def _int_of(doc: Mapping[str, object], key: str, default: int = 0) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CodecError(f"JSON header field {key!r} is not an integer: {value!r}")
    return value


def decode_json_header(header: bytes) -> Command:
    try:
        doc = json.loads(header)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CodecError(f"JSON header does not parse: {exc}") from None
    if not isinstance(doc, dict) or "code" not in doc:
        raise CodecError("JSON header is not an object with a code")
    ext_raw = doc.get("extFields") or {}
    if not isinstance(ext_raw, dict):
        raise CodecError("JSON header extFields is not an object")
    ext = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in ext_raw.items() if v is not None}
    remark = doc.get("remark")
    language = doc.get("language", "JAVA")
    return Command(_int_of(doc, "code"), ext, opaque=_int_of(doc, "opaque"), flag=_int_of(doc, "flag"),
                   remark=remark if isinstance(remark, str) else None, version=_int_of(doc, "version"),
                   language=language if isinstance(language, str) else "OTHER", serialize_type=JSON)


def decode_binary_header(header: bytes) -> Command:
    end = len(header)
    if end < _BIN_FIXED.size + 8:
        raise CodecError("binary header shorter than its fixed part")
    code, language, version, opaque, flag = _BIN_FIXED.unpack_from(header)
    pos = _BIN_FIXED.size
    remark_bytes, pos = _string(header, pos, 4, end)
    (ext_len,) = _I32.unpack_from(header, pos)
    pos += 4
    if not 0 <= ext_len <= end - pos:
        raise CodecError(f"binary header field map of {ext_len} bytes overruns the header")
    ext: dict[str, str] = {}
    stop = pos + ext_len
    while pos < stop:
        key, pos = _string(header, pos, 2, stop)
        value, pos = _string(header, pos, 4, stop)
        ext[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return Command(code, ext, opaque=opaque, flag=flag, remark=remark_bytes.decode("utf-8", "replace") or None,
                   version=version, language=_LANGUAGE_NAMES.get(language, "OTHER"), serialize_type=ROCKETMQ)


def _string(data: bytes, pos: int, width: int, end: int) -> tuple[bytes, int]:
    """A length-prefixed string (``width`` 2 or 4 bytes of length) within ``data[pos:end]``."""
    if pos + width > end:
        raise CodecError("binary header ends inside a string length")
    length = struct.unpack_from(">h" if width == 2 else ">i", data, pos)[0]
    pos += width
    if not 0 <= length <= end - pos:
        raise CodecError(f"binary header string of {length} bytes overruns its {end - pos} remaining bytes")
    return data[pos:pos + length], pos + length


class RemotingCodec:
    """The :class:`tubespark.core.framed.FrameCodec` of the remoting protocol.

    ``read`` returns ``(opaque, frame)`` of the next *response*: requests the server sends on its own
    (consumer-list changes, transaction checks) carry the server's opaque counter, which could collide
    with ours, so they are skipped here rather than matched to a pending call.
    """

    def __init__(self, serialize_type: int = JSON, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.serialize_type = serialize_type
        self.max_frame_bytes = max_frame_bytes

    def encode(self, correlation_id: int, request: Command) -> bytes:
        return encode_command(request, correlation_id, self.serialize_type)

    def read(self, reader: Reader) -> tuple[int, bytes]:
        while True:
            frame = read_frame(reader, self.max_frame_bytes)
            opaque, flag = peek_identity(frame)
            if flag & FLAG_RESPONSE:
                return opaque, frame
