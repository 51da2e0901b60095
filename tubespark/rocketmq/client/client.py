"""The client every RocketMQ feature builds on: name-server routes and calls to the broker serving a queue.

Why routes are re-read rather than trusted: with slave-acting-master, the name server answers a route in
which a group whose master died has its slave at id 0 and no WRITE permission, and puts the master back
when it returns (docs/rocketmq/protocol.md, "Acting master"). So a read goes to the group's current
id 0; when that address does not answer, the route is fetched again and the call goes to the next member
the route lists (a slave serves reads of what it replicated), so reads continue while the name server
has not noticed the death yet. Writes go only to a group's master.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from tubespark.core.outage import declare
from tubespark.core.retry import RetryPolicy, call_with_retry
from tubespark.core.settings import ConnectionSettings
from tubespark.errors import BrokerConnectionError, BrokerUnavailableError, TubeSparkError, UnknownTopicError
from tubespark.rocketmq.errors import NoNameServerAvailableError
from tubespark.rocketmq.net.connection import RemotingConnection, connection_pool, wait
from tubespark.rocketmq.wire import codes, headers
from tubespark.rocketmq.wire.acl import Credentials
from tubespark.rocketmq.wire.filter import TAG, Filter, check_client_request
from tubespark.rocketmq.wire.frame import Command
from tubespark.rocketmq.wire.route import MessageQueue, TopicRoute, parse_route

log = logging.getLogger(__name__)

_seen: dict[str, dict[str, set[int]]] = {}
"""Process-wide: topic -> broker group -> queue ids this process was routed to, or was told of (a
checkpoint's offsets, offsets a user named). The name server forgets a group the moment its last member
stops (its route and its cluster entry go), so this is the only evidence that a group that is down held
queues of a topic: without it a stopped group looks like one that never had the topic."""
_seen_lock = threading.Lock()
_away: dict[str, float] = {}
"""Process-wide: broker group -> when (monotonic) this process last found it unregistered while it knew queues
of a topic on it. A group that registers again may route its topics only moments later: seen on the two-group
stack (tests/integration/rocketmq/test_broker_groups.py), a query restarted while ``broker-b`` was down met
``broker-b`` registered and its topic still unrouted, took that for a topic removed there, and stopped."""


def remember(queues: Iterable[MessageQueue]) -> None:
    """Record ``queues`` as queues of their topics (see :data:`_seen`)."""
    with _seen_lock:
        for mq in queues:
            _seen.setdefault(mq.topic, {}).setdefault(mq.broker_name, set()).add(mq.queue_id)


def remembered(topic: str) -> dict[str, tuple[MessageQueue, ...]]:
    """The queues of ``topic`` this process knows of, by broker group."""
    with _seen_lock:
        groups = {group: sorted(ids) for group, ids in _seen.get(topic, {}).items()}
    return {group: tuple(MessageQueue(topic, group, i) for i in ids) for group, ids in groups.items()}


def _saw_away(groups: Iterable[str]) -> None:
    now = time.monotonic()
    with _seen_lock:
        _away.update(dict.fromkeys(groups, now))


def _back_within(group: str, seconds: float) -> bool:
    """Whether this process found ``group`` unregistered within the last ``seconds``: registered again since,
    it may not route its topics yet."""
    with _seen_lock:
        at = _away.get(group)
    return at is not None and time.monotonic() - at < seconds


def forget(topic: str, group: str) -> None:
    """Drop ``group`` from what this process knows of ``topic`` (the topic was removed from a live group)."""
    with _seen_lock:
        _seen.get(topic, {}).pop(group, None)


UNROUTED_ADVICE = ("check the `topic` option, or create the topic first (mqadmin updateTopic); the name server also "
                   "forgets a topic whose broker groups are all stopped")
"""What to do about a topic the name server has no route for (a writer adds ``autoCreateTopic``)."""


@dataclass(frozen=True)
class ClientSettings(ConnectionSettings):
    """Timeouts of every call (the connect and request timeouts: :class:`ConnectionSettings`).
    ``failover_s``: how long a call keeps re-routing around a dead broker (the name server needs up to its
    scan interval plus the broker timeout, about 15 s by default, to notice)."""

    route_ttl_s: float = 5.0
    failover_s: float = 45.0
    credentials: Credentials | None = None
    """Access key and secret every request is signed with (brokers with ACL); the repr leaves the secret out."""
    ssl_context: ssl.SSLContext | None = None
    """TLS for every connection, to the name servers and to the brokers alike: a RocketMQ server takes TLS on
    its one port (docs/rocketmq/tls.md), so the addresses are the same as without it."""


class RocketMQClient:
    """Routes from the name servers, and calls to the broker of a queue. Thread-safe; close when done."""

    def __init__(self, namesrv: Sequence[str], settings: ClientSettings | None = None) -> None:
        if not namesrv:
            raise ValueError("at least one name server address is needed")
        self.namesrv = list(namesrv)
        declare("namesrv", self.namesrv, "RocketMQ name server")  # core.outage: never answered is not down
        self.settings = settings or ClientSettings()
        self._pool = connection_pool(connect_timeout_s=self.settings.connect_timeout_s,
                                     io_timeout_s=self.settings.request_timeout_s,
                                     ssl_context=self.settings.ssl_context,
                                     credentials=self.settings.credentials)
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._down: dict[str, float] = {}  # address -> until when it is tried last
        self._lock = threading.Lock()
        self._next_ns = 0

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> RocketMQClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- connections --------------------------------------------------------------------------------

    def connection(self, address: str) -> RemotingConnection:
        return self._pool.get(address)

    def call_address(self, address: str, cmd: Command, what: str) -> Command:
        """One call to ``address``; a broken connection is dropped so the next call reconnects."""
        try:
            return self._pool.get(address).call(cmd, self.settings.request_timeout_s, what)
        except BrokerConnectionError:
            self._mark_down(address)
            raise

    def call_async(self, address: str, cmd: Command, *, defer: bool = False) -> Future[Command]:
        try:
            return self._pool.get(address).call_async(cmd, defer=defer)
        except BrokerConnectionError:
            self._mark_down(address)
            raise

    def _mark_down(self, address: str) -> None:
        self._pool.drop(address)
        with self._lock:
            self._down[address] = time.monotonic() + 2 * self.settings.request_timeout_s

    def is_down(self, address: str) -> bool:
        with self._lock:
            until = self._down.get(address)
            if until is not None and until < time.monotonic():
                del self._down[address]
                return False
            return until is not None

    # --- routes -------------------------------------------------------------------------------------

    def route(self, topic: str, *, refresh: bool = False) -> TopicRoute:
        """The topic's route (cached ``route_ttl_s``); UnknownTopicError when no name server knows it, and
        :class:`BrokerUnavailableError` (retriable) when it knew it before in this client: a topic's route
        vanishes from the name server while its brokers are down (issue 23 part 8)."""
        now = time.monotonic()
        with self._lock:
            cached = self._routes.get(topic)
        if cached is not None and not refresh and now - cached[0] < self.settings.route_ttl_s:
            return cached[1]
        last: TubeSparkError | None = None
        for _ in range(len(self.namesrv)):
            with self._lock:
                address = self.namesrv[self._next_ns % len(self.namesrv)]
            try:
                response = self.call_address(address, headers.route_request(topic), f"route of {topic}")
            except BrokerConnectionError as exc:
                last = exc
                with self._lock:
                    self._next_ns += 1
                continue
            if response.code == codes.TOPIC_NOT_EXIST:
                why = "though it had one" if cached is not None else self._groups_away(address, topic)
                if why:
                    # the name server gave this client a route before, no broker is registered at all, or this
                    # process knows the topic's queues on groups that are not registered now: it drops a topic's
                    # route when the topic's only brokers stop, so this is an outage, not a missing topic
                    raise BrokerUnavailableError(f"the name server {address} has no route for topic {topic} now, "
                                                 f"{why}: its brokers are down or restarting "
                                                 f"({codes.plain_remark(response.remark) or 'no route'}); start them, "
                                                 f"or wait until they register again")
                raise UnknownTopicError(response.code, codes.plain_remark(response.remark) or "no route",
                                        context=f"route of {topic}", advice=UNROUTED_ADVICE)
            headers.read_ok(response, f"route of {topic}")
            route = parse_route(topic, response.body)
            remember(route.read_queues())
            with self._lock:
                self._routes[topic] = (time.monotonic(), route)
            return route
        raise NoNameServerAvailableError(f"no name server of {self.namesrv} answered: {last}; check the `namesrv` "
                                         f"option (host:port, 9876 by default) and that a name server runs "
                                         f"there") from last  # core.outage: was it ever seen alive?

    def registered_groups(self, address: str | None = None) -> frozenset[str] | None:
        """The broker groups registered at a name server (``address``, else the first that answers) now;
        ``None`` when none answers readably."""
        for ns in [address] if address else self.namesrv:
            try:
                return headers.registered_groups(self.call_address(ns, headers.cluster_info_request(),
                                                                   "cluster info"), "cluster info")
            except TubeSparkError as exc:
                log.info("cannot ask the name server %s which brokers are registered: %s", ns, exc)
        return None

    def _groups_away(self, address: str, topic: str) -> str:
        """Why a topic the name server at ``address`` has no route for is an outage rather than unknown: no
        broker group is registered at all (a restart of the only one), this process knows queues of the
        topic on groups that are not registered now (:func:`remember`), or on groups it found unregistered
        within ``failover_s`` (registered again, not routing yet: :data:`_away`); ``""`` when none of these
        (brokers run and none of the topic's known groups was away), or when the answer is unreadable."""
        groups = self.registered_groups(address)
        if groups is None:
            return ""
        known = set(remembered(topic))
        away = sorted(known - groups)
        _saw_away(away)
        if not groups:
            return "and no broker is registered there at all"
        if away:
            return f"though this process knows its queues on {', '.join(away)}, not registered now"
        back = sorted(g for g in known if _back_within(g, self.settings.failover_s))
        return (f"though this process knows its queues on {', '.join(back)}, registered again moments ago and not "
                f"routing them yet") if back else ""

    def down_groups(self, topic: str, route: TopicRoute) -> dict[str, tuple[MessageQueue, ...]]:
        """Queues of ``topic`` this process knows of (:func:`remember`) on broker groups ``route`` does not
        list and the name server does not register now: groups that are down, by name. A known group that
        is registered but no longer routes the topic had the topic removed: forgotten, not down. When the
        name server cannot say which groups are registered, every unrouted known group counts as down (a
        batch read fails rather than leave its queues out in silence), and so does one this process found
        unregistered within ``failover_s`` (registered again, not routing yet: :data:`_away`)."""
        routed = {mq.broker_name for mq in route.read_queues()}
        unrouted = {group: queues for group, queues in remembered(topic).items() if group not in routed}
        if not unrouted:
            return {}
        registered = self.registered_groups()
        down: dict[str, tuple[MessageQueue, ...]] = {}
        for group, queues in sorted(unrouted.items()):
            if registered is not None and group in registered and not _back_within(group, self.settings.failover_s):
                log.info("topic %s: broker group %s is registered but routes none of its queues now (the topic "
                         "was removed there); no longer counted as one of its groups", topic, group)
                forget(topic, group)
            else:
                down[group] = queues
        if registered is not None:
            _saw_away(group for group in down if group not in registered)
        return down

    def read_candidates(self, mq: MessageQueue, *, refresh: bool = False) -> list[str]:
        """Addresses that may serve reads of ``mq``'s group, best first: id 0, then the other members, the
        ones that failed recently last."""
        route = self.route(mq.topic, refresh=refresh)
        broker = route.brokers.get(mq.broker_name)
        if broker is None or not broker.addresses:
            raise BrokerConnectionError(f"the route of {mq.topic} lists no live member of {mq.broker_name}")
        ordered = [broker.addresses[i] for i in sorted(broker.addresses)]
        return sorted(ordered, key=self.is_down)

    def read_address(self, mq: MessageQueue) -> str:
        return self.read_candidates(mq)[0]

    def write_address(self, mq: MessageQueue, *, refresh: bool = False) -> str:
        address = self.route(mq.topic, refresh=refresh).write_address(mq.broker_name)
        if address is None:
            raise BrokerConnectionError(f"{mq.broker_name} has no master for writes to {mq.topic} right now")
        return address

    def failover_policy(self) -> RetryPolicy:
        return RetryPolicy(timeout_s=self.settings.failover_s, backoff_s=0.2, max_backoff_s=2.0)

    def read_call(self, mq: MessageQueue, make: Callable[[], Command], what: str) -> Command:
        """A read-side call for ``mq`` that follows the route around a dead member (see the module docstring)."""
        state = {"refresh": False}

        def attempt() -> Command:
            candidates = self.read_candidates(mq, refresh=state["refresh"])
            state["refresh"] = True
            return self.call_address(candidates[0], make(), what)

        return call_with_retry(attempt, self.failover_policy(), what=what)

    # --- offsets ------------------------------------------------------------------------------------

    def max_offset(self, mq: MessageQueue) -> int:
        """The next offset to be written (exclusive end) of ``mq``, from the member serving its reads."""
        what = f"max offset of {mq.key}"
        return headers.read_offset(self.read_call(mq, lambda: headers.max_offset_request(mq.topic, mq.queue_id),
                                                  what), what)

    def min_offset(self, mq: MessageQueue) -> int:
        what = f"min offset of {mq.key}"
        return headers.read_offset(self.read_call(mq, lambda: headers.min_offset_request(mq.topic, mq.queue_id),
                                                  what), what)

    def bounds(self, queues: Sequence[MessageQueue], *, follow: bool = True) -> dict[str, tuple[int, int]]:
        """``{queue key: (min, max)}``, the calls of all queues in flight together.

        A queue whose broker does not answer is asked again following the route (``follow``), or left
        out of the result (``follow=False``: a planner that must not block on one dead broker).
        """
        out: dict[str, tuple[int, int]] = {}
        pending: list[tuple[MessageQueue, str, Future[Command] | None, Future[Command] | None]] = []
        for mq in queues:
            try:
                address = self.read_address(mq)
                low = self.call_async(address, headers.min_offset_request(mq.topic, mq.queue_id))
                high = self.call_async(address, headers.max_offset_request(mq.topic, mq.queue_id))
                pending.append((mq, address, low, high))
            except BrokerConnectionError:
                pending.append((mq, "", None, None))
        timeout = self.settings.request_timeout_s
        for mq, address, min_call, max_call in pending:
            try:
                if min_call is None or max_call is None:
                    raise BrokerConnectionError(f"no connection for {mq.key}")
                out[mq.key] = (headers.read_offset(wait(min_call, timeout, f"min of {mq.key}"), f"min of {mq.key}"),
                               headers.read_offset(wait(max_call, timeout, f"max of {mq.key}"), f"max of {mq.key}"))
            except BrokerConnectionError as exc:
                if address:
                    self._mark_down(address)
                if follow:
                    out[mq.key] = (self.min_offset(mq), self.max_offset(mq))  # one by one, following the route
                else:
                    log.info("bounds of %s unknown this time: %s", mq.key, exc)
        return out

    def consumer_offset(self, group: str, mq: MessageQueue) -> int | None:
        """The group's committed offset of ``mq``, ``None`` when it has none."""
        what = f"offset of group {group} on {mq.key}"
        return headers.read_consumer_offset(self.read_call(
            mq, lambda: headers.query_consumer_offset_request(group, mq.topic, mq.queue_id), what), what)

    def commit_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        """Store ``offset`` as the group's offset of ``mq``.

        The broker stores offsets only for subscription groups it knows, and creates one (with
        ``autoCreateSubscriptionGroup``, its default) on the group's first pull: a group that never
        pulled is introduced by an empty pull at the queue's end first.
        """
        what = f"store offset {offset} of group {group} on {mq.key}"

        def store() -> Command:
            return self.read_call(mq, lambda: headers.update_consumer_offset_request(
                group, mq.topic, mq.queue_id, offset), what)

        response = store()
        if response.code == codes.SUBSCRIPTION_GROUP_NOT_EXIST:
            end = self.max_offset(mq)
            self.read_call(mq, lambda: headers.pull_request(group=group, topic=mq.topic, queue_id=mq.queue_id,
                                                            offset=end, max_messages=1,
                                                            now_ms=int(time.time() * 1000)),
                           f"introduce group {group} on {mq.key}")
            response = store()
        headers.read_ok(response, what)

    # --- filters ------------------------------------------------------------------------------------

    def check_filter(self, topic: str, group: str, flt: Filter) -> None:
        """Ask every broker group of ``topic`` whether it takes ``flt`` (CHECK_CLIENT_CONFIG), as the Java
        consumer does at start: an SQL92 filter fails here, on the driver, with
        :class:`~tubespark.rocketmq.errors.FilterNotSupportedError` when a broker's ``enablePropertyFilter``
        is off and :class:`~tubespark.errors.BadRequestError` when it does not compile. Tag filters need no
        check (the broker answers success without looking)."""
        if flt.kind == TAG:
            return
        route = self.route(topic)
        for broker in sorted({mq.broker_name for mq in route.read_queues()}):
            mq = MessageQueue(topic, broker, 0)
            what = f"check of the {flt.kind} filter {flt.expression!r} on {broker}"
            headers.read_ok(self.read_call(mq, lambda: check_client_request(
                group=group, topic=topic, flt=flt, client_id=f"tubespark@{socket.gethostname()}",
                now_ms=int(time.time() * 1000)), what), what)

    # --- admin --------------------------------------------------------------------------------------

    def create_topic(self, broker_address: str, topic: str, queues: int) -> None:
        """Create (or update) ``topic`` with ``queues`` queues on one broker."""
        headers.read_ok(self.call_address(broker_address, headers.create_topic_request(topic, queues),
                                          f"create topic {topic}"), f"create topic {topic}")


def all_queues(client: RocketMQClient, topics: Sequence[str], *, refresh: bool = False) -> list[MessageQueue]:
    """Every read queue of ``topics``, sorted."""
    return sorted(q for topic in topics for q in client.route(topic, refresh=refresh).read_queues())
