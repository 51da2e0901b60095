"""A real local TubeMQ cluster (ZooKeeper + master(s) + one or more brokers) on loopback, for tests and demos.

Start-up follows the order the server forces on us: the broker exits after five failed registrations
200 ms apart unless the master already has an *online* configuration record for its exact ip/ports, so
the record is created and onlined through the master's web API before the broker JVM starts.

Timing (see :class:`~tubespark_testbed.config.ClusterSettings` for the knobs): brokers heartbeat every
1 s instead of 8 s, because the master only moves a broker's configuration through its
``load_data -> wait_sub -> wait_pub -> idle`` steps on heartbeats. Consumer rebalance runs every 2 s.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from tubespark.tubemq.client.admin import BrokerAdmin, MasterAdmin
from tubespark.tubemq.errors import AdminApiError
from tubespark_testbed import artifacts
from tubespark_testbed.config import (
    MAX_BROKERS,
    ClusterFiles,
    ClusterPorts,
    ClusterSettings,
    broker_host,
    broker_ini_path,
    broker_name,
    render_broker_ini,
    render_cluster_files,
)
from tubespark_testbed.errors import ClusterError
from tubespark_testbed.procs import JavaProcess, wait_until

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
# What a standby master's web API answers: 2.4.0's MasterStatusCheckFilter redirects every request to
# http://<active master's host>:<its own webPort>, which on one host is the standby itself (a redirect
# loop, HTTP 302 to urllib); Webapi.execute's own refusal text is the other form.
_STANDBY_TEXTS = ("HTTP 302 from", "Please send your request to the master Node")


def _is_standby_answer(text: str) -> bool:
    return any(t in text for t in _STANDBY_TEXTS)
KEEP_ENV = "TUBESPARK_KEEP_CLUSTER"
JAVA_ENV = "TUBESPARK_JAVA"

# Flags valid on JDK 17 and later. The shipped env.sh uses CMS / Java 8 GC-logging flags that
# JDK 17 rejects ("Unrecognized VM option"), so none of them are reused.
REQUIRED_JVM_FLAGS = (  # what TubeMQ needs to run on JDK 17+, and nothing that tunes the JVM
    "-Djava.net.preferIPv4Stack=true",
    "-Dfile.encoding=UTF-8",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
)
_TUNING_JVM_FLAGS = (
    "-XX:+UseSerialGC",  # one small heap per JVM; no GC threads to spare on a CI box
    "-XX:TieredStopAtLevel=1",  # C1 only: start-up speed matters more than peak throughput here
    "-XX:+ExitOnOutOfMemoryError",
    "-Xss512k",
)
_ZK_JVM_FLAGS = (
    "-Xms32m",
    "-Xmx256m",
    "-Dzookeeper.admin.enableServer=false",
    "-Dzookeeper.jmx.log4j.disable=true",
)
_MASTER_JVM_FLAGS = ("-Xms64m", "-Xmx512m", "-XX:MaxDirectMemorySize=256m")
_BROKER_JVM_FLAGS = ("-Xms128m", "-Xmx1g", "-XX:MaxDirectMemorySize=1g")

MASTER_MAIN = "org.apache.inlong.tubemq.server.tools.MasterStartup"
BROKER_MAIN = "org.apache.inlong.tubemq.server.tools.BrokerStartup"
ZK_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"

# The broker's graceful stop closes every store, and each close fails on JDK 9+ (MsgMemStore calls
# sun.nio.ch.DirectBuffer.cleaner() with a Java 8 signature -> NoSuchMethodError) after ~0.1 s, so a
# broker with many stores takes seconds to exit. Its data dir is throw-away: do not wait for long.
_STOP_GRACE_S = {"broker": 2.0, "master": 5.0, "zookeeper": 5.0}
TERMINATE_GRACE_S = 60.0
"""How long :meth:`LocalCluster.terminate` lets a process stop by itself: its data outlives it there."""

ZK_START_TIMEOUT_S = 30.0
MASTER_START_TIMEOUT_S = 60.0
BROKER_START_TIMEOUT_S = 60.0
TOPIC_READY_TIMEOUT_S = 120.0  # typically 31-33 s; under a loaded CI run a broker once needed another config cycle

# Strong references on purpose: a cluster dropped without stop() must still be stopped at exit.
_live: set[LocalCluster] = set()
_live_lock = threading.Lock()


@atexit.register
def _stop_all() -> None:
    """Stop clusters the program forgot to stop, so no JVM outlives the interpreter."""
    with _live_lock:
        clusters = list(_live)
    for c in clusters:
        with contextlib.suppress(Exception):  # best effort at interpreter exit
            c.stop()


def find_java() -> str:
    """``$TUBESPARK_JAVA``, else ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    explicit = os.environ.get(JAVA_ENV)
    if explicit:
        return explicit
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise ClusterError(f"no 'java' on PATH; install a JDK 17+ or set {JAVA_ENV}")
    return found


@dataclass(frozen=True)
class BrokerNode:
    """One broker of a :class:`LocalCluster`: process name, broker id, loopback address and ports."""

    name: str
    broker_id: int
    host: str
    port: int
    web_port: int
    prom_port: int

    @property
    def address(self) -> str:
        """``host:port`` of its RPC port, as the master lists it to clients."""
        return f"{self.host}:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://{self.host}:{self.web_port}"


def process_kind(name: str) -> str:
    """``zookeeper``, ``master`` or ``broker``: what the process called ``name`` (``broker-2``...) runs."""
    return name.split("-", 1)[0]


OUTAGES = ("kill", "terminate", "pause")
"""How :meth:`LocalCluster.outage` takes a process down: crash (SIGKILL), graceful stop (SIGTERM), stall (SIGSTOP)."""


class LocalCluster:
    """ZooKeeper + one TubeMQ master (or a group of ``masters``) + ``brokers`` brokers as child JVMs on loopback.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. The work dir (configs, logs, data)
    is a fresh temp dir removed on stop unless ``keep`` (or ``TUBESPARK_KEEP_CLUSTER=1``).

    ``topics``: names, ``"name:partitions:stores"`` strings or ``(name, partitions, stores)`` tuples
    deployed on every broker before the brokers start. :meth:`start` then returns once they are
    publishable and subscribable (~35-40 s warm), whereas each later :meth:`create_topics` round costs
    another ~32-38 s. Without ``topics`` it returns as soon as the brokers are registered and online (~8 s).

    ``brokers`` > 1 runs that many brokers, each on its own loopback address (``127.0.0.1``,
    ``127.0.0.2`` ...: the master keys broker records by IP, see :func:`~tubespark_testbed.config.broker_host`)
    with its own id (counting up from ``ClusterSettings.broker_id``), ports and data dir; they are named
    ``broker``, ``broker-2``, ``broker-3`` ... Every topic is deployed on all of them unless
    :meth:`create_topics` is told otherwise. :meth:`kill`, :meth:`terminate`, :meth:`pause`/:meth:`resume`,
    :meth:`start_again`, :meth:`restart` and :meth:`outage` take one process by name (a broker also by its
    id); :meth:`add_broker` grows the cluster. The single-broker accessors (``broker_address``,
    ``broker_id``, ``broker_web_url``, :meth:`broker_admin`) mean the first broker.

    ``masters`` > 1 starts a master group: the masters share the ZooKeeper meta-data store and elect
    the active one through an ephemeral ZooKeeper node; the others are standbys, which refuse clients
    (``StandbyException``) and redirect admin calls (on one host, to themselves: see ``_STANDBY_TEXTS``). The
    first, named ``master``, is started alone and wins; the others (``master-2``, ``master-3``) join as
    standbys. :attr:`master_address` lists them all, which is what clients and the brokers fail over
    across; :meth:`master_admin` follows the active one. Killing the active master hands the role to a
    standby once its ZooKeeper session expires (``ClusterSettings.zk_session_timeout_ms``).
    """

    def __init__(
        self,
        *,
        settings: ClusterSettings | None = None,
        work_dir: str | os.PathLike[str] | None = None,
        keep: bool | None = None,
        java: str | None = None,
        topics: Iterable[str | tuple[str, int, int]] = (),
        masters: int = 1,
        brokers: int = 1,
        broker_jvm: str = "testbed",
    ) -> None:
        if not 1 <= masters <= 5:
            raise ClusterError(f"masters must be 1-5, got {masters}")
        if not 1 <= brokers <= MAX_BROKERS:
            raise ClusterError(f"brokers must be 1-{MAX_BROKERS}, got {brokers}")
        if broker_jvm not in ("testbed", "default"):
            raise ClusterError(f"broker_jvm must be 'testbed' or 'default', got {broker_jvm!r}")
        self.broker_jvm = broker_jvm
        self.settings = settings or ClusterSettings()
        if self.settings.tls and brokers > 1:
            raise ClusterError("the testbed runs TLS with one broker only")
        self.masters = masters
        self.initial_brokers = brokers
        self.initial_topics = [parse_topic_spec(t) for t in topics]
        self._requested_work_dir = Path(work_dir) if work_dir is not None else None
        self.keep = keep if keep is not None else os.environ.get(KEEP_ENV, "") not in ("", "0")
        self.java = java
        self.ports: ClusterPorts | None = None
        self.files: ClusterFiles | None = None
        self.work_dir: Path | None = None
        self._owns_work_dir = False
        self._procs: list[JavaProcess] = []
        self._down: set[str] = set()  # processes taken down on purpose: not watched while waiting
        self._coming_back: dict[str, tuple[float, bool]] = {}  # start_again(wait=False): (limit, new_registration)
        self._master_admins: dict[str, MasterAdmin] = {}
        self._active_master: str | None = None
        self._launch: tuple[str, str] | None = None  # (java, classpath) for processes started later
        self._started = False

    # --- addresses ---------------------------------------------------------------------------------

    def _need_ports(self) -> ClusterPorts:
        if self.ports is None:
            raise ClusterError("cluster not started")
        return self.ports

    @property
    def master_names(self) -> list[str]:
        """Process names of the masters: ``master``, then ``master-2``, ``master-3`` ..."""
        return ["master" if i == 0 else f"master-{i + 1}" for i in range(self.masters)]

    def _master_ports(self, name: str) -> tuple[int, int, int]:
        """``(rpc, web, prometheus)`` ports of the master called ``name``."""
        try:
            return self._need_ports().masters[self.master_names.index(name)]
        except ValueError:
            raise ClusterError(f"no master {name!r} in this cluster (have: {self.master_names})") from None

    @property
    def master_address(self) -> str:
        """``host:port`` of the master RPC port, comma separated over the group: what clients connect to."""
        return ",".join(f"{HOST}:{rpc}" for rpc, _web, _prom in self._need_ports().masters)

    @property
    def master_addresses(self) -> list[str]:
        """``host:port`` of every master's RPC port, the first master first."""
        return self.master_address.split(",")

    @property
    def master_web_url(self) -> str:
        """Web API base URL of the master the last admin call reached (the active one), else the first."""
        return self._master_web_url(self._active_master or "master")

    @property
    def master_web_urls(self) -> list[str]:
        """Web API base URL of every master, the first master first (what ``masterWebUrl`` takes)."""
        return [self._master_web_url(name) for name in self.master_names]

    def _master_web_url(self, name: str) -> str:
        return f"http://{HOST}:{self._master_ports(name)[1]}"

    @property
    def brokers(self) -> list[BrokerNode]:
        """Every broker of the cluster, the first one first (including those taken down)."""
        base = self.settings.broker_id
        return [BrokerNode(broker_name(i), base + i, broker_host(i), rpc, web, prom)
                for i, (rpc, web, prom) in enumerate(self._need_ports().brokers)]

    @property
    def broker_names(self) -> list[str]:
        """Process names of the brokers: ``broker``, then ``broker-2``, ``broker-3`` ..."""
        return [broker_name(i) for i in range(len(self.ports.brokers) if self.ports else self.initial_brokers)]

    def broker(self, which: str | int) -> BrokerNode:
        """The broker named ``which`` (``broker``, ``broker-2`` ...) or with broker id ``which``."""
        for node in self.brokers:
            if which in (node.name, node.broker_id):
                return node
        raise ClusterError(f"no broker {which!r} in this cluster (have: "
                           f"{', '.join(f'{b.name} (id {b.broker_id})' for b in self.brokers)})")

    def _name(self, which: str | int) -> str:
        """A process name; a broker id stands for its broker."""
        return self.broker(which).name if isinstance(which, int) else which

    @property
    def broker_address(self) -> str:
        """``host:port`` of the first broker."""
        return self.brokers[0].address

    @property
    def broker_addresses(self) -> list[str]:
        """``host:port`` of every broker, the first one first."""
        return [b.address for b in self.brokers]

    @property
    def master_tls_address(self) -> str:
        """``host:port`` of the master's TLS port (a cluster started with ``ClusterSettings.with_tls``)."""
        return f"{HOST}:{self._need_tls_ports().master_tls}"

    @property
    def broker_tls_address(self) -> str:
        """``host:port`` of the broker's TLS port, which the master hands to clients that call it over TLS."""
        return f"{HOST}:{self._need_tls_ports().broker_tls}"

    def _need_tls_ports(self) -> ClusterPorts:
        if not self.settings.tls:
            raise ClusterError("this cluster does not serve TLS (ClusterSettings.with_tls)")
        return self._need_ports()

    def tls_keystore_path(self, name: str) -> Path:
        """The key store file the ``master`` or the ``broker`` reads for each new TLS connection.

        The 2.4.0 servers load it afresh for every connection (``docs/tubemq/tls.md``), so replacing
        this file (atomically, with the same password) changes the certificate the next client sees.
        """
        if self.files is None:
            raise ClusterError("cluster not started")
        path = {"master": self.files.master_keystore, "broker": self.files.broker_keystore}.get(name)
        if path is None:
            raise ClusterError(f"no TLS key store for {name!r} (TLS off, or not 'master'/'broker')")
        return path

    @property
    def broker_web_url(self) -> str:
        """Web API base URL of the first broker."""
        return self.brokers[0].web_url

    @property
    def broker_id(self) -> int:
        """Broker id of the first broker."""
        return self.settings.broker_id

    @property
    def broker_ids(self) -> list[int]:
        """Broker ids of every broker, the first one first."""
        return [b.broker_id for b in self.brokers]

    @property
    def zk_address(self) -> str:
        return f"{HOST}:{self._need_ports().zk}"

    @property
    def pids(self) -> list[int]:
        """Pids of the JVMs still running (ZooKeeper, masters, brokers order)."""
        return [p.pid for p in self._procs if p.alive() and p.pid is not None]

    # --- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        """Bring the cluster up and return once every broker is registered, online and idle."""
        if self._started:
            raise ClusterError("cluster already started")
        self._started = True
        with _live_lock:
            _live.add(self)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        artifacts.ensure_artifacts()
        java = self.java or find_java()
        if self._requested_work_dir is not None:
            self.work_dir = self._requested_work_dir.resolve()
            self.work_dir.mkdir(parents=True, exist_ok=True)
        else:
            self.work_dir = Path(tempfile.mkdtemp(prefix="tubespark-cluster-"))
            self._owns_work_dir = True
        self.ports = ClusterPorts.pick(self.masters, tls=self.settings.tls, brokers=self.initial_brokers)
        self.files = render_cluster_files(self.work_dir, self.ports, self.settings)
        self._master_admins = {name: MasterAdmin(self._master_web_url(name), self.settings.auth_token)
                               for name in self.master_names}
        self._launch = (java, artifacts.classpath([self.files.zoo_cfg.parent]))

        t0 = time.monotonic()
        zk = self._spawn("zookeeper", ZK_MAIN, [str(self.files.zoo_cfg)])
        wait_until(
            "ZooKeeper to serve requests",
            lambda: _zk_ok(self.ports.zk),  # type: ignore[union-attr]
            timeout_s=ZK_START_TIMEOUT_S,
            watch=[zk],
            on_timeout=zk.diagnostics,
        )

        log.info("ZooKeeper up on %s after %.1fs", self.zk_address, time.monotonic() - t0)
        master = self._spawn("master", MASTER_MAIN, ["-f", str(self.files.master_ini)])
        self._active_master = "master"
        first, *others = self.brokers
        # A modify call is the real readiness test: the web port answers queries before the
        # master has won its ZooKeeper election and may still refuse writes.
        wait_until(
            "the master web API to accept the broker record",
            _swallowing(lambda: self._add_broker_record(first)),
            timeout_s=MASTER_START_TIMEOUT_S,
            interval_s=0.5,
            watch=[zk, master],
            on_timeout=master.diagnostics,
        )
        for node in others:
            self._add_broker_record(node)
        for node in self.brokers:
            self.master_admin("admin_online_broker_configure", brokerId=node.broker_id)
        shapes: dict[tuple[int, int], list[str]] = {}
        for name, partitions, stores in self.initial_topics:
            shapes.setdefault((partitions, stores), []).append(name)
        for (partitions, stores), names in shapes.items():
            self._add_topics(names, partitions, stores)
        log.info("master up on %s after %.1fs", self.master_address, time.monotonic() - t0)
        # The standbys start once the first master holds the election node, so the first one is active.
        standbys = [
            self._spawn(name, MASTER_MAIN, ["-f", str(ini)])
            for name, ini in zip(self.master_names[1:], self.files.master_inis[1:], strict=True)
        ]
        for name, proc in zip(self.master_names[1:], standbys, strict=True):
            wait_until(
                f"{name} to answer as a standby",
                lambda name=name: self._master_role(name) == "standby",
                timeout_s=MASTER_START_TIMEOUT_S,
                interval_s=0.5,
                watch=[zk, master, proc],
                on_timeout=proc.diagnostics,
            )

        brokers = [self._spawn_broker(index) for index in range(len(self.brokers))]
        # Without initial topics, registered + online is all a client can observe; waiting out the
        # registration's 30 s wait_sub would only delay start-up (a topic created meanwhile queues
        # behind it either way).
        initial_names = [t[0] for t in self.initial_topics]
        for node, broker in zip(self.brokers, brokers, strict=True):
            self._wait_registered(node.name, broker, initial_names, BROKER_START_TIMEOUT_S,
                                  [zk, master, *standbys, *brokers])
            log.info("%s up on %s after %.1fs", node.name, node.address, time.monotonic() - t0)

    def _wait_registered(self, name: str, proc: JavaProcess, topics: list[str], timeout_s: float,
                         watch: list[JavaProcess]) -> None:
        """Wait until a starting broker is registered and running, and serves ``topics`` if any."""

        def up() -> bool:
            if topics:
                return self._broker_serving(name) and self.topics_ready(topics, [name])
            return self.broker_run_status(name).get("runStatus") == "running"

        wait_until(f"{name} to register" + (" and publish its topics" if topics else ""), _swallowing(up),
                   timeout_s=timeout_s, interval_s=0.25, watch=watch,
                   on_timeout=lambda: f"{self._run_status_text(name)}\n{proc.diagnostics()}")

    def jvm_flags(self, name: str) -> list[str]:
        """The JVM flags process ``name`` runs with, per-run paths aside.

        Start-up-speed tuning (serial GC, C1 only, small heaps) suits tests; with ``broker_jvm="default"``
        the brokers get only :data:`REQUIRED_JVM_FLAGS` and otherwise Java's defaults (G1, C2, heap sized
        from RAM), which is what throughput figures users compare with their own clusters need.
        """
        kind = process_kind(name)
        if kind == "broker" and self.broker_jvm == "default":
            return list(REQUIRED_JVM_FLAGS)
        own = {"zookeeper": _ZK_JVM_FLAGS, "broker": _BROKER_JVM_FLAGS}.get(kind, _MASTER_JVM_FLAGS)
        return [*_TUNING_JVM_FLAGS, *REQUIRED_JVM_FLAGS, *own]

    def _spawn_broker(self, index: int) -> JavaProcess:
        assert self.work_dir is not None
        return self._spawn(broker_name(index), BROKER_MAIN, ["-f", str(broker_ini_path(self.work_dir, index))])

    def _spawn(self, name: str, main: str, args: list[str]) -> JavaProcess:
        assert self.files is not None and self.work_dir is not None and self._launch is not None
        java, classpath = self._launch
        argv = [
            java,
            *self.jvm_flags(name),
            f"-Dtubemq.home={self.work_dir}",
            f"-Dtubemq.log.path={self.files.log_dir}",
            f"-Dtubemq.log.prefix={name}",
            f"-Dlog4j.configurationFile={self.files.log4j2_xml}",
            "-cp",
            classpath,
            main,
            *args,
        ]
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("CLASSPATH", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS")
        }
        # 2.4.0 prints its TLS config, store passwords included, in its start-up log line: keep them
        # out of the log tails our errors quote
        hidden = tuple(p for p in (self.settings.tls_keystore_password, self.settings.tls_truststore_password) if p)
        proc = JavaProcess(name, argv, log_dir=self.files.log_dir, cwd=self.work_dir, env=env, secrets=hidden)
        self._procs.append(proc)
        proc.start()
        return proc

    def _add_broker_record(self, node: BrokerNode) -> bool:
        """Create ``node``'s configuration record at the master (it must exist, online, before the JVM starts)."""
        ports = self._need_ports()
        self.master_admin(
            "admin_add_broker_configure",
            brokerId=node.broker_id,
            brokerIp=node.host,
            brokerPort=node.port,
            brokerTLSPort=ports.broker_tls,
            brokerWebPort=node.web_port,
            _timeout=2.0,
            **({"deletePolicy": self.settings.default_delete_policy}
               if self.settings.default_delete_policy else {}),
            **self.settings.topic_flush_params(),
        )
        return True

    def broker_run_status(self, broker: str | int | None = None) -> dict[str, Any]:
        """A broker's entry of ``admin_query_broker_run_status`` (empty dict if absent); the first by default."""
        node = self.broker(broker if broker is not None else self.broker_id)
        data = self.master_admin("admin_query_broker_run_status", brokerId=node.broker_id).get("data") or []
        return data[0] if data else {}

    def _run_status_text(self, broker: str | int | None = None) -> str:
        try:
            return f"broker run status: {self.broker_run_status(broker)}"
        except ClusterError as exc:
            return f"broker run status unavailable: {exc}"

    def _known_not_serving(self, broker: str) -> bool:
        """The master answers, and shows ``broker`` not serving (``False`` when it does not answer)."""
        try:
            return not self._broker_serving(broker)
        except ClusterError:
            return False

    def _broker_serving(self, broker: str | int | None = None) -> bool:
        """Registered, online, and past ``wait_sub``: its topics are in both the publish and subscribe view.

        ``stepOp`` 5 is ``wait_pub``, entered right after the publish view was filled; waiting for
        ``idle`` as well would add ~6 s for nothing a client can observe.
        """
        st = self.broker_run_status(broker)
        if st.get("runStatus") != "running":
            return False
        if st.get("subStatus") == "idle":
            return str(st.get("isConfLoaded")) == "true"
        return st.get("stepOp") == 5

    def stop(self) -> None:
        """Stop every JVM (brokers, masters, ZooKeeper), then remove the work dir unless kept. Idempotent."""
        errors: list[str] = []
        for proc in reversed(self._procs):
            try:
                proc.stop(grace_s=_STOP_GRACE_S.get(process_kind(proc.name), 5.0))
            except ClusterError as exc:
                errors.append(str(exc))
        self._procs.clear()
        with _live_lock:
            _live.discard(self)
        if self.work_dir is not None and self._owns_work_dir and not self.keep:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        if errors:
            raise ClusterError("; ".join(errors))

    # --- faults ------------------------------------------------------------------------------------

    def process(self, name: str | int) -> JavaProcess:
        """The JVM named ``zookeeper``, ``master`` (``master-2`` ... in a group) or ``broker`` (``broker-2`` ...,
        or a broker id)."""
        name = self._name(name)
        for proc in self._procs:
            if proc.name == name:
                return proc
        raise ClusterError(f"no process {name!r} in this cluster (have: {[p.name for p in self._procs]})")

    def _watched(self) -> list[JavaProcess]:
        """The JVMs that should be running: a wait fails fast when one of them dies."""
        return [p for p in self._procs if p.name not in self._down]

    def kill(self, name: str | int) -> None:
        """``kill -9`` one JVM of the running cluster; its data dir and ports stay for :meth:`start_again`.

        The broker acknowledges a message before it reaches disk, so killing it loses what it had not
        flushed yet (see ``ClusterSettings.unflush_*``): exactly what a crash does in production.
        """
        proc = self.process(name)
        self._down.add(proc.name)
        proc.kill()

    def terminate(self, name: str | int, *, grace_s: float = TERMINATE_GRACE_S) -> float:
        """Stop one JVM gracefully (SIGTERM, as a rolling restart does) and leave it down; returns the seconds
        it took to exit.

        A broker stopped this way unregisters from the master, which stops listing its partitions at
        once (a crash takes the broker heartbeat timeout). SIGKILL follows only after ``grace_s``.
        """
        proc = self.process(name)
        self._down.add(proc.name)
        started = time.monotonic()
        proc.stop(grace_s=grace_s)
        took = time.monotonic() - started
        log.info("%s stopped %.1fs after SIGTERM", proc.name, took)
        return took

    def pause(self, name: str | int) -> None:
        """Stall one JVM (SIGSTOP): its sockets stay open and accept connections, but nothing answers.

        Past ``ClusterSettings.broker_heartbeat_timeout_ms`` the master takes a stalled broker for gone.
        :meth:`resume` lets it go on.
        """
        proc = self.process(name)
        self._down.add(proc.name)
        proc.pause()

    def resume(self, name: str | int, *, timeout_s: float | None = None) -> None:
        """SIGCONT a :meth:`pause`-d JVM and wait until it serves again (a broker may have to register again)."""
        proc = self.process(name)
        proc.resume()
        self._down.discard(proc.name)
        self._wait_serving(proc, timeout_s)

    def start_again(self, name: str | int, *, timeout_s: float | None = None, new_registration: bool = True,
                    wait: bool = True) -> float:
        """Start a killed or terminated JVM on the same ports and data, and wait until it serves.

        ``wait=False`` returns once it accepts connections and leaves the wait until it serves (for a broker
        the master's 30 s ``wait_sub``) to :meth:`wait_back`: a test that only has to leave a shared cluster
        whole needs not wait out the broker's return itself, the next user of the cluster does (the
        integration tests' ``pytest_runtest_setup``), and none after the last test.

        ``new_registration`` (brokers): wait until the master has taken the new process's registration,
        not the old one's. Right after a kill the master still shows the old process as running and
        serving (until its broker heartbeat timeout), so without this the wait could end before the new
        process registered; with it, it ends once the new registration went through the master's steps
        (about 33 s: the master's 30 s ``wait_sub``). A master that already shows the broker not serving
        before the new process starts (its heartbeat timeout ran out while it was down) has no view of the old
        process left, so that is seen once here instead: a later wait whose polls of a master too busy to
        answer missed the ~30 s the new registration is not serving would otherwise never see it, and wait out
        its limit with the broker serving (a guess at a CI failure of ``wait_back``, which did not recur here).

        Returns the seconds until it accepted TCP connections on its RPC port; see :meth:`restart`.
        """
        proc = self.process(name)
        if proc.alive():
            raise ClusterError(f"{proc.name} is running; kill or terminate it first (or call restart)")
        if new_registration and process_kind(proc.name) == "broker":
            new_registration = not self._known_not_serving(proc.name)
        port = self._rpc_port(proc.name)
        limit = timeout_s or self._start_timeout(proc.name)
        started = time.monotonic()
        proc.start()
        self._down.discard(proc.name)
        wait_until(f"{proc.name} to accept connections again", lambda: _port_open(port, self._host(proc.name)),
                   timeout_s=limit, interval_s=0.1, watch=[proc], on_timeout=proc.diagnostics)
        accepting = time.monotonic() - started
        serve_limit = timeout_s or self._serve_timeout(proc.name)
        if wait:
            self._wait_serving(proc, serve_limit, new_registration=new_registration)
        else:
            self._coming_back[proc.name] = (serve_limit, new_registration)
        return accepting

    def wait_back(self) -> None:
        """Wait until every JVM :meth:`start_again` returned early for (``wait=False``) serves; each is waited
        for once (a failed wait raises, and the next call does not wait for it again)."""
        while self._coming_back:
            name = next(iter(self._coming_back))
            limit, new_registration = self._coming_back.pop(name)
            self._wait_serving(self.process(name), limit, new_registration=new_registration)

    def restart(self, name: str | int, *, kill: bool = True, timeout_s: float | None = None) -> float:
        """Kill (or gracefully stop, ``kill=False``) one JVM and start it again on the same ports and data.

        In a master group, a restarted master comes back as a standby if another one took over.

        Returns the seconds from the new start until the process accepts TCP connections on its RPC
        port (the moment a client can reach it again), after waiting until it fully serves: for a
        broker, registered again and its topics publishable and subscribable; for the master, its web
        API answering; for ZooKeeper, ``srvr``.
        """
        if kill:
            self.kill(name)
        else:
            self.terminate(name, grace_s=_STOP_GRACE_S.get(process_kind(self.process(name).name), 5.0))
        # as before start_again existed: right after a kill the master's view of the old process can count
        # as serving (see start_again's new_registration), so this may return before the broker re-registered
        return self.start_again(name, timeout_s=timeout_s, new_registration=False)

    @contextlib.contextmanager
    def outage(self, name: str | int, how: str = "kill") -> Iterator[None]:
        """Keep one process down for the ``with`` block, then bring it back and wait until it serves.

        ``how``: ``kill`` (a crash: SIGKILL, then a start on the same data), ``terminate`` (a graceful stop,
        as in a rolling restart) or ``pause`` (a stall: SIGSTOP, then SIGCONT).
        """
        if how not in OUTAGES:
            raise ClusterError(f"outage how={how!r}: expected one of {', '.join(OUTAGES)}")
        if how == "kill":
            self.kill(name)
        elif how == "terminate":
            self.terminate(name)
        else:
            self.pause(name)
        try:
            yield
        finally:
            if how == "pause":
                self.resume(name)
            else:
                self.start_again(name)

    def _rpc_port(self, name: str) -> int:
        ports = self._need_ports()
        kind = process_kind(name)
        if kind == "zookeeper":
            return ports.zk
        if kind == "broker":
            return self.broker(name).port
        return self._master_ports(name)[0]

    def _host(self, name: str) -> str:
        return self.broker(name).host if process_kind(name) == "broker" else HOST

    def _start_timeout(self, name: str) -> float:
        return {"zookeeper": ZK_START_TIMEOUT_S, "master": MASTER_START_TIMEOUT_S,
                "broker": BROKER_START_TIMEOUT_S}[process_kind(name)]

    def _serve_timeout(self, name: str) -> float:
        """How long a restarted JVM may take to serve again: a broker's topics wait out the master's 30 s
        ``wait_sub`` and, on a loaded machine, another config cycle (a CI run once saw a restarted broker's
        master answer its heartbeat after 38 s and the 60 s start limit run out before its topics were ready)."""
        return TOPIC_READY_TIMEOUT_S if process_kind(name) == "broker" else self._start_timeout(name)

    def _wait_serving(self, proc: JavaProcess, timeout_s: float | None, *, new_registration: bool = False) -> None:
        """Block until ``proc`` serves again: ZooKeeper answers ``srvr``; a master answers admin calls (as the
        active one or a standby); a broker is registered and its topics publishable and subscribable.

        ``new_registration`` (brokers): first see the master show it not serving (the old registration gone,
        or the new one going through its steps), so a stale view of the old process does not count.
        """
        name = proc.name
        away = [not new_registration]

        def broker_ready() -> bool:
            serving = self._broker_serving(name)
            away[0] = away[0] or not serving
            return away[0] and serving and self.topics_ready(self.served_topic_names(name), [name])

        ready = {
            "zookeeper": lambda: _zk_ok(self._need_ports().zk),
            "master": lambda: self._master_role(name) != "down" and self.broker_run_status() is not None,
            "broker": broker_ready,
        }[process_kind(name)]
        def report() -> str:
            if process_kind(name) != "broker":
                return proc.diagnostics()
            return f"{self._run_status_text(name)}\n{self._unready_text(name)}\n{proc.diagnostics()}"

        wait_until(f"{name} to serve again", _swallowing(ready), timeout_s=timeout_s or self._serve_timeout(name),
                   interval_s=0.25, watch=[proc], on_timeout=report)

    def _unready_text(self, broker: str) -> str:
        """Which of the topics ``broker`` should serve are not publishable and subscribable there yet, and what
        the master says of each: a wait that ran out names what it waited for."""
        try:
            names = self.served_topic_names(broker)
            waiting = self._not_ready(names, [broker]) if names else {}
        except ClusterError as exc:
            return f"topics of {broker}: unavailable ({exc})"
        lines = [f"  {name}: {deploys or 'not deployed there'}" for name, deploys in sorted(waiting.items())]
        return f"topics {broker} serves: {len(names)}, not ready: {len(lines)}\n" + "\n".join(lines)

    def add_broker(self, topics: Iterable[str] = (), *, timeout_s: float = TOPIC_READY_TIMEOUT_S) -> str:
        """Start one more broker (next id, next loopback address, its own ports and data) and return its name.

        ``topics``: existing topics to deploy on it too, each with the shape it has on the other brokers;
        the call then waits until they are publishable there (the master's 30 s ``wait_sub``).
        """
        if self.work_dir is None or self._launch is None:
            raise ClusterError("cluster not started")
        ports = self._need_ports().with_another_broker()
        index = len(ports.brokers) - 1
        render_broker_ini(self.work_dir, ports, self.settings, index)
        self.ports = ports
        node = self.brokers[index]
        self._add_broker_record(node)
        self.master_admin("admin_online_broker_configure", brokerId=node.broker_id)
        names = sorted(set(topics))
        shapes: dict[tuple[int, int], list[str]] = {}
        for topic, shape in self._topic_shapes(names).items():
            shapes.setdefault(shape, []).append(topic)
        for (partitions, stores), same in shapes.items():
            self._add_topics(same, partitions, stores, brokers=[node.name])
        proc = self._spawn_broker(index)
        self._wait_registered(node.name, proc, names, timeout_s, self._watched())
        log.info("%s added on %s", node.name, node.address)
        return node.name

    def _topic_shapes(self, names: list[str]) -> dict[str, tuple[int, int]]:
        """``{topic: (numPartitions, numTopicStores)}`` as deployed on the first broker that has it."""
        if not names:
            return {}
        data = self.master_admin("admin_query_topic_deploy_info", topicName=",".join(names)).get("data") or []
        shapes = {}
        for topic in data:
            deploys = topic.get("deployInfo") or []
            if deploys:
                shapes[str(topic.get("topicName"))] = (int(deploys[0]["numPartitions"]),
                                                       int(deploys[0]["numTopicStores"]))
        unknown = sorted(set(names) - set(shapes))
        if unknown:
            raise ClusterError(f"topics {unknown} are not deployed on any broker of this cluster")
        return shapes

    def topic_names(self, broker: str | int | None = None) -> list[str]:
        """Every topic the master has deployed on ``broker`` (default: on any broker of this cluster)."""
        ids = [self.broker(broker).broker_id] if broker is not None else self.broker_ids
        answer = self.master_admin("admin_query_topic_info", brokerId=",".join(map(str, ids)))
        return sorted({item["topicName"] for item in answer.get("data") or [] if "topicName" in item})

    def served_topic_names(self, broker: str | int) -> list[str]:
        """The topics ``broker`` is configured to serve: of :meth:`topic_names`, those whose deployment there is
        in use (``topicStatusId`` 0) and configured to accept publishing and subscribing. A deployment a test
        closed or soft-deleted (docs/tubemq/brokers.md) stays listed, and never serves again: waiting for it
        after a restart of the broker waited out the whole limit (CI: the session broker after test_bad_input)."""
        names = self.topic_names(broker)
        if not names:
            return []
        broker_id = self.broker(broker).broker_id
        data = self.master_admin("admin_query_topic_deploy_info", topicName=",".join(names)).get("data") or []
        return sorted(topic.get("topicName") for topic in data
                      if any(d.get("brokerId") == broker_id and str(d.get("topicStatusId", 0)) == "0"
                             and str(d.get("acceptPublish", True)).lower() == "true"
                             and str(d.get("acceptSubscribe", True)).lower() == "true"
                             for d in topic.get("deployInfo") or []))

    # --- admin -------------------------------------------------------------------------------------

    def master_admin(self, method: str, **params: Any) -> dict[str, Any]:
        """Call the master web API; adds token/operator to modify calls; raises ClusterError on failure.

        In a master group the call goes to the master that answered last, and moves on to the others
        when that one is down or a standby.
        """
        if not self._master_admins:
            raise ClusterError("cluster not started")
        first = self._active_master or self.master_names[0]
        order = [first, *(n for n in self.master_names if n != first)]
        errors: list[str] = []
        for name in order:
            try:
                answer = self._master_admins[name](method, **params)
            except AdminApiError as exc:
                text = str(exc)
                if len(order) > 1 and (_is_standby_answer(text) or "cannot reach" in text):
                    errors.append(f"{name}: {text}")
                    continue
                raise ClusterError(text) from exc
            self._active_master = name
            return answer
        raise ClusterError(f"no active master answered {method}: " + "; ".join(errors))

    def _master_role(self, name: str) -> str:
        """``active``, ``standby`` or ``down``: what the master called ``name`` answers to an admin query."""
        try:
            self._master_admins[name]("admin_query_broker_run_status", brokerId=self.broker_id, _timeout=2.0)
        except AdminApiError as exc:
            return "standby" if _is_standby_answer(str(exc)) else "down"
        return "active"

    def active_master(self) -> str | None:
        """Name of the master that serves clients now, or None (none, or the group is mid-election)."""
        for name in self.master_names:
            if self._master_role(name) == "active":
                self._active_master = name
                return name
        return None

    def broker_admin(self, method: str, broker: str | int | None = None, **params: Any) -> dict[str, Any]:
        """Call a broker's web API (offsets, store info, snapshots), the first broker's by default; raises
        ClusterError on failure."""
        node = self.broker(broker if broker is not None else self.broker_id)
        try:
            return BrokerAdmin(node.web_url)(method, **params)
        except AdminApiError as exc:
            raise ClusterError(str(exc)) from exc

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        stores: int = 4,
        *,
        timeout_s: float = TOPIC_READY_TIMEOUT_S,
        brokers: Iterable[str | int] | None = None,
        **params: Any,
    ) -> None:
        """Deploy ``name`` on the brokers (all by default) and block until producers and consumers can use it.

        The topic gets ``stores * partitions`` partitions per broker (``stores`` > 1 with ``partitions=1``
        is the dense-offset layout). Extra ``params`` go to ``admin_add_topic_deploy_info`` (e.g.
        ``deletePolicy="delete,1h"``). Takes about 30 s: see :meth:`create_topics`.
        """
        self.create_topics([name], partitions, stores, timeout_s=timeout_s, brokers=brokers, **params)

    def create_topics(
        self,
        names: list[str],
        partitions: int = 1,
        stores: int = 4,
        *,
        timeout_s: float = TOPIC_READY_TIMEOUT_S,
        brokers: Iterable[str | int] | None = None,
        **params: Any,
    ) -> None:
        """Deploy several same-shaped topics in one call and wait once for all of them.

        ``brokers``: names or ids of the brokers to deploy on (default: every broker of the cluster).

        Why batch: the master publishes a *new* topic to producers only after holding the broker in its
        ``wait_sub`` step for a hard-coded 30 s (``StepStatus.STEP_STATUS_WAIT_SUBSCRIBE``), so every
        round of creation costs ~31-33 s however many topics it carries. Topics passed to the
        constructor (``topics=``) are deployed before the brokers start and ride along with the
        brokers' own start-up wait instead.
        """
        if not names:
            return
        self._add_topics(names, partitions, stores, brokers=brokers, **params)
        self.wait_topics_ready(names, timeout_s=timeout_s)

    def _add_topics(self, names: list[str], partitions: int, stores: int, *,
                    brokers: Iterable[str | int] | None = None, **params: Any) -> None:
        for name in names:
            check_topic_name(name)
        ids = self.broker_ids if brokers is None else [self.broker(b).broker_id for b in brokers]
        answer = self.master_admin(
            "admin_add_topic_deploy_info",
            topicName=",".join(names),
            brokerId=",".join(map(str, ids)),
            numPartitions=partitions,
            numTopicStores=stores,
            **params,
        )
        # result=true covers the request; each topic/broker pair has its own success flag.
        failed = [item for item in answer.get("data") or [] if not item.get("success", True)]
        if failed:
            raise ClusterError(f"admin_add_topic_deploy_info failed for {failed}")

    def topics_ready(self, names: list[str], brokers: Iterable[str | int] | None = None) -> bool:
        """True when every topic is in the master's publish view of ``brokers``, accepting both ways.

        ``brokers``: names or ids (default: every broker not taken down on purpose); each topic must be
        deployed on at least one of them, and accept publishing and subscribing on each it is on.

        The ``runInfo`` block of ``admin_query_topic_deploy_info`` is read from that publish view,
        which the master fills at the end of ``wait_sub``; the subscribe view was filled at its start,
        so this one check covers producers and consumers.
        """
        return not names or not self._not_ready(names, brokers)

    def _not_ready(self, names: list[str], brokers: Iterable[str | int] | None = None) -> dict[str, list[Any]]:
        """Of ``names``, those :meth:`topics_ready` waits for, each with its deployments on ``brokers`` that do
        not accept both ways yet (none listed: not deployed on any of them)."""
        chosen = [b for b in self.brokers if b.name not in self._down] if brokers is None else \
            [self.broker(b) for b in brokers]
        ids = {b.broker_id for b in chosen}
        data = self.master_admin("admin_query_topic_deploy_info", topicName=",".join(names)).get("data") or []
        waiting: dict[str, list[Any]] = {name: [] for name in names}
        for topic in data:
            deploys = [d for d in topic.get("deployInfo") or [] if d.get("brokerId") in ids]
            closed = [d for d in deploys if not _accepting(d.get("runInfo") or {})]
            if deploys and not closed:
                waiting.pop(topic.get("topicName"), None)
            elif topic.get("topicName") in waiting:
                waiting[topic.get("topicName")] = closed
        return waiting

    def wait_topics_ready(self, names: list[str], *, timeout_s: float = TOPIC_READY_TIMEOUT_S) -> None:
        """Block until :meth:`topics_ready` (typically 31-33 s after creation)."""
        wait_until(
            f"topics {names} to become publishable and subscribable",
            lambda: self.topics_ready(names),
            timeout_s=timeout_s,
            interval_s=0.25,
            watch=self._watched(),
            on_timeout=lambda: "\n".join(self._run_status_text(b.name) for b in self.brokers),
        )

    def set_max_message_size_mb(self, size_mb: int) -> None:
        """Cluster-wide default max message size (1-20 MB), which topics without their own limit use."""
        if not 1 <= size_mb <= 20:
            raise ClusterError(f"max message size must be 1-20 MB, got {size_mb}")
        self.master_admin("admin_update_cluster_default_setting", maxMsgSizeInMB=size_mb)


def _accepting(run_info: dict[str, Any]) -> bool:
    """A deployment's ``runInfo`` (the master's publish view) accepts publishing and subscribing."""
    return run_info.get("acceptPublish") is True and run_info.get("acceptSubscribe") is True


def _swallowing(probe: Callable[[], bool]) -> Callable[[], bool]:
    """``probe`` that answers False instead of raising while a restarted server is still coming up."""

    def quiet() -> bool:
        try:
            return probe()
        except ClusterError:
            return False

    return quiet


def parse_topic_spec(spec: str | tuple[str, int, int]) -> tuple[str, int, int]:
    """``"name[:partitions[:stores]]"`` or a tuple -> ``(name, partitions, stores)``; defaults 1 and 4."""
    if isinstance(spec, tuple):
        name, partitions, stores = spec
    else:
        parts = spec.split(":")
        if not 1 <= len(parts) <= 3 or not parts[0]:
            raise ClusterError(f"bad topic spec {spec!r}; expected NAME[:PARTITIONS[:STORES]]")
        try:
            nums = [int(x) for x in parts[1:]]
        except ValueError as exc:
            raise ClusterError(f"bad topic spec {spec!r}; partitions and stores must be integers") from exc
        name, partitions, stores = parts[0], *(nums + [1, 4][len(nums) :])
    if partitions < 1 or stores < 1:
        raise ClusterError(f"bad topic spec {spec!r}; partitions and stores must be >= 1")
    check_topic_name(str(name))
    return str(name), int(partitions), int(stores)


# The master's rule (RegexDef.TMP_STRING, 64 chars max): no hyphens, and at least two characters.
_TOPIC_NAME = re.compile(r"[a-zA-Z]\w{1,63}")


def check_topic_name(name: str) -> None:
    """Fail before any JVM starts on a name the master would reject anyway."""
    if not _TOPIC_NAME.fullmatch(name):
        raise ClusterError(
            f"illegal topic name {name!r}: 2-64 chars, a letter first, then letters, digits, underscores"
        )


def _port_open(port: int, host: str = HOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _zk_ok(port: int) -> bool:
    """True once ZooKeeper serves requests. ``ruok`` is not enough: it answers ``imok`` as soon as the
    port is open, even when loading the database failed and every session gets closed."""
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as s:
            s.sendall(b"srvr")
            s.settimeout(1.0)
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
    except OSError:
        return False
    return b"Mode:" in answer
