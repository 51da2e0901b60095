"""Read and write rates of ``format("tank")`` against the TANK test double, by bundle size and Snappy.

    python -m bench.tank                                   # 20,000 rows of 100 B, 3 rounds
    python -m bench.tank --rows 5000 --repeats 1 --warmup 0   # a quick look

No real TANK broker can run here, so the broker is the project's test double
(``tests/doubles/tank_broker.py``), started as its own process so that its work does not share a
Python interpreter with Spark's driver. The figures therefore measure the connector (Spark's Python
workers encoding or decoding bundles, the protocol round trips) plus a Python broker that only stores
and slices bytes: they compare tubespark's own choices, they are not TANK's speed.

Cases, each at bundles of 1, 100 and 1,000 messages, Snappy off and on (``bundleCompression`` none /
snappy), ``--rows`` rows of ``--size`` bytes over 2 partitions, in one Spark session (``local[2]``):

* ``write``: ``df.write.format("tank")`` of ``spark.range`` rows with ``bundleMaxRows`` = the bundle
  size, into a fresh topic each run; rows/s = rows / wall time of the action.
* ``read``: ``spark.read.format("tank")`` of a topic holding the same rows in bundles of that size
  and compression (filled once, unmeasured, by the client producer) into the ``noop`` sink.
* ``ceiling``: ``bench/ceiling_source.py``, the same number of rows from memory through the Python
  Data Source API: what no Python source can beat.

Runs alternate (A, B, C, A, B, C, ...; ``bench.cases.alternate``) so a noisy machine slows every case
alike, and each figure is a median. Ratios are against baselines measured in the same run: reads
against the ceiling and against 1-message plain bundles, writes against 1-message plain bundles.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/tank.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = (1, 100, 1000)
COMPRESSIONS = ("none", "snappy")
PARTITIONS = 2
log = logging.getLogger("bench.tank")


def start_double() -> tuple[subprocess.Popen, str]:
    """The TANK test double in its own process; returns it and its address."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.doubles.tank_broker"], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("listening "):
        proc.kill()
        raise RuntimeError(f"the TANK double did not start: {line!r}")
    return proc, line.split()[1]


def fill(address: str, topic: str, rows: int, size: int, bundle: int, compression: str) -> None:
    """``rows`` messages of ``size`` bytes in bundles of ``bundle``, alternating partitions (not measured)."""
    from tubespark.tank.client.producer import Producer
    from tubespark.tank.wire.bundle import encode_bundle

    producer = Producer(address, max_in_flight=64)
    stamp = int(time.time() * 1000)
    sent = 0
    while sent < rows:
        bundles = {}
        for p in range(PARTITIONS):
            n = min(bundle, rows - sent)
            if n <= 0:
                break
            values = [str(sent + i).encode().ljust(size, b"x") for i in range(n)]
            bundles[p] = encode_bundle(values, [stamp] * n, compression=compression)
            sent += n
        producer.send(topic, bundles)
    producer.flush()
    producer.close()


def create_topic(address: str, prefix: str) -> str:
    from tubespark.tank.client.broker import TankClient

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with TankClient(address) as client:
        client.create_topic(name, PARTITIONS)
    return name


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tank", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--size", type=int, default=100, help="value bytes per message")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--bundles", default=",".join(map(str, BUNDLES)), help="bundle sizes, comma separated")
    p.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("py4j", "tubespark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    entries = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]
    os.environ["PYTHONPATH"] = ":".join(dict.fromkeys(entries))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    import tubespark
    from bench.cases import Case, Run, alternate, source_frame
    from bench.ceiling_source import CeilingDataSource

    bundles = [int(b) for b in args.bundles.split(",") if b.strip()]
    rows, size = args.rows, args.size
    proc, address = start_double()
    spark = None
    try:
        spark = (SparkSession.builder.master("local[2]").appName("tubespark-bench-tank")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
                 .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"]).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        tubespark.register(spark)
        spark.dataSource.register(CeilingDataSource)

        def timed(action: Any) -> float:
            started = time.perf_counter()
            action()
            return time.perf_counter() - started

        def reader(topic: str) -> Any:
            return spark.read.format("tank").option("broker", address).option("topic", topic).load()

        def read_case(topic: str) -> Run:
            return Run(timed(lambda: reader(topic).write.format("noop").mode("overwrite").save()), rows, rows * size)

        def write_case(bundle: int, compression: str) -> Run:
            topic = create_topic(address, "w")
            frame = source_frame(spark, rows, size, PARTITIONS)
            seconds = timed(lambda: frame.write.format("tank").option("broker", address).option("topic", topic)
                            .option("bundleMaxRows", str(bundle)).option("bundleCompression", compression)
                            .option("bundleLingerMs", "60000").mode("append").save())
            return Run(seconds, rows, rows * size)

        def ceiling_case() -> Run:
            frame = (spark.read.format("tubespark_ceiling").option("rows", str(rows)).option("size", str(size))
                     .option("partitions", str(PARTITIONS)).load())
            return Run(timed(lambda: frame.write.format("noop").mode("overwrite").save()), rows, rows * size)

        cases: list[Case] = [Case("ceiling", "read", "ceiling", size, 2, True, ceiling_case)]
        for bundle in bundles:
            for compression in COMPRESSIONS:
                topic = create_topic(address, "r")
                fill(address, topic, rows, size, bundle, compression)
                count = reader(topic).count()
                if count != rows:
                    raise RuntimeError(f"read topic {topic} holds {count} rows, not {rows}")
                cases.append(Case(f"read_b{bundle}_{compression}", "read", "tubespark", size, 2, True,
                                  lambda t=topic: read_case(t)))
                cases.append(Case(f"write_b{bundle}_{compression}", "write", "tubespark", size, 2, True,
                                  lambda b=bundle, c=compression: write_case(b, c)))
        alternate(cases, repeats=args.repeats, warmup=args.warmup)
    finally:
        if spark is not None:
            spark.stop()
        proc.kill()
        proc.wait()
    report(cases, rows, size, args.out)
    return 1 if any(c.error for c in cases) else 0


def report(cases: list[Any], rows: int, size: int, out: Path | None) -> None:
    medians = {c.name: c.median() for c in cases}
    ceiling = medians.get("ceiling")
    print(f"\nformat(\"tank\") against the TANK test double: {rows:,} rows of {size} B, 2 partitions, local[2]; "
          f"medians of {max(len(c.runs) for c in cases)} alternating runs")
    print(f"{'case':<20}{'rows/s':>12}{'MB/s':>9}  ratio to baseline")
    doc: dict[str, Any] = {"rows": rows, "size": size, "cases": {}}
    for case in cases:
        rate = medians[case.name]
        if rate is None:
            print(f"{case.name:<20}{'failed':>12}  {case.error}")
            doc["cases"][case.name] = {"error": case.error}
            continue
        kind, _, rest = case.name.partition("_")
        compression = rest.rpartition("_")[2]
        notes = []
        baseline = medians.get(f"{kind}_b1_none")
        if case.name != "ceiling" and baseline and case.name != f"{kind}_b1_none":
            notes.append(f"{rate / baseline:5.2f}x {kind}_b1_none")
        if kind == "read" and ceiling:
            notes.append(f"{rate / ceiling:5.2f}x ceiling")
        if compression == "snappy":
            plain = medians.get(case.name.replace("_snappy", "_none"))
            if plain:
                notes.append(f"{rate / plain:5.2f}x without Snappy")
        print(f"{case.name:<20}{rate:>12,.0f}{rate * size / 1e6:>9.2f}  {', '.join(notes)}")
        doc["cases"][case.name] = {"rows_per_s": rate, "runs": [r.rows_per_s for r in case.runs]}
    if out is not None:
        out.write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    raise SystemExit(main())
