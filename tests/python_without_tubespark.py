"""A Python like the test environment's, minus tubespark: the stand-in for a Spark server nobody installed it on.

``python_without_tubespark(directory)`` makes a venv that sees this environment's packages (pyspark,
pyarrow, protobuf, ... without a download) but where ``import tubespark`` fails unless a zip on
``sys.path`` holds it, which is how shipped code arrives (``addArtifacts(..., pyfile=True)``, the zip a
Connect stand-in writes). Both the editable install's finder and a checkout on ``sys.path`` (Spark's
Python workers start in the test's working directory) are hidden by a finder placed first on
``sys.meta_path`` at start-up, through a ``.pth`` file of the venv.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_HIDER = '''\
"""Installed by tests/python_without_tubespark.py: tubespark comes only from zips on sys.path."""
import sys
from importlib.machinery import PathFinder


class _TubesparkOnlyFromZips:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "tubespark" and not name.startswith("tubespark."):
            return None
        if name == "tubespark":
            path = [entry for entry in sys.path if entry.endswith(".zip")]
        spec = PathFinder.find_spec(name, path)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
        return spec


sys.meta_path.insert(0, _TubesparkOnlyFromZips)
'''


def python_without_tubespark(directory: Path) -> Path:
    """Create (once per directory) the venv and return its ``python``; proves it cannot import tubespark."""
    python = directory / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(directory)],
                       check=True, timeout=120)
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True, timeout=60).stdout.strip()
        Path(site, "_tubespark_hidden.py").write_text(_HIDER, encoding="utf-8")
        Path(site, "_tubespark_hidden.pth").write_text("import _tubespark_hidden\n", encoding="utf-8")
    probe = subprocess.run([str(python), "-c", "import pyspark, pyarrow, google.protobuf\nimport tubespark"],
                           capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert "No module named 'tubespark'" in probe.stderr, f"tubespark is not hidden: {probe.stderr[-800:]}"
    return python
