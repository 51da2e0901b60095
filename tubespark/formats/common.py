"""Building blocks shared by the payload formats: the decoded record, a bounded byte reader, InLong's
attribute text ``k=v&k=v``, Java's modified UTF-8, and bounded Snappy / gzip.

Everything that reads bytes here checks a length against the bytes that remain before it slices, and
every decompression is checked against a byte budget *before* its output is allocated.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tubespark.formats.errors import (
    PayloadEncodeError,
    PayloadFormatError,
    PayloadTooLargeError,
)

#: Default cap on the bytes one payload may decompress to, summed over all its compressed blocks.
#: A TubeMQ message is at most a few MiB; Snappy expands at most ~21x, gzip far more.
DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024


@dataclass(frozen=True)
class Record:
    """One message taken out of a bundle.

    ``attributes`` are the record's merged attributes (for InLongMsg the bundle's common attributes
    win over the record's own, as InLong's parser does). ``data_time`` is milliseconds since the epoch:
    the ``dt`` attribute for InLongMsg (v4 always has one: its header's data time), ``msgTime`` for
    MessageObjs; ``None`` when the record has none. ``source_ip`` is MessageObj's ``sourceIp``.
    """

    body: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    data_time: int | None = None
    source_ip: str | None = None

    def __hash__(self) -> int:  # a dict field: hash what identifies the record
        return hash((self.body, tuple(sorted(self.attributes.items())), self.data_time, self.source_ip))


# --------------------------------------------------------------------------------------------- reader


class Reader:
    """A cursor over ``data[pos:end]`` whose every read is checked against the bytes left."""

    __slots__ = ("data", "end", "pos", "what")

    def __init__(self, data: bytes | memoryview, what: str, pos: int = 0, end: int | None = None) -> None:
        self.data = memoryview(data)
        self.pos = pos
        self.end = len(self.data) if end is None else end
        self.what = what

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, item: str) -> None:
        if n < 0:
            raise PayloadFormatError(f"{self.what}: negative length {n} for {item} at offset {self.pos}")
        if n > self.end - self.pos:
            raise PayloadFormatError(
                f"{self.what}: {item} needs {n} bytes at offset {self.pos}, only {self.end - self.pos} left"
            )

    def take(self, n: int, item: str) -> memoryview:
        self._need(n, item)
        view = self.data[self.pos : self.pos + n]
        self.pos += n
        return view

    def _unpack(self, fmt: struct.Struct, item: str) -> int:
        """One integer field (every format here is one big-endian integer)."""
        self._need(fmt.size, item)
        value: int = fmt.unpack_from(self.data, self.pos)[0]
        self.pos += fmt.size
        return value

    def u8(self, item: str) -> int:
        return self._unpack(_U8, item)

    def u16(self, item: str) -> int:
        return self._unpack(_U16, item)

    def i32(self, item: str) -> int:
        return self._unpack(_I32, item)

    def u32(self, item: str) -> int:
        return self._unpack(_U32, item)

    def i64(self, item: str) -> int:
        return self._unpack(_I64, item)

    def length(self, item: str) -> int:
        """A big-endian int32 length that must be >= 0 and fit in what is left."""
        n = self.i32(f"length of {item}")
        self._need(n, item)
        return n


_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


# ------------------------------------------------------------------------------- modified UTF-8


def decode_modified_utf8(data: bytes | memoryview, what: str) -> str:
    """Java's ``DataInput.readUTF`` body: modified UTF-8 (NUL as ``C0 80``, supplementary characters as
    two 3-byte surrogates). Unlike Java, a lone surrogate or a bad sequence is an error."""
    raw = bytes(data)
    if raw.isascii():
        return raw.decode("ascii")
    units = bytearray()
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c < 0x80:
            unit, i = c, i + 1
        elif c >> 5 == 0b110:
            if i + 1 >= n or raw[i + 1] & 0xC0 != 0x80:
                raise PayloadFormatError(f"{what}: bad modified UTF-8 2-byte sequence at {i}")
            unit, i = ((c & 0x1F) << 6) | (raw[i + 1] & 0x3F), i + 2
        elif c >> 4 == 0b1110:
            if i + 2 >= n or raw[i + 1] & 0xC0 != 0x80 or raw[i + 2] & 0xC0 != 0x80:
                raise PayloadFormatError(f"{what}: bad modified UTF-8 3-byte sequence at {i}")
            unit, i = ((c & 0x0F) << 12) | ((raw[i + 1] & 0x3F) << 6) | (raw[i + 2] & 0x3F), i + 3
        else:
            raise PayloadFormatError(f"{what}: byte 0x{c:02x} at {i} starts no modified UTF-8 sequence")
        units += unit.to_bytes(2, "big")
    try:
        return units.decode("utf-16-be")
    except UnicodeDecodeError as e:
        raise PayloadFormatError(f"{what}: unpaired surrogate in modified UTF-8 text") from e


def encode_modified_utf8(text: str) -> bytes:
    """``DataOutput.writeUTF``'s body (without the 2-byte length)."""
    if text.isascii() and "\0" not in text:
        return text.encode("ascii")
    try:
        utf16 = text.encode("utf-16-be")
    except UnicodeEncodeError as e:  # a lone surrogate in the str
        raise PayloadEncodeError(f"text with an unpaired surrogate cannot be written: {text!r}") from e
    out = bytearray()
    for (unit,) in struct.iter_unpack(">H", utf16):
        if 0 < unit < 0x80:
            out.append(unit)
        elif unit < 0x800:
            out += bytes((0xC0 | (unit >> 6), 0x80 | (unit & 0x3F)))
        else:
            out += bytes((0xE0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3F), 0x80 | (unit & 0x3F)))
    return bytes(out)


def decode_utf8(data: bytes | memoryview, what: str) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise PayloadFormatError(f"{what}: not valid UTF-8 ({e.reason} at {e.start})") from e


# ----------------------------------------------------------------------------------- attributes

#: Guava's ``CharMatcher.whitespace()``: what InLong's attribute splitter trims from each ``k=v`` entry.
GUAVA_WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_WS = "".join(sorted(GUAVA_WHITESPACE))


def parse_attributes(text: str, what: str = "attributes") -> dict[str, str]:
    """Parse ``k=v&k=v`` the way InLong's parser does for v4 bundles (Guava's map splitter): entries are
    split on ``&`` and trimmed of whitespace, each must be exactly ``key=value``, keys are unique.
    The empty string is the empty map. Anything else raises :class:`PayloadFormatError`."""
    if text == "":
        return {}
    result: dict[str, str] = {}
    for raw_entry in text.split("&"):
        entry = raw_entry.strip(_WS)
        parts = entry.split("=")
        if len(parts) != 2:
            raise PayloadFormatError(f"{what}: entry {entry!r} of {text!r} is not key=value")
        key, value = parts
        if key in result:
            raise PayloadFormatError(f"{what}: duplicate key {key!r} in {text!r}")
        result[key] = value
    return result


def read_attributes(text: str) -> dict[str, str]:
    """Read ``k=v&k=v`` leniently, as the attribute text of an InLongMsg v0..v2 group: never fails.

    InLong's parser never parses that text (``getAttrs()`` hands it back as a string), so a bundle whose
    text is not strict ``k=v&k=v`` is still read by InLong's consumers; we read it too. Entries are split
    on ``&`` and trimmed like :func:`parse_attributes`; an empty entry is skipped; an entry without ``=``
    is a key with the value ``""``; the first ``=`` ends the key (later ones belong to the value); **a
    repeated key: its last occurrence wins** (as a Java ``HashMap.put`` does, e.g. InLong Sort's
    ``StringUtils.splitKv``). On text :func:`parse_attributes` accepts, both give the same map.
    """
    result: dict[str, str] = {}
    for raw_entry in text.split("&"):
        entry = raw_entry.strip(_WS)
        if entry:
            key, _, value = entry.partition("=")
            result.pop(key, None)  # the last occurrence wins, and takes its place in the order
            result[key] = value
    return result


def format_attributes(attributes: Mapping[str, str]) -> str:
    """``k=v&k=v`` in the mapping's order; raises :class:`PayloadEncodeError` for a key or value that
    :func:`parse_attributes` (and InLong's parser) would not give back unchanged."""
    parts = []
    for key, value in attributes.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise PayloadEncodeError(f"attribute keys and values must be str, got {key!r}={value!r}")
        for label, text in (("key", key), ("value", value)):
            if "&" in text or "=" in text:
                raise PayloadEncodeError(f"attribute {label} {text!r} contains '&' or '='")
        entry = f"{key}={value}"
        if entry[0] in GUAVA_WHITESPACE or entry[-1] in GUAVA_WHITESPACE:
            raise PayloadEncodeError(f"attribute {entry!r} starts or ends with whitespace (InLong trims it)")
        parts.append(entry)
    return "&".join(parts)


def data_time_of(attributes: Mapping[str, str]) -> int | None:
    """The ``dt`` attribute as epoch milliseconds, when it is a plain decimal integer."""
    dt = attributes.get("dt")
    if dt is None:
        return None
    dt = dt.strip(_WS)
    digits = dt[1:] if dt[:1] in ("-", "+") else dt
    if not digits.isascii() or not digits.isdigit() or len(digits) > 19:
        return None
    return int(dt)


# ---------------------------------------------------------------------------------- compression


class Budget:
    """How many decompressed bytes one payload may still produce."""

    __slots__ = ("left",)

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("max_decompressed must be >= 0")
        self.left = limit

    def spend(self, n: int, what: str) -> None:
        if n > self.left:
            raise PayloadTooLargeError(f"{what}: would decompress to {n} bytes, over the cap ({self.left} left)")
        self.left -= n


def _cramjam() -> Any:
    try:
        import cramjam
    except ImportError as e:  # pragma: no cover - cramjam is a declared dependency
        raise ModuleNotFoundError("Snappy payloads need the 'cramjam' package (pip install cramjam)") from e
    return cramjam


# Snappy: every element of a raw block makes at most 64 output bytes from at least 3 input bytes, so a
# block cannot expand more than 64/3 times (plus its preamble). A larger declared size is a lie.
_SNAPPY_MAX_RATIO = 22


def snappy_uncompressed_length(block: bytes | bytearray | memoryview, what: str) -> int:
    """The varint preamble of a raw Snappy block (the uncompressed length), checked."""
    value, shift = 0, 0
    for i in range(5):
        if i >= len(block):
            raise PayloadFormatError(f"{what}: Snappy block too short for its length preamble")
        b = block[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value > 0xFFFFFFFF:
                break
            return value
        shift += 7
    raise PayloadFormatError(f"{what}: bad Snappy length preamble")


def snappy_decompress(block: bytes | bytearray | memoryview, budget: Budget, what: str) -> bytes:
    """Decompress one raw Snappy block (snappy-java's ``Snappy.compress`` format), bounded by ``budget``."""
    declared = snappy_uncompressed_length(block, what)
    if declared > _SNAPPY_MAX_RATIO * len(block) + 16:
        raise PayloadFormatError(f"{what}: Snappy block of {len(block)} bytes claims {declared} bytes")
    budget.spend(declared, what)
    try:
        out = bytes(_cramjam().snappy.decompress_raw(bytes(block)))
    except Exception as e:  # noqa: BLE001 - cramjam raises its own DecompressionError / ValueError
        raise PayloadFormatError(f"{what}: corrupt Snappy block ({e})") from None
    if len(out) != declared:
        raise PayloadFormatError(f"{what}: Snappy block gave {len(out)} bytes, declared {declared}")
    return out


def snappy_compress(data: bytes) -> bytes:
    return bytes(_cramjam().snappy.compress_raw(bytes(data)))


def gzip_decompress(data: bytes | bytearray | memoryview, budget: Budget, what: str) -> bytes:
    """Decompress gzip data (one or more members, as Java's GZIPInputStream reads), bounded by ``budget``.

    Zero bytes decompress to zero bytes: InLong's ``GzipUtils`` returns an empty input unchanged, so an
    empty gzip-compressed MessageObjs is an empty list of messages there, not damage."""
    out = bytearray()
    rest = bytes(data)
    while rest:
        d = zlib.decompressobj(wbits=31)
        try:
            chunk = d.decompress(rest, budget.left + 1)
        except zlib.error as e:
            raise PayloadFormatError(f"{what}: corrupt gzip data ({e})") from None
        budget.spend(len(chunk), what)
        out += chunk
        if not d.eof:
            if d.unconsumed_tail:
                raise PayloadTooLargeError(f"{what}: gzip data decompresses past the cap")
            raise PayloadFormatError(f"{what}: truncated gzip data")
        rest = d.unused_data
    return bytes(out)


def gzip_compress(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=31)
    return c.compress(bytes(data)) + c.flush()
