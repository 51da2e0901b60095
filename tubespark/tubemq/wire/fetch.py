"""A fetch's answer (GetMessageResponseB2C) from bytes to columns: the read's hot path, in two twins.

The pure-Python twin parses the answer with protobuf and decodes its messages with
:func:`~tubespark.tubemq.wire.message.decode_columns` into :class:`MessageColumns` (lists). The compiled
twin (``_native.c``, selected at import by :mod:`~tubespark.tubemq.wire.twin`) walks the same bytes once
and gives :class:`PackedColumns`: flat buffers Arrow takes without copying (value offsets and bytes,
message ids, offsets) plus each distinct attribute text of the fetch once, which this module decodes
with the same Python functions as the other twin (a producer's messages share one text, so that is a
handful per fetch). Given a :class:`ValueArena`, the walk writes the values of a reader's consecutive answers
one after the other into one buffer, so that a batch of several fetches takes them with no copy.

One behaviour, two speeds: whenever the compiled code is not sure (garbage, an unusual encoding, a
checksum mismatch, a bad attribute prefix, attributes that are not UTF-8) it answers None and the
pure-Python twin decodes the same bytes, so every error is raised by one piece of code with one type and
one text. ``tests/unit/tubemq/test_fetch_twins.py`` runs both over the same inputs.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from tubespark.tubemq.wire import twin
from tubespark.tubemq.wire.blocks import Blocks
from tubespark.tubemq.wire.constants import ATTR_MSG_TIME, ATTR_MSG_TYPE, INDEX_RECORD_SIZE
from tubespark.tubemq.wire.envelope import parse_message
from tubespark.tubemq.wire.message import (
    NO_ATTRIBUTES,
    MessageColumns,
    ReceivedMessage,
    decode_attributes,
    decode_columns,
)
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb


@dataclass(frozen=True)
class PackedColumns:
    """A fetch's messages as the compiled twin leaves them: little-endian buffers, ``count`` rows.

    Row ``k``: message id ``int64`` at ``k`` of ``id_buffer``; offset ``int64`` at ``k`` of
    ``offset_buffer``; value bytes ``value_buffer[vo[k]:vo[k+1]]`` with ``vo`` the ``int32`` array
    ``value_offset_buffer`` (``vo[0]`` is 0 unless the values went into a :class:`ValueArena`: then
    ``value_buffer`` is the arena's buffer, holding other fetches' values too); attribute text
    ``text_index[k]`` (``int32``) into ``text_attributes``, ``text_msg_types`` and ``text_msg_times`` (entry
    0: no attribute prefix); ``uniform_text`` is the text index of every row when they all share one (a
    producer's messages do), else -1. The buffers may hold more rows than ``count`` (:meth:`head` only lowers
    the count). As with :class:`MessageColumns`, rows with the same text share one attributes mapping: read
    it, never change it.
    """

    count: int
    id_buffer: bytes
    offset_buffer: bytes
    value_offset_buffer: bytes
    value_buffer: bytes | bytearray
    text_index_buffer: bytes
    text_attributes: Sequence[Mapping[str, str]]
    text_msg_types: Sequence[str]
    text_msg_times: Sequence[str]
    uniform_text: int = -1

    def __len__(self) -> int:
        return self.count

    def head(self, count: int) -> PackedColumns:
        """The first ``count`` rows (the buffers are shared)."""
        return replace(self, count=max(0, min(count, self.count)))

    def value_bytes(self) -> int:
        """Bytes of the ``count`` rows' values (the buffer may hold more: :meth:`head`)."""
        bounds = memoryview(self.value_offset_buffer).cast("i")
        return bounds[self.count] - bounds[0] if self.count else 0

    def follows(self, before: PackedColumns) -> bool:
        """Whether these rows' values start in the same buffer exactly where ``before``'s end: one Arrow values
        buffer then serves both (consecutive fetches of one :class:`ValueArena`, none of their rows cut away)."""
        return (self.value_buffer is before.value_buffer and memoryview(self.value_offset_buffer).cast("i")[0]
                == memoryview(before.value_offset_buffer).cast("i")[before.count])

    @functools.cached_property
    def unpacked(self) -> MessageColumns:
        """The same rows as :class:`MessageColumns` (for the paths that need Python objects per row)."""
        n = self.count
        ids = memoryview(self.id_buffer).cast("q")[:n].tolist()
        offsets = memoryview(self.offset_buffer).cast("q")[:n].tolist()
        bounds = memoryview(self.value_offset_buffer).cast("i")[:n + 1].tolist()
        values = self.value_buffer
        data = [bytes(values[bounds[k]:bounds[k + 1]]) for k in range(n)]
        index = memoryview(self.text_index_buffer).cast("i")[:n].tolist()
        attrs, types, times = self.text_attributes, self.text_msg_types, self.text_msg_times
        return MessageColumns(ids, data, [attrs[i] for i in index], [types[i] for i in index],
                              [times[i] for i in index], offsets)

    # MessageColumns' interface, through the unpacked rows

    @property
    def message_ids(self) -> list[int]:
        return self.unpacked.message_ids

    @property
    def attributes(self) -> list[Mapping[str, str]]:
        return self.unpacked.attributes

    def without_ids(self, drop: set[int]) -> MessageColumns:
        return self.unpacked.without_ids(drop)

    def where(self, keep: list[bool]) -> MessageColumns | PackedColumns:
        return self if all(keep) else self.unpacked.where(keep)

    def messages(self) -> list[ReceivedMessage]:
        return self.unpacked.messages()


Columns = MessageColumns | PackedColumns
"""What a fetch decodes to: lists from the pure-Python twin, buffers from the compiled one."""


def _decode_texts(texts: list[bytes]) -> tuple[list[Mapping[str, str]], list[str], list[str]] | None:
    """Each distinct attribute text as decode_columns decodes it; None when one is not UTF-8 (the
    pure-Python twin then raises, naming the first message that carries it)."""
    attributes: list[Mapping[str, str]] = [NO_ATTRIBUTES]
    msg_types, msg_times = [""], [""]
    for text in texts:
        try:
            decoded = decode_attributes(text.decode("utf-8"))
        except UnicodeDecodeError:
            return None
        attributes.append(decoded)
        msg_types.append(decoded.get(ATTR_MSG_TYPE, ""))
        msg_times.append(decoded.get(ATTR_MSG_TIME, ""))
    return attributes, msg_types, msg_times


Packed = tuple[int, bytes, bytes, bytes, bytes, bytes, list[bytes], int]
"""What the compiled ``read_fetch`` gives after the header fields: count, the buffers, the texts, uniform."""


def packed_columns(packed: Packed) -> PackedColumns | None:
    """The compiled twin's buffers as :class:`PackedColumns`, their attribute texts decoded; None when a text is
    not UTF-8 (the pure-Python twin then raises, naming the first message that carries it)."""
    count, ids, offsets, value_offsets, values, index, texts, uniform = packed
    decoded = _decode_texts(texts)
    if decoded is None:
        return None
    return PackedColumns(count, ids, offsets, value_offsets, values, index, *decoded, uniform_text=uniform)


def decode_packed(data: bytes | memoryview, start: int, *, verify: bool = True, step: int = 0) -> PackedColumns | None:
    """The compiled twin on a GetMessageResponseB2C's bytes, row ``k`` at offset ``start + step*k``; None when it is
    absent or not sure."""
    compiled = twin.native()
    if compiled is None or start is None:  # (None would be read_fetch's "from currOffset"; Python refuses it)
        return None
    read = compiled.read_fetch(data, step, verify, start)
    return None if read is None else packed_columns(read[5:])


class FetchReply:
    """A GetMessageResponseB2C as the read needs it: the fields :func:`~tubespark.tubemq.client.common.check`
    and the reader look at, and the messages as columns (:meth:`columns`).

    Made by :func:`parse_fetch_reply` when the answer arrives (on the connection's reader thread, or the thread
    that waits for it), which has checked the whole structure by then: garbage fails the call there (and
    closes the connection) in both twins. The compiled twin has decoded the messages by then too, in the same
    walk (``packed``, for ``columns(currOffset, step=step, verify=verified)``); errors of the messages'
    contents (a checksum, an attribute prefix) are raised by :meth:`columns` in both twins.
    """

    def __init__(self, success: bool, err_code: int, err_msg: str, curr_offset: int, max_offset: int, *,
                 data: bytes | memoryview | None = None, walked: tuple[int, bool] | None = None,
                 packed: Packed | None = None, proto: bpb.GetMessageResponseB2C | None = None,
                 columns: PackedColumns | None = None) -> None:
        """``walked``: the ``(step, verify)`` the compiled walk of ``data`` was made with, ``packed`` what it gave
        (None: it was not sure), or ``columns``: that made into columns already (an answer walked in its blocks,
        whose texts are checked when it arrives, as the bytes are not kept for the pure-Python twin)."""
        self.success = success
        self.errCode = err_code
        self.errMsg = err_msg
        self.currOffset = curr_offset
        self.maxOffset = max_offset
        self._data = data
        # the columns() arguments (start, step, verify) the walk decoded for
        self._walked: tuple[int, int, bool] | None = None if walked is None else (curr_offset, *walked)
        self._packed = packed
        self._columns = columns
        self._proto = proto

    @property
    def messages(self) -> Sequence[bpb.TransferedMessage]:
        """The messages as protobuf objects (parsed on first use when the compiled twin checked the bytes).
        Not for an answer walked where it arrived (a read task's, :class:`ValueArena`): its bytes are not kept."""
        if self._proto is None:
            if self._data is None:
                raise ValueError("this fetch answer was read where it arrived and not kept: ask its columns()")
            self._proto = parse_message(bpb.GetMessageResponseB2C, self._data)
        return self._proto.messages

    def columns(self, start: int, *, verify: bool = True, step: int = 0) -> Columns:
        """The messages as columns, row ``k`` at offset ``start + step*k``; errors are decode_columns'."""
        exact = type(start) is int and type(step) is int  # not a bool, whose offsets the walk did not make
        walked = self._walked
        if exact and walked is not None and start == walked[0] and step == walked[1]:
            if (self._packed is not None or self._columns is not None) and (walked[2] or not verify):
                # what the walk gave serves this call
                if self._columns is None and self._packed is not None:
                    self._columns = packed_columns(self._packed)
                if self._columns is not None:
                    return self._columns
                return decode_columns(self.messages, start, verify=verify, step=step)  # a text is not UTF-8
            if walked[2] == verify:  # the walk with these arguments was not sure: the pure-Python twin decides
                return decode_columns(self.messages, start, verify=verify, step=step)
        if self._data is not None:  # other offsets or another check than the walk's: walk again
            packed = decode_packed(self._data, start, verify=verify, step=step)
            if packed is not None:
                return packed
        return decode_columns(self.messages, start, verify=verify, step=step)  # (raises when it was not kept)


def parse_fetch_reply(data: bytes | memoryview | Blocks, *, verify: bool = True, step: int = INDEX_RECORD_SIZE,
                      arena: ValueArena | None = None) -> FetchReply:
    """GetMessageResponseB2C bytes -> :class:`FetchReply`; ProtobufDecodeError for garbage (parse_message's).

    The compiled twin checks the structure and decodes the messages in one walk (``verify``: their checksums
    too; ``step``: row ``k``'s offset is ``currOffset + step*k``, as the read asks, see ``Fetch.columns``); it
    used to walk them twice, once here and once in :meth:`FetchReply.columns`, 0.07 us per row
    (docs/performance/breakdown.md). Where it is not sure (garbage, a bad checksum or attribute prefix) the
    pure-Python twin parses the answer here, and raises here for garbage, in :meth:`FetchReply.columns` for the
    rest, as it always does. ``arena``: where the compiled walk writes the values (else into a buffer of their
    own).

    ``data`` left in the frame's blocks (:class:`~tubespark.tubemq.wire.blocks.Blocks`, valid only during this
    call): with an ``arena``, the walk reads the messages where they arrived and the reply keeps nothing of the
    answer (the read's one copy of each body is the walk's); else, or where the walk is not sure, the answer is
    joined first and kept, as any other."""
    compiled = twin.native()
    if isinstance(data, Blocks):
        if arena is not None and compiled is not None:
            read = arena.walk_blocks(compiled, data, step, verify)
            columns = None if read is None else packed_columns(read[5:])  # its texts now: UTF-8 or not
            if columns is not None:
                success, err_code, err_msg, curr_offset, max_offset = read[:5]  # type: ignore[index]
                return FetchReply(success, err_code, err_msg, curr_offset, max_offset, walked=(step, verify),
                                  columns=columns)
        data = data.join()
    if compiled is not None:
        read = compiled.read_fetch(data, step, verify) if arena is None else arena.walk(compiled, data, step, verify)
        if read is not None:
            success, err_code, err_msg, curr_offset, max_offset = read[:5]
            return FetchReply(success, err_code, err_msg, curr_offset, max_offset, data=data, walked=(step, verify),
                              packed=read[5:])
    proto = parse_message(bpb.GetMessageResponseB2C, data)
    if compiled is None:
        return FetchReply(proto.success, proto.errCode, proto.errMsg, proto.currOffset, proto.maxOffset, proto=proto)
    return FetchReply(proto.success, proto.errCode, proto.errMsg, proto.currOffset, proto.maxOffset, data=data,
                      walked=(step, verify), proto=proto)


_SPARES_KEPT = 2


def _listed_refs() -> int:
    """What ``sys.getrefcount`` says of an object only a list holds, asked as :meth:`ValueArena._next_buffer` asks
    it (the count of the call's own argument is the interpreter's to decide: measured, not assumed)."""
    listed = [bytearray()]
    return sys.getrefcount(listed[0])


_UNHELD = _listed_refs()


class ValueArena:
    """Where one reader's answers put their values: one after the other in a large buffer, so that the batch of
    several consecutive fetches a read task hands Spark takes its values as one Arrow buffer with no copy.

    Why: each answer's walk copies its bodies out of the answer once (the copy a binary column needs: the bodies
    lie between their messages' protobuf fields), and a batch of several fetches with buffers of their own
    cost a second copy to join them, which did not pay at 1 KiB (docs/performance/breakdown.md). Here the walk
    writes them at ``tail``, which only grows: what lies below it, rows handed to Spark among them, is never
    written again; a walk that fails (None: the pure-Python twin decides) leaves ``tail`` where it was, so no
    row of it is anyone's. When an answer might not fit (its values are at most its length), the walk moves to
    another buffer: a spare that nothing holds any more, else a new one of ``chunk_bytes`` (or the answer's
    length); a full buffer is kept as a spare (two at most), or lives as long as the batches that hold it. One
    walk at a time: a reader's answers arrive one after the other on its one connection.
    """

    def __init__(self, chunk_bytes: int) -> None:
        self.chunk_bytes = chunk_bytes
        self._buffer = bytearray()
        self._tail = 0
        self._spares: list[bytearray] = []  # buffers written full, to be written again once nothing holds them

    def walk(self, compiled: ModuleType, data: bytes | memoryview, step: int, verify: bool) -> tuple[Any, ...] | None:
        """``compiled.read_fetch`` of ``data`` with its values written here; its answer, as read_fetch's."""
        room = memoryview(data).nbytes
        if len(self._buffer) - self._tail < room:
            self._next_buffer(compiled, room)
        return self._moved(compiled.read_fetch(data, step, verify, None, self._buffer, self._tail))

    def walk_blocks(self, compiled: ModuleType, data: Blocks, step: int, verify: bool) -> tuple[Any, ...] | None:
        """:meth:`walk` of an answer left in its frame's blocks (``compiled.read_fetch_blocks``)."""
        if len(self._buffer) - self._tail < data.length:
            self._next_buffer(compiled, data.length)
        return self._moved(compiled.read_fetch_blocks(data.raw, data.start, data.length, step, verify, self._buffer,
                                                      self._tail))

    def _moved(self, read: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        """A walk's answer, the tail moved past its values."""
        if read is not None:
            self._tail = memoryview(read[8]).cast("i")[read[5]]  # the end of its values: value_offsets[count]
        return read

    def _next_buffer(self, compiled: ModuleType, room: int) -> None:
        """Move on to a buffer with ``room``: a spare that nothing holds any more (no batch, no columns: only
        this arena refers to it), else a new one. Why reuse: a new buffer's pages are new to the process, and
        the kernel's first touch of each (a page fault per 4 KiB) cost about as much as the copy into it
        (a read task's one-fetch batch at 1 KiB took 0.21 us per row without reuse, 0.17 with it)."""
        if len(self._buffer):
            self._spares.append(self._buffer)
        self._buffer, self._tail = bytearray(), 0
        for i in range(len(self._spares)):
            if sys.getrefcount(self._spares[i]) == _UNHELD and len(self._spares[i]) >= room:  # only the list's
                self._buffer = self._spares.pop(i)
                break
        else:
            self._buffer = compiled.new_buffer(max(self.chunk_bytes, room))
        del self._spares[:-_SPARES_KEPT]  # those still held are let go: their holders free them
