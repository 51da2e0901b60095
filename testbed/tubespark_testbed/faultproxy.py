"""A TCP fault proxy on loopback: put it between a client and a TubeMQ master or broker to make the network fail.

Why our own: the faults that hang clients are the ones a dead process does not produce. A killed broker
refuses connections at once; a broker that is stalled (a long GC, SIGSTOP, a full disk), a link that drops
packets, or a machine that lost power answers *nothing*, and a client that trusts its socket waits forever.
This proxy makes each of those on demand, for one connection path, without root (no iptables, no tc):

=================  ==========================================================================================
mode               what the client sees
=================  ==========================================================================================
``pass``           a plain relay, byte for byte, both ways
``stall``          every connection, open or new, freezes: the proxy accepts and never answers, reads nothing
                   and forwards nothing (what the client sent waits in the socket buffers). Switching back to
                   ``pass`` resumes them with nothing lost, as a broker that was paused (SIGSTOP, GC) does
``delay``          every chunk, each way, is forwarded ``delay_ms`` after it arrived (order kept)
``cut``            the server's next answer on each connection is forwarded only in part (half its bytes,
                   at least one) and then both sockets close: the client holds the start of a frame and an
                   end of stream ("cut a connection mid-frame"); the server already handled the request
``half_open``      the server's host vanished: open connections are dropped by the proxy *without FIN and
                   without RST* (it never touches their sockets again until :meth:`FaultProxy.stop`), so the
                   client's socket stays established and silent forever; new connections are accepted and
                   get the same treatment. Unlike ``stall``, switching back to ``pass`` does not revive them:
                   only new connections work again, as with a peer that rebooted
=================  ==========================================================================================

The proxy listens only on 127.0.0.0/8 and forwards only to 127.0.0.0/8 (:class:`FaultProxyError`
otherwise): it is a test tool, never a relay off the machine. One daemon thread runs every connection
with ``select``; :meth:`FaultProxy.set_mode` switches at any moment from any thread, and
:meth:`FaultProxy.stop` closes every socket and joins the thread (idempotent).

Use it for a master by giving the client the proxy's address instead of the master's; brokers are listed to
clients by the master, so a client reaches a broker through a proxy only with the connector's
``brokerAddressMap`` option (docs/tubemq/brokers.md, "Reaching brokers at other addresses").
"""

from __future__ import annotations

import contextlib
import ipaddress
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

from tubespark_testbed.errors import ClusterError

MODES = ("pass", "stall", "delay", "cut", "half_open")
CHUNK_BYTES = 64 * 1024
TICK_S = 0.02
"""Longest sleep of the proxy's loop: how fast it sees a mode switch, a due delayed chunk or a stop."""
UPSTREAM_CONNECT_TIMEOUT_S = 2.0


class FaultProxyError(ClusterError):
    """The fault proxy was misused (an address off loopback, an unknown mode) or could not start."""


def _loopback(host: str, what: str) -> str:
    try:
        if not ipaddress.ip_address(host).is_loopback:
            raise FaultProxyError(f"the fault proxy works on loopback only; {what} {host} is not in 127.0.0.0/8")
    except ValueError:
        raise FaultProxyError(f"{what} must be a loopback IPv4 address (127.0.0.x), got {host!r}") from None
    return host


def _split(address: str, what: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise FaultProxyError(f"{what} must be host:port, got {address!r}")
    return _loopback(host, what), int(port)


@dataclass
class _Direction:
    """One way of a link: chunks waiting for their time (delay), then bytes ready to write."""

    due: list[tuple[float, bytes]] = field(default_factory=list)
    out: bytearray = field(default_factory=bytearray)
    eof: bool = False  # the source closed: close the link once ``out`` is written


@dataclass
class _Link:
    client: socket.socket
    upstream: socket.socket | None
    frozen: bool = False  # half-open: never read or written again
    up: _Direction = field(default_factory=_Direction)  # client -> server
    down: _Direction = field(default_factory=_Direction)  # server -> client


class FaultProxy:
    """A loopback TCP proxy to ``target`` (``host:port``) whose behaviour :meth:`set_mode` switches at run time."""

    def __init__(self, target: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = _split(target, "target")
        self._host = _loopback(host, "listen address")
        self._port = port
        self._mode = "pass"
        self._delay_s = 0.0
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._abandoned: list[socket.socket] = []  # half-open sockets, closed only by stop()
        self._listener: socket.socket | None = None
        self._address: str | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._failure: BaseException | None = None
        self.accepted = 0
        """Connections accepted so far (tests check that a client really went through the proxy)."""

    # ---- life cycle ------------------------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        if self._thread is not None:
            raise FaultProxyError("the fault proxy is already started")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self._host, self._port))
        except OSError as exc:
            listener.close()
            raise FaultProxyError(f"the fault proxy cannot listen on {self._host}:{self._port}: {exc}") from exc
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        host, port = listener.getsockname()
        self._address = f"{host}:{port}"
        self._thread = threading.Thread(target=self._run, name=f"faultproxy-{self.address}", daemon=True)
        self._thread.start()
        return self

    @property
    def address(self) -> str:
        """``host:port`` clients connect to (known once started)."""
        if self._address is None:
            raise FaultProxyError("the fault proxy is not started")
        return self._address

    @property
    def mode(self) -> str:
        return self._mode

    def stop(self) -> None:
        """Close the listener and every connection (the clients see them close), and end the thread."""
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        with self._lock:
            links, self._links = self._links, []
            abandoned, self._abandoned = self._abandoned, []
        for link in links:
            _close(link.client, link.upstream)
        _close(*abandoned)
        if self._listener is not None:
            _close(self._listener)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ---- switching -------------------------------------------------------------------------------------------

    def set_mode(self, mode: str, *, delay_ms: float = 0.0) -> None:
        """Switch every connection (open and new) to ``mode``, one of :data:`MODES`; ``delay_ms`` for ``delay``."""
        if mode not in MODES:
            raise FaultProxyError(f"unknown fault proxy mode {mode!r}; one of {', '.join(MODES)}")
        if mode == "delay" and not delay_ms > 0:
            raise FaultProxyError(f"mode delay needs delay_ms > 0, got {delay_ms}")
        if self._failure is not None:
            raise FaultProxyError(f"the fault proxy failed: {self._failure!r}") from self._failure
        with self._lock:
            self._mode = mode
            self._delay_s = delay_ms / 1000 if mode == "delay" else 0.0
            if mode == "half_open":
                for link in self._links:
                    self._abandon(link)
                self._links = []

    def pass_through(self) -> None:
        self.set_mode("pass")

    def stall(self) -> None:
        self.set_mode("stall")

    def delay(self, delay_ms: float) -> None:
        self.set_mode("delay", delay_ms=delay_ms)

    def cut(self) -> None:
        self.set_mode("cut")

    def half_open(self) -> None:
        self.set_mode("half_open")

    def _abandon(self, link: _Link) -> None:
        """Forget a link without a FIN or RST: its sockets stay open, unread, until stop(). Under the lock."""
        link.frozen = True
        self._abandoned.append(link.client)
        if link.upstream is not None:
            self._abandoned.append(link.upstream)

    # ---- the loop --------------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                self._step()
        except BaseException as exc:  # noqa: BLE001 - recorded and reported by set_mode; the test sees it
            self._failure = exc

    def _step(self) -> None:
        with self._lock:
            mode, links = self._mode, list(self._links)
        flowing = [link for link in links if not link.frozen] if mode != "stall" else []
        now = time.monotonic()
        readers: list[socket.socket] = [self._listener] if self._listener is not None else []
        writers: list[socket.socket] = []
        timeout = TICK_S
        for link in flowing:
            for direction, dst in ((link.up, link.upstream), (link.down, link.client)):
                while direction.due and direction.due[0][0] <= now:
                    direction.out += direction.due.pop(0)[1]
                if direction.due:
                    timeout = min(timeout, max(0.0, direction.due[0][0] - now))
                if direction.out and dst is not None:
                    writers.append(dst)
            if not link.up.eof and link.upstream is not None:
                readers.append(link.client)
            if not link.down.eof and link.upstream is not None:
                readers.append(link.upstream)
        readable, writable, _ = select.select(readers, writers, [], timeout)
        if self._listener is not None and self._listener in readable:
            self._accept(mode)
        # Under the lock, with the mode read again: once set_mode returns, not one more byte moves the old way
        # (a stall or half-open that let a chunk through would make the fault tests flaky).
        with self._lock:
            mode = self._mode
            if mode == "stall":
                return
            for link in flowing:
                if not link.frozen:
                    self._pump(link, readable, writable, mode)

    def _accept(self, mode: str) -> None:
        assert self._listener is not None
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        self.accepted += 1
        with self._lock:
            if self._mode == "half_open":  # the host is gone: nothing ever answers this connection
                self._abandoned.append(client)
                return
        try:
            upstream = socket.create_connection(self.target, timeout=UPSTREAM_CONNECT_TIMEOUT_S)
        except OSError:
            _close(client)  # the server is down: the client sees its connection closed, as with a relay
            return
        client.setblocking(False)
        upstream.setblocking(False)
        with self._lock:
            self._links.append(_Link(client, upstream))

    def _pump(self, link: _Link, readable: list[socket.socket], writable: list[socket.socket], mode: str) -> None:
        assert link.upstream is not None
        now = time.monotonic()
        try:
            for src, direction in ((link.client, link.up), (link.upstream, link.down)):
                if src in readable:
                    data = src.recv(CHUNK_BYTES)
                    if not data:
                        direction.eof = True
                    elif mode == "cut" and direction is link.down:  # blocks at most 1 s, under the lock
                        part = data[:max(1, len(data) // 2)]
                        with contextlib.suppress(OSError):
                            link.client.setblocking(True)
                            link.client.settimeout(1.0)
                            link.client.sendall(bytes(link.down.out) + part)
                        self._drop(link)
                        return
                    else:
                        direction.due.append((now + self._delay_s, data))
            for direction, dst in ((link.up, link.upstream), (link.down, link.client)):
                if dst in writable and direction.out:
                    sent = dst.send(direction.out)
                    del direction.out[:sent]
        except OSError:  # reset by either side: end the link, the other side sees a close
            self._drop(link)
            return
        if any(d.eof and not d.out and not d.due for d in (link.up, link.down)):
            self._drop(link)

    def _drop(self, link: _Link) -> None:
        """End a link (both sides see a close). Called under the lock."""
        if link in self._links:
            self._links.remove(link)
        _close(link.client, link.upstream)


def _close(*socks: socket.socket | None) -> None:
    for sock in socks:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
