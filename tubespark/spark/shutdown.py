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

    def on_term(signum: int, frame: Any) -> None:
        stop()
        if callable(previous):
            previous(signum, frame)
        else:
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
