"""Message payloads: attribute prefix, flag, CRC, msgType/msgTime.

With flag bit 0 set the payload is ``attrLen (int32 BE) | attribute text (UTF-8) | body``. The
attribute text is ``k=v`` items joined by ``,``; TubeMQ reserves ``$msgType$`` and ``$msgTime$`` and
Java writes them first. Server-side filtering uses the *request's* ``msgType`` field, so encoding
returns it separately for the SendMessage request.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Protocol

from tubespark.errors import ChecksumMismatchError, MessageFormatError
from tubespark.tubemq.wire.constants import ATTR_MSG_TIME, ATTR_MSG_TYPE, MSG_FLAG_HAS_ATTRIBUTES

_ATTR_LEN = struct.Struct(">i")
_MSG_TIME = re.compile(r"[0-9]{12}")  # not \d: that also matches non-ASCII digits
MSG_TIME_FORMAT = "%Y%m%d%H%M"
RESERVED_ATTRIBUTES = frozenset((ATTR_MSG_TYPE, ATTR_MSG_TIME))
"""The attribute keys TubeMQ keeps for itself: the rest are the user's."""


def checksum(payload: bytes) -> int:
    """TubeMQ's message checksum: CRC-32 (IEEE, as zlib) of the whole payload, masked to 31 bits."""
    return zlib.crc32(payload) & 0x7FFFFFFF


def format_msg_time(when: datetime) -> str:
    """``yyyyMMddHHmm`` as TubeMQ stores it (minute precision; naive datetimes are taken as UTC)."""
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime(MSG_TIME_FORMAT)


_MSG_TIMES: dict[str, datetime | None] = {}
_MSG_TIMES_MAX = 4096  # distinct minutes remembered; a batch rarely spans more than a few


def _parse_msg_time(text: str) -> datetime | None:
    if not _MSG_TIME.fullmatch(text):
        return None
    try:
        return datetime.strptime(text, MSG_TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def parse_msg_time(text: str) -> datetime | None:
    """The inverse of :func:`format_msg_time`; ``None`` for an absent or malformed value.

    Cached by the 12-character string (messages of one batch share a handful of minutes, and
    ``strptime`` costs microseconds); datetimes are immutable, so sharing them is safe.
    """
    if not text:
        return None
    try:
        return _MSG_TIMES[text]
    except KeyError:
        pass
    when = _parse_msg_time(text)
    if len(_MSG_TIMES) >= _MSG_TIMES_MAX:
        _MSG_TIMES.clear()
    _MSG_TIMES[text] = when
    return when


def _check_token(kind: str, text: str) -> None:
    if not text or "," in text or "=" in text:
        raise MessageFormatError(f"attribute {kind} {text!r} must be non-empty and contain no ',' or '='")


def encode_attributes(attributes: dict[str, str], msg_type: str | None, msg_time: str | None) -> str:
    """The attribute text, reserved keys first (as the Java producer writes it)."""
    items = []
    if msg_type:
        _check_token("value", msg_type)
        items.append(f"{ATTR_MSG_TYPE}={msg_type}")
    if msg_time:
        if parse_msg_time(msg_time) is None:
            raise MessageFormatError(f"msgTime {msg_time!r} must be yyyyMMddHHmm")
        items.append(f"{ATTR_MSG_TIME}={msg_time}")
    for key, value in attributes.items():
        _check_token("key", key)
        if key in (ATTR_MSG_TYPE, ATTR_MSG_TIME):
            raise MessageFormatError(f"attribute key {key} is reserved; use msg_type / msg_time")
        _check_token("value", value)
        items.append(f"{key}={value}")
    return ",".join(items)


def decode_attributes(text: str) -> dict[str, str]:
    """Split ``k=v,k=v`` into a dict (reserved keys included). Items without '=' are kept with ''."""
    result: dict[str, str] = {}
    for item in text.split(","):
        if not item:
            continue
        key, _, value = item.partition("=")
        result[key] = value
    return result


@dataclass(frozen=True)
class OutgoingMessage:
    """What a producer sends: body bytes plus optional stream id (msgType), time and attributes."""

    data: bytes
    msg_type: str | None = None
    msg_time: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)

    def encode(self) -> tuple[bytes, int]:
        """Return ``(payload, flag)`` for SendMessageRequestP2B."""
        return encode_payload(self.data, self.attributes, self.msg_type, self.msg_time)


def encode_payload(data: bytes, attributes: dict[str, str], msg_type: str | None,
                   msg_time: str | None) -> tuple[bytes, int]:
    """``(payload, flag)`` of a message: the body, after the attribute prefix when there are attributes.

    What :meth:`OutgoingMessage.encode` does, without the object: the sink calls it per row of a batch."""
    text = encode_attributes(attributes, msg_type, msg_time) if attributes or msg_type or msg_time else ""
    if not text:
        return bytes(data), 0
    attr = text.encode("utf-8")
    return _ATTR_LEN.pack(len(attr)) + attr + bytes(data), MSG_FLAG_HAS_ATTRIBUTES


@dataclass(frozen=True)
class ReceivedMessage:
    """One decoded message from a GetMessage response. ``offset`` is set by the reader (see client)."""

    message_id: int
    data: bytes
    attributes: dict[str, str]
    msg_type: str
    msg_time: str
    offset: int = -1

    @property
    def user_attributes(self) -> dict[str, str]:
        return {k: v for k, v in self.attributes.items() if k not in RESERVED_ATTRIBUTES}


def decode_payload(message_id: int, payload: bytes, flag: int, crc: int, *, verify: bool = True,
                   offset: int = -1) -> ReceivedMessage:
    """Decode one TransferedMessage. A checksum mismatch raises instead of being skipped.

    :func:`decode_columns` does the same for a whole fetch, faster.
    """
    if verify and checksum(payload) != crc:
        raise ChecksumMismatchError(f"message {message_id}: checksum {crc} does not match payload "
                                    f"(computed {checksum(payload)})")
    attributes: dict[str, str] = {}
    body = payload
    if flag & MSG_FLAG_HAS_ATTRIBUTES:
        if len(payload) < _ATTR_LEN.size:
            raise MessageFormatError(f"message {message_id}: flag says attributes but payload has "
                                     f"{len(payload)} bytes")
        (attr_len,) = _ATTR_LEN.unpack_from(payload)
        if attr_len < 0 or attr_len > len(payload) - _ATTR_LEN.size:
            raise MessageFormatError(f"message {message_id}: attribute length {attr_len} outside payload "
                                     f"of {len(payload)} bytes")
        start = _ATTR_LEN.size
        try:
            attributes = decode_attributes(payload[start:start + attr_len].decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise MessageFormatError(f"message {message_id}: attributes are not UTF-8") from exc
        body = payload[start + attr_len:]
    return ReceivedMessage(
        message_id=message_id,
        data=body,
        attributes=attributes,
        msg_type=attributes.get(ATTR_MSG_TYPE, ""),
        msg_time=attributes.get(ATTR_MSG_TIME, ""),
        offset=offset,
    )


class Transfered(Protocol):
    """What :func:`decode_columns` reads of a message: ``broker_service_pb2.TransferedMessage``'s fields."""

    @property
    def messageId(self) -> int: ...  # noqa: N802 - protobuf's names

    @property
    def payLoadData(self) -> bytes: ...  # noqa: N802

    @property
    def flag(self) -> int: ...

    @property
    def checkSum(self) -> int: ...  # noqa: N802


_new = object.__new__
_ATTR_CACHE_MAX = 1024  # distinct attribute texts remembered within one batch
NO_ATTRIBUTES: Mapping[str, str] = MappingProxyType({})
"""The attributes of a message without an attribute prefix (one shared, read-only mapping)."""


@dataclass(frozen=True)
class MessageColumns:
    """A fetch's messages as columns, without an object per message: what the Spark read turns into
    Arrow arrays directly (building a :class:`ReceivedMessage` per message cost more than the rest of
    the read). Row ``k`` of every list is the k-th message.

    ``attributes[k]`` is shared by every message of the batch with the same attribute text: read it,
    never change it (:meth:`messages` gives each message its own copy).
    """

    message_ids: list[int]
    data: list[bytes]
    attributes: list[Mapping[str, str]]
    msg_types: list[str]
    msg_times: list[str]
    offsets: Sequence[int]

    def __len__(self) -> int:
        return len(self.message_ids)

    def head(self, count: int) -> MessageColumns:
        """The first ``count`` rows."""
        return MessageColumns(self.message_ids[:count], self.data[:count], self.attributes[:count],
                              self.msg_types[:count], self.msg_times[:count], self.offsets[:count])

    def without_ids(self, drop: set[int]) -> MessageColumns:
        """The rows whose message id is not in ``drop``, in order."""
        return self.where([message_id not in drop for message_id in self.message_ids])

    def where(self, keep: list[bool]) -> MessageColumns:
        """The rows whose ``keep`` flag is true, in order."""
        if all(keep):
            return self
        rows = [k for k, kept in enumerate(keep) if kept]
        return MessageColumns([self.message_ids[k] for k in rows], [self.data[k] for k in rows],
                              [self.attributes[k] for k in rows], [self.msg_types[k] for k in rows],
                              [self.msg_times[k] for k in rows], [self.offsets[k] for k in rows])

    def messages(self) -> list[ReceivedMessage]:
        """One :class:`ReceivedMessage` per row (each with its own ``attributes`` dict)."""
        out: list[ReceivedMessage] = []
        append = out.append
        for message_id, data, attributes, msg_type, msg_time, offset in zip(
                self.message_ids, self.data, self.attributes, self.msg_types, self.msg_times, self.offsets,
                strict=True):
            msg = _new(ReceivedMessage)  # the frozen dataclass filled without its __init__ (the hot path)
            msg.__dict__.update(message_id=message_id, data=data, attributes=dict(attributes), msg_type=msg_type,
                                msg_time=msg_time, offset=offset)
            append(msg)
        return out


def decode_columns(messages: Iterable[Transfered], start: int, *, verify: bool = True,
                   step: int = 0) -> MessageColumns:
    """Decode a fetch's messages into columns: for each message what :func:`decode_payload` gives, with
    ``offset`` ``start + step*k`` for the k-th (``step`` 0 gives every message ``offset`` -1, as
    decode_payload does). Errors are decode_payload's, raised at the first bad message.

    The fast path of the read: no call into the per-message helpers, the attribute text decoded once
    per distinct text in the batch (messages of one producer share it).
    """
    crc, attr_len_of = checksum, _ATTR_LEN.unpack_from  # the module's one CRC rule, looked up per batch
    cache: dict[bytes, tuple[Mapping[str, str], str, str]] = {}
    ids: list[int] = []
    data: list[bytes] = []
    attributes: list[Mapping[str, str]] = []
    msg_types: list[str] = []
    msg_times: list[str] = []
    for m in messages:
        payload = m.payLoadData
        if verify and crc(payload) != m.checkSum:
            raise ChecksumMismatchError(f"message {m.messageId}: checksum {m.checkSum} does not match payload "
                                        f"(computed {checksum(payload)})")
        ids.append(m.messageId)
        if m.flag & MSG_FLAG_HAS_ATTRIBUTES:
            size = len(payload)
            if size < 4:
                raise MessageFormatError(f"message {m.messageId}: flag says attributes but payload has "
                                         f"{size} bytes")
            (attr_len,) = attr_len_of(payload)
            if attr_len < 0 or attr_len > size - 4:
                raise MessageFormatError(f"message {m.messageId}: attribute length {attr_len} outside payload "
                                         f"of {size} bytes")
            text = payload[4:4 + attr_len]
            known = cache.get(text)
            if known is None:
                try:
                    decoded = decode_attributes(text.decode("utf-8"))
                except UnicodeDecodeError as exc:
                    raise MessageFormatError(f"message {m.messageId}: attributes are not UTF-8") from exc
                known = (decoded, decoded.get(ATTR_MSG_TYPE, ""), decoded.get(ATTR_MSG_TIME, ""))
                if len(cache) < _ATTR_CACHE_MAX:
                    cache[text] = known
            data.append(payload[4 + attr_len:])
            attributes.append(known[0])
            msg_types.append(known[1])
            msg_times.append(known[2])
        else:
            data.append(payload)
            attributes.append(NO_ATTRIBUTES)
            msg_types.append("")
            msg_times.append("")
    offsets: Sequence[int] = range(start, start + step * len(ids), step) if step else [-1] * len(ids)
    return MessageColumns(ids, data, attributes, msg_types, msg_times, offsets)
