"""One entry point for the payloads DataProxy writes to TubeMQ (conventions.md §5).

The TubeMQ message attribute ``msgEnType`` says what the payload is: ``2`` an InLongMsg bundle
(:mod:`tubespark.formats.inlongmsg`), ``1`` a protobuf ``MessageObjs`` list
(:mod:`tubespark.formats.messageobjs`, compressed as the ``compressType`` attribute says). Without
``msgEnType`` the magic bytes decide: ``0x0F 0x0N`` at both ends is InLongMsg; anything else is a raw
message, returned as one record carrying the TubeMQ attributes (or an error with ``raw_fallback=False``).
"""

from __future__ import annotations

from collections.abc import Mapping

from tubespark.formats.common import DEFAULT_MAX_DECOMPRESSED, Record
from tubespark.formats.errors import PayloadFormatError, UnsupportedPayloadError
from tubespark.formats.inlongmsg import decode_inlongmsg, inlongmsg_version
from tubespark.formats.messageobjs import COMPRESS_NONE, decode_messageobjs

__all__ = ["ATTR_COMPRESS_TYPE", "ATTR_MSG_EN_TYPE", "MSG_EN_TYPE_INLONGMSG", "MSG_EN_TYPE_PB", "decode_bundle"]

ATTR_MSG_EN_TYPE = "msgEnType"
ATTR_COMPRESS_TYPE = "compressType"
MSG_EN_TYPE_PB = 1
MSG_EN_TYPE_INLONGMSG = 2


def _int_attribute(attributes: Mapping[str, str], key: str, default: int | None) -> int | None:
    text = attributes.get(key)
    if text is None:
        return default
    text = text.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise UnsupportedPayloadError(f"TubeMQ attribute {key}={attributes[key]!r} is not a small integer")
    return int(text)


def decode_bundle(
    payload: bytes | bytearray | memoryview,
    attributes: Mapping[str, str],
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    raw_fallback: bool = True,
) -> list[Record]:
    """The records of one TubeMQ message written by InLong DataProxy (or a raw message).

    ``attributes``: the TubeMQ message's attributes (``msgEnType``, ``compressType``...). Raises a
    :class:`~tubespark.formats.errors.PayloadFormatError` subclass for a malformed payload or an
    unknown ``msgEnType``/``compressType``.
    """
    en_type = _int_attribute(attributes, ATTR_MSG_EN_TYPE, None)
    if en_type == MSG_EN_TYPE_INLONGMSG:
        return decode_inlongmsg(payload, max_decompressed=max_decompressed)
    if en_type == MSG_EN_TYPE_PB:
        compress_type = _int_attribute(attributes, ATTR_COMPRESS_TYPE, COMPRESS_NONE) or COMPRESS_NONE
        return decode_messageobjs(payload, compress_type, max_decompressed=max_decompressed)
    if en_type is not None:
        raise UnsupportedPayloadError(f"unknown msgEnType {en_type}")
    if inlongmsg_version(payload) is not None:
        return decode_inlongmsg(payload, max_decompressed=max_decompressed)
    if not raw_fallback:
        raise PayloadFormatError("payload has no msgEnType attribute and no InLongMsg magic")
    return [Record(bytes(payload), dict(attributes))]
