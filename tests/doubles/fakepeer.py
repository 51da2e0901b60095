"""A tiny scripted TCP peer that speaks TubeMQ framing, for the connection tests.

This is a test double, used only because a real TubeMQ server cannot be made to send malformed
frames, wrong serial numbers, delayed or missing answers, or RPC exceptions on demand. It checks
nothing about TubeMQ semantics: each test scripts what the peer does with every request.

The peer listens on 127.0.0.1 port 0, decodes each incoming frame with the production codec
(``read_frame`` / ``decode_request``) and hands it to ``script(link, serial, request)``; the script
answers through ``link`` (well-formed responses, exceptions, raw bytes, or closing the socket). Every
socket has a timeout and every thread is a daemon that stops with :meth:`FakePeer.close`, so a broken
test cannot hang the run.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

from google.protobuf.message import Message
from tubespark_testbed.ports import free_ports

from tubespark.core.framed_io import SocketReader
from tubespark.errors import BrokerConnectionError, CodecError, TruncatedFrameError
from tubespark.tubemq.wire.envelope import DecodedRequest, decode_request, encode_exception, encode_response
from tubespark.tubemq.wire.frame import encode_frame, read_frame

POLL_S = 0.05


class _PeerReader(SocketReader):
    """Core's socket reader, ending the stream on any socket failure (the peer loops stop on CodecError)."""

    def read_exactly(self, n: int) -> bytes:
        try:
            return super().read_exactly(n)
        except BrokerConnectionError as exc:
            raise TruncatedFrameError(f"fake peer socket failed: {exc}") from exc

    def peek(self, n: int) -> memoryview:
        try:
            return super().peek(n)
        except BrokerConnectionError as exc:
            raise TruncatedFrameError(f"fake peer socket failed: {exc}") from exc


class Link:
    """The peer's side of one accepted connection, handed to the script."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._lock = threading.Lock()

    def send_raw(self, data: bytes) -> None:
        with self._lock, contextlib.suppress(OSError):  # the client went away: the test asserts on its side
            self.sock.sendall(data)

    def reply(self, serial: int, method: int, response: Message) -> None:
        self.send_raw(encode_frame(serial, encode_response(method, response.SerializeToString())))

    def reply_data(self, serial: int, method: int, data: bytes) -> None:
        """A success envelope around arbitrary inner bytes (e.g. a message that does not parse)."""
        self.send_raw(encode_frame(serial, encode_response(method, data)))

    def reply_exception(self, serial: int, name: str, text: str, *, fatal: bool = False) -> None:
        self.send_raw(encode_frame(serial, encode_exception(name, text, fatal=fatal)))

    def reply_later(self, delay_s: float, serial: int, method: int, response: Message) -> None:
        timer = threading.Timer(delay_s, self.reply, (serial, method, response))
        timer.daemon = True
        timer.start()

    def shutdown(self) -> None:
        """End the connection without closing the socket: safe from any thread (see :meth:`FakePeer.close`)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Shut down and close; only from the thread serving this link (scripts run there)."""
        self.shutdown()
        self.sock.close()


Script = Callable[[Link, int, DecodedRequest], None]


class FakePeer:
    """Accepts connections and runs ``script`` for every request frame. Use as a context manager."""

    def __init__(self, script: Script | None = None, *, port: int = 0) -> None:
        self.script: Script | None = script
        self.requests: list[tuple[int, DecodedRequest]] = []
        self.accepted = 0
        self._stopped = threading.Event()
        self._links: list[Link] = []
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", port))
        self._server.listen(16)
        self._server.settimeout(POLL_S)
        self.port = self._server.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"fakepeer-{self.port}", daemon=True)
        self._acceptor.start()

    def _accept_loop(self) -> None:
        try:
            self._accept_connections()
        finally:
            self._server.close()

    def _accept_connections(self) -> None:
        while not self._stopped.is_set():
            try:
                sock, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(POLL_S)
            link = Link(sock)
            with self._lock:
                self.accepted += 1
                self._links.append(link)
            threading.Thread(target=self._serve, args=(link,), daemon=True).start()

    def _serve(self, link: Link) -> None:
        reader = _PeerReader(link.sock, self._stopped)
        try:
            while not self._stopped.is_set():
                serial, payload = read_frame(reader)
                request = decode_request(payload)
                with self._lock:
                    self.requests.append((serial, request))
                if self.script is not None:
                    self.script(link, serial, request)
        except (CodecError, OSError):
            pass
        finally:
            link.close()

    def wait_for_requests(self, n: int, timeout_s: float = 2.0) -> list[tuple[int, DecodedRequest]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= n:
                    return list(self.requests)
            time.sleep(0.01)
        raise AssertionError(f"fake peer saw {len(self.requests)} requests, expected {n}")

    def close(self) -> None:
        """Stop accepting and end every connection.

        Sockets are only shut down here; the thread using each one closes it. Closing a socket under
        another thread's recv/accept could let that call land on a new socket given the same fd number.
        """
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        with self._lock:
            links = list(self._links)
        for link in links:
            link.shutdown()
        self._acceptor.join(1.0)

    def __enter__(self) -> FakePeer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = ["POLL_S", "FakePeer", "Link", "Script", "SilentPeer", "closed_port_address", "free_ports"]


def closed_port_address() -> str:
    return f"127.0.0.1:{free_ports(1)[0]}"


class SilentPeer:
    """A port that accepts every connection, reads what it is sent and never says a word: a wrong service (a server
    waiting for input in its own protocol), a stuck proxy, a port-forward to nothing. Issue 37's rule: it never
    answered, though every connect to it succeeds. Connections stay open until :meth:`close`."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(POLL_S)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._links: list[socket.socket] = []
        self._lock = threading.Lock()
        self.accepted = 0
        threading.Thread(target=self._accept_loop, name="silent-peer", daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(POLL_S)
            with self._lock:
                self._links.append(sock)
                self.accepted += 1
            threading.Thread(target=self._swallow, args=(sock,), daemon=True).start()

    def _swallow(self, sock: socket.socket) -> None:
        """Read and drop what the client sends (so its sends never block), until it closes or we stop."""
        while not self._stop.is_set():
            try:
                if not sock.recv(65536):
                    return
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            links, self._links = self._links, []
        for sock in links:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> SilentPeer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
