"""Keep popped messages hidden while someone still holds them: change their invisible time before it runs out.

A popped message is hidden for its invisible time only; a holder that needs longer (a Spark task still
handing rows on, a driver waiting for the batch's commit) extends it with CHANGE_MESSAGE_INVISIBLETIME, or
the broker delivers it again while it is being worked on. Each change voids the old receipt and returns a
new one, so whoever acks later must ack with the newest (docs/rocketmq/protocol.md, "Changing the
invisible time").

When: a receipt is renewed once less than half of ``invisible_ms`` is left (by its pop time and invisible
time, which are the broker's clock: holders' clocks must agree with the brokers' to well within a quarter of
``invisible_ms``), and holders look :data:`LOOKS_PER_PERIOD` times per ``invisible_ms``. So a held receipt
always has more than a quarter of the time left when it changes hands (the task publishes it, the driver's
keeper picks it up within an eighth), and a renewal starts with at least three eighths left.

That margin must hold on a loaded machine: a holder renews thousands of receipts at once, one change per
message, each of which the broker answers only once it has written a checkpoint and an ack to its revive
topic (and gives up after 3 s). With a 10 s invisible time the margin (5 s at the decision, 3.75 s at the
latest look) was too short: a batch of 8,000 messages on a busy 2-core machine came back 4,000 times; with
30 s (15 s) it did not. :data:`MIN_INVISIBLE_MS` is therefore twice :data:`RENEW_MARGIN_MS`, the margin
RocketMQ's own proxy keeps when it renews for its clients (``renewAheadTimeMillis`` 10 s, scanned every 5 s:
docs/rocketmq/protocol.md, "How much time a renewal needs"), rounded up to what was measured to hold.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from tubespark.errors import TubeSparkError
from tubespark.rocketmq.client.pop import PopConsumer
from tubespark.rocketmq.wire.pop import Receipt

log = logging.getLogger(__name__)

LOOKS_PER_PERIOD = 8

RENEW_MARGIN_MS = 15_000
"""The least time a receipt has left when its renewal is decided (half the invisible time, at least this)."""

MIN_INVISIBLE_MS = 2 * RENEW_MARGIN_MS
"""The shortest invisible time holders renew safely (``popInvisibleTimeMs`` refuses less): renewed at half."""


def now_ms() -> int:
    return int(time.time() * 1000)


def look_interval_s(invisible_ms: int) -> float:
    """How often a holder looks for receipts to renew."""
    return invisible_ms / 1000 / LOOKS_PER_PERIOD


def due(receipt: str, invisible_ms: int, at_ms: int) -> bool:
    """True when less than half of ``invisible_ms`` is left before ``receipt``'s message reappears."""
    parsed = Receipt.parse(receipt)
    return parsed.pop_time + parsed.invisible_ms - at_ms < invisible_ms / 2


def renew_due(consumer: PopConsumer, receipts: Sequence[str], invisible_ms: int, at_ms: int | None = None
              ) -> tuple[list[str], int]:
    """``receipts`` with those that are due replaced by their renewed receipts, and how many were renewed.

    A receipt whose change failed is kept as it was (its message reappears when its time runs out: the
    at-least-once path); the failure is logged."""
    at = now_ms() if at_ms is None else at_ms
    wanted = [i for i, r in enumerate(receipts) if due(r, invisible_ms, at)]
    if not wanted:
        return list(receipts), 0
    results = consumer.change_invisible_many([receipts[i] for i in wanted], invisible_ms)
    out = list(receipts)
    renewed = 0
    failures: list[TubeSparkError] = []
    for i, result in zip(wanted, results, strict=True):
        if isinstance(result, TubeSparkError):
            failures.append(result)
        else:
            out[i] = result
            renewed += 1
    if failures:
        log.warning("could not extend the invisible time of %d of %d popped messages of %s (they are delivered "
                    "again when it runs out): %s", len(failures), len(wanted), consumer.topic, failures[0])
    return out, renewed


class Keeper:
    """Holds receipts by topic and renews them in a background thread until :meth:`release`."""

    def __init__(self, consumers: Mapping[str, PopConsumer], invisible_ms: int,
                 clock: Callable[[], int] = now_ms) -> None:
        self._consumers = consumers
        self._invisible_ms = invisible_ms
        self._clock = clock
        self._held: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renewed = 0
        """Renewals so far (a receipt renewed twice counts twice)."""

    def hold(self, topic: str, receipts: Sequence[str]) -> None:
        with self._lock:
            self._held.setdefault(topic, []).extend(receipts)

    def renew(self) -> int:
        """Renew what is due now; returns how many."""
        count = 0
        with self._lock:
            for topic, receipts in self._held.items():
                try:
                    self._held[topic], renewed = renew_due(self._consumers[topic], receipts, self._invisible_ms,
                                                           self._clock())
                except TubeSparkError as exc:  # e.g. no route now: the next look tries again
                    log.warning("extending the invisible time of %s failed this time: %s", topic, exc)
                    continue
                count += renewed
        self.renewed += count
        return count

    def start(self) -> Keeper:
        self._thread = threading.Thread(target=self._run, name="tubespark-pop-keeper", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(look_interval_s(self._invisible_ms)):
            self.renew()

    def release(self) -> dict[str, list[str]]:
        """Stop renewing; the current receipts by topic (the ones that ack the messages now)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            return {topic: list(receipts) for topic, receipts in self._held.items()}
