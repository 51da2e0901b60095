"""The TANK client (net + client layers) against the TANK test double over real sockets.

``tests/doubles/tank_broker.py`` follows docs/tank/protocol.md (it is a double: no real TANK broker can
be had here). These tests check what a reader and a producer must do about each fact: the greeting
Ping, Pings between answers, pipelining by request id, chunks that start below the wanted number and
run past fetchSize, cut last bundles, sparse gaps, Snappy, error codes, retention and broken connections.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.doubles.tank_broker import TankBroker
from tubespark.errors import (
    BadRequestError,
    BrokerConnectionError,
    DataLossError,
    RangeReadError,
    RpcTimeoutError,
    UnknownTopicError,
)
from tubespark.tank.client.broker import ClientSettings, TankClient
from tubespark.tank.client.producer import Producer
from tubespark.tank.client.ranges import RangeReader
from tubespark.tank.errors import BoundaryFaultError, TankProtocolError
from tubespark.tank.net.connection import Connection
from tubespark.tank.wire.bundle import MessageColumns, encode_bundle
from tubespark.tank.wire.requests import FetchPartition, FetchRequest, ProduceBundle, ProduceRequest

FAST = ClientSettings(connect_timeout_s=1.0, request_timeout_s=2.0)


@pytest.fixture
def broker():
    with TankBroker({"events": 2, "other": 1}) as double:
        yield double


def fill(broker: TankBroker, topic: str, partition: int, sizes: list[int], *, compression: str = "none",
         start: int = 0) -> list[bytes]:
    """Append bundles of the given message counts; returns every value in order."""
    values = []
    n = start
    for size in sizes:
        batch = [b"m%06d" % (n + i) for i in range(size)]
        broker.append_bundle(topic, partition, encode_bundle(batch, [1000 + n + i for i in range(size)],
                                                             compression=compression))
        values += batch
        n += size
    return values


def read_all(reader: RangeReader, topic: str, partition: int, start: int, end: int) -> MessageColumns:
    out = MessageColumns()
    for cols in reader.read(topic, partition, start, end):
        assert len(cols) > 0
        out.seqs += cols.seqs
        out.values += cols.values
        out.keys += cols.keys
        out.timestamps += cols.timestamps
    return out


# --- connection ------------------------------------------------------------------------------------


def test_a_connection_is_up_only_after_the_greeting_ping():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    started = time.monotonic()
    with pytest.raises(RpcTimeoutError, match="no Ping"):
        Connection.open(f"127.0.0.1:{silent.getsockname()[1]}", connect_timeout_s=0.5)
    assert time.monotonic() - started < 2
    silent.close()


def test_a_peer_that_greets_with_something_else_is_not_tank():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def greet() -> None:
        conn, _ = server.accept()
        conn.sendall(b"HTTP/1.1 400 Bad\r\n")
        time.sleep(0.5)
        conn.close()

    threading.Thread(target=greet, daemon=True).start()
    with pytest.raises(TankProtocolError, match="not a Ping"):
        Connection.open(f"127.0.0.1:{server.getsockname()[1]}", connect_timeout_s=1.0)
    server.close()


def test_pings_between_answers_are_skipped(broker):
    broker.ping_between = True
    fill(broker, "events", 0, [3])
    with TankClient(broker.address, FAST) as client:
        assert client.partitions("events")[0].high_water_mark == 3
        assert client.status().version == 400


def test_a_produce_is_answered_while_a_tail_fetch_long_polls_on_the_same_connection(broker):
    fill(broker, "events", 0, [29])
    with Connection.open(broker.address) as conn:
        tail = conn.call_async(FetchRequest([("events", [FetchPartition(0, 2**64 - 1, 4096)])], max_wait_ms=3000))
        time.sleep(0.2)
        produced = conn.call(ProduceRequest([("events", [ProduceBundle(0, encode_bundle([b"thirty"], [5]))])]))
        assert produced[0].code == 0
        assert not tail.done() or tail.result().partitions[0].chunk  # the produce did not wait for the fetch
        fetched = tail.result(timeout=5).partitions[0]
    assert fetched.base_seq == 30 and fetched.high_water_mark == 30 and b"thirty" in fetched.chunk


def test_a_tail_fetch_without_new_data_returns_an_empty_chunk_after_max_wait(broker):
    fill(broker, "events", 0, [2])
    with TankClient(broker.address, FAST) as client:
        started = time.monotonic()
        part = client.fetch("events", 0, 3, 1024, max_wait_ms=300)
        assert 0.25 < time.monotonic() - started < 2
        assert part.chunk == b"" and part.high_water_mark == 2


# --- metadata ---------------------------------------------------------------------------------------


def test_metadata_calls(broker):
    with TankClient(broker.address, FAST) as client:
        assert client.create_topic("fresh", 3, {"log.retention.secs": "3600"}) is True
        assert client.create_topic("fresh", 3) is False
        with pytest.raises(BadRequestError):
            client.create_topic("bad", 1, {"no.such.key": "1"})
        with pytest.raises(BadRequestError):
            client.create_topic("empty", 0)
        infos = client.partitions("fresh")
        assert [(i.partition, i.first_available, i.high_water_mark) for i in infos] == [(0, 0, 0), (1, 0, 0),
                                                                                       (2, 0, 0)]
        assert {t.name: t.partitions for t in client.topics()} == {"events": 2, "other": 1, "fresh": 3}
        with pytest.raises(UnknownTopicError):
            client.partitions("missing")


# --- producer ---------------------------------------------------------------------------------------


def test_producer_keeps_many_requests_in_flight_and_numbers_are_dense(broker):
    producer = Producer(broker.address, FAST, max_in_flight=8)
    for i in range(40):
        producer.send("events", {0: encode_bundle([b"a%d" % i, b"b%d" % i], [i, i]), 1: encode_bundle([b"c"], [i])})
    producer.flush()
    producer.close()
    assert producer.max_window == 8
    assert broker.high_water_mark("events", 0) == 80 and broker.high_water_mark("events", 1) == 40
    with RangeReader(broker.address, FAST) as reader:
        got = read_all(reader, "events", 0, 1, 81)
    assert got.seqs == list(range(1, 81))
    assert got.values[:4] == [b"a0", b"b0", b"a1", b"b1"]


def test_retriable_produce_codes_are_retried_and_final_ones_raise(broker):
    broker.inject_produce("events", 0, 0x02)  # I/O fault once
    broker.inject_produce("events", 1, 0xFD, times=2)  # no leader twice
    producer = Producer(broker.address, FAST, retries=3)
    producer.send("events", {0: encode_bundle([b"x"], [1]), 1: encode_bundle([b"y"], [1])})
    producer.flush()
    assert producer.resent == 2  # both failed partitions in one re-sent request, then partition 1 alone
    assert broker.high_water_mark("events", 0) == 1 and broker.high_water_mark("events", 1) == 1
    broker.inject_produce("events", 0, 0x02, times=10)
    producer.send("events", {0: encode_bundle([b"x"], [1])})
    with pytest.raises(Exception, match="I/O fault") as info:
        producer.flush()
    assert info.value.retriable  # given up after the retries, still a retriable kind
    producer.close()


@pytest.mark.parametrize(("topic", "partition", "error"), [
    ("missing", 0, UnknownTopicError),  # 0xFF for the whole topic
    ("events", 7, UnknownTopicError),  # 0x01 unknown partition
])
def test_unknown_topics_and_partitions_fail_at_once(broker, topic, partition, error):
    producer = Producer(broker.address, FAST)
    producer.send(topic, {partition: encode_bundle([b"x"], [1])})
    with pytest.raises(error):
        producer.flush()
    assert producer.resent == 0
    producer.close()


def test_a_read_only_broker_refuses_the_whole_topic(broker):
    broker.read_only = True
    producer = Producer(broker.address, FAST)
    producer.send("events", {0: encode_bundle([b"x"], [1]), 1: encode_bundle([b"y"], [1])})
    with pytest.raises(BadRequestError, match="read-only"):
        producer.flush()
    producer.close()


def test_producer_follows_another_leader(broker):
    with TankBroker({"events": 2}) as leader:
        broker.inject_produce("events", 0, 0xFC, leader=leader.address)
        producer = Producer(broker.address, FAST)
        producer.send("events", {0: encode_bundle([b"moved"], [1])})
        producer.flush()
        producer.close()
        assert leader.high_water_mark("events", 0) == 1 and broker.high_water_mark("events", 0) == 0


def test_producer_resends_after_a_reset_connection(broker):
    broker.fault(0x1, "reset")
    producer = Producer(broker.address, FAST)
    producer.send("events", {0: encode_bundle([b"x"], [1])})
    producer.flush()
    producer.close()
    assert broker.high_water_mark("events", 0) == 1


# --- range reads --------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "snappy"])
@pytest.mark.parametrize(("start", "end"), [(1, 301), (5, 6), (37, 251), (100, 101), (299, 301)])
def test_ranges_are_exact_across_bundle_boundaries(broker, compression, start, end):
    values = fill(broker, "events", 0, [1, 7, 50, 100, 42, 100], compression=compression)
    with RangeReader(broker.address, FAST, fetch_size=256) as reader:
        got = read_all(reader, "events", 0, start, end)
    assert got.seqs == list(range(start, end))
    assert got.values == values[start - 1:end - 1]


def test_chunks_larger_than_fetch_size_start_at_the_bundle_boundary(broker):
    fill(broker, "events", 0, [100])
    with TankClient(broker.address, FAST) as client:
        part = client.fetch("events", 0, 50, 64)
    assert part.base_seq == 1 and len(part.chunk) > 64  # the whole bundle holding 50, from its start


def test_cut_last_bundles_are_fetched_again_whole(broker):
    broker.cut_chunks = True  # the chunk ends at exactly fetchSize: its last bundle is partial
    values = fill(broker, "events", 0, [30, 200, 5, 400], compression="none")
    values += fill(broker, "events", 0, [300, 1], compression="snappy", start=len(values))
    with RangeReader(broker.address, FAST, fetch_size=500) as reader:
        got = read_all(reader, "events", 0, 1, len(values) + 1)
        assert reader.refetches > 0
    assert got.seqs == list(range(1, len(values) + 1)) and got.values == values
    assert max(broker.fetch_sizes) > 500  # grown to hold a whole bundle


def test_a_fetch_size_smaller_than_one_bundle_still_reads(broker):
    broker.cut_chunks = True
    values = fill(broker, "events", 0, [1000], compression="snappy")
    with RangeReader(broker.address, FAST, fetch_size=64) as reader:
        got = read_all(reader, "events", 0, 500, 1001)
    assert got.values == values[499:]


def test_sparse_bundles_leave_gaps_that_ranges_step_over(broker):
    broker.append_bundle("events", 1, encode_bundle([b"a", b"b", b"c"], [1, 1, 1], seqs=[100, 104, 110]), base=100)
    broker.append_bundle("events", 1, encode_bundle([b"d", b"e"], [2, 2]))  # plain: 111, 112
    broker.append_bundle("events", 1, encode_bundle([b"f"], [3], seqs=[200]), base=200)
    with TankClient(broker.address, FAST) as client:
        (_p0, p1) = client.partitions("events")
        assert (p1.first_available, p1.high_water_mark) == (100, 200)
        fetched = client.fetch("events", 1, 102, 4096)
        assert fetched.base_seq is None and fetched.sparse_first  # 0xFE: the first bundle is sparse
    with RangeReader(broker.address, FAST, fetch_size=32) as reader:
        got = read_all(reader, "events", 1, 101, 201)
        assert (got.seqs, got.values) == ([104, 110, 111, 112, 200], [b"b", b"c", b"d", b"e", b"f"])
        got = read_all(reader, "events", 1, 113, 200)  # only a gap
        assert got.seqs == []


def test_produce_with_seqnum_refuses_numbers_at_or_below_the_high_water_mark(broker):
    fill(broker, "events", 0, [5])
    with Connection.open(broker.address) as conn:
        bundle = encode_bundle([b"x"], [1], seqs=[3])
        (result,) = conn.call(ProduceRequest([("events", [ProduceBundle(0, bundle, base_seq=3)])], with_seqnum=True))
        assert result.code == 0x0A
        bundle = encode_bundle([b"x"], [1], seqs=[9])
        (result,) = conn.call(ProduceRequest([("events", [ProduceBundle(0, bundle, base_seq=9)])], with_seqnum=True))
        assert result.code == 0
    assert broker.high_water_mark("events", 0) == 9


def test_retention_below_a_planned_range_is_data_loss(broker):
    fill(broker, "events", 0, [10, 10, 10])
    broker.drop_before("events", 0, 21)  # the first two bundles go: first available 21
    with TankClient(broker.address, FAST) as client:
        with pytest.raises(BoundaryFaultError) as info:
            client.fetch("events", 0, 5, 1024)
        assert info.value.first_available == 21
    with RangeReader(broker.address, FAST) as reader, pytest.raises(DataLossError, match=r"\[5, 21\)"):
        read_all(reader, "events", 0, 5, 31)
    with RangeReader(broker.address, FAST, fail_on_data_loss=False) as reader:
        got = read_all(reader, "events", 0, 5, 31)
        assert got.seqs == list(range(21, 31)) and reader.lost == [("events", 0, 5, 21)]


def test_a_high_water_mark_below_the_planned_end_is_data_loss(broker):
    fill(broker, "events", 0, [10])
    with RangeReader(broker.address, FAST) as reader, pytest.raises(DataLossError, match="high-water mark 10"):
        read_all(reader, "events", 0, 5, 20)


def test_a_range_survives_reset_connections_and_unavailable_partitions(broker):
    values = fill(broker, "events", 0, [50] * 6)
    broker.fault(0x2, "reset", times=2)
    broker.inject_fetch("events", 0, 0xFD, times=2)  # no leader, twice
    with RangeReader(broker.address, FAST, fetch_size=200, retry_s=10) as reader:
        got = read_all(reader, "events", 0, 1, 301)
    assert got.values == values


def test_a_silent_broker_fails_the_range_after_its_retry_time(broker):
    fill(broker, "events", 0, [5])
    broker.fault(0x2, "silent", times=100)
    settings = ClientSettings(connect_timeout_s=0.5, request_timeout_s=0.3)
    started = time.monotonic()
    with RangeReader(broker.address, settings, retry_s=1.0) as reader, \
            pytest.raises(RangeReadError, match=r"events/0: reading \[1, 6\) failed at 1") as error:
        read_all(reader, "events", 0, 1, 6)
    assert time.monotonic() - started < 5
    # the one meaning of retriable (tubespark/errors.py): what gave up was a passing fault, so the read may
    # succeed later; the fault itself is the cause
    assert error.value.retriable and isinstance(error.value.__cause__, BrokerConnectionError)
    assert (error.value.partition, error.value.start, error.value.end, error.value.reached) == ("events/0", 1, 6, 1)
    assert error.value.broker == broker.address


def test_a_broker_restart_under_a_range_read_is_retried(broker):
    values = fill(broker, "events", 0, [100] * 5)
    with RangeReader(broker.address, FAST, fetch_size=128, retry_s=10) as reader:
        batches = reader.read("events", 0, 1, 501)
        got = list(next(batches).values)
        threading.Thread(target=broker.restart, args=(0.5,), daemon=True).start()
        time.sleep(0.1)
        for cols in batches:
            got += cols.values
    assert got == values


def test_an_unknown_topic_or_partition_is_not_retried(broker):
    with RangeReader(broker.address, FAST, retry_s=30) as reader:
        started = time.monotonic()
        with pytest.raises(UnknownTopicError):
            read_all(reader, "missing", 0, 1, 2)
        with pytest.raises(UnknownTopicError):
            read_all(reader, "events", 9, 1, 2)
        assert time.monotonic() - started < 2
