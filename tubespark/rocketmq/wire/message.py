"""Messages: the properties string, stored-message records (pull and pop bodies), batch-send bodies.

A pull or pop answer's body is stored-message records back to back, big-endian, each starting with its
own total size (docs/rocketmq/protocol.md, "Stored messages"). Every length is checked against the bytes
left before anything is sliced, so a corrupt or hostile body raises :class:`CodecError` instead of
allocating or reading past its end. Bodies the producer compressed are inflated here (zlib, LZ4 frame,
zstd), and a record the broker stored as an *inner batch* is unwrapped into its messages, numbered from
the record's queue offset.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cramjam

from tubespark.errors import ChecksumMismatchError, CodecError, MessageFormatError

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_BYTES = 0x7FFF
"""The properties length travels as a signed 16-bit number."""

MAGIC_V1 = 0xDAA320A7 - (1 << 32)  # as a signed i32: topic length in 1 byte
MAGIC_V2 = 0xDAA320AB - (1 << 32)  # topic length in 2 bytes
MAGIC_BLANK = 0xCBD43194 - (1 << 32)  # end-of-file filler of the commit log, never a message

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_BORN_V6 = 0x10
SYSFLAG_STORE_V6 = 0x20
SYSFLAG_NEED_UNWRAP = 0x40
SYSFLAG_INNER_BATCH = 0x80
COMPRESSION_MASK = 0x700

MAX_INFLATED_BYTES = 64 * 1024 * 1024
"""Largest body a compressed message may inflate to (a zip bomb stops here)."""

# well-known property keys
KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
POP_CK = "POP_CK"
KEY_SEPARATOR = " "

_HEAD = struct.Struct(">iiiiiqqiq")  # size, magic, crc, queueId, flag, queueOffset, physOffset, sysFlag, born


def encode_properties(properties: Mapping[str, str]) -> str:
    """``name\\x01value\\x02`` for every pair; names and values may not hold the two separators."""
    parts = []
    for name, value in properties.items():
        if not name or any(sep in name or sep in value for sep in (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)):
            raise MessageFormatError(f"property {name!r} has an empty name or holds a separator character")
        parts.append(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}")
    text = "".join(parts)
    if len(text.encode()) > MAX_PROPERTIES_BYTES:
        raise MessageFormatError(f"properties of {len(text.encode())} bytes exceed the {MAX_PROPERTIES_BYTES}-byte "
                                 f"limit")
    return text


def decode_properties(text: str) -> dict[str, str]:
    """The pairs of a properties string; entries without a name or value are skipped, as servers do."""
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            out[name] = value
    return out


@dataclass(slots=True)
class StoredMessage:
    """One message as the broker stored it (what PULL and POP answer)."""

    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    properties: dict[str, str]
    born_ms: int
    store_ms: int
    sys_flag: int = 0
    flag: int = 0
    reconsume_times: int = 0
    physical_offset: int = 0
    born_host: str = ""
    store_host: str = ""
    body_crc: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(KEYS)

    @property
    def msg_id(self) -> str | None:
        """The producer's message id (``UNIQ_KEY``)."""
        return self.properties.get(UNIQ_KEY)


class _Cursor:
    """Bounds-checked big-endian reads over one record."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise CodecError(f"stored message: {what} of {n} bytes overruns the record")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[Any, ...]:
        if self.pos + fmt.size > self.end:
            raise CodecError(f"stored message: {what} overruns the record")
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values


_I8, _I16, _I32, _I64 = (struct.Struct(f) for f in (">b", ">h", ">i", ">q"))


def _host(cur: _Cursor, v6: bool, what: str) -> str:
    raw = cur.take(16 if v6 else 4, what)
    (port,) = cur.unpack(_I32, what)
    if v6:
        return f"[{':'.join(raw[i:i + 2].hex() for i in range(0, 16, 2))}]:{port}"
    return f"{'.'.join(str(b) for b in raw)}:{port}"


def inflate(body: bytes, sys_flag: int) -> bytes:
    """The body of a message the producer compressed (zlib for types 0 and 3, LZ4 frame 1, zstd 2)."""
    kind = (sys_flag & COMPRESSION_MASK) >> 8
    try:
        if kind in (0, 3):
            inflater = zlib.decompressobj()
            out = inflater.decompress(body, MAX_INFLATED_BYTES)
            if inflater.unconsumed_tail:
                raise CodecError(f"a compressed body inflates past {MAX_INFLATED_BYTES} bytes")
            return out
        if kind == 1:
            out = bytes(cramjam.lz4.decompress(body))
        elif kind == 2:
            out = bytes(cramjam.zstd.decompress(body))
        else:
            raise CodecError(f"unknown compression type {kind} in sysFlag {sys_flag:#x}")
    except (zlib.error, cramjam.DecompressionError) as exc:
        raise CodecError(f"compressed body does not inflate: {exc}") from None
    if len(out) > MAX_INFLATED_BYTES:
        raise CodecError(f"a compressed body inflates past {MAX_INFLATED_BYTES} bytes")
    return out


def decode_stored(data: bytes, *, verify_crc: bool = False, decompress: bool = True) -> list[StoredMessage]:
    """Every record of a pull/pop body, in order. CodecError on a malformed record, ChecksumMismatchError
    when ``verify_crc`` and a body's CRC (of the stored, possibly compressed, bytes) does not match."""
    out: list[StoredMessage] = []
    pos, total = 0, len(data)
    while pos < total:
        if total - pos < 8:
            raise CodecError(f"stored message: {total - pos} trailing bytes are not a record")
        size, magic = struct.unpack_from(">ii", data, pos)
        if size < _HEAD.size or size > total - pos:
            raise CodecError(f"stored message at byte {pos}: size {size} does not fit the {total - pos} bytes left")
        if magic not in (MAGIC_V1, MAGIC_V2):
            raise CodecError(f"stored message at byte {pos}: bad magic code {magic & 0xFFFFFFFF:#x}")
        out.extend(_decode_record(data, pos, pos + size, magic, verify_crc, decompress))
        pos += size
    return out


def _decode_record(data: bytes, start: int, end: int, magic: int, verify_crc: bool,
                   decompress: bool) -> list[StoredMessage]:
    cur = _Cursor(data, start, end)
    _size, _magic, crc, queue_id, flag, queue_offset, physical, sys_flag, born = cur.unpack(_HEAD, "header")
    born_host = _host(cur, bool(sys_flag & SYSFLAG_BORN_V6), "born host")
    (store_ms,) = cur.unpack(_I64, "store time")
    store_host = _host(cur, bool(sys_flag & SYSFLAG_STORE_V6), "store host")
    (reconsume,) = cur.unpack(_I32, "reconsume times")
    cur.unpack(_I64, "prepared transaction offset")
    (body_len,) = cur.unpack(_I32, "body length")
    body = cur.take(body_len, "body")
    (topic_len,) = cur.unpack(_I8 if magic == MAGIC_V1 else _I16, "topic length")
    topic = cur.take(topic_len & (0xFF if magic == MAGIC_V1 else 0xFFFF), "topic").decode("utf-8", "replace")
    (props_len,) = cur.unpack(_I16, "properties length")
    properties = decode_properties(cur.take(props_len, "properties").decode("utf-8", "replace"))
    if verify_crc and crc != zlib.crc32(body) & 0x7FFFFFFF:
        raise ChecksumMismatchError(f"{topic} queue {queue_id} offset {queue_offset}: body CRC {crc} does not match "
                                    f"{zlib.crc32(body) & 0x7FFFFFFF}")
    if sys_flag & SYSFLAG_NEED_UNWRAP and sys_flag & SYSFLAG_INNER_BATCH:
        inner = decode_batch_body(body)
        return [StoredMessage(topic, queue_id, queue_offset + i, b, {**properties, **p}, born, store_ms, 0, f,
                              reconsume, physical, born_host, store_host, crc)
                for i, (b, p, f) in enumerate(inner)]
    if decompress and sys_flag & SYSFLAG_COMPRESSED:
        body = inflate(body, sys_flag)
    return [StoredMessage(topic, queue_id, queue_offset, body, properties, born, store_ms, sys_flag, flag, reconsume,
                          physical, born_host, store_host, crc)]


# --- batch send -------------------------------------------------------------------------------------

_ENTRY_HEAD = struct.Struct(">iiiii")  # total size, magic (0), body CRC (0), flag, body length


def batch_entry(body: bytes, properties: str, flag: int = 0) -> bytes:
    """One message of a SEND_BATCH_MESSAGE body: size, magic 0, CRC 0, flag, body, properties."""
    props = properties.encode()
    if len(props) > MAX_PROPERTIES_BYTES:
        raise MessageFormatError(f"properties of {len(props)} bytes exceed the {MAX_PROPERTIES_BYTES}-byte limit")
    size = _ENTRY_HEAD.size + len(body) + 2 + len(props)
    return _ENTRY_HEAD.pack(size, 0, 0, flag, len(body)) + body + _I16.pack(len(props)) + props


def encode_batch_body(messages: Iterable[tuple[bytes, str]]) -> bytes:
    """The body of a batch send: ``(body, properties string)`` entries back to back."""
    return b"".join(batch_entry(body, props) for body, props in messages)


def decode_batch_body(data: bytes) -> list[tuple[bytes, dict[str, str], int]]:
    """``(body, properties, user flag)`` of each entry of a batch-send body (inner batches use the same layout)."""
    out = []
    pos, total = 0, len(data)
    while pos < total:
        if total - pos < _ENTRY_HEAD.size + 2:
            raise CodecError(f"batch entry at byte {pos}: {total - pos} bytes are too few for an entry")
        size, _magic, _crc, flag, body_len = _ENTRY_HEAD.unpack_from(data, pos)
        if size < _ENTRY_HEAD.size + 2 or size > total - pos:
            raise CodecError(f"batch entry at byte {pos}: size {size} does not fit the {total - pos} bytes left")
        cur = _Cursor(data, pos + _ENTRY_HEAD.size, pos + size)
        body = cur.take(body_len, "batch entry body")
        (props_len,) = cur.unpack(_I16, "batch entry properties length")
        props = decode_properties(cur.take(props_len, "batch entry properties").decode("utf-8", "replace"))
        out.append((body, props, flag))
        pos += size
    return out


def encode_stored(messages: Sequence[StoredMessage]) -> bytes:
    """Stored-message records of ``messages`` (V1 magic, IPv4 hosts): the broker's layout, for tests and fakes."""
    out = []
    for m in messages:
        topic = m.topic.encode()
        props = encode_properties(m.properties).encode()
        if len(topic) > 0xFF:
            raise MessageFormatError("a V1 record holds topics of at most 255 bytes")
        born_ip, born_port = _ip_port(m.born_host)
        store_ip, store_port = _ip_port(m.store_host)
        rest = (born_ip + _I32.pack(born_port) + _I64.pack(m.store_ms) + store_ip + _I32.pack(store_port)
                + _I32.pack(m.reconsume_times) + _I64.pack(0) + _I32.pack(len(m.body)) + m.body
                + struct.pack(">B", len(topic)) + topic + _I16.pack(len(props)) + props)
        size = _HEAD.size + len(rest)
        head = _HEAD.pack(size, MAGIC_V1, m.body_crc or zlib.crc32(m.body) & 0x7FFFFFFF, m.queue_id, m.flag,
                          m.queue_offset, m.physical_offset, m.sys_flag & ~(SYSFLAG_BORN_V6 | SYSFLAG_STORE_V6),
                          m.born_ms)
        out.append(head + rest)
    return b"".join(out)


def _ip_port(host: str) -> tuple[bytes, int]:
    if not host:
        return b"\x7f\x00\x00\x01", 0
    ip, _, port = host.rpartition(":")
    return bytes(int(p) for p in ip.split(".")), int(port)
