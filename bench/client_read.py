"""Micro-benchmark of the executor read path below Spark: :class:`RangeReader` over a local cluster.

Starts a :class:`tubespark_testbed.LocalCluster` with topics ``cr100`` and ``cr1k`` (1 partition on 4
stores each: 4 partitions), fills them with ``--messages`` messages of 100 B and of 1 KiB through our
Producer, then reads ``[min, max)`` of each of the 4 partitions with one RangeReader in one thread and
reports msgs/s and MB/s (payload bytes). Every measured run is a fresh subprocess, so an ``--old`` copy
of the package (a directory holding a ``tubespark/`` package, e.g. ``/tmp/me-old``) can be compared
with the working tree: runs alternate old/new, and the ratio of medians is printed.

```bash
PYTHONPATH=.:testbed python -m bench.client_read --messages 100000 --repeats 5 --old /tmp/me-old
PYTHONPATH=.:testbed python -m bench.client_read --setup-only --spec /tmp/cr.json   # keep a cluster up
PYTHONPATH=.:testbed python -m bench.client_read --spec /tmp/cr.json --profile new   # reuse it, cProfile
```

``--api batches`` (default) times ``RangeReader.read_batches``; ``--api arrow`` times the executor's whole
read (``tubespark.tubemq.spark.read_task.read_range``: broker reads plus the Arrow batches handed to Spark);
``--api spark`` adds the hand-over as Spark's Python worker does it (each batch wrapped in one struct column
and written as an Arrow IPC stream through a 64 KiB buffered file, here a pipe to ``cat > /dev/null``).
Besides wall msgs/s each run reports its CPU time per message (user + system of the whole process, every
thread, from ``resource.getrusage``), which a shared, loaded machine distorts far less than wall rates, and
its minor page faults per message (memory the process touched for the first time: a buffer given back to the
OS and allocated again faults anew).
Each run first reads one partition untimed, so lazy imports and first calls (about 0.5 us per message
of a 300,000-message run) do not count: a Spark worker is long-lived.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = {"100": ("cr100", 100), "1024": ("cr1k", 1024)}
ROOT = Path(__file__).resolve().parent.parent


# --- worker: runs in a subprocess with the implementation under test first on sys.path ------------------


def _worker(spec: dict, size: str, api: str, profile: str | None) -> dict:
    import resource
    import uuid

    from tubespark.tubemq.client.broker import BrokerClient
    from tubespark.tubemq.client.ranges import RangeReader
    from tubespark.tubemq.wire.formats import PartitionRef

    info = spec["sizes"][size]
    parts = [(PartitionRef(*p["ref"]), p["min"], p["max"]) for p in info["partitions"]]
    sink = None
    if api in ("arrow", "spark"):  # imported before the clock starts: pyspark and pyarrow take a while
        from tubespark.tubemq.spark.options import TubeMQOptions
        from tubespark.tubemq.spark.read_task import QueueRange, read_range
    if api == "spark":
        sink = SparkHandover()
    broker = BrokerClient(f"crbench_{uuid.uuid4().hex[:8]}")
    reader = RangeReader(broker, f"crbench_{uuid.uuid4().hex[:10]}")
    count = nbytes = 0

    def run(ranges: list = parts) -> None:
        nonlocal count, nbytes
        for ref, low, high in ranges:
            if api in ("arrow", "spark"):
                options = TubeMQOptions.from_raw({"master": spec["master"], "topic": ref.topic}, mode="read")
                task = QueueRange(ref.broker_id, ref.host, ref.port, ref.topic, ref.partition_id, low, high,
                                  f"crbench_{uuid.uuid4().hex[:10]}", f"crbench_{uuid.uuid4().hex[:8]}")
                for arrow_batch in read_range(task, options):
                    count += arrow_batch.num_rows
                    nbytes += arrow_batch.column(0).nbytes
                    if sink is not None:
                        sink.write(arrow_batch)
            else:
                for batch in reader.read_batches(ref, low, high):
                    count += len(batch)
                    nbytes += sum(len(m.data) for m in batch)

    run(parts[:1])  # untimed: what a long-lived Spark worker has done already (lazy imports, first calls)
    count = nbytes = 0
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    try:
        if profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            started = time.perf_counter()
            prof.runcall(run)
            elapsed = time.perf_counter() - started
            prof.dump_stats(profile)
            stats = pstats.Stats(profile, stream=sys.stderr)
            stats.sort_stats("tottime").print_stats(25)
        else:
            started = time.perf_counter()
            run()
            elapsed = time.perf_counter() - started
        if sink is not None:
            sink.close()
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        broker.close()
    expected = info["count"]
    if count != expected:
        raise SystemExit(f"read {count} messages, expected {expected}")
    cpu_s = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    return {"seconds": elapsed, "messages": count, "bytes": nbytes, "cpu_s": cpu_s,
            "sys_s": cpu_after.ru_stime - cpu_before.ru_stime, "minflt": cpu_after.ru_minflt - cpu_before.ru_minflt}


class SparkHandover:
    """Where Spark's Python worker puts a read's batches: each wrapped in one struct column (``wrap_struct``)
    and written as an Arrow IPC stream to a 64 KiB buffered file over a socket to the JVM; here a pipe to
    ``cat``, so the kernel copies the bytes as it does for the socket."""

    def __init__(self) -> None:
        import pyarrow as pa

        self._pa = pa
        self._proc = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, bufsize=0)
        assert self._proc.stdin is not None
        self._out = os.fdopen(os.dup(self._proc.stdin.fileno()), "wb", 65536)
        self._proc.stdin.close()
        self._writer = None

    def write(self, batch: object) -> None:
        pa = self._pa
        struct = pa.StructArray.from_arrays(batch.columns, fields=pa.struct(list(batch.schema)))  # type: ignore[attr-defined]
        wrapped = pa.RecordBatch.from_arrays([struct], ["_0"])
        if self._writer is None:
            self._writer = pa.RecordBatchStreamWriter(self._out, wrapped.schema)
        self._writer.write_batch(wrapped)
        self._out.flush()  # Spark flushes the worker's output after each batch

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._out.close()
        self._proc.wait()

    def __enter__(self) -> SparkHandover:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run_worker(spec_path: str, size: str, impl: str, old: str | None, api: str,
                profile: str | None = None) -> dict:
    path = [old if impl == "old" else str(ROOT), str(ROOT / "testbed")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    cmd = [sys.executable, "-c",
           "import json,sys; from bench.client_read import _worker_main; _worker_main()",
           spec_path, size, api, profile or ""]
    # bench/ comes from the working tree even for "old": only the tubespark package differs
    env["PYTHONPATH"] = os.pathsep.join([*path, str(ROOT)])
    # cwd "/": with ``-c`` the current directory comes first on sys.path and would shadow ``--old``
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True, cwd="/").stdout
    return json.loads(out.strip().splitlines()[-1])


def _worker_main() -> None:
    spec_path, size, api, profile = sys.argv[1:5]
    import tubespark
    print(f"tubespark from {tubespark.__file__}", file=sys.stderr)
    spec = json.loads(Path(spec_path).read_text())
    print(json.dumps(_worker(spec, size, api, profile or None)))


# --- set-up: cluster and fill ---------------------------------------------------------------------------


def _fill(master: str, sizes: list[str], messages: int) -> dict:
    from tubespark.tubemq.client.broker import BrokerClient
    from tubespark.tubemq.client.common import new_client_id
    from tubespark.tubemq.client.producer import Producer
    from tubespark.tubemq.client.ranges import probe_bounds
    from tubespark.tubemq.wire.message import OutgoingMessage

    result: dict = {"master": master, "sizes": {}}
    with Producer(master) as producer:
        topics = [SIZES[s][0] for s in sizes]
        producer.publish(topics, timeout_s=240.0)
        for size in sizes:
            topic, nbytes = SIZES[size]
            body = os.urandom(nbytes)
            started = time.perf_counter()
            for k in range(messages):
                producer.send_async(topic, OutgoingMessage(body, msg_type="t", msg_time="202401021530"))
                if k % 5000 == 4999:
                    producer.flush()
            producer.flush()
            print(f"filled {topic}: {messages} x {nbytes} B in {time.perf_counter() - started:.1f}s", flush=True)
            broker = BrokerClient(new_client_id("crbench_probe"))
            try:
                parts = []
                for ref in producer.partitions(topic):
                    bounds = probe_bounds(broker, ref, f"crbench_probe_{ref.partition_id}")
                    parts.append({"ref": [ref.broker_id, ref.topic, ref.partition_id, ref.host, ref.port],
                                  "min": bounds.min_offset, "max": bounds.max_offset})
            finally:
                broker.close()
            count = sum((p["max"] - p["min"]) // 28 for p in parts)
            result["sizes"][size] = {"partitions": parts, "count": count, "payload_bytes": nbytes}
    return result


def _measure(spec_path: str, spec: dict, args: argparse.Namespace) -> None:
    impls = ["old", "new"] if args.old else ["new"]
    for size in [s for s in spec["sizes"] if s in args.sizes.split(",")]:
        if args.profile:
            for impl in impls if args.profile == "both" else [args.profile]:
                print(f"--- cProfile {impl}, {size} B", flush=True)
                r = _run_worker(spec_path, size, impl, args.old, args.api, f"/tmp/crbench-{impl}-{size}.prof")
                print(f"{impl} {size} B (profiled): {r['messages'] / r['seconds']:,.0f} msgs/s, CPU "
                      f"{r['cpu_s'] / r['messages'] * 1e6:.3f} us/msg", flush=True)
            continue
        runs: dict[str, list[float]] = {i: [] for i in impls}
        cpus: dict[str, list[float]] = {i: [] for i in impls}
        faults: dict[str, list[float]] = {i: [] for i in impls}
        info: dict = {}
        for _ in range(args.warmup):
            for impl in impls:
                _run_worker(spec_path, size, impl, args.old, args.api)
        for rep in range(args.repeats):
            order = impls if rep % 2 == 0 else impls[::-1]
            for impl in order:
                info = _run_worker(spec_path, size, impl, args.old, args.api)
                runs[impl].append(info["seconds"])
                cpus[impl].append(info["cpu_s"] / info["messages"] * 1e6)
                faults[impl].append(info["minflt"] / info["messages"])
        msgs, nbytes = info["messages"], info["bytes"]
        line = [f"{size:>5} B x {msgs}:"]
        for impl in impls:
            med = statistics.median(runs[impl])
            line.append(f"{impl} {msgs / med:,.0f} msgs/s {nbytes / med / 1e6:,.1f} MB/s (median of "
                        f"{len(runs[impl])}: {', '.join(f'{s:.3f}' for s in runs[impl])} s); CPU "
                        f"{statistics.median(cpus[impl]):.3f} us/msg ({', '.join(f'{c:.3f}' for c in cpus[impl])}); "
                        f"minor page faults {statistics.median(faults[impl]):.3f} per msg")
        if args.old:
            line.append(f"speed-up new/old = {statistics.median(runs['old']) / statistics.median(runs['new']):.2f}x; "
                        f"CPU per message new/old = "
                        f"{statistics.median(cpus['new']) / statistics.median(cpus['old']):.2f}x")
        print("\n  ".join(line), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.client_read", description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages per size (over 4 partitions)")
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--old", help="directory holding an old copy of the tubespark package to compare with")
    parser.add_argument("--api", choices=("batches", "arrow", "spark"), default="batches")
    parser.add_argument("--profile", choices=("old", "new", "both"), help="one cProfile'd run instead of timing")
    parser.add_argument("--spec", help="cluster + fill description (JSON); reused when it exists")
    parser.add_argument("--setup-only", action="store_true", help="start and fill, write --spec, wait for Ctrl-C")
    args = parser.parse_args(argv)
    sizes = [s for s in args.sizes.split(",") if s]

    spec_path = args.spec or f"/tmp/crbench-{os.getpid()}.json"
    if args.spec and Path(args.spec).exists() and not args.setup_only:
        _measure(spec_path, json.loads(Path(spec_path).read_text()), args)
        return

    from tubespark_testbed import LocalCluster

    with LocalCluster(topics=[(SIZES[s][0], 1, 4) for s in sizes]) as cluster:
        spec = _fill(cluster.master_address, sizes, args.messages)
        Path(spec_path).write_text(json.dumps(spec))
        if args.setup_only:
            print(f"cluster up, spec in {spec_path}; Ctrl-C to stop", flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                return
        _measure(spec_path, spec, args)


if __name__ == "__main__":
    main()
