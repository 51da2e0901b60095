"""A frame's payload left in the receive buffer: :class:`Blocks`.

A fetch answer is a frame of 64 blocks of 8 KiB, each behind its length. Joining them into one payload copied
every body once more than the read needs (docs/performance/breakdown.md, "The block join"): the compiled walk
(``read_fetch_blocks``) reads the messages where the blocks arrived and copies each body once, into the Arrow
values buffer. Only the compiled twin makes these (``take_frames`` with ``blocks_type``); the pure-Python
twin joins every frame, as before.

The lifetime rule: a :class:`Blocks` refers to the connection's receive buffer, which the next receive on that
connection writes again. A decoder that is handed one uses it before it returns (the connection decodes each
answer on the thread that received it, before it receives again) and keeps nothing of it: what it keeps, it
copies (:meth:`Blocks.join`).
"""

from __future__ import annotations

from tubespark.tubemq.wire import twin


class Blocks:
    """The bytes ``[start, start + length)`` of the payload that ``raw`` makes when its blocks are joined; ``raw``
    is the frame's blocks as they lie in the receive buffer (each a big-endian int32 length, then its bytes).
    Not a buffer on purpose: a decoder that expects bytes fails at once instead of reading the lengths as data."""

    __slots__ = ("length", "raw", "start")

    def __init__(self, raw: memoryview | bytes, start: int, length: int) -> None:
        self.raw = raw
        self.start = start
        self.length = length

    def narrowed(self, start: int, length: int) -> Blocks:
        """The bytes ``[start, start + length)`` of these (a response's data inside its envelope)."""
        return Blocks(self.raw, self.start + start, length)

    def join(self) -> bytes:
        """These bytes in one piece: a copy that outlives the receive buffer."""
        compiled = twin.native()
        assert compiled is not None, "only the compiled twin leaves a frame's blocks unjoined"
        joined: bytes | None = compiled.join_blocks(self.raw, self.start, self.length)
        if joined is None:
            raise ValueError("Blocks: raw is not a frame's blocks, or the range is not in it")
        return joined

    def __repr__(self) -> str:
        return f"Blocks({self.length} bytes from {self.start} of {len(self.raw)} raw)"
