"""Calls to the TubeMQ master with fail-over across the configured addresses.

Only the active master serves clients; a standby answers with StandbyException. Like the Java
client, a connect failure, a timeout, an undecodable reply, an IOException-type reply or a standby
reply moves on to the next address, one pass over the list per call. Other replies go back to the caller.
A TLS failure moves on too (another master may have a good certificate), but when no master answered
and one failed that way, the call raises :class:`TlsError`, which is not retried: waiting does not fix a
certificate or a port that speaks the other protocol.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Sequence
from typing import TypeVar

from google.protobuf.message import Message

from tubespark.core.outage import declare
from tubespark.errors import BrokerConnectionError, CodecError, RpcTimeoutError, TlsError, TruncatedFrameError
from tubespark.tubemq.errors import (
    BadTokenError,
    NoMasterAvailableError,
    NotAMasterError,
    RpcError,
    ServerNotReadyError,
    StandbyMasterError,
)
from tubespark.tubemq.net.connection import (
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_CONNECT_TIMEOUT_S,
    Connection,
    parse_address,
)
from tubespark.tubemq.wire.constants import ServiceType

M = TypeVar("M", bound=Message)

CHECK_MASTER = ("check the master address (the `master` option, `--master`): host:port of the master's RPC port, "
                "8715 by default, not its web port (8080) nor a broker's port (8123)")
"""What every "no master" error ends with: the ports a user mixes up, as TubeMQ's default configs set them."""

_HTTP = int.from_bytes(b"HTTP", "big")


def explain_failure(exc: BaseException) -> tuple[str, bool]:
    """Why one master address did not serve a call, in a user's words, and whether something other
    than a master answered there (a wrong address: waiting will not help).

    The exceptions come from every layer below (the socket, the frame codec, the server's RPC layer),
    and their own texts name protocol details ("frame starts with 0x48545450"); a user needs to know
    whether nothing listens there, something else does, or a master does not answer in time.
    """
    cause = exc.__cause__
    if isinstance(exc, StandbyMasterError):
        return "a standby master", False
    if isinstance(exc, ServerNotReadyError):
        return "a master that is starting: its RPC server is not running yet", False
    if isinstance(exc, RpcTimeoutError):
        return f"connected, but no answer in time: {exc}", False
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused: nothing listens there", False
    if isinstance(cause, socket.gaierror):
        return f"unknown host: {cause}", False
    if isinstance(cause, TimeoutError):
        return "no answer to connect in time: host down, or a firewall drops the packets", False
    if isinstance(exc, BadTokenError):
        if f"0x{_HTTP:08X}" in str(exc):  # the frame's begin token read "HTTP"
            return "an HTTP server answered, not TubeMQ's RPC protocol: a web port", True
        return "something answered, but not in TubeMQ's RPC protocol", True
    if isinstance(exc, RpcError) and exc.server_message.startswith("No service"):
        # the server's RPC layer has no master service: a broker (observed against a 2.4.0 broker)
        return "a TubeMQ broker answered, not a master", True
    # the framed connection reports a peer that closed as "connection to X lost: <TruncatedFrameError>"
    if isinstance(exc, TruncatedFrameError) or "peer closed the connection" in str(exc):
        return "it closed the connection without answering: not a TubeMQ master, or one that is starting", False
    return str(exc), False


def parse_master_list(masters: str | Sequence[str]) -> list[str]:
    """``host:port,host:port`` -> a de-duplicated, sorted address list (the Java client's order)."""
    items = masters.split(",") if isinstance(masters, str) else list(masters)
    addresses = sorted({a.strip() for a in items if a.strip()})
    if not addresses:
        raise ValueError("no master address given")
    for address in addresses:
        parse_address(address)
    return addresses


class MasterChannel:
    """A connection to whichever master is active right now."""

    def __init__(self, masters: str | Sequence[str], *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 request_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.addresses = parse_master_list(masters)
        declare("master", self.addresses, "TubeMQ master")  # core.outage: never answered is not down
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._ssl = ssl_context
        self._index = 0
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._moved_at: float | None = None  # when a call last moved past a master that did not serve it

    @property
    def active_address(self) -> str:
        return self.addresses[self._index]

    def moved_within(self, seconds: float) -> bool:
        """Whether a call of this channel moved on from a master that did not serve it (down, standby, starting)
        within the last ``seconds``: the master serving now may have been elected moments ago."""
        return self._moved_at is not None and time.monotonic() - self._moved_at < seconds

    def call(self, method: int, request: Message, response_cls: type[M]) -> M:
        errors: list[str] = []
        unreached: BrokerConnectionError | None = None  # the last unanswered connection: what core.outage reads
        standby = False
        wrong_peers = 0  # addresses where something other than a master answered
        tls: TlsError | None = None
        with self._lock:
            for _ in range(len(self.addresses)):
                address = self.addresses[self._index]
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = Connection.open(address, connect_timeout_s=self.connect_timeout_s,
                                                     io_timeout_s=self.request_timeout_s, ssl_context=self._ssl)
                    return self._conn.call(method, ServiceType.MASTER, request, response_cls,
                                           self.request_timeout_s)
                except (BrokerConnectionError, StandbyMasterError, ServerNotReadyError, CodecError) as exc:
                    # a starting master, like a standby, is one waiting can help (the next may serve now)
                    standby = standby or isinstance(exc, StandbyMasterError | ServerNotReadyError)
                    # CodecError: the reply was garbage and the connection is gone, a local failure like a
                    # closed channel, which the Java invoker also answers by trying the next master
                    why, wrong = explain_failure(exc)
                    wrong_peers += wrong
                    errors.append(f"{address} ({why})")
                    if isinstance(exc, BrokerConnectionError) and exc.address:
                        unreached = exc
                except TlsError as exc:
                    tls = tls or exc
                    errors.append(str(exc))  # the message starts with the address already
                except RpcError as exc:
                    why, wrong = explain_failure(exc)
                    if not wrong and not exc.exception_name.endswith("IOException"):
                        raise
                    wrong_peers += wrong
                    errors.append(f"{address} ({why})")
                self._drop_connection()
                self._index = (self._index + 1) % len(self.addresses)
                self._moved_at = time.monotonic()
        if tls is not None:
            raise TlsError("no TubeMQ master answered: " + "; ".join(errors)) from tls
        where = ", ".join(errors)
        if wrong_peers == len(self.addresses):
            raise NotAMasterError(f"no TubeMQ master at {where}: {CHECK_MASTER}")
        if standby:
            raise NoMasterAvailableError(f"no active TubeMQ master at {where}: the master group is electing its "
                                         f"next active master, or a master is starting; wait a few seconds and try "
                                         f"again", electing=True)
        raise NoMasterAvailableError(f"no TubeMQ master answers at {where}: {CHECK_MASTER}") from unreached

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop_connection()
