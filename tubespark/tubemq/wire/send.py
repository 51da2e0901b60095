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
from zlib import crc32

from tubespark.tubemq.wire import twin
from tubespark.tubemq.wire.constants import (
    BEGIN_TOKEN,
    MAX_BLOCK_SIZE,
    MAX_BLOCKS_PER_FRAME,
    PROTOCOL_VERSION,
    Method,
    ServiceType,
)
from tubespark.tubemq.wire.envelope import decode_response, encode_request, parse_message
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


def build_requests(client_id: str, topic: str, sent_addr: int, payloads: Sequence[bytes], partition_ids: Sequence[int],
                   flags: Sequence[int] | None = None, msg_types: Sequence[str] | None = None,
                   msg_times: Sequence[str] | None = None) -> list[SendRequest]:
    """The :class:`SendRequest` of each of a batch's encoded ``payloads`` (checksum included), to partition
    ``partition_ids[i]``; ``flags``/``msg_types``/``msg_times`` None: 0 / not sent for every one.

    The sink's per-batch step (:meth:`~tubespark.tubemq.client.producer.Producer.prepare_many`): the compiled
    twin builds the whole list in one call (a checksum call and a tuple per row cost about 0.3 us of a
    100 B row's CPU in Python); anything it is not sure of (a payload that is not ``bytes``, a column that
    is not a list) goes to the pure-Python twin, which gives the same tuples or raises."""
    compiled = twin.native()
    if compiled is not None:
        try:
            built: list[SendRequest] = compiled.build_requests(SendRequest, client_id, topic, sent_addr, payloads,
                                                               partition_ids, flags, msg_types, msg_times)
            return built
        except (TypeError, ValueError):
            pass  # the pure-Python twin raises the error that belongs to it (or builds them)
    count = len(payloads)
    columns = (partition_ids, flags, msg_types, msg_times)
    if any(column is not None and len(column) != count for column in columns):
        raise ValueError(f"build_requests: {count} payloads but columns of other lengths")
    flag_column: Sequence[int] = flags if flags is not None else [0] * count
    type_column: Sequence[str] = msg_types if msg_types is not None else [""] * count
    time_column: Sequence[str] = msg_times if msg_times is not None else [""] * count
    new = tuple.__new__
    return [new(SendRequest, (client_id, topic, partition_id, payload, flag, crc32(payload) & 0x7FFFFFFF,
                              sent_addr, msg_type, msg_time))
            for partition_id, payload, flag, msg_type, msg_time
            in zip(partition_ids, payloads, flag_column, type_column, time_column, strict=True)]


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


def parse_send_response(payload: bytes) -> SendAnswer:
    """A SendMessage call's whole response payload (the envelope around SendMessageResponseB2P) ->
    :class:`SendAnswer`: :func:`~tubespark.tubemq.wire.envelope.decode_response` then :func:`parse_send_answer`,
    which are its pure-Python twin and raise its errors (RpcError for an exception, ProtobufDecodeError for
    garbage). The compiled twin does both in one call: on the producer's reader thread the two steps and
    their Python calls were a quarter of a message's CPU (issue 24)."""
    compiled = twin.native()
    if compiled is not None:
        answer: SendAnswer | None = compiled.decode_send_response(payload, SendAnswer)
        if answer is not None:
            return answer
    return parse_send_answer(decode_response(payload)[1])
