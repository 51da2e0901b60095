"""Payload formats shared across brokers: Apache InLong's message bundles.

* :mod:`~tubespark.formats.inlongmsg` - the binary InLongMsg bundle, versions 0..4 (read), 1..4 (write).
* :mod:`~tubespark.formats.messageobjs` - the protobuf ``MessageObjs`` list, optionally gzip/Snappy.
* :func:`decode_bundle` - pick the right one from the TubeMQ attributes (``msgEnType``) and magic bytes.

Only bytes in, records out: this package imports nothing above :mod:`tubespark.errors` / ``core``.
"""

from __future__ import annotations

from tubespark.formats.bundles import decode_bundle
from tubespark.formats.common import DEFAULT_MAX_DECOMPRESSED, Record, format_attributes, parse_attributes
from tubespark.formats.errors import (
    PayloadEncodeError,
    PayloadFormatError,
    PayloadTooLargeError,
    UnsupportedPayloadError,
)
from tubespark.formats.inlongmsg import (
    BinHeader,
    InLongMsgBundle,
    decode_inlongmsg,
    encode_inlongmsg,
    inlongmsg_version,
    parse_inlongmsg,
)
from tubespark.formats.messageobjs import decode_messageobjs, encode_messageobjs

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED",
    "BinHeader",
    "InLongMsgBundle",
    "PayloadEncodeError",
    "PayloadFormatError",
    "PayloadTooLargeError",
    "Record",
    "UnsupportedPayloadError",
    "decode_bundle",
    "decode_inlongmsg",
    "decode_messageobjs",
    "encode_inlongmsg",
    "encode_messageobjs",
    "format_attributes",
    "inlongmsg_version",
    "parse_attributes",
    "parse_inlongmsg",
]
