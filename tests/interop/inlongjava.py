"""Drive InLong's own ``InLongMsg`` class (inlong-common 1.11.0) from the tests.

``tests/interop/inlong`` holds a one-file Java CLI (``org.tubespark.interop.inlong.InLongMsgVectors``):
``encode OUTDIR`` writes bundles of every version InLongMsg can write, ``parse FILE...`` prints what
``InLongMsg.parseFrom`` + ``getAttrs()`` + ``getIterator(attr)`` make of each file, as JSON lines.
:class:`InLongJava` builds it once per source version into ``~/.cache/tubespark/inlongmsg-<hash>/``
(root overridable with ``TUBESPARK_CACHE``), the same way :mod:`tests.interop.javaclient` builds the
TubeMQ client CLI: Maven resolves the classpath from Maven Central, ``javac`` compiles, nothing is
written into the repository.

The JVM runs with ``-Dfile.encoding=UTF-8``: InLongMsg decodes v3 per-record and v4 attributes with
the platform charset, which is UTF-8 wherever InLong runs in practice.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.interop.javaclient import JavaClientError, _tail, _which, cache_root

JAVA_DIR = Path(__file__).resolve().parent / "inlong"
MAIN_CLASS = "org.tubespark.interop.inlong.InLongMsgVectors"
MVN_TIMEOUT_S = 900
JAVAC_TIMEOUT_S = 300
RUN_TIMEOUT_S = 120


def source_files() -> list[Path]:
    return [JAVA_DIR / "pom.xml", *sorted((JAVA_DIR / "src").rglob("*.java"))]


def source_hash() -> str:
    h = hashlib.sha256()
    for path in source_files():
        h.update(path.relative_to(JAVA_DIR).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


class InLongJava:
    """Build-once, run-many wrapper around the InLongMsg CLI."""

    def __init__(self, cache_dir: Path | None = None):
        self.cache_dir = Path(cache_dir) if cache_dir else cache_root() / f"inlongmsg-{source_hash()}"
        self.classes_dir = self.cache_dir / "classes"
        self.classpath_file = self.cache_dir / "classpath.txt"
        self._ok_marker = self.cache_dir / "BUILD_OK"
        self.last_build_seconds: float | None = None

    @property
    def built(self) -> bool:
        if not self._ok_marker.exists():
            return False
        jars = self.classpath_file.read_text().strip().split(os.pathsep)
        return all(Path(jar).exists() for jar in jars if jar)

    def build(self) -> None:
        if self.built:
            return
        started = time.monotonic()
        self.cache_dir.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.cache_dir.parent / f".{self.cache_dir.name}.lock"
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # other processes (pytest-xdist workers) wait here
            if self.built:
                return
            staging = Path(tempfile.mkdtemp(prefix=f".{self.cache_dir.name}-", dir=self.cache_dir.parent))
            try:
                self._build_into(staging)
                if self.cache_dir.exists():
                    shutil.rmtree(self.cache_dir)
                staging.rename(self.cache_dir)
            finally:
                if staging.exists():
                    shutil.rmtree(staging, ignore_errors=True)
        self.last_build_seconds = time.monotonic() - started

    def _build_into(self, work: Path) -> None:
        shutil.copy2(JAVA_DIR / "pom.xml", work / "pom.xml")
        sources = []
        for src in source_files()[1:]:
            dest = work / src.relative_to(JAVA_DIR)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
            sources.append(str(dest))
        cp_file = work / "classpath.txt"
        _check_call(
            [_which("mvn"), "-q", "-B", "-f", str(work / "pom.xml"), "dependency:build-classpath",
             f"-Dmdep.outputFile={cp_file}"],
            timeout=MVN_TIMEOUT_S, what="mvn dependency:build-classpath", cwd=work,
        )
        classpath = cp_file.read_text().strip()
        if "inlong-common-1.11.0" not in classpath or "snappy-java" not in classpath:
            raise JavaClientError(f"resolved classpath lacks inlong-common/snappy-java: {classpath!r}")
        _check_call(
            [_which("javac"), "--release", "17", "-encoding", "UTF-8", "-nowarn", "-d", str(work / "classes"),
             "-cp", classpath, *sources],
            timeout=JAVAC_TIMEOUT_S, what="javac", cwd=work,
        )
        (work / "BUILD_OK").write_text(source_hash() + "\n")

    def _run(self, *args: str) -> list[dict[str, Any]]:
        self.build()
        classpath = os.pathsep.join([str(self.classes_dir), self.classpath_file.read_text().strip()])
        cmd = [_which("java"), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dfile.encoding=UTF-8", "-cp", classpath, MAIN_CLASS, *args]
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise JavaClientError(f"InLongMsg CLI still running after {RUN_TIMEOUT_S} s\n{_tail(e.stderr)}") from None
        if proc.returncode != 0:
            raise JavaClientError(f"InLongMsg CLI failed (exit {proc.returncode})\n{_tail(proc.stderr)}")
        return [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines() if line.strip()]

    def encode_vectors(self, outdir: Path) -> list[dict[str, Any]]:
        """Let InLongMsg write its bundles into ``outdir``: ``[{"name", "file", "size"}]``."""
        return self._run("encode", str(outdir))

    def parse(self, paths: list[Path]) -> list[dict[str, Any]]:
        """InLongMsg's view of each file: ``{"ok", "version", "createtime", "msgcnt", "groups": [{"attr",
        "records": [bytes]}]}`` or ``{"ok": False, "error"}``, in the order of ``paths``."""
        lines = self._run("parse", *map(str, paths))
        if len(lines) != len(paths):
            raise JavaClientError(f"parse printed {len(lines)} lines for {len(paths)} files")
        for line in lines:
            for group in line.get("groups", []):
                group["records"] = [base64.b64decode(r) for r in group["records"]]
        return lines

    def parse_bytes(self, payloads: list[bytes]) -> list[dict[str, Any]]:
        with tempfile.TemporaryDirectory(prefix="tubespark-inlongmsg-") as tmp:
            paths = []
            for i, payload in enumerate(payloads):
                path = Path(tmp) / f"{i:04d}.bin"
                path.write_bytes(payload)
                paths.append(path)
            return self.parse(paths)


def _check_call(cmd: list[str], *, timeout: float, what: str, cwd: Path) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise JavaClientError(f"{what} timed out after {timeout} s\n{_tail(e.stdout)}\n{_tail(e.stderr)}") from None
    if proc.returncode != 0:
        raise JavaClientError(
            f"{what} failed (exit {proc.returncode})\n--- stdout\n{_tail(proc.stdout)}\n"
            f"--- stderr\n{_tail(proc.stderr)}"
        )


_shared: InLongJava | None = None


def shared_inlong_java() -> InLongJava:
    global _shared
    if _shared is None:
        _shared = InLongJava()
    return _shared
