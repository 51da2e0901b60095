"""The official TubeMQ Java client at full speed (``bench/java``'s TubeBench), built and run from Python.

Why a separate program from ``tests/interop``: the interop CLI prints every message as JSON, which
measures Gson, not TubeMQ. TubeBench only counts, and prints one JSON line of totals. It is built like
the interop CLI (:class:`tubespark_testbed.javatool.JavaTool`) and runs with the JVM's default flags, as a
user's application would.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tubespark_testbed.javatool import JavaTool, JavaToolError, tail

JAVA_DIR = Path(__file__).resolve().parent / "java"
MAIN_CLASS = "org.tubespark.bench.TubeBench"
QUIET = ("-Dorg.apache.logging.log4j.level=WARN",)


@dataclass(frozen=True)
class JavaResult:
    """TubeBench's one line: totals and the seconds from first to last message (setup excluded)."""

    messages: int
    bytes: int
    seconds: float
    setup_seconds: float


class TubeBench:
    """Build-once wrapper around TubeBench (consume / produce)."""

    def __init__(self) -> None:
        self.tool = JavaTool(JAVA_DIR, "tubebench", MAIN_CLASS, required_jars=("tubemq-client",))

    def build(self) -> None:
        """Resolve tubemq-client 1.13.0 from Maven Central and compile TubeBench (no-op when cached)."""
        self.tool.build()

    def _command(self, *args: str) -> list[str]:
        return self.tool.command(*args, jvm_flags=QUIET)

    def _run(self, *args: str, timeout_s: float) -> JavaResult:
        cmd = self._command(*args, "--timeout-ms", str(int(timeout_s * 1000)))
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 60, check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise JavaToolError(f"TubeBench {args[0]} failed (exit {proc.returncode}):\n{tail(proc.stderr)}")
        data: dict[str, Any] = json.loads(lines[-1])
        return JavaResult(int(data["messages"]), int(data["bytes"]), float(data["seconds"]),
                          float(data["setup_seconds"]))

    def consume(self, master: str, group: str, topic: str, count: int, *, threads: int = 2,
                timeout_s: float = 600) -> JavaResult:
        """Drain ``count`` messages from the first offset with one pull consumer and ``threads`` fetchers."""
        return self._run("consume", "--master", master, "--group", group, "--topic", topic, "--count",
                         str(count), "--threads", str(threads), timeout_s=timeout_s)

    def produce(self, master: str, topic: str, count: int, size: int, *, rate: float = 0, stamp: bool = False,
                timeout_s: float = 600) -> JavaResult:
        """Send ``count`` bodies of ``size`` bytes asynchronously; ``rate`` > 0 paces them (msgs/s)."""
        args = ["produce", "--master", master, "--topic", topic, "--count", str(count), "--size", str(size)]
        if rate > 0:
            args += ["--rate", str(rate)]
        if stamp:
            args.append("--stamp")
        return self._run(*args, timeout_s=timeout_s)

    def produce_background(self, master: str, topic: str, count: int, size: int, *, rate: float,
                           timeout_s: float = 600) -> subprocess.Popen[str]:
        """Start a paced, time-stamping producer and return at once (the latency case reads meanwhile)."""
        cmd = self._command("produce", "--master", master, "--topic", topic, "--count", str(count), "--size",
                            str(size), "--rate", str(rate), "--stamp", "--timeout-ms", str(int(timeout_s * 1000)))
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
