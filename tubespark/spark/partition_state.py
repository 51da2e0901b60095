"""One record per partition of a stream: everything the engine knows about it, in one place.

aiokafka keeps one state object per assigned partition; so does the stream engine. What used to be eight
dicts keyed by partition (the latest end seen, the AvailableNow target, the message-size sample, the start's
``#last`` fingerprint and ``#last@`` history, the incarnation it was checked under, a deferred remainder's
floor, the offset last stored on the broker) is one :class:`PartitionState`, and a broker keeps what only it
needs in :attr:`PartitionState.extra` (TubeMQ: where the group's rebalances left the partition).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

UNCHECKED: Any = object()
"""``checked_under`` of a partition whose ``#last`` mark was not taken or checked in this process."""


class Status(enum.Enum):
    """Where a partition stands after the latest trigger."""

    NEW = "not surveyed yet"
    READABLE = "readable"
    UNAVAILABLE = "cannot be read this trigger"
    PARKED = "kept at its offset (not this query's to read now)"
    DEFERRED = "the rest of a range is left to a later batch (its broker was down)"
    LOST = "resumed past data the broker lost"
    GONE = "removed for good"


@dataclass
class PartitionState:
    """A stream's partition: its status and what the engine learnt of it."""

    key: str
    status: Status = Status.NEW
    why: str = ""
    latest: int | None = None
    """The broker's end at the latest survey (``reportLatestOffset``)."""
    target: int | None = None
    """Where a Trigger.AvailableNow run stops reading it."""
    size_at: int | None = None
    """The offset its mean message size was sampled at (``maxBytesPerTrigger``)."""
    mean_size: float = 0.0
    fingerprint: int | None = None
    """The start's ``#last`` mark: the message below the start, as the previous batch read it."""
    history: dict[int, int] = field(default_factory=dict)
    """The start's ``#last@`` marks (offset -> fingerprint): where a broker's loss began."""
    checked_under: Any = UNCHECKED
    """The broker's :meth:`~tubespark.spark.broker.Broker.incarnation` its ``#last`` was taken or checked under."""
    floor: int | None = None
    """Where a deferred remainder starts: a commit never stores past it."""
    stored: int | None = None
    """The offset last stored on the broker (a group's offsets)."""
    extra: Any = None
    """The broker's own record of the partition."""

    def mark(self, status: Status, why: str = "") -> None:
        self.status, self.why = status, why or status.value


class PartitionTable:
    """The stream's :class:`PartitionState` s by key, created on first use."""

    def __init__(self) -> None:
        self._states: dict[str, PartitionState] = {}

    def __getitem__(self, key: str) -> PartitionState:
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = PartitionState(key)
        return state

    def get(self, key: str) -> PartitionState | None:
        return self._states.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._states

    def __iter__(self) -> Iterator[PartitionState]:
        return iter([self._states[key] for key in sorted(self._states)])

    def forget(self, key: str) -> None:
        self._states.pop(key, None)

    def summary(self) -> dict[str, str]:
        """``{key: status}`` of every partition, for logs and tests."""
        return {state.key: state.status.name.lower() for state in self}
