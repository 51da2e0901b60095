"""The notebooks in notebooks/ run end to end (nbclient, a python3 kernel of this interpreter) against
the session cluster, and print the numbers they promise.

The module's fixture starts both notebooks (each in its own kernel, with its own topic) one after the other in
the background, and each test checks its notebook's output. Not side by side: two more Spark sessions at once, beside
the other lanes', starved a streaming query's Python process past the 10 s Spark 4.3 gives it to connect back
(``Python worker failed to connect back``, a CI run of the long lane).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parents[3] / "notebooks"


def _run(name: str, tmp_path: Path, env: dict[str, str]) -> str:
    """Execute ``notebooks/<name>`` in a fresh kernel (with these env vars); return its text output."""
    # PYSPARK_PYTHON as the test bed set it (its start-up script), else unset: the notebook's own
    # tubespark.use_spark_python() then sets it, as in a reader's kernel. Plain python here compiled pyspark.zip in
    # each streaming source's process, which missed Spark's 10 s connect-back on a busy machine (a CI run).
    kernel_env = {**os.environ, "PYSPARK_DRIVER_PYTHON": sys.executable, **env}
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=kernel_env)
    text = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            text.append(output.get("text", "") or output.get("data", {}).get("text/plain", ""))
    return "".join(text)


@pytest.fixture(scope="module")
def runs(tubemq_cluster, topic_factory, tmp_path_factory) -> Iterator[dict[str, concurrent.futures.Future]]:
    """Both notebooks, one after the other in the background: ``{file name: future of its text output}``."""
    master = tubemq_cluster.master_address
    envs = {"quickstart.ipynb": {"TUBEMQ_MASTER": master, "TUBESPARK_NB_TOPIC": topic_factory(),
                                 "TUBEMQ_MASTER_WEB_URL": tubemq_cluster.master_web_url},
            "monitoring.ipynb": {"TUBEMQ_MASTER": master, "TUBESPARK_NB_TOPIC": topic_factory(),
                                 "TUBESPARK_NB_SECONDS": "10"}}
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="notebook") as pool:
        yield {name: pool.submit(_run, name, tmp_path_factory.mktemp(name.split(".")[0]), env)
               for name, env in envs.items()}


def _number(label: str, text: str) -> int:
    match = re.search(rf"^{re.escape(label)}: (\d+)", text, re.MULTILINE)
    assert match, f"no '{label}: N' line in the notebook output:\n{text}"
    return int(match.group(1))


def test_quickstart_notebook(runs) -> None:
    text = runs["quickstart.ipynb"].result()
    assert _number("written rows", text) == 1000
    assert _number("streamed rows", text) == 1000
    assert _number("backfill rows", text) == 1000
    assert _number("orders", text) == 250
    assert re.search(r"clicks: 750", text)


def test_monitoring_notebook(runs) -> None:
    text = runs["monitoring.ipynb"].result()
    produced, read = _number("produced", text), _number("read", text)
    assert produced > 0 and 0 < read <= produced
    assert _number("samples", text) >= 5
    assert _number("partitions", text) >= 1
    assert _number("max backlog", text) > 0  # production outran maxOffsetsPerTrigger at some point
    png = re.search(r"saved plot: (\S+) \((\d+) bytes\)", text)
    assert png and os.path.isfile(png.group(1)) and int(png.group(2)) > 1000
