"""Our Producer and Consumer against the real TubeMQ cluster: every message back, exactly once, intact.

What a user sees: 10,000 messages of mixed sizes (0 B to 900 KiB), half of them with attributes,
sent pipelined (``send_async`` + ``flush``) to a 4-partition topic, come back to a fresh consumer
group byte-equal, with the same attributes, msgType and msgTime, each exactly once and in append
order per partition. Messages are keyed by the broker's messageId from ``SendResult`` (so even a
0-byte body is identified), and attribute messages also carry their index in an ``id`` attribute.

Also the failure modes a user hits first: a message over the topic's size limit, an empty message,
an unknown topic and a dead master all raise typed errors quickly and send nothing.
"""

from __future__ import annotations

import random
import socket
import time
import uuid
from collections import Counter, defaultdict

import pytest

from tests.integration.tubemq.group_consumer import Consumer
from tubespark.errors import MessageFormatError, MessageTooLargeError, TubeSparkError, UnknownTopicError
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.common import ClientSettings, new_client_id
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.client.ranges import probe_bounds
from tubespark.tubemq.errors import NoMasterAvailableError
from tubespark.tubemq.wire.constants import ATTR_MSG_TIME, ATTR_MSG_TYPE
from tubespark.tubemq.wire.message import OutgoingMessage

pytestmark = [pytest.mark.integration]

N_MESSAGES = 10_000
SIZES = (0, 1, 100, 1024, 10 * 1024)
BIG_SIZE = 900 * 1024
BIG_EVERY = 500  # 20 messages of 900 KiB among the 10,000
MSG_TIME = "202611221030"
PUBLISH_TIMEOUT_S = 240.0  # a new topic takes tens of seconds to become publishable (broker state machine)
ASSIGN_TIMEOUT_S = 60.0
CONSUME_TIMEOUT_S = 180.0
FAST = ClientSettings(heartbeat_interval_s=1)


def _size(i: int) -> int:
    return BIG_SIZE if i % BIG_EVERY == 7 else SIZES[i % len(SIZES)]


def _body(i: int) -> bytes:
    """Deterministic binary content (zeros, 0xff and everything between)."""
    return random.Random(i).randbytes(_size(i))


def _message(i: int) -> OutgoingMessage:
    body = _body(i)
    # Half carry attributes; an empty body must (TubeMQ stores no empty message).
    if i % 2 == 1 or not body:
        return OutgoingMessage(body, msg_type=f"type{i % 3}", msg_time=MSG_TIME,
                               attributes={"id": str(i), "src": "roundtrip", "wert": "grüße-ß"})
    return OutgoingMessage(body)


@pytest.fixture(scope="module")
def topics(topic_factory) -> dict[str, str]:
    """Fresh topics: 4 partitions in one store, and one partition in each of 4 stores (independent offsets)."""
    return {"round": topic_factory(partitions=4, stores=1), "limits": topic_factory(partitions=1, stores=4)}


def test_ten_thousand_mixed_messages_round_trip_exactly_once(tubemq_cluster, topics):
    topic = topics["round"]
    master = tubemq_cluster.master_address

    started = time.monotonic()
    with Producer(master) as producer:
        producer.publish([topic], timeout_s=PUBLISH_TIMEOUT_S)
        assert len(producer.partitions(topic)) == 4
        for i in range(N_MESSAGES):
            producer.send_async(topic, _message(i))
        results = producer.flush()
    send_s = time.monotonic() - started
    assert len(results) == N_MESSAGES  # flush returns one result per queued message, in queue order

    # The broker's messageId identifies each message; offsets are distinct positions per store.
    sent = {(r.partition.key, r.message_id): i for i, r in enumerate(results)}
    assert len(sent) == N_MESSAGES, "the broker returned a duplicate messageId"
    assert len({r.append_offset for r in results}) == N_MESSAGES  # one store: one index record each
    assert {r.partition.key for r in results} == {p.key for p in producer.partitions(topic)}
    print(f"sent {N_MESSAGES} messages ({sum(map(_size, range(N_MESSAGES))) / 2**20:.1f} MiB) in {send_s:.1f}s")

    received: list[tuple[str, int, int, object]] = []  # (partition key, messageId, start offset, message)
    started = time.monotonic()
    with Consumer(master, f"rt_{uuid.uuid4().hex[:10]}", [topic], settings=FAST, start="earliest") as consumer:
        held = consumer.session.wait_for_partitions(4, timeout_s=ASSIGN_TIMEOUT_S)
        assert len(held) == 4, f"a lone group member holds {sorted(held)}, expected all 4 partitions"
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(received) < N_MESSAGES and time.monotonic() < deadline:
            batch = consumer.poll(timeout_s=5.0)
            if batch is not None:
                received.extend((batch.partition.key, m.message_id, batch.start_offset, m) for m in batch.messages)
        # Anything delivered twice would show up right after the last expected message.
        extra_deadline = time.monotonic() + 3.0
        while time.monotonic() < extra_deadline:
            batch = consumer.poll(timeout_s=1.0)
            if batch is not None:
                received.extend((batch.partition.key, m.message_id, batch.start_offset, m) for m in batch.messages)
    print(f"consumed {len(received)} messages in {time.monotonic() - started:.1f}s")

    counts = Counter((key, mid) for key, mid, _, _ in received)
    duplicates = {k: c for k, c in counts.items() if c > 1}
    unknown = set(counts) - set(sent)
    missing = set(sent) - set(counts)
    assert not duplicates, f"{len(duplicates)} messages delivered more than once, e.g. {list(duplicates)[:5]}"
    assert not unknown, f"{len(unknown)} messages nobody sent, e.g. {list(unknown)[:5]}"
    assert not missing, f"{len(missing)} messages never delivered, e.g. indexes {sorted(sent[k] for k in missing)[:10]}"

    for key, mid, _, msg in received:
        i = sent[(key, mid)]
        expected = _message(i)
        assert msg.data == expected.data, f"message {i} ({_size(i)} B) came back with different bytes"
        if expected.msg_type is None:
            assert msg.attributes == {} and msg.msg_type == "" and msg.msg_time == "", i
        else:
            assert msg.user_attributes == expected.attributes, i
            assert msg.attributes == {ATTR_MSG_TYPE: expected.msg_type, ATTR_MSG_TIME: MSG_TIME,
                                      **expected.attributes}, i
            assert msg.msg_type == expected.msg_type and msg.msg_time == MSG_TIME, i
            assert msg.attributes["id"] == str(i)

    # Per partition, the consumer sees messages in append order, and batches start where the index
    # says the first message of the partition at or after that position is.
    order: dict[str, list[int]] = defaultdict(list)
    for key, mid, start, _ in received:
        offset = results[sent[(key, mid)]].append_offset
        assert start <= offset
        order[key].append(offset)
    for key, offsets in order.items():
        assert offsets == sorted(offsets), f"partition {key} delivered out of append order"


def test_oversized_and_empty_messages_are_refused_and_not_sent(tubemq_cluster, topics):
    topic = topics["limits"]
    master = tubemq_cluster.master_address
    with Producer(master) as producer:
        producer.publish([topic], timeout_s=PUBLISH_TIMEOUT_S)
        limit = producer.max_message_size(topic)
        assert limit >= 1024 * 1024  # the cluster default (maxMsgSizeInMB, 1 to 20) reaches us via topicInfos
        part = producer.partitions(topic)[0]
        reader = BrokerClient(new_client_id("rt_probe"))
        try:
            before = probe_bounds(reader, part, f"rt_probe_{uuid.uuid4().hex[:8]}")

            with pytest.raises(MessageTooLargeError):
                producer.send(topic, OutgoingMessage(b"x" * (limit + 1)), part)
            with pytest.raises(MessageTooLargeError):  # attributes count towards the limit
                producer.send_async(topic, OutgoingMessage(b"x" * (limit - 10), attributes={"k": "v" * 20}), part)
            with pytest.raises(MessageFormatError):  # the broker would answer 400 "data length is zero!"
                producer.send_async(topic, OutgoingMessage(b""), part)
            assert producer.flush() == []  # nothing was queued
            assert probe_bounds(reader, part, f"rt_probe_{uuid.uuid4().hex[:8]}") == before

            # Exactly at the limit is fine, and so is an empty body that has attributes.
            at_limit = producer.send(topic, OutgoingMessage(b"y" * limit), part)
            empty_with_attrs = producer.send(topic, OutgoingMessage(b"", msg_type="empty"), part)
            assert at_limit.append_offset == before.max_offset
            assert empty_with_attrs.append_offset == before.max_offset + 28
            after = probe_bounds(reader, part, f"rt_probe_{uuid.uuid4().hex[:8]}")
            assert after.max_offset == before.max_offset + 2 * 28
        finally:
            reader.close()


def test_publishing_an_unknown_topic_raises_unknown_topic_error(tubemq_cluster, topics):
    missing = f"rt_missing_{uuid.uuid4().hex[:10]}"
    with Producer(tubemq_cluster.master_address) as producer:
        started = time.monotonic()
        with pytest.raises(UnknownTopicError) as info:
            producer.publish([missing], timeout_s=3.0)
        assert missing in str(info.value)
        assert time.monotonic() - started < 15.0
        with pytest.raises(UnknownTopicError):  # never published here: refused before any network call
            producer.send(missing, OutgoingMessage(b"data"))
        # The failed publish must not poison the producer: a real topic still publishes and sends.
        producer.publish([topics["limits"]], timeout_s=PUBLISH_TIMEOUT_S)
        result = producer.send(topics["limits"], OutgoingMessage(b"still works"),
                               producer.partitions(topics["limits"])[-1])  # not the one the size test counts
        assert result.append_offset >= 0


def test_consumer_of_an_unknown_topic_is_refused(tubemq_cluster):
    started = time.monotonic()
    with pytest.raises(UnknownTopicError):
        Consumer(tubemq_cluster.master_address, f"rt_{uuid.uuid4().hex[:10]}",
                 [f"rt_missing_{uuid.uuid4().hex[:10]}"]).start()
    assert time.monotonic() - started < 15.0


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("role", ["producer", "consumer"])
def test_dead_master_fails_fast_with_a_typed_error(role):
    master = f"127.0.0.1:{_closed_port()}"
    settings = ClientSettings(connect_timeout_s=2.0, request_timeout_s=3.0)
    started = time.monotonic()
    client = Producer(master, settings) if role == "producer" else Consumer(master, "rt_dead_master", ["any_topic"],
                                                                            settings=settings)
    with pytest.raises(TubeSparkError) as info:
        client.start()
    elapsed = time.monotonic() - started
    assert isinstance(info.value, NoMasterAvailableError), repr(info.value)
    assert info.value.retriable
    assert master in str(info.value)
    assert elapsed < 15.0, f"{role} took {elapsed:.1f}s to give up on a dead master"
