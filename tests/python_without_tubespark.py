"""A Python like the test environment's, minus tubespark: the stand-in for a Spark server nobody installed it on.

``python_without_tubespark(directory)`` makes a venv that sees this environment's packages (pyspark,
pyarrow, protobuf, ... without a download) but where ``import tubespark`` fails unless a zip on
``sys.path`` holds it, which is how shipped code arrives (``addArtifacts(..., pyfile=True)``, the zip a
Connect stand-in writes). Both the editable install's finder and a checkout on ``sys.path`` (Spark's
Python workers start in the test's working directory) are hidden by a finder placed first on
``sys.meta_path`` at start-up, through a ``.pth`` file of the venv.

``--system-site-packages`` alone shows the new venv the packages of the *base* interpreter: run from
inside a venv (a user's own, where pyspark was installed), that base has no pyspark. So another ``.pth``
file lists this interpreter's own site directories (a venv's ``site-packages``; the base's are listed
too, harmlessly): the new venv sees what the tests see, inside a venv or not. Plain path lines, so the
``.pth`` files of those directories (an editable install's finder of tubespark) are not run there.
"""

from __future__ import annotations

import site
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


def _site_directories() -> list[str]:
    """This interpreter's site directories (its venv's first, when it runs in one), as ``site`` set them up."""
    directories = site.getsitepackages()
    if site.ENABLE_USER_SITE:
        directories.append(site.getusersitepackages())
    return [entry for entry in dict.fromkeys(directories) if Path(entry).is_dir()]


def python_without_tubespark(directory: Path) -> Path:
    """Create (once per directory) the venv and return its ``python``; proves it cannot import tubespark."""
    python = directory / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(directory)],
                       check=True, timeout=120)
        purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True, timeout=60).stdout.strip()
        Path(purelib, "_tubespark_hidden.py").write_text(_HIDER, encoding="utf-8")
        Path(purelib, "_tubespark_hidden.pth").write_text("import _tubespark_hidden\n", encoding="utf-8")
        Path(purelib, "_tubespark_parent_site.pth").write_text(
            "".join(f"{entry}\n" for entry in _site_directories()), encoding="utf-8")
    probe = subprocess.run([str(python), "-c", "import pyspark, pyarrow, google.protobuf\nimport tubespark"],
                           capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert "No module named 'tubespark'" in probe.stderr, f"tubespark is not hidden: {probe.stderr[-800:]}"
    return python
