"""One TCP connection to a TANK broker, with many requests in flight.

TANK's binding of :class:`tubespark.core.framed.FramedConnection`. What TANK adds to core's framed
connection:

* the handshake: a connection counts as up only once the broker's first Ping arrived
  (docs/tank/protocol.md#ping). :meth:`Connection.open` reads exactly that frame, byte-exact so
  nothing after it is swallowed, within the connect timeout, before core's reader thread starts;
* request ids are core's correlation ids (docs/tank/protocol.md#request-ids), and later Pings are
  skipped by the frame codec (:data:`tubespark.tank.wire.frame.FRAMING`);
* each call's decoder is the request's own ``decode`` (a produce response can only be read against
  the request that was sent).

Timeouts, the reader thread, pipelining and the pool are core's.
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from tubespark.core import framed
from tubespark.core.framed import DEFAULT_CALL_TIMEOUT_S, DEFAULT_CONNECT_TIMEOUT_S, FramedConnection, wait
from tubespark.core.framed_io import open_socket
from tubespark.core.outage import unanswered
from tubespark.errors import BrokerConnectionError, RpcTimeoutError
from tubespark.tank.errors import TankProtocolError
from tubespark.tank.wire.codes import MsgType
from tubespark.tank.wire.frame import FRAMING, HEADER_BYTES, TankRequest
from tubespark.tank.wire.primitives import U32

__all__ = ["DEFAULT_CALL_TIMEOUT_S", "DEFAULT_CONNECT_TIMEOUT_S", "Connection", "ConnectionPool", "wait"]

T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")


class DecodingRequest(Protocol[T_co]):
    """A request that also decodes its response (every request of :mod:`tubespark.tank.wire.requests`)."""

    @property
    def msg_id(self) -> int: ...  # read-only: the requests are frozen dataclasses

    def payload(self, request_id: int) -> bytes: ...

    def decode(self, payload: bytes) -> T_co: ...


def _recv_exactly(sock: socket.socket, n: int, deadline: float, address: str) -> bytes:
    """``n`` bytes, reading no further (what follows belongs to core's reader), before ``deadline``."""
    data = bytearray()
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise unanswered(RpcTimeoutError(f"{address} sent no Ping after connecting (a TANK broker greets every "
                                             f"connection with one)"), address)
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(data))
        except TimeoutError:
            continue
        except OSError as exc:
            raise unanswered(BrokerConnectionError(f"reading the greeting of {address} failed: {exc}"),
                             address) from exc
        if not chunk:
            raise unanswered(BrokerConnectionError(f"{address} closed the connection before greeting it with a "
                                                   f"Ping"), address)
        data += chunk
    return bytes(data)


def await_greeting(sock: socket.socket, address: str, timeout_s: float) -> None:
    """Wait for the broker's first frame, which must be an empty Ping (docs/tank/protocol.md#ping)."""
    header = _recv_exactly(sock, HEADER_BYTES, time.monotonic() + timeout_s, address)
    (length,) = U32.unpack_from(header, 1)
    if header[0] != MsgType.PING or length != 0:
        raise TankProtocolError(f"{address} greeted with frame 0x{header[0]:02x} of {length} bytes, not a Ping: "
                                f"is it a TANK broker?")


class Connection:
    """A multiplexed connection to one TANK broker. Thread-safe; create with :meth:`open`."""

    def __init__(self, address: str, sock: socket.socket, *, greeted: bool = False) -> None:
        """``greeted``: the broker's greeting Ping was read from ``sock``: the address is alive (core.outage)."""
        self._framed: FramedConnection[TankRequest] = FramedConnection(address, sock, FRAMING, greeted=greeted)
        self.address = address

    @classmethod
    def open(cls, address: str, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
             io_timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> Connection:
        """Connect and wait for the greeting Ping, both within ``connect_timeout_s``; later sends and
        receives are bounded by ``io_timeout_s``."""
        started = time.monotonic()
        sock = open_socket(address, connect_timeout_s=connect_timeout_s, io_timeout_s=io_timeout_s)
        try:  # a greeting that never comes is a connection that never answered (core.outage.unanswered)
            await_greeting(sock, address, max(0.05, connect_timeout_s - (time.monotonic() - started)))
            sock.settimeout(io_timeout_s)
        except BaseException:
            sock.close()
            raise
        return cls(address, sock, greeted=True)

    @property
    def closed(self) -> bool:
        return self._framed.closed

    def call_async(self, request: DecodingRequest[T], *, defer: bool = False) -> Future[T]:
        """Send ``request``; the future resolves to its decoded response (or fails with a typed error)."""
        decode: Callable[[bytes], T] = request.decode
        return self._framed.call_async(request, decode, defer=defer)

    def call(self, request: DecodingRequest[T], timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> T:
        return wait(self.call_async(request), timeout_s, f"{type(request).__name__} on {self.address}")

    def send_deferred(self) -> None:
        self._framed.send_deferred()

    def close(self) -> None:
        self._framed.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class ConnectionPool(framed.ConnectionPool[Connection]):
    """One live connection per TANK broker address, reopened after a failure. Thread-safe."""

    def __init__(self, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 io_timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> None:
        super().__init__(functools.partial(Connection.open, connect_timeout_s=connect_timeout_s,
                                           io_timeout_s=io_timeout_s))
