"""Command line for the local TubeMQ cluster.

``python -m tubespark_testbed fetch``: resolve the TubeMQ and RocketMQ server jars into the cache (CI warm-up step).
``python -m tubespark_testbed start [--topic NAME[:PARTITIONS[:STORES]]]...``: run a cluster in the
foreground, print its addresses, stop it cleanly on Ctrl-C or SIGTERM.
``python -m tubespark_testbed demo [--seconds N]``: the streaming demo on its own cluster (``./dev demo``).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
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
    cluster = LocalCluster(topics=args.topic, keep=args.keep or None, work_dir=args.work_dir)
    try:
        cluster.start()
        info = {
            "master_address": cluster.master_address,
            "master_web_url": cluster.master_web_url,
            "broker_address": cluster.broker_address,
            "broker_web_url": cluster.broker_web_url,
            "broker_id": cluster.broker_id,
            "zookeeper_address": cluster.zk_address,
            "work_dir": str(cluster.work_dir),
            "topics": [t[0] for t in cluster.initial_topics],
        }
        if args.json:
            print(json.dumps(info), flush=True)
        else:
            for key, value in info.items():
                print(f"{key:18} {value}")
            print("TubeMQ cluster ready; Ctrl-C to stop.", flush=True)
        while True:
            signal.pause()
    except _Stop:
        return 0
    finally:
        # A second signal during shutdown must not abort it half-way.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tubespark_testbed", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log start-up phases")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="download the TubeMQ and RocketMQ servers and their dependencies into the cache")
    start = sub.add_parser("start", help="run ZooKeeper + master + broker in the foreground")
    start.add_argument(
        "--topic",
        action="append",
        default=[],
        type=_topic_arg,
        metavar="NAME[:PARTITIONS[:STORES]]",
        help="topic to deploy before the broker starts (repeatable; defaults 1 partition, 4 stores)",
    )
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
    return main(["demo", *(sys.argv[1:] if argv is None else argv)])


def _topic_arg(value: str) -> str:
    try:
        parse_topic_spec(value)
    except ClusterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return value


if __name__ == "__main__":
    sys.exit(main())
