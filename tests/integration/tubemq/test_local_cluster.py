"""The local TubeMQ cluster itself: start-up, admin API, topics, isolation, clean teardown."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tubespark_testbed import LocalCluster
from tubespark_testbed.errors import ClusterError
from tubespark_testbed.local import parse_topic_spec

REPO = Path(__file__).resolve().parents[3]


def _pids_with(marker: str) -> set[int]:
    """Live processes whose command line mentions ``marker`` (a cluster's work dir)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().split(") ", 1)[1][:1]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.add(int(entry.name))
    return found


def _port_open(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def test_session_cluster_is_up(tubemq_cluster):
    c = tubemq_cluster
    assert c.master_address.startswith("127.0.0.1:") and _port_open(c.master_address)
    assert c.broker_address.startswith("127.0.0.1:") and _port_open(c.broker_address)
    assert c.master_web_url.startswith("http://127.0.0.1:")
    status = c.broker_run_status()
    assert status["brokerId"] == c.broker_id
    assert status["runStatus"] == "running"
    assert status["brokerPort"] == int(c.broker_address.rsplit(":", 1)[1])


def test_pooled_topic_is_publishable_in_the_admin_api(tubemq_cluster, topic_factory):
    topic = topic_factory(partitions=1, stores=4)
    answer = tubemq_cluster.master_admin("admin_query_topic_deploy_info", topicName=topic)
    [info] = answer["data"]
    [deploy] = info["deployInfo"]
    assert (deploy["numPartitions"], deploy["numTopicStores"]) == (1, 4)
    assert deploy["runInfo"]["acceptPublish"] is True and deploy["runInfo"]["acceptSubscribe"] is True
    assert topic_factory(partitions=1, stores=4) != topic
    offsets = tubemq_cluster.broker_admin(
        "admin_query_group_offset", topicName=topic, groupName="probe_group", partitionId=0
    )
    assert offsets["maxOffset"] == 0


def test_master_admin_errors_raise_cluster_error(tubemq_cluster):
    with pytest.raises(ClusterError, match="topicName"):
        tubemq_cluster.master_admin("admin_add_topic_deploy_info", topicName="bad-name", brokerId=1)
    with pytest.raises(ClusterError):
        tubemq_cluster.broker_admin("admin_query_group_offset", topicName="x", groupName="-", partitionId=0)


def test_max_message_size_is_a_cluster_default(tubemq_cluster):
    def current() -> int:
        # The master stores no default-setting record until the first update; the built-in limit is 1 MB.
        data = tubemq_cluster.master_admin("admin_query_cluster_default_setting")["data"]
        return data[0]["maxMsgSizeInMB"] if data else 1

    before = current()
    try:
        tubemq_cluster.set_max_message_size_mb(3)
        assert current() == 3
        with pytest.raises(ClusterError):
            tubemq_cluster.set_max_message_size_mb(21)
    finally:
        tubemq_cluster.set_max_message_size_mb(before)


def test_topic_specs_parse():
    assert parse_topic_spec("ab") == ("ab", 1, 4)
    assert parse_topic_spec("ab:3") == ("ab", 3, 4)
    assert parse_topic_spec("a_1:2:1") == ("a_1", 2, 1)
    assert parse_topic_spec(("bc", 1, 1)) == ("bc", 1, 1)
    for bad in ("", "a", "a-b", "1ab", "x" * 65, "ab:x", "ab:1:2:3", "ab:0"):
        with pytest.raises(ClusterError):
            parse_topic_spec(bad)


def test_master_group_gets_one_config_per_master_and_the_broker_lists_them_all(tmp_path):
    from tubespark_testbed.config import ClusterPorts, ClusterSettings, render_cluster_files

    ports = ClusterPorts.pick(3)
    assert len(ports.masters) == 3 and len({p for m in ports.masters for p in m}) == 9
    files = render_cluster_files(tmp_path, ports, ClusterSettings(zk_session_timeout_ms=6000))
    assert [f.name for f in files.master_inis] == ["master.ini", "master-2.ini", "master-3.ini"]
    for ini, (rpc, web, prom) in zip(files.master_inis, ports.masters, strict=True):
        text = ini.read_text()
        assert f"port={rpc}\n" in text and f"webPort={web}\n" in text and f"promHttpPort={prom}\n" in text
        assert "zkSessionTimeoutMs=6000" in text and "[meta_zookeeper]" in text
    broker = files.broker_ini.read_text()
    assert "masterAddressList=" + ",".join(f"127.0.0.1:{m[0]}" for m in ports.masters) in broker
    with pytest.raises(ClusterError):
        LocalCluster(masters=0)


def test_flush_settings_reach_broker_ini_and_the_broker_record(tmp_path):
    from tubespark_testbed.config import ClusterPorts, ClusterSettings, render_cluster_files

    assert ClusterSettings().topic_flush_params() == {}  # server defaults unless asked
    tight = ClusterSettings().tight_flush(mem_store=False)
    assert tight.topic_flush_params() == {"memCacheMsgCntInK": 1, "memCacheMsgSizeInMB": 2,
                                          "memCacheFlushIntvl": 4000, "unflushThreshold": 100,
                                          "unflushInterval": 1000}
    broker = render_cluster_files(tmp_path, ClusterPorts.pick(), tight).broker_ini.read_text()
    assert "enableMemStore=false" in broker and "logFlushMemDurMs=1000" in broker
    assert "logFlushDiskDurMs=1000" in broker


@contextlib.contextmanager
def _tight_cluster(tmp: Path) -> Iterator[LocalCluster]:
    from tubespark_testbed.config import ClusterSettings

    with LocalCluster(settings=ClusterSettings().tight_flush(), work_dir=tmp / "c") as cluster:
        yield cluster


PRESTART = {"tight_cluster": _tight_cluster}  # started ahead of this module (tubespark_testbed/prestart.py)
PRESTART_LIGHT = True  # a cluster: mostly waiting while it starts, so it may start beside another


def test_tight_flush_is_in_the_master_broker_record(prestarted):
    cluster = prestarted("tight_cluster")
    answer = cluster.master_admin("admin_query_broker_configure", brokerId=cluster.broker_id)
    record = json.dumps(answer.get("data"))
    for key, value in cluster.settings.topic_flush_params().items():
        assert f'"{key}": {value}' in record, (key, record)


def test_more_clusters_run_side_by_side_and_leave_nothing_behind(tubemq_cluster, tmp_path):
    """A CLI cluster and an in-process one start while the session cluster runs; both stop cleanly."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("TUBESPARK_KEEP_CLUSTER", None)
    cli = subprocess.Popen(
        [sys.executable, "-m", "tubespark_testbed", "start", "--json"],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "cli.err").open("wb"),
        env=env,
        cwd=REPO,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(cli.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    other = LocalCluster(keep=False)
    try:
        other.start()
        deadline = time.monotonic() + 120
        while not lines and cli.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert lines, f"CLI printed nothing; stderr:\n{(tmp_path / 'cli.err').read_text()[-3000:]}"
        info = json.loads(lines[0])

        masters = {tubemq_cluster.master_address, other.master_address, info["master_address"]}
        brokers = {tubemq_cluster.broker_address, other.broker_address, info["broker_address"]}
        assert len(masters) == 3 and len(brokers) == 3
        assert other.broker_run_status()["runStatus"] == "running"

        other_pids = set(other.pids)
        other_dir = other.work_dir
        assert len(other_pids) == 3 and other_pids <= _pids_with(str(other_dir))
        cli_jvms = _pids_with(info["work_dir"])
        assert len(cli_jvms) == 3
    finally:
        other.stop()
        cli.send_signal(signal.SIGTERM)
        try:
            cli.wait(timeout=60)
        finally:
            if cli.poll() is None:
                cli.kill()

    assert cli.returncode == 0, (tmp_path / "cli.err").read_text()[-3000:]
    assert not _pids_with(str(other_dir)), "in-process cluster left JVMs behind"
    assert not _pids_with(info["work_dir"]), "CLI cluster left JVMs behind"
    assert not other_dir.exists() and not Path(info["work_dir"]).exists()
    # the session cluster is untouched
    assert tubemq_cluster.broker_run_status()["runStatus"] == "running"
