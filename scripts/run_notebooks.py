"""Run the notebooks in notebooks/ in place, so they are committed with their outputs (a reader on GitHub
sees what each cell prints and the monitoring plot).

    python scripts/run_notebooks.py [NAME.ipynb ...]

Each notebook runs as a reader would run it, with ``TUBEMQ_MASTER`` and ``TUBESPARK_NB_TOPIC`` unset: it
starts its own local TubeMQ cluster (Java 17+, Maven) and stops it in its last cell, or in the cell that
fails (each cell runs inside the notebook's ``stop_on_error()``), and picks Spark's Python itself
(``tubespark.use_spark_python()``, as a reader's run does). Needs ``pip install -e ".[test]"``
(nbclient, ipykernel, matplotlib). The tests run the same notebooks against the session cluster
(tests/integration/core/test_notebooks.py) without writing them.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import nbclient
import nbformat

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def run(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    env = {k: v for k, v in os.environ.items() if k not in ("TUBEMQ_MASTER", "TUBESPARK_NB_TOPIC")}
    with tempfile.TemporaryDirectory(prefix="tubespark-nb-run-") as work:
        client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": work}})
        client.execute(env=env)
    for cell in notebook.cells:  # kernel-specific noise a reader does not need
        cell.get("metadata", {}).pop("execution", None)
    nbformat.write(notebook, path)
    print(f"{path.name}: {sum(len(c.get('outputs', [])) for c in notebook.cells)} outputs written", flush=True)


def main(argv: list[str]) -> int:
    names = argv or sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    for name in names:
        run(NOTEBOOKS / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
