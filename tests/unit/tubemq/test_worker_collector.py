"""What PySpark's collection after each task walks in a Python worker that runs TubeMQ read tasks.

PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker; the read task freezes the
worker's heap so that collection skips the worker's code (``tubespark/spark/worker_heap.py``). The first task
loads more (pyarrow imports pandas when it first converts a Python value), and before the refreeze all of it,
about 33,000 objects, was walked again after every later task: 24-40 ms per task in Spark
(``docs/performance/breakdown.md``). A fresh interpreter stands in for a fresh worker (this test process has
loaded whatever other tests loaded); the broker is the scripted fake, in this process, so the worker's heap
holds only what the read leaves behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doubles.fakebroker import FakeBroker
from tubespark.tubemq.wire.message import OutgoingMessage

ROWS = 600
TASKS = 4
WALKED_AT_MOST = 1500  # a task's own leftovers are a few hundred; the unfrozen pandas was ~33,000

WORKER = """
import gc, json, sys, time
from pyspark import TaskContext
from tubespark.spark.worker_heap import freeze_worker_heap
from tubespark.tubemq.spark.adapter import QueueRange, read_range
from tubespark.tubemq.spark.options import TubeMQOptions

host, port, broker_id, partition, end, tasks = sys.argv[1], *map(int, sys.argv[2:])
options = TubeMQOptions.from_raw({"master": "127.0.0.1:1", "topic": "collector"}, mode="read")
out = []
for k in range(tasks):
    TaskContext._setTaskContext(TaskContext())  # as pyspark.worker sets it for each task
    task = QueueRange(broker_id, host, port, "collector", partition, 0, end, "collector_reader", "collector_client")
    rows = sum(batch.num_rows for batch in read_range(task, options))
    started = time.process_time()
    freeze_worker_heap()  # what the next read task's start costs once the heap is frozen
    check_ms = (time.process_time() - started) * 1000
    TaskContext._setTaskContext(None)
    gc.collect()  # what pyspark.daemon runs after each task
    out.append([rows, len(gc.get_objects()), check_ms])  # what the next task's collection walks
print(json.dumps(out))
"""


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker(batch_size=150) as fake:
        [ref] = fake.add_topic("collector")
        fake.append(ref, *(OutgoingMessage(b"v" * 100, msg_type="s1", msg_time="202401021530",
                                           attributes={"k": "v"}) for _ in range(ROWS)))
        yield fake


def test_the_collection_after_each_task_walks_only_what_the_tasks_left(broker: FakeBroker) -> None:
    ref = broker.partitions("collector")[0]
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("TUBESPARK_NO_GC_FREEZE", None)
    done = subprocess.run([sys.executable, "-c", WORKER, broker.host, str(broker.port), str(broker.broker_id),
                           str(ref.partition_id), str(ROWS * 28), str(TASKS)], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    tasks = json.loads(done.stdout.strip().splitlines()[-1])
    assert [rows for rows, _, _ in tasks] == [ROWS] * TASKS
    walked = [objects for _, objects, _ in tasks]
    # From the second task on, the modules the first one loaded are frozen too.
    assert max(walked[1:]) <= WALKED_AT_MOST, walked
    assert walked[-1] <= walked[1] + 100, walked  # and later tasks leave nothing that accumulates
    # A task's check whether to freeze again must not walk the frozen heap (gc.get_freeze_count does: 5-16 ms)
    checks = sorted(ms for _, _, ms in tasks[1:])
    assert checks[len(checks) // 2] < 2.0, checks
