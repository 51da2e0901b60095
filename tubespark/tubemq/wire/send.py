"""SendMessage, the sink's hot path, in two twins: the request envelope out, the answer in.

A producer sends one SendMessage per message, so building ``SendMessageRequestP2B`` and the envelope's
three protobufs (6 us in Python) and parsing the answer (another 6-7 us with the envelope) were a large
part of a row's cost. The compiled twin (:mod:`~tubespark.tubemq.wire.twin`) writes the same bytes and
reads the same fields; the pure-Python twin stays the reference, and anything the compiled one is not sure
of (a value out of range, a string that is not UTF-8, an unusual encoding) goes to it.
``tests/unit/tubemq/test_send_twins.py`` compares both byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from tubespark.tubemq.wire import twin
from tubespark.tubemq.wire.constants import (
    BEGIN_TOKEN,
    MAX_BLOCK_SIZE,
    MAX_BLOCKS_PER_FRAME,
    PROTOCOL_VERSION,
    Method,
    ServiceType,
)
from tubespark.tubemq.wire.envelope import encode_request, parse_message
from tubespark.tubemq.wire.frame import encode_frame
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb


class SendRequest(NamedTuple):
    """One message's SendMessageRequestP2B fields, encoded per (re-)send by :meth:`envelope` (the broker's
    visit token may change between two tries). ``msg_type``/``msg_time`` empty: not sent.

    A named tuple, not a frozen dataclass: one is built per message, and a frozen dataclass's ``__init__``
    (a ``object.__setattr__`` per field) cost 1 us of a sink row's CPU."""

    client_id: str
    topic: str
    partition_id: int
    data: bytes
    flag: int
    checksum: int
    sent_addr: int
    msg_type: str = ""
    msg_time: str = ""

    def envelope(self, timeout_ms: int, auth: tuple[int, str] | None = None) -> bytes:
        """The request envelope of the call (``auth``: visit token and signed token, or None for no authInfo)."""
        compiled = twin.native()
        if compiled is not None:
            try:
                encoded: bytes = compiled.encode_send(
                    self.client_id, self.topic, self.partition_id, self.data, self.flag, self.checksum,
                    self.sent_addr, self.msg_type or None, self.msg_time or None, auth, Method.SEND_MESSAGE,
                    ServiceType.BROKER_WRITE, PROTOCOL_VERSION, timeout_ms)
                return encoded
            except (OverflowError, UnicodeEncodeError, TypeError, ValueError):
                pass  # the pure-Python twin raises the error that belongs to it (or encodes it)
        return encode_request(Method.SEND_MESSAGE, ServiceType.BROKER_WRITE, self.message(auth), timeout_ms)

    def message(self, auth: tuple[int, str] | None = None) -> bpb.SendMessageRequestP2B:
        """The protobuf request (the pure-Python twin's way, and what tests compare with)."""
        request = bpb.SendMessageRequestP2B(clientId=self.client_id, topicName=self.topic,
                                            partitionId=self.partition_id, data=self.data, flag=self.flag,
                                            checkSum=self.checksum, sentAddr=self.sent_addr)
        if self.msg_type:
            request.msgType = self.msg_type
        if self.msg_time:
            request.msgTime = self.msg_time
        if auth is not None:
            request.authInfo.CopyFrom(bpb.AuthorizedInfo(visitAuthorizedToken=auth[0], authAuthorizedToken=auth[1]))
        return request


def encode_send_frames(requests: Sequence[SendRequest], serials: Sequence[int], timeout_ms: int,
                       auth: tuple[int, str] | None = None) -> bytes:
    """The TubeMQ frames of a window of SendMessage calls, concatenated for one socket write: request ``i``
    enveloped as :meth:`SendRequest.envelope` and framed with serial number ``serials[i]`` as
    :func:`~tubespark.tubemq.wire.frame.encode_frame`. The compiled twin does the whole window in one call
    (two Python calls per message cost 1.2 us of a 100 B message's CPU); anything it is not sure of goes to
    the pure-Python twin, which gives the same bytes or raises the typed error."""
    compiled = twin.native()
    if compiled is not None:
        try:
            encoded: bytes = compiled.encode_send_frames(
                list(requests), list(serials), auth, Method.SEND_MESSAGE, ServiceType.BROKER_WRITE,
                PROTOCOL_VERSION, timeout_ms, BEGIN_TOKEN, MAX_BLOCK_SIZE, MAX_BLOCKS_PER_FRAME)
            return encoded
        except (OverflowError, UnicodeEncodeError, TypeError, ValueError):
            pass  # the pure-Python twin raises the error that belongs to it (or encodes it)
    if len(requests) != len(serials):
        raise ValueError(f"{len(requests)} requests but {len(serials)} serial numbers")
    return b"".join([encode_frame(serial, request.envelope(timeout_ms, auth))
                     for request, serial in zip(requests, serials, strict=True)])


class SendAnswer(NamedTuple):
    """What a producer reads of a SendMessageResponseB2P (the field names :func:`check` reads are protobuf's);
    a named tuple for the cost, as :class:`SendRequest`."""

    success: bool
    errCode: int  # noqa: N815 - protobuf's names
    errMsg: str  # noqa: N815
    messageId: int  # noqa: N815
    appendTime: int  # noqa: N815
    appendOffset: int  # noqa: N815


def parse_send_answer(data: bytes) -> SendAnswer:
    """SendMessageResponseB2P bytes -> :class:`SendAnswer`; ProtobufDecodeError for garbage (parse_message's)."""
    compiled = twin.native()
    if compiled is not None:
        fields = compiled.decode_send_answer(data)
        if fields is not None:
            return SendAnswer._make(fields)
    answer = parse_message(bpb.SendMessageResponseB2P, data)
    return SendAnswer(answer.success, answer.errCode, answer.errMsg, answer.messageId, answer.appendTime,
                      answer.appendOffset)
