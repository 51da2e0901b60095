"""Ports, timing knobs and rendered config files for one local TubeMQ cluster.

The config files themselves live in ``conf/tubemq/`` (ini/cfg files with ``${name}`` placeholders and a
static ``log4j2.xml``), so that what the cluster runs with can be read without reading Python.
"""

from __future__ import annotations

import os
import shutil
import string
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from tubespark_testbed.errors import ClusterError
from tubespark_testbed.ports import free_ports

_PACKAGE_DIR = Path(__file__).resolve().parent
_TEMPLATES_DIR = _PACKAGE_DIR / "templates"

# TBaseConstants.META_DEFAULT_BROKER_TLS_PORT, what a broker without TLS reports to the master.
BROKER_TLS_PORT = 8124


@dataclass(frozen=True)
class ClusterPorts:
    """Every TCP port one cluster listens on, all picked free at start so clusters can coexist.

    ``broker_tls`` is never opened (TLS is off) but the master stores it in the broker record and
    refuses a broker that registers with a different one. With ``tlsEnable=false`` the 2.4.0 broker
    ignores ``[tlsSetting] tlsPort`` and always reports the built-in 8124, so that is what the master
    record must say; nothing binds it, so clusters do not collide on it.
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

    @classmethod
    def pick(cls) -> ClusterPorts:
        return cls(*free_ports(7))


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


def _render(template: Path, target: Path, values: dict[str, object]) -> None:
    try:
        text = string.Template(template.read_text()).substitute(values)
    except (KeyError, ValueError) as exc:
        raise ClusterError(f"bad placeholder in {template}: {exc}") from exc
    target.write_text(text)


def render_cluster_files(work_dir: Path, ports: ClusterPorts, settings: ClusterSettings) -> ClusterFiles:
    """Write configs, data dirs and web templates for one cluster under ``work_dir``."""
    src = conf_dir()
    files = ClusterFiles(
        work_dir=work_dir,
        log_dir=work_dir / "logs",
        zoo_cfg=work_dir / "conf" / "zoo.cfg",
        master_ini=work_dir / "conf" / "master.ini",
        broker_ini=work_dir / "conf" / "broker.ini",
        log4j2_xml=work_dir / "conf" / "log4j2.xml",
        web_dir=work_dir / "web",
    )
    for d in (files.log_dir, files.zoo_cfg.parent, work_dir / "zk", work_dir / "broker-data"):
        d.mkdir(parents=True, exist_ok=True)
    values: dict[str, object] = {
        **{f"{k}_port": v for k, v in asdict(ports).items()},
        **asdict(settings),
        "web_resource_path": files.web_dir,
        "zk_data_dir": work_dir / "zk",
        "data_path": work_dir / "broker-data",
    }
    _render(src / "zoo.cfg", files.zoo_cfg, values)
    _render(src / "master.ini", files.master_ini, values)
    _render(src / "broker.ini", files.broker_ini, values)
    shutil.copyfile(src / "log4j2.xml", files.log4j2_xml)
    write_web_resources(files.web_dir)
    return files


def write_web_resources(web_dir: Path) -> None:
    """Lay out the two Velocity templates the master's ``/webapi.htm`` renders through.

    No ``velocity.properties`` is written on purpose: without it the master points Velocity at the
    absolute ``<webResourcePath>/templates`` path, so the JVM's working directory does not matter.
    """
    for kind in ("screen", "layout"):
        target = web_dir / "templates" / kind / "webapi.vm"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_TEMPLATES_DIR / f"{kind}_webapi.vm", target)
