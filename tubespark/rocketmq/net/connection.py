"""A remoting connection: :class:`tubespark.core.framed.FramedConnection` speaking RocketMQ frames.

Each request gets the connection's correlation id as its ``opaque``; the answer is matched by it, so many
calls pipeline on one socket (a range read keeps several pulls in flight, a producer many batch sends).
A frame that does not decode closes the connection (every pending call fails, retriable); a response
with an error code is only that call's business and is turned into an error by the caller's reader
(:mod:`tubespark.rocketmq.wire.headers`). With credentials every request is signed on its way out
(:mod:`tubespark.rocketmq.wire.acl`).
"""

from __future__ import annotations

import ssl
from concurrent.futures import Future

from tubespark.core.framed import DEFAULT_CALL_TIMEOUT_S, DEFAULT_CONNECT_TIMEOUT_S, ConnectionPool, FramedConnection
from tubespark.core.framed import wait as wait_future
from tubespark.rocketmq.wire.acl import Credentials, sign
from tubespark.rocketmq.wire.frame import MAX_FRAME_BYTES, Command, RemotingCodec, decode_command


def _decode(frame: bytes) -> Command:
    return decode_command(frame)


class RemotingConnection:
    """One socket to a name server or broker; thread-safe. Open with :meth:`open`."""

    def __init__(self, conn: FramedConnection[Command], credentials: Credentials | None = None) -> None:
        self._conn = conn
        self._credentials = credentials
        self.address = conn.address

    @classmethod
    def open(cls, address: str, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
             io_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
             ssl_context: ssl.SSLContext | None = None,
             credentials: Credentials | None = None) -> RemotingConnection:
        conn: FramedConnection[Command] = FramedConnection.open(
            address, RemotingCodec(), connect_timeout_s=connect_timeout_s, io_timeout_s=io_timeout_s,
            ssl_context=ssl_context, max_read_bytes=MAX_FRAME_BYTES)
        return cls(conn, credentials)

    @property
    def closed(self) -> bool:
        return self._conn.closed

    def call_async(self, cmd: Command, *, defer: bool = False) -> Future[Command]:
        """Send ``cmd`` (signed, with credentials); the future resolves to the response command (whatever
        its code)."""
        if self._credentials is not None:
            cmd = sign(cmd, self._credentials)
        return self._conn.call_async(cmd, _decode, defer=defer)

    def send_deferred(self) -> None:
        self._conn.send_deferred()

    def call(self, cmd: Command, timeout_s: float, what: str) -> Command:
        return wait_future(self.call_async(cmd), timeout_s, f"{what} on {self.address}")

    def close(self) -> None:
        self._conn.close()


def connection_pool(*, connect_timeout_s: float, io_timeout_s: float, ssl_context: ssl.SSLContext | None = None,
                    credentials: Credentials | None = None) -> ConnectionPool[RemotingConnection]:
    """One live connection per address, reopened after a failure."""
    return ConnectionPool(lambda address: RemotingConnection.open(
        address, connect_timeout_s=connect_timeout_s, io_timeout_s=io_timeout_s, ssl_context=ssl_context,
        credentials=credentials))


wait = wait_future
