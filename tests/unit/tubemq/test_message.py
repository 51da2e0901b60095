"""Message payloads: attribute prefix, flag, CRC, msgType/msgTime (docs/tubemq/protocol.md#message-payload)."""

from __future__ import annotations

import struct
import zlib
from datetime import UTC, datetime, timedelta, timezone

import pytest

from tubespark.errors import ChecksumMismatchError, MessageFormatError
from tubespark.tubemq.wire.message import (
    OutgoingMessage,
    checksum,
    decode_attributes,
    decode_payload,
    encode_attributes,
    format_msg_time,
    parse_msg_time,
)

# --- checksum ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "expected"), [
    (b"", 0),
    (b"123456789", 0xCBF43926 & 0x7FFFFFFF),  # the CRC-32/IEEE check value
    (b"a", 0xE8B7BE43 & 0x7FFFFFFF),
    (b"The quick brown fox jumps over the lazy dog", 0x414FA339),
])
def test_checksum_known_vectors(data: bytes, expected: int) -> None:
    assert checksum(data) == expected
    assert 0 <= checksum(data) <= 0x7FFFFFFF


def test_checksum_covers_the_attribute_prefix() -> None:
    payload, _flag = OutgoingMessage(b"body", msg_type="T").encode()
    assert checksum(payload) != checksum(b"body")


# --- encoding ---------------------------------------------------------------------------------------


def test_attribute_order_reserved_keys_first() -> None:
    text = encode_attributes({"k": "v", "a": "b"}, "T1", "202401021530")
    assert text == "$msgType$=T1,$msgTime$=202401021530,k=v,a=b"


def test_payload_with_attributes_has_flag_1_and_length_prefix() -> None:
    payload, flag = OutgoingMessage(b"hello", msg_type="T", attributes={"k": "v"}).encode()
    attr = b"$msgType$=T,k=v"
    assert flag == 1
    assert payload == struct.pack(">i", len(attr)) + attr + b"hello"


def test_payload_without_attributes_is_the_body_and_flag_0() -> None:
    assert OutgoingMessage(b"hello").encode() == (b"hello", 0)
    assert OutgoingMessage(b"").encode() == (b"", 0)


def test_non_ascii_attribute_length_counts_utf8_bytes() -> None:
    payload, flag = OutgoingMessage(b"x", attributes={"city": "Zürich"}).encode()
    attr = "city=Zürich".encode()
    assert flag == 1
    assert struct.unpack_from(">i", payload)[0] == len(attr) == 12
    assert decode_payload(1, payload, flag, checksum(payload)).attributes == {"city": "Zürich"}


@pytest.mark.parametrize("attributes", [{"a,b": "v"}, {"a=b": "v"}, {"k": "v,w"}, {"k": "v=w"}, {"": "v"},
                                        {"k": ""}])
def test_separators_in_keys_or_values_are_rejected(attributes: dict[str, str]) -> None:
    with pytest.raises(MessageFormatError):
        encode_attributes(attributes, None, None)


@pytest.mark.parametrize("msg_type", ["a,b", "a=b"])
def test_separators_in_msg_type_are_rejected(msg_type: str) -> None:
    with pytest.raises(MessageFormatError):
        OutgoingMessage(b"x", msg_type=msg_type).encode()


@pytest.mark.parametrize("key", ["$msgType$", "$msgTime$"])
def test_reserved_keys_are_rejected_in_user_attributes(key: str) -> None:
    with pytest.raises(MessageFormatError, match="reserved"):
        encode_attributes({key: "202401010000"}, None, None)


@pytest.mark.parametrize("msg_time", [
    "2024010112",        # too short
    "2024010112000",     # too long
    "2024-01-01 1",      # not digits
    "202413011200",      # month 13
    "202402301200",      # February 30th
    "202401012460",      # minute 60
    "٢٠٢٤٠١٠١١٢٠٠",      # Arabic-Indic digits: \d matches them, TubeMQ does not
])
def test_bad_msg_time_is_rejected(msg_time: str) -> None:
    with pytest.raises(MessageFormatError):
        OutgoingMessage(b"x", msg_time=msg_time).encode()


def test_good_msg_time_is_accepted() -> None:
    payload, flag = OutgoingMessage(b"x", msg_time="202402291159").encode()
    assert flag == 1 and b"$msgTime$=202402291159" in payload


# --- msgTime helpers --------------------------------------------------------------------------------


def test_msg_time_round_trip_is_utc_minute_precision() -> None:
    when = datetime(2024, 3, 5, 7, 9, 59, 123, tzinfo=UTC)
    text = format_msg_time(when)
    assert text == "202403050709"
    assert parse_msg_time(text) == datetime(2024, 3, 5, 7, 9, tzinfo=UTC)


def test_format_msg_time_converts_to_utc_and_takes_naive_as_utc() -> None:
    assert format_msg_time(datetime(2024, 1, 1, 8, 30, tzinfo=timezone(timedelta(hours=8)))) == "202401010030"
    assert format_msg_time(datetime(2024, 1, 1, 8, 30)) == "202401010830"


@pytest.mark.parametrize("text", ["", "2024", "202413011200", "abcdefghijkl", "٢٠٢٤٠١٠١١٢٠٠"])
def test_parse_msg_time_returns_none_for_bad_values(text: str) -> None:
    assert parse_msg_time(text) is None


# --- decoding ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 900 * 1024])
def test_decode_round_trip(size: int) -> None:
    body = bytes(i % 251 for i in range(size))
    out = OutgoingMessage(body, msg_type="stream1", msg_time="202401010000", attributes={"k": "v"})
    payload, flag = out.encode()
    got = decode_payload(77, payload, flag, checksum(payload), offset=280)
    assert got.message_id == 77
    assert got.data == body
    assert got.msg_type == "stream1"
    assert got.msg_time == "202401010000"
    assert got.user_attributes == {"k": "v"}
    assert got.attributes == {"$msgType$": "stream1", "$msgTime$": "202401010000", "k": "v"}
    assert got.offset == 280


@pytest.mark.parametrize("size", [0, 900 * 1024])
def test_decode_round_trip_without_attributes(size: int) -> None:
    body = b"\x00\x01" * (size // 2)
    payload, flag = OutgoingMessage(body).encode()
    got = decode_payload(1, payload, flag, checksum(payload))
    assert (got.data, got.attributes, got.msg_type, got.msg_time) == (body, {}, "", "")


def test_payload_built_the_java_way_decodes() -> None:
    # docs/tubemq/protocol.md#flag-and-attribute-prefix and #checksum:
    # int32 BE attribute length | UTF-8 attribute text | body, flag 1, CRC over all of it
    attr = "$msgType$=order,$msgTime$=202312312359,region=Köln".encode()
    payload = len(attr).to_bytes(4, "big") + attr + b'{"id": 1}'
    crc = zlib.crc32(payload) & 0x7FFFFFFF
    got = decode_payload(123, payload, 1, crc)
    assert got.data == b'{"id": 1}'
    assert got.msg_type == "order"
    assert got.msg_time == "202312312359"
    assert got.user_attributes == {"region": "Köln"}


def test_flag_0_payload_is_all_body_even_if_it_looks_like_attributes() -> None:
    payload = b"\x00\x00\x00\x03a=bBODY"
    got = decode_payload(1, payload, 0, checksum(payload))
    assert got.data == payload and got.attributes == {}


def test_checksum_mismatch_raises() -> None:
    payload, flag = OutgoingMessage(b"data", msg_type="T").encode()
    with pytest.raises(ChecksumMismatchError):
        decode_payload(5, payload, flag, checksum(payload) ^ 1)
    with pytest.raises(ChecksumMismatchError):
        decode_payload(5, payload[:-1] + b"X", flag, checksum(payload))


def test_checksum_check_can_be_disabled_explicitly() -> None:
    payload, flag = OutgoingMessage(b"data").encode()
    assert decode_payload(5, payload, flag, -1, verify=False).data == b"data"


@pytest.mark.parametrize("payload", [
    struct.pack(">i", -1) + b"body",              # negative length
    struct.pack(">i", 5) + b"abcd",               # longer than what follows
    struct.pack(">i", 2**31 - 1) + b"x",          # absurd
    b"\x00\x00\x00",                              # not even a length
    struct.pack(">i", 2) + b"\xff\xfe" + b"body",  # attributes not UTF-8
])
def test_malformed_attribute_prefix_raises(payload: bytes) -> None:
    with pytest.raises(MessageFormatError):
        decode_payload(9, payload, 1, checksum(payload))


def test_attribute_length_equal_to_the_rest_gives_empty_body() -> None:
    attr = b"k=v"
    payload = struct.pack(">i", len(attr)) + attr
    got = decode_payload(1, payload, 1, checksum(payload))
    assert got.data == b"" and got.attributes == {"k": "v"}


def test_decode_attributes_tolerates_empty_items_and_missing_values() -> None:
    assert decode_attributes("a=1,,b,c=") == {"a": "1", "b": "", "c": ""}


# --- the batch fast path ------------------------------------------------------------------------------


def _transfered(message_id: int, message: OutgoingMessage, *, crc: int | None = None):
    from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb

    payload, flag = message.encode()
    return bpb.TransferedMessage(messageId=message_id, checkSum=checksum(payload) if crc is None else crc,
                                 payLoadData=payload, flag=flag)


def test_decode_columns_equals_decode_payload_per_message() -> None:
    from tubespark.tubemq.wire.message import decode_columns

    def decode_messages(transfered, start, **kwargs):
        return decode_columns(transfered, start, **kwargs).messages()

    sent = [OutgoingMessage(b"plain"), OutgoingMessage(b"t", msg_type="T", msg_time="202401021530"),
            OutgoingMessage(b"t2", msg_type="T", msg_time="202401021530"),
            OutgoingMessage(b"", msg_type="U", attributes={"k": "v"}), OutgoingMessage(b"x" * 5000)]
    transfered = [_transfered(100 + i, m) for i, m in enumerate(sent)]
    got = decode_messages(transfered, 56, step=28)
    want = [decode_payload(t.messageId, t.payLoadData, t.flag, t.checkSum, offset=56 + 28 * k)
            for k, t in enumerate(transfered)]
    assert got == want
    assert [m.offset for m in got] == [56, 84, 112, 140, 168]
    assert got[1].attributes is not got[2].attributes, "each message owns its attributes dict"
    got[1].attributes["mutated"] = "1"
    assert "mutated" not in got[2].attributes
    assert [m.offset for m in decode_messages(transfered, 56)] == [-1] * 5


def test_columns_cut_and_filter_keep_each_rows_values_together() -> None:
    from tubespark.tubemq.wire.message import decode_columns

    sent = [OutgoingMessage(f"m{k}".encode(), msg_type=f"T{k % 2}", msg_time="202401021530",
                            attributes={"n": str(k)}) for k in range(5)]
    columns = decode_columns([_transfered(100 + k, m) for k, m in enumerate(sent)], 0, step=28)
    assert len(columns) == 5

    def rows(c):
        return [(m.message_id, m.data, m.offset, m.msg_type, m.attributes["n"]) for m in c.messages()]

    assert rows(columns.head(2)) == [(100, b"m0", 0, "T0", "0"), (101, b"m1", 28, "T1", "1")]
    assert rows(columns.without_ids({101, 103})) == [(100, b"m0", 0, "T0", "0"), (102, b"m2", 56, "T0", "2"),
                                                     (104, b"m4", 112, "T0", "4")]
    assert rows(columns.where([False, True, False, False, True])) == [(101, b"m1", 28, "T1", "1"),
                                                                       (104, b"m4", 112, "T0", "4")]
    assert columns.where([True] * 5) is columns


def test_decode_columns_raises_like_decode_payload() -> None:
    from tubespark.tubemq.wire.message import decode_columns
    from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb

    good = _transfered(1, OutgoingMessage(b"ok", msg_type="T"))
    with pytest.raises(ChecksumMismatchError, match="message 2"):
        decode_columns([good, _transfered(2, OutgoingMessage(b"bad"), crc=1)], 0)
    assert decode_columns([_transfered(2, OutgoingMessage(b"bad"), crc=1)], 0, verify=False).data == [b"bad"]
    short = bpb.TransferedMessage(messageId=3, payLoadData=b"\x00\x00", flag=1, checkSum=checksum(b"\x00\x00"))
    with pytest.raises(MessageFormatError, match="message 3"):
        decode_columns([short], 0)
    bad_len = struct.pack(">i", 99) + b"ab"
    with pytest.raises(MessageFormatError, match="attribute length 99"):
        decode_columns([bpb.TransferedMessage(messageId=4, payLoadData=bad_len, flag=1,
                                               checkSum=checksum(bad_len))], 0)
    not_utf8 = struct.pack(">i", 2) + b"\xff\xfe" + b"body"
    with pytest.raises(MessageFormatError, match="not UTF-8"):
        decode_columns([bpb.TransferedMessage(messageId=5, payLoadData=not_utf8, flag=1,
                                               checkSum=checksum(not_utf8))], 0)


def test_parse_msg_time_is_cached_and_still_rejects_bad_values() -> None:
    first = parse_msg_time("202401021530")
    assert first == datetime(2024, 1, 2, 15, 30, tzinfo=UTC)
    assert parse_msg_time("202401021530") is first
    for bad in ("", "20240102153", "202413021530", "\uff12\uff10\uff12\uff1401021530", "2024010215301"):
        assert parse_msg_time(bad) is None
        assert parse_msg_time(bad) is None  # cached misses stay misses
