"""A scripted, in-process fake TubeMQ master and broker for the client-layer unit tests.

This is a TEST DOUBLE. It exists because a real TubeMQ server cannot be scripted to produce the states
these tests need on demand: a partition held by another client that lets go after a moment, data
removed by retention below a group's offset, a fetch batch of an exact size that straddles a planned
end, a master that forgets a consumer (411), a rebalance event at a chosen moment, one 503 and then
success. The real-cluster tests in ``tests/integration`` stay the judge of what the server does; this
fake copies only the rules from ``docs/tubemq/protocol.md`` (master calls, broker calls, index offsets) that the client
code depends on, and nothing more.

Like kafka-python's in-memory mock broker it is a real TCP server on 127.0.0.1 (port 0) that speaks
tubespark's own codec (``read_frame`` / ``decode_request`` / ``encode_response``), so the client code
under test runs unchanged, sockets and all.

Broker (:class:`FakeBroker`): topics whose partitions each have their own dense store (``numPartitions=1``,
ids ``store*10000``), so message ``k`` sits at index offset ``28*k``; retention is a raised ``min``.
Per ``(group, topic, partition)`` it keeps the stored offset, the in-flight delta and the holder's
client id. Register (31) answers 410 when another client holds the partition, clamps ``currOffset``
to ``[min, max]`` and resets the in-flight delta; unregister (32) answers 411 for an unknown
registration and commits the delta only when ``readStatus`` is 0. GetMessage works in auto-commit
mode (``lastPackConsumed`` folds the previous delta in first) and manual mode, resets a position
below ``min`` to ``min``, answers 404 at ``max`` and returns at most :attr:`FakeBroker.batch_size`
messages. CommitOffset folds the delta in (401 when not registered). SendMessage appends.

Master (:class:`FakeMaster`): consumer register / heartbeat / close and producer register /
heartbeat / close. A producer's layout spans every broker given (``FakeMaster(broker, others=[...])``)
except those :meth:`FakeMaster.release`-d, as a real master drops a broker whose heartbeat timed out.
Rebalance events are queued with :meth:`FakeMaster.push_event`; like the real master it hands out one
event at a time and the next only after the client acknowledged the previous one
(``event.rebalanceId`` in a heartbeat request).

Both: :meth:`inject` makes the next ``times`` calls of a method answer an error code, and
``requests`` records every parsed request so tests check what the client actually sent.
:meth:`fault` scripts what happens to the *answer* of the next calls of a method after the fake has
handled them (so the broker's state moved, as a real broker's would): ``"reset"`` cuts the
connection instead of answering, ``"silent"`` never answers (the connection stays open),
``"slow"`` answers after ``delay_s`` and ``"serial"`` answers under another serial number.
:meth:`not_ready` makes the next calls answer ``ServerNotReadyException`` without handling them, as a
restarted 2.4.0 broker does while its port accepts connections before its RPC server runs. Every socket
has a short timeout and every thread is a daemon that ends with :meth:`close`, so nothing can hang.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from google.protobuf.message import Message

from tubespark.errors import CodecError, TruncatedFrameError
from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE, PARTITION_STORE_BASE, EventStatus, Method
from tubespark.tubemq.wire.envelope import decode_request, encode_exception, encode_response, parse_message
from tubespark.tubemq.wire.formats import PartitionRef, subscribe_info
from tubespark.tubemq.wire.frame import encode_frame, read_frame
from tubespark.tubemq.wire.message import OutgoingMessage, checksum
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb
from tubespark.tubemq.wire.pb import master_service_pb2 as mpb

POLL_S = 0.05
"""Socket timeout of every fake-side socket: how fast the fakes notice :meth:`_Server.close`."""

WAIT_S = 5.0
"""Upper bound of every :func:`wait_until` in the tests."""


def wait_until(predicate: Callable[[], object], timeout_s: float = WAIT_S, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.01)


def fast_settings(**overrides: float) -> ClientSettings:
    """Client settings with short, bounded waits for talking to the fakes."""
    values = {"connect_timeout_s": 1.0, "request_timeout_s": 2.0, "heartbeat_interval_s": 0.05, **overrides}
    return ClientSettings(**values)


class _Link:
    """The fake's side of one client connection: ``read_exactly`` for the frame decoder, and replies."""

    def __init__(self, sock: socket.socket, stopped: threading.Event) -> None:
        self.sock = sock
        self._stopped = stopped
        self._buf = bytearray()

    def read_exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            if self._stopped.is_set():
                raise TruncatedFrameError("fake server stopped")
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:
                raise TruncatedFrameError(f"fake server socket failed: {exc}") from exc
            if not chunk:
                raise TruncatedFrameError("client closed")
            self._buf += chunk
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def send(self, serial: int, envelope: bytes) -> None:
        with contextlib.suppress(OSError):  # the client went away; the test asserts on the client side
            self.sock.sendall(encode_frame(serial, envelope))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def _failure(response_cls: type[Message], code: int, text: str) -> Message:
    fields = response_cls.DESCRIPTOR.fields_by_name
    response = response_cls(errCode=code, errMsg=text, **({"success": False} if "success" in fields else {}))
    if "brokerCheckSum" in response_cls.DESCRIPTOR.fields_by_name:
        response.brokerCheckSum = -1
    return response


class _Server:
    """TCP accept loop + per-connection request loop; subclasses map method ids to handlers."""

    handlers: ClassVar[dict[int, tuple[type[Message], type[Message], str]]] = {}

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.unsupported: set[int] = set()
        """Methods answered FATAL "Unsupported method ID" though handled (a server without them)."""
        self.requests: list[tuple[int, Message]] = []
        self._faults: dict[int, list[tuple[int, str]]] = {}
        self._answer_faults: dict[int, list[tuple[str, float]]] = {}
        self._not_ready = 0  # calls left to answer ServerNotReadyException (not_ready)
        self._stopped = threading.Event()
        self._links: list[_Link] = []
        self.accepted = 0
        """Connections accepted so far (a client that opens one per partition shows here)."""
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self._server.settimeout(POLL_S)
        self.host, self.port = "127.0.0.1", self._server.getsockname()[1]
        self.address = f"{self.host}:{self.port}"
        threading.Thread(target=self._accept_loop, name=f"fake-{self.port}", daemon=True).start()

    # --- scripting -------------------------------------------------------------------------------

    def inject(self, method: int, code: int, *, times: int = 1, text: str = "injected by test") -> None:
        """The next ``times`` calls of ``method`` answer ``success=false, errCode=code``."""
        with self.lock:
            self._faults.setdefault(int(method), []).extend([(code, text)] * times)

    ANSWER_FAULTS = ("reset", "silent", "slow", "serial")

    def fault(self, method: int, action: str, *, times: int | None = 1, delay_s: float = 0.0) -> None:
        """The answers to the next ``times`` calls of ``method`` (``None``: every call until :meth:`heal`)
        suffer ``action``: reset, silent, slow (by ``delay_s``) or serial. The call is handled first."""
        if action not in self.ANSWER_FAULTS:
            raise ValueError(f"unknown fault {action!r}; one of {self.ANSWER_FAULTS}")
        with self.lock:
            entry = (action, delay_s)
            self._answer_faults[int(method)] = [entry] * times if times is not None else [entry, None]  # type: ignore[list-item]

    NOT_READY = ("org.apache.inlong.tubemq.corerpc.exception.ServerNotReadyException",
                 "IPC server unable to read call parameters:RpcServer is not running yet")

    def not_ready(self, times: int) -> None:
        """The next ``times`` calls (of any method) answer ``ServerNotReadyException``, unhandled."""
        with self.lock:
            self._not_ready += times

    def heal(self, method: int | None = None) -> None:
        """End scripted answer faults (of ``method``, or all)."""
        with self.lock:
            if method is None:
                self._answer_faults.clear()
            else:
                self._answer_faults.pop(int(method), None)

    def _answer_fault(self, method: int) -> tuple[str, float] | None:
        """The fault for this answer, if any (called under the lock)."""
        queue = self._answer_faults.get(method)
        if not queue:
            return None
        if queue[-1] is None:  # persistent: the marker stays until heal()
            return queue[0]
        return queue.pop(0)

    def requests_of(self, method: int) -> list[Message]:
        with self.lock:
            return [request for m, request in self.requests if m == method]

    # --- serving ---------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                sock, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(POLL_S)
            link = _Link(sock, self._stopped)
            with self.lock:
                self._links.append(link)
                self.accepted += 1
            threading.Thread(target=self._serve, args=(link,), daemon=True).start()

    def _serve(self, link: _Link) -> None:
        try:
            while not self._stopped.is_set():
                serial, payload = read_frame(link)
                decoded = decode_request(payload)
                if decoded.method not in self.handlers or decoded.method in self.unsupported:  # as the real
                    # server (or an older one): FATAL, connection stays
                    link.send(serial, encode_exception("java.lang.Exception", "Unsupported method ID", fatal=True))
                    continue
                with self.lock:
                    not_ready, self._not_ready = self._not_ready > 0, max(0, self._not_ready - 1)
                if not_ready:
                    link.send(serial, encode_exception(*self.NOT_READY))
                    continue
                request_cls, response_cls, name = self.handlers[decoded.method]
                request = parse_message(request_cls, decoded.request)
                with self.lock:
                    self.requests.append((decoded.method, request))
                    faults = self._faults.get(decoded.method)
                    try:
                        response = (_failure(response_cls, *faults.pop(0)) if faults
                                    else getattr(self, name)(request))
                    except Exception as exc:  # noqa: BLE001 - a bug in the fake must fail the test loudly
                        link.send(serial, encode_exception("FakeServerBug", repr(exc)))
                        continue
                    answer_fault = self._answer_fault(decoded.method)
                if answer_fault is not None:
                    action, delay_s = answer_fault
                    if action == "reset":
                        return  # handled, never answered: the finally below cuts the connection
                    if action == "silent":
                        continue
                    if action == "slow":
                        self._stopped.wait(delay_s)
                    if action == "serial":
                        serial = (serial + 7919) & 0x7FFFFFFF
                link.send(serial, encode_response(decoded.method, response.SerializeToString()))
        except (CodecError, OSError):
            pass  # the client went away or sent garbage: drop the connection, the client side asserts
        finally:
            link.close()

    def drop_connections(self) -> None:
        """Cut every open client connection (the server keeps listening), as a network blip would."""
        with self.lock:
            links, self._links = list(self._links), []
        for link in links:
            link.close()

    def close(self) -> None:
        self._stopped.set()
        self._server.close()
        with self.lock:
            links = list(self._links)
        for link in links:
            link.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass
class _Store:
    """One dense partition store: ``messages[k]`` sits at offset ``28*k``; retention raises ``min_offset``."""

    messages: list[bpb.TransferedMessage] = field(default_factory=list)
    min_offset: int = 0

    @property
    def max_offset(self) -> int:
        return INDEX_RECORD_SIZE * len(self.messages)


@dataclass
class _Registration:
    stored: int
    holder: str | None = None
    in_flight: int = 0


class FakeBroker(_Server):
    """Broker ``broker_id`` with dense single-partition stores. See the module docstring for the rules."""

    handlers: ClassVar[dict[int, tuple[type[Message], type[Message], str]]] = {
        Method.BROKER_REGISTER: (bpb.RegisterRequestC2B, bpb.RegisterResponseB2C, "_register"),
        Method.BROKER_HEARTBEAT: (bpb.HeartBeatRequestC2B, bpb.HeartBeatResponseB2C, "_heartbeat"),
        Method.GET_MESSAGE: (bpb.GetMessageRequestC2B, bpb.GetMessageResponseB2C, "_get_message"),
        Method.COMMIT_OFFSET: (bpb.CommitOffsetRequestC2B, bpb.CommitOffsetResponseB2C, "_commit"),
        Method.SEND_MESSAGE: (bpb.SendMessageRequestP2B, bpb.SendMessageResponseB2P, "_send"),
    }

    def __init__(self, broker_id: int = 1, *, batch_size: int = 4) -> None:
        super().__init__()
        self.broker_id = broker_id
        self.batch_size = batch_size
        self.stores: dict[tuple[str, int], _Store] = {}
        self.groups: dict[tuple[str, str, int], _Registration] = {}
        self._message_ids = iter(range(1_000_001, 10**12))

    # --- data ------------------------------------------------------------------------------------

    @property
    def info(self) -> str:
        """``brokerId:ip:port`` as the master reports it."""
        return f"{self.broker_id}:{self.host}:{self.port}"

    def add_topic(self, topic: str, stores: int = 1) -> list[PartitionRef]:
        with self.lock:
            for store in range(stores):
                self.stores.setdefault((topic, store * PARTITION_STORE_BASE), _Store())
        return self.partitions(topic)

    def partitions(self, topic: str) -> list[PartitionRef]:
        with self.lock:
            ids = sorted(pid for t, pid in self.stores if t == topic)
        return [self.ref(topic, pid) for pid in ids]

    def ref(self, topic: str, partition_id: int = 0) -> PartitionRef:
        return PartitionRef(self.broker_id, topic, partition_id, self.host, self.port)

    def append(self, ref: PartitionRef, *bodies: bytes | OutgoingMessage) -> list[int]:
        """Store messages as a producer would; returns their index offsets."""
        offsets = []
        with self.lock:
            store = self.stores[(ref.topic, ref.partition_id)]
            for body in bodies:
                message = body if isinstance(body, OutgoingMessage) else OutgoingMessage(body)
                payload, flag = message.encode()
                offsets.append(store.max_offset)
                store.messages.append(bpb.TransferedMessage(messageId=next(self._message_ids),
                                                            checkSum=checksum(payload), payLoadData=payload,
                                                            flag=flag))
        return offsets

    def bodies(self, ref: PartitionRef) -> list[bytes]:
        """Raw payloads stored in ``ref`` (no attributes were used where tests call this)."""
        with self.lock:
            return [m.payLoadData for m in self.stores[(ref.topic, ref.partition_id)].messages]

    def expire(self, ref: PartitionRef, below: int) -> None:
        """Retention: everything below ``below`` is gone, the store's min rises to it."""
        with self.lock:
            self.stores[(ref.topic, ref.partition_id)].min_offset = below

    def lose(self, ref: PartitionRef, keep: int) -> None:
        """A broker crash before a flush: only the first ``keep`` messages survive, the store's max falls
        and the next messages are appended at the lost offsets again."""
        with self.lock:
            del self.stores[(ref.topic, ref.partition_id)].messages[keep:]

    def bounds(self, ref: PartitionRef) -> tuple[int, int]:
        with self.lock:
            store = self.stores[(ref.topic, ref.partition_id)]
            return store.min_offset, store.max_offset

    def stored_offset(self, group: str, ref: PartitionRef) -> int | None:
        with self.lock:
            reg = self.groups.get((group, ref.topic, ref.partition_id))
            return None if reg is None else reg.stored

    def set_stored_offset(self, group: str, ref: PartitionRef, offset: int) -> None:
        with self.lock:
            self._reg(group, ref.topic, ref.partition_id, 0).stored = offset

    def holder(self, group: str, ref: PartitionRef) -> str | None:
        with self.lock:
            reg = self.groups.get((group, ref.topic, ref.partition_id))
            return None if reg is None else reg.holder

    def hold(self, group: str, ref: PartitionRef, client_id: str | None) -> None:
        """Make ``client_id`` (``None``: nobody) the holder, as if it had registered (or timed out)."""
        with self.lock:
            self._reg(group, ref.topic, ref.partition_id, 0).holder = client_id

    # --- handlers (called under self.lock) -------------------------------------------------------

    def _reg(self, group: str, topic: str, pid: int, read_status: int) -> _Registration:
        key = (group, topic, pid)
        if key not in self.groups:
            store = self.stores[(topic, pid)]
            self.groups[key] = _Registration(store.min_offset if read_status == 0 else store.max_offset)
        return self.groups[key]

    def _register(self, req: bpb.RegisterRequestC2B) -> bpb.RegisterResponseB2C:
        store = self.stores.get((req.topicName, req.partitionId))
        if store is None:
            return _failure(bpb.RegisterResponseB2C, 403, f"topic {req.topicName} not existed")
        key = (req.groupName, req.topicName, req.partitionId)
        reg = self.groups.get(key)
        if req.opType == 32:
            if reg is None or reg.holder is None:
                return _failure(bpb.RegisterResponseB2C, 411, "partition not registered")
            if reg.holder != req.clientId:
                return _failure(bpb.RegisterResponseB2C, 412, f"partition held by {reg.holder}")
            if req.readStatus == 0:
                reg.stored += reg.in_flight
            reg.in_flight, reg.holder = 0, None
            return bpb.RegisterResponseB2C(success=True, errCode=200, errMsg="OK", currOffset=reg.stored,
                                           maxOffset=store.max_offset)
        if reg is not None and reg.holder not in (None, req.clientId):
            return _failure(bpb.RegisterResponseB2C, 410, f"partition occupied by {reg.holder}")
        reg = self._reg(*key, req.readStatus)
        reg.holder, reg.in_flight = req.clientId, 0
        if req.HasField("currOffset") and req.currOffset >= 0:
            reg.stored = min(max(req.currOffset, store.min_offset), store.max_offset)
        if req.readStatus == 2:
            reg.stored = store.max_offset
        return bpb.RegisterResponseB2C(success=True, errCode=200, errMsg="OK", currOffset=reg.stored,
                                       maxOffset=store.max_offset)

    def _check_holder(self, group: str, topic: str, pid: int, client_id: str) -> int:
        reg = self.groups.get((group, topic, pid))
        if reg is None or reg.holder is None:
            return 411
        return 412 if reg.holder != client_id else 200

    def _heartbeat(self, req: bpb.HeartBeatRequestC2B) -> bpb.HeartBeatResponseB2C:
        failures = []
        for text in req.partitionInfo:
            ref = PartitionRef.parse_wire(text)
            code = self._check_holder(req.groupName, ref.topic, ref.partition_id, req.clientId)
            if code != 200:
                failures.append(f"{code}:{text}")
        return bpb.HeartBeatResponseB2C(success=True, errCode=200, errMsg="OK", hasPartFailure=bool(failures),
                                        failureInfo=failures)

    def _get_message(self, req: bpb.GetMessageRequestC2B) -> bpb.GetMessageResponseB2C:
        code = self._check_holder(req.groupName, req.topicName, req.partitionId, req.clientId)
        if code != 200:
            return _failure(bpb.GetMessageResponseB2C, code, "not registered by this client")
        store = self.stores[(req.topicName, req.partitionId)]
        reg = self.groups[(req.groupName, req.topicName, req.partitionId)]
        if req.manualCommitOffset:
            position = reg.stored + reg.in_flight
        else:
            if req.lastPackConsumed:
                reg.stored += reg.in_flight
            reg.in_flight = 0
            position = reg.stored
        if position < store.min_offset:  # retention removed it: silently reset to min and commit
            reg.stored, reg.in_flight, position = store.min_offset, 0, store.min_offset
        if position >= store.max_offset:
            return _failure(bpb.GetMessageResponseB2C, 404, "The request offset reached maxOffset!")
        first = position // INDEX_RECORD_SIZE
        batch = store.messages[first:first + self.batch_size]
        reg.in_flight += INDEX_RECORD_SIZE * len(batch)
        return bpb.GetMessageResponseB2C(success=True, errCode=200, errMsg="OK", messages=batch, currOffset=position,
                                         maxOffset=store.max_offset)

    def _commit(self, req: bpb.CommitOffsetRequestC2B) -> bpb.CommitOffsetResponseB2C:
        if self._check_holder(req.groupName, req.topicName, req.partitionId, req.clientId) != 200:
            return _failure(bpb.CommitOffsetResponseB2C, 401, "The partition not registered by consumers")
        store = self.stores[(req.topicName, req.partitionId)]
        reg = self.groups[(req.groupName, req.topicName, req.partitionId)]
        delta, reg.in_flight = reg.in_flight // INDEX_RECORD_SIZE * INDEX_RECORD_SIZE, 0
        if not req.HasField("lastPackConsumed") or req.lastPackConsumed:
            reg.stored += delta
        return bpb.CommitOffsetResponseB2C(success=True, errCode=200, errMsg="OK", currOffset=reg.stored,
                                           maxOffset=store.max_offset)

    def _send(self, req: bpb.SendMessageRequestP2B) -> bpb.SendMessageResponseB2P:
        store = self.stores.get((req.topicName, req.partitionId))
        if store is None:
            return _failure(bpb.SendMessageResponseB2P, 403, f"topic {req.topicName} not existed")
        if req.checkSum != -1 and req.checkSum != checksum(req.data):
            return _failure(bpb.SendMessageResponseB2P, 403, "checksum mismatch")
        offset, message_id = store.max_offset, next(self._message_ids)
        store.messages.append(bpb.TransferedMessage(messageId=message_id, checkSum=checksum(req.data),
                                                    payLoadData=req.data, flag=req.flag))
        return bpb.SendMessageResponseB2P(success=True, errCode=200, errMsg="OK", messageId=message_id,
                                          appendTime=int(time.time() * 1000), appendOffset=offset)


@dataclass
class _Event:
    rebalance_id: int
    op_type: int
    parts: list[PartitionRef]


class FakeMaster(_Server):
    """Consumer and producer master calls for the topics of one :class:`FakeBroker` (and ``others``); the
    client-balance register and partition metadata answer every broker's topics as configured, a released
    broker's as not served (``unsupported`` turns them off, as on a master without them)."""

    handlers: ClassVar[dict[int, tuple[type[Message], type[Message], str]]] = {
        Method.CONSUMER_REGISTER: (mpb.RegisterRequestC2M, mpb.RegisterResponseM2C, "_c_register"),
        Method.CONSUMER_HEARTBEAT: (mpb.HeartRequestC2M, mpb.HeartResponseM2C, "_c_heartbeat"),
        Method.CONSUMER_CLOSE: (mpb.CloseRequestC2M, mpb.CloseResponseM2C, "_c_close"),
        Method.PRODUCER_REGISTER: (mpb.RegisterRequestP2M, mpb.RegisterResponseM2P, "_p_register"),
        Method.PRODUCER_HEARTBEAT: (mpb.HeartRequestP2M, mpb.HeartResponseM2P, "_p_heartbeat"),
        Method.PRODUCER_CLOSE: (mpb.CloseRequestP2M, mpb.CloseResponseM2P, "_p_close"),
        Method.CONSUMER_REGISTER_V2: (mpb.RegisterRequestC2MV2, mpb.RegisterResponseM2CV2, "_c_register_v2"),
        Method.CONSUMER_GET_PART_META: (mpb.GetPartMetaRequestC2M, mpb.GetPartMetaResponseM2C, "_c_part_meta"),
    }

    def __init__(self, broker: FakeBroker, *, max_msg_size: int = 1024 * 1024,
                 others: list[FakeBroker] | None = None) -> None:
        super().__init__()
        self.broker = broker
        self.brokers = [broker, *(others or [])]
        self.released: set[int] = set()  # broker ids left out of producer layouts
        self.max_msg_size = max_msg_size
        self.consumers: dict[str, mpb.RegisterRequestC2M] = {}
        self.consumers_v2: dict[str, mpb.RegisterRequestC2MV2] = {}
        self.acks: list[mpb.EventProto] = []
        self._events: list[_Event] = []
        self._outstanding: _Event | None = None
        self._next_id = 1000

    def push_event(self, op_type: int, parts: list[PartitionRef]) -> int:
        """Queue a rebalance event for the (single) consumer; returns its rebalanceId."""
        with self.lock:
            self._next_id += 1
            self._events.append(_Event(self._next_id, op_type, list(parts)))
            return self._next_id

    def idle(self) -> bool:
        """Every queued event was delivered and acknowledged."""
        with self.lock:
            return not self._events and self._outstanding is None

    # --- consumer --------------------------------------------------------------------------------

    def _c_register(self, req: mpb.RegisterRequestC2M) -> mpb.RegisterResponseM2C:
        self.consumers[req.clientId] = req
        return mpb.RegisterResponseM2C(success=True, errCode=200, errMsg="OK", notAllocated=True)

    def _c_heartbeat(self, req: mpb.HeartRequestC2M) -> mpb.HeartResponseM2C:
        if req.clientId not in self.consumers:
            return _failure(mpb.HeartResponseM2C, 411, "consumer not registered")
        if req.HasField("event") and req.event.rebalanceId > 0:
            self.acks.append(req.event)
            if self._outstanding is not None and self._outstanding.rebalance_id == req.event.rebalanceId:
                self._outstanding = None
        response = mpb.HeartResponseM2C(success=True, errCode=200, errMsg="OK")
        if self._outstanding is None and self._events:
            event = self._outstanding = self._events.pop(0)
            response.event.CopyFrom(mpb.EventProto(
                rebalanceId=event.rebalance_id, opType=event.op_type, status=EventStatus.PROCESSING,
                subscribeInfo=[subscribe_info(req.clientId, req.groupName, p) for p in event.parts]))
        return response

    def _c_close(self, req: mpb.CloseRequestC2M) -> mpb.CloseResponseM2C:
        self.consumers.pop(req.clientId, None)
        self.consumers_v2.pop(req.clientId, None)
        return mpb.CloseResponseM2C(success=True, errCode=200, errMsg="OK")

    # --- client-balance (V2): the configured partitions -------------------------------------------------

    def _c_register_v2(self, req: mpb.RegisterRequestC2MV2) -> mpb.RegisterResponseM2CV2:
        self.consumers_v2[req.clientId] = req
        return mpb.RegisterResponseM2CV2(errCode=200, errMsg="OK", brokerConfigId=1,
                                         brokerConfigList=[b.info for b in self.brokers])

    def _c_part_meta(self, req: mpb.GetPartMetaRequestC2M) -> mpb.GetPartMetaResponseM2C:
        """Every broker holding the member's topics, released or not (statusId 0 then), as the real master
        answers from its configuration: ``topic#brokerId:numTopicStores:numPartitions:statusId``."""
        member = self.consumers_v2.get(req.clientId)
        if member is None:
            return _failure(mpb.GetPartMetaResponseM2C, 411, "Not found client in group")  # type: ignore[return-value]
        infos = []
        for topic in member.topicList:
            items = [f"{b.broker_id}:{len(b.partitions(topic))}:1:{0 if b.broker_id in self.released else 1}"
                     for b in self.brokers if b.partitions(topic)]
            if items:
                infos.append(f"{topic}#{','.join(items)}")
        return mpb.GetPartMetaResponseM2C(errCode=200, errMsg="OK", brokerConfigId=1, topicMetaInfoId=1,
                                          topicMetaInfoList=infos, brokerConfigList=[b.info for b in self.brokers])

    def forget(self, client_id: str) -> None:
        """Drop a consumer as a restarted master would: its next heartbeat gets 411."""
        with self.lock:
            self.consumers.pop(client_id, None)

    # --- producer --------------------------------------------------------------------------------

    def release(self, broker: FakeBroker) -> None:
        """Leave ``broker``'s partitions out of producer layouts from the next heartbeat on."""
        with self.lock:
            self.released.add(broker.broker_id)

    def _p_register(self, req: mpb.RegisterRequestP2M) -> mpb.RegisterResponseM2P:
        return mpb.RegisterResponseM2P(success=True, errCode=200, errMsg="OK", brokerCheckSum=1,
                                       brokerInfos=[b.info for b in self.brokers])

    def _p_heartbeat(self, req: mpb.HeartRequestP2M) -> mpb.HeartResponseM2P:
        infos = []
        for topic in req.topicList:
            items = [f"{b.broker_id}:1:{len(b.partitions(topic))}" for b in self.brokers
                     if b.partitions(topic) and b.broker_id not in self.released]
            if items:
                infos.append(f"{topic}#{','.join(items)}#{self.max_msg_size}")
        return mpb.HeartResponseM2P(success=True, errCode=200, errMsg="OK", brokerCheckSum=1, topicInfos=infos,
                                    brokerInfos=[b.info for b in self.brokers])

    def _p_close(self, req: mpb.CloseRequestP2M) -> mpb.CloseResponseM2P:
        return mpb.CloseResponseM2P(success=True, errCode=200, errMsg="OK")
