"""``tubespark lag`` against the session cluster: exact bounds, and the group's committed offset and
backlog through the broker's admin port."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.integration.helpers import bodies, produce
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.metadata import topic_partitions


def test_lag_cli_prints_bounds_committed_and_backlog(tubemq_cluster, topic_factory) -> None:
    master, topic, group = tubemq_cluster.master_address, topic_factory(1, 1), "lag_cli_group"
    produce(master, topic, bodies([b"x%d" % i for i in range(10)]))
    (part,) = topic_partitions(master, [topic])[topic]
    broker = BrokerClient("lag-cli-test")
    try:  # the group consumed 4 of 10: register at 4*28, commit, release
        broker.register(part, group, offset=4 * 28)
        broker.unregister(part, group, consumed=True)
    finally:
        broker.close()
    expected = [part.key, "0", str(10 * 28), str(4 * 28), "6"]
    deadline = time.monotonic() + 30
    while True:  # the broker's admin API lists a group once its offsets were flushed to file (~5 s)
        done = subprocess.run([sys.executable, "-m", "tubespark.cli", "lag", "--master", master, "--group", group,
                               "--topic", topic, "--broker-web", tubemq_cluster.broker_web_url],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        if lines[1].split() == expected or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert lines[0].split() == ["partition", "min_offset", "max_offset", "committed_offset", "backlog_messages"]
    assert lines[1].split() == expected, done.stdout
    assert "total backlog: 6 messages" in done.stdout

    bare = subprocess.run([sys.executable, "-m", "tubespark.cli", "lag", "--master", master, "--group", group,
                           "--topic", topic], capture_output=True, text=True, timeout=60)
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout.splitlines()[1].split() == [part.key, "0", str(10 * 28), "?", "?"]


def test_lag_per_partition_from_query_progress(spark, tubemq_cluster, topic_factory) -> None:
    """``progress_lag(query.lastProgress)``: exact messages behind per batch, then 0 once caught up."""
    import uuid

    from tubespark.apps.lag import progress_lag

    master, topic = tubemq_cluster.master_address, topic_factory(1, 1)
    produce(master, topic, bodies([b"m%d" % i for i in range(100)]))
    name = "lag_" + uuid.uuid4().hex[:8]
    query = (spark.readStream.format("tubemq").option("master", master).option("topic", topic)
             .option("group", name).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "30")
             .load().writeStream.format("memory").queryName(name).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120), "the AvailableNow run should end"
        assert query.exception() is None, query.exception()
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        lags = [progress_lag(p) for p in batches]
        (key,) = lags[0]
        assert [lag[key] for lag in lags] == [70, 40, 10, 0], lags  # 30 a batch out of 100
        assert progress_lag(query.lastProgress) == {key: 0}
        assert progress_lag(query.lastProgress.json) == {key: 0}  # the JSON a metrics system gets
    finally:
        query.stop()
