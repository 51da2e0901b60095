"""The ``tank`` options (validated before any network call, the Options page's table) and the sink's row handling
(bundling, routing, bad rows) against the TANK test double, without a Spark session."""

from __future__ import annotations

import re
import socket
import threading
import time
import zlib

import pyarrow as pa
import pytest

from tests.doubles.tank_broker import TankBroker
from tests.readers import TankStreamReader
from tubespark.errors import (
    BrokerConnectionError,
    BrokerUnavailableError,
    MessageFormatError,
    OptionError,
    TubeSparkError,
)
from tubespark.tank.client.ranges import RangeReader
from tubespark.tank.spark.options import TankOptions, is_partition_key
from tubespark.tank.spark.writer import BundledSend, TankStreamWriter
from tubespark.tank.wire.bundle import MessageColumns


def parse(mode: str = "read", **options: str) -> TankOptions:
    return TankOptions.from_raw({"broker": "127.0.0.1:1", "topic": "events", **options}, mode=mode)


def test_defaults_and_case_insensitive_names():
    opts = TankOptions.from_raw({"BROKER": "h:1", "Topic": "b,a,b", "maxoffsetspertrigger": "5"}, mode="read")
    assert (opts.broker, opts.topics, opts.max_offsets_per_trigger) == ("h:1", ("a", "b"), 5)
    assert (opts.starting_offsets, opts.fetch_size_bytes, opts.bundle_compression) == ("latest", 1 << 20, "auto")
    assert parse(startingOffsets='{"events:3": 7, "events:0": -2}').starting_offsets == {"events:3": 7,
                                                                                      "events:0": -2}


@pytest.mark.parametrize(("options", "message"), [
    ({"broker": "a:1,b:2"}, "expected one TANK broker"),
    ({"broker": "nohost"}, "option broker='nohost'"),
    ({"topic": "x" * 65}, "TANK topic names"),
    ({"topic": "a:b"}, "TANK topic names"),
    ({"startingOffsets": "group"}, "earliest | latest"),
    ({"startingOffsets": '{"events:01": 1}'}, "expected topic:partition"),
    ({"startingOffsets": '{"events:0": -3}'}, "must be -2"),
    ({"startingOffsets": '{"other:0": 1}'}, "topics not read"),
    ({"endingOffsets": "earliest"}, "expected latest"),
    ({"fetchSizeBytes": "63"}, "from 64 to 67108864"),
    ({"failOnDataLoss": "maybe"}, "expected true or false"),
    ({"clientId": "a b"}, "option clientId"),
])
def test_bad_read_options(options, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        parse(**options)


@pytest.mark.parametrize(("options", "message"), [
    ({"bundleCompression": "gzip"}, "expected auto or snappy or none"),
    ({"bundleMaxRows": "0"}, "positive integer"),
    ({"bundleLingerMs": "-1"}, "non-negative"),
    ({"maxInFlight": "0"}, "expected a positive integer"),
    ({"sendRetries": "-1"}, "expected a non-negative integer"),
    ({"topic": "a,b"}, "writes to one topic"),
])
def test_bad_write_options(options, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        parse("write", **options)


def test_bad_options_fail_without_touching_the_network():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    with pytest.raises(OptionError):
        TankOptions.from_raw({"broker": address, "topic": "t", "maxOffsetsPerTrigger": "x"}, mode="read")
    with pytest.raises(TimeoutError):
        listener.accept()  # nobody connected
    listener.close()


def test_partition_keys():
    assert is_partition_key("events:0") and is_partition_key("a.b-c_d:65534")
    assert not any(is_partition_key(k) for k in ("events", "events:-1", "events:01", ":1", "events:65535"))


def test_the_stream_reader_pickles_without_its_connection():
    import pickle

    reader = TankStreamReader(parse())
    reader.broker._seen_next["events:0"] = 5
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.options == reader.options and copy.broker._seen_next == {} and copy.broker._client is None


# --- the sink's rows -------------------------------------------------------------------------------


@pytest.fixture
def broker():
    with TankBroker({"events": 3}) as double:
        yield double


def write(broker: TankBroker, batch: pa.RecordBatch, **options: str) -> BundledSend:
    send = BundledSend(TankOptions.from_raw({"broker": broker.address, "topic": "events", **options}, mode="write"))
    try:
        send.send_all(iter([batch]))
    finally:
        send.close()
    return send


def read_partition(broker: TankBroker, partition: int) -> MessageColumns:
    out = MessageColumns()
    with RangeReader(broker.address) as reader:
        for cols in reader.read("events", partition, 1, broker.high_water_mark("events", partition) + 1):
            out.values += cols.values
            out.keys += cols.keys
            out.timestamps += cols.timestamps
    return out


def test_rows_are_bundled_per_partition_and_routed_by_partition_key_or_round_robin(broker):
    n = 250
    batch = pa.RecordBatch.from_pydict({
        "value": [f"v{i}" for i in range(n)],
        "key": [None if i % 2 else f"k{i % 10}".encode() for i in range(n)],
        "partition": [2 if i < 10 else None for i in range(n)],
    })
    send = write(broker, batch, bundleMaxRows="20", bundleCompression="none")
    highs = [broker.high_water_mark("events", p) for p in range(3)]
    assert sum(highs) == n and send.bundles >= n // 20
    by_partition = {p: read_partition(broker, p) for p in range(3)}
    for p, cols in by_partition.items():
        for value, key in zip(cols.values, cols.keys, strict=True):
            i = int(value[1:])
            if i < 10:
                assert p == 2
            elif key is not None:
                assert key == f"k{i % 10}".encode() and p == zlib.crc32(key) % 3
    unkeyed = [int(v[1:]) for cols in by_partition.values() for v, k in zip(cols.values, cols.keys, strict=True)
               if k is None and int(v[1:]) >= 10]
    assert all(highs) and len(unkeyed) == 120  # round-robin reached every partition


def test_timestamps_come_from_the_column_or_the_send_time(broker):
    stamps = pa.array([1_700_000_000_123_000, None], pa.timestamp("us", tz="UTC"))
    write(broker, pa.RecordBatch.from_arrays([pa.array([b"a", b"b"]), pa.array([0, 0], pa.int32()), stamps],
                                             names=["value", "partition", "timestamp"]))
    cols = read_partition(broker, 0)
    assert cols.values == [b"a", b"b"] and cols.timestamps[0] == 1_700_000_000_123
    assert cols.timestamps[1] > 1_700_000_000_123  # null: the time the task sent it


@pytest.mark.parametrize(("column", "values", "message"), [
    ("partition", pa.array([0, 3], pa.int32()), "partition 3 does not exist"),
    ("key", pa.array([b"k", b"k" * 256]), "a TANK key holds at most 255"),
])
def test_bad_rows_fail_the_task_naming_the_row(broker, column, values, message):
    batch = pa.RecordBatch.from_arrays([pa.array([b"a", b"b"]), values], names=["value", column])
    with pytest.raises(MessageFormatError, match=f"row 1 of this task.*{message}"):
        write(broker, batch)


def test_large_bundles_are_compressed_when_auto(broker):
    batch = pa.RecordBatch.from_pydict({"value": [b"x" * 100] * 600, "partition": [0] * 600})
    write(broker, batch, bundleMaxRows="600")
    assert broker.high_water_mark("events", 0) == 600
    stored = broker.topics["events"][0].log
    assert len(stored) < 600 * 100 // 5  # one Snappy bundle, far smaller than its contents


# --- a broker restarted under the sink (issue 22 part 7, issue 23 part 8) --------------------------


def restart_in_background(broker: TankBroker, down_s: float) -> threading.Thread:
    broker.stop()
    thread = threading.Thread(target=lambda: (time.sleep(down_s), broker.start()), daemon=True)
    thread.start()
    return thread


def test_the_sink_waits_for_a_restarting_broker_at_init_and_in_its_tasks(broker):
    """Spark makes a writer on the driver for every micro-batch: one made while the broker restarts used to
    fail the stream (``check_sink_reachable``: connection refused); a task's sends, after its few
    ``sendRetries``, too. Both wait for it now, within ``outageTimeoutMs``."""
    options = TankOptions.from_raw({"broker": broker.address, "topic": "events", "outageTimeoutMs": "20000"},
                                   mode="write")
    restart_in_background(broker, 1.5)
    started = time.monotonic()
    TankStreamWriter(options)
    assert time.monotonic() - started >= 1.0  # it waited for the broker, and the check then passed

    send = BundledSend(options)
    try:
        send.send_all(iter([pa.RecordBatch.from_pydict({"value": ["a", "b", "c"]})]))
        thread = restart_in_background(broker, 1.5)
        send.send_all(iter([pa.RecordBatch.from_pydict({"value": ["d", "e", "f"]})]))
        thread.join()
    finally:
        send.close()
    held = sorted(v for p in range(3) for v in read_partition(broker, p).values)
    assert held == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_a_broker_that_stays_down_fails_the_sink_retriable_after_the_outage_timeout(broker):
    options = TankOptions.from_raw({"broker": broker.address, "topic": "events", "outageTimeoutMs": "1500"},
                                   mode="write")
    TankStreamWriter(options)  # this process saw the broker answer: its outage is waited for (core/outage.py)
    broker.stop()
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError,
                       match=r"still unreachable after 2 s; start it, or raise outageTimeoutMs") as caught:
        TankStreamWriter(options)
    assert 1.4 <= time.monotonic() - started < 10 and caught.value.retriable
    no_wait = TankOptions.from_raw({"broker": broker.address, "topic": "events", "outageTimeoutMs": "0"}, mode="write")
    with pytest.raises(BrokerConnectionError) as caught:
        TankStreamWriter(no_wait)
    assert not isinstance(caught.value, BrokerUnavailableError)  # as it came, at once


def test_an_unknown_topic_is_not_waited_for(broker):
    options = TankOptions.from_raw({"broker": broker.address, "topic": "nope"}, mode="write")
    started = time.monotonic()
    with pytest.raises(TubeSparkError) as caught:
        TankStreamWriter(options)
    assert not caught.value.retriable and time.monotonic() - started < 5
