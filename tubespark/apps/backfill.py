"""Backfills between TubeMQ and files, for ``spark-submit`` or ``python -m tubespark.apps.backfill``.

    export   read a topic's offset range and write it as parquet (or json/csv)
    publish  read parquet (or json/csv) and publish every row to a topic

Both print progress (tasks done, rows, MB, rate) while Spark works, and exit 0 only when everything
arrived: for ``export`` the files hold exactly the messages of the planned ranges; for ``publish``
the brokers acknowledged every input row. Exit 1 means "ran, but something is missing", 2 a usage or
connection error (a broker that is down included: ``export`` names it and its partitions). With
``--on-unavailable-partitions skip`` an export reads the partitions that are served, names on stderr
the ones it left out (or says it could not check), and exits 3 ("complete except what it says it left out").
Ctrl-C ends either with one line saying what was left, and exit 130: the export's files are staged beside
``--output`` and renamed into place at the end (tubespark.apps.staging), so an interrupted export leaves
``--output`` as it was; the Spark session and its JVM are stopped first (tubespark.apps.interrupt).

    spark-submit --master local[4] scripts/backfill.py export --master 10.0.0.1:8715 --topic events \\
        --starting earliest --ending latest --output /data/events_backfill
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from tubespark.apps.interrupt import EXIT_INTERRUPTED, CtrlC, end_gateway
from tubespark.apps.progress import Progress
from tubespark.apps.registry import register
from tubespark.apps.staging import HadoopFiles, StagedOutput
from tubespark.errors import TubeSparkError
from tubespark.tubemq.client.store_counts import exact_messages

if TYPE_CHECKING:  # pyspark is imported when a backfill runs: the parser works without it
    from pyspark.sql import DataFrame, SparkSession


EXIT_LEFT_OUT = 3
"""``export`` exit status when it read everything served but left out partitions of brokers that were down, or
could not check whether it did (``--on-unavailable-partitions skip`` without the master's configuration)."""

DESCRIPTION = """Backfills between TubeMQ and files, run locally or with spark-submit (scripts/backfill.py).

  export   read a topic's offset range and write it as files
  publish  read files and publish every row to a topic"""

EXIT_CODES = {
    "export": f"""exit codes:
  0    complete: the files in --output hold exactly the range's messages
  1    ran, but something is missing (fewer rows than planned, a failed Spark job)
  2    usage or connection error (bad option, --output exists, unknown topic, master unreachable, a broker down)
  {EXIT_LEFT_OUT}    with --on-unavailable-partitions skip: complete except the partitions it names, or it could not
       check that every configured partition is served
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C): nothing written, --output is as it was""",
    "publish": f"""exit codes:
  0    complete: the brokers acknowledged every row
  1    ran, but something is missing (a failed Spark job: not every row was acknowledged)
  2    usage or connection error (bad option, unknown topic, master unreachable)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C): the rows acknowledged before stay in the topic""",
}
EXIT_CODES_BOTH = """exit codes: see 'tubespark backfill export --help' and 'tubespark backfill publish --help'
(0 complete, 1 something missing, 2 usage or connection error, 130 interrupted; export also 3)"""


def _options(args: argparse.Namespace) -> dict[str, str]:
    options = {"master": args.master, "topic": args.topic}
    for flag, key in (("stream_ids", "streamIds"), ("max_records_per_partition", "maxRecordsPerPartition"),
                      ("fail_on_data_loss", "failOnDataLoss"), ("dedup_attribute", "dedupAttribute"),
                      ("master_web_url", "masterWebUrl"), ("on_unavailable_partitions", "onUnavailablePartitions")):
        value = getattr(args, flag, None)
        if value is not None:
            options[key] = str(value)
    return options


def _rows_and_bytes(frame: DataFrame) -> tuple[int, int]:
    """How many rows ``frame`` has and how many bytes their values hold."""
    from pyspark.sql import functions as F

    rows, size = frame.select(F.count("*"), F.coalesce(F.sum(F.length("value")), F.lit(0))).collect()[0]
    return rows, size


def export(spark: SparkSession, args: argparse.Namespace, ctrl_c: CtrlC | None = None) -> int:
    from tubespark.spark.batch_engine import BatchEngine
    from tubespark.tubemq.spark.adapter import TubeAdapter
    from tubespark.tubemq.spark.options import TubeMQOptions
    from tubespark.tubemq.spark.read_task import QueueRange

    ctrl = ctrl_c or CtrlC()
    spark_call = ctrl.spark_call
    options = _options(args)
    options.update(startingOffsets=args.starting, endingOffsets=args.ending)
    # Fix the ranges once, so the export and its check read exactly the same messages.
    reader = BatchEngine(TubeAdapter(TubeMQOptions.from_raw(options, mode="read"), batch=True))
    tasks = [task for task in reader.plan() if isinstance(task, QueueRange)]
    left_out = [key for keys in reader.left_out.values() for key in keys]
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}
    for task in tasks:
        key = task.ref.key
        starts[key] = min(starts.get(key, task.start), task.start)
        ends[key] = max(ends.get(key, task.end), task.end)
    if left_out:
        print(f"export: LEAVES OUT {len(left_out)} partitions, configured on brokers that do not serve them now "
              f"(--on-unavailable-partitions skip): {', '.join(left_out)}", file=sys.stderr)
    if not reader.checked:
        print("export: COULD NOT CHECK that every configured partition is served (--on-unavailable-partitions "
              "skip, and neither the master nor a web API gave the configuration): a broker that is down may be "
              "left out; set --master-web-url to check", file=sys.stderr)
    partial = bool(left_out) or not reader.checked
    if not tasks:
        print(f"export: nothing to read in {args.topic} for the given range", file=sys.stderr)
        return EXIT_LEFT_OUT if partial else 0
    # the plan first (it needs no Spark: a topic or option mistake fails before it), then the output, before any job
    staged = StagedOutput(HadoopFiles(spark), args.output, replace=args.mode == "overwrite")
    with spark_call():
        staged.check()
    options.update(startingOffsets=json.dumps(starts), endingOffsets=json.dumps(ends))
    with spark_call():
        frame = spark.read.format("tubemq").options(**options).load()
    with staged:
        with Progress(spark, "export", quiet=lambda: ctrl.requested) as progress, spark_call():
            frame.write.format(args.format).save(staged.path)
            rows, size = _rows_and_bytes(spark.read.format(args.format).load(staged.path))
        print(progress.summary(rows, size), file=sys.stderr)
        staged.commit()
    # offsets tell the count when every store's partitions share one range (docs/tubemq/brokers.md, "Several
    # partitions per store") and nothing is filtered; otherwise count what the ranges hold
    refs = {task.ref.key: task.ref for task in tasks}
    exact = None if "streamIds" in options else exact_messages({refs[k]: (starts[k], ends[k]) for k in starts})
    if exact is None:
        with spark_call():
            expected = frame.count()
    else:
        expected = exact
    if rows != expected:
        print(f"export: INCOMPLETE, {rows} rows written, {expected} messages in the range", file=sys.stderr)
        return 1
    if partial:
        what = f"the {len(left_out)} partitions left out above" if reader.checked else "what it could not check"
        print(f"export: {rows} messages of {args.topic} in {args.output}, complete except {what}", file=sys.stderr)
        return EXIT_LEFT_OUT
    print(f"export: complete, {rows} messages of {args.topic} in {args.output}", file=sys.stderr)
    return 0


def publish(spark: SparkSession, args: argparse.Namespace, ctrl_c: CtrlC | None = None) -> int:
    ctrl = ctrl_c or CtrlC()
    spark_call = ctrl.spark_call
    with spark_call():
        frame = spark.read.format(args.format).load(args.input)
        if args.value_column != "value":
            frame = frame.withColumnRenamed(args.value_column, "value")
        keep = [c for c in frame.columns if c in ("value", "streamId", "msgTime", "attributes", "partitionKey")]
        frame = frame.select(*keep)
        rows, size = _rows_and_bytes(frame)
    with Progress(spark, "publish", quiet=lambda: ctrl.requested) as progress, spark_call():
        frame.write.format("tubemq").options(**_options(args)).mode("append").save()
        print(progress.summary(rows, size), file=sys.stderr)
    print(f"publish: complete, the brokers acknowledged all {rows} rows to {args.topic}", file=sys.stderr)
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tubespark backfill", formatter_class=argparse.RawDescriptionHelpFormatter,
                                  description=DESCRIPTION, epilog=EXIT_CODES_BOTH)
    sub = top.add_subparsers(dest="action", required=True)
    for name, helptext, about in (
            ("export", "topic range -> files", "Read a topic's offset range, write it as files, then count what was "
                                               "written against the range."),
            ("publish", "files -> topic", "Read files and publish every row to a topic, waiting for every "
                                          "acknowledgement.")):
        cmd = sub.add_parser(name, help=helptext, description=about,
                             formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES[name])
        cmd.add_argument("--master", required=True, help="TubeMQ master host:port[,host:port]")
        cmd.add_argument("--topic", required=True, help="the topic to read from" if name == "export" else
                         "the topic to publish to")
        cmd.add_argument("--format", default="parquet", choices=("parquet", "json", "csv", "orc"),
                         help="the files' format (default parquet)")
        if name == "export":
            cmd.add_argument("--output", required=True, help="directory (or URI) to write the files to")
            cmd.add_argument("--starting", default="earliest", help="earliest (default) | JSON offsets")
            cmd.add_argument("--ending", default="latest", help="latest (default) | JSON offsets")
            cmd.add_argument("--stream-ids", help="only these streamIds (comma separated)")
            cmd.add_argument("--max-records-per-partition", type=int,
                             help="split a partition into Spark tasks of at most this many messages")
            cmd.add_argument("--fail-on-data-loss", choices=("true", "false"),
                             help="fail (true, default) or go on when planned data is gone")
            cmd.add_argument("--on-unavailable-partitions", choices=("fail", "skip"),
                             help="partitions on brokers that are down: fail (default) or skip them, name them and "
                                  f"exit {EXIT_LEFT_OUT}")
            cmd.add_argument("--master-web-url", help="the masters' web API, http://host:port[,...] (default: port "
                                                      "8080 of each master host): why a configured partition is "
                                                      "not served (the export learns which are configured from "
                                                      "the master itself)")
            cmd.add_argument("--mode", default="errorifexists", choices=("errorifexists", "overwrite"),
                             help="when --output exists: fail (default) or replace it (once every file is "
                                  "written: until then, and when interrupted, it stays as it was)")
        else:
            cmd.add_argument("--input", required=True, help="the files to publish (a path Spark reads)")
            cmd.add_argument("--value-column", default="value",
                             help="the column holding each message's body (default value)")
            cmd.add_argument("--dedup-attribute", help="stamp rows with a stable id in this attribute")
    return top


def backfill_session(action: str) -> SparkSession:
    """The session a backfill runs in, without Spark's console stage bar: it would interleave with the progress
    lines printed here, and PySpark turns it on for every session it launches itself (as for a shell)."""
    from pyspark.sql import SparkSession

    return (SparkSession.builder.appName(f"tubespark-backfill-{action}")
            .config("spark.ui.showConsoleProgress", "false").getOrCreate())


def interrupted_line(action: str, args: argparse.Namespace) -> str:
    """The one line Ctrl-C ends a backfill with: what it left behind."""
    if action == "export":
        return f"export: interrupted (Ctrl-C): nothing written, {args.output} is as it was"
    return (f"publish: interrupted (Ctrl-C): not every row was acknowledged; the rows acknowledged before stay in "
            f"{args.topic} (publish with --dedup-attribute so readers can drop the repeats of a second run)")


def main(argv: list[str] | None = None, *, session_factory: Callable[[], SparkSession] | None = None) -> int:
    args = parser().parse_args(argv)
    ctrl_c = CtrlC()
    try:
        with ctrl_c.installed():
            return _run(args, ctrl_c, session_factory)
    except KeyboardInterrupt:
        print(interrupted_line(args.action, args), file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace, ctrl_c: CtrlC,
         session_factory: Callable[[], SparkSession] | None) -> int:
    spark: SparkSession | None = None
    try:
        with ctrl_c.spark_call():  # a JVM starting: Ctrl-C waits for it, then stops it
            spark = (session_factory or (lambda: backfill_session(args.action)))()
        ctrl_c.spark = spark
        ctrl_c.take_back()  # the SparkContext put PySpark's own handler in place
        register(spark)
        return export(spark, args, ctrl_c) if args.action == "export" else publish(spark, args, ctrl_c)
    except TubeSparkError as exc:
        if ctrl_c.requested:
            raise KeyboardInterrupt from None
        print(f"{args.action}: FAILED: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a failed Spark job: say so briefly, exit non-zero
        if ctrl_c.requested:
            raise KeyboardInterrupt from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        print(f"{args.action}: FAILED, not everything arrived: {first}", file=sys.stderr)
        return 1
    finally:
        if spark is not None:
            ctrl_c.wait_cancelled()
            spark.stop()
        if ctrl_c.requested and session_factory is None:
            end_gateway()  # the JVM this command launched: gone before the command says it stopped


if __name__ == "__main__":
    sys.exit(main())
