"""Frame codec: ``token | serialNo | blockCount | (blockLength | blockBytes)*``, big-endian int32s."""

from __future__ import annotations

import math
import random
import struct

import pytest

from tubespark.errors import CodecError, FrameTooLargeError, TruncatedFrameError
from tubespark.tubemq.errors import BadTokenError
from tubespark.tubemq.wire.constants import BEGIN_TOKEN, MAX_BLOCK_SIZE, MAX_BLOCKS_PER_FRAME
from tubespark.tubemq.wire.frame import BytesReader, encode_frame, read_frame


def split_blocks(frame: bytes) -> tuple[int, int, int, list[bytes]]:
    """Walk a frame by hand (independently of read_frame): token, serial, count, blocks."""
    token, serial, count = struct.unpack_from(">III", frame)
    pos, blocks = 12, []
    for _ in range(count):
        (length,) = struct.unpack_from(">I", frame, pos)
        blocks.append(frame[pos + 4:pos + 4 + length])
        pos += 4 + length
    assert pos == len(frame), "frame has trailing bytes"
    return token, serial, count, blocks


@pytest.mark.parametrize("size", [0, 1, 8191, 8192, 8193, 100_000])
def test_round_trip_and_block_layout(size: int) -> None:
    payload = random.Random(size).randbytes(size)
    frame = encode_frame(42, payload)

    token, serial, count, blocks = split_blocks(frame)
    assert token == BEGIN_TOKEN
    assert frame[:4] == b"\xff\x7f\xf4\xfe"  # big-endian on the wire
    assert serial == 42
    assert count == max(1, math.ceil(size / MAX_BLOCK_SIZE))
    assert all(len(b) <= MAX_BLOCK_SIZE for b in blocks)
    assert all(len(b) == MAX_BLOCK_SIZE for b in blocks[:-1])  # only the last block is short
    assert b"".join(blocks) == payload

    reader = BytesReader(frame)
    assert read_frame(reader) == (42, payload)
    assert reader.remaining == 0


def test_hand_built_frame_from_the_spec_decodes() -> None:
    # token FF7FF4FE, serial 7, two blocks: "abc" and "de" (block boundaries carry no meaning)
    frame = bytes.fromhex("FF7FF4FE 00000007 00000002 00000003 616263 00000002 6465")
    assert read_frame(BytesReader(frame)) == (7, b"abcde")


def test_serial_number_is_written_as_unsigned_big_endian() -> None:
    frame = encode_frame(0x01020304, b"x")
    assert frame[4:8] == b"\x01\x02\x03\x04"
    assert read_frame(BytesReader(encode_frame(0xFFFFFFFF, b"x")))[0] == 0xFFFFFFFF


def test_wrong_token_is_rejected() -> None:
    frame = bytearray(encode_frame(1, b"hello"))
    frame[0] = 0xFE
    with pytest.raises(BadTokenError):
        read_frame(BytesReader(bytes(frame)))


@pytest.mark.parametrize("count", [0, MAX_BLOCKS_PER_FRAME + 1, 0x7FFFFFFF, 0xFFFFFFFF])
def test_block_count_out_of_range_is_rejected(count: int) -> None:
    frame = struct.pack(">III", BEGIN_TOKEN, 1, count) + struct.pack(">I", 1) + b"x"
    with pytest.raises(FrameTooLargeError):
        read_frame(BytesReader(frame))


def test_maximum_block_count_is_accepted() -> None:
    frame = struct.pack(">III", BEGIN_TOKEN, 1, MAX_BLOCKS_PER_FRAME)
    frame += b"".join(struct.pack(">I", 1) + b"z" for _ in range(MAX_BLOCKS_PER_FRAME))
    assert read_frame(BytesReader(frame)) == (1, b"z" * MAX_BLOCKS_PER_FRAME)


class RecordingReader(BytesReader):
    """Remembers every size it was asked for, to prove nothing big is ever requested."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.requested: list[int] = []

    def read_exactly(self, n: int) -> bytes:
        self.requested.append(n)
        return super().read_exactly(n)


@pytest.mark.parametrize("length", [MAX_BLOCK_SIZE + 1, 2**31 - 1, 0xFFFFFFFF])
def test_oversized_block_length_is_rejected_before_reading_it(length: int) -> None:
    # the length is followed by nothing: a decoder that tried to read (or allocate) it first
    # would raise TruncatedFrameError or MemoryError instead
    frame = struct.pack(">IIII", BEGIN_TOKEN, 1, 1, length)
    reader = RecordingReader(frame)
    with pytest.raises(FrameTooLargeError):
        read_frame(reader)
    assert max(reader.requested) <= MAX_BLOCK_SIZE


def test_block_of_exactly_the_limit_is_accepted() -> None:
    frame = struct.pack(">IIII", BEGIN_TOKEN, 3, 1, MAX_BLOCK_SIZE) + b"\x01" * MAX_BLOCK_SIZE
    assert read_frame(BytesReader(frame)) == (3, b"\x01" * MAX_BLOCK_SIZE)


def test_payload_needing_too_many_blocks_is_not_encoded() -> None:
    with pytest.raises(FrameTooLargeError):
        encode_frame(1, bytes(MAX_BLOCKS_PER_FRAME * MAX_BLOCK_SIZE + 1))


def test_truncation_at_every_position_raises_truncated() -> None:
    frame = encode_frame(9, bytes(range(256)) * 40)  # 10240 bytes: two blocks
    for cut in range(len(frame)):
        with pytest.raises(TruncatedFrameError):
            read_frame(BytesReader(frame[:cut]))


def test_back_to_back_frames_decode_in_order() -> None:
    stream = encode_frame(1, b"first") + encode_frame(2, b"") + encode_frame(3, b"x" * 9000)
    reader = BytesReader(stream)
    assert read_frame(reader) == (1, b"first")
    assert read_frame(reader) == (2, b"")
    assert read_frame(reader) == (3, b"x" * 9000)
    assert reader.remaining == 0
    with pytest.raises(TruncatedFrameError):
        read_frame(reader)


def test_random_bytes_only_ever_raise_codec_errors() -> None:
    rng = random.Random(20240601)
    valid = encode_frame(5, rng.randbytes(9000))
    token = struct.pack(">I", BEGIN_TOKEN)
    outcomes = {"decoded": 0, "codec error": 0}
    for i in range(3000):
        kind = i % 3
        if kind == 0:  # pure noise
            data = rng.randbytes(rng.randrange(64))
        elif kind == 1:  # right token, noise after it (reaches the count / length checks)
            data = token + rng.randbytes(rng.randrange(64))
        else:  # a valid frame with a few bytes changed, or cut short
            buf = bytearray(valid)
            for _ in range(rng.randint(1, 4)):
                buf[rng.randrange(40)] = rng.randrange(256)  # hit the header and first block length
            data = bytes(buf[:rng.randrange(len(buf) + 1)])
        reader = BytesReader(data)
        try:
            while reader.remaining:
                read_frame(reader)
            outcomes["decoded"] += 1
        except CodecError:
            outcomes["codec error"] += 1
    assert outcomes["codec error"] > 0
