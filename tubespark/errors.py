"""One error hierarchy for every layer of tubespark.

Everything tubespark raises on purpose derives from :class:`TubeSparkError`, so a user can catch one
type. The subclasses say *where* a failure came from (bytes on the wire, the socket, the server's RPC
layer, a TubeMQ business code, user options) and whether trying again can help, because the layers
above (client retry loops, the Spark source) decide on that flag rather than on message text.
"""

from __future__ import annotations


class TubeSparkError(Exception):
    """Root of every error tubespark raises. ``retriable`` says whether the same call may succeed later."""

    retriable: bool = False


# --- wire codec ------------------------------------------------------------------------------------


class CodecError(TubeSparkError):
    """Bytes that do not form a valid TubeMQ frame or message. The stream they came from is unusable."""


class BadTokenError(CodecError):
    """A frame did not start with TubeMQ's begin token: the peer is not TubeMQ or the stream is out of sync."""


class FrameTooLargeError(CodecError):
    """A frame announced more blocks or bytes than the protocol allows; nothing was allocated for it."""


class TruncatedFrameError(CodecError):
    """The stream ended in the middle of a frame."""


class ProtobufDecodeError(CodecError):
    """A frame's blocks did not hold the protobuf messages the envelope requires."""


class ChecksumMismatchError(CodecError):
    """A received message's CRC does not match its payload. Never skipped silently."""


class MessageFormatError(CodecError):
    """A message payload or attribute string that cannot be encoded or decoded."""


class MessageTooLargeError(MessageFormatError):
    """A message exceeds the topic's maximum size; it was not sent."""


# --- connection ------------------------------------------------------------------------------------


class TubeConnectionError(TubeSparkError):
    """The TCP connection could not be opened, broke, or was closed while a call was pending."""

    retriable = True


class RpcTimeoutError(TubeConnectionError):
    """No response arrived within the call's timeout."""


class RpcError(TubeSparkError):
    """The server's RPC layer answered with an exception instead of a response.

    ``exception_name`` is the Java class name the server sent (match it by suffix: the package prefix
    depends on the protocol version), ``fatal`` is true when the server could not parse or route the call.
    """

    def __init__(self, exception_name: str, message: str, *, fatal: bool = False) -> None:
        self.exception_name = exception_name
        self.server_message = message
        self.fatal = fatal
        super().__init__(f"{exception_name}: {message}".strip())


class StandbyMasterError(RpcError):
    """The master that answered is a standby; the call should go to the next master address."""

    retriable = True


class NoMasterAvailableError(TubeConnectionError):
    """Every configured master address failed or was a standby."""


# --- TubeMQ business errors (success=false, errCode) -----------------------------------------------


class TubeMQError(TubeSparkError):
    """A TubeMQ business error: the server answered ``success=false`` with an ``errCode``.

    Use :func:`error_for_code` to build one; it picks the subclass that matches the code.
    """

    code: int = 0

    def __init__(self, code: int, message: str, *, context: str = "") -> None:
        self.code = code
        self.server_message = message
        self.context = context
        where = f" ({context})" if context else ""
        super().__init__(f"TubeMQ error {code}{where}: {message}")


class NoDataError(TubeMQError):
    """404: nothing new to read right now."""

    retriable = True


class ServerBusyError(TubeMQError):
    """Codes that ask the client to back off and retry (301, 419, 452, 500, 503, ...)."""

    retriable = True


class PartitionOccupiedError(TubeMQError):
    """410/412: another consumer of the same group holds the partition on the broker."""

    retriable = True


class NotRegisteredError(TubeMQError):
    """411 (or 401 on commit): the server does not know this client or partition registration."""

    retriable = True


class UnknownTopicError(TubeMQError):
    """The topic does not exist, is not deployed, or the partition is not part of it (403, 431, 422/423)."""


class AuthError(TubeMQError):
    """Authentication or authorisation refused (415, 450, 455)."""


class GroupConflictError(TubeMQError):
    """The group's members disagree on topics, filters or session (424-430)."""


class BadRequestError(TubeMQError):
    """400: the server rejected the request's parameters."""


_CODE_CLASSES: dict[int, type[TubeMQError]] = {
    301: ServerBusyError,
    400: BadRequestError,
    401: NotRegisteredError,
    403: UnknownTopicError,
    404: NoDataError,
    410: PartitionOccupiedError,
    411: NotRegisteredError,
    412: PartitionOccupiedError,
    415: AuthError,
    419: ServerBusyError,
    421: ServerBusyError,
    422: UnknownTopicError,
    423: UnknownTopicError,
    431: UnknownTopicError,
    450: AuthError,
    452: ServerBusyError,
    455: AuthError,
    500: ServerBusyError,
    503: ServerBusyError,
}
_CODE_CLASSES.update({code: GroupConflictError for code in range(424, 431)})


def error_for_code(code: int, message: str, *, context: str = "") -> TubeMQError:
    """Build the :class:`TubeMQError` subclass that matches a TubeMQ ``errCode``."""
    return _CODE_CLASSES.get(code, TubeMQError)(code, message, context=context)


# --- user-facing layers ----------------------------------------------------------------------------


class OptionError(TubeSparkError, ValueError):
    """A data source option is missing or has a bad value. Raised before any network call."""


class DataLossError(TubeSparkError):
    """Data the query planned to read is gone (retention, vanished partition) and failOnDataLoss is on."""


class ClusterError(TubeSparkError):
    """The local TubeMQ cluster could not be set up, started or reached."""
