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
    """Bytes that do not form a valid frame or message of a broker's protocol. The stream is unusable then."""


class BadTokenError(CodecError):
    """A frame did not start with the protocol's begin token: wrong kind of peer, or the stream is out of sync."""


class FrameTooLargeError(CodecError):
    """A frame announced more blocks or bytes than the protocol allows; nothing was allocated for it."""


class TruncatedFrameError(CodecError):
    """The stream ended in the middle of a frame (or the peer closed it while a call waited)."""


class ProtobufDecodeError(CodecError):
    """A frame's blocks did not hold the protobuf messages the envelope requires."""


class ChecksumMismatchError(CodecError):
    """A received message's CRC does not match its payload. Never skipped silently."""


class MessageFormatError(CodecError):
    """A message payload or attribute string that cannot be encoded or decoded."""


class MessageTooLargeError(MessageFormatError):
    """A message exceeds the topic's maximum size; it was not sent."""


# --- connection ------------------------------------------------------------------------------------


class BrokerConnectionError(TubeSparkError):
    """The TCP connection could not be opened, broke, or was closed while a call was pending."""

    retriable = True


class RpcTimeoutError(BrokerConnectionError):
    """No response arrived within the call's timeout."""


class TlsError(TubeSparkError):
    """A TLS connection failed for a reason that trying again will not fix, named in the message.

    The server's certificate is not trusted, has expired or names another host; the server refused the
    client's certificate; one side speaks TLS and the other plain text. These are configuration errors
    (client options or server certificates), so the flag is off and the layers above fail at once
    instead of retrying until their deadlines. Not a :class:`BrokerConnectionError` on purpose: code
    that treats those as "the server is unreachable for now" must not swallow it.
    """


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


class NoMasterAvailableError(BrokerConnectionError):
    """Every configured master address failed or was a standby.

    ``electing`` is true when at least one master answered as a standby: the group is between two
    active masters (the old one died and the election has not finished), so waiting can help; when
    every address refused the connection there is no master to wait for.
    """

    def __init__(self, message: str, *, electing: bool = False) -> None:
        super().__init__(message)
        self.electing = electing


class NotAMasterError(TubeSparkError):
    """Every master address answered, but none as a TubeMQ master: the address names another service.

    A broker's RPC port, a web port (HTTP) or any other server: the address is wrong, and no amount of
    waiting makes it a master, so the flag is off and callers fail at once with the message naming the
    address and what answered there. Not a :class:`BrokerConnectionError`: nothing is unreachable.
    """


# --- broker business errors ------------------------------------------------------------------------


class BrokerError(TubeSparkError):
    """A master or broker answered a call with a business error code.

    Each broker's package maps its own codes onto the subclasses below (TubeMQ:
    :func:`tubespark.tubemq.wire.errcodes.error_for_code`), so callers branch on the class and
    ``retriable``, never on a number.
    """

    code: int = 0

    def __init__(self, code: int, message: str, *, context: str = "", broker: str = "") -> None:
        self.code = code
        self.server_message = message
        self.context = context
        where = f" ({context})" if context else ""
        super().__init__(f"{broker + ' ' if broker else ''}error {code}{where}: {message}")


class NoDataError(BrokerError):
    """Nothing new to read right now."""

    retriable = True


class ServerBusyError(BrokerError):
    """The server asks the client to back off and try again (overload, moved, internal error)."""

    retriable = True


class PartitionOccupiedError(BrokerError):
    """Another consumer of the same group holds the partition."""

    retriable = True


class NotRegisteredError(BrokerError):
    """The server does not know this client or partition registration (any more): register again."""

    retriable = True


class UnknownTopicError(BrokerError):
    """The topic does not exist, is not deployed, or the partition is not part of it."""


class AuthError(BrokerError):
    """Authentication or authorisation refused."""


class GroupConflictError(BrokerError):
    """The group's members disagree on topics, filters or session."""


class BadRequestError(BrokerError):
    """The server rejected the request's parameters."""


# --- user-facing layers ----------------------------------------------------------------------------


class OptionError(TubeSparkError, ValueError):
    """A data source option is missing or has a bad value. Raised before any network call."""


class DataLossError(TubeSparkError):
    """Data the query planned to read is gone (retention, vanished partition) and failOnDataLoss is on."""


class AvailableNowIncompleteError(TubeSparkError):
    """A Trigger.AvailableNow run cannot read a partition below its target (occupied by a stale registration,
    its broker down) within the time it waits: finishing would skip that partition's data."""


class AdminApiError(TubeSparkError):
    """A master's or broker's HTTP admin API failed or refused a call (the answer says why)."""


class UnsupportedSparkError(TubeSparkError):
    """The PySpark in use lacks an API tubespark relies on (its version is outside tubespark's range)."""
