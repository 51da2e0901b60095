"""The local cluster's several brokers before any JVM starts: addresses, ids, ports, configs, commands."""

from __future__ import annotations

import pytest
from tubespark_testbed import ClusterPorts, ClusterSettings, LocalCluster
from tubespark_testbed.__main__ import _command
from tubespark_testbed.config import broker_host, render_cluster_files
from tubespark_testbed.errors import ClusterError


def test_each_broker_gets_its_own_address_id_ports_and_data(tmp_path):
    ports = ClusterPorts.pick(2, brokers=3)
    assert len(ports.brokers) == 3 and len({p for b in ports.brokers for p in b} | {p for m in ports.masters
                                                                                  for p in m}) == 15
    files = render_cluster_files(tmp_path, ports, ClusterSettings(broker_id=7))
    assert [f.name for f in files.broker_inis] == ["broker.ini", "broker-2.ini", "broker-3.ini"]
    assert files.broker_ini == files.broker_inis[0]  # the single-broker name stays the first broker's
    for index, (ini, (rpc, web, prom)) in enumerate(zip(files.broker_inis, ports.brokers, strict=True)):
        text = ini.read_text()
        data = "broker-data" if index == 0 else f"broker-{index + 1}-data"
        for line in (f"brokerId={7 + index}", f"hostName=127.0.0.{index + 1}", f"port={rpc}", f"webPort={web}",
                     f"promHttpPort={prom}", f"primaryPath={tmp_path / data}"):
            assert f"\n{line}\n" in text, (ini.name, line)
        assert (tmp_path / data).is_dir()
        assert "masterAddressList=" + ",".join(f"127.0.0.1:{m[0]}" for m in ports.masters) in text
    more = ports.with_another_broker()
    assert more.brokers[:3] == ports.brokers and len(more.brokers) == 4


def test_broker_counts_and_tls_are_checked_before_anything_starts():
    assert broker_host(0) == "127.0.0.1" and broker_host(2) == "127.0.0.3"
    for bad in (0, 17):
        with pytest.raises(ClusterError, match="brokers must be 1-16"):
            LocalCluster(brokers=bad)
    with pytest.raises(ClusterError, match="TLS with one broker only"):
        LocalCluster(brokers=2, settings=ClusterSettings(tls_keystore="k.jks", tls_truststore="t.jks"))
    cluster = LocalCluster(brokers=3)
    assert cluster.broker_names == ["broker", "broker-2", "broker-3"]
    assert cluster.jvm_flags("broker-3") == cluster.jvm_flags("broker")  # every broker runs like the first


class _Recorder:
    """Stands in for a running LocalCluster: records what the commands ask of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def __getattr__(self, name: str):
        def call(*args: object) -> str:
            self.calls.append((name, args[0] if args else None))
            if name == "kill" and args[0] == "nobody":
                raise ClusterError("no process 'nobody' in this cluster")
            return "broker-4"

        return call


def test_stdin_commands_of_a_running_cluster():
    cluster = _Recorder()
    assert _command(cluster, ["kill", "broker-2"]) == "kill broker-2: done"  # type: ignore[arg-type]
    assert _command(cluster, ["pause", "3"]) == "pause 3: done"  # type: ignore[arg-type]
    assert _command(cluster, ["start", "broker-2"]) == "start broker-2: done"  # type: ignore[arg-type]
    assert _command(cluster, ["add-broker", "events"]) == "added broker-4"  # type: ignore[arg-type]
    assert cluster.calls == [("kill", "broker-2"), ("pause", 3), ("start_again", "broker-2"),
                             ("add_broker", ["events"])]
    assert _command(cluster, ["kill", "nobody"]).startswith("error: no process")  # type: ignore[arg-type]
    assert _command(cluster, ["kill"]) == "error: kill needs a process name (or a broker id)"  # type: ignore[arg-type]
    assert "terminate NAME" in _command(cluster, ["help"])  # type: ignore[arg-type]
    assert _command(cluster, []) == ""  # type: ignore[arg-type]


def _stack_whose_starts_fail(failures: list[str]):
    """A RocketMQ stack whose broker start raises each of ``failures`` in turn, then succeeds (no JVM starts)."""
    from tubespark_testbed.rocketmq import RocketMQStack

    stack = object.__new__(RocketMQStack)
    tried: list[tuple[int, bool]] = []

    def start(node) -> None:
        tried.append((node.port, node.directory.exists()))
        node.directory.mkdir(parents=True, exist_ok=True)
        (node.directory / "store").write_text("the failed start's files")
        if failures:
            raise ClusterError(failures.pop(0))

    stack._start_broker = start  # type: ignore[method-assign]
    return stack, tried


def test_a_rocketmq_broker_that_lost_a_port_starts_again_on_new_ports_in_a_fresh_directory(tmp_path):
    from tubespark_testbed.rocketmq import BrokerNode

    bind = "broker-a-master exited with code 255; its log: java.net.BindException: Address already in use"
    stack, tried = _stack_whose_starts_fail([bind, bind])
    node = BrokerNode("broker-a", 0, 40000, tmp_path / "broker-a")
    stack._start_new_broker(node)
    assert len(tried) == 3 and len({port for port, _ in tried}) == 3, tried  # new ports each time
    assert [existed for _, existed in tried] == [False, False, False], "each start began in an empty directory"
    assert node.port == tried[-1][0]

    stack, tried = _stack_whose_starts_fail([bind, bind, bind])
    with pytest.raises(ClusterError, match="Address already in use"):
        stack._start_new_broker(BrokerNode("broker-a", 0, 40000, tmp_path / "again"))
    assert len(tried) == 3  # gives up after its tries

    stack, tried = _stack_whose_starts_fail(["broker-a-master exited with code 1: no such class"])
    with pytest.raises(ClusterError, match="no such class"):
        stack._start_new_broker(BrokerNode("broker-a", 0, 40000, tmp_path / "other"))
    assert len(tried) == 1  # any other failure is not retried


_BROKER_STAND_IN = """
import pathlib, socket, sys, time
port = int(pathlib.Path(sys.argv[1]).read_text())
first = pathlib.Path(sys.argv[2])
listen = socket.create_server(("127.0.0.1", port))
if not first.exists():
    first.write_text("started once")
    time.sleep(1.0)  # the listen port is open a while before the fast port fails
    print("java.lang.IllegalStateException: Failed to bind to 127.0.0.1:%d" % (port - 2))
    print("Caused by: java.net.BindException: Address already in use", flush=True)
    sys.exit(255)
fast = socket.create_server(("127.0.0.1", port - 2))
time.sleep(120)
"""


def test_a_rocketmq_broker_that_opened_its_listen_port_but_lost_its_fast_port_starts_again(tmp_path):
    """A real process stands in for the broker JVM: it opens the listen port, then exits on the fast port
    (L-2) as the broker does when another process bound it first. The start must not count until both are open,
    or the stack goes on to wait for a registration that never comes (CI, test_failover's stack)."""
    import sys

    from tubespark_testbed.rocketmq import BrokerNode, RocketMQStack, _free_triple

    stack = object.__new__(RocketMQStack)
    stack._broker_conf = lambda node: str(node.port)  # type: ignore[method-assign]
    stack._command = lambda main, conf, flags, home: [  # type: ignore[method-assign]
        sys.executable, "-c", _BROKER_STAND_IN, str(conf), str(tmp_path / "first-start")]
    stack.diagnostics = lambda node: node.process.diagnostics()  # type: ignore[method-assign]
    node = BrokerNode("broker-a", 0, _free_triple(), tmp_path / "broker-a")
    first_port = node.port
    try:
        stack._start_new_broker(node)
        assert node.port != first_port, "the start on the lost port must not have counted"
        assert node.process is not None and node.process.alive()
    finally:
        if node.process is not None and node.process.proc is not None:
            node.process.proc.kill()
            node.process.proc.wait(10)
