"""TubeMQ frames: ``token | serialNo | blockCount | (blockLength | blockBytes)*``, all big-endian int32.

Pure bytes in, bytes out: the decoder pulls from a :class:`~tubespark.core.framed_io.Reader`, so a
socket, a file of captured bytes or a test buffer all work. Every length read from the peer is checked
against a protocol bound before anything is allocated for it. :data:`FRAMING` hands this codec to
:class:`tubespark.core.framed.FramedConnection` (the frame's serialNo is the call's correlation id).
"""

from __future__ import annotations

import struct

from tubespark.core.framed_io import BytesReader, Reader
from tubespark.errors import FrameTooLargeError
from tubespark.tubemq.errors import BadTokenError
from tubespark.tubemq.wire.constants import BEGIN_TOKEN, MAX_BLOCK_SIZE, MAX_BLOCKS_PER_FRAME

_HEAD = struct.Struct(">III")
_LEN = struct.Struct(">I")

__all__ = ["FRAMING", "BytesReader", "Reader", "TubeMQFraming", "encode_frame", "read_frame"]


def encode_frame(serial_no: int, payload: bytes) -> bytes:
    """Frame ``payload`` (the concatenated envelope) in blocks of at most 8 KiB."""
    blocks = [payload[i:i + MAX_BLOCK_SIZE] for i in range(0, len(payload), MAX_BLOCK_SIZE)] or [b""]
    if len(blocks) > MAX_BLOCKS_PER_FRAME:
        raise FrameTooLargeError(f"payload of {len(payload)} bytes needs {len(blocks)} blocks "
                                 f"(max {MAX_BLOCKS_PER_FRAME})")
    parts = [_HEAD.pack(BEGIN_TOKEN, serial_no & 0xFFFFFFFF, len(blocks))]
    for block in blocks:
        parts.append(_LEN.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def read_frame(reader: Reader, *, max_block_size: int = MAX_BLOCK_SIZE) -> tuple[int, bytes]:
    """Read one frame; return ``(serialNo, payload)`` with the blocks concatenated.

    Raises BadTokenError, FrameTooLargeError or TruncatedFrameError. After any of them the stream is
    out of step and must be closed.
    """
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


FRAMING = TubeMQFraming()
