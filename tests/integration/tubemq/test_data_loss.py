"""failOnDataLoss, on a dedicated cluster whose broker deletes data one second old (like retention would)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from pyspark.errors import StreamingQueryException
from tubespark_testbed import ClusterSettings, LocalCluster

from tests.integration.helpers import bodies, produce
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.ranges import probe_bounds

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOPIC = "expiring"


@pytest.fixture(scope="module")
def retention_cluster():
    settings = ClusterSettings(max_segment_bytes=4096, max_index_segment_bytes=28 * 20,
                               log_cleanup_period_ms=60000, default_delete_policy="delete,1s")
    with LocalCluster(settings=settings, topics=[(TOPIC, 1, 1)]) as cluster:
        yield cluster


def stream_from_zero(spark, master: str, key: str, fail_on_data_loss: str):
    frame = (spark.readStream.format("tubemq").option("master", master).option("topic", TOPIC)
             .option("group", "g" + uuid.uuid4().hex[:8]).option("startingOffsets", json.dumps({key: 0}))
             .option("failOnDataLoss", fail_on_data_loss).load())
    name = "loss_" + uuid.uuid4().hex[:8]
    return name, frame.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()


def test_start_below_retention_fails_or_skips(spark, retention_cluster):
    master = retention_cluster.master_address
    key = produce(master, TOPIC, bodies([f"old-{i}".encode() * 5 for i in range(120)]))[0].partition.key
    ref = produce(master, TOPIC, bodies([b"marker"]))[0].partition
    broker = BrokerClient("retention-probe")
    deadline = time.monotonic() + 150
    while probe_bounds(broker, ref, "retention-probe").min_offset == 0:  # the broker's cleanup runs each minute
        assert time.monotonic() < deadline, "the broker never deleted the expired segments"
        time.sleep(1)
    broker.close()
    fresh = [f"new-{i}".encode() for i in range(20)]
    produce(master, TOPIC, bodies(fresh))

    name, query = stream_from_zero(spark, master, key, "false")
    assert query.awaitTermination(120)
    assert query.exception() is None
    rows = [r.value for r in spark.sql(f"select value from {name}").collect()]
    assert not [v for v in rows if v.startswith(b"old-")], "expired data cannot come back"
    assert sorted(rows) == sorted(fresh), "with failOnDataLoss=false the query skips the gap and goes on"

    _name, failing = stream_from_zero(spark, master, key, "true")
    with pytest.raises(StreamingQueryException) as error:
        failing.awaitTermination(120)
    message = str(error.value)
    assert "offsets [0, " in message and f"of {key} are gone" in message
    assert "set failOnDataLoss=false" in message
