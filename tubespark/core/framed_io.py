"""Bytes in from a peer, for every broker's frame decoder: the :class:`Reader` protocol and its readers.

A decoder pulls exactly the bytes it needs with ``read_exactly``, so one decoder serves a live socket
(:class:`SocketReader`), captured traffic or a test buffer (:class:`BytesReader`). Decoders check each
length the peer announces against their protocol's bound before reading it; the socket reader adds a
last bound of its own, so no announced size can make it buffer without limit.
"""

from __future__ import annotations

import socket
import ssl
import threading
from typing import Protocol, TypeAlias, overload

from tubespark.core.tls import TlsChannel, handshake_timeout, tls_failure
from tubespark.errors import BrokerConnectionError, FrameTooLargeError, TruncatedFrameError

DEFAULT_MAX_READ_BYTES = 64 * 1024 * 1024
"""Largest single ``read_exactly`` a :class:`SocketReader` accepts unless told otherwise."""

_RECV_MIN = 256 * 1024  # read ahead: small frames arrive in one recv
_RECV_MAX = 1024 * 1024  # recv allocates its whole buffer up front: never ask for more at once


Stream: TypeAlias = "socket.socket | TlsChannel"
"""What :func:`open_socket` returns: a plain socket, or a TLS channel with the same calls."""


class Reader(Protocol):
    """Where frames come from. ``read_exactly`` returns n bytes or raises a TubeSparkError.

    TruncatedFrameError means the stream ended (in the middle of a frame, or between frames).
    """

    def read_exactly(self, n: int) -> bytes: ...


class BytesReader:
    """A :class:`Reader` over bytes already in memory (tests, captured traffic)."""

    def __init__(self, data: bytes) -> None:
        self._view = memoryview(data)
        self._pos = 0

    def read_exactly(self, n: int) -> bytes:
        end = self._pos + n
        if end > len(self._view):
            raise TruncatedFrameError(f"stream ended after {len(self._view) - self._pos} of {n} bytes")
        chunk = bytes(self._view[self._pos:end])
        self._pos = end
        return chunk

    @property
    def remaining(self) -> int:
        return len(self._view) - self._pos


class SocketReader:
    """A buffered :class:`Reader` over a socket that has a timeout.

    A recv timeout just means "idle": the reader keeps waiting unless ``closed`` is set, so the owner
    stops it by setting ``closed`` and shutting the socket down (which also wakes a blocked recv).
    Raises TruncatedFrameError when the peer closes the stream or ``closed`` is set, BrokerConnectionError
    when the socket fails, FrameTooLargeError for a read above ``max_read_bytes`` (before buffering any
    of it).
    """

    def __init__(self, sock: Stream, closed: threading.Event, *,
                 max_read_bytes: int = DEFAULT_MAX_READ_BYTES, peer: str = "the server") -> None:
        self._sock = sock
        self._peer = peer  # for messages: the socket may be shut down by then, without a peer name
        self._closed = closed
        self._max_read = max_read_bytes
        self._buf = bytearray()

    def read_exactly(self, n: int) -> bytes:
        if not 0 <= n <= self._max_read:
            raise FrameTooLargeError(f"a read of {n} bytes exceeds the {self._max_read}-byte limit")
        while len(self._buf) < n:
            try:
                chunk = self._sock.recv(min(max(_RECV_MIN, n - len(self._buf)), _RECV_MAX))
            except TimeoutError:
                if self._closed.is_set():
                    raise TruncatedFrameError("connection closed locally") from None
                continue
            except OSError as exc:
                # TLS 1.3: a server that refuses the client's certificate says so after the client's handshake,
                # as an alert on the first read
                tls = tls_failure(self._peer, exc)
                if tls is not None:
                    raise tls from exc
                raise BrokerConnectionError(f"read failed: {exc}") from exc
            if not chunk:
                raise TruncatedFrameError("peer closed the connection")
            self._buf += chunk
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` -> ``(host, port)``; ValueError for anything else (surrounding blanks are ignored)."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad address {address!r}, expected host:port")
    return host, int(port)


@overload
def open_socket(address: str, *, connect_timeout_s: float, io_timeout_s: float,
                ssl_context: None = None) -> socket.socket: ...


@overload
def open_socket(address: str, *, connect_timeout_s: float, io_timeout_s: float,
                ssl_context: ssl.SSLContext | None) -> Stream: ...


def open_socket(address: str, *, connect_timeout_s: float, io_timeout_s: float,
                ssl_context: ssl.SSLContext | None = None) -> Stream:
    """Connect (within ``connect_timeout_s``), optionally TLS, then bound every later send/recv by ``io_timeout_s``.

    Raises ValueError for a malformed address, :class:`TlsError` when the TLS handshake fails for a
    reason retrying cannot fix (see :mod:`tubespark.core.tls`; a handshake without any answer counts,
    because a plain-text port ignores a ClientHello), and BrokerConnectionError otherwise.
    """
    host, port = parse_address(address)
    sock: socket.socket | None = None
    handshaking = False
    try:
        sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            handshaking = True
            channel = TlsChannel(sock, ssl_context, host)
            channel.handshake(connect_timeout_s)  # connect and handshake share one budget, roughly
            handshaking = False
            channel.settimeout(io_timeout_s)
            return channel
        sock.settimeout(io_timeout_s)
    except OSError as exc:  # ssl.SSLError is an OSError too
        if sock is not None:
            sock.close()
        if handshaking and isinstance(exc, TimeoutError):
            raise handshake_timeout(address, connect_timeout_s) from exc
        tls = tls_failure(address, exc)
        if tls is not None:
            raise tls from exc
        during = " during the TLS handshake" if handshaking else ""
        raise BrokerConnectionError(f"cannot connect to {address}{during}: {exc}") from exc
    return sock
