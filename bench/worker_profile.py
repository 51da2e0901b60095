"""Where a batch read's CPU goes inside Spark's Python worker: py-spy (and perf) on the forked workers.

Why a tool of its own: Spark's Python workers are forked by ``pyspark.daemon`` and live only while Spark
keeps them, so attaching a profiler to the daemon records nothing, and wrapping the interpreter
(``spark.pyspark.python``) loses the output when Spark kills the worker. This starts a local TubeMQ
cluster (or uses ``--tubemq-master``), fills ``bench_read_<size>`` with the Java producer, starts Spark
``local[2]`` as ``python -m bench`` does, and per size:

1. reads the topic once (warm-up: the daemon forks the workers, which Spark then reuses);
2. reads it once more with nothing attached: CPU seconds per row of the JVM and of the Python workers
   (user and system apart) from ``/proc``;
3. reads it in a loop while ``py-spy record --nonblocking`` samples every forked worker for ``--seconds``
   (then ``perf record`` for as long, with ``--perf``), and sorts the samples into the steps of the read.

```bash
flock /tmp/tubespark-it.lock env PYTHONPATH=.:testbed python -m bench.worker_profile --sizes 1024,100 \
    --out-dir /tmp/wprof
```

The table it prints gives each step's share of the workers' non-idle samples and that share of the
measured CPU per row (system time included: py-spy does not see the kernel, so the shares are of the
samples, spread over user and system time alike; the perf report says how much is the kernel).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")

# A sample's step: the first rule (in this order) with a text in the leaf-most frame that any rule names.
STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("socket recv (framed_io)", ("recv_into", "_receive", "_fill", "peek", "framed_io.py")),
    ("frame take/join", ("take_frame", "read_frame", "frame.py")),
    # parse_fetch_reply: the compiled twin's one walk of the answer decodes its messages there (issue 40)
    ("compiled decode + CRC", ("read_fetch", "parse_fetch_reply", "decode_fetch", "_decode_texts", "packed_columns",
                               "decode_packed", "crc32")),
    ("fetch answer scan/envelope", ("scan_fetch", "locate_response", "decode_response", "envelope.py", "fetch.py")),
    ("GetMessage request/send", ("sendall", "encode_frame", "fetch_async", "call_async", "_write (")),
    ("Arrow batch building (to_record_batch)", ("to_record_batch", "schema.py")),
    ("pyspark: Arrow IPC write to the JVM", ("dump_stream", "write_batch", "RecordBatchStreamWriter")),
    ("pyspark: batch checks, struct wrap, task input", ("records_to_arrow_batches", "plan_data_source_read",
                                                       "worker.py", "conversion.py", "StructArray",
                                                       "serializers.py")),
    ("pyspark daemon: gc.collect() after each task", ("manager (daemon.py)",)),
    ("range reader / task (Python)", ("ranges.py", "read_task.py", "broker.py", "outage.py", "retry.py")),
    ("connection thread, waits, locks (Python)", ("connection.py", "framed.py", "threading.py")),
)


def _proc_stat(pid: int) -> tuple[int, float, float] | None:
    """(ppid, user s, system s) of ``pid`` itself."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[11]) / TICKS, int(fields[12]) / TICKS


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def python_workers(jvm: int) -> list[int]:
    """The workers ``pyspark.daemon`` forked for the JVM ``jvm`` (the daemon itself idles)."""
    daemons = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
               and "pyspark.daemon" in _cmdline(int(p.name)) and (_proc_stat(int(p.name)) or (0,))[0] == jvm]
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and (_proc_stat(int(p.name)) or (0,))[0] in daemons]


def cpu_of(pids: list[int]) -> tuple[float, float]:
    """User and system seconds of ``pids`` (living ones), threads included."""
    user = system = 0.0
    for pid in pids:
        stat = _proc_stat(pid)
        if stat is not None:
            user, system = user + stat[1], system + stat[2]
    return user, system


def classify(stack: str) -> str:
    """The step of the leaf-most frame that names one (a native leaf counts for its Python caller)."""
    for frame in reversed(stack.split(";")):
        for step, texts in STEPS:
            if any(text in frame for text in texts):
                return step
    return "other"


def own_cpu(pid: int) -> float:
    stat = _proc_stat(pid)
    return stat[1] + stat[2] if stat else 0.0


def read_raw(paths: list[Path]) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """py-spy raw files -> samples per step, and per leaf frame (for the report's detail)."""
    steps: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    for path in paths:
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            steps[classify(stack)] += int(count)
            leaves[stack.split(";")[-1]] += int(count)
    return steps, leaves


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1024,100")
    parser.add_argument("--rows", default="1024=600000,100=1500000", help="SIZE=ROWS,... backlog per size")
    parser.add_argument("--seconds", type=float, default=20.0, help="py-spy (and perf) window per size")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--perf", action="store_true", help="also perf record the workers for --seconds")
    parser.add_argument("--tubemq-master", help="an existing master holding filled bench_read_<size> topics")
    parser.add_argument("--out-dir", default="/tmp/worker-profile")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = {int(k): int(v) for k, v in (item.split("=") for item in args.rows.split(","))}
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = ":".join(dict.fromkeys([str(ROOT), str(ROOT / "testbed"),
                                                       *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    from tubespark_testbed import LocalCluster

    from bench import cases as C
    from bench.cpu import spark_jvm_pid
    from bench.java import TubeBench
    from bench.run import build_spark

    cluster = None
    master = args.tubemq_master
    if master is None:
        cluster = LocalCluster(broker_jvm="default", topics=[(f"bench_read_{s}", 1, 4) for s in sizes])
        cluster.start()
        master = cluster.master_address
    try:
        java = TubeBench()
        java.build()
        if cluster is not None:
            for size in sizes:
                t0 = time.monotonic()
                java.produce(master, f"bench_read_{size}", rows[size], size, timeout_s=900)
                print(f"filled bench_read_{size} with {rows[size]} x {size} B in {time.monotonic() - t0:.0f} s",
                      flush=True)
        spark = build_spark("local", 2, [])
        jvm = spark_jvm_pid()
        assert jvm is not None
        env = C.Env(spark=spark, cores=2, tubemq_master=master, java=java, kafka_bootstrap=None, work_dir=out,
                    partitions=4, tubemq_web_url=cluster.master_web_url if cluster else "")
        for size in sizes:
            _profile_size(env, jvm, f"bench_read_{size}", size, args, out)
        spark.stop()
    finally:
        if cluster is not None:
            cluster.stop()
    return 0


def _profile_size(env: object, jvm: int, topic: str, size: int, args: argparse.Namespace, out: Path) -> None:
    from bench import cases as C

    assert isinstance(env, C.Env)
    total = C.count_tubemq(env, topic)  # also the warm-up: the daemon has forked the workers now
    workers = python_workers(jvm)
    from bench.cpu import CpuMeter

    meter = CpuMeter(jvm, {})
    before = meter.snapshot()
    w0, j0, t0 = cpu_of(workers), own_cpu(jvm), time.perf_counter()
    C.tubespark_batch(env, topic, total, size)
    wall = time.perf_counter() - t0
    workers_after = python_workers(jvm)
    if sorted(workers_after) != sorted(workers):
        print(f"note: workers changed during the clean read: {workers} -> {workers_after}", flush=True)
    w1, j1 = cpu_of(workers), own_cpu(jvm)
    roles = CpuMeter.delta(before, meter.snapshot())
    user, system, jvm_s = (w1[0] - w0[0]), (w1[1] - w0[1]), j1 - j0
    us = 1e6 / total
    print(f"\n{size} B: {total} rows in {wall:.2f} s ({total / wall:,.0f} rows/s); CPU us/row: Python workers "
          f"{(user + system) * us:.3f} (user {user * us:.3f}, system {system * us:.3f}), JVM {jvm_s * us:.3f}; "
          f"as python -m bench counts them (every Python process under the JVM): Python "
          f"{roles['python_workers'] * us:.3f}, JVM {roles['spark_jvm'] * us:.3f}", flush=True)

    stop = threading.Event()
    reads = [0]

    def loop() -> None:
        while not stop.is_set():
            C.tubespark_batch(env, topic, total, size)
            reads[0] += 1

    reader = threading.Thread(target=loop, daemon=True)
    reader.start()
    time.sleep(2.0)  # mid-read: the workers are busy
    workers = python_workers(jvm)
    raws = [out / f"pyspy-{size}-{pid}.txt" for pid in workers]
    # --nonblocking: py-spy then tells idle threads (a poll, a lock, the GIL) by their OS state; stopping the
    # process for --native makes every thread look busy. perf (--perf) shows the native and kernel side.
    spies = [subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--duration", str(int(args.seconds)),
                               "--rate", str(args.rate), "--nonblocking", "--format", "raw", "--nolineno",
                               "-o", str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for pid, raw in zip(workers, raws, strict=True)]
    wp0, ws0 = cpu_of(workers), time.perf_counter()
    for spy in spies:
        _, err = spy.communicate(timeout=args.seconds + 60)
        if spy.returncode:
            print(f"py-spy failed: {err.strip()[-500:]}", flush=True)
    wp1, window = cpu_of(workers), time.perf_counter() - ws0
    perf_text = ""
    if args.perf and shutil.which("perf"):
        data = out / f"perf-{size}.data"
        subprocess.run(["perf", "record", "-F", "499", "-o", str(data), "-p", ",".join(map(str, workers)), "--",
                        "sleep", str(args.seconds)], capture_output=True, timeout=args.seconds + 60, check=False)
        perf_text = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort",
                                    "dso,sym", "--percent-limit", "0.7"], capture_output=True, text=True,
                                   timeout=300, check=False).stdout
        perf_text += subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "dso"],
                                    capture_output=True, text=True, timeout=300, check=False).stdout
        (out / f"perf-{size}.txt").write_text(perf_text)
    stop.set()
    reader.join()
    steps, leaves = read_raw([r for r in raws if r.exists()])
    samples = sum(steps.values())
    busy = (wp1[0] - wp0[0] + wp1[1] - wp0[1]) / window
    print(f"py-spy: workers {workers}, {samples} non-idle samples in {window:.1f} s at {args.rate}/s "
          f"(workers busy {busy:.2f} cores while sampled; {reads[0]} reads done meanwhile)", flush=True)
    per_row = (user + system) * us
    print(f"| step ({size} B) | share of samples | us/row |\n|---|---|---|")
    for step, count in steps.most_common():
        print(f"| {step} | {count / samples:.1%} | {count / samples * per_row:.3f} |")
    print(f"| all (the clean read's Python workers) | 100% | {per_row:.3f} |")
    print("top leaf frames:")
    for leaf, count in leaves.most_common(25):
        print(f"  {count / samples:6.1%}  {leaf}")
    if perf_text:
        print("perf (top symbols):")
        print("\n".join(line for line in perf_text.splitlines() if line.strip() and not line.startswith("#"))[:6000])
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
