"""Drive Apache RocketMQ's own Java client (``tests/interop/rocketmq``) from the tests and the bench.

The CLI is built once per source version into the cache by :class:`tubespark_testbed.javatool.JavaTool`
(Maven resolves ``rocketmq-client`` from Maven Central, ``javac`` compiles); each call is one JVM whose
stdout is JSON lines.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tubespark_testbed.javatool import JavaTool, tail

JAVA_DIR = Path(__file__).resolve().parent / "rocketmq"
MAIN_CLASS = "org.tubespark.interop.RocketMQTool"
JVM_FLAGS = ("-Xmx512m", "-XX:+UseSerialGC", "-Drocketmq.client.logUseSlf4j=false",
             "-Drocketmq.client.logLevel=WARN")


class RocketMQJava:
    def __init__(self) -> None:
        self.tool = JavaTool(JAVA_DIR, "rocketmq-interop", MAIN_CLASS, required_jars=("rocketmq-client",))

    def build(self) -> None:
        self.tool.build()

    def run(self, *args: str, timeout_s: float = 180) -> list[dict[str, Any]]:
        proc = subprocess.run(self.tool.command(*args, jvm_flags=JVM_FLAGS), capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        if proc.returncode != 0:
            raise AssertionError(f"java {args[0]} failed (exit {proc.returncode})\n{tail(proc.stderr)}")
        return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]

    def produce(self, namesrv: str, topic: str, count: int, *, size: int = 0, batch: int = 1) -> dict[str, Any]:
        return self.run("produce", namesrv, topic, str(count), str(size), str(batch))[-1]

    def consume(self, namesrv: str, topic: str, count: int, *, timeout_ms: int = 60000,
                print_bodies: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        lines = self.run("consume", namesrv, topic, str(count), str(timeout_ms), *(["print"] if print_bodies else []),
                         timeout_s=timeout_ms / 1000 + 60)
        return lines[:-1], lines[-1]
