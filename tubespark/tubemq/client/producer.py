"""A TubeMQ producer: master registration and heartbeats, partition layout, pipelined SendMessage.

The master only tells a producer where partitions are through *heartbeat* replies (``topicInfos``),
so :meth:`Producer.publish` heartbeats right away and waits until every topic has partitions. Sends
are pipelined: up to ``max_in_flight`` requests per broker connection are outstanding at once, each
matched to its reply by serial number. :meth:`Producer.flush` waits for every reply and re-sends
what failed with a retriable error, so nothing is dropped silently: after the retries the error is
raised.

:meth:`Producer.send_prepared` sends a whole list of messages (:meth:`Producer.prepare`) the same way
without a future per message (:mod:`~tubespark.tubemq.client.batch_send`): the sink's path.

Several brokers: a broker that fails a send (unreachable, connection lost, no answer in time, or 503
"service unavailable") is *shielded* for ``shield_s``: messages the producer places itself (round-robin,
or by a key hash) go to the other brokers' partitions meanwhile, and a failed one is re-sent there. The
master takes a dead broker's partitions out of the layout only after its broker heartbeat timeout (at
once for a graceful stop), so without this every send in that window would fail. The Java producer
does the same (its "unavailable broker" map, 50 s). Both transitions are logged. A message sent to a
partition the caller named stays on that partition.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass

from tubespark.core.outage import ride_out
from tubespark.core.retry import RetryPolicy, call_with_retry, poll
from tubespark.errors import (
    BrokerConnectionError,
    BrokerUnavailableError,
    MessageFormatError,
    MessageTooLargeError,
    RpcTimeoutError,
    TubeSparkError,
    UnknownTopicError,
)
from tubespark.tubemq.client.batch_send import BatchSend, Prepared
from tubespark.tubemq.client.common import (
    ClientSettings,
    check,
    during_election,
    ipv4_as_int32,
    local_ip,
    new_client_id,
)
from tubespark.tubemq.client.deployed import check_deployed, elected_moments_ago, no_partition_listed
from tubespark.tubemq.errors import NoMasterAvailableError, NotRegisteredError
from tubespark.tubemq.net.connection import ConnectionPool, wait
from tubespark.tubemq.wire.constants import Method
from tubespark.tubemq.wire.errcodes import ErrCode
from tubespark.tubemq.wire.formats import BrokerInfo, PartitionRef, TopicLayout
from tubespark.tubemq.wire.message import OutgoingMessage, checksum
from tubespark.tubemq.wire.pb import master_service_pb2 as mpb
from tubespark.tubemq.wire.send import SendAnswer, SendRequest, build_requests, parse_send_answer

log = logging.getLogger(__name__)

DEFAULT_MAX_MSG_SIZE = 1024 * 1024
DEFAULT_SHIELD_S = 30.0
"""How long a broker that failed a send gets no new messages placed by the producer (Java: 50 s)."""


@dataclass(frozen=True)
class SendResult:
    partition: PartitionRef
    message_id: int
    append_offset: int
    append_time_ms: int


@dataclass
class _InFlight:
    """A queued message, encoded once, and its current send; ``future`` is None after a failed send.

    ``placed``: the producer chose the partition (round-robin, or by ``key_hash``), so a re-send may go to
    another broker's partition; otherwise the caller named it and it stays.
    """

    request: SendRequest
    partition: PartitionRef
    future: Future[SendResult] | None
    placed: bool = False
    key_hash: int | None = None


def unsendable(payloads: Sequence[bytes], limit: int) -> int:
    """The index of the first of ``payloads`` that is empty or over ``limit`` bytes (what
    :meth:`Producer.prepare` refuses), -1 when every one can be sent: two C-speed passes, no loop in Python."""
    if not payloads:
        return -1
    sizes = list(map(len, payloads))
    if min(sizes) and max(sizes) <= limit:
        return -1
    return next(i for i, size in enumerate(sizes) if not size or size > limit)


class Producer:
    """Publish messages to TubeMQ topics. Use as a context manager, or call start() and close().

    Args:
        masters: ``host:port`` list (comma string or list) of the TubeMQ masters.
        settings: timeouts and credentials.
        max_in_flight: requests outstanding per broker connection before ``send_async`` blocks.
        max_retries: re-sends of a message after a retriable error (busy broker, lost connection).
        shield_s: how long a broker that failed a send is left out when the producer places messages.
        outage_s: after its retries, how long a send whose brokers are all unreachable (down, restarting,
            no partition of the topic listed any more) is tried again (:mod:`tubespark.core.outage`).
    """

    def __init__(self, masters: str | Sequence[str], settings: ClientSettings | None = None, *,
                 max_in_flight: int = 64, max_retries: int = 3, client_id: str | None = None,
                 shield_s: float = DEFAULT_SHIELD_S, outage_s: float = 0.0) -> None:
        self.settings = settings or ClientSettings()
        self.client_id = client_id or new_client_id("producer")
        self.max_in_flight = max_in_flight
        self.max_retries = max_retries
        self.shield_s = shield_s
        self.outage_s = outage_s
        self._served: set[str] = set()  # topics the master listed partitions of to this producer at some point
        self._shielded: dict[int, float] = {}  # broker id -> monotonic time its shield ends
        self._probing: set[int] = set()  # shield ended, no send acknowledged since: log its return once
        self._master = self.settings.master_channel(masters)
        self._host = local_ip()
        self._sent_addr = ipv4_as_int32(self._host)
        self._topics: set[str] = set()
        self._layouts: dict[str, TopicLayout] = {}
        self._brokers: dict[int, BrokerInfo] = {}
        self._broker_checksum = -1
        self._visit_token = 0
        self._cluster_max_msg_size = DEFAULT_MAX_MSG_SIZE
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._pool = self.settings.connection_pool()
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._in_flight: list[_InFlight] = []
        self._deferred: set[str] = set()  # broker addresses whose connection holds deferred requests
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None

    # --- master session -------------------------------------------------------------------------

    def start(self) -> Producer:
        """Register with the master, waiting out a master election (only standbys answering)."""
        call_with_retry(self._register, RetryPolicy(timeout_s=self.settings.master_election_s, backoff_s=0.5,
                                                    max_backoff_s=2.0, retry_on=during_election),
                        what=f"register producer {self.client_id}")
        self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                                  name=f"tubespark-producer-hb-{self.client_id}")
        self._heartbeat_thread.start()
        return self

    def publish(self, topics: Iterable[str], *, timeout_s: float = 60.0) -> None:
        """Declare topics to publish and wait until the master reports partitions for each of them.

        Raises UnknownTopicError naming the topics that still have no publishable partition.
        """
        requested = set(topics)
        with self._lock:
            self._topics.update(requested)

        def missing() -> list[str]:
            # only the topics asked for now: one unknown topic must not fail every later publish()
            return sorted(t for t in requested if not self._layouts.get(t) or not self._layouts[t].partitions)

        probed: set[str] = set()
        doubted: list[UnknownTopicError] = []  # a "not deployed" asked again (below): raised if the wait ends

        def heartbeat_and_check() -> bool:
            try:
                self._heartbeat()  # the master reports partitions only in heartbeat replies
            except NoMasterAvailableError as exc:
                if not exc.electing:
                    raise
                log.info("publish of %s waits for the master group's election: %s", sorted(requested), exc)
                return False
            unlisted = [t for t in missing() if t not in probed and t not in self._served]
            if unlisted:  # not listed: not deployed fails now, any other cause is waited for (deployed.py)
                probed.update(unlisted)
                try:
                    check_deployed(self._master, unlisted, self.settings)
                    doubted.clear()
                except UnknownTopicError as exc:
                    if elected_moments_ago(exc, self._master, self.settings):
                        log.info("publish of %s: %s; the master group changed its active master in the last "
                                 "%.0f s, so this is asked again until then", unlisted, exc,
                                 self.settings.master_election_s)
                        probed.difference_update(unlisted)
                        doubted[:] = [exc]
                        return False
                    with self._lock:
                        self._topics.difference_update(t for t in unlisted if t not in self._layouts)
                    raise
            return not missing()

        if poll(heartbeat_and_check, RetryPolicy(timeout_s=timeout_s, backoff_s=0.25, max_backoff_s=1.0),
                what=f"partitions of topic(s) {', '.join(sorted(requested))}"):
            return
        absent = missing()
        with self._lock:  # stop asking the master about topics that never had partitions
            self._topics.difference_update(t for t in absent if t not in self._layouts)
        if doubted:
            raise doubted[0]
        # the master lists the partitions of serving brokers only: a broker that died or went offline
        # takes its partitions out of the list, exactly like a topic that was never deployed; one this
        # producer saw served is the first case
        if all(t in self._served for t in absent):
            raise BrokerUnavailableError(f"topic {', '.join(absent)} has no partition to serve on the TubeMQ cluster "
                                         f"of master {self._master.active_address} now (none listed within "
                                         f"{timeout_s:.0f} s), though it had: its brokers are down or restarting; "
                                         f"start them, or wait and write again")
        raise no_partition_listed(absent, self._master.active_address, timeout_s)

    def partitions(self, topic: str) -> tuple[PartitionRef, ...]:
        layout = self._layouts.get(topic)
        if layout is None:
            raise UnknownTopicError(ErrCode.FORBIDDEN,
                                    f"topic {topic!r} was not published by this producer; call publish()")
        return layout.partitions

    def has_partitions(self, topic: str) -> bool:
        """True when the master listed at least one partition of ``topic`` to this producer."""
        layout = self._layouts.get(topic)
        return bool(layout and layout.partitions)

    def max_message_size(self, topic: str) -> int:
        layout = self._layouts.get(topic)
        return (layout.max_msg_size if layout and layout.max_msg_size else self._cluster_max_msg_size)

    def _heartbeat(self) -> None:
        with self._lock:
            topics = sorted(self._topics)
            request = mpb.HeartRequestP2M(clientId=self.client_id, brokerCheckSum=self._broker_checksum,
                                          hostName=self._host, topicList=topics,
                                          appdConfig=mpb.ApprovedClientConfig(configId=-2))
        self.settings.add_master_auth(request)
        try:
            response = check(self._master.call(Method.PRODUCER_HEARTBEAT, request, mpb.HeartResponseM2P),
                             "producer heartbeat")
        except NotRegisteredError:  # the master forgot us (restart, timeout): register again
            self._register()
            return
        self._update_brokers(response.brokerCheckSum, response.brokerInfos)
        self._update_auth(response)
        moves = []
        with self._lock:
            for text in response.topicInfos:
                layout = TopicLayout.parse(text, self._brokers)
                before = self._layouts.get(layout.topic)
                if before is not None and before.partitions:
                    moves.append((layout.topic, _brokers_of(before), _brokers_of(layout)))
                self._layouts[layout.topic] = layout
                if layout.partitions:
                    self._served.add(layout.topic)
        for topic, before_brokers, now_brokers in moves:
            _log_placement(topic, before_brokers, now_brokers)

    def _register(self) -> None:
        request = mpb.RegisterRequestP2M(clientId=self.client_id, topicList=sorted(self._topics),
                                         brokerCheckSum=-1, hostName=self._host, jdkVersion="python",
                                         appdConfig=mpb.ApprovedClientConfig(configId=-2))
        self.settings.add_master_auth(request)
        response = check(self._master.call(Method.PRODUCER_REGISTER, request, mpb.RegisterResponseM2P),
                         "producer register")
        self._update_brokers(response.brokerCheckSum, response.brokerInfos)
        self._update_auth(response)
        if response.HasField("appdConfig") and response.appdConfig.maxMsgSize > 0:
            self._cluster_max_msg_size = response.appdConfig.maxMsgSize

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_interval_s):
            try:
                self._heartbeat()
            except TubeSparkError as exc:
                log.warning("producer heartbeat failed: %s", exc)

    def _update_brokers(self, broker_checksum: int, infos: Iterable[str]) -> None:
        infos = list(infos)
        if not infos:
            return
        with self._lock:
            # over TLS the master lists the brokers' TLS ports (docs/tubemq/tls.md)
            port = self.settings.default_broker_port
            self._brokers = {b.broker_id: b for b in (BrokerInfo.parse(text, port) for text in infos)}
            self._broker_checksum = broker_checksum

    def _update_auth(self, response: mpb.RegisterResponseM2P | mpb.HeartResponseM2P) -> None:
        if response.HasField("authorizedInfo"):
            self._visit_token = response.authorizedInfo.visitAuthorizedToken

    # --- sending --------------------------------------------------------------------------------

    def choose_partition(self, topic: str, key_hash: int | None = None) -> PartitionRef:
        """Where the producer places a message of ``topic``, avoiding shielded brokers while others serve.

        Without ``key_hash``: round-robin over the partitions, from a random start (as the Java client
        does). With one: partition ``key_hash % n`` of the topic's ``n`` partitions, so equal hashes land
        together; if that partition's broker is shielded, ``key_hash % m`` of the ``m`` partitions of the
        brokers still serving (equal hashes still land together for as long as the same brokers serve).
        """
        partitions = self.partitions(topic)
        if not partitions:  # published, but the master lists none now: its brokers are away
            raise BrokerUnavailableError(f"no partition of topic {topic!r} is served now (its brokers are down or "
                                         f"restarting); start them, or wait and write again")
        live = self._serving(partitions) if self._shielded else partitions  # no lock per row while none is
        if key_hash is not None:
            chosen = partitions[key_hash % len(partitions)]
            return chosen if chosen in live else live[key_hash % len(live)]
        counter = self._round_robin.get(topic)
        if counter is None:
            with self._lock:
                counter = self._round_robin.setdefault(topic, itertools.count(random.randrange(len(partitions))))
        return live[next(counter) % len(live)]  # next() of a count is atomic (one C call)

    def _serving(self, partitions: tuple[PartitionRef, ...]) -> tuple[PartitionRef, ...]:
        """The partitions whose broker is not shielded now; all of them when every broker is."""
        now = time.monotonic()
        with self._lock:
            for broker_id, until in list(self._shielded.items()):
                if until <= now:  # give it another chance; its first acknowledgement is logged
                    del self._shielded[broker_id]
                    self._probing.add(broker_id)
            if not self._shielded:
                return partitions
            live = tuple(p for p in partitions if p.broker_id not in self._shielded)
        return live or partitions

    def shielded_brokers(self) -> set[int]:
        """Ids of the brokers the producer avoids now (each failed a send within the last ``shield_s``)."""
        now = time.monotonic()
        with self._lock:
            return {broker_id for broker_id, until in self._shielded.items() if until > now}

    @property
    def pool(self) -> ConnectionPool:
        """The producer's broker connections, one per address (a batch send writes on them)."""
        return self._pool

    def broker_auth(self) -> tuple[int, str] | None:
        """A send's ``authInfo`` now: the master's latest visit token (and a signed token with credentials)."""
        return self.settings.broker_auth(self._visit_token)

    def shield(self, part: PartitionRef, exc: TubeSparkError) -> None:
        """Leave ``part``'s broker out of placement for ``shield_s`` after it failed a send."""
        with self._lock:
            fresh = part.broker_id not in self._shielded
            self._shielded[part.broker_id] = time.monotonic() + self.shield_s
            self._probing.discard(part.broker_id)
        if fresh:
            log.warning("TubeMQ broker %d (%s) failed a send to %s: %s; the producer sends to the other brokers' "
                        "partitions for the next %.0f s (and re-sends what failed there)", part.broker_id,
                        part.broker.address, part.key, exc, self.shield_s)

    @property
    def probing(self) -> bool:
        """True while a broker whose shield ended has acknowledged no send since: only then has
        :meth:`acknowledged_by` anything to do (a batch asks once instead of calling it per message)."""
        return bool(self._probing)

    def acknowledged_by(self, part: PartitionRef) -> None:
        """``part``'s broker acknowledged a send: if its shield had ended, say once that it is back."""
        if part.broker_id in self._probing:
            with self._lock:
                back = part.broker_id in self._probing
                self._probing.discard(part.broker_id)
            if back:
                log.warning("TubeMQ broker %d (%s) acknowledges sends again; the producer places messages on it "
                            "again", part.broker_id, part.broker.address)

    def send_async(self, topic: str, message: OutgoingMessage, partition: PartitionRef | None = None, *,
                   key_hash: int | None = None, defer: bool = False) -> Future[SendResult]:
        """Queue one message; blocks only while ``max_in_flight`` requests to that broker are pending.

        ``partition``: send there and only there. Otherwise the producer places the message
        (:meth:`choose_partition` with ``key_hash``), and a re-send after a broker failure may go elsewhere.
        ``defer``: the request may wait to be written together with the next ones (far fewer socket
        writes for a burst of small messages) until :meth:`flush`, which a caller that defers must call.
        """
        part = partition or self.choose_partition(topic, key_hash)
        request = self._request(topic, message, part)
        future = self._transmit(request, part, defer=defer)
        with self._lock:
            self._in_flight.append(_InFlight(request, part, future, placed=partition is None, key_hash=key_hash))
        return future

    def send(self, topic: str, message: OutgoingMessage, partition: PartitionRef | None = None, *,
             key_hash: int | None = None) -> SendResult:
        """Send one message and wait for the broker's acknowledgement (with retries); see :meth:`send_async`."""
        part = partition or self.choose_partition(topic, key_hash)
        request = self._request(topic, message, part)
        return self._settle(_InFlight(request, part, self._transmit(request, part), placed=partition is None,
                                      key_hash=key_hash))

    def prepare(self, topic: str, message: OutgoingMessage, partition: PartitionRef | None = None, *,
                key_hash: int | None = None) -> Prepared:
        """Place and encode one message for :meth:`send_prepared` (nothing is sent yet).

        Raises MessageFormatError (empty, too large) as :meth:`send_async` does, before anything is sent.
        """
        part = partition or self.choose_partition(topic, key_hash)
        return Prepared(self._request(topic, message, part), part, partition is None, key_hash)

    def prepare_many(self, topic: str, payloads: list[bytes], *, flags: list[int] | None = None,
                     msg_types: list[str] | None = None, msg_times: list[str] | None = None,
                     key_hashes: list[int | None] | None = None) -> list[Prepared]:
        """:meth:`prepare` of a whole batch of encoded payloads (``OutgoingMessage.encode``'s ``(payload, flag)``;
        ``flags`` None: all 0, ``msg_types``/``msg_times`` None: not sent), each placed by the producer as
        :meth:`choose_partition` places it with ``key_hashes[i]`` (None: round-robin).

        The sink's path: one call per Arrow batch instead of a placement, an encode and two objects built
        by Python calls per row (:func:`~tubespark.tubemq.wire.send.build_requests`). Raises
        MessageFormatError (empty, too large) for the first such payload before anything is placed;
        :func:`unsendable` says which one.
        """
        limit = self.max_message_size(topic)
        bad = unsendable(payloads, limit)
        if bad >= 0:
            self._check_payload(topic, payloads[bad], limit)
        parts = self.place_many(topic, len(payloads), key_hashes)
        requests = build_requests(self.client_id, topic, self._sent_addr, payloads,
                                  [part.partition_id for part in parts], flags, msg_types, msg_times)
        return list(map(Prepared, requests, parts, itertools.repeat(True),
                        key_hashes if key_hashes is not None else itertools.repeat(None)))

    def place_many(self, topic: str, count: int, key_hashes: list[int | None] | None = None) -> list[PartitionRef]:
        """Where :meth:`choose_partition` places ``count`` messages of ``topic`` (``key_hashes[i]`` for the
        i-th, None: round-robin), for the price of one call."""
        if key_hashes is not None:
            choose = self.choose_partition
            return [choose(topic, key_hash) for key_hash in key_hashes]
        if not count:
            return []
        first = self.choose_partition(topic)  # raises as it does when none is served; starts the counter
        partitions = self.partitions(topic)
        live = self._serving(partitions) if self._shielded else partitions
        counter = self._round_robin[topic]
        width = len(live)
        return [first, *[live[next(counter) % width] for _ in range(count - 1)]]

    def send_prepared(self, items: Sequence[Prepared]) -> int:
        """Send ``items`` pipelined and return once the brokers acknowledged every one (their count).

        The batched path (:mod:`~tubespark.tubemq.client.batch_send`): up to ``max_in_flight`` requests
        per broker on the wire, one counter and condition for the batch instead of a future per message;
        retries, shielding and errors as :meth:`flush`, except that after the first unrecoverable error
        no further message is sent (those on the wire are settled first). Each item's fields say where it
        was stored.
        """
        return BatchSend(self, items).run() if items else 0

    def flush(self) -> list[SendResult]:
        """Wait for every pending send; retry retriable failures; raise the first unrecoverable error.

        Returns the results in the order the messages were queued.
        """
        with self._lock:
            records, self._in_flight = self._in_flight, []
            deferred, self._deferred = self._deferred, set()
        for address in deferred:
            self._send_deferred(address)
        results: list[SendResult] = []
        first_error: TubeSparkError | None = None
        for record in records:
            try:
                results.append(self._settle(record))
            except TubeSparkError as exc:
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
        return results

    def _settle(self, record: _InFlight) -> SendResult:
        """Wait for ``record``'s acknowledgement, sending it again after retriable failures.

        ``max_retries`` re-sends at most; the first try waits for the send already in flight. A broker
        that failed is shielded, and a message the producer placed is re-sent to another broker's partition.
        """

        def attempt() -> SendResult:
            if record.future is None:
                if record.placed:
                    record.partition = self.choose_partition(record.request.topic, record.key_hash)
                    record.request = record.request._replace(partition_id=record.partition.partition_id)
                record.future = self._transmit(record.request, record.partition)
            part = record.partition
            try:
                result = wait(record.future, self.settings.request_timeout_s * 2, f"send to {part.key}")
            except TubeSparkError as exc:
                record.future = None
                # Reconnect rather than reuse a broken socket. A call that only timed out leaves the
                # connection up while the broker answers other sends on it (dropping it would fail, and
                # re-send, each of them), but not when the broker sent nothing for as long: stalled or
                # half-open, a socket that never answers again and never fails on its own.
                if isinstance(exc, RpcTimeoutError):
                    self._pool.drop_if_quiet(part.broker.address, self.settings.request_timeout_s * 2)
                elif isinstance(exc, BrokerConnectionError):
                    self._pool.drop(part.broker.address)
                if isinstance(exc, BrokerConnectionError) or getattr(exc, "code", None) == ErrCode.SERVICE_UNAVAILABLE:
                    self.shield(part, exc)
                raise
            self.acknowledged_by(part)
            return result

        what = f"send to {record.partition.key}"
        policy = RetryPolicy(attempts=self.max_retries + 1, backoff_s=0.2, max_backoff_s=2.0)
        return ride_out(lambda: call_with_retry(attempt, policy, what=what), outage_s=self.outage_s, what=what)

    def _request(self, topic: str, message: OutgoingMessage, part: PartitionRef) -> SendRequest:
        """Encode ``message`` once (payload, flag, CRC) into the request every (re-)send reuses.

        Refuses an empty or oversized message before anything is sent.
        """
        payload, flag = message.encode()
        self._check_payload(topic, payload, self.max_message_size(topic))
        return SendRequest(self.client_id, topic, part.partition_id, payload, flag, checksum(payload), self._sent_addr,
                           message.msg_type or "", message.msg_time or "")

    @staticmethod
    def _check_payload(topic: str, payload: bytes, limit: int) -> None:
        """Refuse an empty payload or one over ``limit`` bytes (the topic's maximum) before anything is sent."""
        if not payload:  # the broker answers 400 "data length is zero!"; Java refuses it before sending too
            raise MessageFormatError(f"empty message for topic {topic!r}: TubeMQ stores no message without a body "
                                     f"or attributes")
        if len(payload) > limit:
            raise MessageTooLargeError(f"message of {len(payload)} bytes exceeds topic {topic!r}'s maximum of "
                                       f"{limit} bytes: make the row's value smaller, or raise the topic's "
                                       f"maxMsgSizeInMB on the master")

    def _transmit(self, request: SendRequest, part: PartitionRef, *, defer: bool = False) -> Future[SendResult]:
        address = part.broker.address
        result: Future[SendResult] = Future()
        slot = self._slot(address)
        if not slot.acquire(blocking=False):
            self._send_deferred(address)  # the answers that free a slot may belong to deferred requests
            acquired = slot.acquire(timeout=self.settings.request_timeout_s)
        else:
            acquired = True
        if not acquired:
            result.set_exception(BrokerConnectionError(f"broker {address} did not acknowledge in-flight sends "
                                                     f"within {self.settings.request_timeout_s}s"))
            return result
        try:
            envelope = request.envelope(max(1, int(self.settings.request_timeout_s * 1000)),
                                        self.settings.broker_auth(self._visit_token))
            inner = self._pool.get(address).call_encoded_async(envelope, parse_send_answer, defer=defer)
            if defer:
                with self._lock:
                    self._deferred.add(address)
        except TubeSparkError as exc:
            slot.release()
            result.set_exception(exc)
            return result

        def done(fut: Future[SendAnswer]) -> None:
            slot.release()
            if result.done():  # its waiter gave up (timed out, cancelled) before the answer or failure came
                return
            with contextlib.suppress(InvalidStateError):  # ... or just now
                try:
                    response = check(fut.result(), f"send to {part.key}")
                    result.set_result(SendResult(part, response.messageId, response.appendOffset,
                                                 response.appendTime))
                except TubeSparkError as exc:
                    result.set_exception(exc)
                except Exception as exc:  # noqa: BLE001 - cancelled or unexpected: surface, never lose
                    result.set_exception(BrokerConnectionError(f"send to {part.key} failed: {exc!r}"))

        inner.add_done_callback(done)
        return result

    def _send_deferred(self, address: str) -> None:
        """Write the requests deferred on ``address``'s connection (a failed one has failed them already)."""
        try:
            self._pool.get(address).send_deferred()
        except TubeSparkError as exc:  # cannot reconnect: the deferred calls failed with the old connection
            log.debug("no deferred sends written to %s: %s", address, exc)

    def _slot(self, address: str) -> threading.BoundedSemaphore:
        with self._lock:
            return self._slots.setdefault(address, threading.BoundedSemaphore(self.max_in_flight))

    # --- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush pending sends, say goodbye to the master, close every connection."""
        try:
            if self._in_flight:
                self.flush()
        finally:
            self._stop.set()
            try:
                request = mpb.CloseRequestP2M(clientId=self.client_id)
                self.settings.add_master_auth(request)  # an authenticating master refuses it unsigned (415)
                self._master.call(Method.PRODUCER_CLOSE, request, mpb.CloseResponseM2P)
            except TubeSparkError as exc:
                log.debug("producer close on master failed: %s", exc)
            self._master.close()
            self._pool.close()

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _brokers_of(layout: TopicLayout) -> dict[int, str]:
    return {p.broker_id: p.broker.address for p in layout.partitions}


def _log_placement(topic: str, before: dict[int, str], now: dict[int, str]) -> None:
    """Say when the master stops or starts listing a broker's partitions of ``topic``: a broker that crashed or
    stopped leaves the placement once its registration lapses, often before any send to it failed (which
    :meth:`Producer.shield` would log), and the user should see that the sink now routes around it."""
    for broker_id in sorted(before.keys() - now.keys()):
        if now:
            log.warning("TubeMQ broker %d (%s) no longer serves topic %s (the master stopped listing its "
                        "partitions: down or stopped); the producer sends to the other brokers' partitions",
                        broker_id, before[broker_id], topic)
    for broker_id in sorted(now.keys() - before.keys()):
        log.warning("TubeMQ broker %d (%s) serves topic %s again; the producer places messages on it again",
                    broker_id, now[broker_id], topic)
