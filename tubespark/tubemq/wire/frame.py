"""TubeMQ frames: ``token | serialNo | blockCount | (blockLength | blockBytes)*``, all big-endian int32.

Pure bytes in, bytes out: the decoder pulls from a :class:`~tubespark.core.framed_io.Reader`, so a
socket, a file of captured bytes or a test buffer all work. Every length read from the peer is checked
against a protocol bound before anything is allocated for it. :data:`FRAMING` hands this codec to
:class:`tubespark.core.framed.FramedConnection` (the frame's serialNo is the call's correlation id).

A reader that shows its buffer (:class:`~tubespark.core.framed_io.PeekReader`: the socket's, and
:class:`BytesReader`) gives its frames whole to :func:`take_frame` (or its compiled twin), which joins
the blocks in one pass; a fetch answer of 64 blocks read one ``read_exactly`` at a time cost more of the
executor's CPU than decoding its messages (issue 24). Whatever ``take_frame`` is not sure of (a wrong
token, a bound broken, the stream ending) goes the block-by-block way, which raises the typed error.
"""

from __future__ import annotations

import struct
from typing import Any, cast

from tubespark.core.framed_io import BytesReader, Reader
from tubespark.errors import FrameTooLargeError, TruncatedFrameError
from tubespark.tubemq.errors import BadTokenError
from tubespark.tubemq.wire import twin
from tubespark.tubemq.wire.blocks import Blocks
from tubespark.tubemq.wire.constants import BEGIN_TOKEN, MAX_BLOCK_SIZE, MAX_BLOCKS_PER_FRAME

_HEAD = struct.Struct(">III")
_LEN = struct.Struct(">I")
_ONE_BLOCK = struct.Struct(">IIII")  # the head and the length of a frame of one block

__all__ = ["FRAMING", "BytesReader", "Reader", "TubeMQFraming", "encode_frame", "read_frame", "read_frames",
           "take_frame", "take_frames"]


def encode_frame(serial_no: int, payload: bytes) -> bytes:
    """Frame ``payload`` (the concatenated envelope) in blocks of at most 8 KiB."""
    if 0 < len(payload) <= MAX_BLOCK_SIZE:  # most requests: one block, two calls (a fetch is sent per batch read)
        return _ONE_BLOCK.pack(BEGIN_TOKEN, serial_no & 0xFFFFFFFF, 1, len(payload)) + payload
    blocks = [payload[i:i + MAX_BLOCK_SIZE] for i in range(0, len(payload), MAX_BLOCK_SIZE)] or [b""]
    if len(blocks) > MAX_BLOCKS_PER_FRAME:
        raise FrameTooLargeError(f"payload of {len(payload)} bytes needs {len(blocks)} blocks "
                                 f"(max {MAX_BLOCKS_PER_FRAME})")
    parts = [_HEAD.pack(BEGIN_TOKEN, serial_no & 0xFFFFFFFF, len(blocks))]
    for block in blocks:
        parts.append(_LEN.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def take_frame(buffer: memoryview | bytes, max_block_size: int = MAX_BLOCK_SIZE) -> tuple[int, bytes, int] | int | None:
    """The frame at the start of ``buffer``: ``(serialNo, payload, bytes used)`` when it is all there, else how
    many bytes ``buffer`` must hold to get further (an ``int``); ``None`` for a frame :func:`read_frame`'s
    block-by-block reading rejects (a wrong token, a block count or length out of bounds), which raises the
    typed error. The pure-Python twin of the compiled ``take_frame``."""
    have = len(buffer)
    if have < _HEAD.size:
        return _HEAD.size
    token, serial_no, count = _HEAD.unpack_from(buffer, 0)
    if token != BEGIN_TOKEN or count == 0 or count > MAX_BLOCKS_PER_FRAME:
        return None
    pos = _HEAD.size
    spans = []
    for i in range(count):
        if pos + _LEN.size > have:
            return pos + _LEN.size
        length: int = _LEN.unpack_from(buffer, pos)[0]
        if length > max_block_size:
            return None
        spans.append((pos + _LEN.size, length))
        pos += _LEN.size + length
        if pos > have:  # ask for the next block's length too, when there is one
            return pos + _LEN.size if i + 1 < count else pos
    view = memoryview(buffer)
    payload = b"".join([view[start:start + length] for start, length in spans])
    return int(serial_no), payload, pos


def take_frames(buffer: memoryview | bytes,
                max_block_size: int = MAX_BLOCK_SIZE) -> tuple[list[tuple[int, bytes]], int, int | None]:
    """Every whole frame at the start of ``buffer``: ``(frames, used, rest)``, ``frames`` a list of
    ``(serialNo, payload)`` in order, ``used`` the bytes they took, and ``rest`` what :func:`take_frame` says
    of ``buffer[used:]`` when it is no whole frame: the bytes it must hold to get further, or ``None`` for a
    frame the block-by-block reading rejects. The pure-Python twin of the compiled ``take_frames``.

    Why: a producer's window of SendMessage answers arrives about 20 to a receive; taking them one
    :func:`take_frame` call (and a peek and a skip) at a time was a fifth of the reader thread's CPU per
    message (issue 24, docs/performance/hotpath.md)."""
    frames: list[tuple[int, bytes]] = []
    view = memoryview(buffer)
    used = 0
    while True:
        taken = take_frame(view[used:], max_block_size)
        if not isinstance(taken, tuple):
            return frames, used, taken
        serial_no, payload, size = taken
        frames.append((serial_no, payload))
        used += size


def read_frames(reader: Reader, *, max_block_size: int = MAX_BLOCK_SIZE,
                keep_blocks: bool = False) -> list[tuple[int, bytes | Blocks]]:
    """Read at least one frame: every whole frame ``reader`` holds once it holds one (:func:`take_frames`, or
    its compiled twin, over what it buffered), else one frame read block by block. Raises as :func:`read_frame`;
    frames read before a broken one are returned first, and the next call raises.

    ``keep_blocks``: with the compiled twin, the payload of a frame of several blocks is a :class:`Blocks` over
    the reader's buffer instead of the blocks joined (valid until the reader receives again: see
    :mod:`~tubespark.tubemq.wire.blocks`)."""
    frames = _take_buffered(reader, max_block_size, True, keep_blocks)
    return frames if frames is not None else [_read_blocks(reader, max_block_size)]


def read_frame(reader: Reader, *, max_block_size: int = MAX_BLOCK_SIZE) -> tuple[int, bytes]:
    """Read one frame; return ``(serialNo, payload)`` with the blocks concatenated.

    Raises BadTokenError, FrameTooLargeError or TruncatedFrameError. After any of them the stream is
    out of step and must be closed.
    """
    frames = _take_buffered(reader, max_block_size, False, False)
    return cast("tuple[int, bytes]", frames[0]) if frames is not None else _read_blocks(reader, max_block_size)


def _take_buffered(reader: Reader, max_block_size: int, many: bool,
                   keep_blocks: bool) -> list[tuple[int, Any]] | None:
    """The one peek-and-take loop of :func:`read_frame` and :func:`read_frames`: :func:`take_frames` (``many``)
    or :func:`take_frame` (or their compiled twins) on what ``reader`` holds, receiving more until a frame is
    whole, then skipping what was taken. None when the block-by-block way must decide (nothing is taken
    then): a reader that cannot peek, a peek that fails, a frame the take functions leave to it."""
    peek = getattr(reader, "peek", None)
    if peek is None:
        return None
    compiled = twin.native()
    need = _HEAD.size
    while True:
        try:
            view = peek(need)
        except (TruncatedFrameError, FrameTooLargeError):  # the block-by-block read says which, where
            return None
        try:
            if many:
                frames, used, rest = (
                    compiled.take_frames(view, BEGIN_TOKEN, max_block_size, MAX_BLOCKS_PER_FRAME,
                                         Blocks if keep_blocks else None)
                    if compiled is not None else take_frames(view, max_block_size))
            else:
                taken = (compiled.take_frame(view, BEGIN_TOKEN, max_block_size, MAX_BLOCKS_PER_FRAME)
                         if compiled is not None else take_frame(view, max_block_size))
                frames, used, rest = ([taken[:2]], taken[2], None) if isinstance(taken, tuple) else ([], 0, taken)
        finally:
            view.release()
        if frames:
            reader.skip(used)  # type: ignore[attr-defined]  # it peeks, so it skips (cast() costs a call)
            return frames
        if rest is None:
            return None
        need = rest


def _read_blocks(reader: Reader, max_block_size: int) -> tuple[int, bytes]:
    """One frame read block by block, each length checked before its block is read: the way that raises the
    typed error (and reads from a reader that cannot peek)."""
    token, serial_no, count = _HEAD.unpack(reader.read_exactly(_HEAD.size))
    if token != BEGIN_TOKEN:
        raise BadTokenError(f"frame starts with 0x{token:08X}, expected 0x{BEGIN_TOKEN:08X}")
    if count == 0 or count > MAX_BLOCKS_PER_FRAME:
        raise FrameTooLargeError(f"frame announces {count} blocks (allowed 1..{MAX_BLOCKS_PER_FRAME})")
    blocks = []
    for _ in range(count):
        (length,) = _LEN.unpack(reader.read_exactly(_LEN.size))
        if length > max_block_size:
            raise FrameTooLargeError(f"block of {length} bytes exceeds the {max_block_size}-byte limit")
        blocks.append(reader.read_exactly(length))
    return serial_no, b"".join(blocks)


class TubeMQFraming:
    """TubeMQ's :class:`~tubespark.core.framed.FrameCodec`: a request is the envelope bytes of one call."""

    def encode(self, correlation_id: int, request: bytes) -> bytes:
        return encode_frame(correlation_id, request)

    def read(self, reader: Reader) -> tuple[int, bytes]:
        return read_frame(reader)

    def read_many(self, reader: Reader) -> list[tuple[int, bytes | Blocks]]:
        """Every whole frame the reader holds, those of several blocks left in its buffer (:class:`Blocks`): the
        connection decodes each before it receives again."""
        return read_frames(reader, keep_blocks=True)


FRAMING = TubeMQFraming()
