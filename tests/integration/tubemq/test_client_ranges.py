"""RangeReader and probe_bounds against the real TubeMQ cluster.

Ground truth is what the broker told our producer: ``SendResult.append_offset`` is each message's
index offset. A range read of ``[start, end)`` must return exactly the partition's messages whose
append offsets lie in the range, in append order, whatever the layout:

* dense: ``partitions=1, stores=4`` -- each partition has its own index, offsets 0, 28, 56, ...;
* sparse: ``partitions=4, stores=1`` -- four partitions interleave in one index (round-robin sends),
  so a partition's offsets have gaps and a fetch batch's span includes other partitions' records.

Ranges include start == end, start at the store min, end at the store max, unaligned bounds, a mix of
small and 150 KiB messages (a read spans several broker fetches) and an end planned *before* more
data was appended, so the broker's last batch runs past the end and has to be cut.
"""

from __future__ import annotations

import itertools
import random
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass

import pytest

from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.common import new_client_id
from tubespark.tubemq.client.producer import Producer, SendResult
from tubespark.tubemq.client.ranges import Bounds, RangeReader, probe_bounds
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE
from tubespark.tubemq.wire.formats import PartitionRef
from tubespark.tubemq.wire.message import OutgoingMessage, ReceivedMessage

pytestmark = [pytest.mark.integration]

PUBLISH_TIMEOUT_S = 240.0
PER_PHASE = 120  # messages per phase over the 4 partitions: 30 per partition
LAYOUTS = {"dense": (1, 4), "sparse": (4, 1)}
MSG_TYPES = ("x", "y", None)
FRESH_FILTERED_READ_S = 5.0  # a filtered read of unflushed data; the broker flushes after 20 s (checked every 10 s)


@dataclass
class Written:
    layout: str
    topic: str
    partitions: tuple[PartitionRef, ...]
    part: PartitionRef  # the partition the range tests read
    sent: list[tuple[SendResult, OutgoingMessage]]  # everything, in send order
    planned_end: int  # the partition's max offset after phase 1, before phase 2 was appended

    def of_part(self) -> list[tuple[int, OutgoingMessage]]:
        return [(r.append_offset, m) for r, m in self.sent if r.partition.key == self.part.key]

    def offsets(self) -> list[int]:
        return [o for o, _ in self.of_part()]


def _message(layout: str, k: int) -> OutgoingMessage:
    size = 150 * 1024 if k % 20 in (5, 15) else (10, 1000, 3000)[k % 3]  # big ones on partitions 1 and 3
    body = f"{layout}-{k}:".encode() + random.Random(k).randbytes(size)
    msg_type = MSG_TYPES[(k // 4) % 3]  # by k // 4 so that every partition gets every type
    if msg_type is None:
        return OutgoingMessage(body)
    return OutgoingMessage(body, msg_type=msg_type, attributes={"k": str(k)})


def _send_phase(producer: Producer, topic: str, partitions: tuple[PartitionRef, ...], layout: str,
                first: int) -> list[tuple[SendResult, OutgoingMessage]]:
    """Round-robin over the partitions explicitly, so the sparse store really interleaves them."""
    messages = [_message(layout, k) for k in range(first, first + PER_PHASE)]
    for k, message in enumerate(messages):
        producer.send_async(topic, message, partitions[k % len(partitions)])
    return list(zip(producer.flush(), messages, strict=True))


def _bounds(part: PartitionRef) -> Bounds:
    broker = BrokerClient(new_client_id("rg_probe"))
    try:
        return probe_bounds(broker, part, f"rg_probe_{uuid.uuid4().hex[:10]}")
    finally:
        broker.close()


def _read(part: PartitionRef, start: int, end: int, filters: tuple[str, ...] = (),
          retry_s: float = 60.0) -> list[ReceivedMessage]:
    broker = BrokerClient(new_client_id("rg_read"))
    try:
        reader = RangeReader(broker, f"rg_read_{uuid.uuid4().hex[:10]}", filters=filters, retry_s=retry_s)
        return list(reader.read(part, start, end))
    finally:
        broker.close()


@pytest.fixture(scope="module")
def topics(topic_factory) -> dict[str, str]:
    return {layout: topic_factory(partitions=partitions, stores=stores)
            for layout, (partitions, stores) in LAYOUTS.items()}


def _write(master: str, layout: str, topic: str) -> Written:
    with Producer(master) as producer:
        producer.publish([topic], timeout_s=PUBLISH_TIMEOUT_S)
        partitions = producer.partitions(topic)
        assert len(partitions) == 4
        part = partitions[1]
        sent = _send_phase(producer, topic, partitions, layout, 0)
        planned_end = _bounds(part).max_offset
        # An early read of the whole partition, as a first micro-batch would do it.
        early = _read(part, 0, planned_end)
        assert [m.data for m in early] == [m.data for r, m in sent if r.partition.key == part.key]
        sent += _send_phase(producer, topic, partitions, layout, PER_PHASE)
    return Written(layout, topic, partitions, part, sent, planned_end)


@pytest.fixture(scope="module")
def written_all(tubemq_cluster, topics) -> dict[str, Written]:
    """Both layouts' data at once."""
    return {layout: _write(tubemq_cluster.master_address, layout, topic) for layout, topic in topics.items()}


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def written(request, written_all) -> Written:
    return written_all[request.param]


def test_layout_gives_the_expected_offsets(written):
    offsets = written.offsets()
    assert len(offsets) == 2 * PER_PHASE // 4
    assert offsets == sorted(offsets)
    steps = {b - a for a, b in itertools.pairwise(offsets)}
    if written.layout == "dense":
        assert offsets[0] == 0 and steps == {INDEX_RECORD_SIZE}
    else:  # four partitions interleaved record by record in one index
        assert steps == {4 * INDEX_RECORD_SIZE}


def test_probe_bounds_spans_the_store(written):
    last_by_store: dict[int, int] = defaultdict(lambda: -INDEX_RECORD_SIZE)
    for result, _ in written.sent:
        store = result.partition.store_id
        last_by_store[store] = max(last_by_store[store], result.append_offset)
    for part in written.partitions:
        bounds = _bounds(part)
        assert bounds == Bounds(0, last_by_store[part.store_id] + INDEX_RECORD_SIZE), part.key
    if written.layout == "sparse":
        assert len(last_by_store) == 1  # min/max are per store: the same for all four partitions


def _range(written: Written, name: str) -> tuple[int, int]:
    offs = written.offsets()
    bounds = _bounds(written.part)
    return {
        "store_min_to_max": (bounds.min_offset, bounds.max_offset),
        "inner": (offs[5], offs[17]),
        "start_equals_end": (offs[5], offs[5]),
        "empty_at_max": (bounds.max_offset, bounds.max_offset),
        "unaligned_bounds": (offs[3] + 5, offs[20] - 3),
        "end_just_past_a_record": (offs[2], offs[30] + INDEX_RECORD_SIZE),
        "end_planned_before_more_data": (0, written.planned_end),
        "from_planned_end_to_max": (written.planned_end, bounds.max_offset),
        "last_five": (offs[-5], bounds.max_offset),
        "single_message": (offs[7], offs[7] + 1),
    }[name]


RANGES = ["store_min_to_max", "inner", "start_equals_end", "empty_at_max", "unaligned_bounds",
          "end_just_past_a_record", "end_planned_before_more_data", "from_planned_end_to_max", "last_five",
          "single_message"]


def _check_offsets(written: Written, got: list[ReceivedMessage], true_offsets: list[int], *, exact: bool) -> None:
    reported = [m.offset for m in got]
    if exact:
        assert reported == true_offsets
    else:  # a lower bound that still increases strictly within the partition
        assert all(r <= t for r, t in zip(reported, true_offsets, strict=True)), (reported, true_offsets)
        assert all(a < b for a, b in itertools.pairwise(reported)), reported


@pytest.mark.parametrize("name", RANGES)
def test_range_read_returns_exactly_the_messages_in_range(written, name):
    start, end = _range(written, name)
    expected = [(o, m) for o, m in written.of_part() if start <= o < end]
    got = _read(written.part, start, end)
    assert [m.data for m in got] == [m.data for _, m in expected], (
        f"{written.layout} [{start}, {end}): got {len(got)} messages, expected {len(expected)}")
    for received, (_, sent) in zip(got, expected, strict=True):
        assert received.msg_type == (sent.msg_type or "")
        assert received.user_attributes == sent.attributes
    _check_offsets(written, got, [o for o, _ in expected], exact=written.layout == "dense")
    if name in ("inner", "end_planned_before_more_data", "store_min_to_max"):
        assert len(expected) > 5  # the range is not trivially small


@pytest.mark.parametrize("name", ["store_min_to_max", "inner", "unaligned_bounds", "end_planned_before_more_data"])
def test_filtered_range_read_returns_only_that_msg_type(written, name):
    """The broker filters by msgType; reads serve its memory cache too (qryPriorityId 303, see the next test)."""
    start, end = _range(written, name)
    expected = [(o, m) for o, m in written.of_part() if start <= o < end and m.msg_type == "x"]
    assert expected, "the range holds no msgType x message: the test data is wrong"
    started = time.monotonic()
    got = _read(written.part, start, end, filters=("x",))
    print(f"filtered read of {written.layout} [{start}, {end}) took {time.monotonic() - started:.1f}s")
    assert [m.data for m in got] == [m.data for _, m in expected]
    assert {m.msg_type for m in got} == {"x"}
    # Filtered batches skip records, so per-message offsets are lower bounds even on a dense partition.
    _check_offsets(written, got, [o for o, _ in expected], exact=False)


def test_consecutive_ranges_tile_the_partition(written):
    """Reading [a, b) then [b, c) ... loses and repeats nothing: what consecutive micro-batches rely on."""
    offs = written.offsets()
    cuts = [0, offs[4] + 1, offs[11], written.planned_end, offs[40] - 5, _bounds(written.part).max_offset]
    got = []
    for start, end in itertools.pairwise(cuts):
        got += _read(written.part, start, end)
    assert [m.data for m in got] == [m.data for _, m in written.of_part()]


def test_filtered_read_sees_unflushed_messages_within_seconds(tubemq_cluster, topic_factory):
    """A filtered read is served from the broker's memory cache (qryPriorityId 303), like an unfiltered one.

    Without it the broker serves filtered reads from its files only, so fresh messages become visible at
    the next flush (memCacheFlushIntvl 20 s, checked every 10 s). Four rounds, each a fresh message read
    within a few seconds of its send: at most one flush falls in any 10 s, so luck cannot pass them all.
    """
    topic = topic_factory(partitions=1, stores=1)
    with Producer(tubemq_cluster.master_address) as producer:
        producer.publish([topic], timeout_s=PUBLISH_TIMEOUT_S)
        part = producer.partitions(topic)[0]
        for round_no in range(4):
            wanted, other = (OutgoingMessage(f"fresh-{t}-{round_no}".encode(), msg_type=t) for t in ("x", "y"))
            producer.send_async(topic, wanted, part)
            producer.send_async(topic, other, part)
            first, last = producer.flush()
            started = time.monotonic()
            got = _read(part, first.append_offset, last.append_offset + INDEX_RECORD_SIZE, filters=("x",),
                        retry_s=FRESH_FILTERED_READ_S)
            elapsed = time.monotonic() - started
            assert [m.data for m in got] == [wanted.data], f"round {round_no}"
            assert elapsed < FRESH_FILTERED_READ_S, f"round {round_no}: the filtered read took {elapsed:.1f}s"
