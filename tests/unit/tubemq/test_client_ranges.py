"""RangeReader and probe_bounds against the fake broker: exact [start, end) reads, data loss, holders."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.doubles.fakebroker import FakeBroker, fast_settings
from tubespark.errors import BadRequestError, ChecksumMismatchError, DataLossError, RangeReadError
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.ranges import Bounds, RangeReader, probe_bounds
from tubespark.tubemq.errors import PartitionOccupiedError
from tubespark.tubemq.wire.constants import Method
from tubespark.tubemq.wire.formats import PartitionRef
from tubespark.tubemq.wire.message import OutgoingMessage

READ_GROUP = "app-tubespark-read"
N = 10


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker(batch_size=4) as fake:
        yield fake


@pytest.fixture
def part(broker: FakeBroker) -> PartitionRef:
    [ref] = broker.add_topic("topic_r")
    broker.append(ref, *[f"m{i}".encode() for i in range(N)])
    return ref


@pytest.fixture
def client() -> Iterator[BrokerClient]:
    c = BrokerClient("reader-1", fast_settings())
    yield c
    c.close()


def reader(client: BrokerClient, **kwargs) -> RangeReader:
    kwargs.setdefault("retry_s", 2.0)
    return RangeReader(client, READ_GROUP, **kwargs)


def read(rr: RangeReader, part: PartitionRef, start: int, end: int) -> list[tuple[int, bytes]]:
    return [(m.offset, m.data) for m in rr.read(part, start, end)]


def expected(first: int, last: int) -> list[tuple[int, bytes]]:
    """Messages first..last-1 of the dense fixture partition, with their exact offsets."""
    return [(28 * i, f"m{i}".encode()) for i in range(first, last)]


@pytest.mark.parametrize(("start", "end", "first", "last"), [
    (0, 28 * N, 0, N),             # the whole partition, end == max
    (28, 28 * 7, 1, 7),            # the end cuts through the second fetch batch [112, 224)
    (28 * 4, 28 * 8, 4, 8),        # exactly one batch
    (28 * 3, 28 * 4, 3, 4),        # one message
    (30, 28 * 5 + 3, 2, 6),        # unaligned bounds: a record is in range when its offset is
    (28 * 9, 28 * N, 9, N),        # the last message only
])
def test_exact_range(broker, part, client, start, end, first, last):
    rr = reader(client)
    assert read(rr, part, start, end) == expected(first, last)
    assert rr.lost_offsets == 0
    assert broker.holder(READ_GROUP, part) is None  # released afterwards


def test_batches_follow_the_fetches(part, client):
    batches = list(reader(client).read_batches(part, 28, 28 * 7))
    assert [[m.data for m in b] for b in batches] == [[b"m1", b"m2", b"m3", b"m4"], [b"m5", b"m6"]]


def test_data_arriving_after_the_plan_is_not_read(broker, part, client):
    """A batch that straddles the planned end (new data) is cut by counting records."""
    broker.batch_size = 100
    broker.append(part, b"late-1", b"late-2")
    assert read(reader(client), part, 0, 28 * N) == expected(0, N)


def test_empty_range_makes_no_call(broker, part, client):
    assert read(reader(client), part, 56, 56) == []
    assert read(reader(client), part, 56, 28) == []
    assert broker.requests == []


def test_data_loss_below_min_fails_by_default(broker, part, client):
    broker.expire(part, 28 * 3)
    with pytest.raises(DataLossError, match=r"\[0, 84\)"):
        read(reader(client), part, 0, 28 * 6)
    assert broker.holder(READ_GROUP, part) is None


def test_data_loss_below_min_is_skipped_and_counted_when_allowed(broker, part, client):
    broker.expire(part, 28 * 3)
    rr = reader(client, fail_on_data_loss=False)
    assert read(rr, part, 0, 28 * 6) == expected(3, 6)
    assert rr.lost_offsets == 84


def test_start_beyond_max_is_data_loss(part, client):
    with pytest.raises(DataLossError, match="beyond the broker's max"):
        read(reader(client), part, 28 * (N + 2), 28 * (N + 5))


def test_end_beyond_max_waits_for_the_data_then_gives_up(part, client):
    started = time.monotonic()
    with pytest.raises(DataLossError, match="below the planned end"):
        read(reader(client, retry_s=0.5), part, 0, 28 * (N + 2))
    assert 0.4 < time.monotonic() - started < 5


def test_end_beyond_max_reads_data_that_arrives_in_time(broker, part, client):
    timer = threading.Timer(0.3, broker.append, (part, b"m10", b"m11"))
    timer.start()
    try:
        assert read(reader(client, retry_s=3.0), part, 28 * 8, 28 * 12) == expected(8, 12)
    finally:
        timer.cancel()


def test_waits_out_a_holder_that_goes_away(broker, part, client):
    broker.hold(READ_GROUP, part, "stale-task")
    timer = threading.Timer(0.3, broker.hold, (READ_GROUP, part, None))
    timer.start()
    try:
        assert read(reader(client, retry_s=5.0), part, 0, 28 * 3) == expected(0, 3)
    finally:
        timer.cancel()
    refused = [r for r in broker.requests_of(Method.BROKER_REGISTER) if r.opType == 31]
    assert len(refused) >= 2  # at least one 410, then success


def test_a_holder_that_stays_fails_the_read(broker, part, client):
    broker.hold(READ_GROUP, part, "live-task")
    with pytest.raises(RangeReadError, match="partition occupied by live-task") as error:
        read(reader(client, retry_s=0.0), part, 0, 28)
    assert isinstance(error.value.__cause__, PartitionOccupiedError)  # the budget ran out on a retriable fault
    assert broker.holder(READ_GROUP, part) == "live-task"  # not released by us


def test_retriable_fetch_error_is_retried(broker, part, client):
    broker.inject(Method.GET_MESSAGE, 503)
    assert read(reader(client), part, 0, 28 * 5) == expected(0, 5)


def test_non_retriable_fetch_error_surfaces(broker, part, client):
    broker.inject(Method.GET_MESSAGE, 400)
    with pytest.raises(BadRequestError):
        read(reader(client), part, 0, 28 * 5)
    assert broker.holder(READ_GROUP, part) is None


def test_checksum_mismatch_fails_unless_verification_is_off(broker, part, client):
    broker.stores[(part.topic, part.partition_id)].messages[1].checkSum ^= 1
    with pytest.raises(ChecksumMismatchError):
        read(reader(client), part, 0, 28 * 3)
    assert [d for _, d in read(reader(client, verify_checksums=False), part, 0, 28 * 3)] == [b"m0", b"m1", b"m2"]


def test_attributes_are_decoded(broker, client):
    [ref] = broker.add_topic("topic_attr")
    broker.append(ref, OutgoingMessage(b"body", msg_type="click", attributes={"k": "v"}))
    [message] = reader(client).read(ref, 0, 28)
    assert (message.data, message.msg_type, message.user_attributes, message.offset) == (b"body", "click",
                                                                                          {"k": "v"}, 0)


def test_the_users_group_offset_is_untouched(broker, part, client):
    broker.set_stored_offset("app", part, 56)
    read(reader(client), part, 0, 28 * N)
    assert broker.stored_offset("app", part) == 56


def test_probe_bounds(broker, part, client):
    assert probe_bounds(client, part, "probe") == Bounds(0, 28 * N)
    assert broker.holder("probe", part) is None
    broker.expire(part, 28 * 4)
    assert probe_bounds(client, part, "probe") == Bounds(112, 28 * N)
    [empty] = broker.add_topic("topic_empty")
    assert probe_bounds(client, empty, "probe") == Bounds(0, 0)


def test_probe_bounds_waits_out_a_holder(broker, part, client):
    broker.hold("probe", part, "old-probe")
    with pytest.raises(PartitionOccupiedError):
        probe_bounds(client, part, "probe", occupied_wait_s=0.0)
    timer = threading.Timer(0.2, broker.hold, ("probe", part, None))
    timer.start()
    try:
        assert probe_bounds(client, part, "probe", occupied_wait_s=5.0) == Bounds(0, 28 * N)
    finally:
        timer.cancel()


def test_fetch_async_answers_like_fetch(broker: FakeBroker, part: PartitionRef, client: BrokerClient) -> None:
    from tubespark.errors import NoDataError

    client.register(part, READ_GROUP, offset=0)
    pending = client.fetch_async(part, READ_GROUP)
    fetch = pending.result()
    assert fetch.start == 0 and [m.offset for m in fetch.decode()] == [0, 28, 56, 84]
    client.register(part, READ_GROUP, offset=28 * N)
    with pytest.raises(NoDataError):
        client.fetch_async(part, READ_GROUP).result()


def test_the_pending_batch_is_decoded_while_the_next_fetch_is_in_flight(broker: FakeBroker, part: PartitionRef,
                                                                         client: BrokerClient) -> None:
    """Same requests in the same order as a blocking read; every batch decoded exactly once."""
    from tubespark.tubemq.client import broker as broker_module

    decodes = []
    original = broker_module.Fetch.columns

    def counting(self, verify=True):
        decodes.append(self.start)
        return original(self, verify)

    broker_module.Fetch.columns = counting  # type: ignore[method-assign]
    try:
        batches = list(reader(client).read_batches(part, 0, 28 * N))
    finally:
        broker_module.Fetch.columns = original  # type: ignore[method-assign]
    assert [[(m.offset, m.data) for m in b] for b in batches] == [expected(0, 4), expected(4, 8), expected(8, 10)]
    assert decodes == [0, 112, 224]
    assert len(broker.requests_of(Method.GET_MESSAGE)) == 4  # three batches and the one that found no more data
