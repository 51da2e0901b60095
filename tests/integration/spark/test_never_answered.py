"""Issue 37 part 4 through real Spark, no cluster: an address option where nothing listens fails a write, a batch
read and a new stream within seconds, with the typed error naming the option as the line a user sees.

The filed defect: a TANK write to the README's default address (``127.0.0.1:11011``, nothing there) waited 15
minutes (``outageTimeoutMs``), a RocketMQ write to a dead name server likewise. The goal is 10 s; the bound is
3x that. TubeMQ's ``master`` is checked by ``tests/integration/tubemq/test_user_mistakes.py``.
"""

from __future__ import annotations

import time
import uuid

import pytest
from tubespark_testbed.ports import free_ports

pytestmark = [pytest.mark.spark]

BOUND_S = 3 * 10.0
FAST = {"connectTimeoutMs": "1000", "requestTimeoutMs": "1000"}
CASES = [("tank", "broker"), ("rocketmq", "namesrv")]


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith("tubespark.")]
    assert lines, text[-3000:]
    return lines[-1]


def expect_named(text: str, option: str, address: str) -> None:
    line = last_line(text)
    assert line.startswith("tubespark.errors.NeverAnsweredError: "), line
    assert f"at {address} (option `{option}`) never answered in this process" in line, line
    assert f"check the `{option}` option" in line, line


@pytest.mark.parametrize(("fmt", "option"), CASES)
def test_a_write_to_an_address_where_nothing_listens_fails_within_seconds_naming_the_option(spark, fmt, option):
    address = f"127.0.0.1:{free_ports(1)[0]}"
    started = time.monotonic()
    with pytest.raises(Exception) as info:  # noqa: PT011 - the text is what is checked
        (spark.range(3).selectExpr("CAST(id AS STRING) AS value").write.format(fmt).option(option, address)
         .option("topic", "events").options(**FAST).mode("append").save())
    assert time.monotonic() - started < BOUND_S
    expect_named(str(info.value), option, address)


@pytest.mark.parametrize(("fmt", "option"), CASES)
def test_a_read_of_an_address_where_nothing_listens_fails_within_seconds_naming_the_option(spark, fmt, option):
    address = f"127.0.0.1:{free_ports(1)[0]}"
    started = time.monotonic()
    with pytest.raises(Exception) as info:  # noqa: PT011
        spark.read.format(fmt).option(option, address).option("topic", "events").options(**FAST).load().count()
    assert time.monotonic() - started < BOUND_S
    expect_named(str(info.value), option, address)


@pytest.mark.parametrize(("fmt", "option"), CASES)
def test_a_new_stream_on_an_address_where_nothing_listens_fails_within_seconds_naming_the_option(spark, fmt, option):
    address = f"127.0.0.1:{free_ports(1)[0]}"
    started = time.monotonic()
    query = (spark.readStream.format(fmt).option(option, address).option("topic", "events").options(**FAST).load()
             .writeStream.format("memory").queryName("never_" + uuid.uuid4().hex[:8]).trigger(availableNow=True)
             .start())
    try:
        with pytest.raises(Exception) as info:  # noqa: PT011
            query.awaitTermination(120)
    finally:
        query.stop()
    assert time.monotonic() - started < BOUND_S
    expect_named(str(info.value), option, address)
