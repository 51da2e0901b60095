"""The errors only TubeMQ raises: its frame and envelope, its master group, its consumer groups, its
admin API and its InLong bundle reads.

They subclass the broker-neutral kinds of :mod:`tubespark.errors` (and follow its rule for
``retriable``), so code that catches ``CodecError``, ``BrokerConnectionError`` or ``BrokerError`` catches
these too. This module sits below TubeMQ's layers (wire, net, client, spark may all import it) and
imports nothing but the shared errors. TubeMQ's business codes map onto these classes and the shared
ones in :mod:`tubespark.tubemq.wire.errcodes` (docs/tubemq/protocol.md#error-codes).
"""

from __future__ import annotations

from tubespark.errors import BrokerConnectionError, BrokerError, CodecError, ServerBusyError, TubeSparkError

# --- frame and envelope (docs/tubemq/protocol.md) ---------------------------------------------------


class BadTokenError(CodecError):
    """A frame did not start with the protocol's begin token: wrong kind of peer, or the stream is out of sync."""


class ProtobufDecodeError(CodecError):
    """A frame's blocks did not hold the protobuf messages the envelope requires."""


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


# --- the master group -------------------------------------------------------------------------------


class StandbyMasterError(RpcError):
    """The master that answered is a standby; the call should go to the next master address."""

    retriable = True


class ServerNotReadyError(RpcError):
    """The server's RPC layer is not running yet: a restarted broker (or master) accepts connections a moment
    before it serves calls, and answers ``ServerNotReadyException`` meanwhile (2.4.0, seen right after a
    graceful broker restart). Nothing was handled; the same call succeeds once it runs."""

    retriable = True


class ServiceStoppedError(ServerBusyError):
    """TubeMQ code 503: the broker's read or write service is not running. A broker answers so while it shuts
    down gracefully (SIGTERM: its port accepts and answers for the whole stop, 36 s seen in a rolling restart),
    before its store is started, and when its store failed. That is the broker being away, not overloaded, so a
    read takes it for an outage (a stream's task leaves the rest of its range to the next micro-batch at once)
    instead of spending its retries on it (docs/tubemq/protocol.md, error codes)."""


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


# --- consumer groups (business codes) --------------------------------------------------------------


class PartitionOccupiedError(BrokerError):
    """Another consumer of the same group holds the partition."""

    retriable = True


class NotRegisteredError(BrokerError):
    """The server does not know this client or partition registration (any more): register again."""

    retriable = True


class GroupConflictError(BrokerError):
    """The group's members disagree on topics, filters or session."""


# --- above the RPC protocol -------------------------------------------------------------------------


class AdminApiError(TubeSparkError):
    """A master's or broker's HTTP admin API failed or refused a call (the answer says why)."""


class ConfigurationUnknownError(TubeSparkError):
    """A batch read could not learn which partitions the master's configuration holds: neither the master's RPC
    (client-balance partition metadata) nor its web API (``masterWebUrl``) answered. It cannot tell a complete
    read from one that leaves out a broker that is down, so it reads nothing. Not retriable: it takes the
    ``masterWebUrl`` option (or ``onUnavailablePartitions=skip``), not waiting."""


class BundleParseError(CodecError):
    """A message read with ``payloadFormat=inlongmsg`` is not a valid InLong bundle (``ignoreParseErrors=false``)."""
