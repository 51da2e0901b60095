"""InLongMsg: the binary message bundle of Apache InLong (DataProxy's ``msgEnType=2`` payload on TubeMQ).

Our own codec, written from the format as ``org.apache.inlong.common.msg.InLongMsg`` (inlong-common
1.11.0) writes and reads it; facts in /work/shared/reference/conventions.md §5 and §5.1. All integers are
big-endian.

Layout
======

Every bundle starts *and* ends with the two bytes ``0x0F 0x0N`` (N = version 0..4).

v0..v3 (``0x0F00`` is read, never written, by InLong)::

    magic(2) [create_time int64 ms, v>=1] [msg_count int32, v>=2] group_count int32
    group_count x { attr: uint16 length + Java modified UTF-8 text
                    [record_count int32, v2 only]
                    n int32   (= 1 + len(data))
                    compressed byte (0 or 1)
                    data (n - 1 bytes; a raw Snappy block when compressed) }
    magic(2)

    v0..v2 data: { int32 len, record bytes }*       the group's attribute text applies to each record
    v3 data:     { int32 chunk_len, chunk }*         chunk = { int32 len, record, int32 alen, attr }*
                 a record's attributes = its own ``attr`` (UTF-8) merged with the group's, the group's winning

v4 (a DataProxy "bin message" wrapped)::

    magic(2)
    total_len int32 (= bytes that follow it, up to and including the 0xEE01 magic)
    msg_type byte   (low 5 bits: InLong msg type, 7 for binary multi-body; bits 5..7: 0 none, 1 Snappy)
    group_id uint16, stream_id uint16 (numeric ids)     ext_field uint16
    data_time int32 (seconds)   msg_count uint16   unique_id 4 bytes
    body_len int32, body        attr_len uint16, attr (UTF-8 k=v&k=v, the common attributes)
    0xEE01
    magic(2)

    ext_field bit 0 (0x1): per-message attributes: body = { int32 len, record, int32 alen, attr }*
                           else                        body = { int32 len, record }*
    ext_field bit 2 (0x4): ids are *strings* (carried in the attributes); clear: the numeric header
                           ids are the ids and the parser adds them as ``groupId`` / ``streamId``
    ext_field bit 5 (0x20): "support line feed" (reported, does not change the layout)

    InLong's parser adds ``dt`` (data_time * 1000), ``cnt`` (msg_count) and, with numeric ids,
    ``groupId``/``streamId`` to the common attributes; common attributes win over per-message ones.

Strictness
==========

InLong's class is lax (it returns null, throws later, pads a too-long record with zeros, never checks
the inner 0xEE01 magic). Ours raises a :class:`~tubespark.formats.errors.PayloadFormatError` (a
``CodecError``) for every malformed input: mismatched magics, any length that does not fit the bytes
left, negative lengths or counts, unknown compression flags, trailing bytes, a v4 ``total_len`` or
``body_len``/``attr_len`` that disagree with the payload, a wrong inner magic, a Snappy block that lies
about its size, v3/v4 attribute text that is not strict ``k=v&k=v``, text that is not valid (modified)
UTF-8, a v0..v2
group attribute text that appears twice (InLong's parser would silently drop the first group), and a
v2 record count that does not match the records. Decompression is capped (``max_decompressed``).

Where InLong is lax on purpose, so are we: the attribute text of a v0..v2 group is never parsed by
InLong (``getAttrs()`` returns it as is), so a repeated key (``a=1&a=2``), a key without ``=``, an empty
entry or ``=`` inside a value are read, never refused (:func:`~tubespark.formats.common.read_attributes`:
a repeated key's **last** occurrence wins).

Records come out in wire order. InLong's iterator groups a v3 or v4 bundle's records by attribute set
(``getAttrs()`` in first-seen order, then ``getIterator(attr)``): the same records, ordered differently
when attribute sets interleave (``a, b, a`` on the wire is ``a, a, b`` in InLong); v0..v2 groups are
already contiguous, so the orders agree. ``recordIndex`` is the wire position.

Two deliberate differences from the Java parser: v4's 16-bit header fields (ids, counts, attribute
length) are read unsigned, where Java reads them signed (so values above 32767 come out negative
there); and zero-length records are accepted everywhere (Java fails the whole v3 bundle, or a v4
bundle with per-message attributes, on one). Our *writer* stays inside what Java reads correctly.

Which version we write: v1
==========================

:func:`encode_inlongmsg` writes **v1** by default (v2, v3 and v4 on request, mainly for tests).

* Every InLong consumer reads v1: Sort's ``inlong-msg*`` formats and the sort SDK go through
  ``InLongMsg.parseFrom`` + ``getAttrs()``/``getIterator(attr)``, which handle v1 exactly like v4, and v1
  is what ``InLongMsg.newInLongMsg()`` and DataProxy itself produce for text and HTTP messages.
* v1 is lossless for what a writer of records has: any attribute set per record (one group per
  distinct attribute text), millisecond create time, int32 counts, empty records, 65,535-byte
  attribute texts. The parser adds nothing: records come back with exactly the attributes written.
* v4, DataProxy's default, is a wrapper around *one* SDK-built bin message. Written by us it would
  carry only second-resolution data time in a signed 32-bit field (ends in 2038), at most 32,767
  records and 32,767 bytes of attributes per bundle (Java reads those fields signed), force ``dt``
  and ``cnt`` (and numeric ids) into every record's attributes, and fail in Java on a zero-length
  record or an empty per-message attribute text. Nothing downstream needs v4 specifically.

Sort's consumers expect a ``dt`` (epoch ms) or ``t`` attribute and usually ``groupId``/``streamId``
(``iname`` in older formats) in each record's attributes: supply them, or set ``Record.data_time``
(written as ``dt``). Publish the bundle with the TubeMQ attribute ``msgEnType=2``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import cast

from tubespark.formats.common import (
    DEFAULT_MAX_DECOMPRESSED,
    Budget,
    Reader,
    Record,
    data_time_of,
    decode_modified_utf8,
    decode_utf8,
    encode_modified_utf8,
    format_attributes,
    parse_attributes,
    read_attributes,
    snappy_compress,
    snappy_decompress,
)
from tubespark.formats.errors import PayloadEncodeError, PayloadFormatError, UnsupportedPayloadError

__all__ = [
    "BIN_MSG_MAGIC",
    "EXT_PER_MESSAGE_ATTRIBUTES",
    "EXT_STRING_IDS",
    "EXT_SUPPORT_LF",
    "BinHeader",
    "InLongMsgBundle",
    "decode_inlongmsg",
    "encode_inlongmsg",
    "inlongmsg_version",
    "parse_inlongmsg",
]

MAGIC_BYTE = 0x0F
VERSIONS = (0, 1, 2, 3, 4)
WRITABLE_VERSIONS = (1, 2, 3, 4)
BIN_MSG_MAGIC = 0xEE01
EXT_PER_MESSAGE_ATTRIBUTES = 0x1
EXT_STRING_IDS = 0x4
EXT_SUPPORT_LF = 0x20
MSG_TYPE_BIN_MULTI_BODY = 7
_BIN_COMPRESS_NONE = 0
_BIN_COMPRESS_SNAPPY = 1

# total_len, msg_type, group_id, stream_id, ext_field, data_time, msg_count, unique_id, body_len
_BIN_HEAD = struct.Struct(">iBHHHiH4si")
_BIN_FIXED = _BIN_HEAD.size + 2 + 2  # + attr_len + inner magic = 29

_JAVA_SHORT_MAX = 0x7FFF  # v4 16-bit fields Java reads signed: our writer stays below
_INT32_MAX = 0x7FFFFFFF
_INT32 = struct.Struct(">i")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_UTF_MAX = 0xFFFF  # DataOutput.writeUTF


@dataclass(frozen=True)
class BinHeader:
    """The fixed header of a v4 bundle's bin message."""

    msg_type: int  # low 5 bits of the type byte
    compress_type: int  # bits 5..7: 0 none, 1 Snappy
    group_id_num: int
    stream_id_num: int
    ext_field: int
    data_time: int  # seconds since the epoch
    msg_count: int
    unique_id: bytes  # 4 bytes

    @property
    def numeric_ids(self) -> bool:
        return not self.ext_field & EXT_STRING_IDS

    @property
    def per_message_attributes(self) -> bool:
        return bool(self.ext_field & EXT_PER_MESSAGE_ATTRIBUTES)

    @property
    def support_lf(self) -> bool:
        return bool(self.ext_field & EXT_SUPPORT_LF)


@dataclass(frozen=True)
class InLongMsgBundle:
    """A decoded bundle: its version, header fields and records in bundle order."""

    version: int
    create_time: int | None  # ms: the v1..v3 header; v4: data_time * 1000; v0: None
    msg_count: int | None  # v2/v3 header count, v4 bin header count; None for v0/v1
    records: list[Record]
    bin_header: BinHeader | None = None


# ------------------------------------------------------------------------------------------ decoding


def inlongmsg_version(payload: bytes | bytearray | memoryview) -> int | None:
    """The version when ``payload`` starts and ends with the same InLongMsg magic, else ``None``."""
    n = len(payload)
    if n < 4 or payload[0] != MAGIC_BYTE or payload[1] not in VERSIONS:
        return None
    if payload[n - 2] != MAGIC_BYTE or payload[n - 1] != payload[1]:
        return None
    return int(payload[1])


def decode_inlongmsg(
    payload: bytes | bytearray | memoryview, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED
) -> list[Record]:
    """The records of an InLongMsg bundle (any version 0..4), in bundle order."""
    return parse_inlongmsg(payload, max_decompressed=max_decompressed).records


def parse_inlongmsg(
    payload: bytes | bytearray | memoryview, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED
) -> InLongMsgBundle:
    """Decode an InLongMsg bundle strictly; raise :class:`PayloadFormatError` on any damage."""
    data = memoryview(payload).cast("B") if not isinstance(payload, bytes) else payload
    n = len(data)
    if n < 4:
        raise PayloadFormatError(f"InLongMsg: {n} bytes, shorter than its two magics")
    if data[0] != MAGIC_BYTE:
        raise PayloadFormatError(f"InLongMsg: bad magic 0x{data[0]:02x}{data[1]:02x}")
    version = data[1]
    if version not in VERSIONS:
        raise UnsupportedPayloadError(f"InLongMsg: unknown version in magic 0x0f{version:02x}")
    if data[n - 2] != MAGIC_BYTE or data[n - 1] != version:
        raise PayloadFormatError(
            f"InLongMsg v{version}: trailing magic 0x{data[n - 2]:02x}{data[n - 1]:02x} does not match"
        )
    budget = Budget(max_decompressed)
    if version == 4:
        return _parse_v4(data, budget)
    return _parse_grouped(data, version, budget)


def _group_data(r: Reader, what: str, budget: Budget) -> bytes | memoryview:
    """A group's ``n, compressed flag, data`` part, decompressed."""
    n = r.length(f"{what} data")
    if n < 1:
        raise PayloadFormatError(f"{what}: data length {n} leaves no room for the compression flag")
    flag = r.u8(f"{what} compression flag")
    block = r.take(n - 1, f"{what} data")
    if flag == 1:
        return snappy_decompress(block, budget, what)
    if flag != 0:
        raise PayloadFormatError(f"{what}: compression flag {flag} is neither 0 nor 1")
    return block


def _parse_grouped(data: bytes | memoryview, version: int, budget: Budget) -> InLongMsgBundle:
    what = f"InLongMsg v{version}"
    r = Reader(data, what, pos=2, end=len(data) - 2)
    create_time = r.i64("create time") if version >= 1 else None
    msg_count = None
    if version >= 2:
        msg_count = r.i32("message count")
        if msg_count < 0:
            raise PayloadFormatError(f"{what}: negative message count {msg_count}")
    group_count = r.i32("attribute group count")
    if group_count < 0:
        raise PayloadFormatError(f"{what}: negative attribute group count {group_count}")
    records: list[Record] = []
    seen: set[str] = set()
    for g in range(group_count):
        gwhat = f"{what} group {g}"
        attr_text = decode_modified_utf8(r.take(r.u16("attribute length"), "attribute text"), gwhat)
        declared = None
        if version == 2:
            declared = r.i32(f"{gwhat} record count")
        body = _group_data(r, gwhat, budget)
        if version == 3:
            records.extend(_v3_records(body, parse_attributes(attr_text, gwhat), gwhat))
            continue
        if attr_text in seen:
            raise PayloadFormatError(f"{gwhat}: attribute text {attr_text!r} repeats an earlier group")
        seen.add(attr_text)
        attributes = read_attributes(attr_text)  # InLong never parses it: lenient, never fails
        dt = data_time_of(attributes)
        bodies = _length_prefixed(body, gwhat)
        if declared is not None and declared != len(bodies):
            raise PayloadFormatError(f"{gwhat}: declares {declared} records, holds {len(bodies)}")
        records.extend(Record(b, dict(attributes), dt) for b in bodies)
    if r.remaining:
        raise PayloadFormatError(f"{what}: {r.remaining} unexpected bytes before the trailing magic")
    if version == 2 and msg_count != len(records):
        raise PayloadFormatError(f"{what}: header declares {msg_count} records, groups hold {len(records)}")
    return InLongMsgBundle(version, create_time, msg_count, records)


def _length_prefixed(block: bytes | memoryview, what: str) -> list[bytes]:
    r = Reader(block, what)
    out = []
    while r.remaining:
        out.append(bytes(r.take(r.length("record"), "record")))
    return out


def _with_own_attributes(block: bytes | memoryview, common: dict[str, str], what: str) -> list[Record]:
    """``{int32 len, record, int32 alen, attr}*``: each record's attributes with ``common`` winning."""
    r = Reader(block, what)
    out = []
    while r.remaining:
        body = bytes(r.take(r.length("record"), "record"))
        own = parse_attributes(decode_utf8(r.take(r.length("record attributes"), "record attributes"), what), what)
        merged = {**own, **common}
        out.append(Record(body, merged, data_time_of(merged)))
    return out


def _v3_records(block: bytes | memoryview, common: dict[str, str], what: str) -> list[Record]:
    r = Reader(block, what)
    out = []
    while r.remaining:
        n = r.length("message chunk")
        out.extend(_with_own_attributes(r.take(n, "message chunk"), common, what))
    return out


def _parse_v4(data: bytes | memoryview, budget: Budget) -> InLongMsgBundle:
    what = "InLongMsg v4"
    inner = memoryview(data)[2 : len(data) - 2]
    if len(inner) < _BIN_FIXED:
        raise PayloadFormatError(f"{what}: {len(inner)} bytes, shorter than the {_BIN_FIXED}-byte bin header")
    total_len, type_byte, gid, sid, ext, dt_s, count, uniq, body_len = _BIN_HEAD.unpack_from(inner, 0)
    if total_len != len(inner) - 4:
        raise PayloadFormatError(f"{what}: total length {total_len} != {len(inner) - 4} bytes present")
    r = Reader(inner, what, pos=_BIN_HEAD.size)
    body: bytes | memoryview = r.take(body_len, "body")
    attr_raw = r.take(r.u16("attribute length"), "attributes")
    magic = r.u16("bin message magic")
    if magic != BIN_MSG_MAGIC:
        raise PayloadFormatError(f"{what}: bin message magic 0x{magic:04x}, expected 0x{BIN_MSG_MAGIC:04x}")
    if r.remaining:  # cannot happen once total_len matched; kept as the invariant
        raise PayloadFormatError(f"{what}: {r.remaining} bytes after the bin message")
    header = BinHeader(type_byte & 0x1F, type_byte >> 5, gid, sid, ext, dt_s, count, bytes(uniq))
    if header.compress_type == _BIN_COMPRESS_SNAPPY:
        body = snappy_decompress(body, budget, what)
    elif header.compress_type != _BIN_COMPRESS_NONE:
        raise UnsupportedPayloadError(f"{what}: unknown compression type {header.compress_type}")
    common = parse_attributes(decode_utf8(attr_raw, f"{what} attributes"), f"{what} attributes")
    common["dt"] = str(dt_s * 1000)
    if header.numeric_ids:
        common["groupId"] = str(gid)
        common["streamId"] = str(sid)
    common["cnt"] = str(count)
    if header.per_message_attributes:
        records = _with_own_attributes(body, common, what)
    else:
        dt = data_time_of(common)
        records = [Record(b, dict(common), dt) for b in _length_prefixed(body, what)]
    return InLongMsgBundle(4, dt_s * 1000, count, records, header)


# ------------------------------------------------------------------------------------------ encoding


RecordLike = Record | tuple[bytes, Mapping[str, str]]


def _normalise(records: Iterable[RecordLike]) -> list[tuple[bytes, Mapping[str, str]]]:
    """``(body, attributes)`` pairs; a Record's ``data_time`` becomes a ``dt`` attribute. A record's own
    attribute mapping is used as it is (nothing here changes it): records that share one mapping, as a sink's
    bundle does, have its text formatted once (:func:`_text_groups`)."""
    out: list[tuple[bytes, Mapping[str, str]]] = []
    attrs: Mapping[str, str]
    for rec in records:
        if isinstance(rec, Record):
            body, attrs, dt = rec.body, rec.attributes, rec.data_time
        else:
            body, attrs, dt = rec[0], rec[1], None
        if not isinstance(body, bytes | bytearray | memoryview):
            raise PayloadEncodeError(f"a record body must be bytes, got {type(body).__name__}")
        if dt is not None:
            if "dt" not in attrs:
                attrs = {**attrs, "dt": str(dt)}
            elif data_time_of(attrs) != dt:
                raise PayloadEncodeError(f"record data_time {dt} disagrees with its dt attribute {attrs['dt']!r}")
        out.append((body if type(body) is bytes else bytes(body), attrs))
    return out


def _one_group(records: list[RecordLike]) -> tuple[str, list[bytes]] | None:
    """v1/v2 written in a few calls: ``(text, bodies)`` when every record is a ``(bytes, attributes)`` pair and
    all share one attributes object (a sink's bundle), else ``None`` (:func:`_normalise` then, record by record;
    the same bytes and errors either way). The checks run in C: map, set, itemgetter."""
    if not records or set(map(type, records)) != {tuple}:
        return None
    pairs = cast(list[tuple[bytes, Mapping[str, str]]], records)
    if len(set(map(id, map(_SECOND, pairs)))) != 1:
        return None
    bodies: list[bytes] = list(map(_FIRST, pairs))
    if set(map(type, bodies)) != {bytes}:
        return None
    return format_attributes(pairs[0][1]), bodies


def _text_groups(pairs: list[tuple[bytes, Mapping[str, str]]]) -> dict[str, list[bytes]]:
    """The bodies by attribute text, in first-seen order; each distinct mapping object is formatted once."""
    texts: dict[int, str] = {}  # id of a mapping in ``pairs`` (alive as long as they are) -> its text
    grouped: dict[str, list[bytes]] = {}
    for body, attrs in pairs:
        text = texts.get(id(attrs))
        if text is None:
            text = texts[id(attrs)] = format_attributes(attrs)
        grouped.setdefault(text, []).append(body)
    return grouped


def _modified_utf(text: str, what: str) -> bytes:
    raw = encode_modified_utf8(text)
    if len(raw) > _UTF_MAX:
        raise PayloadEncodeError(f"{what}: {len(raw)} bytes of attribute text, over 65535")
    return struct.pack(">H", len(raw)) + raw


def _int32_len(n: int, what: str) -> bytes:
    if n > _INT32_MAX:
        raise PayloadEncodeError(f"{what}: {n} bytes do not fit an int32 length")
    return struct.pack(">i", n)


def _prefixed(bodies: Iterable[bytes], what: str) -> bytes:
    """Each body after its int32 length, joined (the per-body steps run in C: map, zip, chain)."""
    bodies = bodies if isinstance(bodies, list) else list(bodies)
    lengths = list(map(len, bodies))
    if lengths and max(lengths) > _INT32_MAX:
        raise PayloadEncodeError(f"{what}: {max(lengths)} bytes do not fit an int32 length")
    return b"".join(chain.from_iterable(zip(map(_INT32.pack, lengths), bodies, strict=True)))


def encode_inlongmsg(
    records: Iterable[RecordLike],
    *,
    version: int = 1,
    compress: bool = True,
    create_time: int | None = None,
    data_time: int | None = None,
    group_id: int | str | None = None,
    stream_id: int | str | None = None,
    ext_flags: int = 0,
    unique_id: bytes = b"\0\0\0\0",
    msg_type: int = MSG_TYPE_BIN_MULTI_BODY,
) -> bytes:
    """Write records as one InLongMsg bundle that both :func:`decode_inlongmsg` and InLong's own parser
    read back as the same records (see the module docstring for why v1 is the default).

    ``records``: :class:`Record` objects or ``(body, attributes)`` pairs. v1/v2 group records by their
    attribute text (first-seen order, record order kept within a group: interleaved attribute sets come
    back grouped). v3 puts the attributes all records share in the group and the rest per record.
    ``create_time`` (ms, default now) is the v1..v3 header time.

    v4 only: ``data_time`` (ms, whole seconds; default the records' common data time or now),
    ``group_id``/``stream_id`` (ints 0..32767: numeric ids in the header; strings: written as
    ``groupId``/``streamId`` attributes with the string-id flag; None: neither), ``ext_flags`` (extra
    ext-field bits, e.g. ``EXT_SUPPORT_LF``; bits 0 and 2 are derived), ``unique_id`` (4 bytes),
    ``msg_type`` (low 5 bits of the type byte). The decoded records additionally carry ``dt``,
    ``cnt`` (and numeric ids), which InLong's parser adds.
    """
    if version not in WRITABLE_VERSIONS:
        raise PayloadEncodeError(f"InLongMsg version {version} cannot be written (only 1..4)")
    records = records if isinstance(records, list) else list(records)
    one = _one_group(records) if version in (1, 2) else None
    pairs = _normalise(records) if one is None else []
    if version == 4:
        return _encode_v4(pairs, compress, data_time, group_id, stream_id, ext_flags, unique_id, msg_type)
    if create_time is None:
        create_time = int(time.time() * 1000)
    if not -(2**63) <= create_time < 2**63:
        raise PayloadEncodeError(f"create time {create_time} does not fit an int64")
    magic = bytes((MAGIC_BYTE, version))
    if version == 3:
        groups = _v3_groups(pairs)
    else:
        grouped = dict([one]) if one is not None else _text_groups(pairs)
        groups = [(text, _prefixed(bodies, "record"), len(bodies)) for text, bodies in grouped.items()]
    out = bytearray(magic)
    out += struct.pack(">q", create_time)
    if version >= 2:
        out += struct.pack(">i", len(records))
    out += struct.pack(">i", len(groups))
    for text, raw, count in groups:
        out += _modified_utf(text, "group attributes")
        if version == 2:
            out += struct.pack(">i", count)
        block = snappy_compress(raw) if compress else raw
        out += _int32_len(len(block) + 1, "group data") + (b"\1" if compress else b"\0") + block
    out += magic
    return bytes(out)


def _split_common(attr_sets: Sequence[Mapping[str, str]]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Attributes every set shares (same value) and what remains of each set, none left empty when
    possible: a per-record attribute text may not be empty for InLong's v3/v4 parsers."""
    common = dict(attr_sets[0]) if attr_sets else {}
    for attrs in attr_sets[1:]:
        common = {k: v for k, v in common.items() if attrs.get(k) == v}
    own = [{k: v for k, v in attrs.items() if k not in common} for attrs in attr_sets]
    if any(not o for o in own) and common:
        key = next(iter(common))  # move one shared key into every record's own attributes
        value = common.pop(key)
        own = [{key: value, **o} for o in own]
    return common, own


def _v3_groups(pairs: list[tuple[bytes, Mapping[str, str]]]) -> list[tuple[str, bytes, int]]:
    if not pairs:
        return []
    common, own = _split_common([attrs for _body, attrs in pairs])
    chunks = bytearray()
    for (body, _attrs), attrs in zip(pairs, own, strict=True):
        if not body:
            raise PayloadEncodeError("InLongMsg v3 cannot carry an empty record (InLong's parser fails on it)")
        if not attrs:
            raise PayloadEncodeError("InLongMsg v3 needs at least one attribute per record")
        text = format_attributes(attrs).encode("utf-8")
        chunk = _int32_len(len(body), "record") + body + _int32_len(len(text), "attributes") + text
        chunks += _int32_len(len(chunk), "chunk") + chunk
    return [(format_attributes(common), bytes(chunks), len(pairs))]


def _encode_v4(
    pairs: list[tuple[bytes, Mapping[str, str]]],
    compress: bool,
    data_time: int | None,
    group_id: int | str | None,
    stream_id: int | str | None,
    ext_flags: int,
    unique_id: bytes,
    msg_type: int,
) -> bytes:
    if ext_flags & (EXT_PER_MESSAGE_ATTRIBUTES | EXT_STRING_IDS) or not 0 <= ext_flags <= 0xFFFF:
        raise PayloadEncodeError("ext_flags: bits 0 and 2 are set by the encoder; the rest must fit 16 bits")
    if not 0 <= msg_type <= 0x1F:
        raise PayloadEncodeError(f"msg_type {msg_type} does not fit 5 bits")
    if len(unique_id) != 4:
        raise PayloadEncodeError("unique_id must be 4 bytes")
    if len(pairs) > _JAVA_SHORT_MAX:
        raise PayloadEncodeError(f"InLongMsg v4 holds at most {_JAVA_SHORT_MAX} records, got {len(pairs)}")
    if data_time is None:
        times = {t for _b, attrs in pairs if (t := data_time_of(attrs)) is not None}
        if len(times) > 1:
            raise PayloadEncodeError(f"InLongMsg v4 has one data time; the records have {sorted(times)}")
        data_time = times.pop() if times else int(time.time()) * 1000
    if data_time % 1000 or not 0 <= data_time // 1000 <= _INT32_MAX:
        raise PayloadEncodeError(f"v4 data time {data_time} ms is not whole seconds within int32")
    numeric = isinstance(group_id, int) or isinstance(stream_id, int)
    fixed = {"dt": str(data_time), "cnt": str(len(pairs))}  # what InLong's parser puts in
    ext = ext_flags
    gid = sid = 0
    if numeric:
        if not (isinstance(group_id, int) and isinstance(stream_id, int)):
            raise PayloadEncodeError("numeric v4 ids: give both group_id and stream_id as ints")
        if not (0 <= group_id <= _JAVA_SHORT_MAX and 0 <= stream_id <= _JAVA_SHORT_MAX):
            raise PayloadEncodeError(f"numeric v4 ids must be 0..{_JAVA_SHORT_MAX}")
        gid, sid = group_id, stream_id
        fixed |= {"groupId": str(gid), "streamId": str(sid)}
    else:
        ext |= EXT_STRING_IDS
    extra = {k: v for k, v in (("groupId", group_id), ("streamId", stream_id)) if isinstance(v, str)}
    attr_sets = []
    for _body, attrs in pairs:
        for key, value in (fixed | extra).items():
            if key in attrs and attrs[key] != value:
                raise PayloadEncodeError(f"record attribute {key}={attrs[key]!r} would come back as {value!r}")
        attr_sets.append({k: v for k, v in attrs.items() if k not in fixed})
    if not pairs or all(a == attr_sets[0] for a in attr_sets):
        common = {**(attr_sets[0] if pairs else {}), **extra}
        body = _prefixed((b for b, _a in pairs), "record")
    else:
        ext |= EXT_PER_MESSAGE_ATTRIBUTES
        common, own = _split_common(attr_sets)
        common |= extra
        parts = []
        for (raw, _attrs), attrs in zip(pairs, own, strict=True):
            if not raw:
                raise PayloadEncodeError("v4 with per-record attributes cannot carry an empty record")
            text = format_attributes(attrs or {"dt": str(data_time)}).encode("utf-8")  # dt: parser overrides it
            parts.append(_int32_len(len(raw), "record") + raw + _int32_len(len(text), "attributes") + text)
        body = b"".join(parts)
    attr_text = format_attributes(common).encode("utf-8")
    if len(attr_text) > _JAVA_SHORT_MAX:
        raise PayloadEncodeError(f"v4 common attributes: {len(attr_text)} bytes, over {_JAVA_SHORT_MAX}")
    type_byte = msg_type
    if compress:
        body = snappy_compress(body)
        type_byte |= _BIN_COMPRESS_SNAPPY << 5
    total = _BIN_FIXED + len(body) + len(attr_text)
    if total - 4 > _INT32_MAX:
        raise PayloadEncodeError("v4 bundle too large")
    head = _BIN_HEAD.pack(total - 4, type_byte, gid, sid, ext, data_time // 1000, len(pairs), unique_id, len(body))
    magic = bytes((MAGIC_BYTE, 4))
    return b"".join(
        (magic, head, body, struct.pack(">H", len(attr_text)), attr_text, struct.pack(">H", BIN_MSG_MAGIC), magic)
    )
