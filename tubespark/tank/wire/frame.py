"""TANK frames: ``msgId:u8 | payloadLen:u32 | payload`` (docs/tank/protocol.md#frames).

:data:`FRAMING` hands TANK's framing to :class:`tubespark.core.framed.FramedConnection`: the call's
correlation id is the request id inside the payload (docs/tank/protocol.md#request-ids), and Pings the
broker sends between responses are skipped here, so the connection's reader thread only ever sees
answers to calls (docs/tank/protocol.md#ping).
"""

from __future__ import annotations

from typing import Protocol

from tubespark.core.framed_io import Reader
from tubespark.errors import FrameTooLargeError
from tubespark.tank.errors import TankProtocolError
from tubespark.tank.wire.codes import RESPONSE_TYPES, MsgType
from tubespark.tank.wire.primitives import U32

HEADER_BYTES = 5
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024 + 64 * 1024
"""Largest payload read from a broker: a fetch answer carries at most the requested fetch sizes (tubespark
asks for one partition at a time, at most 64 MiB) plus headers."""
MAX_PINGS_IN_A_ROW = 1024
"""Pings skipped while waiting for one response before the peer counts as broken (a real broker sends one
per connection and then a heartbeat now and then)."""


def encode_frame(msg_id: int, payload: bytes) -> bytes:
    if len(payload) > 0xFFFFFFFF:
        raise FrameTooLargeError(f"payload of {len(payload)} bytes does not fit a TANK frame")
    return bytes((msg_id,)) + U32.pack(len(payload)) + payload


def read_frame(reader: Reader, *, max_payload: int = MAX_PAYLOAD_BYTES) -> tuple[int, bytes]:
    """One frame as ``(msgId, payload)``; the announced length is checked before the payload is read."""
    header = reader.read_exactly(HEADER_BYTES)
    msg_id = header[0]
    (length,) = U32.unpack_from(header, 1)
    if length > max_payload:
        raise FrameTooLargeError(f"TANK frame 0x{msg_id:02x} announces {length} bytes (limit {max_payload})")
    return msg_id, reader.read_exactly(length)


def response_request_id(msg_id: int, payload: bytes) -> int:
    """The request id a response echoes: after ``headerLen`` for a fetch, first otherwise."""
    offset = 4 if msg_id == MsgType.CONSUME else 0
    if len(payload) < offset + 4:
        raise TankProtocolError(f"response 0x{msg_id:02x} of {len(payload)} bytes is too short for a request id")
    return int(U32.unpack_from(payload, offset)[0])


class TankRequest(Protocol):
    """A request the connection can send: its frame type and its payload for a given request id."""

    @property
    def msg_id(self) -> int: ...  # read-only: the requests are frozen dataclasses

    def payload(self, request_id: int) -> bytes: ...


class TankFraming:
    """TANK's :class:`~tubespark.core.framed.FrameCodec`."""

    def encode(self, correlation_id: int, request: TankRequest) -> bytes:
        return encode_frame(request.msg_id, request.payload(correlation_id))

    def read(self, reader: Reader) -> tuple[int, bytes]:
        for _ in range(MAX_PINGS_IN_A_ROW):
            msg_id, payload = read_frame(reader)
            if msg_id == MsgType.PING:
                if payload:
                    raise TankProtocolError(f"a Ping carried {len(payload)} payload bytes")
                continue
            if msg_id not in RESPONSE_TYPES:
                raise TankProtocolError(f"unexpected frame type 0x{msg_id:02x} from the broker")
            return response_request_id(msg_id, payload), payload
        raise TankProtocolError(f"{MAX_PINGS_IN_A_ROW} Pings in a row and no response")


FRAMING = TankFraming()
