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
