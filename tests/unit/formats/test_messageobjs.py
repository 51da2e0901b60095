"""MessageObjs codec (tubespark/formats/messageobjs.py) and the msgEnType dispatch (bundles.py).

The cross-check compiles InLong's ``ProxySdk.proto`` messages with protoc (grpcio-tools) in the test
and compares with protobuf's own runtime both ways: no jar on Maven Central carries InLong's generated
class (conventions.md §5.1).
"""

from __future__ import annotations

import gzip
import importlib.util
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tubespark.errors import TubeSparkError
from tubespark.formats import (
    PayloadEncodeError,
    PayloadFormatError,
    PayloadTooLargeError,
    Record,
    UnsupportedPayloadError,
    decode_bundle,
    decode_messageobjs,
    encode_inlongmsg,
    encode_messageobjs,
)
from tubespark.formats.common import snappy_compress
from tubespark.formats.messageobjs import COMPRESS_GZIP, COMPRESS_NONE, COMPRESS_SNAPPY

# The messages of inlong-sdk/sdk-common/src/main/proto/ProxySdk.proto (apache/inlong), same numbers.
PROXY_SDK_PROTO = """
syntax = "proto3";
package org.apache.inlong.sdk.commons.protocol;
enum INLONG_COMPRESSED_TYPE { INLONG_NO_COMPRESS = 0; INLONG_GZ = 1; INLONG_SNAPPY = 2; }
message MessageObj {
  int64 msgTime = 1;
  string sourceIp = 2;
  bytes body = 3;
  map<string, string> params = 4;
}
message MessageObjs { repeated MessageObj msgs = 1; }
"""

RECORDS = [
    Record(b"hello", {"a": "1", "ü": "😀"}, 1_700_000_000_123, "10.0.0.1"),
    Record(b"", {}, 0, ""),  # proto3 defaults: what decoding gives for an absent msgTime and sourceIp
    Record(b"\x00\xff" * 500, {"k": "", "": "v"}, -5, "::1"),
    Record(b"x", {"a=b&c": "=&"}, 2**63 - 1, ""),
]


@pytest.fixture(scope="module")
def proxy_sdk(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("proxysdk")
    (out / "ProxySdk.proto").write_text(PROXY_SDK_PROTO)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{out}", f"--python_out={out}",
                    str(out / "ProxySdk.proto")], check=True, capture_output=True, timeout=120)
    spec = importlib.util.spec_from_file_location("ProxySdk_pb2", out / "ProxySdk_pb2.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("compress_type", [COMPRESS_NONE, COMPRESS_GZIP, COMPRESS_SNAPPY])
def test_round_trip(compress_type: int) -> None:
    payload = encode_messageobjs(RECORDS, compress_type)
    assert decode_messageobjs(payload, compress_type) == RECORDS
    assert decode_messageobjs(encode_messageobjs([], compress_type), compress_type) == []


def test_official_runtime_reads_ours_and_we_read_its(proxy_sdk) -> None:
    theirs = proxy_sdk.MessageObjs()
    theirs.ParseFromString(encode_messageobjs(RECORDS))
    assert [(m.body, dict(m.params), m.msgTime, m.sourceIp) for m in theirs.msgs] == [
        (r.body, r.attributes, r.data_time or 0, r.source_ip or "") for r in RECORDS]

    objs = proxy_sdk.MessageObjs()
    for r in RECORDS:
        m = objs.msgs.add(body=r.body, msgTime=r.data_time or 0, sourceIp=r.source_ip or "")
        m.params.update(r.attributes)
    raw = objs.SerializeToString()
    assert decode_messageobjs(raw) == RECORDS
    assert decode_messageobjs(gzip.compress(raw), COMPRESS_GZIP) == RECORDS
    assert decode_messageobjs(snappy_compress(raw), COMPRESS_SNAPPY) == RECORDS
    # bytes may differ (map entry order, empty keys/values left out by the runtime); the messages do not
    one = proxy_sdk.MessageObjs()
    one.msgs.add(body=b"b", msgTime=5, sourceIp="ip").params.update({"k": "v"})
    assert encode_messageobjs([Record(b"b", {"k": "v"}, 5, "ip")]) == one.SerializeToString()


def test_unknown_fields_are_skipped_and_later_map_entries_win() -> None:
    extra = bytes([0x28, 0x05, 0x31]) + b"\0" * 8 + bytes([0x3D]) + b"\0" * 4 + bytes([0x42, 0x01, 0x41])
    entry1 = bytes([0x0A, 0x01]) + b"k" + bytes([0x12, 0x01]) + b"1"
    entry2 = bytes([0x0A, 0x01]) + b"k" + bytes([0x12, 0x01]) + b"2"
    obj = extra + bytes([0x22, len(entry1)]) + entry1 + bytes([0x22, len(entry2)]) + entry2
    payload = bytes([0x0A, len(obj)]) + obj + bytes([0x10, 0x01])  # + unknown field 2 of MessageObjs
    assert decode_messageobjs(payload) == [Record(b"", {"k": "2"}, 0, "")]


def test_proto3_defaults_come_out_as_inlong_gives_them() -> None:
    # InLong's generated getMsgTime() / getSourceIp() give 0 and "" for a MessageObj that has neither
    # (proto3 cannot tell them from absent); so do we, not None
    (record,) = decode_messageobjs(bytes([0x0A, 0x03, 0x1A, 0x01]) + b"b")  # msgs { body: "b" }
    assert (record.body, record.data_time, record.source_ip) == (b"b", 0, "")
    assert decode_messageobjs(encode_messageobjs([Record(b"b", {}, None, None)])) == [Record(b"b", {}, 0, "")]


def test_an_empty_gzip_payload_is_no_messages() -> None:
    # InLong's GzipUtils returns an empty input unchanged: an empty MessageObjs, not damage
    assert decode_messageobjs(b"", COMPRESS_GZIP) == []
    assert decode_bundle(b"", {"msgEnType": "1", "compressType": "1"}) == []


MALFORMED = {
    "truncated varint key": b"\x8a",
    "truncated length": b"\x0a",
    "length past end": b"\x0a\x05abc",
    "overlong varint": b"\x08" + b"\xff" * 10 + b"\x01",
    "varint over 64 bits": b"\x08" + b"\xff" * 9 + b"\x02",
    "field number 0": b"\x02\x00",
    "group wire type": b"\x0b",
    "wire type 7": b"\x0f",
    "msgs as varint": b"\x08\x01",
    "msgTime as bytes": b"\x0a\x03\x0a\x01x",
    "body as varint": b"\x0a\x02\x18\x01",
    "sourceIp not utf8": b"\x0a\x03\x12\x01\xff",
    "param key not utf8": b"\x0a\x05\x22\x03\x0a\x01\xff",
    "param value as varint": b"\x0a\x04\x22\x02\x10\x01",
    "truncated fixed64": b"\x0a\x03\x39\x00\x00",
    "nested length past end": b"\x0a\x02\x1a\x05",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_every_malformation_raises_a_typed_error(name: str) -> None:
    with pytest.raises(PayloadFormatError):
        decode_messageobjs(MALFORMED[name])


def test_compression_errors_and_caps() -> None:
    raw = encode_messageobjs([Record(b"z" * 200_000)])
    with pytest.raises(PayloadTooLargeError):
        decode_messageobjs(gzip.compress(raw), COMPRESS_GZIP, max_decompressed=100_000)
    with pytest.raises(PayloadTooLargeError):
        decode_messageobjs(snappy_compress(raw), COMPRESS_SNAPPY, max_decompressed=100_000)
    with pytest.raises(PayloadFormatError):
        decode_messageobjs(gzip.compress(raw)[:-10], COMPRESS_GZIP)
    with pytest.raises(PayloadFormatError):
        decode_messageobjs(b"not gzip", COMPRESS_GZIP)
    with pytest.raises(PayloadFormatError):
        decode_messageobjs(b"\x05\x00\x01", COMPRESS_SNAPPY)
    with pytest.raises(UnsupportedPayloadError):
        decode_messageobjs(raw, 3)
    two_members = gzip.compress(raw[:10]) + gzip.compress(raw[10:])  # as Java's GZIPInputStream reads
    assert decode_messageobjs(two_members, COMPRESS_GZIP)[0].body == b"z" * 200_000
    with pytest.raises(PayloadEncodeError):
        encode_messageobjs(RECORDS, 9)
    with pytest.raises(PayloadEncodeError):
        encode_messageobjs([Record(b"x", {"\ud800": "v"})])
    with pytest.raises(PayloadEncodeError):
        encode_messageobjs([(b"x", {})])  # type: ignore[list-item]


def test_random_mutations_raise_only_typed_errors_quickly() -> None:
    rng = random.Random(7)
    seeds = [(encode_messageobjs(RECORDS, c), c) for c in (COMPRESS_NONE, COMPRESS_GZIP, COMPRESS_SNAPPY)]
    slowest, errors = 0.0, 0
    for i in range(3000):
        data, compress_type = seeds[i % 3]
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.7 and b:
                b[rng.randrange(len(b))] = rng.randrange(256)
            else:
                b = b[: rng.randrange(len(b) + 1)]
        # CPU time: a busy machine's preemption is not the decoder's (wall time failed at load 7)
        started = time.thread_time()
        try:
            decode_messageobjs(bytes(b), compress_type, max_decompressed=1 << 20)
        except TubeSparkError:
            errors += 1
        slowest = max(slowest, time.thread_time() - started)
    assert slowest < 0.1, slowest
    assert errors > 500


# --------------------------------------------------------------------------------- decode_bundle


def test_decode_bundle_dispatches_on_msg_en_type_then_magic() -> None:
    recs = [Record(b"x", {"a": "1"})]
    inlong = encode_inlongmsg(recs)
    assert decode_bundle(inlong, {"msgEnType": "2"}) == recs
    assert decode_bundle(inlong, {}) == recs  # no msgEnType: the magic decides
    pb = encode_messageobjs(RECORDS, COMPRESS_SNAPPY)
    assert decode_bundle(pb, {"msgEnType": "1", "compressType": "2"}) == RECORDS
    assert decode_bundle(encode_messageobjs(RECORDS), {"msgEnType": " 1 "}) == RECORDS
    assert decode_bundle(b"raw text", {"k": "v"}) == [Record(b"raw text", {"k": "v"})]
    with pytest.raises(PayloadFormatError):
        decode_bundle(b"raw text", {}, raw_fallback=False)
    with pytest.raises(PayloadFormatError):
        decode_bundle(b"raw text", {"msgEnType": "2"})  # told InLongMsg, no magic
    with pytest.raises(UnsupportedPayloadError):
        decode_bundle(inlong, {"msgEnType": "3"})
    with pytest.raises(UnsupportedPayloadError):
        decode_bundle(inlong, {"msgEnType": "x"})
    with pytest.raises(UnsupportedPayloadError):
        decode_bundle(pb, {"msgEnType": "1", "compressType": "7"})
    with pytest.raises(PayloadTooLargeError):
        decode_bundle(encode_inlongmsg([Record(b"z" * 10_000)]), {"msgEnType": "2"}, max_decompressed=100)


def test_formats_package_imports_only_shared_foundations() -> None:
    import ast

    root = Path(__file__).resolve().parents[3] / "tubespark" / "formats"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.startswith("tubespark"):
                    assert name.split(".")[1] in ("errors", "core", "formats"), (path.name, name)
