"""The driver's membership of the user's TubeMQ consumer group, and its private probes.

A stream's driver is a member of the group: the master balances the topics' partitions over the members
and this member holds its share on the brokers (:class:`tubespark.tubemq.client.group.GroupSession`).
Around that session: ``topicPattern`` (list the topics again and join anew when the set changed), the
SIGTERM hook that makes the member leave its group when Spark ends the process, the broker addresses of
partitions the query knows, and probes under private groups (a stale registration of the user's group,
410 on the broker, does not block them) for bounds and start times.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from tubespark.errors import TubeSparkError
from tubespark.spark.shutdown import install_shutdown_hooks
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.group import GroupSession
from tubespark.tubemq.client.metadata import topic_partitions
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.topics import subscribed_topics
from tubespark.tubemq.wire.formats import PartitionRef

log = logging.getLogger(__name__)


class GroupMembership:
    """One driver's member of ``options.group``; ``on_terminate`` runs when Spark ends the process."""

    def __init__(self, options: TubeMQOptions, run_id: str, on_terminate: Callable[[], None]) -> None:
        self.options = options
        self.group: str = options.group or ""
        self.probe_group = f"{self.group}-tubespark-probe"
        self.run_id = run_id
        self.refs: dict[str, PartitionRef] = {}
        """Every partition this member has seen, with its broker (a replayed batch may need one no longer held)."""
        self.served: set[str] = set()
        """Topics the query's offsets hold (its checkpoint, after a restart): see :meth:`remember`."""
        self._on_terminate = on_terminate
        self._session: GroupSession | None = None
        self._probe: BrokerClient | None = None  # probe_broker()'s, kept
        self._topics: tuple[str, ...] | None = None  # subscribed now (``topic``, or what topicPattern matched)
        self._topics_at = 0.0
        self._hooks_installed = False
        self._lock = threading.RLock()  # reentrant: the SIGTERM hook may close while a trigger holds it

    @property
    def topics(self) -> tuple[str, ...]:
        return self._topics or ()

    def session(self) -> GroupSession:
        """The group session, joined (and the master's first assignment awaited) on first use."""
        with self._lock:
            if self._session is None:
                opts = self.options
                if self._topics is None:
                    self._topics, self._topics_at = subscribed_topics(opts), time.monotonic()
                stream_ids = list(opts.stream_ids)
                session = GroupSession(list(opts.masters), self.group, self._topics, settings=opts.client_settings(),
                                       filters=dict.fromkeys(self._topics, stream_ids) if stream_ids else None,
                                       served=self.served)
                session.start()
                self._session = session
                if not self._hooks_installed:  # Spark 4.3 ends this process with SIGTERM, never calling stop()
                    install_shutdown_hooks(self._on_terminate)
                    self._hooks_installed = True
                # the master's first rebalance: what it assigns, held on the broker yet or not
                session.wait_for_assignment(opts.assignment_timeout_ms / 1000)
            return self._session

    def remember(self, offsets: Iterable[str]) -> None:
        """Note the topics of the query's offsets (partition keys; the reader's ``#`` marks are skipped) before the
        member joins: a query restarted just after a master failover meets a master that answers "not deployed"
        for every topic until it has loaded its configuration, and must wait for it rather than stop."""
        self.served.update(PartitionRef.parse_key(key)[1] for key in offsets if "#" not in key)

    def assigned(self) -> dict[str, PartitionRef]:
        assigned = self.session().assigned()
        self.refs.update(assigned)
        return assigned

    def refresh_topics(self) -> None:
        """``topicPattern``: list the topics again every ``topicRefreshIntervalMs``; when the matching set
        changed, join the group again with it. A new topic's partitions then join the query at the group's
        committed offset (earliest for a group that never read them); a removed topic's partitions are
        handled as vanished (``failOnDataLoss``)."""
        opts = self.options
        if opts.topic_pattern is None or time.monotonic() - self._topics_at < opts.topic_refresh_interval_ms / 1000:
            return
        self._topics_at = time.monotonic()
        try:
            topics = subscribed_topics(opts, allow_none=True)
        except TubeSparkError as exc:
            log.warning("cannot list the topics for topicPattern %r (trying again later): %s",
                        opts.topic_pattern.pattern, exc)
            return
        if not topics or topics == self._topics:
            return  # nothing matches any more: keep the current members' view; vanished partitions fail or go
        log.info("topicPattern %r of group %s now matches %s (was %s): joining the group again",
                 opts.topic_pattern.pattern, self.group, list(topics), list(self._topics or ()))
        with self._lock:
            session, self._session, self._topics = self._session, None, topics
        if session is not None:
            session.close()
        self.session()

    def layout(self, topics: Iterable[str]) -> dict[str, tuple[PartitionRef, ...]]:
        """The partitions the master lists for ``topics`` now (raises for a topic it does not know)."""
        return topic_partitions(list(self.options.masters), list(topics), self.options.client_settings(),
                                timeout_s=self.options.request_timeout_ms / 1000)

    @contextmanager
    def probe_broker(self) -> Iterator[BrokerClient]:
        """The broker client of the driver's private probe groups, kept for the member's life: one connection
        per broker, whatever the number of partitions. A client per probe opened a connection per partition
        at a query's start, at each AvailableNow start and, with ``maxBytesPerTrigger``, for every partition
        with a backlog on every trigger (size samples). Its pool replaces a broken connection on the next
        call, as the group session's does."""
        with self._lock:
            if self._probe is None:
                self._probe = BrokerClient(f"{self.probe_group}.{self.run_id}", self.options.client_settings())
            broker = self._probe
        yield broker

    def close(self) -> None:
        with self._lock:
            session, self._session = self._session, None
            probe, self._probe = self._probe, None
        if session is not None:
            session.close()
        if probe is not None:
            probe.close()
