"""Drive the official TubeMQ Java client from the tests.

``tests/interop/java`` holds a small Java CLI (``org.tubespark.interop.TubeInterop``) around the
TubeMQ Java client. :class:`JavaClient` builds it once per source version into
``~/.cache/tubespark/interop-<hash>/`` (root overridable with ``TUBESPARK_CACHE``): Maven resolves the
classpath from Maven Central, ``javac`` compiles the sources, nothing is written into the repository.
Each call then runs one short-lived JVM and parses its JSON-lines output.

Client version: Maven Central only has ``tubemq-client`` up to 1.13.0; its main sources differ from the
2.4.0 client only by three unused constants (see ``java/pom.xml``).
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

JAVA_DIR = Path(__file__).resolve().parent / "java"
MAIN_CLASS = "org.tubespark.interop.TubeInterop"

# Bounds on the build steps (a cold Maven run downloads ~10 MB of jars and plugins).
MVN_TIMEOUT_S = 900
JAVAC_TIMEOUT_S = 300
# How long past the CLI's own --timeout-ms we wait before killing the JVM (it has its own watchdog
# at timeout + 20 s; this only catches a JVM that cannot even start or halt).
RUN_GRACE_S = 60
STDERR_TAIL = 6000


class JavaClientError(AssertionError):
    """The Java tool failed to build or an operation failed; the message carries its stderr tail."""

    def __init__(self, message: str, *, stdout_lines: list[dict] | None = None):
        super().__init__(message)
        self.stdout_lines = stdout_lines or []


def _tail(text: str | bytes | None, limit: int = STDERR_TAIL) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text if len(text) <= limit else "...\n" + text[-limit:]


def source_files() -> list[Path]:
    """The files whose content defines a build: the pom and the Java sources."""
    return [JAVA_DIR / "pom.xml", *sorted((JAVA_DIR / "src").rglob("*.java"))]


def source_hash() -> str:
    h = hashlib.sha256()
    for path in source_files():
        h.update(path.relative_to(JAVA_DIR).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def cache_root() -> Path:
    root = os.environ.get("TUBESPARK_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "tubespark"


def _which(tool: str) -> str:
    java_home = os.environ.get("JAVA_HOME")
    if tool in ("java", "javac") and java_home:
        candidate = Path(java_home) / "bin" / tool
        if candidate.exists():
            return str(candidate)
    found = shutil.which(tool)
    if not found:
        raise JavaClientError(f"{tool!r} not found on PATH (the interop tests need Java 17 and Maven)")
    return found


class JavaClient:
    """Build-once, run-many wrapper around the Java interop CLI."""

    def __init__(self, cache_dir: Path | None = None):
        self.cache_dir = Path(cache_dir) if cache_dir else cache_root() / f"interop-{source_hash()}"
        self.classes_dir = self.cache_dir / "classes"
        self.classpath_file = self.cache_dir / "classpath.txt"
        self._ok_marker = self.cache_dir / "BUILD_OK"
        self.last_build_seconds: float | None = None
        self.last_stderr = ""

    # ------------------------------------------------------------------------------------------
    # build

    @property
    def built(self) -> bool:
        if not self._ok_marker.exists():
            return False
        # The classpath points into the local Maven repository: rebuild if that was cleaned.
        jars = self.classpath_file.read_text().strip().split(os.pathsep)
        return all(Path(jar).exists() for jar in jars if jar)

    def build(self) -> None:
        """Resolve the classpath and compile the CLI into the cache dir; a no-op when already built."""
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
                    shutil.rmtree(self.cache_dir)  # leftover of an interrupted build
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
        self._check_call(
            [
                _which("mvn"),
                "-q",
                "-B",
                "-f",
                str(work / "pom.xml"),
                "dependency:build-classpath",
                f"-Dmdep.outputFile={cp_file}",
            ],
            timeout=MVN_TIMEOUT_S,
            what="mvn dependency:build-classpath",
            cwd=work,
        )
        classpath = cp_file.read_text().strip()
        if "tubemq-client" not in classpath:
            raise JavaClientError(f"resolved classpath lacks tubemq-client: {classpath!r}")
        self._check_call(
            [
                _which("javac"),
                "--release",
                "17",
                "-encoding",
                "UTF-8",
                "-nowarn",
                "-d",
                str(work / "classes"),
                "-cp",
                classpath,
                *sources,
            ],
            timeout=JAVAC_TIMEOUT_S,
            what="javac",
            cwd=work,
        )
        (work / "BUILD_OK").write_text(source_hash() + "\n")

    @staticmethod
    def _check_call(cmd: list[str], *, timeout: float, what: str, cwd: Path) -> None:
        try:
            proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise JavaClientError(
                f"{what} timed out after {timeout} s\n--- stdout\n{_tail(e.stdout)}\n"
                f"--- stderr\n{_tail(e.stderr)}"
            ) from None
        if proc.returncode != 0:
            raise JavaClientError(
                f"{what} failed (exit {proc.returncode})\n--- stdout\n{_tail(proc.stdout)}\n"
                f"--- stderr\n{_tail(proc.stderr)}"
            )

    # ------------------------------------------------------------------------------------------
    # run

    def command(self, subcommand: str, *args: str) -> list[str]:
        """The java command line for one CLI call (builds first if needed)."""
        self.build()
        classpath = os.pathsep.join([str(self.classes_dir), self.classpath_file.read_text().strip()])
        log_level = os.environ.get("TUBESPARK_JAVA_LOG_LEVEL", "WARN")
        return [
            _which("java"),
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dorg.apache.logging.log4j.level={log_level}",
            "-cp",
            classpath,
            MAIN_CLASS,
            subcommand,
            *args,
        ]

    def run(self, subcommand: str, *args: str, timeout_ms: int = 60000) -> list[dict[str, Any]]:
        """Run one CLI call and return its stdout JSON lines; raise JavaClientError on failure."""
        cmd = self.command(subcommand, *args, "--timeout-ms", str(int(timeout_ms)))
        limit_s = timeout_ms / 1000 + RUN_GRACE_S
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s)
        except subprocess.TimeoutExpired as e:  # subprocess.run has killed the JVM
            raise JavaClientError(
                f"java {subcommand} still running after {limit_s:.0f} s, killed\n"
                f"--- stderr\n{_tail(e.stderr)}",
                stdout_lines=_parse_lines(e.stdout, strict=False),
            ) from None
        lines = _parse_lines(proc.stdout, strict=proc.returncode == 0)
        if proc.returncode != 0:
            raise JavaClientError(
                f"java {subcommand} failed (exit {proc.returncode}) after printing {len(lines)} lines\n"
                f"--- args {' '.join(args)}\n--- stderr\n{_tail(proc.stderr)}",
                stdout_lines=lines,
            )
        self.last_stderr = proc.stderr
        return lines

    # ------------------------------------------------------------------------------------------
    # operations

    def produce(self, master: str, topic: str, messages: list[dict], timeout_ms: int = 60000) -> list[dict]:
        """Send messages with the Java producer, in order, synchronously; one result dict per message.

        Each message: ``{"data": bytes, "attrs": dict | None, "msgType": str | None, "msgTime": str | None}``
        (``msgTime`` as ``yyyyMMddHHmm``). Results: ``ok``, ``errCode``, ``partition`` (partition key
        ``brokerId:topic:partitionId``), ``partitionId``, ``messageId``, ``appendOffset``, ``appendTime``.
        """
        with tempfile.TemporaryDirectory(prefix="tubespark-produce-") as tmp:
            path = Path(tmp) / "input.jsonl"
            with open(path, "w", encoding="utf-8") as f:
                for m in messages:
                    f.write(
                        json.dumps(
                            {
                                "data": base64.b64encode(bytes(m["data"])).decode("ascii"),
                                "attrs": m.get("attrs"),
                                "msgType": m.get("msgType"),
                                "msgTime": m.get("msgTime"),
                            }
                        )
                        + "\n"
                    )
            results = self.run(
                "produce", "--master", master, "--topic", topic, "--input", str(path), timeout_ms=timeout_ms
            )
        if len(results) != len(messages):
            raise JavaClientError(
                f"java produce reported {len(results)} results for {len(messages)} messages"
            )
        return results

    def consume(
        self,
        master: str,
        group: str,
        topic: str,
        count: int,
        *,
        filters: list[str] | None = None,
        from_first: bool = True,
        timeout_ms: int = 60000,
    ) -> list[dict]:
        """Consume with a server-balance PullMessageConsumer until ``count`` messages arrived.

        Returns every message of the batches fetched (possibly more than ``count``), each with
        ``partitionKey``, ``batchOffset`` (ConsumerResult.getCurrOffset), ``index`` (position in the
        batch), ``data`` (bytes), ``attribute``, ``msgType``, ``msgTime``, ``flag``, ``messageId``,
        ``maxOffset`` and ``confirmOffset`` (the broker's offset after confirming that batch).
        """
        args = ["--master", master, "--group", group, "--topic", topic, "--count", str(count)]
        if filters:
            args += ["--filters", ",".join(filters)]
        if from_first:
            args.append("--from-first")
        return [_decode(line) for line in self.run("consume", *args, timeout_ms=timeout_ms)]

    def read_range(
        self,
        master: str,
        group: str,
        topic: str,
        partition_key: str,
        start: int,
        end: int,
        timeout_ms: int = 60000,
    ) -> list[dict]:
        """Read the messages of one partition with index offsets in ``[start, end)``.

        Bound consumption (``completeSubscribe(sessionKey, 1, true, {partition_key: start})``) in the
        given group, which should be fresh. Only valid for a topic with one partition per store and no
        filters: message k of a batch is at ``batchOffset + 28*k``; the CLI checks that batches are
        contiguous and that each confirm lands on the computed batch end. Lines as for :meth:`consume`
        plus ``offset``.
        """
        args = [
            "--master",
            master,
            "--group",
            group,
            "--topic",
            topic,
            "--partition-key",
            partition_key,
            "--start",
            str(start),
            "--end",
            str(end),
        ]
        return [_decode(line) for line in self.run("range", *args, timeout_ms=timeout_ms)]


def _decode(line: dict) -> dict:
    line = dict(line)
    line["data"] = base64.b64decode(line["data"])
    return line


def _parse_lines(stdout: str | bytes | None, *, strict: bool) -> list[dict]:
    if isinstance(stdout, bytes):
        stdout = stdout.decode("utf-8", "replace")
    lines = []
    for raw in (stdout or "").splitlines():
        raw = raw.strip()
        if not raw:
            continue
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            if strict:
                raise JavaClientError(f"non-JSON line on the Java tool's stdout: {raw!r}") from None
    return lines


_shared: JavaClient | None = None


def shared_client() -> JavaClient:
    """One JavaClient (default cache dir) per test process."""
    global _shared
    if _shared is None:
        _shared = JavaClient()
    return _shared
