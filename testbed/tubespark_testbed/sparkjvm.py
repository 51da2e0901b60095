"""Start-up-speed JVM options for the many short Spark drivers a test run starts.

A test run starts dozens of Spark drivers: the session's, every job a test runs as a process of its own
(to kill it, or to see all it prints), ``spark-submit``, the notebooks', the demo's. Each is a JVM that
loads some 10,000 classes and JIT-compiles its start-up code, about 11 CPU-seconds on a 2-core machine
before it does anything. :func:`apply_to_environment` sets ``SPARK_SUBMIT_OPTS``, which ``spark-submit``
(and so PySpark's gateway) puts on the driver's command line, for every Spark the process starts from then
on, and its children:

* ``-XX:TieredStopAtLevel=1 -XX:+UseSerialGC``: the C1 compiler only and one small collector, as the
  test bed runs the TubeMQ and RocketMQ JVMs (start-up over peak speed): half the start-up CPU;
* ``-XX:SharedArchiveFile=``: an application class-data-sharing archive of a Spark start, made once per
  Java and PySpark installation (:func:`ensure_archive`; ``python -m tubespark_testbed fetch`` makes it
  before the timed tests): half of the rest. A JVM that starts before the archive exists, or whose class
  path differs (another PySpark, e.g. the wheel test's venv), runs without it; ``-Xlog:cds=off`` keeps
  the JVM's note about that off the job's output.

Nothing changes what Spark computes. ``TUBESPARK_SPARK_JVM=default`` leaves ``SPARK_SUBMIT_OPTS`` alone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from tubespark_testbed.artifacts import cache_root

ENV = "TUBESPARK_SPARK_JVM"
FAST_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
QUIET_CDS = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
BUILD_TIMEOUT_S = 600.0

# What the archive's Spark start does: the classes a test's Spark loads (session, SQL, Arrow, Python
# workers, parquet, a streaming query), so most of them come from the archive.
_WORKLOAD = """
import sys, tempfile
from pyspark.sql import SparkSession, functions as F
spark = (SparkSession.builder.master("local[2]").appName("tubespark-cds").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
with tempfile.TemporaryDirectory() as tmp:
    frame = spark.createDataFrame([(i, str(i).encode(), {"k": "v"}) for i in range(100)],
                                  "n long, value binary, a map<string,string>")
    frame.groupBy((F.col("n") % 3).alias("m")).agg(F.count("*")).collect()
    frame.write.parquet(tmp + "/p")
    spark.read.parquet(tmp + "/p").selectExpr("CAST(value AS STRING) AS v").toPandas()
    query = (spark.readStream.format("rate").option("rowsPerSecond", 50).load().writeStream.format("memory")
             .queryName("cds").option("checkpointLocation", tmp + "/ck").trigger(availableNow=True).start())
    query.awaitTermination(120)
spark.stop()
"""


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java") or "java"


def _key() -> str | None:
    """What an archive is valid for: this Java build, this PySpark's jars and the flags; None without them."""
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not jars.is_dir():
        return None
    try:
        version = subprocess.run([_java(), "-version"], capture_output=True, text=True, timeout=60,
                                 check=False).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    h = hashlib.sha256()
    h.update(version.encode() + b"\0" + str(jars).encode() + b"\0" + " ".join(FAST_FLAGS).encode())
    for jar in sorted(jars.glob("*.jar")):
        h.update(jar.name.encode() + b"\0" + str(jar.stat().st_size).encode() + b"\0")
    return h.hexdigest()[:16]


def archive_path() -> Path | None:
    key = _key()
    return None if key is None else cache_root() / f"spark-cds-{key}.jsa"


def options(archive: Path | None) -> str:
    flags = [*FAST_FLAGS]
    if archive is not None:
        flags += [f"-XX:SharedArchiveFile={archive}", *QUIET_CDS]
    return " ".join(flags)


def ensure_archive(*, quiet: bool = True) -> Path | None:
    """The class-data-sharing archive of a Spark start, made now if missing; None if it cannot be made."""
    final = archive_path()
    if final is None:
        return None
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}-", dir=final.parent)
    os.close(fd)
    os.unlink(tmp_name)  # the JVM writes it at exit
    tmp = Path(tmp_name)
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{options(None)} -XX:ArchiveClassesAtExit={tmp} {' '.join(QUIET_CDS)}",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    if not quiet:
        print(f"making the Spark class-data-sharing archive {final.name} (a Spark start, once)", flush=True)
    try:
        subprocess.run([sys.executable, "-c", _WORKLOAD], env=env, capture_output=True, timeout=BUILD_TIMEOUT_S,
                       check=False)
        if tmp.is_file() and tmp.stat().st_size > 0:
            os.replace(tmp, final)  # atomic: a JVM starting now sees no archive or all of it
    except (OSError, subprocess.SubprocessError):
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return final if final.is_file() else None


def apply_to_environment(*, build_in_background: bool = True) -> str | None:
    """Put the options into ``SPARK_SUBMIT_OPTS`` (after what is there); the value set, or None (turned off).

    Without an archive yet, one is made in a background thread: the Spark drivers started before it is
    ready run without it.
    """
    if os.environ.get(ENV, "").strip().lower() == "default":
        return None
    archive = archive_path()
    if archive is not None and not archive.is_file() and build_in_background:
        threading.Thread(target=ensure_archive, name="spark-cds-archive", daemon=True).start()
    value = options(archive)
    current = os.environ.get("SPARK_SUBMIT_OPTS", "")
    os.environ["SPARK_SUBMIT_OPTS"] = f"{value} {current}".strip() if current else value
    return os.environ["SPARK_SUBMIT_OPTS"]
