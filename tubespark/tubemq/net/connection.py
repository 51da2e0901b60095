"""One TCP connection to a TubeMQ master or broker, with many calls in flight.

TubeMQ's binding of :class:`tubespark.core.framed.FramedConnection`: a call is a method id and a
service type plus a protobuf request, wrapped in the RPC envelope and sent in one frame whose serial
number matches the response to the call, so a producer can pipeline SendMessage requests on one
socket. The response envelope is decoded on the connection's reader thread: an RPC exception fails
just that call (:class:`RpcError`), an undecodable response poisons the stream (the server does not
resynchronise either), so the connection closes and every pending call fails with the codec error.
Timeouts, the reader thread, TLS and the pool are core's.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from google.protobuf.message import Message

from tubespark.core import framed
from tubespark.core.framed import DEFAULT_CALL_TIMEOUT_S, DEFAULT_CONNECT_TIMEOUT_S, FramedConnection, wait
from tubespark.core.framed_io import Stream, open_socket, parse_address
from tubespark.tubemq.wire.blocks import Blocks
from tubespark.tubemq.wire.envelope import decode_response, decode_response_view, encode_request, parse_message
from tubespark.tubemq.wire.frame import FRAMING

__all__ = ["DEFAULT_CALL_TIMEOUT_S", "DEFAULT_CONNECT_TIMEOUT_S", "Connection", "ConnectionPool", "parse_address",
           "wait"]

M = TypeVar("M", bound=Message)
T = TypeVar("T")


def _response_decoder(parse: Callable[[bytes], T], payload: bytes | Blocks) -> T:
    """Response envelope -> ``parse(data)``; raises RpcError for an exception, ProtobufDecodeError for garbage."""
    _method, data = decode_response(payload)
    return parse(data)


def _response_view_decoder(parse: Callable[[bytes | memoryview | Blocks], T], payload: bytes | Blocks) -> T:
    """:func:`_response_decoder` handing ``parse`` a view of the payload's data where it can (no copy): a
    :class:`Blocks` for an answer left in its frame's blocks, which ``parse`` uses before it returns."""
    _method, data = decode_response_view(payload)
    return parse(data)


class Connection:
    """A multiplexed RPC connection to a master or broker. Thread-safe; create with :meth:`open`."""

    def __init__(self, address: str, sock: Stream, *,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, caller_reads: bool = False) -> None:
        self._framed: FramedConnection[bytes] = FramedConnection(address, sock, FRAMING,
                                                                 connect_timeout_s=connect_timeout_s,
                                                                 caller_reads=caller_reads)
        self.address = address

    @classmethod
    def open(cls, address: str, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
             io_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
             ssl_context: ssl.SSLContext | None = None, caller_reads: bool = False) -> Connection:
        """Connect within ``connect_timeout_s``; every later send/receive is bounded by ``io_timeout_s``.
        ``caller_reads``: answers are read by the thread that waits for them (see
        :class:`~tubespark.core.framed.FramedConnection`), for a connection one thread uses a call at a time."""
        return cls(address, open_socket(address, connect_timeout_s=connect_timeout_s, io_timeout_s=io_timeout_s,
                                        ssl_context=ssl_context), connect_timeout_s=connect_timeout_s,
                   caller_reads=caller_reads)

    @property
    def closed(self) -> bool:
        return self._framed.closed

    @property
    def quiet_s(self) -> float:
        """See :attr:`tubespark.core.framed.FramedConnection.quiet_s`."""
        return self._framed.quiet_s

    def call_async(self, method: int, service_type: int, request: Message, response_cls: type[M],
                   timeout_s: float = DEFAULT_CALL_TIMEOUT_S, *, defer: bool = False) -> Future[M]:
        """Send one request; the future resolves to the parsed response or an error.

        ``timeout_s`` also goes into the envelope: the server drops a request older than that. ``defer``:
        see :meth:`tubespark.core.framed.FramedConnection.call_async`.
        """
        return self.call_async_parsed(method, service_type, request, functools.partial(parse_message, response_cls),
                                      timeout_s, defer=defer)

    def call_async_parsed(self, method: int, service_type: int, request: Message, parse: Callable[[bytes], T],
                          timeout_s: float = DEFAULT_CALL_TIMEOUT_S, *, defer: bool = False) -> Future[T]:
        """:meth:`call_async` with the response message's bytes handed to ``parse`` (on the reader thread)
        instead of a protobuf class: a wire decoder of its own, e.g. the fetch's compiled one."""
        payload = encode_request(method, service_type, request, max(1, int(timeout_s * 1000)))
        return self.call_encoded_async(payload, parse, defer=defer)

    def call_encoded_async(self, envelope: bytes, parse: Callable[[bytes], T], *, defer: bool = False) -> Future[T]:
        """Send a request whose envelope the caller encoded (the SendMessage twins: ``wire/send.py``); its
        timeout is the one inside the envelope."""
        return self._framed.call_async(envelope, functools.partial(_response_decoder, parse), defer=defer)

    def call_encoded_view_async(self, envelope: bytes,
                                parse: Callable[[bytes | memoryview | Blocks], T]) -> Future[T]:
        """:meth:`call_encoded_async` for a ``parse`` that takes the response data as a view of the frame's
        payload, or of its blocks where they arrived (the fetch: half a MiB not copied per call; see
        :mod:`~tubespark.tubemq.wire.blocks`)."""
        return self._framed.call_async(envelope, functools.partial(_response_view_decoder, parse))

    def call_framed_many(self, frames: Callable[[list[int]], bytes], parse: Callable[[bytes], Any],
                         sink: framed.BatchSink, tags: Sequence[int]) -> list[int]:
        """Send a window of requests the caller frames itself (``frames(serial numbers)`` -> the wire bytes of
        all of them, e.g. :func:`~tubespark.tubemq.wire.send.encode_send_frames`), now; each answer's whole
        payload, envelope included, is parsed by ``parse`` (e.g.
        :func:`~tubespark.tubemq.wire.send.parse_send_response`: one compiled call per answer) and goes to
        ``sink`` with its tag (no future per call: :meth:`tubespark.core.framed.FramedConnection.call_many`).
        """
        return self._framed.call_many_framed(frames, parse, sink, tags)

    def forget(self, correlation_ids: Sequence[int]) -> None:
        """Ignore the late answers of these :meth:`call_encoded_many` calls."""
        self._framed.forget(correlation_ids)

    def send_deferred(self) -> None:
        """Write the deferred requests now."""
        self._framed.send_deferred()

    def call(self, method: int, service_type: int, request: Message, response_cls: type[M],
             timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> M:
        """Send one request and wait at most ``timeout_s`` for its response."""
        future = self.call_async(method, service_type, request, response_cls, timeout_s)
        return wait(future, timeout_s, f"method {method} on {self.address}")

    def close(self) -> None:
        self._framed.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _open_mapped(address_map: dict[str, str], address: str, **kwargs: Any) -> Connection:
    """Open ``address``, or the address ``address_map`` gives for it (a broker reachable elsewhere than listed)."""
    return Connection.open(address_map.get(address, address), **kwargs)


class ConnectionPool(framed.ConnectionPool[Connection]):
    """One live TubeMQ connection per address, reopened after a failure. Thread-safe.

    ``address_map`` sends a listed address elsewhere (``brokerAddressMap``): the pool stays keyed by the
    listed address, and only the socket goes to the mapped one."""

    def __init__(self, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 io_timeout_s: float = DEFAULT_CALL_TIMEOUT_S, ssl_context: ssl.SSLContext | None = None,
                 address_map: dict[str, str] | None = None, caller_reads: bool = False) -> None:
        super().__init__(functools.partial(_open_mapped, dict(address_map or {}), connect_timeout_s=connect_timeout_s,
                                           io_timeout_s=io_timeout_s, ssl_context=ssl_context,
                                           caller_reads=caller_reads))

    def drop_if_quiet(self, address: str, quiet_s: float) -> bool:
        """Drop the connection to ``address`` if its peer sent nothing for ``quiet_s`` (see ``quiet_s``);
        whether it did. A call that timed out on a connection that still answers others leaves it up."""
        conn = self.current(address)
        if conn is None or conn.quiet_s < quiet_s:
            return False
        self.drop(address, conn)
        return True
