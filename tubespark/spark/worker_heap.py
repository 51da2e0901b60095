"""Keep a Spark Python worker's long-lived objects out of the full collection PySpark runs after every task.

Why: a reused Python worker (``spark.python.worker.reuse``, the default) calls ``gc.collect()`` after each
task (``pyspark/daemon.py``), and a full collection walks every object the collector tracks. A worker that
has imported pyspark, pyarrow and a tubespark reader tracks about 86,000 of them (modules, classes,
functions, protobuf descriptors), and each such collection cost 40-45 ms of CPU on the 2-core benchmark
machine. In the profile of a batch read inside Spark's workers (``docs/performance/hotpath.md``,
2026-11-25) it was the largest single step: 21% of the workers' CPU at 1 KiB and 32% at 100 B, more than
the socket, the decoding or PySpark's hand-over of the Arrow batches. None of that is garbage: it is the
worker's code.

:func:`freeze_worker_heap` collects once, then moves everything the worker holds into the collector's
permanent generation (``gc.freeze``), which later collections skip; objects made afterwards (each task's
batches, connections, readers) are collected as before, and reference counting frees frozen objects as
always. Only a reference cycle among frozen objects that later becomes garbage stays until the process
ends, which is why this runs once per process and right after a full collection (nothing frozen is
garbage then), and only inside a Spark task (the processes whose heap PySpark collects after each one).
``TUBESPARK_NO_GC_FREEZE=1`` (in the executors' environment: ``spark.executorEnv.TUBESPARK_NO_GC_FREEZE``)
turns it off.
"""

from __future__ import annotations

import gc
import logging
import os

from pyspark import TaskContext

NO_FREEZE_ENV = "TUBESPARK_NO_GC_FREEZE"

_log = logging.getLogger(__name__)
_frozen: set[int] = set()  # the pid that froze its heap (a forked worker is a new process: it freezes its own)


def freeze_worker_heap() -> bool:
    """Collect, then ``gc.freeze()`` what this process holds: once per process, only inside a Spark task
    (an executor's Python worker; not the driver's processes, not tests), not with ``TUBESPARK_NO_GC_FREEZE``.

    Returns whether it froze now."""
    pid = os.getpid()
    if pid in _frozen or TaskContext.get() is None:
        return False
    _frozen.add(pid)
    if os.environ.get(NO_FREEZE_ENV, "").strip() not in ("", "0"):
        return False
    gc.collect()
    gc.freeze()
    _log.info("froze %d objects out of the collection Spark runs after each task (%s=1 turns this off)",
              gc.get_freeze_count(), NO_FREEZE_ENV)
    return True
