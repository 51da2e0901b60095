"""Running streaming queries in the contract tests: waiting on them and collecting what each batch read."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def assert_running(when: str, *queries: Any) -> None:
    """Fail naming every query of ``queries`` that stopped, with its error."""
    stopped = [f"query {q.name or q.id} stopped {when}: {q.exception()}" for q in queries if not q.isActive]
    assert not stopped, "\n".join(stopped)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, *queries: Any) -> None:
    """Poll ``predicate`` until it holds; fail at the timeout, or at once (with their errors) when one of
    ``queries`` stopped."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert_running(f"while waiting for {what}", *queries)
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.2)


def available_now_batches(frame: Any, checkpoint: Path, *, on_batch: Callable[[int], None] | None = None,
                          timeout: float = 180) -> list[list[bytes]]:
    """Run ``frame`` (a stream with a ``value`` column) with Trigger.AvailableNow to its end; the values of
    each non-empty micro-batch, in batch order. ``on_batch(batch_id)`` runs first in every batch."""
    batches: dict[int, list[bytes]] = {}

    def record(batch: Any, batch_id: int) -> None:
        if on_batch is not None:
            on_batch(batch_id)
        values = [bytes(r.value) for r in batch.select("value").collect()]
        if values:
            batches[batch_id] = values

    query = (frame.writeStream.foreachBatch(record).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(timeout), f"the AvailableNow run did not end within {timeout} s"
    assert query.exception() is None, query.exception()
    return [batches[k] for k in sorted(batches)]


def committed_batches(checkpoint: Path) -> int:
    """Micro-batches a query committed to its checkpoint."""
    commits = checkpoint / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


def values(n: int, tag: str, size: int = 0) -> list[bytes]:
    """``n`` distinct message values ``tag-00000...``, padded with ``x`` to ``size`` bytes."""
    return [f"{tag}-{i:05d}".encode().ljust(size, b"x") for i in range(n)]
