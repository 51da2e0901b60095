"""The common mistakes each fail with one line that says what is wrong and how to fix it (issue 16).

A wrong master port (nothing listens there, or something that is no master does), a topic that is not
deployed, a stream without ``group`` and a topic whose broker is down. The user meets them in the
text of the exception ``spark.read...load()``, a write or a streaming query raises, where Spark wraps
our error in its own trace: each test checks that text for the line, as the user sees it.
"""

from __future__ import annotations

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


def batch_failure(spark, master: str, topic: str) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011 - the text is what is checked
        spark.read.format("tubemq").option("master", master).option("topic", topic).options(**FAST).load().count()
    return str(info.value)


def write_failure(spark, master: str, topic: str) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011
        (spark.range(3).selectExpr("CAST(id AS STRING) AS value").write.format("tubemq")
         .option("master", master).option("topic", topic).options(**FAST).mode("append").save())
    return str(info.value)


def last_line(text: str) -> str:
    """Our error's line: the traceback Spark embeds ends with ``module.ErrorClass: message``."""
    lines = [line for line in text.splitlines() if line.startswith("tubespark.")]
    assert lines, text[-3000:]
    return lines[-1]


def test_nothing_listens_at_the_master_address(spark):
    master = f"127.0.0.1:{free_ports(1)[0]}"
    expected = (f"tubespark.tubemq.errors.NoMasterAvailableError: no TubeMQ master answers at {master} "
                f"(connection refused: nothing listens there): {CHECK_MASTER}")
    assert last_line(stream_failure(spark, master, "events_x", group="g_" + uuid.uuid4().hex[:6])) == expected
    assert last_line(batch_failure(spark, master, "events_x")) == expected
    assert last_line(write_failure(spark, master, "events_x")) == expected


def test_the_master_address_names_a_broker_or_a_web_port(spark, tubemq_cluster):
    broker = tubemq_cluster.broker_address
    assert last_line(batch_failure(spark, broker, "events_x")) == (
        f"tubespark.tubemq.errors.NotAMasterError: no TubeMQ master at {broker} (a TubeMQ broker answered, not a "
        f"master): {CHECK_MASTER}")
    web = tubemq_cluster.master_web_url.removeprefix("http://")
    assert last_line(write_failure(spark, web, "events_x")) == (
        f"tubespark.tubemq.errors.NotAMasterError: no TubeMQ master at {web} (an HTTP server answered, not TubeMQ's "
        f"RPC protocol: a web port): {CHECK_MASTER}")


def test_topic_not_deployed(spark, tubemq_cluster):
    master = tubemq_cluster.master_address
    topic = "never_deployed_" + uuid.uuid4().hex[:8]
    text = stream_failure(spark, master, topic, group="g_" + uuid.uuid4().hex[:6])
    error = unwrap(RuntimeError(text))  # the StreamingQueryException's text: the typed error back from it
    assert type(error) is UnknownTopicError and str(error).endswith(CHECK_TOPIC), text
    line = last_line(text)
    assert line.startswith(f"tubespark.errors.UnknownTopicError: TubeMQ error 431: topic {topic} is not deployed on "
                           f"the TubeMQ cluster of master {master} (the master says: "), line
    assert line.endswith(CHECK_TOPIC), line
    for line in (last_line(batch_failure(spark, master, topic)), last_line(write_failure(spark, master, topic))):
        assert_no_partition(line, topic, master)


def assert_no_partition(line: str, topic: str, master: str) -> None:
    """The batch read's and the sink's line: the master lists no partition (they learn a topic as a producer)."""
    assert line.startswith(f"tubespark.errors.UnknownTopicError: TubeMQ error 403: topic {topic} has no partition to "
                           f"serve on the TubeMQ cluster of master {master} (none listed within "), line
    assert line.endswith(f"it is not deployed, its brokers are down or offline, or it does not accept publishing; "
                         f"{CHECK_TOPIC}, and that its brokers run"), line


def test_stream_without_group(spark, tubemq_cluster, topic_factory):
    text = stream_failure(spark, tubemq_cluster.master_address, topic_factory(1, 1))
    assert last_line(text).startswith(
        'tubespark.errors.OptionError: option group is required: add .option("group", ...). Consumer group.'), text
    assert "UnboundLocalError" not in text  # PySpark's runner, had the reader not been created


def test_broker_down(spark, tubemq_cluster, topic_factory):
    """The topic's only broker is down: the master lists none of its partitions, and reads and writes say so."""
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
        assert_no_partition(last_line(batch_failure(spark, master, topic)), topic, master)
        assert_no_partition(last_line(write_failure(spark, master, topic)), topic, master)
        # an AvailableNow stream gets no partition from the master: it must not end "successfully" unread
        text = stream_failure(spark, master, topic, group="g" + uuid.uuid4().hex[:8], assignmentTimeoutMs="3000")
        assert_no_partition(last_line(text), topic, master)
    finally:
        tubemq_cluster.restart("broker")
