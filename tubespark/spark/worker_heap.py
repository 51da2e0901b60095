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

Once is not enough: the first task loads more than the worker had when it froze. pyarrow imports pandas
(about 33,000 tracked objects, pyarrow.compute among them) the first time it converts a Python value
(``pa.scalar``, ``pa.array``: every batch's constant columns), and PySpark loads its own modules around the
first batch it hands over. All of that stayed young and every later collection walked it: in the profile of
``docs/performance/breakdown.md`` the collector still cost 24-40 ms per task. So each later task's first
call counts what the collector tracks outside the frozen heap (``gc.get_objects``: a few hundred objects, a
few microseconds, once per task) and when it is more than :data:`REFREEZE_ABOVE`, collects and freezes
again. The survivors of the collection PySpark ran after the previous task are then the worker's own, and
what a task made for itself and still holds (its reader, its options: a few hundred objects) stays frozen
for good: a refreeze happens only when thousands of objects arrived, in practice once, at the second task.
"""

from __future__ import annotations

import gc
import logging
import os

from pyspark import TaskContext

NO_FREEZE_ENV = "TUBESPARK_NO_GC_FREEZE"
REFREEZE_ABOVE = 2000
"""Tracked objects outside the frozen heap, at a task's start, above which the worker collects and freezes
again (a task's own setup is a few hundred; pandas, loaded by the first task, is about 33,000)."""

_log = logging.getLogger(__name__)
_frozen: dict[int, int] = {}  # pid -> its freezes (a forked worker is a new process: it freezes its own)
MAX_FREEZES = 3
"""Freezes per process at most: the first task's and two more. A refreeze keeps what the task that makes it
holds for good (its own setup), so if some workload brought thousands of new objects to every task, the
worker would stop freezing them (and collect them as it did before) rather than keep them all."""


def freeze_worker_heap() -> bool:
    """Collect, then ``gc.freeze()`` what this process holds: at the first task of a process, and at a later
    one when more than :data:`REFREEZE_ABOVE` tracked objects arrived since (the modules the first task loaded),
    :data:`MAX_FREEZES` times at most; only inside a Spark task (an executor's Python worker; not the driver's
    processes, not tests), not with ``TUBESPARK_NO_GC_FREEZE``.

    Returns whether it froze now. (``gc.get_freeze_count`` is not asked on the way: it walks every frozen
    object, ~16 ms for a worker's, which is what the freeze saves.)"""
    if TaskContext.get() is None:
        return False
    pid = os.getpid()
    done = _frozen.get(pid)
    if done is None:
        if os.environ.get(NO_FREEZE_ENV, "").strip() not in ("", "0"):
            _frozen[pid] = MAX_FREEZES  # switched off: never freezes in this process
            return False
    elif done >= MAX_FREEZES or len(gc.get_objects()) <= REFREEZE_ABOVE:
        return False  # frozen enough, or nothing much arrived since
    gc.collect()
    young = len(gc.get_objects())
    gc.freeze()
    _frozen[pid] = (done or 0) + 1
    _log.info("froze %d %sobjects out of the collection Spark runs after each task (%s=1 turns this off)",
              young, "more " if done else "", NO_FREEZE_ENV)
    return True
