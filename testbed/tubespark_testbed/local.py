"""A real single-node TubeMQ cluster (ZooKeeper + master + broker) on 127.0.0.1, for tests and demos.

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
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from tubespark.tubemq.client.admin import BrokerAdmin, MasterAdmin
from tubespark.tubemq.errors import AdminApiError
from tubespark_testbed import artifacts
from tubespark_testbed.config import ClusterFiles, ClusterPorts, ClusterSettings, render_cluster_files
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


class LocalCluster:
    """ZooKeeper + one TubeMQ master (or a group of ``masters``) + one broker as child JVMs on 127.0.0.1.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. The work dir (configs, logs, data)
    is a fresh temp dir removed on stop unless ``keep`` (or ``TUBESPARK_KEEP_CLUSTER=1``).

    ``topics``: names, ``"name:partitions:stores"`` strings or ``(name, partitions, stores)`` tuples
    deployed before the broker starts. :meth:`start` then returns once they are publishable and
    subscribable (~35-40 s warm), whereas each later :meth:`create_topics` round costs another
    ~32-38 s. Without ``topics`` it returns as soon as the broker is registered and online (~8 s).

    ``masters`` > 1 starts a master group: the masters share the ZooKeeper meta-data store and elect
    the active one through an ephemeral ZooKeeper node; the others are standbys, which refuse clients
    (``StandbyException``) and redirect admin calls (on one host, to themselves: see ``_STANDBY_TEXTS``). The
    first, named ``master``, is started alone and wins; the others (``master-2``, ``master-3``) join as
    standbys. :attr:`master_address` lists them all, which is what clients and the broker fail over
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
        broker_jvm: str = "testbed",
    ) -> None:
        if not 1 <= masters <= 5:
            raise ClusterError(f"masters must be 1-5, got {masters}")
        if broker_jvm not in ("testbed", "default"):
            raise ClusterError(f"broker_jvm must be 'testbed' or 'default', got {broker_jvm!r}")
        self.broker_jvm = broker_jvm
        self.settings = settings or ClusterSettings()
        self.masters = masters
        self.initial_topics = [parse_topic_spec(t) for t in topics]
        self._requested_work_dir = Path(work_dir) if work_dir is not None else None
        self.keep = keep if keep is not None else os.environ.get(KEEP_ENV, "") not in ("", "0")
        self.java = java
        self.ports: ClusterPorts | None = None
        self.files: ClusterFiles | None = None
        self.work_dir: Path | None = None
        self._owns_work_dir = False
        self._procs: list[JavaProcess] = []
        self._master_admins: dict[str, MasterAdmin] = {}
        self._active_master: str | None = None
        self._broker_admin: BrokerAdmin | None = None
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

    def _master_web_url(self, name: str) -> str:
        return f"http://{HOST}:{self._master_ports(name)[1]}"

    @property
    def broker_address(self) -> str:
        return f"{HOST}:{self._need_ports().broker}"

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
        return f"http://{HOST}:{self._need_ports().broker_web}"

    @property
    def broker_id(self) -> int:
        return self.settings.broker_id

    @property
    def zk_address(self) -> str:
        return f"{HOST}:{self._need_ports().zk}"

    @property
    def pids(self) -> list[int]:
        """Pids of the JVMs still running (ZooKeeper, masters, broker order)."""
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
        """Bring the cluster up and return once the broker is registered, online and idle."""
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
        lib = artifacts.ensure_artifacts()
        java = self.java or find_java()
        if self._requested_work_dir is not None:
            self.work_dir = self._requested_work_dir.resolve()
            self.work_dir.mkdir(parents=True, exist_ok=True)
        else:
            self.work_dir = Path(tempfile.mkdtemp(prefix="tubespark-cluster-"))
            self._owns_work_dir = True
        self.ports = ClusterPorts.pick(self.masters, tls=self.settings.tls)
        self.files = render_cluster_files(self.work_dir, self.ports, self.settings)
        self._master_admins = {name: MasterAdmin(self._master_web_url(name), self.settings.auth_token)
                               for name in self.master_names}
        self._broker_admin = BrokerAdmin(self.broker_web_url)
        classpath = artifacts.classpath([self.files.zoo_cfg.parent])
        del lib

        t0 = time.monotonic()
        zk = self._spawn(java, classpath, "zookeeper", ZK_MAIN, [str(self.files.zoo_cfg)])
        wait_until(
            "ZooKeeper to serve requests",
            lambda: _zk_ok(self.ports.zk),  # type: ignore[union-attr]
            timeout_s=ZK_START_TIMEOUT_S,
            watch=[zk],
            on_timeout=zk.diagnostics,
        )

        log.info("ZooKeeper up on %s after %.1fs", self.zk_address, time.monotonic() - t0)
        master = self._spawn(
            java, classpath, "master", MASTER_MAIN, ["-f", str(self.files.master_ini)]
        )
        self._active_master = "master"
        # A modify call is the real readiness test: the web port answers queries before the
        # master has won its ZooKeeper election and may still refuse writes.
        wait_until(
            "the master web API to accept the broker record",
            self._try_add_broker,
            timeout_s=MASTER_START_TIMEOUT_S,
            interval_s=0.5,
            watch=[zk, master],
            on_timeout=master.diagnostics,
        )
        self.master_admin("admin_online_broker_configure", brokerId=self.broker_id)
        shapes: dict[tuple[int, int], list[str]] = {}
        for name, partitions, stores in self.initial_topics:
            shapes.setdefault((partitions, stores), []).append(name)
        for (partitions, stores), names in shapes.items():
            self._add_topics(names, partitions, stores)
        log.info("master up on %s after %.1fs", self.master_address, time.monotonic() - t0)
        # The standbys start once the first master holds the election node, so the first one is active.
        standbys = [
            self._spawn(java, classpath, name, MASTER_MAIN, ["-f", str(ini)])
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

        broker = self._spawn(
            java, classpath, "broker", BROKER_MAIN, ["-f", str(self.files.broker_ini)]
        )
        # Without initial topics, registered + online is all a client can observe; waiting out the
        # registration's 30 s wait_sub would only delay start-up (a topic created meanwhile queues
        # behind it either way).
        initial_names = [t[0] for t in self.initial_topics]
        wait_until(
            "the broker to register" + (" and publish its topics" if initial_names else ""),
            lambda: (
                self._broker_serving() and self.topics_ready(initial_names)
                if initial_names
                else self.broker_run_status().get("runStatus") == "running"
            ),
            timeout_s=BROKER_START_TIMEOUT_S,
            interval_s=0.25,
            watch=[zk, master, *standbys, broker],
            on_timeout=lambda: f"{self._run_status_text()}\n{broker.diagnostics()}",
        )
        log.info("broker up on %s after %.1fs", self.broker_address, time.monotonic() - t0)

    def jvm_flags(self, name: str) -> list[str]:
        """The JVM flags process ``name`` runs with, per-run paths aside.

        Start-up-speed tuning (serial GC, C1 only, small heaps) suits tests; with ``broker_jvm="default"``
        the broker gets only :data:`REQUIRED_JVM_FLAGS` and otherwise Java's defaults (G1, C2, heap sized
        from RAM), which is what throughput figures users compare with their own clusters need.
        """
        if name == "broker" and self.broker_jvm == "default":
            return list(REQUIRED_JVM_FLAGS)
        own = {"zookeeper": _ZK_JVM_FLAGS, "broker": _BROKER_JVM_FLAGS}.get(name, _MASTER_JVM_FLAGS)
        return [*_TUNING_JVM_FLAGS, *REQUIRED_JVM_FLAGS, *own]

    def _spawn(self, java: str, classpath: str, name: str, main: str, args: list[str]) -> JavaProcess:
        assert self.files is not None and self.work_dir is not None
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

    def _try_add_broker(self) -> bool:
        ports = self._need_ports()
        try:
            self.master_admin(
                "admin_add_broker_configure",
                brokerId=self.broker_id,
                brokerIp=HOST,
                brokerPort=ports.broker,
                brokerTLSPort=ports.broker_tls,
                brokerWebPort=ports.broker_web,
                _timeout=2.0,
                **({"deletePolicy": self.settings.default_delete_policy}
                   if self.settings.default_delete_policy else {}),
                **self.settings.topic_flush_params(),
            )
        except ClusterError:
            return False
        return True

    def broker_run_status(self) -> dict[str, Any]:
        """This broker's entry of ``admin_query_broker_run_status`` (empty dict if absent)."""
        data = self.master_admin("admin_query_broker_run_status", brokerId=self.broker_id).get("data") or []
        return data[0] if data else {}

    def _run_status_text(self) -> str:
        try:
            return f"broker run status: {self.broker_run_status()}"
        except ClusterError as exc:
            return f"broker run status unavailable: {exc}"

    def _broker_serving(self) -> bool:
        """Registered, online, and past ``wait_sub``: its topics are in both the publish and subscribe view.

        ``stepOp`` 5 is ``wait_pub``, entered right after the publish view was filled; waiting for
        ``idle`` as well would add ~6 s for nothing a client can observe.
        """
        st = self.broker_run_status()
        if st.get("runStatus") != "running":
            return False
        if st.get("subStatus") == "idle":
            return str(st.get("isConfLoaded")) == "true"
        return st.get("stepOp") == 5

    def stop(self) -> None:
        """Stop every JVM (broker, master, ZooKeeper), then remove the work dir unless kept. Idempotent."""
        errors: list[str] = []
        for proc in reversed(self._procs):
            try:
                proc.stop(grace_s=_STOP_GRACE_S.get(proc.name, 5.0))
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

    def process(self, name: str) -> JavaProcess:
        """The JVM named ``zookeeper``, ``master`` (``master-2`` ... in a group) or ``broker``."""
        for proc in self._procs:
            if proc.name == name:
                return proc
        raise ClusterError(f"no process {name!r} in this cluster (have: {[p.name for p in self._procs]})")

    def kill(self, name: str) -> None:
        """``kill -9`` one JVM of the running cluster; its data dir and ports stay for :meth:`restart`.

        The broker acknowledges a message before it reaches disk, so killing it loses what it had not
        flushed yet (see ``ClusterSettings.unflush_*``): exactly what a crash does in production.
        """
        self.process(name).kill()

    def restart(self, name: str, *, kill: bool = True, timeout_s: float | None = None) -> float:
        """Kill (or gracefully stop, ``kill=False``) one JVM and start it again on the same ports and data.

        In a master group, a restarted master comes back as a standby if another one took over.

        Returns the seconds from the new start until the process accepts TCP connections on its RPC
        port (the moment a client can reach it again), after waiting until it fully serves: for the
        broker, registered again and its topics publishable and subscribable; for the master, its web
        API answering; for ZooKeeper, ``srvr``.
        """
        proc = self.process(name)
        if kill:
            proc.kill()
        else:
            proc.stop(grace_s=_STOP_GRACE_S.get(name, 5.0))
        ports = self._need_ports()
        kind = "master" if name in self.master_names else name
        port = {"zookeeper": ports.zk, "broker": ports.broker}.get(name) or self._master_ports(name)[0]
        limit = timeout_s or {"zookeeper": ZK_START_TIMEOUT_S, "master": MASTER_START_TIMEOUT_S,
                              "broker": BROKER_START_TIMEOUT_S}[kind]
        started = time.monotonic()
        proc.start()
        wait_until(f"{name} to accept connections again", lambda: _port_open(port), timeout_s=limit,
                   interval_s=0.1, watch=[proc], on_timeout=proc.diagnostics)
        accepting = time.monotonic() - started
        ready = {
            "zookeeper": lambda: _zk_ok(ports.zk),
            # active or standby: the group as a whole must serve the admin API again
            "master": lambda: self._master_role(name) != "down" and self.broker_run_status() is not None,
            "broker": lambda: self._broker_serving() and self.topics_ready(self.topic_names()),
        }[kind]
        wait_until(f"{name} to serve again after a restart", _swallowing(ready), timeout_s=limit,
                   interval_s=0.25, watch=[proc], on_timeout=proc.diagnostics)
        return accepting

    def topic_names(self) -> list[str]:
        """Every topic the master has deployed on this cluster's broker."""
        answer = self.master_admin("admin_query_topic_info", brokerId=self.broker_id)
        return sorted({item["topicName"] for item in answer.get("data") or [] if "topicName" in item})

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

    def broker_admin(self, method: str, **params: Any) -> dict[str, Any]:
        """Call the broker web API (offsets, store info, snapshots); raises ClusterError on failure."""
        if self._broker_admin is None:
            raise ClusterError("cluster not started")
        try:
            return self._broker_admin(method, **params)
        except AdminApiError as exc:
            raise ClusterError(str(exc)) from exc

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        stores: int = 4,
        *,
        timeout_s: float = TOPIC_READY_TIMEOUT_S,
        **params: Any,
    ) -> None:
        """Deploy ``name`` on the broker and block until producers and consumers can use it.

        The topic gets ``stores * partitions`` partitions (``stores`` > 1 with ``partitions=1`` is the
        dense-offset layout). Extra ``params`` go to ``admin_add_topic_deploy_info`` (e.g.
        ``deletePolicy="delete,1h"``). Takes about 30 s: see :meth:`create_topics`.
        """
        self.create_topics([name], partitions, stores, timeout_s=timeout_s, **params)

    def create_topics(
        self,
        names: list[str],
        partitions: int = 1,
        stores: int = 4,
        *,
        timeout_s: float = TOPIC_READY_TIMEOUT_S,
        **params: Any,
    ) -> None:
        """Deploy several same-shaped topics in one call and wait once for all of them.

        Why batch: the master publishes a *new* topic to producers only after holding the broker in its
        ``wait_sub`` step for a hard-coded 30 s (``StepStatus.STEP_STATUS_WAIT_SUBSCRIBE``), so every
        round of creation costs ~31-33 s however many topics it carries. Topics passed to the
        constructor (``topics=``) are deployed before the broker starts and ride along with the
        broker's own start-up wait instead.
        """
        if not names:
            return
        self._add_topics(names, partitions, stores, **params)
        self.wait_topics_ready(names, timeout_s=timeout_s)

    def _add_topics(self, names: list[str], partitions: int, stores: int, **params: Any) -> None:
        for name in names:
            check_topic_name(name)
        answer = self.master_admin(
            "admin_add_topic_deploy_info",
            topicName=",".join(names),
            brokerId=self.broker_id,
            numPartitions=partitions,
            numTopicStores=stores,
            **params,
        )
        # result=true covers the request; each topic/broker pair has its own success flag.
        failed = [item for item in answer.get("data") or [] if not item.get("success", True)]
        if failed:
            raise ClusterError(f"admin_add_topic_deploy_info failed for {failed}")

    def topics_ready(self, names: list[str]) -> bool:
        """True when every topic is in the master's publish view of this broker, accepting both ways.

        The ``runInfo`` block of ``admin_query_topic_deploy_info`` is read from that publish view,
        which the master fills at the end of ``wait_sub``; the subscribe view was filled at its start,
        so this one check covers producers and consumers.
        """
        data = self.master_admin("admin_query_topic_deploy_info", topicName=",".join(names)).get("data") or []
        ready = set()
        for topic in data:
            deploys = [d for d in topic.get("deployInfo") or [] if d.get("brokerId") == self.broker_id]
            run = [d.get("runInfo") or {} for d in deploys]
            if run and all(r.get("acceptPublish") is True and r.get("acceptSubscribe") is True for r in run):
                ready.add(topic.get("topicName"))
        return ready.issuperset(names)

    def wait_topics_ready(self, names: list[str], *, timeout_s: float = TOPIC_READY_TIMEOUT_S) -> None:
        """Block until :meth:`topics_ready` (typically 31-33 s after creation)."""
        wait_until(
            f"topics {names} to become publishable and subscribable",
            lambda: self.topics_ready(names),
            timeout_s=timeout_s,
            interval_s=0.25,
            watch=list(self._procs),
            on_timeout=self._run_status_text,
        )

    def set_max_message_size_mb(self, size_mb: int) -> None:
        """Cluster-wide default max message size (1-20 MB), which topics without their own limit use."""
        if not 1 <= size_mb <= 20:
            raise ClusterError(f"max message size must be 1-20 MB, got {size_mb}")
        self.master_admin("admin_update_cluster_default_setting", maxMsgSizeInMB=size_mb)


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


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
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
