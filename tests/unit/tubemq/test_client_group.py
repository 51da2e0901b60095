"""GroupSession against the fake master and broker: rebalance events, acknowledgements, re-registration."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from tests.doubles.fakebroker import FakeBroker, FakeMaster, fast_settings, wait_until
from tubespark.errors import BrokerConnectionError, ServerBusyError, UnknownTopicError
from tubespark.tubemq.client.group import GroupSession
from tubespark.tubemq.errors import NotRegisteredError
from tubespark.tubemq.wire.constants import EventStatus, EventType, Method
from tubespark.tubemq.wire.formats import PartitionRef, subscribe_info

GROUP = "app_group"
TOPIC = "topic_g"


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker() as fake:
        fake.add_topic(TOPIC, stores=3)
        yield fake


@pytest.fixture
def parts(broker: FakeBroker) -> list[PartitionRef]:
    return broker.partitions(TOPIC)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[str]]] = []
        self.lock = threading.Lock()

    def __call__(self, added: list[PartitionRef], removed: list[PartitionRef]) -> None:
        with self.lock:
            self.calls.append(([p.key for p in added], [p.key for p in removed]))


@pytest.fixture
def listener() -> Recorder:
    return Recorder()


@pytest.fixture
def session(master: FakeMaster, listener: Recorder) -> Iterator[GroupSession]:
    s = GroupSession(master.address, GROUP, [TOPIC], settings=fast_settings(), client_id="member-1",
                     listener=listener)
    s.start()
    yield s
    s.close()


def ack_of(master: FakeMaster, rebalance_id: int):
    for method, request in list(master.requests):
        if method == Method.CONSUMER_HEARTBEAT and request.event.rebalanceId == rebalance_id:
            return request
    return None


def wait_for_ack(master: FakeMaster, rebalance_id: int):
    wait_until(lambda: ack_of(master, rebalance_id) is not None, what=f"ack of event {rebalance_id}")
    return ack_of(master, rebalance_id)


def test_register_with_the_master(master, session):
    [request] = master.requests_of(Method.CONSUMER_REGISTER)
    assert (request.clientId, request.groupName, list(request.topicList)) == ("member-1", GROUP, [TOPIC])
    assert list(request.subscribeInfo) == []
    wait_until(lambda: len(master.requests_of(Method.CONSUMER_HEARTBEAT)) >= 2, what="heartbeats")
    beat = master.requests_of(Method.CONSUMER_HEARTBEAT)[0]
    assert (beat.clientId, beat.groupName, beat.reportSubscribeInfo) == ("member-1", GROUP, False)


def test_connect_event_holds_partitions_and_is_acknowledged(broker, master, parts, session, listener):
    event_id = master.push_event(EventType.CONNECT, parts[:2])
    ack = wait_for_ack(master, event_id)

    # the partitions are held on the broker before the ack is sent
    assert [broker.holder(GROUP, p) for p in parts] == ["member-1", "member-1", None]
    assert sorted(session.held()) == sorted(p.key for p in parts[:2])
    assert ack.event.opType == EventType.CONNECT
    assert ack.event.status == EventStatus.DONE
    assert ack.reportSubscribeInfo is True
    wanted = sorted(subscribe_info("member-1", GROUP, p) for p in parts[:2])
    assert sorted(ack.event.subscribeInfo) == wanted
    assert sorted(ack.subscribeInfo) == wanted  # what the member now holds
    assert listener.calls == [(sorted(p.key for p in parts[:2]), [])]
    wait_until(master.idle, what="the master to see the ack")


def test_the_first_assignment_is_picked_up_without_waiting_a_heartbeat_interval(master, parts):
    """A starting query waits for the master's first event: it must not wait a whole (3 s) interval for it."""
    s = GroupSession(master.address, GROUP, [TOPIC], settings=fast_settings(heartbeat_interval_s=3.0),
                     client_id="member-2")
    s.start()
    try:
        time.sleep(0.3)  # the first heartbeat went out with nothing to hand out yet
        master.push_event(EventType.CONNECT, parts)
        started = time.monotonic()
        assert set(s.wait_for_assignment(timeout_s=5.0)) == {p.key for p in parts}
        assert time.monotonic() - started < 1.5
    finally:
        s.close()


def test_held_partitions_report_the_brokers_offsets(broker, master, parts, session):
    broker.append(parts[0], b"a", b"b")
    broker.set_stored_offset(GROUP, parts[0], 28)
    master.push_event(EventType.CONNECT, parts[:1])
    held = session.wait_for_partitions(1, timeout_s=5)
    item = held[parts[0].key]
    assert (item.ref, item.stored_offset, item.max_offset) == (parts[0], 28, 56)


def test_disconnect_event_releases_partitions(broker, master, parts, session, listener):
    connect = master.push_event(EventType.CONNECT, parts)
    disconnect = master.push_event(EventType.DISCONNECT, parts[1:])
    ack = wait_for_ack(master, disconnect)

    assert [broker.holder(GROUP, p) for p in parts] == ["member-1", None, None]
    assert list(session.held()) == [parts[0].key]
    assert ack.event.opType == EventType.DISCONNECT and ack.event.status == EventStatus.DONE
    assert list(ack.subscribeInfo) == [subscribe_info("member-1", GROUP, parts[0])]
    assert listener.calls == [(sorted(p.key for p in parts), []), ([], sorted(p.key for p in parts[1:]))]
    # one event at a time: the DISCONNECT was handed out only after the CONNECT was acknowledged
    assert [a.rebalanceId for a in master.acks] == [connect, disconnect]


def test_master_forgetting_the_member_makes_it_register_again(master, parts, session):
    master.push_event(EventType.CONNECT, parts[:1])
    session.wait_for_partitions(1, timeout_s=5)
    wait_until(master.idle, what="the ack")
    master.forget("member-1")  # the next heartbeat is answered with 411

    wait_until(lambda: len(master.requests_of(Method.CONSUMER_REGISTER)) == 2, what="a second register")
    again = master.requests_of(Method.CONSUMER_REGISTER)[1]
    assert list(again.subscribeInfo) == [subscribe_info("member-1", GROUP, parts[0])]  # tells what it holds
    # and the member keeps working: a later event is still carried out
    event_id = master.push_event(EventType.CONNECT, parts[1:2])
    wait_for_ack(master, event_id)
    assert len(session.held()) == 2


def test_injected_411_on_heartbeat_re_registers(master, session):
    master.inject(Method.CONSUMER_HEARTBEAT, 411)
    wait_until(lambda: len(master.requests_of(Method.CONSUMER_REGISTER)) == 2, what="a second register")


def test_connect_waits_for_the_previous_holder_to_let_go(broker, master, parts, session, listener):
    broker.hold(GROUP, parts[0], "member-0")  # the member the master took it from
    timer = threading.Timer(0.2, broker.hold, (GROUP, parts[0], None))
    timer.start()
    try:
        event_id = master.push_event(EventType.CONNECT, parts[:1])
        wait_for_ack(master, event_id)
    finally:
        timer.cancel()
    assert broker.holder(GROUP, parts[0]) == "member-1"
    assert listener.calls == [([parts[0].key], [])]


def test_broker_forgetting_a_registration_is_repaired(broker, master, parts, session):
    master.push_event(EventType.CONNECT, parts[:1])
    session.wait_for_partitions(1, timeout_s=5)
    broker.hold(GROUP, parts[0], None)  # the broker timed the registration out: heartbeat says 411
    wait_until(lambda: broker.holder(GROUP, parts[0]) == "member-1", what="re-registration on the broker")
    assert list(session.held()) == [parts[0].key]


def test_partition_taken_by_another_member_is_dropped(broker, master, parts, session, listener):
    master.push_event(EventType.CONNECT, parts[:1])
    session.wait_for_partitions(1, timeout_s=5)
    broker.hold(GROUP, parts[0], "intruder")  # broker heartbeat now reports 412
    wait_until(lambda: listener.calls[-1] == ([], [parts[0].key]), what="the listener to hear of the loss")
    assert session.held() == {}


def test_commit_stores_an_offset_on_the_broker(broker, master, parts, session):
    broker.append(parts[0], *[b"x"] * 5)
    master.push_event(EventType.CONNECT, parts[:1])
    session.wait_for_partitions(1, timeout_s=5)
    position = session.commit(parts[0], 84)
    assert (position.offset, position.max_offset) == (84, 140)
    assert broker.stored_offset(GROUP, parts[0]) == 84
    assert broker.holder(GROUP, parts[0]) == "member-1"  # still held
    assert session.held()[parts[0].key].stored_offset == 84
    with pytest.raises(NotRegisteredError):
        session.commit(parts[1], 0)


def test_close_releases_everything_and_leaves_the_group(broker, master, parts, listener):
    s = GroupSession(master.address, GROUP, [TOPIC], settings=fast_settings(), client_id="member-2")
    s.start()
    master.push_event(EventType.CONNECT, parts)
    s.wait_for_partitions(3, timeout_s=5)
    s.close()
    assert [broker.holder(GROUP, p) for p in parts] == [None, None, None]
    assert [r.clientId for r in master.requests_of(Method.CONSUMER_CLOSE)] == ["member-2"]
    assert s.held() == {}


def test_register_errors_that_will_not_go_away_are_not_retried(master):
    master.inject(Method.CONSUMER_REGISTER, 431)  # TOPIC_NOT_DEPLOYED
    s = GroupSession(master.address, GROUP, [TOPIC], settings=fast_settings(), client_id="member-3")
    with pytest.raises(UnknownTopicError):
        s.start()
    assert len(master.requests_of(Method.CONSUMER_REGISTER)) == 1
    s.close()


def test_a_master_elected_moments_ago_is_asked_again_when_it_says_not_deployed(master):
    """The active master killed: the next one answers 431 for every topic until it has loaded its configuration.
    A query restarted then stopped on it (rolling soak, master failover); the member must register once the new
    master has loaded, as a producer's publish already did."""
    master.inject(Method.CONSUMER_REGISTER, 431, times=2, text="Requested topic [[t]] not deployed!")
    # the channel tries masters in sorted order: port 1 (nothing listens) sorts before the fake's ephemeral port
    s = GroupSession(["127.0.0.1:1", master.address], GROUP, [TOPIC], settings=fast_settings(), client_id="member-5")
    try:
        s.start()
        assert len(master.requests_of(Method.CONSUMER_REGISTER)) == 3
    finally:
        s.close()


def test_register_retries_a_busy_master(master):
    master.inject(Method.CONSUMER_REGISTER, 503)
    s = GroupSession(master.address, GROUP, [TOPIC], settings=fast_settings(), client_id="member-4")
    try:
        s.start()
        assert len(master.requests_of(Method.CONSUMER_REGISTER)) == 2
    finally:
        s.close()


def test_occupied_partition_stays_assigned_and_is_held_once_released(broker, master, parts, session, listener):
    broker.hold(GROUP, parts[0], "dead-member")  # a killed member's registration, until the broker times it out
    event_id = master.push_event(EventType.CONNECT, parts[:2])
    ack = wait_for_ack(master, event_id)
    assert sorted(session.assigned()) == sorted(p.key for p in parts[:2])
    assert list(session.held()) == [parts[1].key]
    assert "occupied" in session.pending()[parts[0].key]
    # the master is told the member has both, so it does not hand the occupied one elsewhere meanwhile
    assert sorted(ack.subscribeInfo) == sorted(subscribe_info("member-1", GROUP, p) for p in parts[:2])
    time.sleep(0.3)
    assert broker.holder(GROUP, parts[0]) == "dead-member"  # still retried, never taken over

    broker.hold(GROUP, parts[0], None)  # the stale registration timed out
    assert session.wait_for_held([parts[0].key], timeout_s=5) == set()
    assert broker.holder(GROUP, parts[0]) == "member-1"
    assert session.pending() == {}
    assert listener.calls[-1] == ([parts[0].key], [])


def test_revoked_pending_partition_is_no_longer_retried(broker, master, parts, session):
    broker.hold(GROUP, parts[0], "dead-member")
    master.push_event(EventType.CONNECT, parts[:1])
    wait_until(lambda: parts[0].key in session.pending(), what="the partition to be pending")
    event_id = master.push_event(EventType.DISCONNECT, parts[:1])
    wait_for_ack(master, event_id)
    assert session.assigned() == {} and session.pending() == {}
    broker.hold(GROUP, parts[0], None)
    time.sleep(0.3)
    assert broker.holder(GROUP, parts[0]) is None


def test_broker_outage_keeps_the_partition_and_refresh_raises(broker, master, parts, session):
    master.push_event(EventType.CONNECT, parts[:1])
    session.wait_for_partitions(1, timeout_s=5)
    broker.inject(Method.BROKER_REGISTER, 503, times=1)  # a broker that is not serving yet
    with pytest.raises(ServerBusyError):
        session.refresh(parts[0])
    broker.drop_connections()  # and one whose connection broke
    with contextlib.suppress(BrokerConnectionError):
        session.refresh(parts[0])
    assert list(session.assigned()) == [parts[0].key]  # the partition stays assigned and held

    def refreshed() -> bool:
        with contextlib.suppress(BrokerConnectionError):
            return session.refresh(parts[0]) is not None
        return False

    wait_until(refreshed, what="a refresh once the broker answers again")  # the same registration goes on
    assert broker.holder(GROUP, parts[0]) == "member-1"
