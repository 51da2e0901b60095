"""The common mistakes each fail with one line that says what is wrong and how to fix it (issue 16).

A wrong master port (nothing listens there, or something that is no master does), a topic that is not
deployed, a stream without ``group`` and a topic whose broker is down. The user meets them in the
text of the exception ``spark.read...load()``, a write or a streaming query raises, where Spark wraps
our error in its own trace: each test checks that text for the line, as the user sees it.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from tubespark_testbed.ports import free_ports

from tubespark.errors import UnknownTopicError, unwrap
from tubespark.tubemq.client.metadata import topic_partitions

pytestmark = [pytest.mark.integration, pytest.mark.spark]

FAST = {"requestTimeoutMs": "2000", "connectTimeoutMs": "1000", "assignmentTimeoutMs": "8000"}
CHECK_MASTER = ("check the master address (the `master` option, `--master`): host:port of the master's RPC "
                "port, 8715 by default, not its web port (8080) nor a broker's port (8123)")
CHECK_TOPIC = ("check the `topic` option, or deploy the topic on the cluster first (the master serves a new "
               "topic to clients about 30 s after it is added)")


def stream_failure(spark, master: str, topic: str, **options: str) -> str:
    """The text of the failure of an AvailableNow query reading ``topic`` (of its start or its run)."""
    reader = spark.readStream.format("tubemq").option("master", master).option("topic", topic)
    query = (reader.options(**{**FAST, **options}).load().writeStream.format("memory")
             .queryName("mistake_" + uuid.uuid4().hex[:8]).trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)  # raises the query's failure
    except Exception as exc:  # noqa: BLE001 - its text is what is checked
        return str(exc)
    finally:
        query.stop()
    raise AssertionError(f"the query should have failed: {query.exception()}")


def batch_failure(spark, master: str, topic: str, options: dict[str, str] = FAST) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011 - the text is what is checked
        spark.read.format("tubemq").option("master", master).option("topic", topic).options(**options).load().count()
    return str(info.value)


def write_failure(spark, master: str, topic: str, options: dict[str, str] = FAST) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011
        (spark.range(3).selectExpr("CAST(id AS STRING) AS value").write.format("tubemq")
         .option("master", master).option("topic", topic).options(**options).mode("append").save())
    return str(info.value)


def last_line(text: str) -> str:
    """Our error's line: the traceback Spark embeds ends with ``module.ErrorClass: message``."""
    lines = [line for line in text.splitlines() if line.startswith("tubespark.")]
    assert lines, text[-3000:]
    return lines[-1]


def test_nothing_listens_at_the_master_address(spark):
    """A master address that never answered fails each path within seconds (issue 37 part 4: the one rule of
    core/outage.py; 3x the 10 s goal), with the typed error naming `master` and the master's own advice."""
    master = f"127.0.0.1:{free_ports(1)[0]}"
    expected = (f"the TubeMQ master at {master} (option `master`) never answered in this process",
                f"no TubeMQ master answers at {master} (connection refused: nothing listens there): {CHECK_MASTER}",
                "check the `master` option")
    for fail in (lambda: stream_failure(spark, master, "events_x", group="g_" + uuid.uuid4().hex[:6]),
                 lambda: batch_failure(spark, master, "events_x"), lambda: write_failure(spark, master, "events_x")):
        started = time.monotonic()
        line = last_line(fail())
        assert time.monotonic() - started < 30
        assert line.startswith("tubespark.errors.NeverAnsweredError: ") and all(part in line for part in expected), line


def test_the_master_address_names_a_broker_or_a_web_port(spark, tubemq_cluster):
    broker = tubemq_cluster.broker_address
    assert last_line(batch_failure(spark, broker, "events_x")) == (
        f"tubespark.tubemq.errors.NotAMasterError: no TubeMQ master at {broker} (a TubeMQ broker answered, not a "
        f"master): {CHECK_MASTER}")
    web = tubemq_cluster.master_web_url.removeprefix("http://")
    assert last_line(write_failure(spark, web, "events_x")) == (
        f"tubespark.tubemq.errors.NotAMasterError: no TubeMQ master at {web} (an HTTP server answered, not TubeMQ's "
        f"RPC protocol: a web port): {CHECK_MASTER}")


@pytest.mark.quiet  # bounds a latency: ./dev test's other lane waits while it runs
def test_topic_not_deployed(spark, tubemq_cluster, capsys):
    """Every path fails an unknown topic within 3 s with the stream's line (issue 25 item 6: a batch read took
    ~30 s, a write ~20 s, ``backfill export`` ~40 s and ``tubespark lag`` ~60 s, saying "does not accept
    publishing" for reads): they learn partitions as a producer, which the master never tells "no such topic"."""
    from tubespark.apps.backfill import export, parser
    from tubespark.cli import main as cli_main

    master = tubemq_cluster.master_address
    topic = "never_deployed_" + uuid.uuid4().hex[:8]

    def timed(fail) -> tuple[str, float]:
        started = time.monotonic()
        text = fail()
        return text, time.monotonic() - started

    def export_failure() -> str:
        args = parser().parse_args(["export", "--master", master, "--topic", topic, "--output", "/nonexistent"])
        with pytest.raises(UnknownTopicError) as info:
            export(spark, args)
        return f"tubespark.errors.UnknownTopicError: {info.value}"

    def lag_failure() -> str:
        capsys.readouterr()
        assert cli_main(["lag", "--master", master, "--group", "g_lag", "--topic", topic,
                         "--broker-web", tubemq_cluster.broker_web_url]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("tubespark: "), err
        return "tubespark.errors.UnknownTopicError: " + err.removeprefix("tubespark: ")

    paths = {"stream": lambda: stream_failure(spark, master, topic, group="g_" + uuid.uuid4().hex[:6]),
             "batch read": lambda: batch_failure(spark, master, topic, {}),  # default timeouts, as a user has
             "write": lambda: write_failure(spark, master, topic, {}),
             "backfill export": export_failure, "tubespark lag": lag_failure}
    results = {name: timed(fail) for name, fail in paths.items()}
    print({name: f"{seconds:.2f} s" for name, (_, seconds) in results.items()})
    error = unwrap(RuntimeError(results["stream"][0]))  # the StreamingQueryException's text: the typed error back
    assert type(error) is UnknownTopicError and str(error).endswith(CHECK_TOPIC), results["stream"][0]
    line = last_line(results["stream"][0])
    assert line.startswith(f"tubespark.errors.UnknownTopicError: TubeMQ error 431: topic {topic} is not deployed on "
                           f"the TubeMQ cluster of master {master} (the master says: "), line
    assert line.endswith(CHECK_TOPIC), line
    for name, (text, seconds) in results.items():
        assert last_line(text) == line, (name, text[-3000:])
        # the goal is about a second (printed above); the regression guarded took 20-60 s (a wait for the topic to
        # appear): a bound of 5x the 3 s goal, so a busy machine does not fail it (issue 39 part 6)
        assert seconds <= 15.0, (name, seconds)


def assert_no_partition(line: str, topic: str, master: str) -> None:
    """A deployed topic whose only broker is down: the master lists no partition of it (reads and the sink
    learn a topic as a producer does)."""
    assert line.startswith(f"tubespark.errors.UnknownTopicError: TubeMQ error 403: topic {topic} has no partition to "
                           f"serve on the TubeMQ cluster of master {master} (none listed within "), line
    assert line.endswith("though the master has it deployed: its brokers are down or offline, or it is closed to "
                         "publishing there (tubespark learns a topic's partitions as a producer does, for reads too); "
                         "check that its brokers run and accept the topic"), line


def test_stream_without_group(spark, tubemq_cluster, topic_factory):
    text = stream_failure(spark, tubemq_cluster.master_address, topic_factory(1, 1))
    assert last_line(text).startswith(
        'tubespark.errors.OptionError: option group is required: add .option("group", ...). Consumer group.'), text
    assert "UnboundLocalError" not in text  # PySpark's runner, had the reader not been created


def test_broker_down(spark, tubemq_cluster, topic_factory):
    """The topic's only broker is down: the master lists none of its partitions, and reads and writes say so. A
    batch read learns the configured partitions from the master's RPC port (issue 37 part 2), so it names the
    broker and its partition."""
    master = tubemq_cluster.master_address
    topic = topic_factory(1, 1)
    tubemq_cluster.kill("broker")
    try:
        deadline = time.monotonic() + 90
        while True:  # the master drops a dead broker's partitions once its heartbeats stop
            try:
                topic_partitions(master, [topic], timeout_s=1)
            except UnknownTopicError:
                break
            assert time.monotonic() < deadline, "the master kept listing the dead broker's partitions"
            time.sleep(1)
        batch = last_line(batch_failure(spark, master, topic))
        assert batch.startswith(f"tubespark.errors.PartitionsUnavailableError: batch read of {topic}: 1 of its 1 "
                                f"partitions are on brokers that do not serve them now"), batch
        assert "broker 1 (" in batch and f"1:{topic}:0" in batch and "onUnavailablePartitions=skip" in batch, batch
        assert_no_partition(last_line(write_failure(spark, master, topic)), topic, master)
        # an AvailableNow stream gets no partition from the master: it must not end "successfully" unread
        text = stream_failure(spark, master, topic, group="g" + uuid.uuid4().hex[:8], assignmentTimeoutMs="3000")
        assert_no_partition(last_line(text), topic, master)
    finally:  # the session cluster's next user waits until the broker serves again (30 s, the master's wait_sub)
        tubemq_cluster.start_again("broker", wait=False)


def test_typed_errors_catches_each_path_by_class(spark, tubemq_cluster):
    """Issue 39 part 4: ``except OptionError`` / ``except UnknownTopicError`` caught none of Spark's wrappers. Inside
    ``tubespark.typed_errors()`` (or a function it decorates) a batch read, a write and a stream (failing in
    ``awaitTermination`` and in ``processAllAvailable``) raise the typed error, Spark's exception as its cause."""
    import tubespark
    from tubespark.errors import OptionError

    master = tubemq_cluster.master_address
    topic = "never_deployed_" + uuid.uuid4().hex[:8]

    def caught_cause(caught: pytest.ExceptionInfo) -> BaseException:
        cause = caught.value.__cause__
        assert cause is not None and not isinstance(cause, tubespark.TubeSparkError), repr(cause)
        assert type(unwrap(cause)) is type(caught.value)  # the same error, rebuilt from Spark's text
        return cause

    read = spark.read.format("tubemq").option("master", master).option("topic", topic)
    with pytest.raises(OptionError, match=r"^option maxRecordsPerPartition='0': expected a positive integer") as bad, \
            tubespark.typed_errors():
        read.option("maxRecordsPerPartition", "0").load().count()
    assert type(caught_cause(bad)).__name__ == "AnalysisException"

    @tubespark.typed_errors
    def write() -> None:
        (spark.range(3).selectExpr("CAST(id AS STRING) AS value").write.format("tubemq").option("master", master)
         .option("topic", topic).mode("append").save())

    with pytest.raises(UnknownTopicError, match=re.escape(CHECK_TOPIC)) as unknown:
        write()
    caught_cause(unknown)

    def stream(**options: str):
        return (spark.readStream.format("tubemq").option("master", master).option("topic", topic)
                .options(**{**FAST, **options}).load().writeStream.format("memory")
                .queryName("typed_" + uuid.uuid4().hex[:8]).trigger(availableNow=True).start())

    query = stream(group="g_" + uuid.uuid4().hex[:6])
    try:
        with pytest.raises(UnknownTopicError) as failed, tubespark.typed_errors():
            query.awaitTermination(120)
    finally:
        query.stop()
    assert type(caught_cause(failed)).__name__ == "StreamingQueryException"
    query = stream()  # no group: its reader refuses the options once the query runs
    try:
        with pytest.raises(OptionError, match=r"^option group is required"), tubespark.typed_errors():
            query.processAllAvailable()
    finally:
        query.stop()
