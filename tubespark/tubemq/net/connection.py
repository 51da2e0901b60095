"""One TCP connection to a TubeMQ master or broker, with many calls in flight.

Calls are matched to responses by serial number, so a producer can pipeline SendMessage requests on
one socket. A daemon thread reads frames and completes futures; callers wait with a timeout, so no
call can hang. A malformed frame poisons the stream (the server does not resynchronise either), so
the connection closes and every pending call fails with the codec error.
"""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import threading
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from google.protobuf.message import Message

from tubespark.errors import (
    BrokerConnectionError,
    CodecError,
    ProtobufDecodeError,
    RpcTimeoutError,
    TruncatedFrameError,
    TubeSparkError,
)
from tubespark.tubemq.wire.envelope import decode_response, encode_request, parse_message
from tubespark.tubemq.wire.frame import encode_frame, read_frame

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)

DEFAULT_CONNECT_TIMEOUT_S = 3.0
DEFAULT_CALL_TIMEOUT_S = 10.0


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad address {address!r}, expected host:port")
    return host, int(port)


class _SocketReader:
    """Buffered ``read_exactly``. A recv timeout just means "idle"; close() wakes it with shutdown()."""

    def __init__(self, sock: socket.socket, closed: threading.Event) -> None:
        self._sock = sock
        self._closed = closed
        self._buf = bytearray()

    def read_exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            try:
                chunk = self._sock.recv(max(262144, n - len(self._buf)))
            except TimeoutError:
                if self._closed.is_set():
                    raise TruncatedFrameError("connection closed locally") from None
                continue
            except OSError as exc:
                raise BrokerConnectionError(f"read failed: {exc}") from exc
            if not chunk:
                raise TruncatedFrameError("peer closed the connection")
            self._buf += chunk
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data


class Connection:
    """A multiplexed RPC connection. Thread-safe; create with :meth:`open`."""

    def __init__(self, address: str, sock: socket.socket) -> None:
        self.address = address
        self._sock = sock
        self._send_lock = threading.Lock()
        self._pending: dict[int, tuple[Future, type[Message]]] = {}
        self._pending_lock = threading.Lock()
        self._serials = itertools.count(1)
        self._closed = threading.Event()
        self._failure: TubeSparkError | None = None
        self._reader = threading.Thread(target=self._read_loop, name=f"tubespark-rx-{address}", daemon=True)
        self._reader.start()

    @classmethod
    def open(cls, address: str, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
             io_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
             ssl_context: ssl.SSLContext | None = None) -> Connection:
        host, port = parse_address(address)
        sock: socket.socket | None = None
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout_s)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
            sock.settimeout(io_timeout_s)  # bounds every sendall; the reader treats recv timeouts as idle
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            if sock is not None:
                sock.close()
            raise BrokerConnectionError(f"cannot connect to {address}: {exc}") from exc
        return cls(address, sock)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def call_async(self, method: int, service_type: int, request: Message, response_cls: type[M],
                   timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> Future[M]:
        """Send one request; the future resolves to the parsed response or an error."""
        serial = next(self._serials) & 0x7FFFFFFF
        payload = encode_request(method, service_type, request, max(1, int(timeout_s * 1000)))
        future: Future[M] = Future()
        with self._pending_lock:  # _fail marks the connection closed under this lock: no call is stranded
            if self._closed.is_set():
                # a fresh, retriable error: this call never reached the wire (the cause is chained)
                raise BrokerConnectionError(f"connection to {self.address} is closed") from self._failure
            self._pending[serial] = (future, response_cls)
        future.add_done_callback(lambda f: self._forget(serial) if f.cancelled() else None)
        try:
            data = encode_frame(serial, payload)
            with self._send_lock:
                self._sock.sendall(data)
        except OSError as exc:
            self._fail(BrokerConnectionError(f"send to {self.address} failed: {exc}"))
        except TubeSparkError as exc:
            with self._pending_lock:
                self._pending.pop(serial, None)
            raise exc
        return future

    def call(self, method: int, service_type: int, request: Message, response_cls: type[M],
             timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> M:
        """Send one request and wait at most ``timeout_s`` for its response."""
        future = self.call_async(method, service_type, request, response_cls, timeout_s)
        return wait(future, timeout_s, f"method {method} on {self.address}")

    def close(self) -> None:
        self._fail(BrokerConnectionError(f"connection to {self.address} was closed"))

    def _forget(self, serial: int) -> None:
        """Drop the entry of a call whose caller stopped waiting, so a late answer is just ignored."""
        with self._pending_lock:
            self._pending.pop(serial, None)

    def _read_loop(self) -> None:
        reader = _SocketReader(self._sock, self._closed)
        try:
            while not self._closed.is_set():
                serial, payload = read_frame(reader)
                with self._pending_lock:
                    entry = self._pending.pop(serial, None)
                if entry is None:
                    log.debug("dropping response %d from %s: no caller waits for it", serial, self.address)
                    continue
                future, response_cls = entry
                try:
                    _method, data = decode_response(payload)
                    _settle(future, result=parse_message(response_cls, data))
                except ProtobufDecodeError as exc:  # close first, so the caller never sees an open connection
                    log.warning("closing connection to %s: %s", self.address, exc)
                    self._fail(exc)
                    _settle(future, error=exc)
                    return
                except TubeSparkError as exc:  # RPC-level exception: this call failed, the stream is fine
                    _settle(future, error=exc)
        except CodecError as exc:
            if not self._closed.is_set():
                log.warning("closing connection to %s: %s", self.address, exc)
            self._fail(exc if not isinstance(exc, TruncatedFrameError) else
                       BrokerConnectionError(f"connection to {self.address} lost: {exc}"))
        except TubeSparkError as exc:
            self._fail(exc)
        except Exception as exc:  # noqa: BLE001 - the reader thread must fail pending calls, never die silently
            self._fail(BrokerConnectionError(f"reader for {self.address} failed: {exc!r}"))

    def _fail(self, error: TubeSparkError) -> None:
        with self._pending_lock:
            first = not self._closed.is_set()
            if first:
                self._failure = error
                self._closed.set()
            pending, self._pending = self._pending, {}
        if first:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        for future, _cls in pending.values():
            _settle(future, error=error)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _settle(future: Future, *, result: object = None, error: BaseException | None = None) -> None:
    """Complete a call's future unless its caller already gave up on it (cancelled after a timeout)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass


def wait(future: Future[M], timeout_s: float, what: str) -> M:
    """Wait for a call's future, turning an expired wait into :class:`RpcTimeoutError`."""
    try:
        return future.result(timeout=timeout_s)
    except FutureTimeout:
        if not future.cancel() and future.done() and not future.cancelled():
            return future.result()  # the answer arrived just as the wait expired
        raise RpcTimeoutError(f"no response to {what} within {timeout_s:.1f}s") from None


class ConnectionPool:
    """One live connection per address, reopened after a failure. Thread-safe."""

    def __init__(self, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 io_timeout_s: float = DEFAULT_CALL_TIMEOUT_S, ssl_context: ssl.SSLContext | None = None) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._io_timeout_s = io_timeout_s
        self._ssl = ssl_context
        self._conns: dict[str, Connection] = {}
        self._lock = threading.Lock()

    def get(self, address: str) -> Connection:
        with self._lock:
            conn = self._conns.get(address)
            if conn is None or conn.closed:
                conn = Connection.open(address, connect_timeout_s=self._connect_timeout_s,
                                       io_timeout_s=self._io_timeout_s, ssl_context=self._ssl)
                self._conns[address] = conn
            return conn

    def drop(self, address: str) -> None:
        with self._lock:
            conn = self._conns.pop(address, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()
