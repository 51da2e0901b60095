"""TANK's primitive encodings: little-endian integers, ``str8`` and 32-bit varints.

docs/tank/protocol.md#primitives. Everything a peer sends is read through :class:`Cursor`, which checks
that each field lies inside the payload before reading it, so a short or lying payload becomes a
:class:`TankProtocolError` naming the field, never an IndexError or an unbounded allocation.
"""

from __future__ import annotations

import struct

from tubespark.tank.errors import TankProtocolError, TruncatedFieldError

U8 = struct.Struct("<B")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")

UINT64_MAX = 0xFFFFFFFFFFFFFFFF
VARINT_MAX = 0xFFFFFFFF
VARINT_MAX_BYTES = 5


def encode_varint(value: int) -> bytes:
    """``value`` (0..2**32-1) as TANK's varint: 7 bits a byte, lowest first, top bit = more follows."""
    if not 0 <= value <= VARINT_MAX:
        raise TankProtocolError(f"varint value {value} outside 0..{VARINT_MAX}")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes | bytearray | memoryview, pos: int, end: int, what: str = "varint") -> tuple[int, int]:
    """``(value, position after it)`` of the varint at ``pos``; the varint must end before ``end``.

    Raises :class:`TruncatedFieldError` when ``end`` cuts it (the caller may know more bytes will come)
    and :class:`TankProtocolError` for a varint longer than 5 bytes or above 32 bits.
    """
    value = shift = 0
    for i in range(VARINT_MAX_BYTES):
        if pos + i >= end:
            raise TruncatedFieldError(f"{what}: cut after {i} bytes")
        byte = data[pos + i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value > VARINT_MAX:
                break
            return value, pos + i + 1
        shift += 7
    raise TankProtocolError(f"{what}: not a 32-bit varint")


def encode_str8(text: str | bytes, what: str = "string") -> bytes:
    """``str8``: one length byte, then the bytes (UTF-8 for text); at most 255 bytes."""
    data = text.encode() if isinstance(text, str) else bytes(text)
    if len(data) > 0xFF:
        raise TankProtocolError(f"{what} is {len(data)} bytes; a str8 holds at most 255")
    return bytes((len(data),)) + data


class Cursor:
    """Reads fields front to back from one payload (or a slice of it), checking every bound."""

    __slots__ = ("data", "end", "pos", "what")

    def __init__(self, data: bytes | bytearray | memoryview, what: str, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end
        self.what = what

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, field: str) -> int:
        start = self.pos
        if n < 0 or start + n > self.end:
            raise TruncatedFieldError(f"{self.what}: {field} needs {n} bytes at {start}, {self.end - start} left")
        self.pos = start + n
        return start

    def u8(self, field: str) -> int:
        return self.data[self._need(1, field)]

    def u16(self, field: str) -> int:
        return int(U16.unpack_from(self.data, self._need(2, field))[0])

    def peek_u16(self, field: str) -> int:
        if self.pos + 2 > self.end:
            raise TruncatedFieldError(f"{self.what}: {field} needs 2 bytes at {self.pos}")
        return int(U16.unpack_from(self.data, self.pos)[0])

    def u32(self, field: str) -> int:
        return int(U32.unpack_from(self.data, self._need(4, field))[0])

    def u64(self, field: str) -> int:
        return int(U64.unpack_from(self.data, self._need(8, field))[0])

    def varint(self, field: str) -> int:
        value, self.pos = decode_varint(self.data, self.pos, self.end, f"{self.what}: {field}")
        return value

    def raw(self, n: int, field: str) -> bytes:
        start = self._need(n, field)
        return bytes(self.data[start:start + n])

    def str8(self, field: str) -> str:
        n = self.u8(f"{field} length")
        raw = self.raw(n, field)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise TankProtocolError(f"{self.what}: {field} is not UTF-8: {raw!r}") from None

    def endpoint(self, field: str) -> str:
        """``address:4`` (network order) and ``port:u16``, as ``host:port``."""
        a, b, c, d = self.raw(4, f"{field} address")
        return f"{a}.{b}.{c}.{d}:{self.u16(f'{field} port')}"

    def done(self) -> None:
        """The payload must end here: trailing bytes mean the two sides disagree on the layout."""
        if self.pos != self.end:
            raise TankProtocolError(f"{self.what}: {self.end - self.pos} unexpected bytes after the last field")
