"""``tubespark`` command line: backfills and a consumer group's lag.

    tubespark backfill export|publish ...   # see tubespark.tubemq.backfill
    tubespark lag --master M --group G --topic T [--broker-web URL]   # per-partition backlog

The demo on an embedded cluster is ``python -m tubespark_testbed demo`` (``./dev demo``): the test bed
starts JVMs, which the connector itself never does.
"""

from __future__ import annotations

import argparse
import logging
import sys

from tubespark.errors import TubeSparkError


def lag(args: argparse.Namespace) -> int:
    from tubespark.tubemq.spark.monitoring import format_lag_table, group_lag

    rows = group_lag(args.master, args.group, [t.strip() for t in args.topic.split(",") if t.strip()],
                     broker_web=args.broker_web)
    print(format_lag_table(rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tubespark", description="Spark <-> Apache InLong TubeMQ")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("backfill", help="export a topic range to files, or publish files to a topic",
                   add_help=False)
    lag_cmd = sub.add_parser("lag", help="per-partition min/max offsets and a consumer group's backlog")
    lag_cmd.add_argument("--master", required=True, help="TubeMQ master host:port[,host:port]")
    lag_cmd.add_argument("--group", required=True, help="the consumer group")
    lag_cmd.add_argument("--topic", required=True, help="topic(s), comma separated")
    lag_cmd.add_argument("--broker-web", default=None,
                         help="the broker's HTTP admin URL (http://host:webPort), to show committed offsets")
    args, rest = parser.parse_known_args(argv)
    if args.command == "backfill":
        from tubespark.tubemq.backfill import main as backfill

        return backfill(rest)
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
