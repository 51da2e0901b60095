"""A real local Apache RocketMQ stack (name server + broker groups) from Maven Central, on 127.0.0.1.

What it runs: ``org.apache.rocketmq:rocketmq-namesrv`` and ``rocketmq-broker`` at :data:`ROCKETMQ_VERSION`,
their runtime closure resolved once by Maven (:func:`tubespark_testbed.javatool.resolve_classpath`), one
JVM per process on free ports. Why 5.3.3: the newest release whose broker honours ``listenPort`` from its
config file (see docs/rocketmq/protocol.md, "Test stack"); later versions are adopted once verified here.

Shapes:

* :meth:`RocketMQStack.single`: name server + one master (``broker-a``): the main tests, the demo and the
  bench (the default);
* :meth:`RocketMQStack.two_groups`: name server + two masters (``broker-a``, ``broker-b``), a topic's
  queues on both: what a group that is down does to the queues of the other (issue 23 part 8). The name
  server forgets a group the moment it stops (graceful :meth:`RocketMQStack.stop_broker`) or crashes
  (:meth:`RocketMQStack.kill`: its connection closes), so its queues leave the route at once;
* :meth:`RocketMQStack.acting_master`: name server with ``supportActingMaster``, ``broker-a`` master +
  slave with slave-acting-master and remote escape on, and a second master ``broker-b`` (an acting master
  escapes pop checkpoints to a live master of another group, so pop over a dead master needs one).

Memory: a broker maps its stores and uses direct buffers, so heaps stay small (256-512 MiB) and the
commit log files are 64 MiB instead of 1 GiB; three brokers and a name server fit beside Spark and
TubeMQ on a 2-core, 24 GiB machine. Every JVM runs in its own process group and dies with us
(:mod:`tubespark_testbed.procs`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import socket
import ssl
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tubespark.core.tls import client_context
from tubespark.errors import TubeSparkError
from tubespark.rocketmq.client.client import ClientSettings, RocketMQClient
from tubespark.rocketmq.wire.acl import Credentials
from tubespark.rocketmq.wire.frame import request
from tubespark_testbed.artifacts import cache_root
from tubespark_testbed.errors import ClusterError
from tubespark_testbed.javatool import resolve_classpath, which
from tubespark_testbed.ports import free_port_block, free_ports
from tubespark_testbed.procs import JavaProcess, stop_all, wait_until

log = logging.getLogger(__name__)

ROCKETMQ_VERSION = "5.3.3"
HOST = "127.0.0.1"
CLUSTER = "TubesparkCluster"
KEEP_ENV = "TUBESPARK_KEEP_CLUSTER"
NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"

_COMMON_JVM_FLAGS = (
    "-Djava.net.preferIPv4Stack=true",
    "-Dfile.encoding=UTF-8",
    "-XX:+UseSerialGC",  # small heaps, no GC threads to spare on a 2-core box
    "-XX:TieredStopAtLevel=1",  # start-up matters more than peak JIT output for tests
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-UsePerfData",
    "-Xss512k",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
)
_NAMESRV_JVM_FLAGS = ("-Xms64m", "-Xmx192m", "-XX:MaxDirectMemorySize=64m")
_BROKER_JVM_FLAGS = ("-Xms256m", "-Xmx512m", "-XX:MaxDirectMemorySize=512m", "-XX:-AlwaysPreTouch")
_START_TIMEOUT_S = 120.0
_AUTH_CREATE_USER = 3001


def render_pom() -> str:
    """The throw-away pom whose runtime closure is the name server's and broker's classpath."""
    deps = "".join(
        f"    <dependency><groupId>org.apache.rocketmq</groupId><artifactId>{a}</artifactId>"
        f"<version>{ROCKETMQ_VERSION}</version></dependency>\n" for a in ("rocketmq-namesrv", "rocketmq-broker"))
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
            "  <modelVersion>4.0.0</modelVersion>\n  <groupId>local.tubespark</groupId>\n"
            f"  <artifactId>rocketmq-server</artifactId>\n  <version>{ROCKETMQ_VERSION}</version>\n"
            f"  <packaging>pom</packaging>\n  <dependencies>\n{deps}  </dependencies>\n</project>\n")


def ensure_artifacts() -> list[str]:
    """The server classpath (jars), resolved from Maven Central into the cache on first use."""
    pom = cache_root() / f"rocketmq-server-{ROCKETMQ_VERSION}.pom.xml"
    pom.parent.mkdir(parents=True, exist_ok=True)
    text = render_pom()
    if not pom.exists() or pom.read_text() != text:
        pom.write_text(text)
    jars = resolve_classpath(pom, f"rocketmq-{ROCKETMQ_VERSION}")
    if not any("rocketmq-broker-" in j for j in jars):
        raise ClusterError(f"the RocketMQ classpath lacks rocketmq-broker: {jars}")
    return jars


def _free_triple() -> int:
    """A listen port L with L-2 (the broker's "fast" port) and L+1 (its HA port) free as well."""
    return free_port_block((-2, 0, 1))


def _free_port() -> int:
    return free_ports(1)[0]


@dataclass(frozen=True)
class ServerTls:
    """TLS of the name server and every broker (docs/rocketmq/tls.md): ``mode`` is ``tls.server.mode``
    (``enforcing``: TLS only; ``permissive``: TLS or plain text on the one port), ``cert``/``key`` the PEM
    certificate and unencrypted PKCS#8 key they serve, ``ca`` what the stack's own set-up client trusts."""

    cert: Path
    key: Path
    ca: Path
    mode: str = "enforcing"

    def jvm_flags(self, home: Path) -> tuple[str, ...]:
        """System properties of TlsSystemConfig. ``tls.config.file`` points at a file that does not exist,
        so no ``/etc/rocketmq/tls.properties`` of the machine can change them; test mode off, or the server
        would serve a self-signed certificate of its own; a broker in ``enforcing`` mode also registers
        with the name server over TLS (its client's ``tls.enable`` follows the mode), trusting any
        certificate (``tls.client.authServer`` false)."""
        return (f"-Dtls.server.mode={self.mode}", "-Dtls.test.mode.enable=false",
                f"-Dtls.config.file={home / 'no-tls.properties'}", f"-Dtls.server.certPath={self.cert}",
                f"-Dtls.server.keyPath={self.key}", "-Dtls.server.need.client.auth=none")

    def client_context(self) -> ssl.SSLContext:
        return client_context(ca_file=str(self.ca))


@dataclass
class BrokerNode:
    """One broker JVM: group name, id (0 = master), ports and its process."""

    group: str
    broker_id: int
    port: int
    directory: Path
    extra: dict[str, str] = field(default_factory=dict)
    process: JavaProcess | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def name(self) -> str:
        return f"{self.group}-{'master' if self.broker_id == 0 else f'slave{self.broker_id}'}"


class RocketMQStack:
    """Name server + brokers as child JVMs. ``start()`` blocks until every broker is in the routes."""

    def __init__(self, groups: Iterable[tuple[str, int]] = (("broker-a", 0),), *, acting_master: bool = False,
                 work_dir: Path | None = None, keep: bool | None = None,
                 broker_config: Mapping[str, str] | None = None, credentials: Credentials | None = None,
                 tls: ServerTls | None = None) -> None:
        """``broker_config``: settings added to every broker's; ``credentials``: what set-up calls sign with
        (a stack whose brokers have ACL on, see :meth:`with_acl`); ``tls``: the servers' TLS (set-up calls
        use TLS too)."""
        self.groups = list(groups)
        self.credentials = credentials
        self.tls = tls
        self.acting_master = acting_master
        self.keep = keep if keep is not None else os.environ.get(KEEP_ENV, "") not in ("", "0")
        self._own_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="tubespark-rocketmq-"))
        self.namesrv_port = _free_port()
        self.namesrv: JavaProcess | None = None
        self.brokers: list[BrokerNode] = []
        for group, slaves in self.groups:
            for broker_id in range(slaves + 1):
                node = BrokerNode(group, broker_id, _free_triple(), self.work_dir / f"{group}-{broker_id}",
                                  dict(broker_config or {}))
                self.brokers.append(node)
        self._started = False
        self._client: RocketMQClient | None = None

    @classmethod
    def single(cls, **kw: object) -> RocketMQStack:
        return cls((("broker-a", 0),), **kw)  # type: ignore[arg-type]

    @classmethod
    def two_groups(cls, **kw: object) -> RocketMQStack:
        """Two broker groups of one master each: :meth:`create_topic` puts a topic's queues on both."""
        return cls((("broker-a", 0), ("broker-b", 0)), **kw)  # type: ignore[arg-type]

    @classmethod
    def with_acl(cls, admin: Credentials, **kw: object) -> RocketMQStack:
        """One master with ACL 2.0 on (authentication and authorization, users and policies kept by the
        broker itself) and ``admin`` as its super user; :meth:`create_user` adds others."""
        config = {
            "authenticationEnabled": "true", "authorizationEnabled": "true",
            "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
            "authenticationMetadataProvider":
                "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
            "authorizationProvider": "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
            "authorizationMetadataProvider":
                "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider",
            "initAuthenticationUser": json.dumps({"username": admin.access_key, "password": admin.secret_key}),
            "innerClientAuthenticationCredentials": json.dumps({"accessKey": admin.access_key,
                                                                "secretKey": admin.secret_key}),
        }
        return cls((("broker-a", 0),), broker_config=config, credentials=admin, **kw)  # type: ignore[arg-type]

    def create_user(self, user: Credentials) -> None:
        """A normal user on every broker (AUTH_CREATE_USER, signed by the stack's super user): with no policy
        (mqadmin createAcl) it may do nothing but authenticate."""
        for node in self.brokers:
            body = json.dumps({"username": user.access_key, "password": user.secret_key, "userType": "Normal"})
            answer = self.client.call_address(node.address, request(_AUTH_CREATE_USER, {"username": user.access_key},
                                                                    body.encode()), "create user")
            if answer.code != 0:
                raise ClusterError(f"creating user {user.access_key} on {node.name} failed: {answer.code} "
                                   f"{answer.remark}")

    @classmethod
    def acting_master(cls, **kw: object) -> RocketMQStack:
        return cls((("broker-a", 1), ("broker-b", 0)), acting_master=True, **kw)  # type: ignore[arg-type]

    # --- addresses ---------------------------------------------------------------------------------

    @property
    def namesrv_address(self) -> str:
        return f"{HOST}:{self.namesrv_port}"

    def node(self, group: str, broker_id: int = 0) -> BrokerNode:
        for node in self.brokers:
            if node.group == group and node.broker_id == broker_id:
                return node
        raise KeyError(f"no broker {group}/{broker_id}")

    @property
    def client(self) -> RocketMQClient:
        """A client of this stack for set-up calls (short route cache, so route changes show at once)."""
        if self._client is None:
            self._client = RocketMQClient([self.namesrv_address], ClientSettings(
                route_ttl_s=0.0, failover_s=10.0, credentials=self.credentials,
                ssl_context=self.tls.client_context() if self.tls else None))
        return self._client

    # --- configuration ------------------------------------------------------------------------------

    def _namesrv_conf(self) -> str:
        lines = [f"listenPort={self.namesrv_port}", f"bindAddress={HOST}", "scanNotActiveBrokerInterval=2000"]
        if self.acting_master:
            lines.append("supportActingMaster=true")
        return "\n".join(lines) + "\n"

    def _broker_conf(self, node: BrokerNode) -> str:
        props = {
            "brokerClusterName": CLUSTER, "brokerName": node.group, "brokerId": str(node.broker_id),
            "brokerRole": "ASYNC_MASTER" if node.broker_id == 0 else "SLAVE", "flushDiskType": "ASYNC_FLUSH",
            "namesrvAddr": self.namesrv_address, "brokerIP1": HOST, "brokerIP2": HOST, "bindAddress": HOST,
            "listenPort": str(node.port), "haListenPort": str(node.port + 1),
            "storePathRootDir": str(node.directory / "store"),
            "storePathCommitLog": str(node.directory / "store" / "commitlog"),
            "autoCreateTopicEnable": "true", "autoCreateSubscriptionGroup": "true", "timerWheelEnable": "true",
            "mappedFileSizeCommitLog": str(64 * 1024 * 1024), "diskMaxUsedSpaceRatio": "95",
            "deleteWhen": "04", "fileReservedTime": "48", "enablePopLog": "false",
            "registerBrokerTimeoutMills": "3000", "sendMessageThreadPoolNums": "4",
            "pullMessageThreadPoolNums": "4", "useReentrantLockWhenPutMessage": "true",
            "enablePropertyFilter": "true",  # SQL92 filters (subExpression); tag filters need nothing
            # POP needs the timer wheel (its checkpoints are timer messages), but the wheel's flush compares its
            # 38.7 MB mapped file byte by byte with the in-memory copy every timerFlushIntervalMs (1 s by
            # default): a quarter of a core per idle broker here, the largest CPU cost of the whole test run.
            # Every 10 s instead; a kill -9 recovers the timer state from its checkpoint either way.
            "timerFlushIntervalMs": "10000",
        }
        if self.acting_master:
            props.update({
                "enableSlaveActingMaster": "true", "enableRemoteEscape": "true", "brokerHeartbeatInterval": "1000",
                "brokerNotActiveTimeoutMillis": "4000", "sendHeartbeatTimeoutMillis": "1000",
                "slaveReadEnable": "true", "totalReplicas": "2" if node.group == self.groups[0][0] else "1",
                "inSyncReplicas": "1", "minInSyncReplicas": "1", "enableAutoInSyncReplicas": "true",
            })
        props.update(node.extra)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _command(self, main: str, conf: Path, flags: tuple[str, ...], home: Path) -> list[str]:
        tls = self.tls.jvm_flags(home) if self.tls else ()
        return [which("java"), *_COMMON_JVM_FLAGS, *flags, *tls, f"-Drocketmq.home.dir={home}",
                f"-Duser.home={home}", "-cp", os.pathsep.join(self._jars), main, "-c", str(conf)]

    # --- life cycle ---------------------------------------------------------------------------------

    def start(self) -> RocketMQStack:
        self._jars = ensure_artifacts()
        atexit.register(self.stop)
        self._started = True
        try:
            self._start_namesrv()
            for node in self.brokers:
                self._start_new_broker(node)
            for node in self.brokers:
                self.wait_registered(node)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_namesrv(self) -> None:
        home = self.work_dir / "namesrv"
        home.mkdir(parents=True, exist_ok=True)
        conf = home / "namesrv.conf"
        conf.write_text(self._namesrv_conf())
        proc = JavaProcess("namesrv", self._command(NAMESRV_MAIN, conf, _NAMESRV_JVM_FLAGS, home), log_dir=home,
                           cwd=home, env=dict(os.environ))
        proc.start()
        self.namesrv = proc
        wait_until("the RocketMQ name server", lambda: _port_open(self.namesrv_port), timeout_s=_START_TIMEOUT_S,
                   watch=[proc], on_timeout=proc.diagnostics)

    def _start_broker(self, node: BrokerNode) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        conf = node.directory / "broker.conf"
        conf.write_text(self._broker_conf(node))
        proc = JavaProcess(node.name, self._command(BROKER_MAIN, conf, _BROKER_JVM_FLAGS, node.directory),
                           log_dir=node.directory, cwd=node.directory, env=dict(os.environ))
        proc.start()
        node.process = proc
        # The broker binds its listen port, then its "fast" port L-2: a start that lost L-2 to another process
        # has already shown L open when it exits (seen in CI: "Failed to bind to 127.0.0.1:<L-2>", exit 255
        # while the stack waited for its registration), so both must be open before the start counts.
        wait_until(f"broker {node.name} on ports {node.port} and {node.port - 2}",
                   lambda: _port_open(node.port) and _port_open(node.port - 2),
                   timeout_s=_START_TIMEOUT_S, watch=[proc], on_timeout=lambda: self.diagnostics(node))

    def _start_new_broker(self, node: BrokerNode, tries: int = 3) -> None:
        """The first start of ``node``. Its ports were free when chosen, but a JVM starting beside it may bind one
        first (the tests start clusters in parallel; seen in CI: the broker's HA port, ``BindException: Address
        already in use``, exit 255); then it starts again on new ports, in a fresh directory."""
        for attempt in range(1, tries + 1):
            try:
                self._start_broker(node)
                return
            except ClusterError as exc:
                if "Address already in use" not in str(exc) or attempt == tries:
                    raise
                old = node.port
                node.port = _free_triple()
                shutil.rmtree(node.directory, ignore_errors=True)
                log.warning("%s: a port of %d..%d was taken before it bound it; starting it on %d", node.name,
                            old - 2, old + 1, node.port)

    def restart_broker(self, node: BrokerNode) -> None:
        """Start a stopped broker again on the same ports and store."""
        if node.process is not None and node.process.alive():
            raise ClusterError(f"{node.name} is still running")
        self._start_broker(node)

    def wait_registered(self, node: BrokerNode, timeout_s: float = _START_TIMEOUT_S) -> None:
        """Until the name server lists ``node`` under its id in its group (the default topic's route)."""
        def listed() -> bool:
            try:
                route = self.client.route("TBW102", refresh=True)
            except TubeSparkError:
                return False
            broker = route.brokers.get(node.group)
            return broker is not None and broker.addresses.get(node.broker_id) == node.address
        wait_until(f"{node.name} registered with the name server", listed, timeout_s=timeout_s, interval_s=0.5,
                   watch=[p for p in (node.process,) if p is not None], on_timeout=lambda: self.diagnostics(node))

    def create_topic(self, topic: str, queues: int = 4, *, groups: Iterable[str] | None = None) -> str:
        """Create ``topic`` on every master (and slave) of ``groups`` (default: all), then wait for its route."""
        wanted = set(groups or (g for g, _ in self.groups))
        for node in self.brokers:
            if node.group in wanted and node.process is not None and node.process.alive():
                self.client.create_topic(node.address, topic, queues)

        def routed() -> bool:
            try:
                route = self.client.route(topic, refresh=True)
            except TubeSparkError:
                return False
            return wanted <= {q.broker_name for q in route.queues}
        wait_until(f"the route of topic {topic}", routed, timeout_s=60.0, interval_s=0.3)
        return topic

    def kill(self, node: BrokerNode) -> None:
        """SIGKILL one broker (a crash: no unregistering, the name server notices by heartbeat timeout)."""
        if node.process is not None:
            node.process.kill()

    def stop_broker(self, node: BrokerNode, grace_s: float = 10.0) -> None:
        """Stop one broker gracefully (SIGTERM, as a rolling restart does: it unregisters from the name
        server and flushes its store); SIGKILL after ``grace_s``. :meth:`restart_broker` starts it again."""
        if node.process is not None:
            node.process.stop(grace_s=grace_s)

    def wait_unrouted(self, topic: str, group: str, timeout_s: float = 30.0) -> None:
        """Until the name server's route of ``topic`` lists no queue of ``group`` (a group that stopped)."""
        def gone() -> bool:
            try:
                route = self.client.route(topic, refresh=True)
            except TubeSparkError:
                return True
            return all(q.broker_name != group for q in route.queues)
        wait_until(f"{group} to leave the route of {topic}", gone, timeout_s=timeout_s, interval_s=0.2)

    def wait_routed(self, topic: str, group: str, timeout_s: float = _START_TIMEOUT_S) -> None:
        """Until the name server's route of ``topic`` lists ``group``'s queues again (a group back)."""
        def back() -> bool:
            try:
                route = self.client.route(topic, refresh=True)
            except TubeSparkError:
                return False
            return any(q.broker_name == group for q in route.queues)
        wait_until(f"{group} to be back in the route of {topic}", back, timeout_s=timeout_s, interval_s=0.2)

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self._client is not None:
            self._client.close()
            self._client = None
        # the brokers together (one grace period, not one each), then the name server
        stop_all([node.process for node in self.brokers if node.process is not None], grace_s=3.0)
        if self.namesrv is not None:
            with contextlib.suppress(ClusterError):
                self.namesrv.stop(grace_s=3.0)
        if self._own_dir and not self.keep:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def diagnostics(self, node: BrokerNode) -> str:
        parts = [node.process.diagnostics() if node.process else "(not started)"]
        broker_log = node.directory / "logs" / "rocketmqlogs" / "broker.log"
        if broker_log.exists():
            from tubespark_testbed.procs import tail

            parts.append(f"--- broker.log ---\n{tail(broker_log)}")
        return "\n".join(parts)

    def __enter__(self) -> RocketMQStack:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0
