"""A bad option fails before any network call, with an error naming the option: in a streaming read, a
batch read and a write.

The connection option points at a port that listens and never answers: a connector that opened a
connection before checking its options shows up there (and would fail some other way)."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from tests.integration.contract.brokers import Broker
from tubespark.errors import OptionError, unwrap

pytestmark = [pytest.mark.integration, pytest.mark.spark]

CONNECTION = "<connection>"  # stands for the broker's connection option (master, namesrv, broker)
# (option, bad value); None: the option is left out
STREAM_CASES = [(CONNECTION, "nohostport"), (CONNECTION, None), ("maxOffsetsPerTrigger", "-5"),
                ("maxBytesPerTrigger", "lots"), ("minOffsetsPerTrigger", "0"), ("maxTriggerDelay", "soon"),
                ("startingOffsets", "{bad json"), ("failOnDataLoss", "maybe")]
BATCH_CASES = [("endingOffsets", "{bad json"), ("maxRecordsPerPartition", "0")]
WRITE_CASES = [(CONNECTION, "nohostport"), ("maxInFlight", "0"), ("sendRetries", "-1")]


class Listener:
    """A port on 127.0.0.1 that accepts connections into its backlog and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"

    def connections(self) -> int:
        """Connections made since the last call."""
        count = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    listening = Listener()
    yield listening
    listening.sock.close()


def options(base: dict[str, str], connection: str, option: str, value: str | None) -> tuple[str, dict[str, str]]:
    """``base`` with ``option`` set to ``value`` (or removed); returns the option's real name too."""
    name = connection if option == CONNECTION else option
    changed = dict(base)
    changed.pop(name, None)
    if value is not None:
        changed[name] = value
    return name, changed


def assert_fails_naming(name: str, listener: Listener, run: Callable[[], None]) -> None:
    listener.connections()  # forget what an earlier case (that failed) left behind
    started = time.monotonic()
    with pytest.raises(Exception, match=rf"option {name}\b"):
        run()
    assert listener.connections() == 0, f"a connection was opened before option {name} was checked"
    assert time.monotonic() - started < 30


def connection_name(broker: Broker) -> str:
    (name,) = broker.connection("127.0.0.1:1")  # the one option an address sets (not TubeMQ's masterWebUrl)
    return name


@pytest.mark.parametrize(("option", "value"), STREAM_CASES)
def test_streaming_read(spark, broker: Broker, listener: Listener, option: str, value: str | None):
    base = {**broker.stream_options(), **broker.connection(listener.address), "topic": "t1"}
    name, given = options(base, connection_name(broker), option, value)

    def run() -> None:
        query = spark.readStream.format(broker.format).options(**given).load().writeStream.format("noop").start()
        try:
            query.awaitTermination(20)
        finally:
            query.stop()

    assert_fails_naming(name, listener, run)


@pytest.mark.parametrize(("option", "value"), BATCH_CASES)
def test_batch_read(spark, broker: Broker, listener: Listener, option: str, value: str | None):
    base = {**broker.connection(listener.address), "topic": "t1"}
    name, given = options(base, connection_name(broker), option, value)
    assert_fails_naming(name, listener, lambda: spark.read.format(broker.format).options(**given).load().collect())


@pytest.mark.parametrize(("option", "value"), WRITE_CASES)
def test_write(spark, broker: Broker, listener: Listener, option: str, value: str | None):
    base = {**broker.connection(listener.address), "topic": "t1"}
    name, given = options(base, connection_name(broker), option, value)
    frame = spark.range(3).selectExpr("CAST(id AS STRING) AS value")
    assert_fails_naming(name, listener,
                        lambda: frame.write.format(broker.format).options(**given).mode("append").save())


MISSPELT = r"unknown option 'maxoffsetpertrigger' for format\('{}'\): did you mean maxOffsetsPerTrigger\?"


@pytest.mark.parametrize("path", ["stream read", "batch read", "batch write", "stream write"])
def test_a_misspelt_option_fails_on_the_driver_naming_the_closest(spark, broker: Broker, listener: Listener,
                                                                 tmp_path, path: str):
    """``maxOffsetPerTrigger`` (one letter short) would be ignored by Spark: it fails before anything is
    read or written, in the documented spelling of the option meant (Spark hands it over lower-cased)."""
    given = {**broker.connection(listener.address), "topic": "t1", "maxOffsetPerTrigger": "5"}
    frame = spark.range(3).selectExpr("CAST(id AS STRING) AS value")

    def run() -> None:
        if path == "batch read":
            spark.read.format(broker.format).options(**given).load().collect()
        elif path == "batch write":
            frame.write.format(broker.format).options(**given).mode("append").save()
        else:
            if path == "stream read":
                query = (spark.readStream.format(broker.format).options(**{**broker.stream_options(), **given}).load()
                         .writeStream.format("noop").start())
            else:  # the sink's options reach tubespark at the query's first batch, on the driver
                query = (spark.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS value")
                         .writeStream.format(broker.format).options(**given)
                         .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
            try:
                query.awaitTermination(20)
            finally:
                query.stop()

    listener.connections()
    started = time.monotonic()
    with pytest.raises(Exception, match=MISSPELT.format(broker.format)) as raised:
        run()
    error = unwrap(raised.value)  # Spark's wrapper (AnalysisException, StreamingQueryException...) -> ours
    assert isinstance(error, OptionError) and re.match(MISSPELT.format(broker.format), str(error)), str(error)
    assert listener.connections() == 0, "a connection was opened before the options were checked"
    assert time.monotonic() - started < 30
