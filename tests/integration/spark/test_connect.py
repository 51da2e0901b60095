"""Spark Connect: format("tubemq") from a ``SparkSession.builder.remote("local[2]")`` session.

PySpark's pip package starts a local Connect server in the client's process (the ``connect`` extra's
grpc); the server runs its Python (driver-side source and commit processes, executors) with a Python
that has PySpark and tubespark's dependencies but no tubespark (tests/python_without_tubespark.py),
like a cluster nobody installed it on. ``roundtrip_job.py`` then does a batch write and read, and a
streaming read (Trigger.AvailableNow, maxOffsetsPerTrigger) written by the streaming sink, from the
Connect session: once with tubespark shipped by ``spark.addArtifacts(tubespark.package_zip(),
pyfile=True)``, once with nothing shipped. Before ``tubespark.register`` sent a stand-in on Connect,
the first failed in the streaming source's process with ModuleNotFoundError (tubespark.spark.connect
says why), the second failed at once. A Connect server whose Python has tubespark, where PySpark's data source
discovery registers the format and the client calls nothing, is tests/integration/spark/test_pipelines.py's
(``spark-pipelines run`` is such a server; its definitions read and write ``format("tubemq")`` with no call).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.python_without_tubespark import python_without_tubespark

pytestmark = [pytest.mark.integration, pytest.mark.spark]

JOB = Path(__file__).resolve().parents[1] / "roundtrip_job.py"
ROWS = 400


@pytest.fixture(scope="module")
def server_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return python_without_tubespark(tmp_path_factory.mktemp("connect-server") / "venv")


def run_job(server_python: Path | str, tmp_path: Path, master: str, topic_in: str, topic_out: str, *flags: str) -> dict:
    """roundtrip_job.py from a Connect session whose server runs ``server_python``; its JSON line."""
    env = {**os.environ, "PYSPARK_PYTHON": str(server_python)}
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    command = [sys.executable, str(JOB), master, topic_in, topic_out, str(tmp_path), "--connect", "--rows", str(ROWS),
               *flags]
    done = subprocess.run(command,
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["session"] == "pyspark.sql.connect.session", result
    return result


@pytest.mark.parametrize("ship", [True, False], ids=["addArtifacts", "nothing-shipped"])
def test_batch_and_streaming_reads_and_writes_from_a_connect_session(tubemq_cluster, topic_factory, server_python,
                                                                       tmp_path, ship):
    """Old code (it calls ``tubespark.register``) on a server whose Python lacks tubespark. With nothing shipped,
    format("tubemq") is first not found (discovery has nothing to find there), and the typed error says where to
    install tubespark (the server's PYSPARK_PYTHON) or to call register."""
    topic_in, topic_out = topic_factory(), topic_factory()
    result = run_job(server_python, tmp_path, tubemq_cluster.master_address, topic_in, topic_out, "--register",
                     *(["--ship"] if ship else ["--expect-not-found"]))
    assert (result["shipped"] is not None) == ship
    if not ship:
        assert result["not_found"].startswith("format('tubemq') is not registered in this Spark session"), result
        assert f"PYSPARK_PYTHON={server_python}" in result["not_found"], result
        assert f"`{server_python} -m pip install tubespark`" in result["not_found"], result
        assert "tubespark.register(spark)" in result["not_found"], result
    assert result["read"] == ROWS and result["copied"] == ROWS and result["copied_matches"], result
    # admission control over Connect: every micro-batch within maxOffsetsPerTrigger (ROWS // 4)
    assert sum(result["stream_batches"]) == ROWS and max(result["stream_batches"]) <= ROWS // 4, result

