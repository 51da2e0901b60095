"""The sink: every row of a batch write and of a streaming write lands in the broker exactly once
(read back with the broker's own client)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.integration.contract.brokers import Broker

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_batch_and_streaming_writes_land_every_row_once(spark, broker: Broker, tmp_path):
    topic = broker.new_topic()
    batch = spark.range(300, numPartitions=3).selectExpr("format_string('batch-%05d', id) AS value")
    batch.write.format(broker.format).options(**broker.connection(), topic=topic).mode("append").save()

    source = tmp_path / "in"
    spark.range(200, numPartitions=2).selectExpr("format_string('stream-%05d', id) AS value").write.parquet(
        str(source))
    query = (spark.readStream.schema("value string").parquet(str(source)).writeStream.format(broker.format)
             .options(**broker.connection(), topic=topic).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180), "the streaming write did not end"
    assert query.exception() is None, query.exception()

    landed = Counter(broker.held_values(topic))
    expected = {f"batch-{i:05d}".encode() for i in range(300)} | {f"stream-{i:05d}".encode() for i in range(200)}
    assert set(landed) == expected
    assert max(landed.values()) == 1, [v for v, n in landed.items() if n > 1][:5]
