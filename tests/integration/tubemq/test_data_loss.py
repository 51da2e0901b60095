"""failOnDataLoss, on a dedicated cluster whose broker deletes data one second old (like retention would)."""

from __future__ import annotations

import contextlib
import json
import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from tubespark_testbed import ClusterSettings, LocalCluster

from tests.integration.helpers import bodies, produce
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.ranges import probe_bounds

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOPIC = "expiring"
CLEANUP_PERIOD_S = 60.0  # log_cleanup_period_ms: the broker deletes expired segments once a minute (fixed delay)
READ_WINDOW_S = 30.0  # from sending the fresh messages to the first query's end, with room to spare


@dataclass(frozen=True)
class Expired:
    cluster: LocalCluster
    key: str  # the partition whose first segments the broker deleted
    cleaned_at: float  # time.monotonic() right after the cleanup pass that deleted them (within ~1 s)

    def wait_for_a_clear_minute(self) -> None:
        """Return when the broker's next cleanup pass is at least READ_WINDOW_S away.

        The fresh messages must not be a second old when a pass runs before the first query read them: it
        would delete their segment once the next one started. Passes come every CLEANUP_PERIOD_S after
        ``cleaned_at`` (plus a few ms each); if the next is too close, sleep until it is over.
        """
        passes = max(1, math.ceil((time.monotonic() - self.cleaned_at) / CLEANUP_PERIOD_S))
        next_pass = self.cleaned_at + passes * CLEANUP_PERIOD_S
        if next_pass - 2 - time.monotonic() < READ_WINDOW_S:
            time.sleep(max(0.0, next_pass + 2 + 0.1 * passes - time.monotonic()))


@contextlib.contextmanager
def _expired(_tmp: Path) -> Iterator[Expired]:
    """The cluster, with 120 messages written and then deleted by the broker's retention.

    The broker's cleanup runs once a minute, so most of this is waiting: it happens ahead of the test, in
    the background (tubespark_testbed/prestart.py).
    """
    settings = ClusterSettings(max_segment_bytes=4096, max_index_segment_bytes=28 * 20,
                               log_cleanup_period_ms=60000, default_delete_policy="delete,1s")
    with LocalCluster(settings=settings, topics=[(TOPIC, 1, 1)]) as cluster:
        master = cluster.master_address
        key = produce(master, TOPIC, bodies([f"old-{i}".encode() * 5 for i in range(120)]))[0].partition.key
        ref = produce(master, TOPIC, bodies([b"marker"]))[0].partition
        broker = BrokerClient("retention-probe")
        deadline = time.monotonic() + 150
        while probe_bounds(broker, ref, "retention-probe").min_offset == 0:  # the broker's cleanup runs each minute
            assert time.monotonic() < deadline, "the broker never deleted the expired segments"
            time.sleep(1)
        cleaned_at = time.monotonic()
        broker.close()
        yield Expired(cluster, key, cleaned_at)


PRESTART = {"expired": _expired}
PRESTART_LIGHT = True  # a cluster: mostly waiting while it starts, so it may start beside another


@pytest.fixture(scope="module")
def expired(prestarted) -> Expired:
    return prestarted("expired")


def stream_from_zero(spark, master: str, key: str, fail_on_data_loss: str):
    frame = (spark.readStream.format("tubemq").option("master", master).option("topic", TOPIC)
             .option("group", "g" + uuid.uuid4().hex[:8]).option("startingOffsets", json.dumps({key: 0}))
             .option("failOnDataLoss", fail_on_data_loss).load())
    name = "loss_" + uuid.uuid4().hex[:8]
    return name, frame.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()


def test_start_below_retention_fails_or_skips(spark, expired):
    master, key = expired.cluster.master_address, expired.key
    expired.wait_for_a_clear_minute()
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
    message = str(error.value)  # at the start now, naming the option (issue 38): before, a read task found the gap
    assert f"option startingOffsets: {key} is at 0, below the partition's first available offset" in message, message
    assert "set failOnDataLoss=false" in message


def test_a_batch_read_from_below_retention_fails_naming_the_loss_or_reads_from_the_first_offset(spark, expired, caplog):
    """The batch half of the contract case tests/integration/contract/test_start_end_rules.py cannot run on the
    session cluster (issue 38): failOnDataLoss=true fails with a DataLossError naming the partition, its first
    available offset and startingOffsets; false reads from the first available offset, with a WARNING."""
    from tests.readers import TubeBatchReader
    from tubespark.errors import DataLossError, unwrap
    from tubespark.tubemq.spark.options import TubeMQOptions

    master, key = expired.cluster.master_address, expired.key
    expired.wait_for_a_clear_minute()
    ref = produce(master, TOPIC, bodies([b"batch-marker"]))[0].partition
    broker = BrokerClient("retention-batch")
    try:
        first = probe_bounds(broker, ref, "retention-batch").min_offset
    finally:
        broker.close()
    assert first > 0, "the partition kept its first offset: nothing was removed"
    options = {"master": master, "topic": TOPIC, "startingOffsets": json.dumps({key: 0})}

    def read(**extra: str) -> list[bytes]:
        frame = spark.read.format("tubemq").options(**options, **extra).load()
        return sorted(bytes(r.value) for r in frame.select("value").collect())

    with pytest.raises(Exception) as raised:  # noqa: PT011 (Spark's wrapper: the typed error is asserted next)
        read()
    error = unwrap(raised.value)
    assert isinstance(error, DataLossError), str(raised.value)[-3000:]
    assert key in str(error) and "startingOffsets" in str(error) and str(first) in str(error), str(error)

    everything = sorted(bytes(r.value) for r in spark.read.format("tubemq").option("master", master)
                        .option("topic", TOPIC).load().select("value").collect())  # earliest: what is left
    assert b"batch-marker" in everything and not [v for v in everything if v.startswith(b"old-")]
    assert read(failOnDataLoss="false") == everything
    with caplog.at_level("WARNING"):  # Spark plans in a worker whose log this process cannot see: plan here
        TubeBatchReader(TubeMQOptions.from_raw({**options, "failOnDataLoss": "false"}, mode="read")).plan()
    assert [r for r in caplog.records if r.levelname == "WARNING" and key in r.getMessage()], caplog.text
