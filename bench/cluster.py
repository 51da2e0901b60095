"""The TubeMQ cluster the benchmark measures: the testbed's LocalCluster, but a broker with Java's defaults.

Why: ``LocalCluster`` starts every JVM with start-up-speed flags (``-XX:+UseSerialGC``,
``-XX:TieredStopAtLevel=1`` i.e. C1 only, ``-Xss512k``, ``-Xms128m -Xmx1g -XX:MaxDirectMemorySize=1g``
for the broker). Those are right for tests and wrong for throughput figures users compare with their
own clusters. The broker is the only JVM on the data path, so :class:`BenchCluster` starts *it* with
the JVM's defaults (G1, tiered C2, heap sized from RAM), keeping only the flags TubeMQ needs to run on
JDK 17 (``--add-opens``, IPv4, encoding). ZooKeeper and the master keep the testbed's flags.
Nothing in ``testbed/`` is changed: this overrides ``LocalCluster._spawn`` for the broker only.
"""

from __future__ import annotations

import os
from typing import Any

from tubespark_testbed import local
from tubespark_testbed.procs import JavaProcess

# What TubeMQ needs to work on JDK 17+, and nothing that tunes the JVM.
REQUIRED_JVM_FLAGS: tuple[str, ...] = (
    "-Djava.net.preferIPv4Stack=true",
    "-Dfile.encoding=UTF-8",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
)


def testbed_broker_flags() -> list[str]:
    """The flags ``LocalCluster`` gives its broker (read from the testbed, so this never goes stale)."""
    return [*local._COMMON_JVM_FLAGS, *local._BROKER_JVM_FLAGS]


class BenchCluster(local.LocalCluster):
    """A LocalCluster whose broker runs with ``broker_jvm="default"`` (Java's defaults) or ``"testbed"``."""

    def __init__(self, *, broker_jvm: str = "default", **kwargs: Any) -> None:
        if broker_jvm not in ("default", "testbed"):
            raise ValueError(f"broker_jvm must be 'default' or 'testbed', got {broker_jvm!r}")
        super().__init__(**kwargs)
        self.broker_jvm = broker_jvm

    def broker_flags(self) -> list[str]:
        """The JVM flags the broker runs with, read from its actual command line once started (so the
        report stays true if the testbed changes), minus the per-run ``-Dtubemq.*``/log4j paths."""
        try:
            argv = self.process("broker").argv
        except Exception:  # noqa: BLE001 - not started yet: what it will run with
            return list(REQUIRED_JVM_FLAGS) if self.broker_jvm == "default" else testbed_broker_flags()
        flags = argv[1:argv.index("-cp")] if "-cp" in argv else argv[1:]
        return [f for f in flags if not f.startswith(("-Dtubemq.", "-Dlog4j.configurationFile="))]

    def _spawn(self, java: str, classpath: str, name: str, flags: tuple[str, ...], main: str,
               args: list[str]) -> JavaProcess:
        if name != "broker" or self.broker_jvm == "testbed":
            return super()._spawn(java, classpath, name, flags, main, args)
        # Same command line as LocalCluster._spawn builds, with the broker's tuning flags left out.
        assert self.files is not None and self.work_dir is not None
        argv = [
            java,
            *REQUIRED_JVM_FLAGS,
            f"-Dtubemq.home={self.work_dir}",
            f"-Dtubemq.log.path={self.files.log_dir}",
            f"-Dtubemq.log.prefix={name}",
            f"-Dlog4j.configurationFile={self.files.log4j2_xml}",
            "-cp",
            classpath,
            main,
            *args,
        ]
        env = {k: v for k, v in os.environ.items() if k not in ("CLASSPATH", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS")}
        proc = JavaProcess(name, argv, log_dir=self.files.log_dir, cwd=self.work_dir, env=env)
        self._procs.append(proc)
        proc.start()
        return proc
