"""payloadFormat=inlongmsg without a cluster: bundles -> rows (read) and rows -> bundles (write)."""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from tubespark.errors import MessageFormatError, MessageTooLargeError
from tubespark.formats import PayloadEncodeError, Record, decode_bundle, encode_inlongmsg, encode_messageobjs
from tubespark.spark.bundling import Bundler, encode_bundle
from tubespark.tubemq.errors import BundleParseError
from tubespark.tubemq.spark import writer
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.read_task import QueueRange, SkipCounter, decode_bundles, record_skips, skipped_bundles
from tubespark.tubemq.spark.schema import arrow_schema, bundle_record_batch, read_schema, record_stream_id
from tubespark.tubemq.wire.formats import PartitionRef
from tubespark.tubemq.wire.message import OutgoingMessage, ReceivedMessage

KEY = "1:events:0"


def received(data: bytes, offset: int, *, msg_type: str = "", msg_time: str = "", **attrs: str) -> ReceivedMessage:
    full = dict(attrs)
    if msg_type:
        full["$msgType$"] = msg_type
    if msg_time:
        full["$msgTime$"] = msg_time
    return ReceivedMessage(offset // 28, data, full, msg_type, msg_time, offset)


def rows_of(batch: pa.RecordBatch) -> list[dict]:
    return batch.to_pylist()


# ------------------------------------------------------------------------------------------- schema

def test_raw_schema_is_unchanged_and_inlongmsg_adds_record_index():
    raw = [f.name for f in read_schema(False)]
    assert raw == ["value", "topic", "partitionKey", "brokerId", "partitionId", "offset", "msgTime", "streamId"]
    assert [f.name for f in read_schema(True)] == [*raw, "attributes"]
    assert [f.name for f in read_schema(False, inlongmsg=True)] == [*raw, "recordIndex"]
    assert [f.name for f in read_schema(True, inlongmsg=True)] == [*raw, "recordIndex", "attributes"]
    assert read_schema(False, True)["recordIndex"].dataType.simpleString() == "int"


def test_stream_id_comes_from_inlongs_attribute_names_then_msg_type():
    assert record_stream_id({"iname": "c", "inlongStreamId": "b", "streamId": "a"}, "t") == "a"
    assert record_stream_id({"iname": "c", "inlongStreamId": "b"}, "t") == "b"
    assert record_stream_id({"iname": "c"}, "t") == "c"
    assert record_stream_id({"streamId": ""}, "t") == "t"
    assert record_stream_id({}, "") is None


# --------------------------------------------------------------------------------------- read rows

def test_every_record_is_a_row_with_merged_attributes_time_and_index():
    bundle = encode_inlongmsg([Record(b"r0", {"k": "record", "streamId": "s1"}, 1_700_000_000_123),
                               Record(b"r1", {"k": "record", "streamId": "s1"}, 1_700_000_000_123),
                               Record(b"r2", {"iname": "old"})], create_time=1)
    m = received(bundle, 280, msg_type="tube_type", msg_time="202401020304", msgEnType="2", k="message", x="1")
    decoded = decode_bundles([m], KEY, False, SkipCounter())
    batch = bundle_record_batch(decoded, topic="events", partition_key=KEY, broker_id=1, partition_id=0,
                                schema=arrow_schema(True, inlongmsg=True))
    rows = rows_of(batch)
    assert [(r["value"], r["offset"], r["recordIndex"]) for r in rows] == [(b"r0", 280, 0), (b"r1", 280, 1),
                                                                          (b"r2", 280, 2)]
    assert [r["streamId"] for r in rows] == ["s1", "s1", "old"]
    first = dict(rows[0]["attributes"])
    assert first == {"msgEnType": "2", "k": "record", "x": "1", "streamId": "s1", "dt": "1700000000123"}
    assert dict(rows[2]["attributes"]) == {"msgEnType": "2", "k": "message", "x": "1", "iname": "old"}
    assert rows[0]["msgTime"] == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert rows[2]["msgTime"] == datetime(2024, 1, 2, 3, 4, tzinfo=UTC)  # no dt: the message's time
    assert {r["topic"] for r in rows} == {"events"} and {r["partitionKey"] for r in rows} == {KEY}


def test_message_objs_bundles_and_msg_type_fallback():
    payload = encode_messageobjs([Record(b"pb", {"a": "1"}, 1_000)])
    m = received(payload, 0, msg_type="stream_x", msgEnType="1")
    batch = bundle_record_batch(decode_bundles([m], KEY, False, SkipCounter()), topic="events",
                                partition_key=KEY, broker_id=1, partition_id=0, schema=arrow_schema(False, True))
    assert rows_of(batch) == [{"value": b"pb", "topic": "events", "partitionKey": KEY, "brokerId": 1,
                               "partitionId": 0, "offset": 0, "msgTime": datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
                               "streamId": "stream_x", "recordIndex": 0}]


def test_dedupe_keeps_the_first_row_of_each_id():
    seen: set[str] = set()

    def keep(attrs):
        stamp = attrs.get("id")
        if stamp in seen:
            return False
        seen.add(stamp)
        return True

    one = encode_inlongmsg([(b"a", {"id": "w-0"}), (b"b", {"id": "w-1"})])
    replay = encode_inlongmsg([(b"b", {"id": "w-1"}), (b"c", {"id": "w-2"})])
    decoded = decode_bundles([received(one, 0), received(replay, 28)], KEY, False, SkipCounter())
    batch = bundle_record_batch(decoded, topic="events", partition_key=KEY, broker_id=1, partition_id=0,
                                schema=arrow_schema(False, True), keep=keep)
    assert [(r["value"], r["offset"], r["recordIndex"]) for r in rows_of(batch)] == [(b"a", 0, 0), (b"b", 0, 1),
                                                                                    (b"c", 28, 1)]


def test_a_message_that_is_not_a_bundle_fails_naming_partition_and_offset():
    good = encode_inlongmsg([(b"ok", {})])
    messages = [received(good, 0, msgEnType="2"), received(b"garbage", 28), received(b"\x0f\x01xx", 56, msgEnType="2")]
    with pytest.raises(BundleParseError, match=r"partition 1:events:0, offset 28: .*ignoreParseErrors=true"):
        decode_bundles(messages, KEY, False, SkipCounter())
    skipped = SkipCounter()
    decoded = decode_bundles(messages, KEY, True, skipped)
    assert [m.offset for m, _records in decoded] == [0]
    assert skipped.count == 2 and skipped.offsets == [28, 56]
    with pytest.raises(BundleParseError, match="offset 0"):  # an unknown msgEnType is a parse error too
        decode_bundles([received(good, 0, msgEnType="9")], KEY, False, SkipCounter())


def test_skip_files_are_one_per_range_and_sum_on_the_driver(tmp_path):
    task = QueueRange(1, "h", 1, "events", 0, 0, 280, "g", "c")
    counter = SkipCounter()
    counter.add(28, "bad magic")
    record_skips(str(tmp_path / "skips"), task, counter)
    record_skips(str(tmp_path / "skips"), task, counter)  # a retried task overwrites its own file
    other = SkipCounter()
    other.add(308, "x")
    other.add(336, "y")
    record_skips(str(tmp_path / "skips"), QueueRange(1, "h", 1, "events", 0, 280, 560, "g", "c"), other)
    summary = skipped_bundles(str(tmp_path / "skips"))
    assert summary.total == 3 and summary.by_partition == {KEY: 3}
    assert sorted(r["start"] for r in summary.ranges) == [0, 280]
    assert json.loads((tmp_path / "skips" / "events-1-0-0-280.json").read_text())["offsets"] == [28]
    assert skipped_bundles(str(tmp_path / "none")).total == 0


# ------------------------------------------------------------------------------------------ bundler

class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_bundler_closes_by_rows_bytes_age_and_open_count():
    clock = Clock()
    b = Bundler(max_rows=3, linger_s=1.0, max_open=2, clock=clock)
    assert b.add("a", b"1", {}, cost=10, max_bytes=100, row=0) == []
    assert b.add("a", b"2", {}, cost=10, max_bytes=100, row=1) == []
    full = b.add("a", b"3", {}, cost=10, max_bytes=100, row=2)
    assert [(x.key, x.rows) for x in full] == [("a", [0, 1, 2])]
    b.add("b", b"x", {}, cost=50, max_bytes=100, row=3)
    by_bytes = b.add("b", b"y", {}, cost=50, max_bytes=100, row=4)  # 16 + 50 + 50 > 100: b closes first
    assert [x.rows for x in by_bytes] == [[3]] and b.is_open("b")
    clock.now = 0.5
    b.add("c", b"z", {}, cost=1, max_bytes=100, row=5)
    clock.now = 0.7
    too_many = b.add("d", b"w", {}, cost=1, max_bytes=100, row=6)  # max_open=2: the oldest (b) closes
    assert [x.key for x in too_many] == ["b"]
    clock.now = 1.6
    assert [x.key for x in b.expired()] == ["c"]
    assert [x.key for x in b.drain()] == ["d"] and b.open_count == 0


def _bundles(closed):
    return [(x.key, x.records, x.rows, x.size) for x in closed]


@pytest.mark.parametrize("seed", range(15))
def test_add_run_makes_the_bundles_that_one_add_per_record_makes(seed):
    rng = random.Random(seed)
    max_rows, max_bytes = rng.choice([1, 2, 7, 50, 10_000]), rng.choice([40, 300, 2048, 1 << 20])
    bodies = [os.urandom(rng.choice([0, 1, 30, 120, 400])) for _ in range(rng.randrange(0, 400))]
    if seed >= 12:  # records of 24 bytes that fill a bundle exactly, or miss by one byte either way
        max_rows, max_bytes = 10_000, 16 + 9 + 24 * 5 + (seed - 13)
        bodies = [b"r" * 20] * 37
    extra = {"streamId": "s"}
    first = rng.randrange(0, 1000)

    def fresh():
        b = Bundler(max_rows=max_rows, linger_s=60.0, max_open=1 + seed % 2, clock=Clock())
        if seed % 3:  # the key already has an open bundle, or another key is open (closed at max_open=1)
            b.add("k" if seed % 3 == 1 else "other", b"before", extra, cost=11, max_bytes=max_bytes, row=0)
        return b

    one_by_one, in_runs = fresh(), fresh()
    expected = []
    for i, body in enumerate(bodies):
        cost = 4 + len(body) + (0 if one_by_one.is_open("k") else 9)
        expected += _bundles(one_by_one.add("k", body, extra, cost=cost, max_bytes=max_bytes, row=first + i))
    got = _bundles(in_runs.add_run("k", bodies, extra, overhead=4, open_cost=9, max_bytes=max_bytes,
                                   first_row=first))
    assert got == expected
    assert _bundles(in_runs.drain()) == _bundles(one_by_one.drain())


def test_rows_with_only_a_value_are_bundled_as_rows_with_empty_columns_are():
    rows = [{"value": os.urandom(i % 300)} for i in range(500)]
    value_only = pa.RecordBatch.from_arrays([pa.array([r["value"] for r in rows], pa.binary())], ["value"])
    sent = {}
    for name, batches in (("columns", [arrow_rows(rows[:200]), arrow_rows(rows[200:])]),
                          ("value only", [value_only.slice(0, 200), value_only.slice(200)])):
        producer = FakeProducer()
        assert writer.BundledSend(producer, wopts(bundleMaxBytes="9000", bundleMaxRows="40"), "events",
                                  None).send_all(iter(batches)) == (500, sum(len(r["value"]) for r in rows))
        sent[name] = [(m.msg_type, m.msg_time, part,
                       [(r.body, r.attributes) for r in decode_bundle(m.data, m.attributes)])
                      for _t, m, part in producer.sent]
    assert sent["value only"] == sent["columns"]
    assert [body for *_m, records in sent["value only"] for body, _a in records] == [r["value"] for r in rows]


def test_encode_bundle_splits_what_does_not_fit_and_names_a_lone_row():
    records = [(os.urandom(300), {}) for _ in range(8)]
    parts = encode_bundle(records, list(range(10, 18)), compress=True, limit=1000, describe=lambda r: f"row {r}")
    assert len(parts) > 1 and all(len(p) <= 1000 for p, _rows in parts)
    assert [r for _p, rows in parts for r in rows] == list(range(10, 18))
    assert [rec.body for p, _rows in parts for rec in decode_bundle(p, {"msgEnType": "2"})] == [r[0] for r in records]
    with pytest.raises(MessageTooLargeError, match="row 12"):
        encode_bundle([(os.urandom(2000), {})], [12], compress=True, limit=1000, describe=lambda r: f"row {r}")


# --------------------------------------------------------------------------------- BundledSend

class FakeProducer:
    def __init__(self, partitions: int = 2, max_size: int = 1024 * 1024) -> None:
        self.parts = tuple(PartitionRef(1, "events", i, "h", 1) for i in range(partitions))
        self.max_size = max_size
        self.sent: list[tuple[str, OutgoingMessage, PartitionRef | None]] = []
        self.flushes = 0

    def publish(self, topics, timeout_s=60.0):
        pass

    def partitions(self, topic):
        return self.parts

    def max_message_size(self, topic):
        return self.max_size

    def choose_partition(self, topic, key_hash=None):
        return self.parts[key_hash % len(self.parts)]  # every broker serving: the producer's rule then

    def send_async(self, topic, message, partition=None, *, key_hash=None, defer=False):
        message.encode()  # the producer's own checks of msgType/msgTime/attributes
        if partition is None and key_hash is not None:
            partition = self.choose_partition(topic, key_hash)
        self.sent.append((topic, message, partition))

    def flush(self):
        self.flushes += 1
        return []


def wopts(**extra: str) -> TubeMQOptions:
    return TubeMQOptions.from_raw({"master": "h:1", "topic": "events", "payloadFormat": "inlongmsg", **extra},
                                  mode="write")


def arrow_rows(rows: list[dict]) -> pa.RecordBatch:
    fields = [pa.field("value", pa.binary()), pa.field("streamId", pa.string()),
              pa.field("msgTime", pa.timestamp("us", tz="UTC")),
              pa.field("attributes", pa.map_(pa.string(), pa.string())), pa.field("partitionKey", pa.string())]
    columns = {f.name: [r.get(f.name) for r in rows] for f in fields}
    columns["attributes"] = [list(a.items()) if a else None for a in columns["attributes"]]
    return pa.RecordBatch.from_arrays([pa.array(columns[f.name], f.type) for f in fields], schema=pa.schema(fields))


def sent_rows(producer: FakeProducer) -> list[tuple[str | None, str | None, bytes, dict]]:
    out = []
    for _topic, message, _part in producer.sent:
        assert message.attributes == {"msgEnType": "2"}
        for record in decode_bundle(message.data, message.attributes):
            out.append((message.msg_type, message.msg_time, record.body, record.attributes))
    return out


def test_rows_are_packed_per_stream_id_and_attributes():
    producer = FakeProducer()
    when = datetime(2026, 3, 4, 5, 6, 59, 250000, tzinfo=UTC)
    rows = [{"value": f"v{i}".encode(), "streamId": f"s{i % 2}", "attributes": {"a": str(i % 3)} if i % 4 else None,
             "msgTime": when if i == 5 else None} for i in range(40)]
    sender = writer.BundledSend(producer, wopts(bundleMaxRows="7"), "events", None)
    sent = sender.send_all(iter([arrow_rows(rows[:25]), arrow_rows(rows[25:])]))
    assert sent == (40, sum(len(r["value"]) for r in rows))
    got = sent_rows(producer)
    assert sorted(body for _t, _m, body, _a in got) == sorted(r["value"] for r in rows)
    for msg_type, msg_time, body, attrs in got:
        i = int(body[1:])
        assert msg_type == f"s{i % 2}" and attrs["streamId"] == msg_type
        assert attrs.get("a") == (str(i % 3) if i % 4 else None)
        assert (msg_time, attrs.get("dt")) == (("202603040506", "1772600819250") if i == 5 else (None, None))
    for _topic, message, _part in producer.sent:  # one key per bundle, at most bundleMaxRows records
        records = decode_bundle(message.data, {"msgEnType": "2"})
        assert 1 <= len(records) <= 7
        assert len({(r.attributes.get("a"), r.attributes["streamId"]) for r in records}) == 1
    assert len(producer.sent) < 40 and producer.flushes >= 2


def test_bundle_bytes_and_compression_options():
    producer = FakeProducer()
    rows = [{"value": b"x" * 100} for _ in range(100)]
    writer.BundledSend(producer, wopts(bundleMaxBytes="2048", bundleCompression="none"), "events",
                       None).send_all(iter([arrow_rows(rows)]))
    assert all(len(m.data) <= 2048 for _t, m, _p in producer.sent)
    assert len(producer.sent) >= 100 * 104 // 2048
    assert sum(len(decode_bundle(m.data, {"msgEnType": "2"})) for _t, m, _p in producer.sent) == 100
    # the group's compression flag (after magic, time, count, empty attribute text, length): none
    assert all(m.data[20:21] == b"\0" for _t, m, _p in producer.sent if len(m.data) > 30)
    small_topic = FakeProducer(max_size=8192)  # default bundleMaxBytes: the topic's max minus headroom
    writer.BundledSend(small_topic, wopts(bundleMaxRows="100000"), "events", None).send_all(
        iter([arrow_rows([{"value": bytes([i % 256]) * 500} for i in range(200)])]))
    assert all(len(m.data) <= 8192 - writer.BUNDLE_HEADROOM for _t, m, _p in small_topic.sent)


def test_dedup_ids_are_per_record_and_route_replays_alike():
    producer = FakeProducer(partitions=4)
    rows = [{"value": f"v{i}".encode()} for i in range(20)]
    writer.BundledSend(producer, wopts(dedupAttribute="wid"), "events", "w1-0").send_all(iter([arrow_rows(rows)]))
    again = FakeProducer(partitions=4)
    writer.BundledSend(again, wopts(dedupAttribute="wid"), "events", "w1-0").send_all(iter([arrow_rows(rows)]))

    def placed(p):
        return sorted((part.partition_id, rec.body, rec.attributes["wid"]) for _t, m, part in p.sent
                      for rec in decode_bundle(m.data, {"msgEnType": "2"}))

    assert placed(producer) == placed(again)
    assert {wid for _p, _b, wid in placed(producer)} == {f"w1-0-{i}" for i in range(20)}


def test_bad_rows_are_named():
    with pytest.raises(MessageFormatError, match=r"row 1 .*disagrees with its streamId column"):
        writer.BundledSend(FakeProducer(), wopts(), "events", None).send_all(iter([arrow_rows([
            {"value": b"a"}, {"value": b"b", "streamId": "s", "attributes": {"streamId": "other"}}])]))
    with pytest.raises(PayloadEncodeError, match="row 0 of this task cannot be put in an InLong bundle"):
        writer.BundledSend(FakeProducer(), wopts(), "events", None).send_all(iter([arrow_rows([
            {"value": b"a", "attributes": {"k": "a&b"}}])]))
    with pytest.raises(MessageTooLargeError, match="row 1 of this task"):
        writer.BundledSend(FakeProducer(max_size=4096), wopts(), "events", None).send_all(iter([arrow_rows([
            {"value": b"a"}, {"value": os.urandom(4000)}])]))


def test_linger_sends_an_open_bundle_at_the_next_arrow_batch(monkeypatch):
    producer = FakeProducer(partitions=1)
    sender = writer.BundledSend(producer, wopts(bundleLingerMs="0"), "events", None)
    batches = iter([arrow_rows([{"value": b"a"}]), arrow_rows([{"value": b"b"}])])
    first = next(batches)

    def gen():
        yield first
        assert len(producer.sent) == 1  # linger 0: the first batch's bundle went before the second arrived
        yield next(batches)

    sender.send_all(gen())
    assert len(producer.sent) == 2
