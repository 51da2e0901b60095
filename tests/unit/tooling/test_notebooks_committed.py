"""The notebooks are committed with their outputs (issue 25 item 10: a reader on GitHub saw none).

``python scripts/run_notebooks.py`` writes them; the integration test runs them against the session cluster.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[3] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_code_cell_was_run_in_order_and_kept_its_output(path: Path) -> None:
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    counts = [c.get("execution_count") for c in cells]
    assert all(counts) and counts == sorted(counts), (path.name, counts)  # one run, top to bottom
    errors = [o for c in cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, (path.name, errors)
    printed = "".join("".join(o.get("text", "")) for c in cells for o in c.get("outputs", []))
    assert "master:" in printed, path.name


def test_the_monitoring_plot_is_in_the_notebook() -> None:
    (path,) = [p for p in NOTEBOOKS if p.name == "monitoring.ipynb"]
    cells = json.loads(path.read_text())["cells"]
    assert any("image/png" in o.get("data", {}) for c in cells for o in c.get("outputs", []))


def _code(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_what_a_notebook_starts_is_stopped_whatever_happens(path: Path) -> None:
    """Issue 25 item 10: the local cluster was stopped by the last cell only (a failing cell left its JVMs to the
    kernel's exit hooks). Now the first cell keeps what is started in ``cleanup`` (an ExitStack), every cell
    between runs inside ``stop_on_error()``, and the last closes ``cleanup``."""
    setup, *cells, last = _code(path)
    assert "cleanup = contextlib.ExitStack()" in setup and "cleanup.callback(cluster.stop)" in setup
    assert all(cell.startswith("with stop_on_error():\n") for cell in cells), path.name
    assert any("cleanup.callback(spark.stop)" in cell for cell in cells)
    assert last.startswith("cleanup.close()")


class _Exploding:
    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"spark.{name} failed")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_failing_cell_stops_what_the_notebook_started(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The setup cell run for real (with a master given, so it starts no cluster), then the first cell after the
    Spark session failing on Spark: what was registered is stopped before the error shows."""
    monkeypatch.setenv("TUBEMQ_MASTER", "127.0.0.1:1")
    monkeypatch.setenv("TUBESPARK_NB_TOPIC", "t")
    setup, _session, failing, *_ = _code(path)
    namespace: dict[str, object] = {}
    exec(compile(setup, f"{path.name}[setup]", "exec"), namespace)  # the notebook's own code
    stopped: list[str] = []
    namespace["cleanup"].callback(stopped.append, "cluster")  # type: ignore[attr-defined]
    namespace["spark"] = _Exploding()
    with pytest.raises(RuntimeError, match="failed"):
        exec(compile(failing, f"{path.name}[cell]", "exec"), namespace)
    assert stopped == ["cluster"]
