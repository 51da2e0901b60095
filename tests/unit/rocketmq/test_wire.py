"""The RocketMQ remoting codec against byte vectors laid out by hand from docs/rocketmq/protocol.md."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import cramjam
import pytest

from tubespark.core.framed_io import BytesReader
from tubespark.errors import (
    BadRequestError,
    ChecksumMismatchError,
    CodecError,
    FrameTooLargeError,
    NoDataError,
    ServerBusyError,
    UnknownTopicError,
)
from tubespark.rocketmq.wire import codes, headers
from tubespark.rocketmq.wire.frame import (
    JSON,
    ROCKETMQ,
    VERSION,
    Command,
    RemotingCodec,
    decode_command,
    encode_command,
    read_frame,
    request,
)
from tubespark.rocketmq.wire.message import (
    StoredMessage,
    decode_batch_body,
    decode_properties,
    decode_stored,
    encode_batch_body,
    encode_properties,
    encode_stored,
)
from tubespark.rocketmq.wire.pop import Receipt, parse_queue_info, receipts_for, retry_topic, topic_kind
from tubespark.rocketmq.wire.route import MessageQueue, parse_route

# A binary-header response: code 0, JAVA, version 479, opaque 7, flag 1 (response), no remark,
# ext {"offset": "42"}, no body.
BINARY_RESPONSE = bytes.fromhex(
    "00000027" "01000023"  # total 39, type 1 (ROCKETMQ) | header length 35
    "0000" "00" "01df" "00000007" "00000001"  # code, language, version, opaque, flag
    "00000000"  # remark length 0
    "0000000e" "0006" + b"offset".hex() + "00000002" + b"42".hex()
)


def test_binary_header_response_decodes() -> None:
    frame = read_frame(BytesReader(BINARY_RESPONSE))
    cmd = decode_command(frame)
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (0, "JAVA", 479, 7, 1)
    assert cmd.is_response and cmd.serialize_type == ROCKETMQ
    assert cmd.ext == {"offset": "42"} and cmd.remark is None and cmd.body == b""
    assert headers.read_offset(cmd, "max offset") == 42


def test_binary_encoding_matches_the_vector() -> None:
    cmd = Command(0, {"offset": "42"}, flag=1, language="JAVA", version=479)
    assert encode_command(cmd, 7, ROCKETMQ) == BINARY_RESPONSE


def test_json_request_layout() -> None:
    cmd = request(codes.GET_MAX_OFFSET, {"topic": "t", "queueId": 3, "committed": True})
    frame = encode_command(cmd, 5)
    total, word = struct.unpack(">ii", frame[:8])
    assert total == len(frame) - 4 and word >> 24 == JSON
    header = json.loads(frame[8:8 + (word & 0xFFFFFF)])
    assert header["code"] == 30 and header["opaque"] == 5 and header["version"] == VERSION == 479
    assert header["language"] == "PYTHON" and header["flag"] == 0
    assert header["extFields"] == {"topic": "t", "queueId": "3", "committed": "true"}  # all values strings


def test_json_response_with_body_roundtrips() -> None:
    header = json.dumps({"code": 0, "flag": 1, "opaque": 9, "version": 479, "language": "JAVA",
                         "extFields": {"a": "1"}, "remark": "ok", "serializeTypeCurrentRPC": "JSON"}).encode()
    body = b"\x00\x01body"
    frame = struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body
    cmd = decode_command(read_frame(BytesReader(frame)))
    assert (cmd.code, cmd.opaque, cmd.remark, cmd.body, cmd.ext) == (0, 9, "ok", body, {"a": "1"})


def test_properties_travel_json_escaped() -> None:
    props = encode_properties({"KEYS": "k1 k2", "TAGS": "tag"})
    assert props == "KEYS\x01k1 k2\x02TAGS\x01tag\x02"
    frame = encode_command(request(codes.SEND_MESSAGE_V2, {"i": props}), 1)
    assert b"\\u0001" in frame and b"\\u0002" in frame and b"\x01" not in frame[8:]
    assert decode_command(frame[4:]).ext["i"] == props


def test_pop_codes_refuse_the_binary_header() -> None:
    pop = headers.pop_request(group="g", topic="t", max_messages=32, invisible_ms=1000, poll_ms=100, born_ms=1)
    with pytest.raises(CodecError, match="16 bits"):
        encode_command(pop, 1, ROCKETMQ)
    assert decode_command(encode_command(pop, 1)[4:]).code == 200050


@pytest.mark.parametrize("bad", [
    bytes.fromhex("00000002") + b"\x00\x00",  # total shorter than the type word
    struct.pack(">ii", 8, 100) + b"\x00" * 4,  # header longer than the frame
    struct.pack(">ii", 8, (7 << 24) | 2) + b"{}",  # unknown serialize type
    struct.pack(">ii", 7, 3) + b"[1]",  # JSON header that is not an object
    struct.pack(">ii", 4 + 20, (1 << 24) | 20) + b"\x00" * 16 + b"\x7f\xff\xff\xff",  # remark overruns
])
def test_malformed_frames_raise_codec_errors(bad: bytes) -> None:
    with pytest.raises(CodecError):
        decode_command(read_frame(BytesReader(bad)))


def test_frame_size_is_checked_before_reading() -> None:
    with pytest.raises(FrameTooLargeError):
        read_frame(BytesReader(struct.pack(">i", 1 << 30)), max_bytes=1 << 20)


def test_codec_skips_requests_from_the_server() -> None:
    server_request = encode_command(Command(40, {"x": "1"}, flag=0, language="JAVA"), 1)  # our id 1 too
    response = encode_command(Command(0, {}, flag=1, language="JAVA"), 1)
    opaque, frame = RemotingCodec().read(BytesReader(server_request + response))
    assert opaque == 1 and decode_command(frame).is_response


def test_response_codes_map_to_typed_errors() -> None:
    assert isinstance(codes.error_for_code(17, "no topic"), UnknownTopicError)
    assert codes.error_for_code(2, "busy").retriable and isinstance(codes.error_for_code(2, ""), ServerBusyError)
    assert isinstance(codes.error_for_code(29, "bad"), BadRequestError)
    assert codes.error_for_code(16, "read only").retriable  # a read-only group: the route will change
    assert isinstance(codes.error_for_code(210, ""), NoDataError)
    with pytest.raises(UnknownTopicError):
        headers.read_offset(Command(17, remark="No topic route info"), "max offset")


def test_send_result_counts_unconfirmed_stores_as_sent() -> None:
    ok = headers.read_send(Command(10, {"queueId": "1", "queueOffset": "5", "msgId": "X"}, flag=1), "send")
    assert (ok.queue_id, ok.queue_offset, ok.confirmed) == (1, 5, False)


def test_pull_request_carries_its_subscription() -> None:
    cmd = headers.pull_request(group="g", topic="t", queue_id=2, offset=10, max_messages=32, now_ms=123)
    assert cmd.code == 11 and cmd.ext["sysFlag"] == "4" and cmd.ext["subscription"] == "*"
    assert cmd.ext["queueOffset"] == "10" and cmd.ext["subVersion"] == "123"
    result = headers.read_pull(Command(19, {"nextBeginOffset": "10", "minOffset": "0", "maxOffset": "10",
                                            "suggestWhichBrokerId": "0"}, flag=1), "pull")
    assert result.status == headers.NOT_FOUND and result.max_offset == 10 and result.body == b""


# --- stored messages ---------------------------------------------------------------------------------

# One V1 record laid out by hand: queue 1, offset 7, body "hi", topic "tp", properties TAGS=a.
RECORD = bytes.fromhex(
    "00000066"  # total size 102
    "daa320a7"  # magic V1
    + f"{zlib.crc32(b'hi') & 0x7FFFFFFF:08x}"
    + "00000001" "00000000"  # queue id, flag
    "0000000000000007" "0000000000000100"  # queue offset, physical offset
    "00000000" "0000018c00000000"  # sysFlag, born ms
    "7f000001" "00001234"  # born host 127.0.0.1:4660
    "0000018c00000001"  # store ms
    "7f000001" "00002a00"  # store host 127.0.0.1:10752
    "00000000" "0000000000000000"  # reconsume times, prepared tx offset
    "00000002" "6869"  # body
    "02" "7470"  # topic
    "0007" + b"TAGS\x01a\x02".hex()
)


def test_stored_record_decodes() -> None:
    assert len(RECORD) == 0x66
    (msg,) = decode_stored(RECORD, verify_crc=True)
    assert (msg.topic, msg.queue_id, msg.queue_offset, msg.body) == ("tp", 1, 7, b"hi")
    assert msg.properties == {"TAGS": "a"} and msg.tags == "a"
    assert msg.born_host == "127.0.0.1:4660" and msg.store_host == "127.0.0.1:10752"
    assert msg.born_ms == 0x18C00000000 and msg.store_ms == 0x18C00000001


def test_stored_records_roundtrip_and_crc_is_checked() -> None:
    msgs = [StoredMessage("topic", 2, 100 + i, bytes([i]) * i, {"UNIQ_KEY": f"id{i}"}, 1, 2) for i in range(3)]
    decoded = decode_stored(encode_stored(msgs) + RECORD, verify_crc=True)
    assert [m.queue_offset for m in decoded] == [100, 101, 102, 7]
    assert [m.msg_id for m in decoded[:3]] == ["id0", "id1", "id2"]
    tampered = bytearray(RECORD)
    tampered[88:90] = b"hj"  # the body
    with pytest.raises(ChecksumMismatchError):
        decode_stored(bytes(tampered), verify_crc=True)


@pytest.mark.parametrize("cut", [1, 8, 30, 60, 90, 101])
def test_truncated_records_raise(cut: int) -> None:
    with pytest.raises(CodecError):
        decode_stored(RECORD[:cut])


def test_lengths_inside_a_record_are_bounded() -> None:
    bad = bytearray(RECORD)
    bad[84:88] = struct.pack(">i", 1 << 30)  # body length
    with pytest.raises(CodecError, match="overruns"):
        decode_stored(bytes(bad))


@pytest.mark.parametrize(("flag", "packed"), [
    (0x1, zlib.compress(b"x" * 1000)),  # type 0: zlib (the Java default before types existed)
    (0x1 | 0x300, zlib.compress(b"x" * 1000)),
    (0x1 | 0x100, bytes(cramjam.lz4.compress(b"x" * 1000))),
    (0x1 | 0x200, bytes(cramjam.zstd.compress(b"x" * 1000))),
])
def test_compressed_bodies_inflate(flag: int, packed: bytes) -> None:
    (msg,) = decode_stored(encode_stored([StoredMessage("t", 0, 0, packed, {}, 0, 0, sys_flag=flag)]))
    assert msg.body == b"x" * 1000


def test_batch_body_layout() -> None:
    body = encode_batch_body([(b"ab", "K\x01v\x02"), (b"", "")])
    assert body[:20] == struct.pack(">iiiii", 20 + 2 + 2 + 4, 0, 0, 0, 2)
    assert decode_batch_body(body) == [(b"ab", {"K": "v"}, 0), (b"", {}, 0)]


def test_properties_parsing_skips_empty_entries() -> None:
    assert decode_properties("A\x011\x02\x02B\x01\x02\x01x\x02C\x01z") == {"A": "1", "C": "z"}


# --- routes ------------------------------------------------------------------------------------------

ROUTE = json.dumps({
    "queueDatas": [{"brokerName": "a", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6, "topicSysFlag": 0},
                   {"brokerName": "b", "readQueueNums": 1, "writeQueueNums": 1, "perm": 4, "topicSysFlag": 0}],
    "brokerDatas": [{"cluster": "c", "brokerName": "a", "brokerAddrs": {"0": "h:1", "1": "h:2"},
                     "enableActingMaster": True},
                    {"cluster": "c", "brokerName": "b", "brokerAddrs": {"0": "h:3"}, "enableActingMaster": True}],
}).encode()


def test_route_queues_for_readers_and_writers() -> None:
    route = parse_route("t", ROUTE)
    assert [q.key for q in route.read_queues()] == ["t:a:0", "t:a:1", "t:b:0"]
    assert [q.key for q in route.write_queues()] == ["t:a:0", "t:a:1"]  # b is read-only (acting master)
    assert route.read_address("b") == "h:3" and route.write_address("a") == "h:1"


def test_route_without_master_reads_from_the_lowest_slave() -> None:
    doc = json.loads(ROUTE)
    doc["brokerDatas"][0]["brokerAddrs"] = {"2": "h:9", "1": "h:2"}
    route = parse_route("t", json.dumps(doc).encode())
    assert route.read_address("a") == "h:2" and route.write_queues() == []


def test_route_with_unquoted_keys_is_refused() -> None:
    with pytest.raises(CodecError):
        parse_route("t", b'{"brokerDatas":[{"brokerAddrs":{0:"h:1"}}]}')


def test_queue_keys() -> None:
    q = MessageQueue("topic", "broker-a", 3)
    assert MessageQueue.parse_key(q.key) == q
    assert MessageQueue.parse_key("t:host:with:colons:1").broker_name == "host:with:colons"
    for bad in ("t:a", "t:a:-1", "t:a:01", ":a:1", "t::1"):
        with pytest.raises(ValueError, match="bad queue key"):
            MessageQueue.parse_key(bad)


# --- pop ---------------------------------------------------------------------------------------------


def test_receipts_are_built_from_the_offset_info() -> None:
    msgs = [StoredMessage("t", 1, 10, b"", {}, 0, 0), StoredMessage("t", 1, 11, b"", {}, 0, 0),
            StoredMessage("t", 3, 5, b"", {"POP_CK": "5 1000 60000 2 1 a 0 4"}, 0, 0)]
    got = receipts_for(msgs, broker_name="a", pop_time=1000, invisible_ms=60000, revive_qid=2,
                       start_offset_info="0 1 10;1 0 4", msg_offset_info="0 1 10,11;1 0 4")
    assert got == ["10 1000 60000 2 0 a 1 10", "10 1000 60000 2 0 a 1 11", "5 1000 60000 2 1 a 0 4"]
    receipt = Receipt.parse(got[2])
    assert receipt.real_topic("t", "g") == "%RETRY%g_t" and receipt.offset == 4 and not receipt.orderly


def test_receipt_parsing_and_topic_kinds() -> None:
    assert str(Receipt.parse("1 2 3 4 0 b 5 6")) == "1 2 3 4 0 b 5 6"
    with pytest.raises(CodecError):
        Receipt.parse("1 2 3")
    assert topic_kind("%RETRY%g+t") == "2" and topic_kind("%RETRY%g_t") == "1" and topic_kind("t") == "0"
    assert retry_topic("t", "g", "2") == "%RETRY%g+t"
    assert parse_queue_info("0 1 1,2,3") == {("0", 1): [1, 2, 3]}
    with pytest.raises(CodecError):
        parse_queue_info("0 1 1;0 1 2")


def test_batch_ack_body_is_a_java_bitset() -> None:
    entry = headers.BatchAckEntry("g", "t", "0", 100, 1, 2, 1000, 60000, (100, 102, 109))
    cmd = headers.batch_ack_request("broker-a", [entry])
    doc = json.loads(cmd.body)
    assert cmd.code == 200151 and doc["brokerName"] == "broker-a"
    assert base64.b64decode(doc["acks"][0]["b"]) == bytes([0b101, 0b10])  # bits 0, 2 and 9
    assert headers.decode_batch_ack_body(cmd.body) == ("broker-a", [entry])


def test_the_servers_faq_link_does_not_push_the_advice_off_the_first_line() -> None:
    # what a 5.3.3 name server answers for a topic it does not route (the link is FAQUrl.suffixHelp's)
    remark = ("No topic route info in name server for the topic: orders\n"
              "See https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.")
    error = codes.error_for_code(codes.TOPIC_NOT_EXIST, remark, context="route of orders")
    first = str(error).splitlines()[0]
    assert "orders" in first and "create the topic first" in first
    assert "FAQ" not in str(error)
