"""Typed consumer calls to TubeMQ brokers: register, heartbeat, fetch, commit, unregister.

One :class:`BrokerClient` keeps one connection per broker address and reopens it after a failure.
Business errors come back as typed exceptions from :mod:`tubespark.errors`, so callers branch on
``retriable`` and the exception class, not on codes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

from google.protobuf.message import Message

from tubespark.errors import BrokerConnectionError, TubeSparkError
from tubespark.tubemq.client.common import ClientSettings, Reply, check
from tubespark.tubemq.net.connection import Connection, wait
from tubespark.tubemq.wire.blocks import Blocks
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE, Method, ReadStatus, RegisterOp, ServiceType
from tubespark.tubemq.wire.envelope import encode_request
from tubespark.tubemq.wire.fetch import Columns, FetchReply, ValueArena, parse_fetch_reply
from tubespark.tubemq.wire.formats import PartitionRef
from tubespark.tubemq.wire.message import ReceivedMessage
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb

M = TypeVar("M", bound=Message)
R = TypeVar("R", bound=Reply)

FILTERED_READS_FROM_MEMORY = 303
_PARSE_FETCH: dict[bool, Callable[[bytes | memoryview | Blocks], FetchReply]] = {
    True: parse_fetch_reply, False: functools.partial(parse_fetch_reply, verify=False)}
_FETCH_REQUESTS_KEPT = 256  # encoded GetMessage requests a client keeps (one per partition and group read)


@dataclass(frozen=True)
class Position:
    """What the broker says after a register or commit: the group's stored offset and the index max."""

    offset: int
    max_offset: int


@dataclass(frozen=True)
class Fetch:
    """One GetMessage result. ``start`` is the index offset the batch was read from."""

    start: int
    max_offset: int
    reply: FetchReply

    @property
    def messages(self) -> Sequence[bpb.TransferedMessage]:
        return self.reply.messages

    def columns(self, verify: bool = True) -> Columns:
        """The batch's messages as columns, each with its index offset: ``start + 28*k`` for the k-th.

        Exact when the batch's records are contiguous in the store; otherwise (several partitions in
        one store, a filter skipped records) a lower bound that still increases within the partition.
        Decoded by the compiled twin when there is one (see :mod:`tubespark.tubemq.wire.fetch`).
        """
        return self.reply.columns(self.start, verify=verify, step=INDEX_RECORD_SIZE)

    def decode(self, verify: bool = True) -> list[ReceivedMessage]:
        """:meth:`columns` as one :class:`ReceivedMessage` per message."""
        return self.columns(verify).messages()


class PendingCall(Generic[R]):
    """A call sent to a broker whose answer is awaited later: :meth:`result` or :meth:`cancel`."""

    def __init__(self, client: BrokerClient, part: PartitionRef, method: Method, future: Future[R], what: str,
                 conn: Connection) -> None:
        self._client, self._part, self._method, self._future, self._what = client, part, method, future, what
        self._conn = conn
        self._deadline = time.monotonic() + client.settings.request_timeout_s

    def result(self) -> R:
        """The checked response (typed errors as the blocking calls raise them); waits until the call's
        timeout, counted from when it was sent."""
        address = self._part.broker.address
        try:
            response = wait(self._future, max(0.0, self._deadline - time.monotonic()),
                            f"method {int(self._method)} on {address}")
        except BrokerConnectionError:
            self._client.pool.drop(address, self._conn)
            raise
        return check(response, self._what)

    def cancel(self) -> None:
        """Stop waiting: a late answer is dropped by the connection."""
        self._future.cancel()


class PendingFetch:
    """A GetMessage in flight (see :meth:`BrokerClient.fetch_async`)."""

    def __init__(self, call: PendingCall[FetchReply]) -> None:
        self._call = call

    def result(self) -> Fetch:
        """The batch; NoDataError (404) when the group's position reached the index max."""
        response = self._call.result()
        return Fetch(response.currOffset, response.maxOffset, response)

    def cancel(self) -> None:
        self._call.cancel()


class BrokerClient:
    """Consumer-side broker RPCs for one client id. Thread-safe."""

    def __init__(self, client_id: str, settings: ClientSettings | None = None, *, visit_token: int = 0) -> None:
        self.client_id = client_id
        self.settings = settings or ClientSettings()
        self.visit_token = visit_token
        self.pool = self.settings.connection_pool()
        self._fetch_requests: dict[tuple[str, int, str, bool, bool], bytes] = {}

    def _call(self, part: PartitionRef, method: Method, request: Message, response_cls: type[M]) -> M:
        address = part.broker.address
        conn = self.pool.get(address)
        try:
            return conn.call(method, ServiceType.BROKER_READ, request, response_cls, self.settings.request_timeout_s)
        except BrokerConnectionError:
            self.pool.drop(address, conn)  # a silent or broken connection: the next call opens a new one
            raise

    def _send(self, part: PartitionRef, method: Method, request: Message, parse: Callable[[bytes], R],
              what: str) -> PendingCall[R]:
        address = part.broker.address
        conn = self.pool.get(address)
        try:
            future = conn.call_async_parsed(method, ServiceType.BROKER_READ, request, parse,
                                            self.settings.request_timeout_s)
        except BrokerConnectionError:
            self.pool.drop(address, conn)
            raise
        return PendingCall(self, part, method, future, what, conn)

    def _send_encoded(self, part: PartitionRef, method: Method, envelope: bytes,
                      parse: Callable[[bytes | memoryview | Blocks], R], what: str) -> PendingCall[R]:
        """:meth:`_send` of an envelope encoded already, ``parse`` taking the answer's data as a view (or its
        frame's blocks where they arrived: :mod:`~tubespark.tubemq.wire.blocks`)."""
        address = part.broker.address
        conn = self.pool.get(address)
        try:
            future = conn.call_encoded_view_async(envelope, parse)
        except BrokerConnectionError:
            self.pool.drop(address, conn)
            raise
        return PendingCall(self, part, method, future, what, conn)

    def register(self, part: PartitionRef, group: str, *, offset: int | None = None,
                 read_status: ReadStatus = ReadStatus.FROM_STORED_OR_MIN,
                 filters: list[str] | tuple[str, ...] = (), session_key: str = "") -> Position:
        """Register to consume ``part`` for ``group``; ``offset`` >= 0 seeks the group's stored offset there."""
        request = bpb.RegisterRequestC2B(
            opType=RegisterOp.REGISTER, clientId=self.client_id, groupName=group, topicName=part.topic,
            partitionId=part.partition_id, readStatus=read_status, filterCondStr=list(filters))
        if filters:
            # The read-path switch: hundreds digit for plain reads, units digit for filtered ones, 3 = memory
            # cache too. The server default 301 serves filtered reads from flushed files only (tens of
            # seconds behind); 303 lets them see fresh data like unfiltered reads.
            request.qryPriorityId = FILTERED_READS_FROM_MEMORY
        if offset is not None and offset >= 0:
            request.currOffset = offset
        if session_key:
            request.sessionKey = session_key
        self.settings.add_broker_auth(request, self.visit_token)
        response = check(self._call(part, Method.BROKER_REGISTER, request, bpb.RegisterResponseB2C),
                         f"register {part.key} for group {group}")
        return Position(response.currOffset, response.maxOffset)

    def unregister(self, part: PartitionRef, group: str, *, consumed: bool = False) -> None:
        """Release ``part``; ``consumed`` commits the in-flight delta first, otherwise it is discarded."""
        request = bpb.RegisterRequestC2B(
            opType=RegisterOp.UNREGISTER, clientId=self.client_id, groupName=group, topicName=part.topic,
            partitionId=part.partition_id, readStatus=0 if consumed else 1)
        self.settings.add_broker_auth(request, self.visit_token)
        check(self._call(part, Method.BROKER_REGISTER, request, bpb.RegisterResponseB2C),
              f"unregister {part.key} for group {group}")

    def heartbeat(self, parts: list[PartitionRef], group: str) -> dict[str, int]:
        """Keep registrations alive on one broker; returns ``{partition key: errCode}`` for failed ones."""
        if not parts:
            return {}
        request = bpb.HeartBeatRequestC2B(clientId=self.client_id, groupName=group, readStatus=0,
                                          partitionInfo=[p.wire_string() for p in parts])
        self.settings.add_broker_auth(request, self.visit_token)
        response = check(self._call(parts[0], Method.BROKER_HEARTBEAT, request, bpb.HeartBeatResponseB2C),
                         f"heartbeat to broker {parts[0].broker.address}")
        failed: dict[str, int] = {}
        for item in response.failureInfo:
            code, _, rest = item.partition(":")
            try:
                failed[PartitionRef.parse_wire(rest).key] = int(code)
            except (ValueError, TubeSparkError):  # a malformed entry must not stop the heartbeat
                continue
        return failed

    def fetch(self, part: PartitionRef, group: str, *, last_consumed: bool = True,
              manual_commit: bool = False, verify: bool = True, arena: ValueArena | None = None) -> Fetch:
        """One GetMessage. Raises NoDataError (404) when the group's position reached the index max."""
        return self.fetch_async(part, group, last_consumed=last_consumed, manual_commit=manual_commit,
                                verify=verify, arena=arena).result()

    def fetch_async(self, part: PartitionRef, group: str, *, last_consumed: bool = True,
                    manual_commit: bool = False, verify: bool = True,
                    arena: ValueArena | None = None) -> PendingFetch:
        """Send one GetMessage now and take its answer later (``result()``, as :meth:`fetch` returns it).

        The broker may move the group's position as soon as it handles the request, whether or not the
        answer is ever taken. ``verify``: what the batch's :meth:`Fetch.columns` will be asked, so that the
        compiled twin checks the checksums in the one walk it makes of the answer when it arrives (any other
        call still gets its answer, by a second walk). ``arena``: where that walk puts the messages' values
        (:class:`~tubespark.tubemq.wire.fetch.ValueArena`: one reader's consecutive fetches share a buffer).
        """
        parse = _PARSE_FETCH[verify] if arena is None else functools.partial(parse_fetch_reply, verify=verify,
                                                                              arena=arena)
        return PendingFetch(self._send_encoded(part, Method.GET_MESSAGE,
                                               self._fetch_request(part, group, last_consumed, manual_commit),
                                               parse, f"fetch {part.key} for group {group}"))

    def _fetch_request(self, part: PartitionRef, group: str, last_consumed: bool, manual_commit: bool) -> bytes:
        """The GetMessage request envelope, encoded once per partition, group and flags: a range read sends the
        same bytes hundreds of times (the frame's serial number is what differs, and the frame adds it)."""
        key = (part.topic, part.partition_id, group, last_consumed, manual_commit)
        envelope = self._fetch_requests.get(key)
        if envelope is None:
            request = bpb.GetMessageRequestC2B(clientId=self.client_id, partitionId=part.partition_id,
                                               groupName=group, topicName=part.topic,
                                               lastPackConsumed=last_consumed, manualCommitOffset=manual_commit)
            envelope = encode_request(Method.GET_MESSAGE, ServiceType.BROKER_READ, request,
                                      max(1, int(self.settings.request_timeout_s * 1000)))
            if len(self._fetch_requests) >= _FETCH_REQUESTS_KEPT:
                self._fetch_requests.clear()
            self._fetch_requests[key] = envelope
        return envelope

    def commit(self, part: PartitionRef, group: str, *, consumed: bool = True) -> Position:
        """CommitOffset: fold the in-flight delta into the stored offset (or drop it)."""
        request = bpb.CommitOffsetRequestC2B(clientId=self.client_id, topicName=part.topic,
                                             partitionId=part.partition_id, groupName=group,
                                             lastPackConsumed=consumed)
        response = check(self._call(part, Method.COMMIT_OFFSET, request, bpb.CommitOffsetResponseB2C),
                         f"commit {part.key} for group {group}")
        return Position(response.currOffset, response.maxOffset)

    def close(self) -> None:
        self.pool.close()
