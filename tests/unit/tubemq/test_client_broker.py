"""BrokerClient against the fake broker (tests/doubles/fakebroker.py): round trips and typed errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.doubles.fakebroker import FakeBroker, fast_settings
from tubespark.errors import (
    BadRequestError,
    BrokerConnectionError,
    BrokerError,
    NoDataError,
    ServerBusyError,
    UnknownTopicError,
)
from tubespark.tubemq.client.broker import BrokerClient, Position
from tubespark.tubemq.errors import NotRegisteredError, PartitionOccupiedError, ServiceStoppedError
from tubespark.tubemq.wire.constants import Method, ReadStatus
from tubespark.tubemq.wire.formats import PartitionRef

GROUP = "grp"


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker(batch_size=4) as fake:
        yield fake


@pytest.fixture
def part(broker: FakeBroker) -> PartitionRef:
    [ref] = broker.add_topic("topic_a")
    broker.append(ref, *[f"m{i}".encode() for i in range(6)])
    return ref


@pytest.fixture
def client() -> Iterator[BrokerClient]:
    c = BrokerClient("client-1", fast_settings())
    yield c
    c.close()


def bodies(fetch) -> list[bytes]:
    return [m.payLoadData for m in fetch.messages]


def test_register_fetch_commit_round_trip(broker, part, client):
    assert client.register(part, GROUP) == Position(0, 6 * 28)
    assert broker.holder(GROUP, part) == "client-1"

    first = client.fetch(part, GROUP)
    assert (first.start, first.max_offset, bodies(first)) == (0, 168, [b"m0", b"m1", b"m2", b"m3"])
    second = client.fetch(part, GROUP)  # last_consumed=True: the first batch is folded into the stored offset
    assert (second.start, bodies(second)) == (112, [b"m4", b"m5"])
    assert client.commit(part, GROUP) == Position(168, 168)
    assert broker.stored_offset(GROUP, part) == 168
    with pytest.raises(NoDataError) as info:
        client.fetch(part, GROUP)
    assert info.value.code == 404
    assert info.value.retriable

    sent = broker.requests_of(Method.GET_MESSAGE)[0]
    assert (sent.clientId, sent.groupName, sent.topicName, sent.partitionId) == ("client-1", GROUP, "topic_a", 0)


def test_register_with_offset_seeks_and_is_clamped(broker, part, client):
    assert client.register(part, GROUP, offset=56) == Position(56, 168)
    assert client.fetch(part, GROUP).start == 56
    assert client.register(part, GROUP, offset=10_000) == Position(168, 168)  # clamped to max
    broker.expire(part, 84)
    assert client.register(part, GROUP, offset=0).offset == 84  # clamped to min
    # without an offset the request carries no currOffset and the stored offset stays
    assert client.register(part, GROUP) == Position(84, 168)
    assert not broker.requests_of(Method.BROKER_REGISTER)[-1].HasField("currOffset")


def test_new_group_reading_from_max(broker, part, client):
    assert client.register(part, GROUP, read_status=ReadStatus.FROM_MAX_IF_NEW).offset == 168


def test_fetch_without_consuming_redelivers_the_batch(part, client):
    client.register(part, GROUP)
    assert bodies(client.fetch(part, GROUP)) == [b"m0", b"m1", b"m2", b"m3"]
    again = client.fetch(part, GROUP, last_consumed=False)
    assert (again.start, bodies(again)) == (0, [b"m0", b"m1", b"m2", b"m3"])


def test_manual_commit_moves_a_cursor_ahead_of_the_stored_offset(broker, part, client):
    client.register(part, GROUP)
    assert client.fetch(part, GROUP, manual_commit=True).start == 0
    assert client.fetch(part, GROUP, manual_commit=True).start == 112
    assert broker.stored_offset(GROUP, part) == 0
    assert client.commit(part, GROUP) == Position(168, 168)


@pytest.mark.parametrize(("consumed", "stored"), [(True, 112), (False, 0)])
def test_unregister_commits_or_discards_the_batch_in_flight(broker, part, client, consumed, stored):
    client.register(part, GROUP)
    client.fetch(part, GROUP)
    client.unregister(part, GROUP, consumed=consumed)
    assert broker.holder(GROUP, part) is None
    assert broker.stored_offset(GROUP, part) == stored


def test_heartbeat_reports_partitions_the_broker_lost(broker, client):
    held, forgotten, taken = broker.add_topic("topic_b", stores=3)
    client.register(held, GROUP)
    broker.hold(GROUP, taken, "someone-else")
    assert client.heartbeat([], GROUP) == {}
    assert client.heartbeat([held], GROUP) == {}
    assert client.heartbeat([held, forgotten, taken], GROUP) == {forgotten.key: 411, taken.key: 412}
    sent = broker.requests_of(Method.BROKER_HEARTBEAT)[-1]
    assert list(sent.partitionInfo) == [p.wire_string() for p in (held, forgotten, taken)]


def test_register_refused_while_another_client_holds_the_partition(broker, part, client):
    broker.hold(GROUP, part, "other-client")
    with pytest.raises(PartitionOccupiedError) as info:
        client.register(part, GROUP)
    assert info.value.code == 410
    assert info.value.retriable
    assert part.key in str(info.value) and GROUP in str(info.value)
    assert broker.holder(GROUP, part) == "other-client"
    # another group is independent
    assert client.register(part, "other_group").offset == 0


def test_calls_without_registration_raise_not_registered(part, client):
    with pytest.raises(NotRegisteredError) as info:
        client.unregister(part, GROUP)
    assert info.value.code == 411
    with pytest.raises(NotRegisteredError):
        client.fetch(part, GROUP)
    with pytest.raises(NotRegisteredError) as info:
        client.commit(part, GROUP)
    assert info.value.code == 401


def test_unknown_topic(broker, client):
    with pytest.raises(UnknownTopicError) as info:
        client.register(broker.ref("no_such_topic"), GROUP)
    assert info.value.code == 403
    assert not info.value.retriable


@pytest.mark.parametrize(("method", "code", "error"), [
    (Method.BROKER_REGISTER, 410, PartitionOccupiedError),
    (Method.BROKER_REGISTER, 411, NotRegisteredError),
    (Method.GET_MESSAGE, 404, NoDataError),
    (Method.GET_MESSAGE, 411, NotRegisteredError),
    (Method.GET_MESSAGE, 503, ServiceStoppedError),
    (Method.GET_MESSAGE, 500, ServerBusyError),
    (Method.COMMIT_OFFSET, 400, BadRequestError),
    (Method.BROKER_HEARTBEAT, 599, BrokerError),
])
def test_injected_codes_become_typed_errors(broker, part, client, method, code, error):
    client.register(part, GROUP)
    broker.inject(method, code)
    call = {
        Method.BROKER_REGISTER: lambda: client.register(part, GROUP),
        Method.GET_MESSAGE: lambda: client.fetch(part, GROUP),
        Method.COMMIT_OFFSET: lambda: client.commit(part, GROUP),
        Method.BROKER_HEARTBEAT: lambda: client.heartbeat([part], GROUP),
    }[method]
    with pytest.raises(error) as info:
        call()
    assert info.value.code == code
    assert type(info.value) is error or error is BrokerError
    call()  # the fault was for one call only; the same call then succeeds


def test_reconnects_after_the_connection_is_cut(broker, part, client):
    client.register(part, GROUP)
    broker.drop_connections()
    # the cut is noticed either by the next call (a connection error) or before it; either way a retry works
    try:
        fetch = client.fetch(part, GROUP)
    except BrokerConnectionError:  # the call raced the cut: it fails retriably, the next one reconnects
        fetch = client.fetch(part, GROUP)
    assert bodies(fetch) == [b"m0", b"m1", b"m2", b"m3"]
