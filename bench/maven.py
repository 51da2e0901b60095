"""Resolve a pom's runtime classpath from Maven Central into a cache dir, once per pom content.

Why: the Kafka broker, Spark's Kafka connector and the TubeMQ Java client have no distribution we can
download here except their Maven Central jars. ``mvn dependency:build-classpath`` gives us the exact
closure without a build; the result is keyed by the pom's hash so a second run costs nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

MVN_TIMEOUT_S = 900
HERE = Path(__file__).resolve().parent


class BuildError(RuntimeError):
    """Maven or javac failed; the message carries the tail of their output."""


def cache_root() -> Path:
    """``$TUBESPARK_CACHE`` (as the test harness uses) or ``~/.cache/tubespark``, plus ``bench/``."""
    root = os.environ.get("TUBESPARK_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "tubespark"
    return base / "bench"


def content_hash(paths: Iterable[Path], base: Path) -> str:
    """A short hash of file names and contents: what defines a build."""
    h = hashlib.sha256()
    for path in paths:
        h.update(path.relative_to(base).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def which(tool: str) -> str:
    """``tool`` from ``$JAVA_HOME/bin`` for java/javac, else from PATH."""
    home = os.environ.get("JAVA_HOME")
    if tool in ("java", "javac") and home and (Path(home) / "bin" / tool).exists():
        return str(Path(home) / "bin" / tool)
    found = shutil.which(tool)
    if not found:
        raise BuildError(f"{tool!r} is not on PATH (the benchmark needs Java 17+ and Maven)")
    return found


def run_checked(cmd: list[str], *, cwd: Path, timeout: float, what: str) -> None:
    """Run a build step; raise BuildError with its output tail when it fails."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what} timed out after {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit {proc.returncode})\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def resolve_classpath(pom: Path, name: str) -> list[str]:
    """The jars of ``pom``'s runtime closure, resolved once into ``<cache>/<name>-<hash>/classpath.txt``."""
    target = cache_root() / f"{name}-{content_hash([pom], pom.parent)}"
    cp_file = target / "classpath.txt"
    if cp_file.exists():
        jars = [j for j in cp_file.read_text().strip().split(os.pathsep) if j]
        if all(Path(j).exists() for j in jars):
            return jars
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
        try:
            shutil.copy2(pom, work / "pom.xml")
            run_checked([which("mvn"), "-q", "-B", "-f", str(work / "pom.xml"), "dependency:build-classpath",
                         "-Dmdep.includeScope=runtime", f"-Dmdep.outputFile={work / 'classpath.txt'}"],
                        cwd=work, timeout=MVN_TIMEOUT_S, what=f"mvn dependency:build-classpath ({pom.name})")
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(work / "classpath.txt", cp_file)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return [j for j in cp_file.read_text().strip().split(os.pathsep) if j]
