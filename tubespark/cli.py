"""``tubespark`` command line: backfills and a consumer group's lag.

    tubespark backfill export|publish ...   # see tubespark.apps.backfill
    tubespark lag --master M --group G --topic T [--broker-web URL]   # per-partition backlog

    tubespark demo [--seconds N]            # streaming demo on an embedded local cluster (tubespark[cluster])

The demo lives in the test bed (``tubespark_testbed``, the ``cluster`` extra): it starts JVMs, which the
connector itself never does. The connector finds it as a plugin, the entry point ``demo`` of the group
``tubespark.commands``, and never imports the test bed by name.
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import entry_points

from tubespark.errors import TubeSparkError


def lag(args: argparse.Namespace) -> int:
    from tubespark.apps.group_lag import format_lag_table, group_lag

    rows = group_lag(args.master, args.group, [t.strip() for t in args.topic.split(",") if t.strip()],
                     broker_web=args.broker_web)
    print(format_lag_table(rows, group=args.group, broker_web=bool(args.broker_web)))
    return 0


PLUGIN_GROUP = "tubespark.commands"


def plugin(name: str, argv: list[str]) -> int:
    """Run the command ``name`` another installed distribution provides (``demo``: tubespark[cluster])."""
    found = entry_points(group=PLUGIN_GROUP, name=name)
    if not found:
        print(f"tubespark {name}: not installed here. It comes with the local TubeMQ cluster: "
              f"pip install 'tubespark[cluster]' (which also needs Java 17+ and Maven on the PATH).",
              file=sys.stderr)
        return 2
    command = next(iter(found)).load()
    return int(command(argv))


def version_text() -> str:
    """``tubespark --version``: the release and which hot path each decoder uses in this installation."""
    from tubespark import __version__
    from tubespark.tubemq.wire.twin import HOT_PATH

    return f"tubespark {__version__}\nTubeMQ wire hot path (fetch decoding, sends): {HOT_PATH}"


class _Version(argparse.Action):
    """``--version``, computed only when asked (it imports the wire decoders)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(version_text())
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tubespark", description="Spark <-> Apache InLong TubeMQ")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print the version and which hot path (compiled or pure-python) is in use")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("backfill", help="export a topic range to files, or publish files to a topic",
                   add_help=False)
    sub.add_parser("demo", help="streaming demo on an embedded local TubeMQ cluster (pip install 'tubespark[cluster]')",
                   add_help=False)
    lag_cmd = sub.add_parser("lag", help="per-partition min/max offsets and a consumer group's backlog")
    lag_cmd.add_argument("--master", required=True, help="TubeMQ master host:port[,host:port]")
    lag_cmd.add_argument("--group", required=True, help="the consumer group")
    lag_cmd.add_argument("--topic", required=True, help="topic(s), comma separated")
    lag_cmd.add_argument("--broker-web", default=None,
                         help="the broker's HTTP admin URL (http://host:webPort), to show committed offsets")
    args, rest = parser.parse_known_args(argv)
    if args.command == "backfill":
        from tubespark.apps.backfill import main as backfill

        return backfill(rest)
    if args.command == "demo":
        return plugin("demo", rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return lag(args)
    except TubeSparkError as exc:
        print(f"tubespark: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
