"""TANK bundles: the unit a producer sends and a fetch returns (docs/tank/protocol.md#bundles).

Encoding (:func:`encode_bundle`) writes every form the protocol has: the message count in the flags
byte (1..15) or as a varint after it, plain or sparse sequence numbers (first/last in the header,
per-message deltas or the "previous + 1" flag in between), keys, timestamps with "reuse the last
timestamp", and the message set plain or as one Snappy raw block (``auto`` follows the TANK client's
rule, docs/tank/protocol.md#bundles).

Decoding (:func:`decode_chunk`) walks a fetch chunk (docs/tank/protocol.md#chunks) into columns, and
is where the reading rules live: sequence numbers are computed (docs/tank/protocol.md#sequence-numbers),
messages below the wanted number are dropped, decoding stops at the first message at or past the range's
end, and a chunk whose last bundle is cut short ends cleanly with :attr:`ChunkResult.need` saying how
large a fetch gets that bundle whole. A bundle that is complete but does not decode is a
:class:`BundleFormatError`; so is bit 7 of the flags, whose layout nothing defines.

Why columns: per-message Python work is what limits a Python reader, so the decoder appends straight to
the four lists an Arrow batch is built from, and skips whole bundles that lie below the wanted number
without looking at their messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tubespark.formats.common import Budget, snappy_compress, snappy_decompress
from tubespark.formats.errors import PayloadFormatError
from tubespark.tank.errors import BundleFormatError, TankProtocolError, TruncatedFieldError
from tubespark.tank.wire.primitives import U64, decode_varint, encode_varint

CODEC_MASK = 0x03
CODEC_NONE = 0
CODEC_SNAPPY = 1
FLAG_SPARSE = 0x40
FLAG_EXTRA = 0x80
COUNT_SHIFT = 2
COUNT_IN_FLAGS_MAX = 15

MSG_HAS_KEY = 0x1
MSG_REUSE_TS = 0x2
MSG_SEQ_NEXT = 0x4

MAX_BUNDLE_BYTES = 64 * 1024 * 1024
"""Largest bundle accepted from a peer (the broker caps a fetch size at 64 MiB)."""
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
"""Largest message set one Snappy bundle may expand to."""
SNAPPY_AUTO_MESSAGES = 512
SNAPPY_AUTO_BYTES = 1024
COMPRESSIONS = ("auto", "snappy", "none")


# --- encoding ---------------------------------------------------------------------------------------


def should_compress(values: Sequence[bytes], keys: Sequence[bytes | None] | None) -> bool:
    """The TANK client's rule: Snappy for more than 512 messages or more than 1024 bytes of keys and contents."""
    if len(values) > SNAPPY_AUTO_MESSAGES:
        return True
    total = 0
    for i, value in enumerate(values):
        total += len(value)
        key = keys[i] if keys is not None else None
        if key is not None:
            total += len(key)
        if total > SNAPPY_AUTO_BYTES:
            return True
    return False


def encode_bundle(values: Sequence[bytes], timestamps: Sequence[int], keys: Sequence[bytes | None] | None = None, *,
                  compression: str = "auto", seqs: Sequence[int] | None = None) -> bytes:
    """One bundle (without its length prefix) holding ``values`` with their timestamps (ms) and keys.

    ``seqs`` makes a sparse bundle carrying those sequence numbers (strictly increasing), as sent with
    ProduceWithSeqnum (0x5); without it the broker numbers the messages. ``compression``: ``auto``
    (the TANK client's rule, keeping the plain set when Snappy would not shrink it), ``snappy`` or ``none``.
    """
    count = len(values)
    if count == 0:
        raise TankProtocolError("a bundle holds at least one message")
    if len(timestamps) != count or (keys is not None and len(keys) != count) or (
            seqs is not None and len(seqs) != count):
        raise TankProtocolError("values, timestamps, keys and seqs must have one entry per message")
    if compression not in COMPRESSIONS:
        raise TankProtocolError(f"compression must be one of {COMPRESSIONS}, not {compression!r}")
    if seqs is not None:
        for i in range(1, count):
            if seqs[i] <= seqs[i - 1]:
                raise TankProtocolError(f"sparse bundle sequence numbers must increase: {seqs[i - 1]}, {seqs[i]}")
        if seqs[0] < 1 or seqs[-1] > 0xFFFFFFFFFFFFFFFE:
            raise TankProtocolError(f"sequence numbers {seqs[0]}..{seqs[-1]} outside 1..2**64-2")
    body = _message_set(values, timestamps, keys, seqs)
    codec = CODEC_NONE
    if compression == "snappy" or (compression == "auto" and should_compress(values, keys)):
        packed = snappy_compress(body)
        if compression == "snappy" or len(packed) < len(body):
            body, codec = packed, CODEC_SNAPPY
    head = bytearray()
    flags = codec | (FLAG_SPARSE if seqs is not None else 0)
    if count <= COUNT_IN_FLAGS_MAX:
        head.append(flags | (count << COUNT_SHIFT))
    else:
        head.append(flags)
        head += encode_varint(count)
    if seqs is not None:
        head += U64.pack(seqs[0])
        if count > 1:
            head += encode_varint(seqs[-1] - seqs[0] - 1)
    return bytes(head) + body


def _message_set(values: Sequence[bytes], timestamps: Sequence[int], keys: Sequence[bytes | None] | None,
                 seqs: Sequence[int] | None) -> bytes:
    out = bytearray()
    last_ts: int | None = None
    last = len(values) - 1
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        ts = timestamps[i]
        flags = 0
        delta = b""
        if key is not None:
            if len(key) > 0xFF:
                raise TankProtocolError(f"message {i}: a key holds at most 255 bytes, not {len(key)}")
            flags |= MSG_HAS_KEY
        if ts == last_ts:
            flags |= MSG_REUSE_TS
        elif not 0 <= ts <= 0xFFFFFFFFFFFFFFFF:
            raise TankProtocolError(f"message {i}: timestamp {ts} is not a u64")
        if seqs is not None and 0 < i < last:
            gap = seqs[i] - seqs[i - 1] - 1
            if gap == 0:
                flags |= MSG_SEQ_NEXT
            else:
                delta = encode_varint(gap)
        out.append(flags)
        out += delta
        if not flags & MSG_REUSE_TS:
            out += U64.pack(ts)
            last_ts = ts
        if key is not None:
            out.append(len(key))
            out += key
        out += encode_varint(len(value))
        out += value
    return bytes(out)


def frame_bundle(bundle: bytes) -> bytes:
    """``varint length + bundle``: how a bundle sits in a chunk (and in a produce request)."""
    return encode_varint(len(bundle)) + bundle


# --- decoding ---------------------------------------------------------------------------------------


@dataclass
class MessageColumns:
    """Decoded messages as columns (sequence number, timestamp in ms, key or None, content)."""

    seqs: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.seqs)

    def clear(self) -> None:
        self.seqs.clear()
        self.timestamps.clear()
        self.keys.clear()
        self.values.clear()


@dataclass(frozen=True)
class ChunkResult:
    """How far :func:`decode_chunk` got.

    ``next_seq``: the number to fetch from next (after the last message decoded or skipped whole; the
    chunk's base when nothing was); ``None`` only for an empty chunk with no base (sparse flag).
    ``reached_end``: a message at or past ``stop`` was seen, so the range is complete.
    ``need``: > 0 when the last bundle is cut short: the bytes from that bundle's start to its end, the
    least fetch size that brings it whole (0: not cut, or the cut left too little to tell).
    ``cut``: the chunk ended inside a bundle (or inside a bundle's length).
    """

    next_seq: int | None
    reached_end: bool = False
    cut: bool = False
    need: int = 0


def decode_chunk(chunk: bytes, base_seq: int | None, *, low: int, stop: int, out: MessageColumns,
                 max_decompressed: int = MAX_DECOMPRESSED_BYTES) -> ChunkResult:
    """Decode the bundles of one fetch chunk, appending messages with ``low <= seq < stop`` to ``out``.

    ``base_seq`` is the partition header's base (``None`` when it flagged the first bundle as sparse).
    Raises BundleFormatError for a complete bundle that does not decode.
    """
    n = len(chunk)
    pos = 0
    next_seq = base_seq
    budget = Budget(max_decompressed)
    while pos < n:
        start = pos
        try:
            length, pos = decode_varint(chunk, pos, n, "bundle length")
        except TruncatedFieldError:
            return ChunkResult(next_seq, cut=True)
        if length == 0 or length > MAX_BUNDLE_BYTES:
            raise BundleFormatError(f"bundle at chunk byte {start} declares {length} bytes "
                                    f"(allowed 1..{MAX_BUNDLE_BYTES})")
        end = pos + length
        cut = end > n
        avail = n if cut else end
        try:
            header = _bundle_header(chunk, pos, avail, next_seq, start)
        except TruncatedFieldError as exc:
            if cut:
                return ChunkResult(next_seq, cut=True, need=end - start)
            raise BundleFormatError(f"bundle at chunk byte {start}: {exc}") from None
        flags, count, first, last, pos = header
        if last < low and not cut:  # wholly below the wanted number: skip it unread
            next_seq, pos = last + 1, end
            continue
        if first >= stop:
            return ChunkResult(first, reached_end=True)
        if flags & CODEC_MASK == CODEC_SNAPPY:
            if cut:
                return ChunkResult(first, cut=True, need=end - start)
            try:
                data = snappy_decompress(chunk[pos:end], budget, f"Snappy bundle at chunk byte {start}")
            except PayloadFormatError as exc:
                raise BundleFormatError(str(exc)) from None
            mpos, mend = 0, len(data)
        else:
            data, mpos, mend = chunk, pos, avail
        sparse = bool(flags & FLAG_SPARSE)
        done, seq_after, reached = _messages(data, mpos, mend, count, first, last, sparse, low, stop, out,
                                             complete=not cut, where=start)
        if reached:
            return ChunkResult(seq_after, reached_end=True)
        if done < count:  # only possible when cut: the rest of this bundle comes with the next fetch
            return ChunkResult(seq_after, cut=True, need=end - start)
        next_seq, pos = last + 1, end
        if cut:  # every message fit although the bundle's length says more follows: let a refetch settle it
            return ChunkResult(next_seq, cut=True, need=end - start)
    return ChunkResult(next_seq)


def _bundle_header(chunk: bytes, pos: int, end: int, base: int | None,
                   where: int) -> tuple[int, int, int, int, int]:
    """``(flags, count, first seq, last seq, position of the message set)`` of the bundle at ``pos``."""
    if pos >= end:
        raise TruncatedFieldError("bundle flags")
    flags = chunk[pos]
    pos += 1
    if flags & FLAG_EXTRA:
        raise BundleFormatError(f"bundle at chunk byte {where} sets flag bit 7, whose layout TANK does not define")
    if flags & CODEC_MASK > CODEC_SNAPPY:
        raise BundleFormatError(f"bundle at chunk byte {where} uses codec {flags & CODEC_MASK} (0 and 1 exist)")
    count = (flags >> COUNT_SHIFT) & 0xF
    if count == 0:
        count, pos = decode_varint(chunk, pos, end, "message count")
        if count == 0:
            raise BundleFormatError(f"bundle at chunk byte {where} holds no messages")
    if flags & FLAG_SPARSE:
        if pos + 8 > end:
            raise TruncatedFieldError("sparse first sequence number")
        first = int(U64.unpack_from(chunk, pos)[0])
        pos += 8
        if count > 1:
            delta, pos = decode_varint(chunk, pos, end, "sparse last sequence delta")
            last = first + delta + 1
        else:
            last = first
        if last - first + 1 < count:
            raise BundleFormatError(f"sparse bundle at chunk byte {where}: {count} messages cannot fit "
                                    f"sequence numbers {first}..{last}")
    else:
        if base is None:
            raise BundleFormatError(f"plain bundle at chunk byte {where} but the response gave no base sequence "
                                    f"number (it flagged the first bundle as sparse)")
        first, last = base, base + count - 1
    return flags, count, first, last, pos


def _messages(data: bytes, pos: int, end: int, count: int, first: int, last: int, sparse: bool, low: int, stop: int,
              out: MessageColumns, *, complete: bool, where: int) -> tuple[int, int, bool]:
    """Decode a bundle's messages. Returns ``(messages decoded, next seq, reached stop)``.

    A message running past ``end`` ends the walk when the bundle is cut (``complete`` false) and is a
    BundleFormatError when it is not.
    """
    seqs, stamps, keys, values = out.seqs, out.timestamps, out.keys, out.values
    u64 = U64.unpack_from
    ts: int | None = None
    prev = first - 1
    final = count - 1
    i = 0
    try:
        while i < count:
            if pos >= end:
                raise TruncatedFieldError("message flags")
            flags = data[pos]
            pos += 1
            if not sparse:
                seq = first + i
            elif flags & MSG_SEQ_NEXT:
                seq = prev + 1
            elif i == 0:
                seq = first
            elif i == final:
                seq = last
            else:
                gap, pos = decode_varint(data, pos, end, "sequence delta")
                seq = prev + 1 + gap
            if seq <= prev or seq > last:
                raise BundleFormatError(f"bundle at chunk byte {where}: message {i} gets sequence number {seq}, "
                                        f"outside ({prev}, {last}]")
            if flags & MSG_REUSE_TS:
                if ts is None:
                    raise BundleFormatError(f"bundle at chunk byte {where}: its first message reuses a timestamp "
                                            f"it has not got")
            else:
                if pos + 8 > end:
                    raise TruncatedFieldError("timestamp")
                ts = u64(data, pos)[0]
                pos += 8
            key = None
            if flags & MSG_HAS_KEY:
                if pos >= end:
                    raise TruncatedFieldError("key length")
                klen = data[pos]
                if pos + 1 + klen > end:
                    raise TruncatedFieldError("key")
                key = bytes(data[pos + 1:pos + 1 + klen])
                pos += 1 + klen
            if pos < end and data[pos] < 0x80:
                vlen = data[pos]
                pos += 1
            else:
                vlen, pos = decode_varint(data, pos, end, "content length")
            if pos + vlen > end:
                raise TruncatedFieldError("content")
            if seq >= stop:
                return i, seq, True
            if seq >= low:
                seqs.append(seq)
                stamps.append(ts)
                keys.append(key)
                values.append(bytes(data[pos:pos + vlen]))
            pos += vlen
            prev = seq
            i += 1
    except TruncatedFieldError as exc:
        if complete:
            raise BundleFormatError(f"bundle at chunk byte {where}: message {i} runs past the bundle ({exc})") from None
        return i, prev + 1, False
    if complete and pos != end:
        raise BundleFormatError(f"bundle at chunk byte {where}: {end - pos} bytes after its {count} messages")
    return count, last + 1, False


def decode_bundles(framed: bytes, base_seq: int | None = None) -> MessageColumns:
    """Every message of complete, length-prefixed bundles (tests, tools); a cut last bundle is an error."""
    out = MessageColumns()
    result = decode_chunk(framed, base_seq, low=0, stop=1 << 64, out=out)
    if result.cut:
        raise BundleFormatError("the last bundle is cut short")
    return out
