"""Command line for the local TubeMQ cluster.

``python -m tubespark_testbed fetch``: resolve the TubeMQ and RocketMQ server jars and
Hadoop's HDFS minicluster into the cache and make the Spark class-data-sharing archive the test suite's Spark
drivers start from (CI warm-up step).
``python -m tubespark_testbed start [--brokers N] [--topic NAME[:PARTITIONS[:STORES]]]...``: run a cluster
in the foreground, print its addresses, stop it cleanly on Ctrl-C or SIGTERM. While it runs, it takes
commands on stdin, one a line (``help`` lists them): ``kill``, ``terminate``, ``pause``, ``resume``,
``start``, ``restart`` a process by name (a broker also by id), ``add-broker [TOPIC...]``, ``status``.
``python -m tubespark_testbed demo [--seconds N]``: the streaming demo on its own cluster (``./dev demo``).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType

from tubespark_testbed import artifacts
from tubespark_testbed.errors import ClusterError
from tubespark_testbed.local import LocalCluster, parse_topic_spec


def _cmd_fetch(_: argparse.Namespace) -> int:
    lib = artifacts.ensure_artifacts(quiet=False)
    print(f"TubeMQ {artifacts.TUBEMQ_VERSION} runtime in {lib} ({len(list(lib.glob('*.jar')))} jars)")
    from tubespark_testbed import rocketmq

    jars = rocketmq.ensure_artifacts()
    print(f"RocketMQ {rocketmq.ROCKETMQ_VERSION} runtime resolved ({len(jars)} jars)")
    from tubespark_testbed import hdfs

    hdfs.ensure_artifacts()
    print(f"HDFS minicluster {hdfs.HADOOP_VERSION} resolved (shared-directory tests)")
    from tubespark_testbed import sparkjvm

    archive = sparkjvm.ensure_archive(quiet=False)
    print(f"Spark class-data-sharing archive: {archive or 'none (no PySpark or Java here)'}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from tubespark_testbed.demo import demo

    return demo(args.seconds)


class _Stop(BaseException):
    """Raised from the signal handler so start-up waits and the idle loop unwind through ``finally``."""


def _cmd_start(args: argparse.Namespace) -> int:
    def on_signal(signum: int, _frame: FrameType | None) -> None:
        raise _Stop(signum)

    # Handlers first, so a SIGTERM during the ~40 s start-up still stops every JVM started so far.
    # Start-up stays on the main thread: JVM death signals are tied to the thread that forked them.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    cluster = LocalCluster(topics=args.topic, keep=args.keep or None, work_dir=args.work_dir, brokers=args.brokers)
    try:
        cluster.start()
        brokers = [_broker_info(cluster, b.name) for b in cluster.brokers]
        info: dict[str, object] = {
            "master_address": cluster.master_address,
            "master_web_url": cluster.master_web_url,
            "broker_address": cluster.broker_address,
            "broker_web_url": cluster.broker_web_url,
            "broker_id": cluster.broker_id,
            "brokers": brokers,
            "zookeeper_address": cluster.zk_address,
            "work_dir": str(cluster.work_dir),
            "topics": [t[0] for t in cluster.initial_topics],
        }
        if args.json:
            print(json.dumps(info), flush=True)
        else:
            for key, value in info.items():
                if key != "brokers":
                    print(f"{key:18} {value}")
            for broker in brokers:
                print(f"{broker['name']:18} id {broker['broker_id']}  {broker['address']}  {broker['web_url']}")
            print("TubeMQ cluster ready; Ctrl-C to stop; 'help' lists the commands it takes.", flush=True)
        for line in sys.stdin:  # the commands; at end of input (none, or /dev/null) just keep running
            print(_command(cluster, line.split()), flush=True)
        while True:
            signal.pause()
    except _Stop:
        return 0
    finally:
        # A second signal during shutdown must not abort it half-way.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        cluster.stop()


def _broker_info(cluster: LocalCluster, name: str) -> dict[str, object]:
    node = cluster.broker(name)
    proc = cluster.process(name)
    state = "paused" if proc.paused else "running" if proc.alive() else "down"
    return {"name": node.name, "broker_id": node.broker_id, "address": node.address, "web_url": node.web_url,
            "pid": proc.pid if proc.alive() else None, "state": state}


_COMMANDS = """commands (NAME: zookeeper, master, master-2 ..., broker, broker-2 ... or a broker id):
  kill NAME          SIGKILL, as a crash; stays down until 'start NAME'
  terminate NAME     graceful stop (SIGTERM), as in a rolling restart; stays down
  pause NAME [S]     SIGSTOP (a stall: connections accepted, nothing answered); for S seconds if given
  resume NAME        SIGCONT, then wait until it serves again
  start NAME         start a killed or terminated process on its ports and data, wait until it serves
  restart NAME       kill and start again
  add-broker [TOPIC...]  one more broker (next id and 127.0.0.N address), with these topics deployed on it
  status             every broker's id, address, pid and state"""


def _command(cluster: LocalCluster, words: list[str]) -> str:
    """Run one stdin command on the running cluster; returns what to print (errors included, never raises)."""
    if not words:
        return ""
    verb, rest = words[0], words[1:]

    def target() -> str | int:
        if not rest:
            raise ClusterError(f"{verb} needs a process name (or a broker id)")
        return int(rest[0]) if rest[0].isdigit() else rest[0]

    try:
        if verb == "status":
            return "\n".join(json.dumps(_broker_info(cluster, b.name)) for b in cluster.brokers)
        if verb == "add-broker":
            return f"added {cluster.add_broker(rest)}"
        if verb == "pause" and len(rest) > 1:
            cluster.pause(target())
            time.sleep(float(rest[1]))
            cluster.resume(target())
            return f"{rest[0]} paused for {rest[1]} s, serving again"
        actions: dict[str, Callable[[str | int], object]] = {
            "kill": cluster.kill, "terminate": cluster.terminate, "pause": cluster.pause, "resume": cluster.resume,
            "start": cluster.start_again, "restart": cluster.restart}
        action = actions.get(verb)
        if action is None:
            return _COMMANDS
        action(target())
        return f"{verb} {rest[0]}: done"
    except (ClusterError, ValueError) as exc:
        return f"error: {exc}"


def main(argv: list[str] | None = None, *, prog: str = "python -m tubespark_testbed") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log start-up phases")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="download the TubeMQ and RocketMQ servers and their dependencies into the cache "
                                 "(and make the Spark class-data-sharing archive the tests use)")
    start = sub.add_parser("start", help="run ZooKeeper + master + broker(s) in the foreground")
    start.add_argument(
        "--topic",
        action="append",
        default=[],
        type=_topic_arg,
        metavar="NAME[:PARTITIONS[:STORES]]",
        help="topic to deploy before the broker starts (repeatable; defaults 1 partition, 4 stores)",
    )
    start.add_argument("--brokers", type=int, default=1, metavar="N",
                       help="brokers to run, on 127.0.0.1, 127.0.0.2 ... (default 1); topics go on all of them")
    start.add_argument("--keep", action="store_true", help="keep the work dir (logs, data) after stopping")
    start.add_argument("--work-dir", default=None, help="use this directory instead of a fresh temp dir")
    start.add_argument("--json", action="store_true", help="print the addresses as one JSON line")
    demo = sub.add_parser("demo", help="run a streaming demo on an embedded local TubeMQ cluster")
    demo.add_argument("--seconds", type=float, default=None, help="stop after this long (default: until Ctrl-C)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.command == "start" else logging.WARNING,
        format="%(asctime)s %(message)s",
        stream=sys.stderr,
    )
    try:
        return {"fetch": _cmd_fetch, "start": _cmd_start, "demo": _cmd_demo}[args.command](args)
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def demo_main(argv: list[str] | None = None) -> int:
    """``tubespark demo [--seconds N]``: the connector's command line finds this through the entry point
    ``tubespark.commands`` of this distribution (``pip install 'tubespark[cluster]'``), so the connector
    offers the demo without importing the test bed."""
    return main(["demo", *(sys.argv[1:] if argv is None else argv)], prog="tubespark")


def _topic_arg(value: str) -> str:
    try:
        parse_topic_spec(value)
    except ClusterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return value


if __name__ == "__main__":
    sys.exit(main())
