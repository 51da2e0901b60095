"""Ports, timing knobs and rendered config files for one local TubeMQ cluster.

The config files themselves live in ``conf/tubemq/`` (ini/cfg files with ``${name}`` placeholders and a
static ``log4j2.xml``), so that what the cluster runs with can be read without reading Python.
"""

from __future__ import annotations

import os
import shutil
import string
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tubespark_testbed.errors import ClusterError
from tubespark_testbed.ports import free_ports

_PACKAGE_DIR = Path(__file__).resolve().parent
_TEMPLATES_DIR = _PACKAGE_DIR / "templates"

# TBaseConstants.META_DEFAULT_BROKER_TLS_PORT, what a broker without TLS reports to the master, and
# META_DEFAULT_MASTER_TLS_PORT, which a master without TLS never binds.
BROKER_TLS_PORT = 8124
MASTER_TLS_PORT = 8716


MAX_BROKERS = 16
"""Brokers one local cluster runs at most (each on its own loopback address, see :func:`broker_host`)."""


def broker_host(index: int) -> str:
    """The loopback address of the cluster's broker number ``index`` (0 is the first): ``127.0.0.<index+1>``.

    One address per broker because the 2.4.0 master keys broker records by IP: a second record with the
    same ``brokerIp`` is refused (``Duplicated broker configure record, query by brokerIp : 127.0.0.1``).
    Linux routes all of 127.0.0.0/8 to the loopback interface, so these need no set-up.
    """
    if not 0 <= index < MAX_BROKERS:
        raise ClusterError(f"a local cluster runs 1-{MAX_BROKERS} brokers, asked for broker #{index + 1}")
    return f"127.0.0.{index + 1}"


@dataclass(frozen=True)
class ClusterPorts:
    """Every TCP port one cluster listens on, all picked free at start so clusters can coexist.

    ``broker``/``broker_web``/``broker_prom`` are the first broker's; ``extra_brokers`` holds
    ``(rpc, web, prometheus)`` of each further one (``brokers``), like ``extra_masters`` for masters.
    ``broker_tls``: the master stores it in the broker record and refuses a broker that registers with
    a different one. Without TLS nothing opens it, and the 2.4.0 broker ignores ``[tlsSetting]
    tlsPort`` and always reports the built-in 8124, so that is what the master record must say; nothing
    binds it, so clusters (and brokers) do not collide on it. A TLS cluster (``pick(tls=True)``) gets free
    ports for it and for ``master_tls``, the master's TLS port (``docs/tubemq/tls.md``).
    ``master_prom``/``broker_prom``: 2.4.0 master and broker both start their Prometheus HTTP server
    even with ``promEnable=false`` (then always on 9081; the second process only logs "Address already in
    use"), so we enable it on free ports rather than have every cluster fight over 9081.
    """

    zk: int
    master: int
    master_web: int
    master_prom: int
    broker: int
    broker_web: int
    broker_prom: int
    broker_tls: int = BROKER_TLS_PORT
    extra_masters: tuple[tuple[int, int, int], ...] = ()
    master_tls: int = MASTER_TLS_PORT
    extra_brokers: tuple[tuple[int, int, int], ...] = ()

    @classmethod
    def pick(cls, masters: int = 1, *, tls: bool = False, brokers: int = 1) -> ClusterPorts:
        """Free ports for ZooKeeper, ``masters`` masters and ``brokers`` brokers (RPC, web, Prometheus each).

        ``tls``: also free TLS ports for the master and the broker (one master and one broker only).
        """
        if masters < 1:
            raise ClusterError(f"a cluster needs at least one master, got masters={masters}")
        if not 1 <= brokers <= MAX_BROKERS:
            raise ClusterError(f"a local cluster runs 1-{MAX_BROKERS} brokers, got brokers={brokers}")
        if tls and (masters > 1 or brokers > 1):
            raise ClusterError("the testbed runs TLS with one master and one broker only")
        ports = free_ports(7 + 3 * (masters - 1) + 3 * (brokers - 1) + (2 if tls else 0))
        zk, master, master_web, master_prom, broker, broker_web, broker_prom = ports[:7]
        if tls:
            return cls(zk, master, master_web, master_prom, broker, broker_web, broker_prom, broker_tls=ports[7],
                       master_tls=ports[8])
        triples = [(ports[i], ports[i + 1], ports[i + 2]) for i in range(7, len(ports), 3)]
        return cls(zk, master, master_web, master_prom, broker, broker_web, broker_prom,
                   extra_masters=tuple(triples[: masters - 1]), extra_brokers=tuple(triples[masters - 1 :]))

    def with_another_broker(self) -> ClusterPorts:
        """These ports plus free ones for one more broker (:meth:`LocalCluster.add_broker`)."""
        if len(self.brokers) >= MAX_BROKERS:
            raise ClusterError(f"a local cluster runs at most {MAX_BROKERS} brokers")
        if self.broker_tls != BROKER_TLS_PORT:
            raise ClusterError("the testbed runs TLS with one broker only")
        rpc, web, prom = free_ports(3)
        return replace(self, extra_brokers=(*self.extra_brokers, (rpc, web, prom)))

    @property
    def masters(self) -> list[tuple[int, int, int]]:
        """``(rpc, web, prometheus)`` of every master, the first one first."""
        return [(self.master, self.master_web, self.master_prom), *self.extra_masters]

    @property
    def brokers(self) -> list[tuple[int, int, int]]:
        """``(rpc, web, prometheus)`` of every broker, the first one first."""
        return [(self.broker, self.broker_web, self.broker_prom), *self.extra_brokers]


@dataclass(frozen=True)
class ClusterSettings:
    """Timing knobs, shortened from the production defaults so tests do not wait on them.

    * ``balance_period_ms`` 2000 (server default 60000, shipped ini 30000): consumer rebalance period,
      also used as the delay of the first rebalance after master start.
    * ``consumer/producer_heartbeat_timeout_ms`` 15000 (defaults 30000/45000): how fast the master
      forgets a client that went away without unregistering, e.g. a killed test process.
    * ``broker_heartbeat_period_ms`` 1000 (default 8000): the master only advances a broker through
      its publish/subscribe states, e.g. for a new topic, when a heartbeat arrives.
    * ``broker_heartbeat_timeout_ms`` 10000 (default 25000-30000): must stay well above the period.
    * ``consumer_reg_timeout_ms`` 15000 (broker side, default 30000): how long a broker keeps a silent
      consumer's partition registration.
    * ``max_segment_bytes`` 64 MiB / ``max_index_segment_bytes`` 2 MiB (defaults 1 GiB / 21 MiB): a
      test cluster holds little data; tiny values make retention observable (old segments expire).
    * ``default_delete_policy`` (server default ``delete,168h``): the broker's default retention, inherited by
      topics deployed at start-up, e.g. ``delete,1s`` to watch data expire.
    * ``log_cleanup_period_ms`` 180000 (the default; the broker allows no less than 60000): how often
      the broker deletes segments older than a topic's ``deletePolicy``.
    * ``zk_session_timeout_ms`` 30000 / ``zk_master_check_period_ms`` 5000 (the shipped values): with
      several masters (``LocalCluster(masters=N)``) they elect the active one through an ephemeral
      ZooKeeper node, so a killed active master is replaced only after its session expires (at most
      this timeout; ZooKeeper's tick of 2 s bounds it to 4000-40000) plus one check period.

    **The durability window.** A broker acknowledges a message once it is in the topic store's *memory
    cache*; a flush thread moves it to the segment file later, and the OS writes the file to disk
    later still. ``kill -9`` of the broker loses the memory cache (what is in a file survives a process
    crash, sitting in the page cache); a crash of the machine also loses what was not yet ``fsync``-ed.
    After a restart the lost offsets are handed out again to new messages. The bounds:

    * ``enable_mem_store`` True (``broker.ini`` ``enableMemStore``): False appends straight to the
      segment file, which closes the kill -9 window entirely (at some throughput cost).
    * ``mem_flush_check_period_ms`` 10000 (``logFlushMemDurMs``): how often the broker looks for memory
      caches due for a flush by time; ``disk_flush_check_period_ms`` 20000 (``logFlushDiskDurMs``) the
      same for ``fsync`` by time.
    * Per topic, with the broker record's values as defaults for topics deployed on it (these are not
      ``broker.ini`` keys in 2.4.0: the master stores them and hands them to the broker; ``None``
      keeps the server default; each is also an ``admin_add_topic_deploy_info`` parameter):

      - ``mem_cache_msg_count_k`` (``memCacheMsgCntInK``, default 10, min 1): flush the memory cache
        to the file once it holds this many thousand messages;
      - ``mem_cache_msg_size_mb`` (``memCacheMsgSizeInMB``, default 3, min 2): ... or this many MB;
      - ``mem_cache_flush_interval_ms`` (``memCacheFlushIntvl``, default 20000, min 4000): ... or its
        oldest message is this old (checked every ``mem_flush_check_period_ms``);
      - ``unflush_threshold`` (``unflushThreshold``, default 1000), ``unflush_interval_ms``
        (``unflushInterval``, default 10000), ``unflush_data_hold`` (``unflushDataHold`` bytes, default
        0 = off): ``fsync`` the file after this many messages, this long, or this many bytes. These
        bound a machine crash, not a process kill.

    :meth:`tight_flush` returns the settings with the smallest window the server allows.

    **Client authentication** (``master.ini``; the broker takes the same switches from the master's
    answer to its registration). All off by default, as in the server; :meth:`with_client_auth` turns
    them on. What 2.4.0 really checks when they are on is in ``docs/tubemq/auth.md``; in short:

    * ``produce_authenticate`` / ``consume_authenticate`` (``startProduceAuthenticate`` /
      ``startConsumeAuthenticate``): the master refuses producer / consumer calls without a user name
      and a signature, or whose timestamp is more than ``auth_timestamp_valid_ms`` off its clock
      (``authValidTimeStampPeriodMs``, default 20000, clamped to 5000-120000); the broker refuses sends /
      consumer registrations without a token. Neither verifies the signature nor knows any user.
    * ``produce_authorize`` / ``consume_authorize`` (``startProduceAuthorize`` /
      ``startConsumeAuthorize``): accepted, each needs its ``*_authenticate`` (else the master does not
      start), and the open-source 2.4.0 server then authorizes everything.
    * ``visit_token_check`` (``startVisitTokenCheck``): the broker refuses a request whose visit token
      is not one the master handed out, once it has been registered for ``visit_token_grace_ms``
      (``broker.ini`` ``visitTokenCheckInValidTimeMs``, default 120000, clamped to 60000-300000).
    """

    balance_period_ms: int = 2000
    consumer_heartbeat_timeout_ms: int = 15000
    producer_heartbeat_timeout_ms: int = 15000
    broker_heartbeat_period_ms: int = 1000
    broker_heartbeat_timeout_ms: int = 10000
    consumer_reg_timeout_ms: int = 15000
    max_segment_bytes: int = 64 * 1024 * 1024
    max_index_segment_bytes: int = 2 * 1024 * 1024
    log_cleanup_period_ms: int = 180000
    default_delete_policy: str | None = None
    auth_token: str = "tubespark"
    broker_id: int = 1
    zk_session_timeout_ms: int = 30000
    zk_master_check_period_ms: int = 5000
    enable_mem_store: bool = True
    mem_flush_check_period_ms: int = 10000
    disk_flush_check_period_ms: int = 20000
    mem_cache_msg_count_k: int | None = None
    mem_cache_msg_size_mb: int | None = None
    mem_cache_flush_interval_ms: int | None = None
    unflush_threshold: int | None = None
    unflush_interval_ms: int | None = None
    unflush_data_hold: int | None = None
    produce_authenticate: bool = False
    produce_authorize: bool = False
    consume_authenticate: bool = False
    consume_authorize: bool = False
    visit_token_check: bool = False
    auth_timestamp_valid_ms: int = 20000
    visit_token_grace_ms: int = 120000
    tls_keystore: str | None = None
    tls_keystore_password: str = field(default="", repr=False)
    tls_truststore: str | None = None
    tls_truststore_password: str = field(default="", repr=False)

    @property
    def tls(self) -> bool:
        """True when the master and the broker serve TLS (see :meth:`with_tls`)."""
        return self.tls_keystore is not None

    def __post_init__(self) -> None:
        # 2.4.0 opens the trust store file for every TLS connection, even when client certificates are
        # off, and exits the JVM when there is none (docs/tubemq/tls.md): one-way TLS cannot work.
        if self.tls_keystore is not None and self.tls_truststore is None:
            raise ClusterError("TLS needs a trust store too (with_tls(..., truststore=...)): a 2.4.0 master or "
                               "broker without one exits at its first TLS connection (docs/tubemq/tls.md)")
        # The master exits at start-up with an IllegalArgumentException otherwise (MasterConfig): fail
        # here, with the setting's name, instead of after a JVM start and a timeout.
        for kind in ("produce", "consume"):
            if getattr(self, f"{kind}_authorize") and not getattr(self, f"{kind}_authenticate"):
                key = kind.title()
                raise ClusterError(f"{kind}_authorize=True needs {kind}_authenticate=True (the master refuses "
                                   f"to start with start{key}Authorize but not start{key}Authenticate)")

    def with_tls(self, keystore: str | os.PathLike[str], password: str, *,
                 truststore: str | os.PathLike[str], truststore_password: str | None = None) -> ClusterSettings:
        """These settings with the master and the broker serving TLS on ports of their own.

        ``keystore``: a JKS store with the servers' key and certificate chain (each server reads its own
        copy, :meth:`LocalCluster.tls_keystore_path`); ``truststore``: a JKS store of the CAs whose
        client certificates the servers accept (``tlsTwoWayAuthEnable``). The trust store is required:
        2.4.0 cannot serve TLS without client certificates (``docs/tubemq/tls.md``). The plain ports
        stay open. The passwords are left out of ``repr``.
        """
        return replace(self, tls_keystore=str(keystore), tls_keystore_password=password,
                       tls_truststore=str(truststore),
                       tls_truststore_password=password if truststore_password is None else truststore_password)

    def with_client_auth(self, *, visit_token_check: bool = False) -> ClusterSettings:
        """These settings with every client authentication and authorization switch of the master on.

        ``visit_token_check`` stays off unless asked: it makes the broker refuse requests without a
        visit token from the master (see ``docs/tubemq/auth.md``).
        """
        return replace(self, produce_authenticate=True, produce_authorize=True, consume_authenticate=True,
                       consume_authorize=True, visit_token_check=visit_token_check)

    def tight_flush(self, *, mem_store: bool = True) -> ClusterSettings:
        """These settings with the smallest durability window 2.4.0 allows.

        With ``mem_store`` (the default) the memory cache stays but flushes at the server's minimums
        (1000 messages, 2 MB or 4 s, checked every second) and every file append is ``fsync``-ed within
        a second; ``mem_store=False`` bypasses the memory cache altogether (nothing acknowledged is
        lost on kill -9).
        """
        return replace(self, enable_mem_store=mem_store, mem_flush_check_period_ms=1000,
                       disk_flush_check_period_ms=1000, mem_cache_msg_count_k=1, mem_cache_msg_size_mb=2,
                       mem_cache_flush_interval_ms=4000, unflush_threshold=100, unflush_interval_ms=1000)

    def topic_flush_params(self) -> dict[str, int]:
        """The per-topic flush settings that are set, as master web API parameters."""
        names = {"mem_cache_msg_count_k": "memCacheMsgCntInK", "mem_cache_msg_size_mb": "memCacheMsgSizeInMB",
                 "mem_cache_flush_interval_ms": "memCacheFlushIntvl", "unflush_threshold": "unflushThreshold",
                 "unflush_interval_ms": "unflushInterval", "unflush_data_hold": "unflushDataHold"}
        return {api: getattr(self, attr) for attr, api in names.items() if getattr(self, attr) is not None}


def conf_dir() -> Path:
    """Directory holding the config templates: ``$TUBESPARK_CONF_DIR`` or the repo's ``conf/tubemq``."""
    override = os.environ.get("TUBESPARK_CONF_DIR")
    candidates = [Path(override)] if override else []
    candidates.append(_PACKAGE_DIR.parent.parent / "conf" / "tubemq")  # a source checkout
    candidates.append(Path(sys.prefix) / "share" / "tubespark" / "conf" / "tubemq")  # a wheel install
    for cand in candidates:
        if (cand / "master.ini").is_file():
            return cand
    raise ClusterError(
        "TubeMQ config templates not found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "); run from a source checkout or set TUBESPARK_CONF_DIR"
    )


@dataclass(frozen=True)
class ClusterFiles:
    """Paths of everything rendered into a cluster's work dir."""

    work_dir: Path
    log_dir: Path
    zoo_cfg: Path
    master_ini: Path
    broker_ini: Path
    log4j2_xml: Path
    web_dir: Path
    master_inis: tuple[Path, ...] = ()
    master_keystore: Path | None = None  # each TLS server reads its own copy of the key store
    broker_keystore: Path | None = None
    broker_inis: tuple[Path, ...] = ()


def broker_name(index: int) -> str:
    """Process name of the broker number ``index`` (0 is the first): ``broker``, ``broker-2``, ``broker-3`` ..."""
    return "broker" if index == 0 else f"broker-{index + 1}"


def broker_ini_path(work_dir: Path, index: int) -> Path:
    return work_dir / "conf" / f"{broker_name(index)}.ini"


def _render(template: Path, target: Path, values: dict[str, object]) -> None:
    try:
        text = string.Template(template.read_text()).substitute(values)
    except (KeyError, ValueError) as exc:
        raise ClusterError(f"bad placeholder in {template}: {exc}") from exc
    target.write_text(text)


def render_cluster_files(work_dir: Path, ports: ClusterPorts, settings: ClusterSettings) -> ClusterFiles:
    """Write configs, data dirs and web templates for one cluster (every broker in ``ports``) under ``work_dir``."""
    src = conf_dir()
    broker_inis = tuple(broker_ini_path(work_dir, i) for i in range(len(ports.brokers)))
    files = ClusterFiles(
        work_dir=work_dir,
        log_dir=work_dir / "logs",
        zoo_cfg=work_dir / "conf" / "zoo.cfg",
        master_ini=work_dir / "conf" / "master.ini",
        broker_ini=broker_inis[0],
        log4j2_xml=work_dir / "conf" / "log4j2.xml",
        web_dir=work_dir / "web",
        master_inis=tuple(work_dir / "conf" / ("master.ini" if i == 0 else f"master-{i + 1}.ini")
                          for i in range(len(ports.masters))),
        master_keystore=work_dir / "conf" / "master-keystore.jks" if settings.tls else None,
        broker_keystore=work_dir / "conf" / "broker-keystore.jks" if settings.tls else None,
        broker_inis=broker_inis,
    )
    for d in (files.log_dir, files.zoo_cfg.parent, work_dir / "zk"):
        d.mkdir(parents=True, exist_ok=True)
    if settings.tls_keystore is not None:
        for copy in (files.master_keystore, files.broker_keystore):
            assert copy is not None
            shutil.copyfile(settings.tls_keystore, copy)
    values = _values(work_dir, ports, settings, files)
    _render(src / "zoo.cfg", files.zoo_cfg, values)
    for path, (rpc, web, prom) in zip(files.master_inis, ports.masters, strict=True):
        _render(src / "master.ini", path, {**values, "master_port": rpc, "master_web_port": web,
                                           "master_prom_port": prom})
    for index in range(len(ports.brokers)):
        render_broker_ini(work_dir, ports, settings, index)
    shutil.copyfile(src / "log4j2.xml", files.log4j2_xml)
    write_web_resources(files.web_dir)
    return files


def render_broker_ini(work_dir: Path, ports: ClusterPorts, settings: ClusterSettings, index: int) -> Path:
    """Write the ini (and create the data dir) of broker number ``index``: its own id, address, ports and data.

    Broker ids count up from ``settings.broker_id``; the first broker keeps the historical names
    (``broker.ini``, ``broker-data``), the others are ``broker-2.ini``, ``broker-2-data`` ...
    """
    rpc, web, prom = ports.brokers[index]
    data = work_dir / ("broker-data" if index == 0 else f"{broker_name(index)}-data")
    data.mkdir(parents=True, exist_ok=True)
    path = broker_ini_path(work_dir, index)
    path.parent.mkdir(parents=True, exist_ok=True)
    values = {**_values(work_dir, ports, settings, None), "broker_port": rpc, "broker_web_port": web,
              "broker_prom_port": prom, "broker_id": settings.broker_id + index, "broker_host": broker_host(index),
              "data_path": data}
    _render(conf_dir() / "broker.ini", path, values)
    return path


def _values(work_dir: Path, ports: ClusterPorts, settings: ClusterSettings,
            files: ClusterFiles | None) -> dict[str, object]:
    """The placeholders every template shares (a broker's own ones are set by :func:`render_broker_ini`)."""
    tls = settings.tls
    return {
        **{f"{k}_port": v for k, v in asdict(ports).items() if isinstance(v, int)},
        # booleans as the servers' ini parsers spell them
        **{k: str(v).lower() if isinstance(v, bool) else v for k, v in asdict(settings).items()},
        "web_resource_path": work_dir / "web",
        "zk_data_dir": work_dir / "zk",
        "master_address_list": ",".join(f"127.0.0.1:{rpc}" for rpc, _web, _prom in ports.masters),
        # [tlsSetting]: with tlsEnable=false the servers read no other key of the section
        "tls_enable": str(tls).lower(),
        "tls_two_way": str(settings.tls_truststore is not None).lower(),
        "master_keystore": work_dir / "conf" / "master-keystore.jks" if tls else "",
        "broker_keystore": work_dir / "conf" / "broker-keystore.jks" if tls else "",
        "tls_truststore": settings.tls_truststore or "",
    }


def write_web_resources(web_dir: Path) -> None:
    """Lay out the two Velocity templates the master's ``/webapi.htm`` renders through.

    No ``velocity.properties`` is written on purpose: without it the master points Velocity at the
    absolute ``<webResourcePath>/templates`` path, so the JVM's working directory does not matter.
    """
    for kind in ("screen", "layout"):
        target = web_dir / "templates" / kind / "webapi.vm"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_TEMPLATES_DIR / f"{kind}_webapi.vm", target)
