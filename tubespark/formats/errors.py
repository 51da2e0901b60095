"""Errors of the shared payload formats (InLong message bundles).

They extend :mod:`tubespark.errors`: a payload that does not decode is a :class:`~tubespark.errors.CodecError`
(never retriable: the same bytes fail the same way), so a caller catching ``TubeSparkError`` or ``CodecError``
also catches these.
"""

from __future__ import annotations

from tubespark.errors import CodecError, TubeSparkError


class PayloadFormatError(CodecError):
    """A message payload (an InLongMsg bundle, a MessageObjs list) is malformed: truncated, a length
    that does not fit, bad magic, trailing bytes, an attribute string that is not ``k=v&k=v``."""


class PayloadTooLargeError(PayloadFormatError):
    """A payload declares (or decompresses to) more bytes than the configured cap allows."""


class UnsupportedPayloadError(PayloadFormatError):
    """A well-framed payload uses a version, compression or encoding type this codec does not know."""


class PayloadEncodeError(TubeSparkError, ValueError):
    """Records that cannot be written in the requested format so that InLong's own parser reads them
    back unchanged (a ``&`` in an attribute key, a too-long attribute string, too many records...)."""
