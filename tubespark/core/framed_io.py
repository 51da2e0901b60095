"""Bytes in from a peer, for every broker's frame decoder: the :class:`Reader` protocol and its readers.

A decoder pulls exactly the bytes it needs with ``read_exactly``, so one decoder serves a live socket
(:class:`SocketReader`), captured traffic or a test buffer (:class:`BytesReader`). Decoders check each
length the peer announces against their protocol's bound before reading it; the socket reader adds a
last bound of its own, so no announced size can make it buffer without limit.

Both readers also let a decoder look at what is buffered without taking it (:meth:`SocketReader.peek`,
:meth:`SocketReader.skip`): a frame of many blocks is then cut out of the receive buffer in one call
(TubeMQ's ``take_frame``) instead of a ``read_exactly`` per block. Why: a fetch answer of 512 KiB is 64
blocks of 8 KiB, and reading them one call at a time cost the executor's reader thread more CPU than
decoding the messages (issue 24). The socket reader receives into one reusable buffer (``recv_into``),
so a byte is copied once from the kernel and, at most, once into the frame's payload: a decoder may read a
frame where it lies (TubeMQ's fetch answers, ``tubespark/tubemq/wire/blocks.py``) as long as it is done before
the next read, which moves or overwrites what was taken.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import Protocol, TypeAlias, overload

from tubespark.core.outage import unanswered
from tubespark.core.tls import TlsChannel, handshake_timeout, tls_failure
from tubespark.errors import BrokerConnectionError, FrameTooLargeError, TruncatedFrameError

DEFAULT_MAX_READ_BYTES = 64 * 1024 * 1024
"""Largest single ``read_exactly`` a :class:`SocketReader` accepts unless told otherwise."""

_BUFFER_BYTES = 64 * 1024  # the receive buffer to start with; it doubles up to the largest frame read (a
# TubeMQ fetch answer: 512 KiB), so a connection that only carries small calls stays small
_COMPACT_BELOW = 64 * 1024  # room left under which buffered bytes move to the buffer's front


Stream: TypeAlias = "socket.socket | TlsChannel"
"""What :func:`open_socket` returns: a plain socket, or a TLS channel with the same calls."""


class Reader(Protocol):
    """Where frames come from. ``read_exactly`` returns n bytes or raises a TubeSparkError.

    TruncatedFrameError means the stream ended (in the middle of a frame, or between frames).
    """

    def read_exactly(self, n: int) -> bytes: ...


class PeekReader(Reader, Protocol):
    """A :class:`Reader` that shows what it holds: ``peek(n)`` returns a view of at least ``n`` buffered
    bytes (all it has; raises as ``read_exactly`` does when the stream ends first), valid until the next
    call on the reader; ``skip(n)`` then takes ``n`` of them."""

    def peek(self, n: int) -> memoryview: ...

    def skip(self, n: int) -> None: ...


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

    def peek(self, n: int) -> memoryview:
        if self._pos + n > len(self._view):
            raise TruncatedFrameError(f"stream ended after {len(self._view) - self._pos} of {n} bytes")
        return self._view[self._pos:]

    def skip(self, n: int) -> None:
        self._pos = min(self._pos + n, len(self._view))

    @property
    def remaining(self) -> int:
        return len(self._view) - self._pos


class SocketReader:
    """A buffered :class:`PeekReader` over a socket that has a timeout.

    A recv timeout just means "idle": the reader keeps waiting unless ``closed`` is set, so the owner
    stops it by setting ``closed`` and shutting the socket down (which also wakes a blocked recv). With a
    ``deadline`` (a ``time.monotonic()`` value; set by a caller that reads for its own call) it waits no longer
    than that and raises the builtin ``TimeoutError``, taking nothing (no error of the stream: what arrived
    of a frame stays buffered, and the next read goes on with it).
    Raises TruncatedFrameError when the peer closes the stream or ``closed`` is set, BrokerConnectionError
    when the socket fails, FrameTooLargeError for a read above ``max_read_bytes`` (before buffering any
    of it).

    Bytes arrive in one buffer that is reused (``recv_into``, as much as the kernel has, up to the room
    left); it grows only for a single read larger than it, up to ``max_read_bytes``.
    """

    def __init__(self, sock: Stream, closed: threading.Event, *,
                 max_read_bytes: int = DEFAULT_MAX_READ_BYTES, peer: str = "the server") -> None:
        self._sock = sock
        self._recv_into = getattr(sock, "recv_into", None)  # a TLS channel has recv only
        self._peer = peer  # for messages: the socket may be shut down by then, without a peer name
        self._closed = closed
        self._max_read = max_read_bytes
        self._buf = bytearray(_BUFFER_BYTES)
        self._start = 0  # buffered bytes are _buf[_start:_end]
        self._end = 0
        self._deadline: float | None = None
        self._mark = -1  # with a deadline: where the read began, kept buffered until the deadline is lifted
        self._timeout: float | None = sock.gettimeout()  # the socket's io timeout, the longest a recv waits
        self._timeout_changed = False  # a deadline set a shorter one

    def set_deadline(self, deadline: float | None) -> None:
        """Wait for bytes until ``deadline`` (``time.monotonic()``), then go back to where the reads since this
        call began and raise ``TimeoutError``: a frame whose reading ran out of time is read again
        from its first byte next time, whatever the decoder had taken of it. ``None`` lifts the deadline (and
        gives the socket its io timeout back, for the sends on it)."""
        if deadline is None:
            if self._timeout_changed:
                self._sock.settimeout(self._timeout)
                self._timeout_changed = False
            self._mark = -1
        else:
            self._mark = self._start
        self._deadline = deadline

    def read_exactly(self, n: int) -> bytes:
        self._fill(n)
        start = self._start
        self._start = start + n
        with memoryview(self._buf) as view:  # one copy (a bytearray slice would be a second)
            return bytes(view[start:start + n])

    def peek(self, n: int) -> memoryview:
        self._fill(n)
        return memoryview(self._buf)[self._start:self._end]

    def skip(self, n: int) -> None:
        self._start = min(self._start + n, self._end)

    def _fill(self, n: int) -> None:
        """Make at least ``n`` bytes buffered, receiving as much as the kernel has."""
        if not 0 <= n <= self._max_read:
            raise FrameTooLargeError(f"a read of {n} bytes exceeds the {self._max_read}-byte limit")
        if self._end - self._start >= n:
            return
        keep = self._start if self._mark < 0 else self._mark  # the first byte that must stay buffered
        if keep == self._end:
            self._start = self._end = keep = 0
            self._mark = min(self._mark, 0)
        if len(self._buf) - self._start < n or len(self._buf) - self._end < _COMPACT_BELOW:
            self._make_room(keep, n)
        while self._end - self._start < n:
            self._end += self._receive(memoryview(self._buf)[self._end:])

    def _make_room(self, keep: int, n: int) -> None:
        """Move the bytes from ``keep`` on to the front of a buffer that can hold them and ``n`` from ``_start``
        (a new one if it must grow)."""
        held = self._end - keep
        size = len(self._buf)
        needed = self._start - keep + n
        if needed > size:
            size = min(max(needed, size * 2), max(self._max_read, needed))
            buf = bytearray(size)
            buf[:held] = self._buf[keep:self._end]
            self._buf = buf
        elif keep:
            self._buf[:held] = self._buf[keep:self._end]
        self._start -= keep
        if self._mark >= 0:
            self._mark -= keep
        self._end = held

    def _receive(self, room: memoryview) -> int:
        deadline = self._deadline
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                self._start = self._mark
                raise TimeoutError(f"no more bytes from {self._peer} before the deadline")
            self._sock.settimeout(left if self._timeout is None else min(left, self._timeout))
            self._timeout_changed = True
        try:
            if self._recv_into is not None:
                got: int = self._recv_into(room)
            else:
                chunk = self._sock.recv(len(room))
                got = len(chunk)
                room[:got] = chunk
        except TimeoutError:
            if self._closed.is_set():
                raise TruncatedFrameError("connection closed locally") from None
            return 0
        except OSError as exc:
            # TLS 1.3: a server that refuses the client's certificate says so after the client's handshake,
            # as an alert on the first read
            tls = tls_failure(self._peer, exc)
            if tls is not None:
                raise tls from exc
            raise BrokerConnectionError(f"read failed: {exc}") from exc
        if not got:
            raise TruncatedFrameError("peer closed the connection")
        return got


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

    An open connection is no evidence that ``address`` answers (:mod:`tubespark.core.outage`): a port that
    accepts and then says nothing (another service, a proxy in front of nothing) has not. The address counts
    as alive once a well-formed answer came back on the connection (:class:`tubespark.core.framed.FramedConnection`).
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
        error = BrokerConnectionError(f"cannot connect to {address}{during}: {exc}")
        if not handshaking:
            unanswered(error, address)  # never opened: core.outage asks whether this address ever answered
        raise error from exc
    return sock
