"""InLongMsg codec (tubespark/formats/inlongmsg.py): round trips, attribute text, Snappy, strictness.

The cross-check against InLong's own class is tests/integration/formats/test_inlongmsg_interop.py.
"""

from __future__ import annotations

import random
import struct
import time

import pytest

from tubespark.errors import CodecError, TubeSparkError
from tubespark.formats import (
    PayloadEncodeError,
    PayloadFormatError,
    PayloadTooLargeError,
    Record,
    UnsupportedPayloadError,
    decode_inlongmsg,
    encode_inlongmsg,
    format_attributes,
    inlongmsg_version,
    parse_attributes,
    parse_inlongmsg,
)
from tubespark.formats.common import Budget, decode_modified_utf8, encode_modified_utf8, snappy_decompress
from tubespark.formats.inlongmsg import EXT_PER_MESSAGE_ATTRIBUTES, EXT_STRING_IDS, EXT_SUPPORT_LF

DT = 1_700_000_000_000
RECORDS = [
    Record(b"alpha", {"groupId": "g", "streamId": "s", "dt": str(DT)}, DT),
    Record(b"\x00\xff" * 300, {"groupId": "g", "streamId": "s", "dt": str(DT)}, DT),
    Record("ü 😀".encode(), {"groupId": "g", "streamId": "s2", "k": "\0é😀", "dt": str(DT)}, DT),
    Record(b"beta", {"groupId": "g", "streamId": "s", "dt": str(DT)}, DT),
]
ANY_RECORDS = [*RECORDS, Record(b"", {"a": "1"}), Record(b"no attributes", {})]


def _sorted(records: list[Record]) -> list[tuple]:
    return sorted((r.body, tuple(sorted(r.attributes.items())), r.data_time) for r in records)


# ----------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("version", [1, 2])
def test_v1_v2_round_trip_keeps_every_record(version: int, compress: bool) -> None:
    payload = encode_inlongmsg(ANY_RECORDS, version=version, compress=compress, create_time=DT + 5)
    assert payload[:2] == payload[-2:] == bytes((0x0F, version))
    bundle = parse_inlongmsg(payload)
    assert (bundle.version, bundle.create_time) == (version, DT + 5)
    assert bundle.msg_count == (len(ANY_RECORDS) if version == 2 else None)
    assert _sorted(bundle.records) == _sorted(ANY_RECORDS)
    # grouped by attribute text, first-seen order, record order kept within a group
    assert [r.body for r in bundle.records[:3]] == [b"alpha", b"\x00\xff" * 300, b"beta"]


def test_v0_is_read() -> None:
    v1 = encode_inlongmsg(ANY_RECORDS, version=1, create_time=1)
    v0 = b"\x0f\x00" + v1[10:-2] + b"\x0f\x00"
    bundle = parse_inlongmsg(v0)
    assert (bundle.version, bundle.create_time, bundle.msg_count) == (0, None, None)
    assert bundle.records == parse_inlongmsg(v1).records
    with pytest.raises(PayloadEncodeError):
        encode_inlongmsg(ANY_RECORDS, version=0)


@pytest.mark.parametrize("compress", [False, True])
def test_v3_round_trip_splits_common_and_own_attributes(compress: bool) -> None:
    payload = encode_inlongmsg(RECORDS, version=3, compress=compress, create_time=7)
    bundle = parse_inlongmsg(payload)
    assert (bundle.version, bundle.create_time, bundle.msg_count) == (3, 7, len(RECORDS))
    assert bundle.records == RECORDS  # bundle order
    # all-identical attributes: one key moves into each record so no record's own text is empty
    same = [Record(b"a", {"x": "1", "y": "2"}), Record(b"b", {"x": "1", "y": "2"})]
    assert decode_inlongmsg(encode_inlongmsg(same, version=3)) == same


def test_v3_refuses_what_inlong_cannot_read_back() -> None:
    with pytest.raises(PayloadEncodeError, match="empty record"):
        encode_inlongmsg([Record(b"", {"a": "1"})], version=3)
    with pytest.raises(PayloadEncodeError, match="at least one attribute"):
        encode_inlongmsg([Record(b"a", {}), Record(b"b", {"x": "1"})], version=3)


@pytest.mark.parametrize("compress", [False, True])
def test_v4_numeric_ids_common_attributes(compress: bool) -> None:
    recs = [Record(b"a", {"m": "0"}), Record(b"", {"m": "0"}), Record(b"c" * 999, {"m": "0"})]
    payload = encode_inlongmsg(recs, version=4, compress=compress, data_time=DT, group_id=12, stream_id=34,
                               unique_id=b"\1\2\3\4")
    bundle = parse_inlongmsg(payload)
    h = bundle.bin_header
    assert h is not None and h.numeric_ids and not h.per_message_attributes and not h.support_lf
    assert (h.group_id_num, h.stream_id_num, h.data_time, h.msg_count, h.unique_id) == (12, 34, DT // 1000, 3,
                                                                                         b"\1\2\3\4")
    assert (h.msg_type, h.compress_type) == (7, 1 if compress else 0)
    assert (bundle.create_time, bundle.msg_count) == (DT, 3)
    added = {"dt": str(DT), "cnt": "3", "groupId": "12", "streamId": "34"}
    assert bundle.records == [Record(r.body, {"m": "0", **added}, DT) for r in recs]


@pytest.mark.parametrize("compress", [False, True])
def test_v4_per_message_attributes_and_string_ids(compress: bool) -> None:
    payload = encode_inlongmsg(RECORDS, version=4, compress=compress, ext_flags=EXT_SUPPORT_LF | 0x2)
    bundle = parse_inlongmsg(payload)
    h = bundle.bin_header
    assert h is not None and h.per_message_attributes and not h.numeric_ids and h.support_lf
    assert h.ext_field == EXT_PER_MESSAGE_ATTRIBUTES | EXT_STRING_IDS | EXT_SUPPORT_LF | 0x2
    assert bundle.records == [Record(r.body, {**r.attributes, "cnt": "4"}, DT) for r in RECORDS]


def test_v4_given_string_ids_and_attribute_less_records() -> None:
    recs = [Record(b"a", {}), Record(b"b", {"k": "v"})]
    out = decode_inlongmsg(encode_inlongmsg(recs, version=4, data_time=2000, group_id="g1", stream_id="s1"))
    base = {"groupId": "g1", "streamId": "s1", "dt": "2000", "cnt": "2"}
    assert out == [Record(b"a", base, 2000), Record(b"b", {"k": "v", **base}, 2000)]
    assert decode_inlongmsg(encode_inlongmsg([], version=4, data_time=0)) == []


def test_v4_common_attributes_win_over_own() -> None:
    # hand-built: own attributes a=own&cnt=9 under common a=common -> common wins, parser's cnt wins
    body = struct.pack(">i", 1) + b"x" + struct.pack(">i", 13) + b"a=own&cnt=9&z"[:13]
    body = struct.pack(">i", 1) + b"x" + struct.pack(">i", 11) + b"a=own&cnt=9"
    attr = b"a=common"
    inner = struct.pack(">iBHHHiH4si", 25 + len(body) + 2 + len(attr) + 2 - 4, 7, 0, 0, 0x5, 3, 1, b"\0" * 4,
                        len(body)) + body + struct.pack(">H", len(attr)) + attr + b"\xee\x01"
    (rec,) = decode_inlongmsg(b"\x0f\x04" + inner + b"\x0f\x04")
    assert rec == Record(b"x", {"a": "common", "cnt": "1", "dt": "3000"}, 3000)


def test_v4_encoder_limits() -> None:
    with pytest.raises(PayloadEncodeError, match="at most 32767"):
        encode_inlongmsg([Record(b"x", {})] * 32768, version=4, data_time=0)
    with pytest.raises(PayloadEncodeError, match=r"0\.\.32767"):
        encode_inlongmsg([], version=4, data_time=0, group_id=40000, stream_id=1)
    with pytest.raises(PayloadEncodeError, match="whole seconds"):
        encode_inlongmsg([], version=4, data_time=1500)
    with pytest.raises(PayloadEncodeError, match="one data time"):
        encode_inlongmsg([Record(b"a", {}, 1000), Record(b"b", {}, 2000)], version=4)
    with pytest.raises(PayloadEncodeError, match="would come back"):
        encode_inlongmsg([Record(b"a", {"cnt": "7"})], version=4, data_time=0)
    with pytest.raises(PayloadEncodeError, match="would come back"):
        encode_inlongmsg([Record(b"a", {"groupId": "x"})], version=4, data_time=0, group_id=1, stream_id=2)
    with pytest.raises(PayloadEncodeError, match="empty record"):
        encode_inlongmsg([Record(b"", {"a": "1"}), Record(b"b", {"a": "2"})], version=4, data_time=0)
    with pytest.raises(PayloadEncodeError, match="bits 0 and 2"):
        encode_inlongmsg([], version=4, data_time=0, ext_flags=EXT_STRING_IDS)
    with pytest.raises(PayloadEncodeError, match="over 32767"):
        encode_inlongmsg([Record(b"a", {"k": "v" * 40000})], version=4, data_time=0)
    with pytest.raises(PayloadEncodeError, match="both"):
        encode_inlongmsg([], version=4, data_time=0, group_id=1)


def test_data_time_becomes_dt_attribute() -> None:
    (rec,) = decode_inlongmsg(encode_inlongmsg([Record(b"x", {"a": "1"}, 123)]))
    assert rec == Record(b"x", {"a": "1", "dt": "123"}, 123)
    with pytest.raises(PayloadEncodeError, match="disagrees"):
        encode_inlongmsg([Record(b"x", {"dt": "5"}, 6)])
    assert decode_inlongmsg(encode_inlongmsg([(b"t", {"dt": "x"})]))[0].data_time is None
    assert decode_inlongmsg(encode_inlongmsg([(b"t", {"dt": "+42", "b": "1"})]))[0].data_time == 42


def test_default_create_time_is_now() -> None:
    before = int(time.time() * 1000)
    created = parse_inlongmsg(encode_inlongmsg([Record(b"x")])).create_time
    assert created is not None and before <= created <= int(time.time() * 1000)


# ---------------------------------------------------------------------------------- attribute text


@pytest.mark.parametrize(("text", "expected"), [
    ("", {}),
    ("a=1", {"a": "1"}),
    ("a=1&b=", {"a": "1", "b": ""}),
    ("=v", {"": "v"}),
    (" a=1 &\tb=2\u3000", {"a": "1", "b": "2"}),
    ("a = 1", {"a ": " 1"}),
    ("k=\0é😀", {"k": "\0é😀"}),
])
def test_parse_attributes(text: str, expected: dict) -> None:
    assert parse_attributes(text) == expected


@pytest.mark.parametrize("text", ["a", "a=1&", "&a=1", "a=1&&b=2", "a=1=2", "a=1&a=2", " ", "a=1& "])
def test_parse_attributes_rejects(text: str) -> None:
    with pytest.raises(PayloadFormatError):
        parse_attributes(text)


@pytest.mark.parametrize("attrs", [{"a&b": "1"}, {"a": "1=2"}, {" a": "1"}, {"a": "1\n"}, {"a": 1}, {1: "a"}])
def test_format_attributes_rejects_what_would_not_come_back(attrs: dict) -> None:
    with pytest.raises(PayloadEncodeError):
        format_attributes(attrs)
    with pytest.raises(PayloadEncodeError):
        encode_inlongmsg([Record(b"x", attrs)])


def test_format_attributes_round_trips_odd_but_legal_text() -> None:
    attrs = {"": "", "a b": "c d", "x": "", "ü": "😀\0"}
    assert parse_attributes(format_attributes(attrs)) == attrs


def test_modified_utf8() -> None:
    text = "a\0é€😀"
    raw = encode_modified_utf8(text)
    assert raw == b"a\xc0\x80\xc3\xa9\xe2\x82\xac\xed\xa0\xbd\xed\xb8\x80"
    assert decode_modified_utf8(raw, "t") == text
    assert decode_modified_utf8(b"a\0b", "t") == "a\0b"  # Java reads a raw NUL too
    for bad in (b"\xed\xa0\xbd", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98\x80", b"\x80", b"\xc3\x28"):
        with pytest.raises(PayloadFormatError):
            decode_modified_utf8(bad, "t")
    with pytest.raises(PayloadEncodeError):
        encode_modified_utf8("\ud800")


def test_attribute_text_cap_65535_bytes() -> None:
    ok = {"k": "v" * (65535 - 2)}
    assert decode_inlongmsg(encode_inlongmsg([Record(b"x", ok)]))[0].attributes == ok
    with pytest.raises(PayloadEncodeError, match="65535"):
        encode_inlongmsg([Record(b"x", {"k": "v" * 65534})])
    with pytest.raises(PayloadEncodeError, match="65535"):  # 3 bytes per char in modified UTF-8
        encode_inlongmsg([Record(b"x", {"k": "\0" * 40000})])


# ---------------------------------------------------------------------------------------- Snappy


def test_snappy_blocks_are_raw_and_bounded() -> None:
    big = [Record(b"z" * 100_000, {"a": "1"})]
    payload = encode_inlongmsg(big, compress=True)
    assert len(payload) < 10_000
    assert decode_inlongmsg(payload) == big
    with pytest.raises(PayloadTooLargeError):
        decode_inlongmsg(payload, max_decompressed=50_000)
    # a block whose preamble claims more than Snappy can expand to
    with pytest.raises(PayloadFormatError, match="claims"):
        snappy_decompress(b"\xff\xff\xff\xff\x0f" + b"\0" * 10, Budget(1 << 40), "t")
    with pytest.raises(PayloadFormatError, match="preamble"):
        snappy_decompress(b"\xff\xff\xff\xff\xff\x01", Budget(1 << 40), "t")
    with pytest.raises(PayloadFormatError, match=r"corrupt|gave"):
        snappy_decompress(b"\x0a\x00\xff\xff", Budget(100), "t")
    # the cap is per payload, over all groups
    two = encode_inlongmsg([Record(b"a" * 30_000, {"g": "1"}), Record(b"b" * 30_000, {"g": "2"})])
    assert len(decode_inlongmsg(two, max_decompressed=70_000)) == 2
    with pytest.raises(PayloadTooLargeError):
        decode_inlongmsg(two, max_decompressed=50_000)


# ------------------------------------------------------------------------------------ malformations


def _v1(groups: list[tuple[bytes, bytes, int]], trailing: bytes = b"") -> bytes:
    """A v1 bundle from (attr bytes, data bytes, flag) groups."""
    out = b"\x0f\x01" + struct.pack(">qi", 1, len(groups))
    for attr, data, flag in groups:
        out += struct.pack(">H", len(attr)) + attr + struct.pack(">i", len(data) + 1) + bytes([flag]) + data
    return out + trailing + b"\x0f\x01"


def _rec(body: bytes, length: int | None = None) -> bytes:
    return struct.pack(">i", len(body) if length is None else length) + body


@pytest.mark.parametrize(("text", "expected"), [
    (b"a=1&a=2", {"a": "2"}),  # a repeated key: the last occurrence wins (a Java HashMap.put)
    (b"a=1&flag&b=2", {"a": "1", "flag": "", "b": "2"}),  # a key without '='
    (b"a=1&&b=2&", {"a": "1", "b": "2"}),  # empty entries
    (b"url=x?k=v&b=2", {"url": "x?k=v", "b": "2"}),  # '=' inside a value
])
@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_v0_to_v2_group_text_inlong_never_parses_is_read_not_refused(text: bytes, expected: dict,
                                                                      version: int) -> None:
    # InLong's parser hands a v0..v2 group's attribute text back unparsed: its consumers read such a bundle
    bundle = bytearray(_v1([(text, _rec(b"x") + _rec(b"y"), 0)]))
    bundle[1] = bundle[-1] = version
    if version == 0:
        del bundle[2:10]  # no create time
    if version == 2:
        bundle[10:10] = struct.pack(">i", 2)  # message count
        at = 10 + 4 + 4 + 2 + len(text)
        bundle[at:at] = struct.pack(">i", 2)  # the group's record count
    records = decode_inlongmsg(bytes(bundle))
    assert [(r.body, r.attributes) for r in records] == [(b"x", expected), (b"y", expected)]


def test_v4_attribute_text_stays_strict_as_inlongs_getattrs_is() -> None:
    good = encode_inlongmsg([Record(b"x", {"k": "v"})], version=4, compress=False, data_time=1000)
    bad = bytearray(good.replace(b"\x00\x03k=v", b"\x00\x07k=1&k=2"))
    struct.pack_into(">i", bad, 2, struct.unpack_from(">i", good, 2)[0] + 4)  # total_len
    with pytest.raises(PayloadFormatError, match="duplicate key"):
        decode_inlongmsg(bytes(bad))


def test_records_come_out_in_wire_order_not_grouped_by_attribute_set() -> None:
    # InLong's iterator would give a, a, b (grouped by attribute set, first seen first): same records,
    # our order is the wire's (documented in the module and docs/tubemq/bundles.md)
    records = [Record(b"1", {"s": "a"}), Record(b"2", {"s": "b"}), Record(b"3", {"s": "a"})]
    for version in (3, 4):
        decoded = decode_inlongmsg(encode_inlongmsg(records, version=version, compress=False, data_time=1000))
        assert [(r.body, r.attributes["s"]) for r in decoded] == [(b"1", "a"), (b"2", "b"), (b"3", "a")]


GOOD_V4 = encode_inlongmsg([Record(b"abc", {"m": "0"})], version=4, compress=False, data_time=1000)


def _v4_with(offset: int, fmt: str, value: int) -> bytes:
    b = bytearray(GOOD_V4)
    struct.pack_into(fmt, b, 2 + offset, value)
    return bytes(b)


MALFORMED = {
    "empty": b"",
    "three bytes": b"\x0f\x01\x0f",
    "magic only": b"\x0f\x01\x0f\x01",
    "bad magic": b"\x0e\x01" + b"\0" * 12 + b"\x0e\x01",
    "mismatched magic": b"\x0f\x01" + b"\0" * 12 + b"\x0f\x02",
    "v0 magic only": b"\x0f\x00\x0f\x00",
    "negative group count": b"\x0f\x01" + struct.pack(">qi", 1, -1) + b"\x0f\x01",
    "group count too high": b"\x0f\x01" + struct.pack(">qi", 1, 1000) + b"\x0f\x01",
    "attr length past end": b"\x0f\x01" + struct.pack(">qiH", 1, 1, 500) + b"a=1\x0f\x01",
    "data length past end": _v1([(b"a=1", _rec(b"x"), 0)])[:-3] + b"\x0f\x01",
    "zero data length": b"\x0f\x01" + struct.pack(">qiH", 1, 1, 3) + b"a=1" + struct.pack(">i", 0) + b"\x0f\x01",
    "negative data length": b"\x0f\x01" + struct.pack(">qiH", 1, 1, 0) + struct.pack(">i", -5) + b"\x0f\x01",
    "compression flag 2": _v1([(b"a=1", _rec(b"x"), 2)]),
    "record length past group": _v1([(b"a=1", _rec(b"xy", 5), 0)]),
    "negative record length": _v1([(b"a=1", _rec(b"xy", -1), 0)]),
    "truncated record length": _v1([(b"a=1", b"\0\0", 0)]),
    "trailing bytes": _v1([(b"a=1", _rec(b"x"), 0)], trailing=b"\0"),
    "duplicate group": _v1([(b"a=1", _rec(b"x"), 0), (b"a=1", _rec(b"y"), 0)]),
    "bad modified utf8": _v1([(b"a=\xff", _rec(b"x"), 0)]),
    "corrupt snappy": _v1([(b"a=1", b"\x10\x00\xff\xff\xff", 1)]),
    "v2 group count mismatch": (b"\x0f\x02" + struct.pack(">qii", 1, 1, 1) + struct.pack(">H", 3) + b"a=1"
                                + struct.pack(">i", 2) + struct.pack(">i", 6) + b"\0" + _rec(b"x") + b"\x0f\x02"),
    "v2 total count mismatch": (b"\x0f\x02" + struct.pack(">qii", 1, 5, 1) + struct.pack(">H", 3) + b"a=1"
                                + struct.pack(">i", 1) + struct.pack(">i", 6) + b"\0" + _rec(b"x") + b"\x0f\x02"),
    "v2 negative count": b"\x0f\x02" + struct.pack(">qii", 1, -1, 0) + b"\x0f\x02",
    "v3 chunk past end": (b"\x0f\x03" + struct.pack(">qii", 1, 1, 1) + struct.pack(">H", 3) + b"a=1"
                          + struct.pack(">i", 6) + b"\0" + struct.pack(">i", 99) + b"x" + b"\x0f\x03"),
    "v3 chunk with stray byte": (b"\x0f\x03" + struct.pack(">qii", 1, 1, 1) + struct.pack(">H", 3) + b"a=1"
                                 + struct.pack(">i", 1 + 4 + 14) + b"\0" + struct.pack(">i", 14)
                                 + _rec(b"x") + _rec(b"b=") + b"!" + b"\x0f\x03"),
    "v3 own attrs not utf8": (b"\x0f\x03" + struct.pack(">qii", 1, 1, 1) + struct.pack(">H", 3) + b"a=1"
                              + struct.pack(">i", 1 + 4 + 14) + b"\0" + struct.pack(">i", 14)
                              + _rec(b"x") + _rec(b"b=\xff") + b"\x0f\x03"),
    "unknown version": b"\x0f\x05" + b"\0" * 12 + b"\x0f\x05",
    "v4 too short": b"\x0f\x04" + b"\0" * 20 + b"\x0f\x04",
    "v4 total length": _v4_with(0, ">i", 1000),
    "v4 negative body length": _v4_with(21, ">i", -1),
    "v4 body length past end": _v4_with(21, ">i", 1000),
    "v4 attr length past end": GOOD_V4[:-9] + b"\xff\xff" + GOOD_V4[-7:],
    "v4 inner magic": GOOD_V4[:-4] + b"\xee\x02" + GOOD_V4[-2:],
    "v4 compression type 3": _v4_with(4, ">B", 7 | (3 << 5)),
    "v4 snappy flag on plain body": _v4_with(4, ">B", 7 | (1 << 5)),
    "v4 record past body": _v4_with(25, ">i", 50),
    "v4 own attrs flag on plain body": _v4_with(9, ">H", 0x5),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_every_malformation_raises_a_typed_error(name: str) -> None:
    with pytest.raises(PayloadFormatError) as info:
        parse_inlongmsg(MALFORMED[name])
    assert isinstance(info.value, CodecError) and not info.value.retriable


def test_unknown_version_is_unsupported() -> None:
    with pytest.raises(UnsupportedPayloadError):
        parse_inlongmsg(MALFORMED["unknown version"])
    with pytest.raises(UnsupportedPayloadError):
        parse_inlongmsg(MALFORMED["v4 compression type 3"])


def test_v4_counts_and_ids_read_unsigned() -> None:
    b = bytearray(encode_inlongmsg([Record(b"abc")], version=4, compress=False, data_time=0, group_id=1, stream_id=2))
    struct.pack_into(">HH", b, 2 + 5, 40000, 65535)
    struct.pack_into(">H", b, 2 + 15, 40000)
    (rec,) = decode_inlongmsg(bytes(b))
    assert (rec.attributes["groupId"], rec.attributes["streamId"], rec.attributes["cnt"]) == ("40000", "65535",
                                                                                              "40000")


def test_inlongmsg_version_sniffing() -> None:
    assert [inlongmsg_version(encode_inlongmsg([], version=v)) for v in (1, 2, 3, 4)] == [1, 2, 3, 4]
    assert inlongmsg_version(b"\x0f\x00\x0f\x00") == 0
    for other in (b"", b"\x0f\x01", b"\x0f\x01\x0f\x02", b"\x0f\x07\x0f\x07", b"plain text"):
        assert inlongmsg_version(other) is None
    assert decode_inlongmsg(bytearray(encode_inlongmsg([Record(b"x")]))) == [Record(b"x")]
    assert decode_inlongmsg(memoryview(encode_inlongmsg([Record(b"x")], version=4, data_time=0)))[0].body == b"x"


# ------------------------------------------------------------------------------- mutation fuzzing


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        if op == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[rng.randrange(len(b))] = rng.choice((0, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif op == 2 and len(b) > 4:
            i = rng.randrange(2, len(b) - 2)
            del b[i : i + rng.randint(1, 8)]
        elif op == 3:
            i = rng.randrange(len(b) + 1)
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 4 and len(b) >= 8:  # overwrite an int32 with a plausible length
            i = rng.randrange(len(b) - 4)
            struct.pack_into(">i", b, i, rng.choice((0, 1, -1, 0x7FFFFFFF, len(b), rng.randrange(1 << 16))))
        else:
            b = b[: rng.randrange(len(b) + 1)] + b[-2:]
    return bytes(b)


def _seeds() -> list[bytes]:
    mixed = [*RECORDS, Record(b"q" * 300, {"x": "1"})]
    seeds = [encode_inlongmsg(ANY_RECORDS, version=v, compress=c, create_time=1) for v in (1, 2) for c in (0, 1)]
    seeds += [encode_inlongmsg(mixed, version=3, compress=c, create_time=1) for c in (0, 1)]
    seeds += [encode_inlongmsg(mixed, version=4, compress=c, data_time=DT) for c in (0, 1)]
    common_only = [Record(b"a", {"m": "0"}), Record(b"", {"m": "0"})]
    seeds += [encode_inlongmsg(common_only, version=4, compress=c, data_time=DT, group_id=1, stream_id=2)
              for c in (0, 1)]
    seeds.append(b"\x0f\x00" + seeds[0][10:-2] + b"\x0f\x00")
    return seeds


def test_random_mutations_raise_only_typed_errors_quickly() -> None:
    rng = random.Random(20261122)
    seeds = _seeds()
    slowest = 0.0
    outcomes = {"ok": 0, "error": 0}
    for i in range(4000):
        data = _mutate(rng, seeds[i % len(seeds)])
        started = time.thread_time()  # CPU, not the wall clock: a busy CI machine deschedules a test
        try:
            parse_inlongmsg(data, max_decompressed=1 << 20)
            outcomes["ok"] += 1
        except TubeSparkError:
            outcomes["error"] += 1
        slowest = max(slowest, time.thread_time() - started)
    assert slowest < 0.1, slowest
    assert outcomes["error"] > 1000 and outcomes["ok"] > 10, outcomes


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("compress", [False, True])
def test_records_sharing_one_attributes_object_encode_as_equal_copies_do(version: int, compress: bool) -> None:
    # the encoder's few-call path (one shared mapping, as a sink's bundle has) against the record-by-record one
    rng = random.Random(version)
    shared = {"streamId": "s1", "k": "v"}
    bodies = [rng.randbytes(rng.randrange(0, 300)) for _ in range(200)]
    one_object = encode_inlongmsg([(b, shared) for b in bodies], version=version, compress=compress, create_time=7)
    copies = encode_inlongmsg([(b, dict(shared)) for b in bodies], version=version, compress=compress, create_time=7)
    assert one_object == copies
    assert [r.body for r in decode_inlongmsg(one_object)] == bodies
    assert encode_inlongmsg([], version=version, create_time=7) == encode_inlongmsg(iter([]), version=version,
                                                                                     create_time=7)
    with pytest.raises(PayloadEncodeError, match="must be bytes"):
        encode_inlongmsg([(b"a", shared), ("b", shared)], version=version)  # type: ignore[list-item]
    with pytest.raises(PayloadEncodeError, match="attribute"):
        encode_inlongmsg([(b"a", {"k": "a&b"})] * 3, version=version)
