"""``dedupe`` on read: drop replays of a retried write task within one read task.

A tubespark writer stamps every message with a stable id (write or query+batch, task, row), so the
rows a retried task sends again carry the ids of the first attempt. Messages without a stamp pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


class ReplayFilter:
    """Remembers the stamps seen so far (one per read task) and lets each through once."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def first_time(self, stamp: str | None) -> bool:
        if stamp is None:
            return True
        if stamp in self.seen:
            return False
        self.seen.add(stamp)
        return True

    def keep(self, items: Iterable[T], stamp_of: Callable[[T], str | None]) -> list[T]:
        """The items whose stamp is new (or absent), in order."""
        return [item for item in items if self.first_time(stamp_of(item))]
