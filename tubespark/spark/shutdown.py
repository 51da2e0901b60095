"""Driver-side cleanup: Spark 4.3 ends the Python process hosting a stream reader with SIGTERM.

``stop()`` is never called then, so a reader holding a membership (a consumer group, a lease)
registers its ``stop`` here to leave at once instead of waiting for the server's session timeout.
"""

from __future__ import annotations

import atexit
import signal
import threading
from collections.abc import Callable
from typing import Any


def install_shutdown_hooks(stop: Callable[[], None]) -> None:
    """Call ``stop`` at interpreter exit and on SIGTERM (then chain to the previous handler)."""
    atexit.register(stop)
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    first = threading.Lock()

    def on_term(signum: int, frame: Any) -> None:
        # Spark stops the process twice (stopWorker, then the factory's stop): a second SIGTERM arrives
        # while the first one's stop() is still leaving the group. Handled like the first, it would raise
        # SystemExit inside that stop() and cut it short, and the master would count the gone member
        # until its session timed out (the next run of the query then gets only part of its partitions).
        # The second handler runs inside the first, on the same thread, between any two of its bytecodes: so
        # the mark is one atomic step that never waits (an Event's set() takes a lock, and a second SIGTERM
        # inside it waited on that lock for ever: a source process that never exited, seen in CI).
        if not first.acquire(blocking=False):
            return
        stop()
        if callable(previous):
            previous(signum, frame)
        else:
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
