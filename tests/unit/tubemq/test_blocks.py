"""A fetch answer read where its frame's blocks arrived reads exactly as the same answer joined (issue 40, item 2).

The compiled twin leaves a frame of several blocks in the receive buffer (``take_frames`` with ``blocks_type``:
:class:`~tubespark.tubemq.wire.blocks.Blocks`), finds the response in its envelope there (``locate_blocks``) and
walks the messages there (``read_fetch_blocks``), a message that straddles two blocks where its pieces lie; each
body is copied once, into the read task's arena. Compared here with the joined answer: the header, every row and
the error, for blocks of every size down to one byte (every field and message then straddles an edge), the fuzz
corpus cut at random places, and whole frames read from a socket. And the lifetime rule: nothing read from the
blocks refers to them afterwards, since the next receive writes over them.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.doubles.fakebroker import FakeBroker, fast_settings
from tests.unit.core.test_fuzz_decoders import byte_inputs
from tests.unit.tubemq.test_fetch_twins import (
    ERRORS,
    NATIVE,
    SHAPES,
    TWINS_FUZZ,
    _header,
    _pure_read,
    _read,
    _rows,
    captured,
)
from tubespark.core.framed_io import BytesReader, SocketReader
from tubespark.errors import TubeSparkError
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.ranges import RangeReader
from tubespark.tubemq.errors import RpcError
from tubespark.tubemq.wire import fetch
from tubespark.tubemq.wire.blocks import Blocks
from tubespark.tubemq.wire.constants import Method
from tubespark.tubemq.wire.envelope import decode_response, decode_response_view, encode_exception, encode_response
from tubespark.tubemq.wire.frame import encode_frame, read_frames

pytestmark = pytest.mark.skipif(NATIVE is None, reason="only the compiled twin leaves a frame's blocks unjoined")

SIZES = [1, 2, 3, 7, 64, 1000, 8192]


def blocked(payload: bytes, cuts: list[int]) -> bytes:
    """``payload`` as a frame's blocks (each a big-endian int32 length, then its bytes), cut at ``cuts``."""
    edges = [0, *sorted({c for c in cuts if 0 < c < len(payload)}), len(payload)]
    return b"".join(struct.pack(">I", b - a) + payload[a:b] for a, b in itertools.pairwise(edges))


def every(size: int, payload: bytes) -> list[int]:
    return list(range(size, len(payload), size))


def _read_blocks(blocks: Blocks, arena: fetch.ValueArena, verify: bool = True) -> tuple:
    """What a read task's reader sees of an answer left in its blocks (as ``_read`` of a joined one)."""
    try:
        reply = fetch.parse_fetch_reply(blocks, verify=verify, arena=arena)
        columns = reply.columns(reply.currOffset, verify=verify, step=28)
    except TubeSparkError as exc:
        return "error", type(exc), str(exc)
    return "rows", _header(reply), _rows(columns)


@pytest.mark.parametrize("size", SIZES)
def test_every_shape_error_and_captured_fetch_reads_alike_from_blocks_of_any_size(size: int) -> None:
    arena = fetch.ValueArena(1 << 16)
    answers = [*SHAPES.values(), *(data for data, _ in ERRORS.values()), *captured()]
    for data in answers:
        joined = _read(data, fetch.ValueArena(1 << 16))[0]
        assert _read_blocks(Blocks(blocked(data, every(size, data)), 0, len(data)), arena) == joined
        assert joined == _pure_read(data)


@TWINS_FUZZ
@given(byte_inputs([SHAPES["several texts"], SHAPES["mixed prefix"], SHAPES["1 KiB"], SHAPES["unknown fields"],
                    *(d for d, _ in ERRORS.values())]),
       st.lists(st.integers(min_value=1, max_value=4096), max_size=12), st.booleans())
def test_fuzz_answers_cut_anywhere_read_alike(data: bytes, cuts: list[int], verify: bool) -> None:
    blocks = Blocks(blocked(data, cuts), 0, len(data))
    assert _read_blocks(blocks, fetch.ValueArena(4096), verify) == _pure_read(data, verify)


def test_a_response_envelope_in_blocks_gives_the_same_data_and_errors() -> None:
    """``decode_response_view`` finds a response's data in its blocks (a narrower Blocks over the same bytes), and
    an exception or garbage fails as the joined payload fails."""
    data = SHAPES["1 KiB"]
    envelope = encode_response(Method.GET_MESSAGE, data)
    for size in SIZES:
        method, found = decode_response_view(Blocks(blocked(envelope, every(size, envelope)), 0, len(envelope)))
        assert isinstance(found, Blocks) and method == Method.GET_MESSAGE
        assert found.join() == data
    for payload in (encode_exception("org.apache.SomeException", "went wrong"), b"\xff" * 40, envelope[:-5]):
        expected = _failure(lambda p=payload: decode_response(p))
        for size in (1, 7, 8192):
            cut = Blocks(blocked(payload, every(size, payload)), 0, len(payload))
            assert _failure(lambda b=cut: decode_response_view(b)) == expected


def _failure(call) -> tuple:
    try:
        return "ok", call()[0]
    except (TubeSparkError, RpcError) as exc:
        return "error", type(exc), str(exc)


def test_nothing_read_from_blocks_refers_to_them_afterwards() -> None:
    """The rows, texts and error text of an answer walked in its blocks stay as they were when the receive buffer
    is written over (texts pieced together from two blocks are copied), and no view of the buffer is left: it can
    be resized."""
    data = SHAPES["several texts"]
    buffer = bytearray(blocked(data, every(7, data)))  # every message and text straddles an edge
    blocks = Blocks(memoryview(buffer), 0, len(data))
    expected = _pure_read(data)
    reply = fetch.parse_fetch_reply(blocks, arena=fetch.ValueArena(1 << 16))
    columns = reply.columns(reply.currOffset, step=28)
    del blocks
    buffer[:] = os.urandom(len(buffer))
    buffer.extend(b"x")  # BufferError while any view of it is alive
    assert ("rows", _header(reply), _rows(columns)) == expected
    with pytest.raises(ValueError, match="not kept"):
        reply.messages  # noqa: B018


@pytest.mark.parametrize("size", [1, 3, 8192])
def test_frames_left_in_their_blocks_join_to_the_payloads_read_joined(size: int) -> None:
    payloads = [b"", b"x" * 10, SHAPES["1 KiB"], b"y" * 8192, b"z" * 8193, SHAPES["every length to 300"]]
    stream = b"".join(encode_frame(serial, payload) for serial, payload in enumerate(payloads))
    joined = read_frames(BytesReader(stream))
    kept = read_frames(BytesReader(stream), keep_blocks=True)
    assert [(s, p if isinstance(p, bytes) else p.join()) for s, p in kept] == joined
    assert [isinstance(p, Blocks) for _s, p in kept] == [len(p) > 8192 for p in payloads]
    assert [p for _s, p in joined] == payloads


@pytest.fixture
def big_broker() -> Iterator[FakeBroker]:
    with FakeBroker(batch_size=300) as fake:
        yield fake


def test_a_range_read_walks_its_answers_in_their_blocks_and_gets_every_row(big_broker, monkeypatch) -> None:
    """End to end over a socket: 1 KiB messages, 300 a fetch (answers of 40 blocks), read by a range reader with an
    arena, as a read task reads; every answer is walked in its blocks, and the rows are the messages, in order."""
    [ref] = big_broker.add_topic("topic_blocks")
    bodies = [os.urandom(1024) for _ in range(1000)]
    big_broker.append(ref, *bodies)
    walks = []
    walk = NATIVE.read_fetch_blocks

    def counted(*args):
        walks.append(args[2])
        return walk(*args)

    monkeypatch.setattr(NATIVE, "read_fetch_blocks", counted)
    client = BrokerClient("reader-blocks", fast_settings())
    try:
        rr = RangeReader(client, "app-blocks", retry_s=2.0, arena=fetch.ValueArena(1 << 20))
        got = [m.data for m in rr.read(ref, 0, 28 * len(bodies))]
    finally:
        client.close()
    assert got == bodies
    assert len(walks) >= 3 and all(length > 8192 for length in walks)


def test_a_socket_reader_keeps_frames_in_its_buffer_until_it_receives_again() -> None:
    """The frames of one receive are Blocks over the reader's buffer, valid until the next receive: read_frames
    through a SocketReader gives payloads that join to what was sent."""
    left, right = socket.socketpair()
    left.settimeout(5)
    right.settimeout(5)
    payloads = [SHAPES["1 KiB"], b"small", b"q" * 20000]
    sender = threading.Thread(target=lambda: right.sendall(b"".join(encode_frame(s, p) for s, p in
                                                                       enumerate(payloads))))
    sender.start()
    reader = SocketReader(left, threading.Event())
    got: list[bytes] = []
    while len(got) < len(payloads):
        got += [p if isinstance(p, bytes) else p.join() for _s, p in read_frames(reader, keep_blocks=True)]
    sender.join()
    left.close()
    right.close()
    assert got == payloads


def _blocks_of(raw: bytes) -> bytes | None:
    """The payload ``raw`` makes when it is a frame's blocks, joined; None when it is not made so."""
    pos, pieces = 0, []
    while pos < len(raw):
        if len(raw) - pos < 4:
            return None
        (n,) = struct.unpack_from(">I", raw, pos)
        if n > len(raw) - pos - 4:
            return None
        pieces.append(raw[pos + 4:pos + 4 + n])
        pos += 4 + n
    return b"".join(pieces)


@TWINS_FUZZ
@given(st.one_of(st.binary(max_size=600),
                 st.builds(blocked, byte_inputs([SHAPES["mixed prefix"], encode_response(10, SHAPES["plain"])]),
                           st.lists(st.integers(min_value=1, max_value=600), max_size=8))),
       st.integers(min_value=-2, max_value=700), st.integers(min_value=-2, max_value=700))
def test_raw_bytes_of_any_shape_read_as_joined_or_are_refused(raw: bytes, start: int, length: int) -> None:
    """Any bytes as ``raw``: when they are a frame's blocks, each compiled call on them answers what the same call
    answers on the joined bytes; when they are not (or the range is not in them), None. Never a crash."""
    joined = _blocks_of(raw)
    inside = joined is not None and 0 <= start <= len(joined) and (length < 0 or length <= len(joined) - start)
    part = joined[start:] if inside and length < 0 else joined[start:start + length] if inside else None
    assert NATIVE.join_blocks(raw, start, length) == part
    assert NATIVE.locate_blocks(raw) == (None if joined is None else NATIVE.locate_response(joined))
    into, expected_into = bytearray(2048), bytearray(2048)
    walked = NATIVE.read_fetch_blocks(raw, start, length, 28, True, into, 3)
    expected = None if part is None else NATIVE.read_fetch(part, 28, True, None, expected_into, 3)
    assert walked == expected  # (values: the two bytearrays, the same bytes written in each)
