"""Micro-benchmark of the sink's send path below Spark: the Producer alone against a real local broker.

Starts a :class:`tubespark_testbed.LocalCluster` with topic ``cs100`` (1 partition on each of 4 stores)
unless ``--master`` names a running one with that topic, then sends ``--messages`` messages of
``--size`` bytes in groups of ``--batch`` (the sink's Arrow batch of rows) six ways, alternating in one
process: the per-message path (``send_async(defer=True)`` + ``flush``, the sink before the batched path)
and the batched path (``prepare`` + ``send_prepared``), each on the compiled and on the pure-Python
twin, and the batched path on the compiled twin with each request framed by its own calls (what
``encode_send_frames``' one call per window saves), and the sink's row loop (``writer.send_batches``
over Arrow batches of ``--batch`` rows, on whichever path the checkout's sink uses). Building each
:class:`OutgoingMessage` is inside the timing, as in the sink's row loop.

Reported per way: the median msgs/s (wall) and **CPU microseconds per message** of this process (all its
threads: the sender and the connections' reader threads; ``resource.getrusage``), which a loaded machine
distorts far less than wall rates.

```bash
PYTHONPATH=.:testbed python -m bench.client_send --messages 200000 --repeats 5
```
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable

TOPIC = "cs100"


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _ways(producer: object, master: str, body: bytes, messages: int, batch: int) -> dict[str, Callable[[], None]]:
    from tubespark.tubemq.client.producer import Producer
    from tubespark.tubemq.wire import twin
    from tubespark.tubemq.wire.message import OutgoingMessage

    assert isinstance(producer, Producer)

    def old() -> None:
        for start in range(0, messages, batch):
            for _ in range(min(batch, messages - start)):
                producer.send_async(TOPIC, OutgoingMessage(body, msg_type="t"), defer=True)
            producer.flush()

    def new() -> None:
        for start in range(0, messages, batch):
            items = [producer.prepare(TOPIC, OutgoingMessage(body, msg_type="t"))
                     for _ in range(min(batch, messages - start))]
            producer.send_prepared(items)

    def pure(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            with twin.pure_python():
                fn()
        return run

    def framed_one_by_one(fn: Callable[[], None]) -> Callable[[], None]:
        """The batched path with each request enveloped and framed by its own calls (``encode_send`` and
        ``encode_frame``, as the per-message path does) instead of ``encode_send_frames``' one call a window."""
        from tubespark.tubemq.wire.frame import encode_frame
        from tubespark.tubemq.wire.send import SendRequest

        def one_by_one(requests: list[SendRequest], serials: list[int], timeout_ms: int,
                       auth: tuple[int, str] | None = None) -> bytes:
            pairs = zip(requests, serials, strict=True)
            return b"".join([encode_frame(serial, request.envelope(timeout_ms, auth)) for request, serial in pairs])

        def run() -> None:
            from tubespark.tubemq.client import batch_send  # here: an old checkout (--ways) has none

            saved = batch_send.encode_send_frames
            batch_send.encode_send_frames = one_by_one  # type: ignore[assignment]
            try:
                fn()
            finally:
                batch_send.encode_send_frames = saved
        return run

    def sink() -> None:
        """The sink's row loop (``writer.send_batches``) over Arrow batches of ``batch`` rows: what a write
        task runs, with its own cached producer (either path, whichever the checkout's sink uses)."""
        import pyarrow as pa

        from tubespark.tubemq.spark import writer
        from tubespark.tubemq.spark.options import TubeMQOptions

        options = TubeMQOptions.from_raw({"master": master, "topic": TOPIC,
                                          "maxInFlight": str(producer.max_in_flight)}, mode="write")
        rows = pa.record_batch({"value": pa.array([body] * batch, pa.binary())})
        writer.send_batches(iter([rows] * (messages // batch)), options, None)

    return {"sink row loop, compiled": sink, "per-message, compiled": old, "batched, compiled": new,
            "batched, compiled, framed 1 by 1": framed_one_by_one(new),
            "per-message, pure": pure(old), "batched, pure": pure(new)}


def _measure(master: str, args: argparse.Namespace) -> None:
    from tubespark.tubemq.client.producer import Producer
    from tubespark.tubemq.wire import twin

    print(f"hot path: {twin.HOT_PATH}", flush=True)
    with Producer(master, max_in_flight=args.max_in_flight) as producer:
        producer.publish([TOPIC], timeout_s=240.0)
        ways = _ways(producer, master, os.urandom(args.size), args.messages, args.batch)
        wall: dict[str, list[float]] = {name: [] for name in ways}
        cpu: dict[str, list[float]] = {name: [] for name in ways}
        if args.messages % args.batch:
            raise SystemExit("--messages must be a multiple of --batch")
        names = [name for name in ways if not args.ways or any(name.startswith(w) for w in args.ways.split(","))]
        for rep in range(args.warmup + args.repeats):
            for name in names if rep % 2 == 0 else names[::-1]:
                cpu0, wall0 = _cpu_s(), time.perf_counter()
                ways[name]()
                wall1, cpu1 = time.perf_counter(), _cpu_s()
                if rep >= args.warmup:
                    wall[name].append(wall1 - wall0)
                    cpu[name].append(cpu1 - cpu0)
    if "tubespark.tubemq.spark.writer" in sys.modules:  # the sink's cached producer
        for cached in sys.modules["tubespark.tubemq.spark.writer"]._producers.values():
            cached.close()
    print(f"{args.messages} x {args.size} B in groups of {args.batch}, maxInFlight {args.max_in_flight}, "
          f"median of {args.repeats}:")
    for name in names:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"  {name:<32} {args.messages / w:>9,.0f} msgs/s  {c / args.messages * 1e6:6.2f} us CPU/msg  "
              f"(wall {', '.join(f'{s:.2f}' for s in wall[name])} s)", flush=True)
    for kind in ("compiled", "pure"):
        if f"per-message, {kind}" not in wall or not wall[f"per-message, {kind}"] or not wall[f"batched, {kind}"]:
            continue
        old, new = f"per-message, {kind}", f"batched, {kind}"
        speed = statistics.median(wall[old]) / statistics.median(wall[new])
        print(f"  {kind}: batched/per-message msgs/s {speed:.2f}x, CPU/msg "
              f"{statistics.median(cpu[new]) / statistics.median(cpu[old]):.2f}x", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.client_send", description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=10_000, help="messages per flush / send_prepared")
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--ways", help="only the ways whose names start with one of these (comma list), e.g. "
                                           "'per-message' for an old checkout without the batched path")
    parser.add_argument("--master", help="host:port of a running cluster with topic cs100 (else start one)")
    args = parser.parse_args(argv)
    if args.master:
        _measure(args.master, args)
        return
    from tubespark_testbed import LocalCluster

    with LocalCluster(topics=[(TOPIC, 1, 4)]) as cluster:
        _measure(cluster.master_address, args)


if __name__ == "__main__":
    main()
