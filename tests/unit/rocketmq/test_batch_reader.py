"""The RocketMQ batch reader's executor side."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

from tests.readers import RocketMQBatchReader
from tubespark.rocketmq.spark.options import RocketMQOptions


def test_a_read_that_plans_nothing_returns_no_rows():
    # A plan with no range (empty queues, startingOffsets=latest) makes PySpark run one task anyway,
    # handing read() a bare InputPartition(None) (pyspark/sql/worker/plan_data_source_read.py): no rows.
    reader = RocketMQBatchReader(RocketMQOptions.from_raw({"namesrv": "127.0.0.1:1", "topic": "t"}, mode="read"))
    assert list(reader.read(InputPartition(None))) == []
