"""``dedupe`` on read: drop replays of a retried write task within one read task.

A tubespark writer stamps every message with a stable id (write or query+batch, task, row), so the
rows a retried task sends again carry the ids of the first attempt. Messages without a stamp pass.
"""

from __future__ import annotations


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
