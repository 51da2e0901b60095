"""The two twins of the read path's frame and envelope steps give the same answers (issue 24).

``take_frame`` cuts a whole frame out of what a reader holds (compiled in ``_native.c``, pure Python in
``frame.py``), ``take_frames`` every whole frame it holds (a producer's window of answers, one call);
``locate_response`` finds a successful response's data without copying it (compiled),
whose twin is ``decode_response``. Compared over frames of every size cut at every place, every way a
frame breaks the protocol, and random bytes: equal results, and valid input takes the compiled fast lane.
Through a real socket, frames that arrive in pieces, larger than the reader's buffer, and frames that
break the protocol give the same frames and the same typed errors as reading block by block did.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tubespark.core.framed_io import SocketReader
from tubespark.core.native import PURE_PYTHON
from tubespark.errors import CodecError, FrameTooLargeError, TruncatedFrameError, TubeSparkError
from tubespark.tubemq.errors import BadTokenError
from tubespark.tubemq.wire import twin
from tubespark.tubemq.wire.constants import BEGIN_TOKEN, MAX_BLOCK_SIZE, MAX_BLOCKS_PER_FRAME
from tubespark.tubemq.wire.envelope import (
    decode_response,
    decode_response_view,
    encode_exception,
    encode_response,
)
from tubespark.tubemq.wire.frame import (
    BytesReader,
    encode_frame,
    read_frame,
    read_frames,
    take_frame,
    take_frames,
)

NATIVE = twin.loaded()


def _compiled_take(buffer: bytes, max_block_size: int = MAX_BLOCK_SIZE) -> object:
    """The compiled twin; where it is not loaded (the pure-Python run) the pure one, so the comparisons
    hold trivially there and every test still runs (CI counts a skip as a failure)."""
    if NATIVE is None:
        assert twin.HOT_PATH.startswith(PURE_PYTHON)
        return take_frame(buffer, max_block_size)
    return NATIVE.take_frame(buffer, BEGIN_TOKEN, max_block_size, MAX_BLOCKS_PER_FRAME)


def _compiled_take_all(buffer: bytes, max_block_size: int = MAX_BLOCK_SIZE) -> object:
    """``take_frames``' compiled twin, as :func:`_compiled_take`."""
    if NATIVE is None:
        assert twin.HOT_PATH.startswith(PURE_PYTHON)
        return take_frames(buffer, max_block_size)
    return NATIVE.take_frames(buffer, BEGIN_TOKEN, max_block_size, MAX_BLOCKS_PER_FRAME)


def _blocks(serial: int, *blocks: bytes, count: int | None = None, token: int = BEGIN_TOKEN) -> bytes:
    """A frame with exactly these blocks (any lengths), for shapes encode_frame never makes."""
    head = struct.pack(">III", token, serial, len(blocks) if count is None else count)
    return head + b"".join(struct.pack(">I", len(b)) + b for b in blocks)


FRAMES = {
    "empty": encode_frame(1, b""),
    "one byte": encode_frame(2, b"x"),
    "one block": encode_frame(3, bytes(range(256)) * 32),
    "block and a byte": encode_frame(4, b"y" * (MAX_BLOCK_SIZE + 1)),
    "half a MiB": encode_frame(0xFFFFFFFF, random.Random(5).randbytes(512 * 1024 + 17)),
    "short blocks in the middle": _blocks(6, b"ab", b"", b"cde" * 100, b"f"),
    "two frames": encode_frame(7, b"first" * 2000) + encode_frame(8, b"second"),
}

BROKEN = {
    "bad token": _blocks(1, b"abc", token=0x12345678),
    "no blocks": _blocks(1, count=0),
    "too many blocks": _blocks(1, b"a", count=MAX_BLOCKS_PER_FRAME + 1),
    "block too large": _blocks(1, b"a", b"b" * (MAX_BLOCK_SIZE + 1)),
}


@pytest.mark.parametrize("name", sorted(FRAMES))
def test_every_cut_of_a_frame_takes_alike(name: str) -> None:
    frame = FRAMES[name]
    cuts = sorted({*range(min(len(frame), 40)), *range(0, len(frame), 997), len(frame) - 1, len(frame)})
    for cut in cuts:
        pure, compiled = take_frame(frame[:cut]), _compiled_take(frame[:cut])
        assert compiled == pure, cut
        if isinstance(pure, int):
            assert cut < pure <= len(frame)  # always asks for more, never past the frame
    whole = _compiled_take(frame)
    assert isinstance(whole, tuple)  # the fast lane: a whole, valid frame is taken
    assert whole[:2] == read_frame(BytesReader(frame))


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_frame_is_left_to_the_block_by_block_read(name: str) -> None:
    frame = BROKEN[name]
    assert take_frame(frame) is None
    assert _compiled_take(frame) is None
    with pytest.raises(CodecError):
        read_frame(BytesReader(frame))


@given(st.binary(max_size=200), st.integers(min_value=0, max_value=64))
@settings(max_examples=300, deadline=None)
def test_random_bytes_take_alike(data: bytes, max_block: int) -> None:
    assert _compiled_take(data, max_block) == take_frame(data, max_block)


@pytest.mark.parametrize("name", sorted(FRAMES))
def test_both_twins_read_the_same_frames(name: str) -> None:
    def frames() -> list[tuple[int, bytes]]:
        reader = BytesReader(FRAMES[name])
        out = []
        while reader.remaining:
            out.append(read_frame(reader))
        return out

    with twin.pure_python():
        pure = frames()
    assert frames() == pure


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_both_twins_raise_the_same_error(name: str) -> None:
    def outcome() -> tuple[type, str]:
        with pytest.raises(CodecError) as caught:
            read_frame(BytesReader(BROKEN[name]))
        return type(caught.value), str(caught.value)

    with twin.pure_python():
        pure = outcome()
    assert outcome() == pure
    assert pure[0] in (BadTokenError, FrameTooLargeError)


def test_a_frame_cut_short_raises_as_before() -> None:
    frame = FRAMES["one block"]
    for cut in (0, 5, 13, 100, len(frame) - 1):
        with pytest.raises(TruncatedFrameError):
            read_frame(BytesReader(frame[:cut]))


# ------------------------------------------------------------------------------------ many frames


WINDOW = b"".join(FRAMES[name] for name in sorted(FRAMES)) + b"".join(encode_frame(n, b"a" * n) for n in range(40))


def test_every_cut_of_a_window_of_frames_takes_alike() -> None:
    cuts = sorted({*range(0, len(WINDOW), 331), *range(len(WINDOW) - 700, len(WINDOW) + 1)})
    expected = []
    reader = BytesReader(WINDOW)
    while reader.remaining:
        expected.append(read_frame(reader))
    for cut in cuts:
        pure, compiled = take_frames(WINDOW[:cut]), _compiled_take_all(WINDOW[:cut])
        assert compiled == pure, cut
        frames, used, rest = pure
        assert frames == expected[:len(frames)] and used <= cut
        assert rest == take_frame(WINDOW[used:cut])  # what follows is what take_frame says of it
    frames, used, rest = _compiled_take_all(WINDOW)  # type: ignore[misc]
    assert frames == expected and used == len(WINDOW) and rest == 12


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_frames_before_a_broken_one_are_taken_and_it_is_left(name: str) -> None:
    data = FRAMES["two frames"] + BROKEN[name]
    pure = take_frames(data)
    assert _compiled_take_all(data) == pure
    assert len(pure[0]) == 2 and pure[1] == len(FRAMES["two frames"]) and pure[2] is None


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=64))
@settings(max_examples=300, deadline=None)
def test_random_bytes_take_all_alike(data: bytes, max_block: int) -> None:
    assert _compiled_take_all(data, max_block) == take_frames(data, max_block)


@given(st.lists(st.binary(max_size=40), max_size=12), st.binary(max_size=30))
@settings(max_examples=200, deadline=None)
def test_frames_and_a_random_tail_take_all_alike(payloads: list[bytes], tail: bytes) -> None:
    data = b"".join(encode_frame(n, p) for n, p in enumerate(payloads)) + tail
    compiled = _compiled_take_all(data)
    assert compiled == take_frames(data)
    assert compiled[0][:len(payloads)] == list(enumerate(payloads))  # type: ignore[index]


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure-python"])
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_read_frames_gives_what_came_before_a_broken_frame_then_its_error(name: str, pure: bool) -> None:
    """The same frames, then the same typed error, as reading them one read_frame at a time."""
    reader = BytesReader(FRAMES["two frames"] + BROKEN[name])
    with twin.pure_python() if pure else _nothing():
        got = read_frames(reader)
        with pytest.raises(CodecError) as caught:
            read_frames(reader)
    one_by_one = BytesReader(FRAMES["two frames"] + BROKEN[name])
    assert got == [read_frame(one_by_one), read_frame(one_by_one)]
    with pytest.raises(CodecError) as expected:
        read_frame(one_by_one)
    assert (type(caught.value), str(caught.value)) == (type(expected.value), str(expected.value))


# ------------------------------------------------------------------------------------------ envelope


ENVELOPES = {
    "fetch answer": encode_response(17, b"\x08\x01\x10\xc8\x01" * 1000),
    "empty data": encode_response(13, b""),
    "exception": encode_exception("org.apache.inlong.tubemq.corebase.exception.StandbyException", "standby"),
    "garbage": b"\x05\x01\x02\x03",
    "nothing": b"",
}


@pytest.mark.parametrize("name", sorted(ENVELOPES))
def test_the_data_view_is_decode_responses_data(name: str) -> None:
    payload = ENVELOPES[name]

    def outcome() -> tuple[object, ...]:
        try:
            method, data = decode_response_view(payload)
        except TubeSparkError as exc:
            return "error", type(exc), str(exc)
        return method, bytes(data)

    try:
        expected: tuple[object, ...] = decode_response(payload)
    except TubeSparkError as exc:
        expected = ("error", type(exc), str(exc))
    with twin.pure_python():
        assert outcome() == expected
    assert outcome() == expected


def test_a_successful_response_is_located_not_copied() -> None:
    if NATIVE is None:
        assert twin.HOT_PATH.startswith(PURE_PYTHON)
        return
    payload = ENVELOPES["fetch answer"]
    located = NATIVE.locate_response(payload)
    assert located is not None
    _method, data = decode_response_view(payload)
    assert isinstance(data, memoryview) and data.obj is payload


# ------------------------------------------------------------------------------------ socket reader


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.settimeout(5.0)
    b.settimeout(5.0)
    yield a, b
    a.close()
    b.close()


def _trickle(sock: socket.socket, data: bytes, piece: int) -> threading.Thread:
    def send() -> None:
        for i in range(0, len(data), piece):
            sock.sendall(data[i:i + piece])

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure-python"])
@pytest.mark.parametrize("piece", [1, 7, 4096, 1 << 20])
def test_frames_arriving_in_pieces_read_whole(pair: tuple[socket.socket, socket.socket], piece: int,
                                              pure: bool) -> None:
    a, b = pair
    payloads = [b"", b"x", random.Random(1).randbytes(3 * 1024 * 1024 + 5), b"tail" * 3000]
    if piece == 1:
        payloads[2] = payloads[2][:50_000]  # a byte at a time: keep it short
    wire = b"".join(encode_frame(n, p) for n, p in enumerate(payloads))
    sender = _trickle(a, wire, piece)
    reader = SocketReader(b, threading.Event())
    with twin.pure_python() if pure else _nothing():
        got = [read_frame(reader) for _ in payloads]
    sender.join(10)
    assert got == list(enumerate(payloads))


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure-python"])
@pytest.mark.parametrize("piece", [1, 7, 100, 4096, 1 << 20])
def test_windows_arriving_in_pieces_read_whole(pair: tuple[socket.socket, socket.socket], piece: int,
                                               pure: bool) -> None:
    """read_frames: at least one frame per call, every frame once, in order, whatever the pieces."""
    a, b = pair
    payloads = [b"answer %d" % n * (n % 5) for n in range(300)] + [random.Random(3).randbytes(70_000)]
    sender = _trickle(a, b"".join(encode_frame(n, p) for n, p in enumerate(payloads)), piece)
    reader = SocketReader(b, threading.Event())
    got: list[tuple[int, bytes]] = []
    calls = 0
    with twin.pure_python() if pure else _nothing():
        while len(got) < len(payloads):
            frames = read_frames(reader)
            assert frames
            got.extend(frames)
            calls += 1
    sender.join(10)
    assert got == list(enumerate(payloads))
    if piece == 1 << 20:
        assert calls < len(payloads) // 10  # a receive's frames come out together


def test_a_read_above_the_limit_fails_before_buffering(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    reader = SocketReader(b, threading.Event(), max_read_bytes=1000)
    a.sendall(encode_frame(1, b"z" * 900))
    assert read_frame(reader) == (1, b"z" * 900)  # blocks of 900: within the limit, the frame too
    with pytest.raises(FrameTooLargeError):
        reader.read_exactly(1001)


def test_a_frame_larger_than_the_reads_limit_is_still_read_block_by_block(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    reader = SocketReader(b, threading.Event(), max_read_bytes=MAX_BLOCK_SIZE)
    payload = random.Random(2).randbytes(5 * MAX_BLOCK_SIZE)
    sender = _trickle(a, encode_frame(9, payload), 65536)
    assert read_frame(reader) == (9, payload)
    sender.join(10)


def test_the_peer_closing_mid_frame_is_a_truncated_frame(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    frame = encode_frame(1, b"q" * 20000)
    a.sendall(frame[:10000])
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(TruncatedFrameError):
        read_frame(SocketReader(b, threading.Event()))


class _nothing:  # noqa: N801 - a stand-in for contextlib.nullcontext with no typing fuss
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
