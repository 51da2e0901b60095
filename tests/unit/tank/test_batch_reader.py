"""The TANK batch reader's driver and executor sides, against the broker double."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

from tests.doubles.tank_broker import TankBroker
from tests.readers import TankBatchReader
from tubespark.tank.spark.options import TankOptions


def test_a_read_that_plans_nothing_returns_no_rows():
    # An empty topic plans no range; PySpark then still runs one task, handing read() a bare
    # InputPartition(None) (pyspark/sql/worker/plan_data_source_read.py), which must read as no rows.
    with TankBroker({"events": 2}) as broker:
        reader = TankBatchReader(TankOptions.from_raw({"broker": broker.address, "topic": "events"}, mode="read"))
        assert reader.partitions() == []
        assert list(reader.read(InputPartition(None))) == []
