"""The testbed's fault proxy, on plain sockets: each mode does what the fault tests rely on, and stops clean."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from tubespark_testbed.faultproxy import FaultProxy, FaultProxyError

QUIET_S = 0.4
"""How long a client waits to conclude that nothing comes (the proxy's loop ticks every 20 ms)."""


class EchoServer:
    """Echoes every chunk back; counts connections. Daemon threads, short timeouts: nothing can hang."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self.received = bytearray()
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        conn.settimeout(0.05)
        with conn:
            while not self._stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                self.received += data
                conn.sendall(data)

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy(echo.address) as p:
        yield p


def connect(proxy: FaultProxy) -> socket.socket:
    host, port = proxy.address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=2.0)
    sock.settimeout(2.0)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def silent(sock: socket.socket) -> bool:
    """True when nothing (no data, no end of stream) arrives within QUIET_S."""
    sock.settimeout(QUIET_S)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(2.0)
    return False


def test_pass_relays_both_ways(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"x" * 200_000)
        assert recv_exactly(sock, 200_000) == b"x" * 200_000
    assert proxy.accepted == 1 and echo.connections == 1


def test_stall_freezes_open_and_new_connections_and_resumes_without_loss(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as before:
        before.sendall(b"ping")
        assert recv_exactly(before, 4) == b"ping"
        proxy.stall()
        before.sendall(b"during")
        with connect(proxy) as new:  # accepted, never answered
            new.sendall(b"new")
            assert silent(before) and silent(new)
            assert bytes(echo.received) == b"ping"  # the server saw nothing of what was sent during the stall
            proxy.pass_through()
            assert recv_exactly(before, 6) == b"during"
            assert recv_exactly(new, 3) == b"new"


def test_delay_holds_each_chunk_each_way(proxy: FaultProxy) -> None:
    proxy.delay(150)
    with connect(proxy) as sock:
        start = time.monotonic()
        sock.sendall(b"hello")
        assert recv_exactly(sock, 5) == b"hello"
        elapsed = time.monotonic() - start
    assert 0.3 <= elapsed < 1.5  # 150 ms to the server and 150 ms back


def test_cut_forwards_part_of_the_answer_then_closes(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        proxy.cut()
        sock.sendall(b"a" * 100)
        got = recv_exactly(sock, 100)  # stops at the end of stream
        assert got == b"a" * 50
        assert sock.recv(1) == b""  # closed: a frame's start and then EOF
        assert bytes(echo.received) == b"a" * 100  # the server had the whole request


def test_half_open_drops_connections_without_fin_and_never_revives_them(proxy: FaultProxy) -> None:
    with connect(proxy) as old:
        old.sendall(b"1")
        assert recv_exactly(old, 1) == b"1"
        proxy.half_open()
        old.sendall(b"2")  # the kernel still takes it: nobody closed anything
        assert silent(old)  # no answer, and no end of stream (recv would return b"" on a FIN)
        with connect(proxy) as new:
            new.sendall(b"3")
            assert silent(new)
        proxy.pass_through()
        assert silent(old)  # the peer is gone for good
        with connect(proxy) as fresh:
            fresh.sendall(b"4")
            assert recv_exactly(fresh, 1) == b"4"


def test_stop_closes_every_connection_and_is_idempotent(echo: EchoServer) -> None:
    proxy = FaultProxy(echo.address).start()
    with connect(proxy) as sock, connect(proxy) as abandoned:
        deadline = time.monotonic() + 2.0
        while proxy.accepted < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        proxy.half_open()
        proxy.stop()
        assert recv_exactly(sock, 1) == b"" and recv_exactly(abandoned, 1) == b""
    proxy.stop()
    host, port = proxy.address.rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError), socket.create_connection((host, int(port)), timeout=1.0):
        pass


def test_a_target_that_is_down_closes_the_client(echo: EchoServer) -> None:
    echo.close()
    with FaultProxy(echo.address) as proxy, connect(proxy) as sock, contextlib.suppress(ConnectionResetError):
        assert recv_exactly(sock, 1) == b""


@pytest.mark.parametrize("target", ["10.0.0.1:80", "localhost:80", "127.0.0.1", "127.0.0.1:0"])
def test_off_loopback_or_malformed_targets_are_refused(target: str) -> None:
    with pytest.raises(FaultProxyError):
        FaultProxy(target)


def test_misuse_is_a_typed_error(echo: EchoServer) -> None:
    with pytest.raises(FaultProxyError, match="not started"):
        _ = FaultProxy(echo.address).address
    with pytest.raises(FaultProxyError, match="loopback"):
        FaultProxy(echo.address, host="0.0.0.0")
    with FaultProxy(echo.address) as proxy:
        with pytest.raises(FaultProxyError, match="unknown"):
            proxy.set_mode("drop")
        with pytest.raises(FaultProxyError, match="delay_ms"):
            proxy.set_mode("delay")
        with pytest.raises(FaultProxyError, match="already"):
            proxy.start()
        with pytest.raises(FaultProxyError, match="cannot listen"):
            FaultProxy(echo.address, port=int(proxy.address.rsplit(":", 1)[1])).start()
