"""Micro-benchmark of the InLong bundled sink's Python side: :class:`BundledSend` packing and encoding rows.

No broker and no Spark: the rows (only a ``value`` column, as ``python -m bench``'s sink cases write them) go
through ``BundledSend.send_all`` into a producer that only encodes each message, so what is timed is the work a
Spark write task's Python worker does per row before the socket. Prints CPU microseconds per row (the best of
``--repeats`` runs after one warm-up: this machine's speed moves from run to run), or a cProfile table.

```bash
PYTHONPATH=.:testbed python -m bench.bundle_micro --size 100                  # this tree
PYTHONPATH=.:testbed python -m bench.bundle_micro --size 100 --old /tmp/old   # a copy holding tubespark/
PYTHONPATH=.:testbed python -m bench.bundle_micro --size 100 --profile
```
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from typing import Any


class _EncodingProducer:
    """Stands in for the TubeMQ producer (no broker here): checks and encodes each message as it would."""

    def __init__(self) -> None:
        self.sent = 0

    def publish(self, topics: list[str], timeout_s: float = 60.0) -> None:
        pass

    def max_message_size(self, topic: str) -> int:
        return 1 << 20

    def choose_partition(self, topic: str, key_hash: int | None = None) -> Any:
        raise AssertionError("rows without a partitionKey or dedup id are not routed by hash")

    def send_async(self, topic: str, message: Any, partition: Any = None, *, key_hash: int | None = None,
                   defer: bool = False) -> None:
        message.encode()
        self.sent += 1

    def flush(self) -> list[Any]:
        return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100, help="value bytes per row")
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--old", help="a directory holding another tubespark/ to time instead")
    parser.add_argument("--profile", action="store_true", help="print a cProfile table of one run")
    args = parser.parse_args(argv)
    if args.old:
        sys.path.insert(0, args.old)
    import pyarrow as pa

    from tubespark.tubemq.spark import writer
    from tubespark.tubemq.spark.options import TubeMQOptions

    options = TubeMQOptions.from_raw({"master": "h:1", "topic": "events", "payloadFormat": "inlongmsg"},
                                     mode="write")
    values = pa.array([str(i).ljust(args.size, "x").encode() for i in range(args.rows)], pa.binary())
    batches = [pa.record_batch([values.slice(i, 10_000)], names=["value"]) for i in range(0, args.rows, 10_000)]

    def run() -> int:
        producer = _EncodingProducer()
        writer.BundledSend(producer, options, "events", None).send_all(iter(batches))  # type: ignore[arg-type]
        return producer.sent

    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(run)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        return 0
    run()
    times = []
    for _ in range(args.repeats):
        t0 = time.process_time()
        bundles = run()
        times.append((time.process_time() - t0) / args.rows * 1e6)
    print(f"{writer.__file__}: {args.size} B rows, CPU us per row best {min(times):.3f} "
          f"(runs {', '.join(f'{t:.2f}' for t in times)}), {bundles} bundles per run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
