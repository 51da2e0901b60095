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
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tubespark.errors import ChecksumMismatchError, MessageFormatError
from tubespark.tubemq.wire.constants import ATTR_MSG_TIME, ATTR_MSG_TYPE, MSG_FLAG_HAS_ATTRIBUTES

_ATTR_LEN = struct.Struct(">i")
_MSG_TIME = re.compile(r"[0-9]{12}")  # not \d: that also matches non-ASCII digits
MSG_TIME_FORMAT = "%Y%m%d%H%M"


def checksum(payload: bytes) -> int:
    """TubeMQ's message checksum: CRC-32 (IEEE, as zlib) of the whole payload, masked to 31 bits."""
    return zlib.crc32(payload) & 0x7FFFFFFF


def format_msg_time(when: datetime) -> str:
    """``yyyyMMddHHmm`` as TubeMQ stores it (minute precision; naive datetimes are taken as UTC)."""
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime(MSG_TIME_FORMAT)


def parse_msg_time(text: str) -> datetime | None:
    """The inverse of :func:`format_msg_time`; ``None`` for an absent or malformed value."""
    if not text or not _MSG_TIME.fullmatch(text):
        return None
    try:
        return datetime.strptime(text, MSG_TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


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
        text = encode_attributes(self.attributes, self.msg_type, self.msg_time)
        if not text:
            return bytes(self.data), 0
        attr = text.encode("utf-8")
        return _ATTR_LEN.pack(len(attr)) + attr + bytes(self.data), MSG_FLAG_HAS_ATTRIBUTES


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
        return {k: v for k, v in self.attributes.items() if k not in (ATTR_MSG_TYPE, ATTR_MSG_TIME)}


def decode_payload(message_id: int, payload: bytes, flag: int, crc: int, *, verify: bool = True,
                   offset: int = -1) -> ReceivedMessage:
    """Decode one TransferedMessage. A checksum mismatch raises instead of being skipped."""
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
