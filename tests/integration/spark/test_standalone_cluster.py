"""tubespark beyond one machine: a Spark standalone cluster (a master and two workers, on loopback)
runs a streaming job and a backfill with tubespark shipped only as ``--py-files``.

How we prove the executors really use the zip: this repo is installed editable, and the editable
install's ``.pth`` finder would make ``tubespark`` importable from any Python of this interpreter. So
the cluster's Python (driver, executors and the driver-side data source workers) is a wrapper that runs
this interpreter with ``-S`` (no ``site``, hence no ``.pth`` files and no editable finder) and appends
the site-packages directories to ``PYTHONPATH`` (pyspark, pyarrow, pandas, protobuf stay importable).
Everything runs from a temp cwd. The test checks that ``import tubespark`` fails under that Python,
and that on the executors ``tubespark.__file__`` lies inside the shipped zip.

Spark 4.3 does not put ``--py-files`` on the path of the driver-side Python processes that plan Python
data sources (``python_streaming_source_runner``: ``ModuleNotFoundError: No module named 'tubespark'``
while executors import the zip fine). So the driver gets the zip through ``PYTHONPATH`` in
spark-submit's environment too; the workers' environment has no ``PYTHONPATH``, so the executors can
only get tubespark from ``--py-files``.

The pip package of pyspark ships no ``sbin/start-master.sh``/``start-worker.sh`` (its ``sbin`` only
has the connect/history server scripts), so the daemons are started with ``bin/spark-class``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import site
import subprocess
import sys
import textwrap
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tubespark_testbed.ports import free_ports

from tests.integration.helpers import bodies, produce

REPO = Path(__file__).resolve().parents[3]
N = 400

JOB = '''
import os
import sys

from pyspark.sql import SparkSession

import tubespark

master, topic, group, checkpoint, output = sys.argv[1:6]
spark = SparkSession.builder.appName("tubespark-standalone-stream").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
tubespark.register(spark)
where = spark.sparkContext.parallelize(range(4), 4).map(
    lambda _: (__import__("tubespark").__file__, os.getpid())).collect()
print("EXECUTOR_TUBESPARK " + " ".join(sorted({w for w, _ in where})), flush=True)
stream = (spark.readStream.format("tubemq").option("master", master).option("topic", topic)
          .option("group", group).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "150").load())
query = (stream.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
query.awaitTermination(180)
print("STREAMED", spark.read.parquet(output).count(), flush=True)
spark.stop()
'''


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _package_zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted((REPO / "tubespark").rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                zf.write(file, file.relative_to(REPO))
    return path


def _isolated_python(tmp: Path) -> Path:
    """A Python without ``site`` (so without the editable finder) but with site-packages on its path."""
    paths = ":".join(p for p in site.getsitepackages() if Path(p).is_dir())
    wrapper = tmp / "python-no-site"
    wrapper.write_text(f'#!/bin/sh\nexport PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{paths}"\n'
                       f'exec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def _base_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_", "PYTHON"))}
    env.update(SPARK_HOME=str(_spark_home()), SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m",
               SPARK_LOG_DIR=str(tmp / "logs"), SPARK_WORKER_DIR=str(tmp / "work"), PYTHONPATH="")
    # the test suite's start-up-speed JVM flags (tubespark_testbed/sparkjvm.py) for the daemons and the driver
    jvm = os.environ.get("SPARK_SUBMIT_OPTS")
    if jvm:
        env.update(SPARK_SUBMIT_OPTS=jvm, SPARK_DAEMON_JAVA_OPTS=jvm)
    return env


def _alive_workers(web_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=2) as resp:
            state = json.loads(resp.read())
    except (OSError, ValueError):
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


@contextlib.contextmanager
def _standalone(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Path]]:
    """``(spark://127.0.0.1:PORT, env, cwd)`` of a master and two workers (1 core, 1 GB each)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = _base_env(tmp_path)
    spark_class = str(_spark_home() / "bin" / "spark-class")
    port, web = free_ports(2)
    url = f"spark://127.0.0.1:{port}"
    commands = [[spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", str(web)]]
    for i in range(2):
        commands.append([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                         "--cores", "1", "--memory", "1g", "--webui-port", "0",
                         "--work-dir", str(tmp_path / f"work{i}"), url])
    procs: list[subprocess.Popen] = []
    try:
        for i, command in enumerate(commands):
            log = open(tmp_path / f"daemon{i}.log", "wb")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
        deadline = time.monotonic() + 60
        while _alive_workers(web) < 2:
            dead = [p.args[1] for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join((tmp_path / f"daemon{i}.log").read_text(errors="replace")[-2000:] for i in range(3))
                pytest.fail(f"standalone cluster did not come up (exited: {dead}):\n{logs}")
            time.sleep(0.5)
        yield url, env, cwd
    finally:
        for proc in reversed(procs):  # workers first; each process group includes its executors
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


PRESTART = {"standalone": _standalone}  # started ahead of this module (tubespark_testbed/prestart.py)
PRESTART_LIGHT = True  # a cluster: mostly waiting while it starts, so it may start beside another


@pytest.fixture(scope="module")
def standalone(prestarted) -> tuple[str, dict[str, str], Path]:
    return prestarted("standalone")


def _submit(url: str, env: dict[str, str], cwd: Path, python: Path, py_zip: Path, *args: str) -> str:
    command = [str(_spark_home() / "bin" / "spark-submit"), "--master", url, "--deploy-mode", "client",
               "--py-files", str(py_zip), "--driver-memory", "512m", "--executor-memory", "512m",
               "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2",
               "--conf", f"spark.pyspark.python={python}", "--conf", f"spark.pyspark.driver.python={python}",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false",
               "--conf", "spark.sql.shuffle.partitions=2",
               *(["--conf", f"spark.executor.extraJavaOptions={env['SPARK_SUBMIT_OPTS']}"]
                 if env.get("SPARK_SUBMIT_OPTS") else []), *args]
    # The driver side's data source planner processes ignore --py-files (see the module docstring).
    done = subprocess.run(command, cwd=cwd, env={**env, "PYTHONPATH": str(py_zip)}, capture_output=True, text=True,
                          timeout=150)
    assert done.returncode == 0, f"spark-submit {args[:2]} failed ({done.returncode}):\n{done.stdout}\n" \
                                 f"{done.stderr[-6000:]}"
    return done.stdout + done.stderr


def test_stream_and_backfill_on_a_standalone_cluster(standalone, tubemq_cluster, topic_factory, tmp_path) -> None:
    url, env, cwd = standalone
    python = _isolated_python(tmp_path)
    py_zip = _package_zip(tmp_path / "tubespark.zip")

    # The cluster's Python has pyspark & co but not tubespark (the editable finder is switched off).
    probe = subprocess.run([str(python), "-c", "import pyspark, pyarrow, pandas, google.protobuf; import tubespark"],
                           cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "No module named 'tubespark'" in probe.stderr, probe.stderr
    imported = subprocess.run([str(python), "-c", "import pyspark, pyarrow, pandas, google.protobuf"],
                              cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert imported.returncode == 0, imported.stderr

    topic = topic_factory()
    master = tubemq_cluster.master_address
    produce(master, topic, bodies([f"m{i}".encode() for i in range(N)]))

    job = tmp_path / "stream_job.py"
    job.write_text(textwrap.dedent(JOB))
    out = _submit(url, env, cwd, python, py_zip, str(job), master, topic, f"standalone-{topic}",
                  str(tmp_path / "checkpoint"), str(tmp_path / "stream_out"))
    where = next(line for line in out.splitlines() if line.startswith("EXECUTOR_TUBESPARK "))
    assert all("tubespark.zip" in path for path in where.split()[1:]), where
    assert f"STREAMED {N}" in out, out[-3000:]

    backfill = tmp_path / "backfill_out"
    out = _submit(url, env, cwd, python, py_zip, str(REPO / "scripts" / "backfill.py"), "export",
                  "--master", master, "--topic", topic, "--output", str(backfill),
                  "--max-records-per-partition", "60")
    assert f"export: complete, {N} messages" in out, out[-3000:]
    import pyarrow.parquet as pq

    assert pq.read_table(backfill).num_rows == N
