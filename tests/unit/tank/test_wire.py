"""TANK codec: byte vectors from the facts (docs/tank/protocol.md), every bundle form, and bad input.

The captured exchange of docs/tank/protocol.md#chunks is used verbatim: the fetch request frame, the
fetch response header, and the first bundle of its chunk. The second bundle of that chunk is a 120-byte
Snappy bundle whose raw block declares 2011 bytes; its exact bytes were not captured, so the test
builds a raw Snappy block of exactly that shape by hand (a literal and copy elements, independent of
the compressor), which makes the captured header's chunk length (148) true again.
"""

from __future__ import annotations

import random
import struct

import pytest

from tubespark.core.framed_io import BytesReader
from tubespark.errors import (
    BadRequestError,
    FrameTooLargeError,
    ServerBusyError,
    UnknownTopicError,
)
from tubespark.tank.errors import BundleFormatError, LeaderMovedError, TankProtocolError
from tubespark.tank.wire.bundle import (
    MessageColumns,
    decode_bundles,
    decode_chunk,
    encode_bundle,
    frame_bundle,
    should_compress,
)
from tubespark.tank.wire.codes import fetch_error, produce_error
from tubespark.tank.wire.frame import FRAMING, encode_frame
from tubespark.tank.wire.primitives import decode_varint, encode_varint
from tubespark.tank.wire.requests import (
    CreateTopicRequest,
    DiscoverPartitionsRequest,
    DiscoverTopicsRequest,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ProduceBundle,
    ProduceRequest,
    StatusRequest,
)

H = bytes.fromhex
TS = 1795327488263  # the captured bundle's timestamp (0771db01a2010000 little-endian), in ms

FETCH_REQUEST_FRAME = H("02 2a000000 0200 42000000 00 0000000000000000 00000000 01 06 6576656e7473 01 0000 "
                        "0500000000000000 40000000".replace(" ", ""))
FETCH_RESPONSE_HEADER = H("24000000 42000000 01 06 6576656e7473 01 0000 00 0400000000000000 1d00000000000000 "
                          "94000000".replace(" ", ""))
FIRST_BUNDLE = H("1a 0c 00 0771db01a2010000 04 666f7572 02 04 66697665 02 03 736978".replace(" ", ""))


def snappy_bundle_of_2000() -> bytes:
    """``78 05 db0f ...``: one 2000-byte message ('x' * 2000) as a 120-byte Snappy bundle, built by hand.

    Raw Snappy: the 2011-byte preamble, a 12-byte literal (message flags, timestamp, content length
    ``d00f``, the first 'x'), then copies at offset 1 that repeat the 'x': 30 x 64 + 32 + 31 (3-byte
    copies) and 4 x 4 (2-byte copies) = 1999 bytes.
    """
    literal = bytes([0]) + struct.pack("<Q", TS) + H("d00f") + b"x"
    block = H("db0f") + bytes([(len(literal) - 1) << 2]) + literal
    block += bytes([(63 << 2) | 2, 1, 0]) * 30 + bytes([(31 << 2) | 2, 1, 0, (30 << 2) | 2, 1, 0])
    block += bytes([1, 1]) * 4
    bundle = bytes([0x05]) + block
    assert len(bundle) == 120
    return frame_bundle(bundle)


CHUNK = FIRST_BUNDLE + snappy_bundle_of_2000()


# --- primitives ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "encoded"), [(0, "00"), (4, "04"), (127, "7f"), (128, "8001"), (2000, "d00f"),
                                                (2011, "db0f"), (0xFFFFFFFF, "ffffffff0f")])
def test_varints_are_leb128_of_32_bits(value, encoded):
    assert encode_varint(value).hex() == encoded
    assert decode_varint(H(encoded), 0, len(H(encoded))) == (value, len(H(encoded)))


@pytest.mark.parametrize("bad", ["8080808080", "ffffffff1f", "ffffffff7f"])
def test_varints_longer_than_5_bytes_or_above_32_bits_are_refused(bad):
    with pytest.raises(TankProtocolError):
        decode_varint(H(bad) + b"\x00", 0, len(H(bad)) + 1)


def test_a_varint_above_32_bits_is_not_encoded():
    with pytest.raises(TankProtocolError):
        encode_varint(1 << 32)


# --- the captured fetch exchange -------------------------------------------------------------------


def test_fetch_request_matches_the_captured_frame():
    request = FetchRequest([("events", [FetchPartition(0, 5, 64)])])
    assert encode_frame(request.msg_id, request.payload(0x42)) == FETCH_REQUEST_FRAME


def test_captured_fetch_response_decodes_with_bundle_boundary_and_larger_chunk():
    assert len(CHUNK) == 0x94  # the header's chunk length: 148 bytes for a fetch size of 64
    response = FetchResponse.decode(FETCH_RESPONSE_HEADER + CHUNK)
    assert response.request_id == 0x42
    (part,) = response.partitions
    assert (part.topic, part.partition, part.error, part.base_seq, part.high_water_mark) == ("events", 0, 0, 4, 29)
    assert len(part.chunk) == 148  # more than the fetch size of 64
    out = MessageColumns()
    result = decode_chunk(part.chunk, part.base_seq, low=5, stop=part.high_water_mark + 1, out=out)
    # the chunk starts at the bundle holding 4..6: 4 is below the requested 5 and dropped
    assert out.seqs == [5, 6, 7]
    assert out.values[:2] == [b"five", b"six"] and out.values[2] == b"x" * 2000
    assert out.timestamps == [TS, TS, TS]  # 5 and 6 reuse the timestamp 4 carried
    assert out.keys == [None, None, None]
    assert result.next_seq == 8 and not result.cut and not result.reached_end


def test_the_captured_plain_bundle_is_what_the_encoder_writes():
    encoded = encode_bundle([b"four", b"five", b"six"], [TS] * 3, compression="none")
    assert frame_bundle(encoded) == FIRST_BUNDLE


@pytest.mark.parametrize("cut", range(len(CHUNK) + 1))
def test_a_chunk_cut_anywhere_stops_cleanly_at_the_last_whole_message(cut):
    out = MessageColumns()
    result = decode_chunk(CHUNK[:cut], 4, low=0, stop=100, out=out)
    assert out.seqs == [4, 5, 6, 7][:len(out.seqs)]
    assert result.cut == (cut not in (0, 27, len(CHUNK)))  # bundle boundaries are not cuts
    if cut == len(CHUNK):
        assert out.seqs == [4, 5, 6, 7] and result.next_seq == 8
    elif cut < 27:  # inside the plain bundle: whole messages before the cut are kept
        assert result.next_seq == 4 + len(out.seqs)
        assert result.need in (0, 27)
    else:  # inside the Snappy bundle: nothing of it until it is whole
        assert out.seqs == [4, 5, 6]
        assert result.next_seq == 7
        assert result.need in (0, 121)


def test_decoding_stops_at_the_range_end():
    out = MessageColumns()
    result = decode_chunk(CHUNK, 4, low=4, stop=6, out=out)
    assert out.seqs == [4, 5] and result.reached_end and result.next_seq == 6


def test_whole_bundles_below_the_wanted_number_are_skipped_unread():
    broken_middle = FIRST_BUNDLE[:6] + b"\xff" * (len(FIRST_BUNDLE) - 6)  # garbage messages, intact header
    out = MessageColumns()
    decode_chunk(broken_middle + CHUNK[27:], 4, low=7, stop=100, out=out)
    assert out.seqs == [7]


# --- bundle forms ------------------------------------------------------------------------------------


def test_sparse_bundle_bytes_follow_the_facts():
    """Seqs 100, 104, 110 (as a sparse bundle sent with 0x5 was seen kept): flags 0x4c (sparse, count 3),
    firstSeq 100, last delta 110-100-1 = 9; the middle message carries delta 104-100-1 = 3."""
    ts = struct.pack("<Q", TS)
    # the middle message reuses the timestamp (flag 2) and has a delta (no flag 4): flags 0x02, delta 03
    expected = (H("4c") + struct.pack("<Q", 100) + H("09")
                + H("00") + ts + H("01") + b"a"
                + H("02") + H("03") + H("01") + b"b"
                + H("02") + H("01") + b"c")
    bundle = encode_bundle([b"a", b"b", b"c"], [TS] * 3, seqs=[100, 104, 110], compression="none")
    assert bundle == expected
    out = decode_bundles(frame_bundle(bundle))
    assert out.seqs == [100, 104, 110] and out.values == [b"a", b"b", b"c"]


def test_sparse_consecutive_numbers_use_the_previous_plus_one_flag():
    bundle = encode_bundle([b"a", b"b", b"c", b"d"], [1, 2, 3, 4], seqs=[10, 11, 12, 20], compression="none")
    out = decode_bundles(frame_bundle(bundle))
    assert out.seqs == [10, 11, 12, 20] and out.timestamps == [1, 2, 3, 4]
    # messages 2 and 3 carry flag 4 and no delta: the bundle is shorter than with deltas
    assert bundle[10 + 11] & 0x4  # the second message's flags: after the 10-byte header and the first message


@pytest.mark.parametrize("seqs", [[7], [7, 9], [5, 6]])
def test_sparse_bundles_of_one_and_two_messages_carry_no_message_deltas(seqs):
    values = [b"v%d" % i for i in range(len(seqs))]
    bundle = encode_bundle(values, [TS] * len(seqs), seqs=seqs, compression="none")
    out = decode_bundles(frame_bundle(bundle))
    assert out.seqs == seqs
    assert len(bundle) == 1 + 8 + (1 if len(seqs) > 1 else 0) + sum(1 + 1 + len(v) for v in values) + 8


def test_sparse_first_bundle_needs_no_base_and_plain_bundles_follow_it():
    chunk = (frame_bundle(encode_bundle([b"a", b"b"], [1, 1], seqs=[50, 60], compression="none"))
             + frame_bundle(encode_bundle([b"c", b"d"], [2, 2], compression="none")))
    out = MessageColumns()
    decode_chunk(chunk, None, low=0, stop=1000, out=out)
    assert out.seqs == [50, 60, 61, 62]


def test_a_plain_first_bundle_without_a_base_is_refused():
    with pytest.raises(BundleFormatError):
        decode_chunk(FIRST_BUNDLE, None, low=0, stop=100, out=MessageColumns())


@pytest.mark.parametrize("count", [1, 15, 16, 300])
def test_message_count_sits_in_the_flags_below_16_and_in_a_varint_above(count):
    bundle = encode_bundle([b"m"] * count, [TS] * count, compression="none")
    if count < 16:
        assert bundle[0] >> 2 == count
    else:
        assert bundle[0] >> 2 & 0xF == 0 and decode_varint(bundle, 1, len(bundle))[0] == count
    out = decode_bundles(frame_bundle(bundle), 1)
    assert out.seqs == list(range(1, count + 1))


def test_keys_and_timestamp_reuse_round_trip():
    keys = [b"k1", None, b"k" * 255, b""]
    stamps = [5, 5, 6, 6]
    bundle = encode_bundle([b"a", b"b", b"c", b"d"], stamps, keys, compression="none")
    out = decode_bundles(frame_bundle(bundle), 9)
    assert out.keys == keys and out.timestamps == stamps and out.seqs == [9, 10, 11, 12]


def test_a_key_longer_than_255_bytes_is_refused():
    with pytest.raises(TankProtocolError):
        encode_bundle([b"a"], [1], [b"k" * 256])


def test_auto_compression_follows_the_tank_clients_rule():
    assert not should_compress([b"x" * 100] * 10, None)
    assert should_compress([b"x" * 100] * 11, None)  # over 1024 bytes
    assert should_compress([b"x"] * 513, None)  # over 512 messages
    assert encode_bundle([b"x" * 2000], [TS])[0] & 0x3 == 1  # compressible and big: Snappy
    assert encode_bundle([b"x" * 10], [TS])[0] & 0x3 == 0
    incompressible = random.Random(14).randbytes(1500)
    assert encode_bundle([incompressible], [TS])[0] & 0x3 == 0  # auto keeps the plain set when Snappy grows it
    assert encode_bundle([incompressible], [TS], compression="snappy")[0] & 0x3 == 1


def test_snappy_bundle_round_trip_with_many_messages():
    values = [b"value-%05d" % i for i in range(1000)]
    bundle = encode_bundle(values, [TS + i // 10 for i in range(1000)], compression="snappy")
    assert bundle[0] == 0x01 and len(bundle) < sum(len(v) for v in values)
    out = decode_bundles(frame_bundle(bundle), 1)
    assert out.values == values and out.timestamps[-1] == TS + 99


@pytest.mark.parametrize(("bundle", "why"), [
    (H("80") + FIRST_BUNDLE[2:], "bit 7"),
    (H("0e") + FIRST_BUNDLE[2:], "codec 2"),
    (H("0f") + FIRST_BUNDLE[2:], "codec 3"),
    (H("00 00"), "no messages"),
    (H("04 02 04") + b"four", "first message reuses"),
    (H("08") + FIRST_BUNDLE[2:], "trailing bytes"),
    (H("10") + FIRST_BUNDLE[2:], "runs past"),
    (H("05") + b"\xff\xff\xff\xff\x0f" + b"\x00" * 10, "Snappy"),
])
def test_complete_bundles_that_do_not_decode_are_refused(bundle, why):
    with pytest.raises(BundleFormatError):
        decode_bundles(frame_bundle(bundle), 1)


def test_a_bundle_length_above_the_cap_is_refused():
    with pytest.raises(BundleFormatError):
        decode_chunk(encode_varint(0xFFFFFFF) + b"\x04", 1, low=0, stop=10, out=MessageColumns())


# --- fetch response forms --------------------------------------------------------------------------


def fetch_payload(parts: bytes, chunks: bytes = b"", topics: int = 1, header_topic: bytes = b"") -> bytes:
    header = struct.pack("<IB", 7, topics) + (header_topic or (H("06") + b"events" + H("01"))) + parts
    return struct.pack("<I", len(header)) + header + chunks


def test_boundary_fault_carries_the_first_available_number():
    part = H("0000 01") + struct.pack("<QQIQ", 0, 29, 0, 1)
    (p,) = FetchResponse.decode(fetch_payload(part)).partitions
    assert (p.error, p.first_available, p.high_water_mark) == (1, 1, 29)


def test_sparse_first_flag_has_no_base():
    chunk = frame_bundle(encode_bundle([b"a"], [1], seqs=[100], compression="none"))
    part = H("0000 fe") + struct.pack("<QI", 100, len(chunk))
    (p,) = FetchResponse.decode(fetch_payload(part, chunk)).partitions
    assert p.error == 0 and p.sparse_first and p.base_seq is None and p.chunk == chunk


@pytest.mark.parametrize(("code", "extra", "error"), [
    (0xFB, b"", ServerBusyError), (0xFD, b"", ServerBusyError), (0xFF, b"", UnknownTopicError),
    (0xFC, H("7f000001") + struct.pack("<H", 11011), LeaderMovedError),
])
def test_partition_error_codes(code, extra, error):
    (p,) = FetchResponse.decode(fetch_payload(H("0000") + bytes([code]) + extra)).partitions
    assert p.error == code
    exc = fetch_error(p.error, "events/0", leader=p.leader)
    assert isinstance(exc, error)
    assert exc.retriable == (error is not UnknownTopicError)
    if code == 0xFC:
        assert p.leader == "127.0.0.1:11011" and exc.address == "127.0.0.1:11011"


def test_unknown_topic_is_marked_with_ffff():
    response = FetchResponse.decode(fetch_payload(H("ffff")))
    assert response.unknown_topics == ("events",) and response.partitions == ()


@pytest.mark.parametrize("chunks", [b"ab", b"abcd"])
def test_chunk_lengths_must_add_up(chunks):
    part = H("0000 00") + struct.pack("<QQI", 1, 5, 3)  # announces a 3-byte chunk
    assert FetchResponse.decode(fetch_payload(part, b"abc")).partitions[0].chunk == b"abc"
    with pytest.raises(TankProtocolError):
        FetchResponse.decode(fetch_payload(part, chunks))


def test_a_header_longer_than_the_payload_is_refused():
    with pytest.raises(TankProtocolError):
        FetchResponse.decode(struct.pack("<I", 1000) + b"\x00" * 10)


# --- produce -----------------------------------------------------------------------------------------


def test_produce_request_layout():
    bundle = encode_bundle([b"hi"], [TS], compression="none")
    request = ProduceRequest([("events", [ProduceBundle(3, bundle)])], client_id="c")
    expected = (H("0200") + struct.pack("<I", 9) + H("01") + b"c" + H("01") + struct.pack("<I", 0) + H("01")
                + H("06") + b"events" + H("01") + struct.pack("<H", 3) + encode_varint(len(bundle)) + bundle)
    assert request.payload(9) == expected and request.msg_id == 0x1


def test_produce_with_seqnum_puts_the_base_before_the_bundle():
    bundle = encode_bundle([b"hi"], [TS], compression="none")
    request = ProduceRequest([("events", [ProduceBundle(0, bundle, base_seq=500)])], with_seqnum=True)
    assert request.msg_id == 0x5
    assert request.payload(1).endswith(encode_varint(len(bundle)) + struct.pack("<Q", 500) + bundle)


def test_a_partition_appears_once_per_request():
    with pytest.raises(TankProtocolError):
        ProduceRequest([("t", [ProduceBundle(0, b"\x04"), ProduceBundle(0, b"\x04")])]).payload(1)


def test_produce_response_codes_in_request_order_with_whole_topic_bytes():
    request = ProduceRequest([("a", [ProduceBundle(0, b"x"), ProduceBundle(1, b"x")]),
                              ("b", [ProduceBundle(0, b"x"), ProduceBundle(1, b"x")]),
                              ("c", [ProduceBundle(0, b"x"), ProduceBundle(1, b"x"), ProduceBundle(2, b"x")])])
    payload = (struct.pack("<I", 1) + H("00 01") + H("ff") + H("00 fc") + H("0a000002") + struct.pack("<H", 7)
               + H("02"))
    results = request.decode(payload)
    assert [(r.topic, r.partition, r.code) for r in results] == [
        ("a", 0, 0), ("a", 1, 1), ("b", 0, 0xFF), ("b", 1, 0xFF), ("c", 0, 0), ("c", 1, 0xFC), ("c", 2, 2)]
    assert results[5].leader == "10.0.0.2:7"


@pytest.mark.parametrize(("code", "error", "retriable"), [
    (0x01, UnknownTopicError, False), (0x02, ServerBusyError, True), (0x03, ServerBusyError, True),
    (0x04, ServerBusyError, True), (0x0A, BadRequestError, False), (0xFC, LeaderMovedError, True),
    (0xFD, ServerBusyError, True), (0xFE, BadRequestError, False), (0xFF, UnknownTopicError, False),
])
def test_produce_codes_map_to_typed_errors(code, error, retriable):
    exc = produce_error(code, "t/0")
    assert type(exc) is error and exc.retriable is retriable


# --- the newer requests ------------------------------------------------------------------------------


def test_discover_partitions_as_observed():
    request = DiscoverPartitionsRequest("events")
    assert request.payload(3) == struct.pack("<I", 3) + H("06") + b"events"
    payload = struct.pack("<I", 3) + H("06") + b"events" + struct.pack("<HQQ", 1, 1, 29)
    (info,) = request.decode(payload)
    assert (info.partition, info.first_available, info.high_water_mark, info.error) == (0, 1, 29, 0)
    assert request.decode(struct.pack("<I", 3) + H("06") + b"events" + struct.pack("<H", 0)) is None


def test_discover_partitions_reasons():
    request = DiscoverPartitionsRequest("t")
    m = 0xFFFFFFFFFFFFFFFF
    payload = (struct.pack("<I", 1) + H("01") + b"t" + struct.pack("<H", 3) + struct.pack("<QQ", m, m) + H("fd")
               + struct.pack("<QQ", m, m) + H("fc") + H("7f000001") + struct.pack("<H", 9)
               + struct.pack("<QQ", 5, 9))
    infos = request.decode(payload)
    assert [(i.partition, i.error, i.leader) for i in infos] == [(0, 0xFD, None), (1, 0xFC, "127.0.0.1:9"),
                                                                 (2, 0, None)]


def test_discover_partitions_refuses_more_entries_than_bytes():
    with pytest.raises(TankProtocolError):
        DiscoverPartitionsRequest("t").decode(struct.pack("<I", 1) + H("01") + b"t" + struct.pack("<H", 5000))


def test_create_topic_layout_and_codes():
    request = CreateTopicRequest("events", 4, "log.retention.secs=60\n")
    config = b"log.retention.secs=60\n"
    assert request.payload(2) == (struct.pack("<I", 2) + H("06") + b"events" + struct.pack("<H", 4)
                                  + encode_varint(len(config)) + config)
    assert request.decode(struct.pack("<I", 2) + H("06") + b"events" + H("01")) == 1


def test_discover_topics_and_status():
    topics = DiscoverTopicsRequest().decode(struct.pack("<IIB", 1, 2, 0) + H("01") + b"a" + H("01")
                                            + struct.pack("<H", 3) + H("01") + b"b" + H("00") + struct.pack("<H", 1))
    assert [(t.name, t.enabled, t.partitions) for t in topics] == [("a", True, 3), ("b", False, 1)]
    status = StatusRequest().decode(struct.pack("<IBBIIIIII", 1, 0, 0, 2, 4, 4, 0, 1700000000, 400))
    assert status.version == 400 and status.partitions == 4
    with pytest.raises(TankProtocolError):
        StatusRequest().decode(struct.pack("<IBBII", 1, 0, 1, 2, 4))
    with pytest.raises(TankProtocolError):
        DiscoverTopicsRequest().decode(struct.pack("<IIB", 1, 1000, 0))


# --- frames ------------------------------------------------------------------------------------------


def test_pings_between_responses_are_skipped():
    stream = (encode_frame(3, b"") + encode_frame(3, b"") + encode_frame(0x6, struct.pack("<I", 77) + b"rest"))
    assert FRAMING.read(BytesReader(stream)) == (77, struct.pack("<I", 77) + b"rest")


def test_fetch_responses_are_matched_by_the_id_after_the_header_length():
    payload = FETCH_RESPONSE_HEADER + CHUNK
    assert FRAMING.read(BytesReader(encode_frame(0x2, payload)))[0] == 0x42


@pytest.mark.parametrize(("stream", "error"), [
    (H("03 01000000 00"), TankProtocolError),  # a Ping with a payload
    (H("09 00000000"), TankProtocolError),  # ConsumePeer is broker to broker
    (H("02 ffffffff"), FrameTooLargeError),  # refused before reading 4 GiB
    (H("01 02000000 0000"), TankProtocolError),  # too short for a request id
])
def test_bad_frames_are_refused(stream, error):
    with pytest.raises(error):
        FRAMING.read(BytesReader(stream))
