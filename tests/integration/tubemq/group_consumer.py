"""A pull consumer for a server-balanced group, on top of :class:`GroupSession`: a test helper.

The connector reads through exact ranges and never consumes this way; the integration tests use it to
watch what a plain group member gets from the master (rebalances, authorisation), so it lives here and
not in the package.

It fetches from the partitions the master assigned to this member, one partition at a time, round
robin. Progress is committed the TubeMQ way: each fetch confirms the previous batch of that partition
(``lastPackConsumed``), and releasing a partition (rebalance or close) confirms its last batch. So a
message handed to the caller is not delivered again to this group unless the process dies first
(at-least-once across crashes, exactly-once across clean rebalances).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from tubespark.core.retry import RetryPolicy, poll
from tubespark.errors import NoDataError, TubeSparkError
from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.client.group import GroupSession
from tubespark.tubemq.wire.constants import ReadStatus
from tubespark.tubemq.wire.formats import PartitionRef
from tubespark.tubemq.wire.message import ReceivedMessage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConsumedBatch:
    partition: PartitionRef
    start_offset: int
    max_offset: int
    messages: list[ReceivedMessage]


class Consumer:
    """Consume topics as one member of ``group``. Use as a context manager.

    Args:
        start: ``"earliest"`` or ``"latest"``: where a group with no stored offset starts.
        filters: ``{topic: [streamId, ...]}`` server-side msgType filters.
    """

    def __init__(self, masters: str | list[str], group: str, topics: Iterable[str], *,
                 settings: ClientSettings | None = None, filters: dict[str, list[str]] | None = None,
                 start: str = "earliest", verify_checksums: bool = True) -> None:
        if start not in ("earliest", "latest"):
            raise ValueError(f"start must be 'earliest' or 'latest', not {start!r}")
        read_status = ReadStatus.FROM_STORED_OR_MIN if start == "earliest" else ReadStatus.FROM_MAX_IF_NEW
        self.verify_checksums = verify_checksums
        self._busy: dict[str, threading.Lock] = {}
        self._busy_lock = threading.Lock()
        self.session = GroupSession(masters, group, topics, settings=settings, filters=filters,
                                    read_status=read_status, release_consumed=True)
        self._turn = itertools.count()

    @property
    def client_id(self) -> str:
        return self.session.client_id

    def start(self) -> Consumer:
        self.session.start()
        return self

    def _lock_for(self, key: str) -> threading.Lock:
        with self._busy_lock:
            return self._busy.setdefault(key, threading.Lock())

    def poll(self, timeout_s: float = 5.0) -> ConsumedBatch | None:
        """Return the next non-empty batch from any held partition, or None after ``timeout_s``.

        Between rounds it sleeps briefly, or, while it holds nothing, waits for the group to assign
        something (which wakes it at once). An empty poll is routine, hence the DEBUG log level.
        """
        return poll(self._round, RetryPolicy(timeout_s=timeout_s, backoff_s=0.2, max_backoff_s=0.2,
                                             log_level=logging.DEBUG),
                    what=f"messages for group {self.session.group}", sleep=self._idle)

    def _round(self) -> ConsumedBatch | None:
        """One fetch from each held partition in turn, until one returns messages."""
        held = sorted(self.session.held().values(), key=lambda h: h.ref.key)
        turn = next(self._turn)  # once per round: advancing it per step would skip partitions
        for i in range(len(held)):
            batch = self._fetch(held[(turn + i) % len(held)].ref)
            if batch is not None and batch.messages:
                return batch
        return None

    def _idle(self, seconds: float) -> None:
        if self.session.held():
            time.sleep(seconds)
        else:
            self.session.wait_for_change(seconds)

    def _fetch(self, ref: PartitionRef) -> ConsumedBatch | None:
        with self._lock_for(ref.key):
            if ref.key not in self.session.held():  # revoked while we waited
                return None
            try:
                fetch = self.session.brokers.fetch(ref, self.session.group, last_consumed=True)
            except NoDataError:
                return None
            except TubeSparkError as exc:
                log.info("fetch %s failed: %s", ref.key, exc)
                return None
        return ConsumedBatch(ref, fetch.start, fetch.max_offset, fetch.decode(self.verify_checksums))

    def close(self) -> None:
        """Confirm the last batches (released as consumed) and leave the group."""
        self.session.close()

    def __enter__(self) -> Consumer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
