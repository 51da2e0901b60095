"""Small Java programs built against Maven Central jars, once per source version, for tests and the bench.

Why one helper: the Java interop CLI, the InLongMsg vectors CLI and the benchmark's TubeBench are each a
``pom.xml`` plus sources in the repository. Maven resolves the pom's runtime classpath from Maven Central,
``javac`` compiles the sources, and the result is cached under ``$TUBESPARK_CACHE`` (default
``~/.cache/tubespark``) in a directory named after a hash of the sources, so nothing is written into the
repository and a second run costs nothing. A file lock lets parallel processes share one build; a
build is moved into place only when complete.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tubespark_testbed.artifacts import cache_root
from tubespark_testbed.errors import ClusterError

MVN_TIMEOUT_S = 900  # a cold run downloads the jars and Maven's own plugins
JAVAC_TIMEOUT_S = 300
OUTPUT_TAIL = 6000


class JavaToolError(ClusterError):
    """Maven or javac failed, java/mvn is missing, or a Java program failed; the message carries the tail of
    their output."""


def tail(text: str | bytes | None, limit: int = OUTPUT_TAIL) -> str:
    """The end of a process's output, for error messages."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text if len(text) <= limit else "...\n" + text[-limit:]


def which(tool: str) -> str:
    """``tool`` from ``$JAVA_HOME/bin`` for java/javac, else from PATH."""
    home = os.environ.get("JAVA_HOME")
    if tool in ("java", "javac") and home and (Path(home) / "bin" / tool).exists():
        return str(Path(home) / "bin" / tool)
    found = shutil.which(tool)
    if not found:
        raise JavaToolError(f"{tool!r} is not on PATH (Java 17+ and Maven are needed)")
    return found


def run_checked(cmd: list[str], *, cwd: Path, timeout: float, what: str) -> None:
    """Run one build step; raise JavaToolError with its output tail when it fails or overruns."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise JavaToolError(f"{what} timed out after {timeout:.0f} s\n{tail(exc.stdout)}\n{tail(exc.stderr)}") \
            from None
    if proc.returncode != 0:
        raise JavaToolError(f"{what} failed (exit {proc.returncode})\n--- stdout\n{tail(proc.stdout)}\n"
                             f"--- stderr\n{tail(proc.stderr)}")


def content_hash(paths: Iterable[Path], base: Path) -> str:
    """A short hash of file names (relative to ``base``) and contents: what defines a build."""
    h = hashlib.sha256()
    for path in paths:
        h.update(path.relative_to(base).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _read_classpath(path: Path) -> list[str] | None:
    """The jars listed in ``path``, or ``None`` when it is missing or a jar is gone (``~/.m2`` cleaned)."""
    if not path.exists():
        return None
    jars = [j for j in path.read_text().strip().split(os.pathsep) if j]
    return jars if all(Path(j).exists() for j in jars) else None


def _complete(target: Path) -> bool:
    """Whether ``target`` holds a finished build whose jars are all still there."""
    return (target / "BUILD_OK").exists() and _read_classpath(target / "classpath.txt") is not None


@contextmanager
def _staged(target: Path) -> Iterator[Path | None]:
    """Under a file lock, a fresh staging directory that replaces ``target`` when the block succeeds;
    ``None`` when another process finished the build while this one waited for the lock."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(target):
            yield None
            return
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            yield work
            (work / "BUILD_OK").write_text("ok\n")
            shutil.rmtree(target, ignore_errors=True)  # leftover of an interrupted or stale build
            work.rename(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _resolve_into(pom: Path, work: Path) -> list[str]:
    shutil.copy2(pom, work / "pom.xml")
    out = work / "classpath.txt"
    run_checked([which("mvn"), "-q", "-B", "-f", str(work / "pom.xml"), "dependency:build-classpath",
                 "-Dmdep.includeScope=runtime", f"-Dmdep.outputFile={out}"],
                cwd=work, timeout=MVN_TIMEOUT_S, what=f"mvn dependency:build-classpath ({pom})")
    return [j for j in out.read_text().strip().split(os.pathsep) if j]


def resolve_classpath(pom: Path, name: str) -> list[str]:
    """The jars of ``pom``'s runtime closure (no sources to compile), resolved once into the cache."""
    target = cache_root() / f"{name}-{content_hash([pom], pom.parent)}"
    if not _complete(target):
        with _staged(target) as work:
            if work is not None:
                _resolve_into(pom, work)
    jars = _read_classpath(target / "classpath.txt")
    if jars is None:
        raise JavaToolError(f"the classpath resolved for {pom} names jars that do not exist")
    return jars


class JavaTool:
    """A Java program in ``source_dir`` (``pom.xml`` + ``src/**/*.java``), compiled once into the cache.

    ``required_jars``: names the resolved classpath must contain (a pom resolving to the wrong artifact
    fails the build with the classpath in the message, not later with a ClassNotFoundError).
    """

    def __init__(self, source_dir: Path, name: str, main_class: str, *,
                 required_jars: tuple[str, ...] = ()) -> None:
        self.source_dir = source_dir
        self.main_class = main_class
        self.required_jars = required_jars
        files = [source_dir / "pom.xml", *self.sources()]
        self.home = cache_root() / f"{name}-{content_hash(files, source_dir)}"

    def sources(self) -> list[Path]:
        return sorted((self.source_dir / "src").rglob("*.java"))

    @property
    def built(self) -> bool:
        return _complete(self.home)

    def build(self) -> None:
        """Resolve and compile into the cache; a no-op when that build is there already."""
        if self.built:
            return
        with _staged(self.home) as work:
            if work is None:
                return
            jars = _resolve_into(self.source_dir / "pom.xml", work)
            missing = [name for name in self.required_jars if not any(name in jar for jar in jars)]
            if missing:
                raise JavaToolError(f"the classpath resolved for {self.source_dir} lacks {missing}: {jars}")
            run_checked([which("javac"), "--release", "17", "-nowarn", "-encoding", "UTF-8", "-d",
                         str(work / "classes"), "-cp", os.pathsep.join(jars), *map(str, self.sources())],
                        cwd=work, timeout=JAVAC_TIMEOUT_S, what=f"javac {self.main_class}")

    def classpath(self) -> str:
        """The compiled classes and their jars (builds first when needed)."""
        self.build()
        jars = _read_classpath(self.home / "classpath.txt") or []
        return os.pathsep.join([str(self.home / "classes"), *jars])

    def command(self, *args: str, jvm_flags: Iterable[str] = ()) -> list[str]:
        """The ``java`` command line running the program with ``args``."""
        return [which("java"), *jvm_flags, "-cp", self.classpath(), self.main_class, *args]
