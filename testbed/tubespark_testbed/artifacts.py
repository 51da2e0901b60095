"""Resolve the TubeMQ server and its runtime classpath from Maven Central into a local cache.

Why not simply depend on ``org.apache.inlong:tubemq-server:2.4.0`` and let Maven walk the tree: on
Maven Central as reachable here only the ``tubemq-server`` 2.4.0 jar and pom exist; its parent pom
(``inlong-tubemq:2.4.0``) and its sibling modules (``tubemq-core``, ``tubemq-client``, ``audit-sdk``,
``tubemq-example``, all 2.4.0) are missing, so the normal resolution fails with "Failed to read artifact
descriptor". We therefore

* fetch the 2.4.0 server jar alone with ``dependency:copy`` (which does not read its pom; even a
  ``*:*`` exclusion still makes Maven read the descriptor and fail on the missing parent),
* pair it with ``tubemq-core``/``tubemq-client`` 1.13.0, whose main code differs from 2.4.0 only by
  three ``static final int`` constants in ``TBaseConstants`` (``git diff 1.13.0-RC0 2.4.0-RC0``) that
  javac inlined into the server classes, so the combination is binary compatible,
* list the server's third-party dependencies ourselves at the versions of the InLong 2.4.0 root pom,
  pinning the transitive ones (netty, protobuf, log4j2, ...) the same way,
* add ``io.dropwizard.metrics:metrics-core`` and ``org.xerial.snappy:snappy-java`` (both ``provided``
  in ZooKeeper's pom, both needed at run time by ``ZooKeeperServerMain``) so the ZooKeeper jar in
  the closure can run ``ZooKeeperServerMain`` from the same ``lib`` directory,
* leave out ``audit-sdk`` (the broker only touches it when ``[audit]`` is enabled, which we never do)
  and ``tubemq-example`` (the server does not use it).

The cache directory holds the generated ``pom.xml``, ``lib/`` and a marker file written only after a
complete copy; its content is keyed by a hash of the pom so a change of the recipe re-resolves.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tubespark_testbed.errors import ClusterError

TUBEMQ_VERSION = "2.4.0"
# Newest tubemq-core/-client on Central here; see the module docstring for why it is safe.
TUBEMQ_CORE_VERSION = "1.13.0"
ZOOKEEPER_VERSION = "3.7.2"

_MARKER = "RESOLVED"
_RESOLVE_TIMEOUT_S = 900.0

# (groupId, artifactId, version) of the server's direct runtime dependencies, versions from the InLong
# 2.4.0 root pom.
_DIRECT: tuple[tuple[str, str, str], ...] = (
    ("org.apache.inlong", "tubemq-core", TUBEMQ_CORE_VERSION),
    ("org.apache.inlong", "tubemq-client", TUBEMQ_CORE_VERSION),
    ("io.prometheus", "simpleclient_httpserver", "0.14.1"),
    ("log4j", "log4j", "1.2.17"),
    ("org.ini4j", "ini4j", "0.5.4"),
    ("commons-io", "commons-io", "2.11.0"),
    ("org.apache.velocity", "velocity-engine-core", "2.3"),
    ("com.google.guava", "guava", "32.1.2-jre"),
    ("javax.servlet", "javax.servlet-api", "4.0.1"),
    ("org.apache.logging.log4j", "log4j-jcl", "2.17.2"),
    ("org.springframework", "spring-core", "5.3.34"),
    ("org.springframework", "spring-context", "5.3.34"),
    ("org.springframework", "spring-jdbc", "5.3.34"),
    ("org.springframework", "spring-orm", "5.3.34"),
    ("org.apache.velocity.tools", "velocity-tools-generic", "3.1"),
    ("commons-cli", "commons-cli", "1.4"),
    ("org.apache.httpcomponents", "httpclient", "4.5.13"),
    ("org.eclipse.jetty", "jetty-server", "9.4.51.v20230217"),
    ("org.eclipse.jetty", "jetty-servlet", "9.4.51.v20230217"),
    ("org.dom4j", "dom4j", "2.1.3"),
    ("com.beust", "jcommander", "1.78"),
    # Not server dependencies: ZooKeeperServerMain needs them, ZooKeeper's pom marks them "provided"
    # (metrics for its default metrics provider, snappy because snapshot naming touches its class).
    ("io.dropwizard.metrics", "metrics-core", "4.1.12.1"),
    ("org.xerial.snappy", "snappy-java", "1.1.10.5"),
)

# Transitive dependencies pinned to the 2.4.0 root pom, so 1.13.0's older choices do not leak in.
_MANAGED: tuple[tuple[str, str, str], ...] = (
    ("com.google.protobuf", "protobuf-java", "3.19.6"),
    ("com.google.code.gson", "gson", "2.8.9"),
    ("org.apache.logging.log4j", "log4j-api", "2.17.2"),
    ("org.apache.logging.log4j", "log4j-core", "2.17.2"),
    ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.17.2"),
    ("org.slf4j", "slf4j-api", "1.7.36"),
    ("commons-codec", "commons-codec", "1.15"),
    ("org.apache.commons", "commons-lang3", "3.11"),
    *(
        ("io.netty", name, "4.1.118.Final")
        for name in (
            "netty-common",
            "netty-buffer",
            "netty-resolver",
            "netty-transport",
            "netty-codec",
            "netty-handler",
            "netty-transport-native-epoll",
            "netty-transport-native-unix-common",
            "netty-transport-classes-epoll",
        )
    ),
)

# Same exclusions the server pom applies to ZooKeeper (licences, duplicate netty, log4j 1 binding).
_ZK_EXCLUSIONS: tuple[tuple[str, str], ...] = (
    ("com.google.code.findbugs", "jsr305"),
    ("com.github.spotbugs", "spotbugs-annotations"),
    ("jline", "jline"),
    ("com.sun.jmx", "jmxri"),
    ("com.sun.jdmk", "jmxtools"),
    ("javax.jms", "jms"),
    ("io.netty", "netty"),
    ("io.netty", "netty-all"),
    ("org.slf4j", "slf4j-log4j12"),
)


def _dep(group: str, artifact: str, version: str, exclusions: tuple[tuple[str, str], ...] = ()) -> str:
    excl = "".join(
        f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>" for g, a in exclusions
    )
    excl_xml = f"<exclusions>{excl}</exclusions>" if excl else ""
    return (
        f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"<version>{version}</version>{excl_xml}</dependency>\n"
    )


def render_pom() -> str:
    """The throw-away pom whose ``runtime`` closure is the server classpath minus the server jar."""
    deps = "".join(_dep(*d) for d in _DIRECT)
    deps += _dep("org.apache.zookeeper", "zookeeper", ZOOKEEPER_VERSION, _ZK_EXCLUSIONS)
    managed = "".join(_dep(*d) for d in _MANAGED)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>local.tubespark</groupId>\n"
        "  <artifactId>tubemq-runtime</artifactId>\n"
        f"  <version>{TUBEMQ_VERSION}</version>\n"
        "  <packaging>pom</packaging>\n"
        f"  <dependencyManagement><dependencies>\n{managed}  </dependencies></dependencyManagement>\n"
        f"  <dependencies>\n{deps}  </dependencies>\n"
        "</project>\n"
    )


def cache_root() -> Path:
    """Root of every build cache: ``$TUBESPARK_CACHE`` or ``~/.cache/tubespark``."""
    root = os.environ.get("TUBESPARK_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "tubespark"


def cache_dir() -> Path:
    """Where the TubeMQ server's jars are cached."""
    return cache_root() / f"tubemq-{TUBEMQ_VERSION}"


def lib_dir() -> Path:
    return cache_dir() / "lib"


def _pom_hash(pom: str) -> str:
    return hashlib.sha256(pom.encode()).hexdigest()[:16]


def is_resolved() -> bool:
    """True when a previous run finished copying the classpath for the current recipe."""
    marker = cache_dir() / _MARKER
    try:
        return marker.read_text().strip() == _pom_hash(render_pom())
    except OSError:
        return False


def ensure_artifacts(*, quiet: bool = True) -> Path:
    """Return the ``lib`` directory, running Maven first if the cache is missing or stale.

    Maven is run in offline-capable mode against the user's normal ``~/.m2`` so CI caches of the
    local repository help too. The copy goes to a temp dir that is renamed into place, so a killed
    run never leaves a half-filled ``lib`` that looks complete.
    """
    if is_resolved():
        return lib_dir()
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ClusterError("Maven ('mvn') is not on PATH; it is needed once to fetch the TubeMQ server jars")
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    pom = render_pom()
    (root / "pom.xml").write_text(pom)
    staging = root / "lib.partial"
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [
        mvn,
        "-B",
        *(["-q"] if quiet else []),
        "-f",
        str(root / "pom.xml"),
        "dependency:copy-dependencies",
        "dependency:copy",
        f"-Dartifact=org.apache.inlong:tubemq-server:{TUBEMQ_VERSION}:jar",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_RESOLVE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"Maven did not finish within {_RESOLVE_TIMEOUT_S:.0f}s: {' '.join(cmd)}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise ClusterError(f"Maven could not resolve the TubeMQ server (exit {proc.returncode}):\n{tail}")
    jars = list(staging.glob("*.jar"))
    if not any(j.name.startswith("tubemq-server-") for j in jars):
        raise ClusterError(f"Maven finished but {staging} has no tubemq-server jar")
    shutil.rmtree(lib_dir(), ignore_errors=True)
    staging.rename(lib_dir())
    (root / _MARKER).write_text(_pom_hash(pom) + "\n")
    return lib_dir()


def classpath(extra: list[Path] | None = None) -> str:
    """Java classpath string: optional extra entries first (our conf dir), then every cached jar."""
    jars = sorted(str(p) for p in lib_dir().glob("*.jar"))
    return os.pathsep.join([*(str(p) for p in extra or []), *jars])
