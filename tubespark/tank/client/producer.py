"""Sending bundles to a TANK broker with many Produce requests in flight.

Why a window and not one request at a time: a Produce round trip costs about as much as encoding a
bundle, so waiting for each answer halves a writer's rate. :class:`Producer` keeps up to
``max_in_flight`` requests on the wire (core's connection pipelines them, answers come back by request
id), and settles the oldest one only when the window is full or on :meth:`Producer.flush`. All of it
runs in the caller's thread: nothing to stop, nothing left behind by a failed Spark task.

Settling a request reads its per-partition codes (docs/tank/protocol.md#produce): a retriable code
(I/O fault, missing acknowledgements, no leader, another leader) or a lost connection or timeout sends
that partition's bundle again, at most ``retries`` times; anything else (unknown topic or partition,
read-only broker, invalid sequence numbers) raises at once. A re-sent bundle may land after bundles
sent later to the same partition, and one whose first send was stored but not acknowledged is stored
twice: delivery is at-least-once, in order only while nothing is retried.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from tubespark.core.framed import wait
from tubespark.core.outage import OutageWindow
from tubespark.core.retry import RetryPolicy
from tubespark.errors import BrokerConnectionError, TubeSparkError
from tubespark.tank.client.broker import ClientSettings, TankClient
from tubespark.tank.errors import LeaderMovedError
from tubespark.tank.wire.codes import produce_error
from tubespark.tank.wire.requests import ProduceBundle, ProduceRequest, ProduceResult

log = logging.getLogger(__name__)


@dataclass
class _InFlight:
    request: ProduceRequest
    future: Future[tuple[ProduceResult, ...]]
    attempt: int
    sent_at: float


class Producer:
    """Produce requests to one broker; not thread-safe (one per writing task or thread)."""

    def __init__(self, address: str, settings: ClientSettings | None = None, *, max_in_flight: int = 16,
                 retries: int = 3, outage_s: float = 0.0) -> None:
        if max_in_flight < 1 or retries < 0:
            raise ValueError("max_in_flight >= 1 and retries >= 0")
        self.settings = settings or ClientSettings()
        self.client = TankClient(address, self.settings)
        self.max_in_flight = max_in_flight
        self.retries = retries
        self.retry_policy = RetryPolicy(attempts=retries + 1, backoff_s=0.05, max_backoff_s=1.0)
        """The re-sends' bound, backoff (a broker that just faulted gets a moment: 50 ms doubling up to 1 s,
        jittered) and which errors they follow (the errors' own ``retriable``): core's one retry rule."""
        self._outage = OutageWindow(outage_s)  # after the retries, a broker that is down is waited for this long
        self._window: deque[_InFlight] = deque()
        self.requests_sent = 0
        self.resent = 0
        self.max_window = 0
        """The most requests that were in flight at once (what ``max_in_flight`` allowed in practice)."""

    def send(self, topic: str, bundles: Mapping[int, bytes]) -> None:
        """Queue one Produce request of ``{partition: bundle}`` (encoded bundles, one per partition).

        Returns once it is on the wire; errors of earlier requests surface here or in :meth:`flush`.
        """
        request = ProduceRequest([(topic, [ProduceBundle(p, b) for p, b in sorted(bundles.items())])],
                                 self.client.client_id)
        while len(self._window) >= self.max_in_flight:
            self._settle(self._window.popleft())
        self._transmit(request, 0)

    def flush(self) -> None:
        """Wait until every request sent so far is acknowledged; raise the first error that is final."""
        while self._window:
            self._settle(self._window.popleft())

    def close(self) -> None:
        """Forget unsettled requests and close the connection (the task failed or is done)."""
        self._window.clear()
        self.client.close()

    def _transmit(self, request: ProduceRequest, attempt: int) -> None:
        try:
            future = self.client.produce_async(request)
        except BrokerConnectionError as exc:  # never reached the wire: fail the future, settle it like the others
            self.client.reset()
            future = Future()
            future.set_exception(exc)
        self._window.append(_InFlight(request, future, attempt, time.monotonic()))
        self.requests_sent += 1
        self.max_window = max(self.max_window, len(self._window))

    def _settle(self, item: _InFlight) -> None:
        left = max(0.0, item.sent_at + self.settings.request_timeout_s - time.monotonic())
        topic = item.request.topics[0][0]
        try:
            results = wait(item.future, left, f"Produce to {topic} on {self.client.address}")
        except TubeSparkError as exc:
            if not self.retry_policy.should_retry(exc):
                raise
            self.client.reset()
            self._retry(item, item.request.topics[0][1], exc)
            return
        failed: list[ProduceBundle] = []
        last_error: TubeSparkError | None = None
        by_partition = {b.partition: b for b in item.request.topics[0][1]}
        for result in results:
            if result.code == 0:
                continue
            error = produce_error(result.code, f"{topic}/{result.partition}", leader=result.leader,
                                  broker=self.client.address)
            if not self.retry_policy.should_retry(error):
                raise error
            if isinstance(error, LeaderMovedError):
                log.info("%s: following the leader to %s", topic, error.address)
                self.client.close()
                self.client = TankClient(error.address, self.settings, entry_point=False)
            failed.append(by_partition[result.partition])
            last_error = error
        if failed and last_error is not None:
            self._retry(item, failed, last_error)
        else:
            self._outage.clear()

    def _retry(self, item: _InFlight, bundles: Sequence[ProduceBundle], error: TubeSparkError) -> None:
        tries = item.attempt + 1
        if not self.retry_policy.allows(tries) and not self._outage.allows(error):
            final = self._outage.error(error, f"Produce to {item.request.topics[0][0]} on {self.client.address}")
            if final is error:
                raise error
            raise final from error
        parts = list(bundles)
        time.sleep(self.retry_policy.delay(tries))
        log.info("re-sending %d bundle(s) to %s (try %d of %d) after: %s", len(parts), item.request.topics[0][0],
                 item.attempt + 2, self.retries + 1, error)
        self.resent += 1
        request = ProduceRequest([(item.request.topics[0][0], parts)], self.client.client_id)
        self._transmit(request, item.attempt + 1)
