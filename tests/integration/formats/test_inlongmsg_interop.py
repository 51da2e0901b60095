"""tubespark's InLongMsg codec against InLong's own class (inlong-common 1.11.0, built from Maven Central).

* Bundles written by ``InLongMsg`` (v1..v4, plain and Snappy, assorted attributes) -> our decoder gives
  exactly the records InLong's parser gives.
* Bundles written by our encoder (v1..v4, and v0 derived from v1) -> InLong's parser gives exactly our
  records (and ours give back the input).
* The facts of conventions.md §5.1 on where the class is lax, checked by running it.

No TubeMQ cluster is needed (the fixtures are not used); only Java 17 and Maven.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from pathlib import Path

import pytest

from tests.interop.inlongjava import shared_inlong_java
from tubespark.formats import (
    PayloadFormatError,
    Record,
    encode_inlongmsg,
    parse_attributes,
    parse_inlongmsg,
)
from tubespark.formats.common import data_time_of


@pytest.fixture(scope="module")
def java():
    client = shared_inlong_java()
    client.build()
    return client


def _java_attrs(text: str, version: int) -> dict[str, str]:
    """The attributes a group's text stands for. v3 texts are InLong's ``common + "&" + own``
    concatenation (common first, so common wins; an empty common part leaves an empty entry)."""
    if version != 3:
        return parse_attributes(text)
    merged: dict[str, str] = {}
    for entry in text.split("&"):
        if entry:
            key, value = next(iter(parse_attributes(entry).items()))
            merged.setdefault(key, value)
    return merged


def _by_attributes(pairs) -> dict[frozenset, list[bytes]]:
    grouped: dict[frozenset, list[bytes]] = defaultdict(list)
    for attrs, body in pairs:
        grouped[frozenset(attrs.items())].append(body)
    return dict(grouped)


def _java_view(line: dict) -> dict[frozenset, list[bytes]]:
    assert line["ok"], line
    return _by_attributes(
        (_java_attrs(g["attr"], line["version"]), body) for g in line["groups"] for body in g["records"]
    )


def _our_view(records: list[Record]) -> dict[frozenset, list[bytes]]:
    return _by_attributes((r.attributes, r.body) for r in records)


def _assert_same(payload: bytes, line: dict) -> list[Record]:
    bundle = parse_inlongmsg(payload)
    assert bundle.version == line["version"]
    assert _our_view(bundle.records) == _java_view(line)
    assert sum(len(g["records"]) for g in line["groups"]) == len(bundle.records)
    if bundle.version in (1, 2, 3, 4):
        assert bundle.create_time == line["createtime"]
    if bundle.version >= 2:
        assert bundle.msg_count == line["msgcnt"]
    for r in bundle.records:  # data time = the dt attribute, which v4 always has
        assert r.data_time == (int(r.attributes["dt"]) if "dt" in r.attributes else None)
    return bundle.records


# ------------------------------------------------------------------------ InLong writes, we read


def test_java_encoded_bundles_decode_to_the_same_records(java, tmp_path: Path) -> None:
    vectors = java.encode_vectors(tmp_path)
    names = {v["name"] for v in vectors}
    assert {"v1-plain", "v1-snappy", "v2-plain", "v2-snappy", "v3-plain", "v3-snappy"} <= names
    assert sum(n.startswith("v4-") for n in names) >= 6
    lines = java.parse([Path(v["file"]) for v in vectors])
    for vector, line in zip(vectors, lines, strict=True):
        payload = Path(vector["file"]).read_bytes()
        records = _assert_same(payload, line)
        assert records, vector["name"]
    by_name = {v["name"]: parse_inlongmsg(Path(v["file"]).read_bytes()) for v in vectors}
    # spot checks of what the vectors hold (so the comparison above compares something)
    v1 = by_name["v1-snappy"].records
    assert [r.body for r in v1[:3]] == [b"r1", b"", v1[2].body] and len(v1[2].body) == 5000
    assert {"k": "\0é😀", "m": "0"} in [r.attributes for r in v1]
    assert {"x ": " y", "z": ""} in [r.attributes for r in v1]  # " x = y &z=": entries trimmed, not keys
    assert {} in [r.attributes for r in v1]
    v3 = by_name["v3-plain"].records
    assert v3[0] == Record(b"one-0", {"p": "1", "g": "1", "dt": "1700000000000"}, 1700000000000)
    assert Record(b"other-1", {"dt": "5", "g": "2"}, 5) in v3
    own = by_name["v4-own-overridden"].records
    assert own[0].attributes == {"a": "common", "c": "1", "dt": "1700000000000", "cnt": "2",
                                 "groupId": "3", "streamId": "4"}
    assert own[1].attributes["cnt"] == "2" and own[1].attributes["dt"] == "1700000000000"
    lf = by_name["v4-lf-presnappy-own-attrs"]
    assert lf.bin_header.support_lf and lf.bin_header.per_message_attributes and lf.bin_header.compress_type == 1
    assert by_name["v4-string-ids-own-attrs"].records[0].attributes["groupId"] == "g1"
    assert [r.body for r in by_name["v4-empty-record"].records] == [b"", b"x", b""]


# ------------------------------------------------------------------------ we write, InLong reads

_RECORDS = [
    Record(b"alpha", {"groupId": "g", "streamId": "s", "dt": "1700000000000"}),
    Record(b"\x00\xff" * 700, {"groupId": "g", "streamId": "s", "dt": "1700000000000"}),
    Record("ünïcode 😀".encode(), {"groupId": "g", "streamId": "s2", "k": "\0é😀", "dt": "1700000000000"}),
    Record(b"beta", {"groupId": "g", "streamId": "s", "dt": "1700000000000"}),
    Record(b"x" * 20000, {"groupId": "g", "streamId": "s", "dt": "1700000000000", "empty": ""}),
]
_V1_ONLY = [Record(b"", {"a": "1"}), Record(b"no attrs", {}), Record(b"dt from data_time", {"a": "1"}, 1234)]


def _v0_from_v1(payload: bytes) -> bytes:
    assert payload[:2] == b"\x0f\x01"
    return b"\x0f\x00" + payload[10:-2] + b"\x0f\x00"


def _expected(records: list[Record], version: int, **v4) -> list[Record]:
    """What both parsers should give for ``records`` written by our encoder."""
    out = []
    for r in records:
        attrs = dict(r.attributes)
        if r.data_time is not None:
            attrs.setdefault("dt", str(r.data_time))
        if version == 4:
            attrs |= {"dt": "1700000000000", "cnt": str(len(records))}
            if v4.get("group_id") is not None:
                attrs |= {"groupId": str(v4["group_id"]), "streamId": str(v4["stream_id"])}
        out.append(Record(r.body, attrs, data_time_of(attrs)))
    return out


def _full(records: list[Record]) -> list[tuple]:
    return sorted((r.body, tuple(sorted(r.attributes.items())), r.data_time) for r in records)


_PLAIN = [Record(r.body, {k: v for k, v in r.attributes.items() if k not in ("groupId", "streamId")})
          for r in _RECORDS]

_CASES = [
    *[(f"v{v}-{'snappy' if c else 'plain'}", _RECORDS + (_V1_ONLY if v < 3 else []), {"version": v, "compress": c})
      for v in (1, 2, 3) for c in (False, True)],
    ("v4-ids-in-own-attrs", _RECORDS, {"version": 4, "compress": True, "ext_flags": 0x20}),
    ("v4-string-ids", _PLAIN, {"version": 4, "compress": False, "group_id": "g1", "stream_id": "s9"}),
    ("v4-numeric-ids", _PLAIN, {"version": 4, "compress": True, "group_id": 12, "stream_id": 34}),
    ("v4-common-only", [Record(b"a", {"m": "0"}), Record(b"", {"m": "0"}), Record(b"c", {"m": "0"})],
     {"version": 4, "compress": True, "group_id": 1, "stream_id": 2}),
    ("v4-no-attrs", [Record(b"a", {}), Record(b"", {})], {"version": 4, "compress": False}),
    ("v4-mixed-empty-attrs", [Record(b"a", {}), Record(b"b", {"k": "v"})], {"version": 4, "compress": True}),
    ("v4-empty", [], {"version": 4, "compress": True, "group_id": 1, "stream_id": 2}),
    ("v1-empty", [], {"version": 1, "compress": True}),
]


def test_our_bundles_parse_identically_in_inlong(java) -> None:
    payloads, expectations = [], []
    for name, records, kwargs in _CASES:
        kwargs = dict(kwargs)
        if kwargs["version"] == 4:
            kwargs["data_time"] = 1700000000000
        else:
            kwargs["create_time"] = 1700000000777
        payload = encode_inlongmsg(records, **kwargs)
        payloads.append(payload)
        expectations.append((name, records, kwargs))
        if kwargs["version"] == 1:  # v0: InLong reads it (never writes it); derive it from our v1
            payloads.append(_v0_from_v1(payload))
            expectations.append((name.replace("v1", "v0"), records, {**kwargs, "version": 0}))
    lines = java.parse_bytes(payloads)
    for payload, line, (name, records, kwargs) in zip(payloads, lines, expectations, strict=True):
        assert line["ok"], (name, line)
        ours = _assert_same(payload, line)
        expected = _expected(records, 1 if kwargs["version"] == 0 else kwargs["version"],
                             group_id=kwargs.get("group_id"), stream_id=kwargs.get("stream_id"))
        assert _full(ours) == _full(expected), name


# ------------------------------------------------------------------ the class's laxness, observed


def _v1_single(record: bytes, declared_len: int) -> bytes:
    attr = b"a=1"
    data = struct.pack(">i", declared_len) + record
    return (b"\x0f\x01" + struct.pack(">qi", 1, 1) + struct.pack(">H", len(attr)) + attr
            + struct.pack(">i", len(data) + 1) + b"\0" + data + b"\x0f\x01")


def test_where_inlong_is_lax_we_raise(java) -> None:
    good_v4 = encode_inlongmsg([Record(b"abc", {"m": "0"})], version=4, compress=False, data_time=1000)
    bad_inner_magic = good_v4[:-4] + b"\xee\x02" + good_v4[-2:]
    v4_count_40000 = good_v4[:17] + struct.pack(">H", 40000) + good_v4[19:]
    no_equals = encode_inlongmsg([Record(b"abc", {})], version=4, compress=False, data_time=1000)
    no_equals = no_equals.replace(b"\x00\x00\xee\x01", b"\x00\x03abc\xee\x01")
    no_equals = no_equals[:2] + struct.pack(">i", len(no_equals) - 8) + no_equals[6:]
    too_long = _v1_single(b"xy", 5)  # record claims 5 bytes, 2 are there
    dup_group = encode_inlongmsg([Record(b"1", {"a": "1"}), Record(b"2", {"b": "2"})], version=1, compress=False)
    dup_group = dup_group.replace(b"b=2", b"a=1")
    v3_empty = encode_inlongmsg([Record(b"z", {"a": "1"})], version=3, compress=False, create_time=1)
    v3_empty = v3_empty.replace(b"\x00\x00\x00\x01z", b"\x00\x00\x00\x00z")  # record length 0, 1 stray byte
    lines = java.parse_bytes([bad_inner_magic, v4_count_40000, no_equals, too_long, dup_group, v3_empty])

    assert lines[0]["ok"]  # InLong never checks the 0xEE01 magic
    assert lines[1]["ok"] and "cnt=-25536" in lines[1]["groups"][0]["attr"]  # signed 16-bit count
    assert not lines[2]["ok"]  # an entry without '=' makes getAttrs() throw
    assert lines[3]["ok"] and lines[3]["groups"][0]["records"] == [b"xy\0\0\0"]  # zero-padded
    assert lines[4]["ok"] and [g["records"] for g in lines[4]["groups"]] == [[b"2"]]  # first group lost
    assert not lines[5]["ok"] or sum(len(g["records"]) for g in lines[5]["groups"]) == 0

    for payload in (bad_inner_magic, no_equals, too_long, dup_group, v3_empty):
        with pytest.raises(PayloadFormatError):
            parse_inlongmsg(payload)
    assert parse_inlongmsg(v4_count_40000).records[0].attributes["cnt"] == "40000"
