"""A local single-node Kafka 4.3.1 (KRaft) and Spark's Kafka connector jars, both from Maven Central.

Why Kafka at all: Spark's built-in Kafka source and sink are what users measure a Spark connector
against. The Kafka distribution tarball is not on Maven Central, so the broker runs from the
``kafka_2.13:4.3.1`` jar's closure (``bench/maven/kafka-server.pom.xml``) as ``kafka.Kafka`` in KRaft
combined mode on free loopback ports, formatted with ``kafka.tools.StorageTool``. Spark's connector
``spark-sql-kafka-0-10_2.13`` 4.3.0 is not on Central; 4.2.0 is and works on Spark 4.3. It goes in
with ``spark.jars`` because ``spark.jars.packages`` cannot download here.
"""

from __future__ import annotations

import atexit
import base64
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType

from tubespark_testbed.javatool import JavaToolError, resolve_classpath, which
from tubespark_testbed.ports import free_ports

KAFKA_VERSION = "4.3.1"
SPARK_KAFKA_VERSION = "4.2.0"
START_TIMEOUT_S = 90.0
POMS = Path(__file__).resolve().parent / "maven"
TOPICS_TOOL = Path(__file__).resolve().parent / "kafka_topics.java"


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``: the name without version, to spot duplicates."""
    return re.sub(r"-\d[\w.\-]*\.jar$", "", Path(jar).name)


def spark_kafka_jars() -> list[str]:
    """The connector's closure minus what pyspark already ships (its own Hadoop, compression, Scala jars)."""
    import pyspark

    shipped = {_artifact(j.name) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    jars = resolve_classpath(POMS / "spark-sql-kafka.pom.xml", "spark-sql-kafka")
    return [j for j in jars if _artifact(j) not in shipped]


class KafkaBroker:
    """One Kafka broker+controller JVM on 127.0.0.1, started with the JVM's default flags."""

    def __init__(self, *, partitions: int = 4, work_dir: Path | None = None) -> None:
        self.partitions = partitions
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="tubespark-bench-kafka-"))
        self.port = 0
        self.controller_port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.jvm_flags: list[str] = []
        self._java_cp: list[str] = []  # java and -cp <the broker's jars>, for create_topics

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def started_with(cls, topics: list[str], *, partitions: int = 4) -> KafkaBroker:
        """A started broker on which ``topics`` exist with a leader for every partition."""
        broker = cls(partitions=partitions).start()
        try:
            broker.create_topics(topics)
        except BaseException:
            broker.stop()
            raise
        return broker

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> KafkaBroker:
        """Resolve the jars (cached), format the log dir and start; return once it serves clients."""
        jars = resolve_classpath(POMS / "kafka-server.pom.xml", "kafka-server")
        classpath = ":".join(jars)
        self.port, self.controller_port = free_ports(2)
        props = self.work_dir / "server.properties"
        log4j = self.work_dir / "log4j2.properties"
        log_file = self.work_dir / "kafka.log"
        props.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={self.work_dir / 'data'}",
            f"num.partitions={self.partitions}",
            "auto.create.topics.enable=false",  # every topic is made by create_topics, its leaders checked
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            # Keep the write cases from filling the disk on a full run.
            "log.retention.bytes=4294967296",
            "log.retention.check.interval.ms=30000",
            "",
        ]))
        log4j.write_text("\n".join([
            "status = warn",
            "appender.file.type = File",
            "appender.file.name = FILE",
            f"appender.file.fileName = {log_file}",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "rootLogger.level = INFO",
            "rootLogger.appenderRef.file.ref = FILE",
            "",
        ]))
        java = which("java")
        common = [f"-Dlog4j2.configurationFile={log4j}", "-Djava.net.preferIPv4Stack=true"]
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        fmt = subprocess.run([java, *common, "-cp", classpath, "kafka.tools.StorageTool", "format", "-t",
                              cluster_id, "-c", str(props)], capture_output=True, text=True, timeout=120,
                             check=False)
        if fmt.returncode != 0:
            raise JavaToolError(f"kafka storage format failed:\n{fmt.stdout[-2000:]}\n{fmt.stderr[-2000:]}")
        self.jvm_flags = common
        self._java_cp = [java, *common, "-cp", classpath]
        atexit.register(self.stop)  # no broker JVM outlives the benchmark
        out = open(self.work_dir / "kafka.out", "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen([java, *common, "-cp", classpath, "kafka.Kafka", str(props)],
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise JavaToolError(f"kafka exited ({self.proc.returncode}):\n{self._tail()}")
            if log_file.exists() and "Kafka Server started" in log_file.read_text(errors="replace"):
                return self
            time.sleep(0.25)
        self.stop()
        raise JavaToolError(f"kafka did not start within {START_TIMEOUT_S:.0f} s:\n{self._tail()}")

    def create_topics(self, names: list[str], timeout_s: float = 120.0) -> None:
        """Create ``names`` (``partitions`` each, ignoring those that exist) and return once every partition has
        a leader (``kafka_topics.java``, run with the broker's jars): the bench's writes never auto-create."""
        if not names:
            return
        cmd = [*self._java_cp, str(TOPICS_TOOL), self.bootstrap, str(self.partitions), str(int(timeout_s)), *names]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 60, check=False)
        except subprocess.TimeoutExpired as exc:
            raise JavaToolError(f"creating kafka topics {names} did not end in {timeout_s + 60:.0f} s\n"
                                f"{self.state()}") from exc
        if done.returncode != 0:
            raise JavaToolError(f"creating kafka topics {names} failed ({done.returncode}): "
                                f"{done.stderr[-2000:]}\n{self.state()}")

    def state(self) -> str:
        """Whether the broker JVM still runs, and the end of its log: what a failed Kafka write is told with."""
        if self.proc is None:
            alive = "kafka broker: not started"
        elif self.proc.poll() is None:
            alive = f"kafka broker: running (pid {self.proc.pid})"
        else:
            alive = f"kafka broker: exited with {self.proc.returncode}"
        return f"{alive}\n{self._tail()}"

    def _tail(self) -> str:
        texts = []
        for name in ("kafka.out", "kafka.log"):
            p = self.work_dir / name
            if p.exists():
                texts.append(p.read_text(errors="replace")[-3000:])
        return "\n".join(texts)

    def stop(self) -> None:
        """Stop the JVM (kill after 10 s) and remove its data."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        shutil.rmtree(self.work_dir, ignore_errors=True)
