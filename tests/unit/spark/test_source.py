"""The shared data-source base (tubespark/spark/source.py): what every broker's format does the same way."""

from __future__ import annotations

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from tubespark.errors import OptionError
from tubespark.rocketmq.spark.source import RocketMQDataSource
from tubespark.spark.source import OptionErrorStreamReader
from tubespark.tank.spark.source import TankDataSource
from tubespark.tubemq.spark.source import TubeMQDataSource

SOURCES = {
    "tubemq": (TubeMQDataSource, {"master": "127.0.0.1:1", "topic": "events", "group": "etl"}),
    "tank": (TankDataSource, {"broker": "127.0.0.1:1", "topic": "events"}),
    "rocketmq": (RocketMQDataSource, {"namesrv": "127.0.0.1:1", "topic": "events"}),
}
VALUE = StructType([StructField("value", BinaryType())])


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_each_format_is_named_and_refuses_overwrite(name: str) -> None:
    cls, options = SOURCES[name]
    assert cls.name() == name
    with pytest.raises(OptionError, match=rf"mode\('overwrite'\) is not supported by format\('{name}'\).*"
                                          r"mode\('append'\)"):
        cls(options).writer(VALUE, True)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_streams_option_error_reaches_spark_at_its_first_call(name: str) -> None:
    cls, options = SOURCES[name]
    reader = cls({**options, "maxOffsetsPerTrigger": "-3"}).streamReader(VALUE)
    assert isinstance(reader, OptionErrorStreamReader)
    with pytest.raises(OptionError, match="maxOffsetsPerTrigger"):
        reader.getDefaultReadLimit()
