"""A real HDFS on 127.0.0.1 (Hadoop's MiniDFSCluster from Maven Central), reached over WebHDFS.

Why: ``popReceiptsPath`` and ``skippedBundlesPath`` accept the filesystems a Spark cluster already has
(:mod:`tubespark.core.shared_dir`); their tests run against a real namenode and datanode, not a double.
What runs: ``org.apache.hadoop:hadoop-minicluster`` at :data:`HADOOP_VERSION` (its runtime closure resolved
once by Maven, plus the two jars its test-scoped code needs at run time: jackson-core at the version
jackson-databind wants, and mockito, which ``MiniDFSCluster`` loads while it waits for the cluster) and a
tiny main (``templates/MiniHdfs.java``, compiled once into the cache) that starts one namenode and one
datanode with permissions off and prints the namenode's HTTP port. One JVM, up in ~5 s.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from tubespark_testbed.artifacts import cache_root
from tubespark_testbed.errors import ClusterError
from tubespark_testbed.javatool import JAVAC_TIMEOUT_S, content_hash, resolve_classpath, run_checked, which
from tubespark_testbed.procs import JavaProcess, wait_until

HADOOP_VERSION = "3.4.1"
HOST = "127.0.0.1"
MAIN = "MiniHdfs"
_SOURCE = Path(__file__).parent / "templates" / "MiniHdfs.java"
_JVM_FLAGS = (
    "-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",  # WebHDFS's Jersey/Guice define classes reflectively
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
)
_START_TIMEOUT_S = 120.0
_READY_RE = re.compile(r"^WEBHDFS (\d+)$", re.MULTILINE)


def render_pom() -> str:
    """The throw-away pom whose runtime closure runs MiniDFSCluster."""
    deps = [("org.apache.hadoop", "hadoop-minicluster", HADOOP_VERSION),
            ("com.fasterxml.jackson.core", "jackson-core", "2.12.7"),  # nearest-wins picks 2.10: no JacksonFeature
            ("org.mockito", "mockito-core", "2.28.2")]
    body = "".join(f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>"
                   "</dependency>\n" for g, a, v in deps)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
            "  <modelVersion>4.0.0</modelVersion>\n  <groupId>local.tubespark</groupId>\n"
            f"  <artifactId>hdfs-mini</artifactId>\n  <version>{HADOOP_VERSION}</version>\n"
            f"  <packaging>pom</packaging>\n  <dependencies>\n{body}  </dependencies>\n</project>\n")


def ensure_artifacts() -> str:
    """The classpath (compiled main + jars), resolved and compiled into the cache on first use."""
    pom = cache_root() / f"hdfs-mini-{HADOOP_VERSION}.pom.xml"
    pom.parent.mkdir(parents=True, exist_ok=True)
    text = render_pom()
    if not pom.exists() or pom.read_text() != text:
        pom.write_text(text)
    jars = resolve_classpath(pom, f"hdfs-mini-{HADOOP_VERSION}")
    if not any("hadoop-hdfs-" in j for j in jars):
        raise ClusterError(f"the MiniDFSCluster classpath lacks hadoop-hdfs: {jars}")
    classes = cache_root() / f"hdfs-mini-main-{content_hash([_SOURCE], _SOURCE.parent)[:12]}"
    if not (classes / f"{MAIN}.class").exists():
        work = Path(tempfile.mkdtemp(prefix=".hdfs-mini-main-", dir=cache_root()))
        try:
            run_checked([which("javac"), "--release", "17", "-nowarn", "-d", str(work), "-cp", os.pathsep.join(jars),
                         str(_SOURCE)], cwd=work, timeout=JAVAC_TIMEOUT_S, what=f"javac {_SOURCE.name}")
            shutil.rmtree(classes, ignore_errors=True)
            work.rename(classes)
        except OSError:
            if not (classes / f"{MAIN}.class").exists():  # not another process's finished build
                raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return os.pathsep.join([str(classes), *jars])


class MiniHdfs:
    """One namenode + one datanode in one JVM; :attr:`url` is ``webhdfs://127.0.0.1:<port>``."""

    def __init__(self, work_dir: Path | None = None) -> None:
        self._own_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="tubespark-hdfs-"))
        self.port = 0
        self.process: JavaProcess | None = None

    @property
    def url(self) -> str:
        return f"webhdfs://{HOST}:{self.port}"

    def start(self) -> MiniHdfs:
        classpath = ensure_artifacts()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        proc = JavaProcess("hdfs", [which("java"), *_JVM_FLAGS, "-cp", classpath, MAIN, str(self.work_dir / "dfs")],
                           log_dir=self.work_dir, cwd=self.work_dir, env=dict(os.environ))
        atexit.register(self.stop)
        proc.start()
        self.process = proc

        def ready() -> bool:
            found = _READY_RE.search(proc.out_path.read_text(errors="replace"))
            if found:
                self.port = int(found.group(1))
            return found is not None

        try:
            wait_until("the HDFS minicluster", ready, timeout_s=_START_TIMEOUT_S, watch=[proc],
                       on_timeout=proc.diagnostics)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace_s=5.0)
            self.process = None
        if self._own_dir and not os.environ.get("TUBESPARK_KEEP_CLUSTER"):
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> MiniHdfs:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
