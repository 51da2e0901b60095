"""Membership of a server-balanced TubeMQ consumer group.

The master decides which member consumes which partition and tells each member through rebalance
events carried in heartbeat replies. A :class:`GroupSession` registers with the master, heartbeats
in a background thread, carries out events (DISCONNECT: release partitions on their brokers;
CONNECT: register them there) and acknowledges each event in the next heartbeat, reporting what it
now holds. It also heartbeats the brokers so they keep our registrations, and re-registers wherever
a server forgot us (411). Holding a partition on its broker is what makes the group's ownership
real: other members of the group are refused (410) until we release it.

*Assigned* (the master gave us the partition) and *held* (our registration on its broker stands) are
kept apart. A partition can be assigned but not held: the previous member's registration still
occupies it on the broker (410, until the broker's consumer registration timeout, e.g. a member that
was killed), or its broker is down or restarting. The heartbeat loop keeps registering such
partitions until they are held or the master revokes them, and reports them to the master as ours,
so the master does not hand them elsewhere in the meantime.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tubespark.core.retry import RetryPolicy, call_with_retry
from tubespark.errors import AuthError, BrokerConnectionError, TlsError, TubeSparkError, UnknownTopicError
from tubespark.tubemq.client.broker import BrokerClient, Position
from tubespark.tubemq.client.common import (
    ClientSettings,
    check,
    during_election,
    local_ip,
    new_client_id,
)
from tubespark.tubemq.client.deployed import elected_moments_ago, is_not_deployed, not_deployed
from tubespark.tubemq.errors import NotRegisteredError, PartitionOccupiedError
from tubespark.tubemq.wire.constants import EventStatus, EventType, Method, ReadStatus
from tubespark.tubemq.wire.errcodes import ErrCode
from tubespark.tubemq.wire.formats import PartitionRef, parse_subscribe_info, subscribe_info
from tubespark.tubemq.wire.pb import master_service_pb2 as mpb

log = logging.getLogger(__name__)

AssignmentListener = Callable[[list[PartitionRef], list[PartitionRef]], None]
"""Called as ``listener(added, removed)`` from the heartbeat thread after each applied event."""

_CONNECT_EVENTS = (EventType.CONNECT, EventType.ONLY_CONNECT)
_DISCONNECT_EVENTS = (EventType.DISCONNECT, EventType.ONLY_DISCONNECT)
FIRST_EVENT_POLL_S = 0.5
"""How often a member that has no assignment yet heart-beats the master (then ``heartbeat_interval_s``)."""


@dataclass(frozen=True)
class HeldPartition:
    """A partition this member holds, with the broker's answer when we registered it."""

    ref: PartitionRef
    stored_offset: int
    max_offset: int


class GroupSession:
    """One member of a consumer group. Thread-safe; heartbeats run in a daemon thread.

    Args:
        masters: master addresses.
        group: the consumer group name (``^[a-zA-Z][\\w-]+$``).
        topics: topics to consume.
        filters: optional ``{topic: [streamId, ...]}`` for server-side msgType filtering.
        read_status: where a group with no stored offset starts on a partition (earliest by default).
        listener: told about partitions gained and lost.
        release_consumed: when a partition is released, confirm the batch fetched last under this
            group (a pull consumer that handed it to its caller) instead of discarding it.
        served: topics this member's query read before (its checkpoint holds their offsets): a "not
            deployed" for all of them at :meth:`start` is asked again, as from a master elected moments ago.
    """

    def __init__(self, masters: str | Sequence[str], group: str, topics: Iterable[str], *,
                 settings: ClientSettings | None = None, filters: dict[str, list[str]] | None = None,
                 read_status: ReadStatus = ReadStatus.FROM_STORED_OR_MIN, client_id: str | None = None,
                 listener: AssignmentListener | None = None, release_consumed: bool = False,
                 served: Iterable[str] = ()) -> None:
        self.settings = settings or ClientSettings()
        self.group = group
        self.topics = sorted(set(topics))
        self.filters = {t: sorted(set(f)) for t, f in (filters or {}).items() if f}
        self.read_status = read_status
        self.client_id = client_id or new_client_id(group)
        self.listener = listener
        self.release_consumed = release_consumed
        self.served = frozenset(served)
        self.brokers = BrokerClient(self.client_id, self.settings)
        self._master = self.settings.master_channel(masters)
        self._host = local_ip()
        self._held: dict[str, HeldPartition] = {}
        self._assigned: dict[str, PartitionRef] = {}
        self._pending_reason: dict[str, str] = {}
        self._events_applied = 0
        self._ack: mpb.EventProto | None = None
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.heartbeat_errors = 0
        self._refusal: TubeSparkError | None = None

    # --- public ----------------------------------------------------------------------------------

    def start(self, *, register_retries: int = 5) -> GroupSession:
        """Register with the master and start heart-beating.

        Registration is tried up to ``register_retries`` times, like the Java client does, because a
        master that just started refuses clients for a moment; while only standbys answer (a master
        group electing its next active master), or a master answers "not deployed" for topics that exist
        (one elected moments ago, still loading its configuration: :meth:`_master_loading`), it waits up to
        ``settings.master_election_s``. Otherwise only retriable errors are retried: a refused login, a
        group conflict or an unknown topic will not go away.
        """
        what = f"register consumer {self.client_id} in group {self.group}"
        brief = RetryPolicy(attempts=register_retries, backoff_s=0.5, max_backoff_s=2.0,
                            retry_on=lambda exc: bool(getattr(exc, "retriable", False)) and not during_election(exc))
        election = RetryPolicy(timeout_s=self.settings.master_election_s, backoff_s=0.5, max_backoff_s=2.0,
                               retry_on=lambda exc: during_election(exc) or self._master_loading(exc))
        call_with_retry(lambda: call_with_retry(self._register, brief, what=what), election, what=what)
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"tubespark-group-{self.group}")
        self._thread.start()
        return self

    def _master_loading(self, exc: BaseException) -> bool:
        """A "not deployed" from a master this channel moved to moments ago, or for topics this member's query
        read before: the master that answers may have taken over moments before this process started (a
        query restarted after a master failover), with its channel never moving."""
        if elected_moments_ago(exc, self._master, self.settings):
            return True
        return is_not_deployed(exc) and bool(self.served) and self.served.issuperset(self.topics)

    def held(self) -> dict[str, HeldPartition]:
        """The partitions held right now, by partition key."""
        with self._lock:
            return dict(self._held)

    def assigned(self) -> dict[str, PartitionRef]:
        """The partitions the master assigned to this member (held on their brokers or not), by key."""
        with self._lock:
            return dict(self._assigned)

    def pending(self) -> dict[str, str]:
        """Assigned partitions not held on their broker right now, with why (occupied, broker down...)."""
        with self._lock:
            return {key: self._pending_reason.get(key, "not registered yet")
                    for key in self._assigned if key not in self._held}

    def refusal(self) -> TubeSparkError | None:
        """The last time a broker refused to let this member register for a reason retries cannot fix (an
        authorisation or TLS error), if any: a partition kept pending for it would stall the owner silently."""
        with self._lock:
            return self._refusal

    def wait_for_assignment(self, timeout_s: float = 60.0) -> dict[str, PartitionRef]:
        """Block until the master's first rebalance event was carried out (or the timeout); the assignment.

        Carried out means each partition of it was registered on its broker or found pending (occupied,
        broker down), so :meth:`held` and :meth:`pending` tell the whole first assignment.
        """
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not (self._assigned and self._events_applied) and not self._stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            return dict(self._assigned)

    def wait_for_held(self, keys: Iterable[str], timeout_s: float) -> set[str]:
        """Block until each of ``keys`` is held or no longer assigned (or the timeout); the keys still pending."""
        wanted = set(keys)
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                left = {k for k in wanted if k in self._assigned and k not in self._held}
                remaining = deadline - time.monotonic()
                if not left or remaining <= 0 or self._stop.is_set():
                    return left
                self._changed.wait(min(remaining, self.settings.heartbeat_interval_s))

    def wait_for_partitions(self, count: int = 1, timeout_s: float = 60.0) -> dict[str, HeldPartition]:
        """Block until at least ``count`` partitions are held (or the timeout passes); return them."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while len(self._held) < count and not self._stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            return dict(self._held)

    def wait_for_change(self, timeout_s: float) -> None:
        with self._changed:
            self._changed.wait(timeout_s)

    def commit(self, ref: PartitionRef, offset: int) -> Position:
        """Store ``offset`` as the group's position on ``ref`` (re-registering with currOffset).

        This is how TubeMQ lets a client set an arbitrary position; the broker clamps it to [min, max].
        The partition stays held.
        """
        with self._lock:
            if ref.key not in self._held:
                raise NotRegisteredError(ErrCode.HB_NO_NODE, f"partition {ref.key} is not held by this member",
                                         context=f"commit for group {self.group}")
        # no lock across the call: a dead broker must not stall the heartbeat thread for a connect timeout
        position = self.brokers.register(ref, self.group, offset=offset, filters=self.filters.get(ref.topic, ()))
        with self._lock:
            if ref.key in self._held:
                self._held[ref.key] = HeldPartition(ref, position.offset, position.max_offset)
        return position

    def refresh(self, ref: PartitionRef) -> HeldPartition | None:
        """Ask the broker again for ``ref``'s stored and max offsets; ``None`` if it is no longer held.

        Re-registering without an offset changes nothing on the broker but the registration's timer.
        Raises what the broker call raises (``BrokerConnectionError`` while the broker is down,
        ``PartitionOccupiedError`` if it restarted and another member registered first): the partition
        stays assigned either way and the heartbeat loop registers it again.
        """
        with self._lock:
            if ref.key not in self._held:
                return None
        position = self.brokers.register(ref, self.group, filters=self.filters.get(ref.topic, ()))
        held = HeldPartition(ref, position.offset, position.max_offset)
        with self._lock:
            if ref.key not in self._held:
                return None
            self._held[ref.key] = held
        return held

    def close(self) -> None:
        """Release every partition and leave the group, so the master re-assigns them at once.

        The session thread is joined last: it may be in the middle of a call for up to the call timeout,
        and a process being shut down (Spark ends a stream reader's with SIGTERM) may not live that long,
        while the partitions and the membership must be given back first.
        """
        started = time.monotonic()
        self._stop.set()
        self._wake.set()
        with self._lock:
            held, self._held = list(self._held.values()), {}
            self._assigned.clear()
            self._changed.notify_all()
        self._unregister([item.ref for item in held], "on close")
        try:
            request = mpb.CloseRequestC2M(clientId=self.client_id, groupName=self.group)
            self.settings.add_master_auth(request)
            self._master.call(Method.CONSUMER_CLOSE, request, mpb.CloseResponseM2C)
            log.info("member %s left group %s (released %d partitions) in %.1f s", self.client_id, self.group,
                     len(held), time.monotonic() - started)
        except TubeSparkError as exc:  # the master counts this member until its session times out
            log.warning("member %s could not leave group %s: %s", self.client_id, self.group, exc)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.settings.request_timeout_s * 2)
        self._master.close()
        self.brokers.close()

    def __enter__(self) -> GroupSession:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- master protocol -----------------------------------------------------------------------

    def _subscribe_infos(self) -> list[str]:
        # everything assigned, held or still waiting for its broker: the master must not re-assign a
        # partition we are about to hold (a stale registration or a broker restart is not a refusal)
        refs = {**self._assigned, **{k: h.ref for k, h in self._held.items()}}
        return [subscribe_info(self.client_id, self.group, ref) for _, ref in sorted(refs.items())]

    def _register(self) -> None:
        with self._lock:
            request = mpb.RegisterRequestC2M(
                clientId=self.client_id, groupName=self.group, hostName=self._host, topicList=self.topics,
                subscribeInfo=self._subscribe_infos(),
                topicCondition=[f"{t}#{','.join(f)}" for t, f in self.filters.items()],
                sessionTime=int(time.time() * 1000), jdkVersion="python")
        self.settings.add_master_auth(request)
        try:
            response = check(self._master.call(Method.CONSUMER_REGISTER, request, mpb.RegisterResponseM2C),
                             f"register consumer {self.client_id} in group {self.group}")
        except UnknownTopicError as exc:
            # the master's own words ("Requested topic [[x]] not deployed!") say what, not what to do; they
            # are kept in the message, so the chained original would only double the trace the user reads
            raise not_deployed(self.topics, self._master.active_address, exc.server_message) from None
        if response.HasField("authorizedInfo"):
            self.brokers.visit_token = response.authorizedInfo.visitAuthorizedToken

    def _heartbeat(self) -> mpb.EventProto | None:
        with self._lock:
            ack, self._ack = self._ack, None
            request = mpb.HeartRequestC2M(clientId=self.client_id, groupName=self.group,
                                          reportSubscribeInfo=ack is not None)
            if ack is not None:
                request.event.CopyFrom(ack)
                request.subscribeInfo.extend(self._subscribe_infos())
        self.settings.add_master_auth(request)
        try:
            response = check(self._master.call(Method.CONSUMER_HEARTBEAT, request, mpb.HeartResponseM2C),
                             f"heartbeat of {self.client_id} in group {self.group}")
        except NotRegisteredError:
            log.info("master forgot consumer %s; registering again", self.client_id)
            self._register()
            return None
        except TubeSparkError:
            with self._lock:  # the ack was not delivered: send it again next time
                self._ack = self._ack or ack
            raise
        if response.HasField("authorizedInfo"):
            self.brokers.visit_token = response.authorizedInfo.visitAuthorizedToken
        if response.HasField("event") and response.event.rebalanceId > 0:
            return response.event
        return None

    def _apply(self, event: mpb.EventProto) -> None:
        parts = []
        for text in event.subscribeInfo:
            try:
                parts.append(parse_subscribe_info(text)[2])
            except TubeSparkError as exc:
                log.warning("ignoring malformed subscribe info %r in event %d: %s", text, event.rebalanceId, exc)
        added: list[PartitionRef] = []
        removed: list[PartitionRef] = []
        if event.opType in _DISCONNECT_EVENTS:
            for ref in parts:
                with self._lock:
                    self._assigned.pop(ref.key, None)
                    self._pending_reason.pop(ref.key, None)
                    held = self._held.pop(ref.key, None)
                if held is not None:
                    removed.append(ref)
            self._unregister(removed, f"for event {event.rebalanceId}")
        elif event.opType in _CONNECT_EVENTS:
            with self._lock:
                for ref in parts:
                    self._assigned[ref.key] = ref
            added.extend(self._hold_all(parts))
        log.info("group %s member %s event %d op %d: +%d -%d partitions", self.group, self.client_id,
                 event.rebalanceId, event.opType, len(added), len(removed))
        with self._lock:
            self._ack = mpb.EventProto(rebalanceId=event.rebalanceId, opType=event.opType,
                                       status=EventStatus.DONE, subscribeInfo=list(event.subscribeInfo))
            self._events_applied += 1
            self._changed.notify_all()
        if self.listener is not None and (added or removed):
            self.listener(added, removed)

    def _unregister(self, refs: list[PartitionRef], why: str) -> None:
        """Release ``refs`` on their brokers, best effort. A broker whose connection fails is not asked again
        for its other partitions: each would wait a timeout more (the heartbeat thread's, or a stopping query's),
        and the broker expires the registrations itself."""
        silent: set[str] = set()
        for ref in refs:
            if ref.broker.address in silent:
                continue
            try:
                self.brokers.unregister(ref, self.group, consumed=self.release_consumed)
            except TubeSparkError as exc:
                if isinstance(exc, BrokerConnectionError):
                    silent.add(ref.broker.address)
                log.info("unregister %s %s failed: %s", ref.key, why, exc)

    def _hold_all(self, refs: list[PartitionRef], rounds: int = 3) -> list[PartitionRef]:
        """Register ``refs`` on their brokers; the ones now held.

        The member the master took a partition from may not have released it yet (410): those are
        tried again for a few rounds (about a second, so the event's acknowledgement is not held up);
        what is still occupied stays assigned and pending, and the heartbeat loop keeps trying.
        """
        held: list[PartitionRef] = []
        todo = list(refs)
        for round_no in range(rounds):
            occupied = []
            for ref in todo:
                outcome = self._hold(ref)
                if outcome is True:
                    held.append(ref)
                elif outcome == "occupied":
                    occupied.append(ref)
            todo = occupied
            if not todo or round_no == rounds - 1 or self._stop.wait(0.5):
                break
        return held

    def _hold(self, ref: PartitionRef) -> bool | str:
        """Register ``ref`` on its broker once: ``True`` when held, else why not (``"occupied"``, ``"error"``).

        A partition that is not held stays assigned (pending) until the master revokes it; the heartbeat
        loop calls this again for it.
        """
        with self._lock:
            if ref.key not in self._assigned:
                return "revoked"
        try:
            position = self.brokers.register(ref, self.group, read_status=self.read_status,
                                             filters=self.filters.get(ref.topic, ()))
        except PartitionOccupiedError as exc:
            self._set_pending(ref, f"occupied on broker {ref.broker.address} by another registration of group "
                                   f"{self.group} (410; a member that left without releasing it keeps it until "
                                   f"the broker times that registration out): {exc}")
            log.info("partition %s of group %s is still occupied on its broker: %s", ref.key, self.group, exc)
            return "occupied"
        except TubeSparkError as exc:
            if isinstance(exc, (AuthError, TlsError)):  # trying again cannot help: the owner fails with it
                with self._lock:
                    self._refusal = exc
            self._set_pending(ref, f"cannot register on broker {ref.broker.address}: {exc}")
            log.warning("cannot register %s for group %s (will retry): %s", ref.key, self.group, exc)
            return "error"
        with self._lock:
            if ref.key not in self._assigned:  # revoked while we registered: let it go again
                revoked = True
            else:
                revoked = False
                self._held[ref.key] = HeldPartition(ref, position.offset, position.max_offset)
                self._pending_reason.pop(ref.key, None)
                self._changed.notify_all()
        if revoked:
            try:
                self.brokers.unregister(ref, self.group, consumed=self.release_consumed)
            except TubeSparkError as exc:
                log.debug("unregister of revoked %s failed: %s", ref.key, exc)
            return "revoked"
        return True

    def _set_pending(self, ref: PartitionRef, reason: str) -> None:
        with self._lock:
            if ref.key in self._assigned:
                self._pending_reason[ref.key] = reason

    def _retry_pending(self) -> None:
        """Register again every partition the master assigned us that is not held (occupied, broker down)."""
        with self._lock:
            waiting = [ref for key, ref in sorted(self._assigned.items()) if key not in self._held]
        gained = [ref for ref in waiting if not self._stop.is_set() and self._hold(ref) is True]
        if gained:
            log.info("group %s member %s now holds %s", self.group, self.client_id, ", ".join(r.key for r in gained))
            if self.listener is not None:
                self.listener(gained, [])

    def _heartbeat_brokers(self) -> None:
        by_broker: dict[str, list[PartitionRef]] = {}
        for held in self.held().values():
            by_broker.setdefault(held.ref.broker.address, []).append(held.ref)
        for refs in by_broker.values():
            try:
                failed = self.brokers.heartbeat(refs, self.group)
            except TubeSparkError as exc:
                log.info("broker heartbeat to %s failed: %s", refs[0].broker.address, exc)
                continue
            for ref in refs:
                code = failed.get(ref.key)
                if code == ErrCode.HB_NO_NODE:  # the broker dropped our registration (timeout, restart): take it back
                    if self._hold(ref) is not True:
                        with self._lock:  # still assigned: pending until a later beat registers it
                            self._held.pop(ref.key, None)
                            self._changed.notify_all()
                elif code is not None:
                    log.warning("broker reports %s lost (%d); dropping it", ref.key, code)
                    with self._lock:
                        self._held.pop(ref.key, None)
                        self._assigned.pop(ref.key, None)
                        self._pending_reason.pop(ref.key, None)
                        self._changed.notify_all()
                    if self.listener is not None:
                        self.listener([], [ref])

    def _loop(self) -> None:
        next_broker_beat = 0.0
        while not self._stop.is_set():
            try:
                event = self._heartbeat()
                self.heartbeat_errors = 0
                if event is not None:
                    self._apply(event)
                    continue  # acknowledge at once, so the master can hand out the next event
            except TubeSparkError as exc:
                self.heartbeat_errors += 1
                log.warning("group %s heartbeat failed (%d in a row): %s", self.group, self.heartbeat_errors, exc)
            now = time.monotonic()
            if now >= next_broker_beat:
                self._heartbeat_brokers()
                self._retry_pending()
                next_broker_beat = now + self.settings.heartbeat_interval_s
            with self._lock:
                waiting_for_first = not self._events_applied
            # Until the master's first rebalance event arrives (what a starting query waits for), ask
            # often: the event comes with a heartbeat's answer, so this saves up to an interval per start.
            self._wake.wait(min(FIRST_EVENT_POLL_S, self.settings.heartbeat_interval_s) if waiting_for_first
                            else self.settings.heartbeat_interval_s)
            self._wake.clear()
