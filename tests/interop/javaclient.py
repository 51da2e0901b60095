"""Drive the official TubeMQ Java client from the tests.

``tests/interop/java`` holds a small Java CLI (``org.tubespark.interop.TubeInterop``) around the
TubeMQ Java client. :class:`JavaClient` builds it once per source version into
``~/.cache/tubespark/interop-<hash>/`` (root overridable with ``TUBESPARK_CACHE``) with
:class:`tubespark_testbed.javatool.JavaTool`: Maven resolves the classpath from Maven Central,
``javac`` compiles the sources, nothing is written into the repository.
Each call then runs one short-lived JVM and parses its JSON-lines output.

Client version: Maven Central only has ``tubemq-client`` up to 1.13.0; its main sources differ from the
2.4.0 client only by three unused constants (see ``java/pom.xml``).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tubespark_testbed.javatool import JavaTool, tail

JAVA_DIR = Path(__file__).resolve().parent / "java"
MAIN_CLASS = "org.tubespark.interop.TubeInterop"
# How long past the CLI's own --timeout-ms we wait before killing the JVM (it has its own watchdog
# at timeout + 20 s; this only catches a JVM that cannot even start or halt).
RUN_GRACE_S = 60
# Start-up speed over peak speed: each call is one short-lived JVM.
QUICK_JVM = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


class JavaClientError(AssertionError):
    """A Java tool's operation failed; the message carries its stderr tail."""

    def __init__(self, message: str, *, stdout_lines: list[dict] | None = None):
        super().__init__(message)
        self.stdout_lines = stdout_lines or []


class JavaClient:
    """Build-once, run-many wrapper around the Java interop CLI."""

    def __init__(self) -> None:
        self.tool = JavaTool(JAVA_DIR, "interop", MAIN_CLASS, required_jars=("tubemq-client",))
        self.last_stderr = ""

    def build(self) -> None:
        """Resolve the classpath and compile the CLI into the cache dir; a no-op when already built."""
        self.tool.build()

    def command(self, subcommand: str, *args: str) -> list[str]:
        """The java command line for one CLI call (builds first if needed)."""
        log_level = os.environ.get("TUBESPARK_JAVA_LOG_LEVEL", "WARN")
        return self.tool.command(subcommand, *args,
                                 jvm_flags=[*QUICK_JVM, f"-Dorg.apache.logging.log4j.level={log_level}"])

    def run(self, subcommand: str, *args: str, timeout_ms: int = 60000) -> list[dict[str, Any]]:
        """Run one CLI call and return its stdout JSON lines; raise JavaClientError on failure."""
        cmd = self.command(subcommand, *args, "--timeout-ms", str(int(timeout_ms)))
        limit_s = timeout_ms / 1000 + RUN_GRACE_S
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s)
        except subprocess.TimeoutExpired as e:  # subprocess.run has killed the JVM
            raise JavaClientError(
                f"java {subcommand} still running after {limit_s:.0f} s, killed\n"
                f"--- stderr\n{tail(e.stderr)}",
                stdout_lines=_parse_lines(e.stdout, strict=False),
            ) from None
        lines = _parse_lines(proc.stdout, strict=proc.returncode == 0)
        if proc.returncode != 0:
            raise JavaClientError(
                f"java {subcommand} failed (exit {proc.returncode}) after printing {len(lines)} lines\n"
                f"--- args {' '.join(args)}\n--- stderr\n{tail(proc.stderr)}",
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
