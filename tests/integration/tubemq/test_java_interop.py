"""Our client and the official TubeMQ Java client on the same real cluster, in both directions.

(a) our Producer writes, the Java consumer reads: same bytes (empty and binary bodies included) and
    the attribute text Java expects (``$msgType$=T,$msgTime$=yyyyMMddHHmm,k=v``); the Java consumer
    silently drops messages whose checksum does not match, so the count also checks our CRC.
(b) the Java producer writes, our Consumer reads: same bytes, Java's attributes decoded, messageIds and
    partitions as the Java producer reported them.
(c) on a dense topic, our RangeReader and the Java client's bound ("partition offset") consumption
    read the same [start, end) of one partition: same bodies at the same offsets.

The Java side is ``tests/interop/javaclient.py`` (one short-lived JVM per call).
"""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.tubemq.group_consumer import Consumer
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.common import ClientSettings, new_client_id
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.client.ranges import RangeReader, probe_bounds
from tubespark.tubemq.wire.constants import ATTR_MSG_TIME, ATTR_MSG_TYPE, INDEX_RECORD_SIZE
from tubespark.tubemq.wire.message import OutgoingMessage, encode_attributes

if not (Path(__file__).resolve().parents[2] / "interop" / "javaclient.py").exists():
    pytest.skip("tests/interop/javaclient.py (the Java interop driver) is missing", allow_module_level=True)


pytestmark = [pytest.mark.integration]

N = 30
MSG_TIME = "202611221045"
PUBLISH_TIMEOUT_S = 240.0
JAVA_TIMEOUT_MS = 150_000  # a Java consumer waits for the master's rebalance and its own heartbeat
CONSUME_TIMEOUT_S = 90.0
FAST = ClientSettings(heartbeat_interval_s=1)


def _body(side: str, i: int) -> bytes:
    if i == 0:
        return b""  # only possible with attributes (TubeMQ stores no empty payload); Java cannot send it
    if i == 1:
        return bytes(range(256))
    if i == 2:
        return b"\x00" * 1000 + side.encode()
    if i == 3:
        return side.encode() + random.Random(i).randbytes(100 * 1024)
    return f"{side}-{i}:".encode() + random.Random(i).randbytes(i * 13) + b"\xff\x00"


def _shape(i: int) -> tuple[dict[str, str], str | None, str | None]:
    """(user attributes, msgType, msgTime) cycling through every combination, message 0 always with some."""
    kind = i % 5
    attrs = {"seq": str(i), "wert": "grüße"} if kind in (1, 3) or i == 0 else {}
    msg_type = ("orders", "clicks")[i % 2] if kind in (2, 3) else None
    msg_time = MSG_TIME if kind in (3, 4) else None
    return attrs, msg_type, msg_time


def _ours(i: int) -> OutgoingMessage:
    attrs, msg_type, msg_time = _shape(i)
    return OutgoingMessage(_body("py", i), msg_type=msg_type, msg_time=msg_time, attributes=attrs)


def _java_message(i: int) -> dict:
    attrs, msg_type, msg_time = _shape(i)
    body = _body("java", i) or b"java-was-empty"  # the Java producer refuses an empty body
    return {"data": body, "attrs": attrs or None, "msgType": msg_type, "msgTime": msg_time}


@pytest.fixture(scope="module")
def topics(topic_factory) -> dict[str, str]:
    layouts = {"to_java": (1, 4), "from_java": (4, 1), "ranges": (1, 4)}
    return {key: topic_factory(partitions=p, stores=s) for key, (p, s) in layouts.items()}


def test_java_consumer_reads_what_we_produce(tubemq_cluster, java, topics):
    topic = topics["to_java"]
    master = tubemq_cluster.master_address
    messages = [_ours(i) for i in range(N)]
    with Producer(master) as producer:
        producer.publish([topic], timeout_s=PUBLISH_TIMEOUT_S)
        for message in messages:
            producer.send_async(topic, message)
        results = producer.flush()

    got = java.consume(master, f"ji_a_{uuid.uuid4().hex[:10]}", topic, N, from_first=True,
                       timeout_ms=JAVA_TIMEOUT_MS)
    assert len(got) == N, f"the Java consumer got {len(got)} of {N} messages (it drops bad checksums silently)"
    by_data = {g["data"]: g for g in got}
    assert sorted(by_data) == sorted(m.data for m in messages), "bodies differ"
    for message, result in zip(messages, results, strict=True):
        g = by_data[message.data]
        text = encode_attributes(message.attributes, message.msg_type, message.msg_time)
        assert (g["attribute"] or "") == text, (g["attribute"], text)
        assert (g["msgType"] or None) == message.msg_type
        assert (g["msgTime"] or None) == message.msg_time
        assert g["partitionKey"] == result.partition.key
        assert g["messageId"] == result.message_id
        # one partition per store: the Java consumer's batch position gives the append offset back
        assert g["batchOffset"] + INDEX_RECORD_SIZE * g["index"] == result.append_offset


def test_our_consumer_reads_what_java_produces(tubemq_cluster, java, topics):
    topic = topics["from_java"]
    master = tubemq_cluster.master_address
    messages = [_java_message(i) for i in range(N)]
    results = java.produce(master, topic, messages, timeout_ms=JAVA_TIMEOUT_MS)
    assert all(r["ok"] for r in results), results

    received = []
    with Consumer(master, f"ji_b_{uuid.uuid4().hex[:10]}", [topic], settings=FAST) as consumer:
        consumer.session.wait_for_partitions(4, timeout_s=60.0)
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(received) < N and time.monotonic() < deadline:
            batch = consumer.poll(timeout_s=2.0)
            if batch is not None:
                received += [(batch.partition.key, m) for m in batch.messages]
    assert len(received) == N, f"our consumer got {len(received)} of {N} messages"

    by_id = {m.message_id: (key, m) for key, m in received}
    assert len(by_id) == N
    for message, result in zip(messages, results, strict=True):
        key, m = by_id[result["messageId"]]
        assert key == result["partition"]
        assert m.data == message["data"]
        expected = dict(message["attrs"] or {})
        if message["msgType"]:
            expected[ATTR_MSG_TYPE] = message["msgType"]
        if message["msgTime"]:
            expected[ATTR_MSG_TIME] = message["msgTime"]
        assert m.attributes == expected
        assert m.user_attributes == (message["attrs"] or {})
        assert m.msg_type == (message["msgType"] or "")
        assert m.msg_time == (message["msgTime"] or "")


@pytest.fixture(scope="module")
def dense_partition(tubemq_cluster, topics):
    """40 messages (some of 150 KiB, so reads span several fetches) on one partition of a dense topic."""
    topic = topics["ranges"]
    with Producer(tubemq_cluster.master_address) as producer:
        producer.publish([topic], timeout_s=PUBLISH_TIMEOUT_S)
        part = producer.partitions(topic)[2]
        assert part.partition_id == 20000
        for i in range(40):
            size = 150 * 1024 if i % 7 == 3 else 50 + i
            body = f"range-{i}:".encode() + random.Random(1000 + i).randbytes(size)
            msg_type = "x" if i % 2 else None
            producer.send_async(topic, OutgoingMessage(body, msg_type=msg_type), part)
        results = producer.flush()
    offsets = [r.append_offset for r in results]
    assert offsets == [INDEX_RECORD_SIZE * i for i in range(40)]
    return topic, part, offsets


@pytest.mark.parametrize("bounds", ["inner", "whole"])
def test_range_reads_match_the_java_client(tubemq_cluster, java, dense_partition, bounds):
    topic, part, offsets = dense_partition
    broker = BrokerClient(new_client_id("ji_range"))
    try:
        if bounds == "whole":
            limits = probe_bounds(broker, part, f"ji_probe_{uuid.uuid4().hex[:10]}")
            start, end = limits.min_offset, limits.max_offset
        else:
            start, end = offsets[3], offsets[30]
        ours = list(RangeReader(broker, f"ji_ours_{uuid.uuid4().hex[:10]}").read(part, start, end))
    finally:
        broker.close()
    theirs = java.read_range(tubemq_cluster.master_address, f"ji_c_{uuid.uuid4().hex[:10]}", topic, part.key,
                             start, end, timeout_ms=JAVA_TIMEOUT_MS)
    assert len(ours) == len([o for o in offsets if start <= o < end])
    assert [(m.offset, m.data) for m in ours] == [(g["offset"], g["data"]) for g in theirs]
    assert [m.message_id for m in ours] == [g["messageId"] for g in theirs]
    assert [m.msg_type for m in ours] == [g["msgType"] or "" for g in theirs]
    assert {g["partitionKey"] for g in theirs} == {part.key}
