"""A framed TCP connection with many calls in flight, for any broker's binary protocol.

The broker supplies a :class:`FrameCodec`: how a request becomes a frame carrying a correlation id, and
how one frame is read back as ``(correlation_id, payload)``. Everything else is shared:

* every socket call has a deadline: connect (``connect_timeout_s``, TLS handshake included; TLS runs
  over :class:`~tubespark.core.tls.TlsChannel`, which one reader and many senders may share), each
  send and receive (``io_timeout_s``), and each call's wait (:func:`wait`);
* calls are matched to responses by correlation id, so requests pipeline on one socket and answers
  may come in any order; an answer nobody waits for any more (a timed-out call) is dropped;
* one daemon thread reads frames, decodes each payload with the decoder its call supplied, and
  completes the call's future. A frame that does not decode poisons the stream, so the connection
  closes and every pending call fails with the same error; later calls fail at once with a
  (retriable) :class:`BrokerConnectionError` until the owner opens a new connection;
* or, with ``caller_reads``, no thread: the thread that waits for a call's answer reads the socket itself
  (the same frames, decoders and failures). A connection that one thread uses a call at a time (an executor's
  range read: send a fetch, take its answer) then pays no hand-over between threads (issue 24: 0.92x the read
  task's CPU per message at 100 B, docs/performance/hotpath.md); a wait that ends mid-frame takes nothing from
  the stream, so the late answer is dropped by its correlation id as on a threaded connection;
* the first well-formed answer (a frame its call's decoder accepts, an RPC exception included) is this process's
  evidence that the address speaks the protocol (:func:`tubespark.core.outage.saw_alive`), not the open socket: a
  port that accepts and never answers (another service, a stuck proxy) is an address that never answered, so the
  errors of such a connection (a call's timeout, its peer closing it) carry the address
  (:func:`tubespark.core.outage.unanswered`) and a user's address option that never answered fails within
  seconds naming the option instead of being waited for as an outage (issue 37). A protocol whose server speaks
  first (TANK's greeting) passes ``greeted``;
* TLS failures are :class:`TlsError` naming the cause (:mod:`tubespark.core.tls`), including a plain-text
  connection to a TLS port, which the server closes unanswered (a probe tells that from a crash);
* :class:`ConnectionPool` keeps one live connection per address and reopens it after a failure;
* a burst of small requests can be *deferred* and written together (``call_async(..., defer=True)``):
  one socket write for many frames instead of one each, which is what limits a producer of small
  messages (measured: 1.2-1.45x the sends per second at 100 B). A deferred frame waits in the outbox only
  until :data:`MAX_DEFERRED_FRAMES` frames or :data:`MAX_DEFERRED_BYTES` bytes gather, the next
  undeferred call, or :meth:`FramedConnection.send_deferred`; whoever defers must call that before
  waiting for an answer.
* a whole window of requests can go out in one call (:meth:`FramedConnection.call_many`), each answer
  handed to a :class:`BatchSink` with the caller's tag instead of completing a ``Future`` per call: a
  producer of small messages spends most of a message's CPU on the future (three conditions), not on
  the wire.

Decoders signal the two kinds of failure by type: a :class:`CodecError` means the payload is garbage
(the connection closes), any other :class:`TubeSparkError` (e.g. an RPC exception) fails that call only.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Generic, Protocol, TypeVar

from tubespark.core.framed_io import (
    DEFAULT_MAX_READ_BYTES,
    Reader,
    SocketReader,
    Stream,
    open_socket,
    parse_address,
)
from tubespark.core.outage import saw_alive, unanswered
from tubespark.core.tls import TlsChannel, speaks_tls
from tubespark.errors import (
    BrokerConnectionError,
    CodecError,
    RpcTimeoutError,
    TlsError,
    TruncatedFrameError,
    TubeSparkError,
)

log = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT_S = 3.0
DEFAULT_CALL_TIMEOUT_S = 10.0
MAX_DEFERRED_FRAMES = 32
MAX_DEFERRED_BYTES = 256 * 1024
TLS_PROBE_TIMEOUT_S = 1.0
"""Longest wait of the probe that explains a plain-text connection closed unanswered (a TLS server
answers a ClientHello in milliseconds; a plain port never does, so this bounds that case)."""
SEND_FAILURE_GRACE_S = TLS_PROBE_TIMEOUT_S + 0.25
"""How long a failed send waits for the reader to report a more telling error (see ``_write``)."""

T = TypeVar("T")
E = TypeVar("E", bound=BrokerConnectionError)
RequestT = TypeVar("RequestT")
RequestT_contra = TypeVar("RequestT_contra", contravariant=True)

Decoder = Callable[[bytes], T]
"""Turns one response payload into the call's result; runs on the connection's reader thread."""


class FrameCodec(Protocol[RequestT_contra]):
    """A broker's framing, as the connection needs it.

    ``encode`` frames one request with its correlation id (a positive int below 2**31). ``read`` pulls
    exactly one frame from ``reader`` and returns its correlation id and payload; it checks every
    length the peer announces before reading it and raises a :class:`CodecError` for a frame that
    breaks the protocol (the stream is closed then).
    """

    def encode(self, correlation_id: int, request: RequestT_contra) -> bytes: ...

    def read(self, reader: Reader) -> tuple[int, bytes]: ...


class BatchSink(Protocol):
    """Where the answers of :meth:`FramedConnection.call_many` go, each with the tag its request was sent with
    (the decoded ones together, :meth:`resolve_many`; a failed call alone, :meth:`reject`).

    Called on the connection's reader thread (or the thread that closes the connection): keep it short.
    """

    def resolve_many(self, answers: list[tuple[int, Any]]) -> None:
        """Each ``(tag, decoded answer)`` of the calls whose answers one receive brought, in order: one
        hand-over (one lock, one wake-up) per receive rather than per answer."""

    def reject(self, tag: int, error: BaseException) -> None: ...


_Target = tuple[Any, Decoder[Any], int]
"""A pending call: (its Future and the decoder, tag -1) or (a BatchSink, the decoder, the caller's tag >= 0)."""


class FramedConnection(Generic[RequestT]):
    """A multiplexed connection speaking ``codec``. Thread-safe; create with :meth:`open`."""

    def __init__(self, address: str, sock: Stream, codec: FrameCodec[RequestT], *,
                 max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, caller_reads: bool = False,
                 greeted: bool = False) -> None:
        """``greeted``: the peer already sent a well-formed frame on ``sock`` (TANK's greeting Ping, read before)."""
        self.address = address
        self._sock = sock
        self._connect_timeout_s = connect_timeout_s
        self._answered = False  # a well-formed answer came back: the peer speaks our protocol on this socket
        if greeted:
            self._note_answer()
        self._last_frame_at = time.monotonic()  # when the last frame arrived (or the connection opened)
        self._codec = codec
        self._send_lock = threading.Lock()
        self._outbox: list[bytes] = []  # deferred frames, under _send_lock
        self._outbox_bytes = 0
        self._pending: dict[int, _Target] = {}
        self._pending_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closed = threading.Event()
        self._failure: TubeSparkError | None = None
        self._frames = SocketReader(sock, self._closed, max_read_bytes=max_read_bytes, peer=address)
        read_many: Callable[[Reader], list[tuple[int, bytes]]] | None = getattr(codec, "read_many", None)
        self._read_many = read_many if read_many is not None else (lambda source: [codec.read(source)])
        self._caller_lock: threading.Lock | None = None  # caller_reads: held by the thread reading the socket
        if caller_reads:
            self._caller_lock = threading.Lock()
        else:
            threading.Thread(target=self._read_loop, name=f"tubespark-rx-{address}", daemon=True).start()

    @classmethod
    def open(cls, address: str, codec: FrameCodec[RequestT], *,
             connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, io_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
             ssl_context: ssl.SSLContext | None = None,
             max_read_bytes: int = DEFAULT_MAX_READ_BYTES, caller_reads: bool = False) -> FramedConnection[RequestT]:
        """Connect to ``host:port``; raises BrokerConnectionError (ValueError for a malformed address)."""
        sock = open_socket(address, connect_timeout_s=connect_timeout_s, io_timeout_s=io_timeout_s,
                           ssl_context=ssl_context)
        return cls(address, sock, codec, max_read_bytes=max_read_bytes, connect_timeout_s=connect_timeout_s,
                   caller_reads=caller_reads)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def _note_answer(self) -> None:
        """The peer sent its first well-formed answer: the address is alive (an outage of it is waited for)."""
        self._answered = True
        saw_alive(self.address)

    def unanswered(self, error: E) -> E:
        """``error`` (a failure of this connection or of a call on it) marked with the address while the peer has
        not answered anything: :mod:`tubespark.core.outage` then treats it as an address that never answered."""
        return error if self._answered else unanswered(error, self.address)

    @property
    def quiet_s(self) -> float:
        """Seconds since the peer last sent a frame (or since the connection opened, if it never did).

        A call that timed out on a connection that is quiet for as long says the peer is silent (stalled,
        or gone without a FIN: half-open), not merely slow with this call; the owner then drops the
        connection, because a half-open socket never fails on its own and never answers again.
        """
        return time.monotonic() - self._last_frame_at

    @property
    def failure(self) -> TubeSparkError | None:
        """Why the connection closed (``None`` while open)."""
        return self._failure

    def call_async(self, request: RequestT, decode: Decoder[T], *, defer: bool = False) -> Future[T]:
        """Send one request; the future resolves to ``decode(payload)`` of its response, or an error.

        Raises BrokerConnectionError at once when the connection is already closed (the request never
        reached the wire, so it may be retried elsewhere; TlsError when TLS closed it, since a new connection
        would be refused alike), and whatever ``codec.encode`` raises.
        A failed send closes the connection and fails the future instead. With ``defer`` the frame may
        wait in the outbox (see the module docstring); frames go out in call order either way.
        """
        correlation_id = next(self._ids) & 0x7FFFFFFF
        future: _CallFuture[T] = _CallFuture(self) if self._caller_lock is None else _CallerReadFuture(self)
        with self._pending_lock:  # _fail marks the connection closed under this lock: no call is stranded
            self._raise_if_closed()
            self._pending[correlation_id] = (future, decode, -1)
        future.add_done_callback(lambda f: self._forget(correlation_id) if f.cancelled() else None)
        try:
            data = self._codec.encode(correlation_id, request)
        except BaseException:
            self._forget(correlation_id)
            raise
        with self._send_lock:
            if self._outbox or defer:
                self._outbox.append(data)
                self._outbox_bytes += len(data)
                if defer and len(self._outbox) < MAX_DEFERRED_FRAMES and self._outbox_bytes < MAX_DEFERRED_BYTES:
                    return future
            self._write(data)
        return future

    def call_many(self, requests: Sequence[RequestT], decode: Decoder[Any], sink: BatchSink,
                  tags: Sequence[int]) -> list[int]:
        """Send ``requests`` now, with what is deferred before them; ``sink`` gets each answer with its tag.

        No future per call: the answer of ``requests[i]`` goes to ``sink.resolve_many`` as
        ``(tags[i], decode(payload))`` (or ``sink.reject(tags[i], error)``, also when the connection fails).
        Returns the correlation ids, for :meth:`forget` when the caller stops waiting. Raises like
        :meth:`call_async` when the connection is closed (then no request reached the wire and the sink hears
        nothing).
        """
        encode = self._codec.encode
        return self.call_many_framed(
            lambda ids: b"".join([encode(i, request) for i, request in zip(ids, requests, strict=True)]),
            decode, sink, tags)

    def call_many_framed(self, frames: Callable[[list[int]], bytes], decode: Decoder[Any], sink: BatchSink,
                         tags: Sequence[int]) -> list[int]:
        """:meth:`call_many` for a caller that frames the whole window itself: ``frames(correlation_ids)``
        returns the wire bytes of ``len(tags)`` requests with those ids, in order (e.g. a compiled encoder
        doing a window in one call). Whatever it raises reaches the caller, and nothing is sent.

        Needs the reader thread: nobody waits on a future of these calls, so a ``caller_reads`` connection
        refuses them (TypeError)."""
        if self._caller_lock is not None:
            raise TypeError(f"call_many on {self.address}: a caller_reads connection has no reader thread for it")
        with self._pending_lock:
            self._raise_if_closed()
            ids = [next(self._ids) & 0x7FFFFFFF for _ in tags]
            pending = self._pending
            for correlation_id, tag in zip(ids, tags, strict=True):
                pending[correlation_id] = (sink, decode, tag)
        try:
            data = frames(ids)
        except BaseException:
            self.forget(ids)
            raise
        with self._send_lock:
            if self._outbox:
                self._outbox.append(data)
                data = b""
            self._write(data)
        return ids

    def forget(self, correlation_ids: Sequence[int]) -> None:
        """Drop calls of :meth:`call_many` nobody waits for any more: their late answers are ignored."""
        with self._pending_lock:
            for correlation_id in correlation_ids:
                self._pending.pop(correlation_id, None)

    def _raise_if_closed(self) -> None:
        """Under the pending lock: refuse a call on a closed connection (it never reaches the wire)."""
        if self._closed.is_set():
            if isinstance(self._failure, TlsError):  # e.g. the server refused our certificate right away:
                raise TlsError(str(self._failure)) from self._failure  # a new connection fares no better
            # a fresh, retriable error: this call never reached the wire (the cause is chained)
            raise BrokerConnectionError(f"connection to {self.address} is closed") from self._failure

    def send_deferred(self) -> None:
        """Write every deferred frame now (a no-op when there is none)."""
        with self._send_lock:
            if self._outbox:
                self._write(b"")

    def _write(self, data: bytes) -> None:
        """Send the outbox, or ``data`` when it is empty. Called under the send lock."""
        if self._outbox:
            data = b"".join(self._outbox)
            self._outbox.clear()
            self._outbox_bytes = 0
        try:
            self._sock.sendall(data)  # bounded by the socket's io timeout; a partial send poisons the stream
        except OSError as exc:
            # A peer that refuses us often says why first (a TLS alert, or a TLS port dropping plain text)
            # and resets the connection: give the reader the moment it needs to read that and fail the
            # calls with it; only the reader's own silence makes this send error the reason. Not after a
            # send that timed out: a peer that stopped reading (stalled, half-open) says nothing, and the
            # caller has already waited its whole io timeout.
            if not isinstance(exc, TimeoutError) and self._caller_lock is None:  # (caller_reads: no reader runs)
                self._closed.wait(SEND_FAILURE_GRACE_S)
            self._fail(BrokerConnectionError(f"send to {self.address} failed: {exc}"))

    def call(self, request: RequestT, decode: Decoder[T], timeout_s: float, what: str = "a call") -> T:
        """Send one request and wait at most ``timeout_s`` for its decoded response."""
        return wait(self.call_async(request, decode), timeout_s, f"{what} on {self.address}")

    def close(self) -> None:
        """Fail every pending call with BrokerConnectionError and end the connection. Idempotent.

        The socket is shut down at once (the peer sees the close) and closed by the reader thread (with
        ``caller_reads``: here, or by the thread reading it now).
        """
        self._fail(BrokerConnectionError(f"connection to {self.address} was closed"))
        lock = self._caller_lock
        if lock is not None and lock.acquire(blocking=False):
            try:
                with self._send_lock:
                    self._sock.close()
            finally:
                lock.release()

    def _forget(self, correlation_id: int) -> None:
        """Drop the entry of a call whose caller stopped waiting, so a late answer is just ignored."""
        with self._pending_lock:
            self._pending.pop(correlation_id, None)

    def _read_loop(self) -> None:
        try:
            self._guarded(self._read_responses)
        finally:
            self._fail(BrokerConnectionError(f"reader for {self.address} stopped"))  # a no-op when already failed
            # Only this thread closes the socket, once nothing reads or sends on it any more: closing it under
            # a recv or send of another thread could let that call hit a new socket given the same fd number.
            with self._send_lock:
                self._sock.close()

    def _read_responses(self) -> None:
        while not self._closed.is_set() and self._receive():
            pass

    def _receive(self) -> bool:
        """Read at least one frame (every whole one the receive brought) and hand each answer to its call;
        False when the connection failed. Every answer is decoded here, before this connection receives
        again: a codec may hand its decoders views of the receive buffer (TubeMQ's fetch answers, see
        ``tubemq/wire/blocks.py``)."""
        frames = self._read_many(self._frames)
        self._last_frame_at = time.monotonic()
        pending = self._pending
        with self._pending_lock:
            entries = [pending.pop(correlation_id, None) for correlation_id, _payload in frames]
        return self._settle_frames(frames, entries)

    def _pump(self, future: Future[Any], timeout_s: float | None) -> None:
        """``caller_reads``: read answers on this thread until ``future`` is done, the connection failed or
        ``timeout_s`` passed. One thread reads at a time; another waiting thread finds its answer settled by
        it, or reads next. A wait that runs out leaves a partly received frame buffered (nothing is taken)."""
        lock = self._caller_lock
        assert lock is not None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not future.done() and not self._closed.is_set():
            if not lock.acquire(timeout=-1 if deadline is None else max(0.0, deadline - time.monotonic())):
                return
            try:
                if future.done() or self._closed.is_set():
                    return
                self._frames.set_deadline(deadline)
                if not self._guarded(self._receive):
                    return
            except TimeoutError:  # the reader's deadline: this wait is over, the stream intact
                return
            finally:
                self._frames.set_deadline(None)
                if self._closed.is_set():
                    with self._send_lock:  # nobody reads or sends now: the socket may close
                        self._sock.close()
                lock.release()

    def _settle_frames(self, frames: list[tuple[int, bytes]], entries: list[_Target | None]) -> bool:
        """Decode the answers of one receive and hand each to its call; False when the connection failed.

        A batch's answers are handed over together (:meth:`BatchSink.resolve_many`): one lock and one
        wake-up of its sender per receive, not per answer (issue 24). Order is kept: the answers gathered
        before a rejection are handed over before it, and a frame that poisons the stream fails the calls
        of the frames after it with the same error.
        """
        sink: BatchSink | None = None
        gathered: list[tuple[int, Any]] = []
        for position, ((correlation_id, payload), entry) in enumerate(zip(frames, entries, strict=True)):
            if entry is None:
                log.debug("dropping response %d from %s: no caller waits for it", correlation_id, self.address)
                if not self._answered:  # its framing was read well: a late answer to a call of ours
                    self._note_answer()
                continue
            target, decode, tag = entry
            try:
                result = decode(payload)
            except TubeSparkError as exc:
                if sink is not None:  # what came before the failure is handed over first
                    sink.resolve_many(gathered)
                    sink, gathered = None, []
                if not isinstance(exc, CodecError):  # e.g. an RPC-level exception: this call failed, the stream is fine
                    if not self._answered:  # an RPC exception is an answer of the protocol too
                        self._note_answer()
                    _reject(entry, exc)
                    continue
                log.warning("closing connection to %s: %s", self.address, exc)  # close first, so the caller
                self._fail_with_rest(exc, entries[position:])  # never sees an open connection
                return False
            except Exception as exc:  # a decoder bug: fail this call and the connection, loudly
                if sink is not None:
                    sink.resolve_many(gathered)
                log.exception("closing connection to %s: the response decoder failed", self.address)
                self._fail_with_rest(BrokerConnectionError(f"reader for {self.address} failed: {exc!r}"),
                                     entries[position:])
                return False
            if not self._answered:  # before the caller hears of it: alive by the time its call returns
                self._note_answer()
            if tag < 0:
                _resolve(target, result)
                continue
            if target is not sink:
                if sink is not None:
                    sink.resolve_many(gathered)
                sink, gathered = target, []
            gathered.append((tag, result))
        if sink is not None:
            sink.resolve_many(gathered)
        return True

    def _fail_with_rest(self, error: TubeSparkError, rest: list[_Target | None]) -> None:
        """Fail the connection, and the calls of the frames read with the one that failed it (``rest``: their
        entries, already taken out of the pending calls, the failing frame's first)."""
        self._fail(error)
        for entry in rest:
            if entry is not None:
                _reject(entry, error)

    def _guarded(self, read: Callable[[], Any]) -> bool:
        """Run ``read`` (the reader thread's loop, or one receive of a caller), turning the stream's failures into
        the connection's; False when it failed. A caller's wait running out (the reader's ``TimeoutError``) is no
        failure."""
        try:
            return read() is not False
        except TimeoutError:
            raise
        except CodecError as exc:
            if not self._closed.is_set():
                log.warning("closing connection to %s: %s", self.address, exc)
            if isinstance(exc, TruncatedFrameError) and self._plain_text_to_tls():
                return False
            self._fail(exc if not isinstance(exc, TruncatedFrameError) else
                       BrokerConnectionError(f"connection to {self.address} lost: {exc}"))
        except BrokerConnectionError as exc:  # e.g. reset by the peer
            if not self._plain_text_to_tls():
                self._fail(exc)
        except TubeSparkError as exc:
            self._fail(exc)
        except Exception as exc:  # noqa: BLE001 - a reader must fail pending calls, never die silently
            self._fail(BrokerConnectionError(f"reader for {self.address} failed: {exc!r}"))
        return False

    def _plain_text_to_tls(self) -> bool:
        """Fail the connection with :class:`TlsError` if its peer, which closed or reset it before any
        answer, is a TLS port; return whether it did.

        A TLS server drops a connection whose first bytes are not a TLS record without a word (closed or
        reset), which on its own reads as "the server went away". Only then, once, a probe asks the same
        address for a TLS handshake (at most :data:`TLS_PROBE_TIMEOUT_S`), so the error can say what is wrong.
        """
        if self._answered or self._closed.is_set() or isinstance(self._sock, TlsChannel):
            return False
        try:
            address = parse_address(self.address)
        except ValueError:
            return False
        if not speaks_tls(address, min(self._connect_timeout_s, TLS_PROBE_TIMEOUT_S)):
            return False
        self._fail(TlsError(f"{self.address} closed the connection without answering, and it answers a TLS "
                            f"handshake: it is a TLS port and this client connected in plain text (enable TLS in "
                            f"the client, or connect to the server's plain port)"))
        return True

    def _fail(self, error: TubeSparkError) -> None:
        if isinstance(error, BrokerConnectionError):
            self.unanswered(error)  # closed, reset or silent before any answer: core.outage's "never answered"
        with self._pending_lock:
            first = not self._closed.is_set()
            if first:
                self._failure = error
                self._closed.set()
            pending, self._pending = self._pending, {}
        if first:
            with contextlib.suppress(OSError):  # wakes the reader thread, which closes the socket on its way out
                self._sock.shutdown(socket.SHUT_RDWR)
        for entry in pending.values():
            _reject(entry, error)

    def __enter__(self) -> FramedConnection[RequestT]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _resolve(future: Future[T], result: T) -> None:
    """Complete a call's future unless its caller already gave up on it (cancelled after a timeout)."""
    with contextlib.suppress(InvalidStateError):
        future.set_result(result)


def _reject(entry: _Target, error: BaseException) -> None:
    """Fail a pending call: its future unless its caller already gave up on it, or its batch's sink."""
    target, _decode, tag = entry
    if tag >= 0:
        target.reject(tag, error)
        return
    with contextlib.suppress(InvalidStateError):
        target.set_exception(error)


class _CallFuture(Future[T]):
    """A call's future, knowing its connection: :func:`wait` marks a timeout on a connection whose peer never
    answered (:meth:`FramedConnection.unanswered`)."""

    def __init__(self, conn: FramedConnection[Any]) -> None:
        super().__init__()
        self._conn = conn


class _CallerReadFuture(_CallFuture[T]):
    """A call's future on a ``caller_reads`` connection: waiting for it reads the socket on the waiting thread."""

    def result(self, timeout: float | None = None) -> T:
        if not self.done():
            started = time.monotonic()
            self._conn._pump(self, timeout)
            if not self.done() and self._conn.closed:
                # A failing connection is marked closed before its pending calls are failed (outside its lock, by
                # the failing thread): this call's failure is on its way, so wait for it within the time left.
                left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
                return super().result(timeout=left)
        return super().result(timeout=0)


def wait(future: Future[T], timeout_s: float, what: str) -> T:
    """Wait for a call's future, turning an expired wait into :class:`RpcTimeoutError`."""
    try:
        return future.result(timeout=timeout_s)
    except FutureTimeout:
        if not future.cancel() and future.done() and not future.cancelled():
            return future.result()  # the answer arrived just as the wait expired
        error = RpcTimeoutError(f"no response to {what} within {timeout_s:.1f}s")
        if isinstance(future, _CallFuture):
            future._conn.unanswered(error)  # a silent peer that never answered: core.outage's "never answered"
        raise error from None


class Closable(Protocol):
    """What :class:`ConnectionPool` needs of a connection."""

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


class ConnectionPool(Generic[C]):
    """One live connection per address, opened by ``opener(address)`` and reopened after a failure.

    Thread-safe. ``opener`` runs under the pool's lock, so two callers never open two connections to
    the same address; it must be bounded by a connect timeout.
    """

    def __init__(self, opener: Callable[[str], C]) -> None:
        self._opener = opener
        self._conns: dict[str, C] = {}
        self._opened: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, address: str) -> C:
        with self._lock:
            conn = self._conns.get(address)
            if conn is None or conn.closed:
                conn = self._opener(address)
                self._conns[address] = conn
                self._opened[address] = self._opened.get(address, 0) + 1
            return conn

    def opened(self, address: str) -> int:
        """How many connections to ``address`` this pool has opened: a server that restarted broke the last
        one, so a change tells a caller the server may have restarted (the stream engine's incarnation)."""
        with self._lock:
            return self._opened.get(address, 0)

    def current(self, address: str) -> C | None:
        """The connection to ``address`` if one is open (none is opened)."""
        with self._lock:
            conn = self._conns.get(address)
            return conn if conn is not None and not conn.closed else None

    def drop(self, address: str, conn: C | None = None) -> None:
        """Close and forget the connection to ``address`` (the next :meth:`get` opens a new one).

        With ``conn``, only if that is still the pool's connection: a caller whose call failed on a connection
        must not close the new one another thread opened meanwhile, failing the calls in flight on it (seen
        as a commit failing right after a broker came back, when the heartbeat thread's stale failure
        closed the connection the commit had just opened).
        """
        with self._lock:
            current = self._conns.get(address)
            if current is None or (conn is not None and current is not conn):
                current = None
            else:
                del self._conns[address]
        if current is not None:
            current.close()
        elif conn is not None:
            conn.close()

    def close(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()
