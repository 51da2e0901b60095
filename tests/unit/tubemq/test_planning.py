"""Spark planning: the stream reader's micro-batch ends and the batch reader's tasks, against the fakes.

The stream reader runs for real on the driver side (group session, broker probes, commits to the
group); only the SIGTERM/atexit hooks are switched off, so the test process keeps its signal handlers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows, ReadMinRows

from tests.doubles.fakebroker import FakeBroker, FakeMaster, wait_until
from tests.doubles.fakeweb import FakeDeploy, FakeMasterWeb
from tests.readers import TubeBatchReader, TubeStreamReader
from tests.unit.tubemq.conftest import stream_readers, two_partitions
from tubespark.errors import DataLossError, ForeignCheckpointError, OptionError, UnknownTopicError
from tubespark.spark.planning import share_by_backlog, split_range
from tubespark.tubemq.spark import membership
from tubespark.tubemq.spark.adapter import AssignmentUnavailableError
from tubespark.tubemq.spark.ledger import Assignment
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.constants import EventType, Method
from tubespark.tubemq.wire.message import OutgoingMessage

GROUP = "plan_group"
TOPIC = "topic_s"
FAST = {"connectTimeoutMs": "1000", "requestTimeoutMs": "2000", "heartbeatIntervalMs": "50",
        "assignmentTimeoutMs": "5000"}


def partitions_of(offsets: dict[str, int]) -> dict[str, int]:
    """The partitions' offsets, without the reader's marks (``<key>#from``, ``<key>#skip``, ``<key>#last``)."""
    return {key: offset for key, offset in offsets.items() if "#" not in key}


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with two_partitions(TOPIC) as fake:
        yield fake


@pytest.fixture
def keys(broker: FakeBroker) -> tuple[str, str]:
    p0, p1 = broker.partitions(TOPIC)
    return p0.key, p1.key


@pytest.fixture
def make_reader(monkeypatch, master: FakeMaster, broker: FakeBroker) -> Iterator:
    with stream_readers(monkeypatch, master, broker, TOPIC, {"group": GROUP, **FAST}) as make:
        yield make


def test_initial_offsets(make_reader, broker, keys):
    broker.expire(broker.partitions(TOPIC)[1], 28 * 2)
    assert make_reader(startingOffsets="earliest").initialOffset() == {keys[0]: 0, keys[1]: 56}


def test_initial_offsets_latest_and_group(make_reader, broker, keys):
    broker.set_stored_offset(GROUP, broker.partitions(TOPIC)[0], 84)
    first = make_reader(startingOffsets="latest")
    assert first.initialOffset() == {keys[0]: 280, keys[1]: 840}
    first.stop()  # leaves the group and releases the partitions for the next reader
    assert make_reader(startingOffsets="group").initialOffset() == {keys[0]: 84, keys[1]: 0}


def test_initial_offsets_do_not_move_while_spark_asks_again(make_reader, broker, keys):
    """Spark calls initialOffset() on every trigger until batch 0 has data: with startingOffsets=latest,
    messages sent between two calls must not fall into a gap."""
    reader = make_reader(startingOffsets="latest")
    first = reader.initialOffset()
    assert first == {keys[0]: 280, keys[1]: 840}
    assert reader.latestOffset(first, ReadAllAvailable()) == first  # nothing new yet: no batch
    broker.append(broker.partitions(TOPIC)[0], b"new")
    assert reader.initialOffset() == first
    end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    [task] = reader.partitions(reader.initialOffset(), end)
    assert (task.start, task.end) == (280, 308)


def test_a_replayed_first_batch_reads_what_the_killed_run_planned(make_reader, master, broker, keys):
    """The soak's loss: a query killed after logging batch 0 and before committing it is restarted; Spark
    runs batch 0 again from a fresh initialOffset(), in which a partition the killed member still occupies
    is missing. Batch 0 must still read that partition from where the first run planned it."""
    p0, p1 = broker.partitions(TOPIC)
    first = make_reader(startingOffsets="earliest")
    start = first.initialOffset()
    end = first.latestOffset(start, ReadAllAvailable())  # Spark logs this as batch 0 ... then the kill
    assert partitions_of(end) == {keys[0]: 280, keys[1]: 840}
    first.stop()
    broker.hold(GROUP, p1, "killed-member")  # the killed run's registration still occupies p1
    restarted = make_reader(assign=False, startingOffsets="earliest")
    master.push_event(EventType.CONNECT, [p0])  # the master hands p1 over only later
    replay_start = restarted.initialOffset()
    assert replay_start == {keys[0]: 0}
    tasks = {(t.partition_id, t.start, t.end) for t in restarted.partitions(replay_start, end)}
    assert tasks == {(p0.partition_id, 0, 280), (p1.partition_id, 0, 840)}
    assert restarted.latestOffset(end, ReadAllAvailable()) == end  # nothing new: no (empty) batch 1
    broker.append(p0, b"new")
    after = restarted.latestOffset(end, ReadAllAvailable())  # batch 1 goes on from batch 0's end
    assert partitions_of(after) == {keys[0]: 308, keys[1]: 840}  # the #from marks belong to batch 0 alone
    assert not any(key.endswith("#from") for key in after)


def test_json_start_beyond_max_is_refused(make_reader, keys):
    reader = make_reader(startingOffsets=f'{{"{keys[0]}": 308}}')
    with pytest.raises(OptionError, match="beyond the partition's max offset"):
        reader.initialOffset()


def test_everything_available_without_a_limit(make_reader, keys):
    reader = make_reader()
    assert isinstance(reader.getDefaultReadLimit(), ReadAllAvailable)
    start = {keys[0]: 28, keys[1]: 0}
    assert partitions_of(reader.latestOffset(start, ReadAllAvailable())) == {keys[0]: 280, keys[1]: 840}
    assert reader.reportLatestOffset() == {keys[0]: 280, keys[1]: 840}


def test_max_offsets_per_trigger_is_shared_by_backlog(make_reader, keys):
    reader = make_reader(maxOffsetsPerTrigger="8")
    limit = reader.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows) and limit.max_rows == 8
    start = {keys[0]: 0, keys[1]: 0}
    end = reader.latestOffset(start, limit)  # backlog 10 : 30 -> 2 : 6 messages
    assert partitions_of(end) == {keys[0]: 2 * 28, keys[1]: 6 * 28}
    # successive batches keep going and never go past the data
    seen = 8
    while end != start:
        start, end = end, reader.latestOffset(end, limit)
        batch = sum(end[k] - start[k] for k in keys) // 28
        assert batch <= 8
        seen += batch
    assert partitions_of(end) == {keys[0]: 280, keys[1]: 840}
    assert seen == 40


def test_a_small_backlog_takes_everything(make_reader, keys):
    reader = make_reader()
    start = {keys[0]: 28 * 8, keys[1]: 28 * 29}
    assert partitions_of(reader.latestOffset(start, ReadMaxRows(100))) == {keys[0]: 280, keys[1]: 840}


def test_a_micro_batch_never_exceeds_max_offsets_per_trigger(make_reader, keys):
    reader = make_reader()
    start = {keys[0]: 0, keys[1]: 0}
    end = reader.latestOffset(start, ReadMaxRows(5))
    assert sum(end[k] - start[k] for k in keys) // 28 <= 5


def test_share_by_backlog():
    assert share_by_backlog({"a": 3, "b": 4}, 100) == {"a": 3, "b": 4}
    assert share_by_backlog({"a": 10, "b": 30}, 8) == {"a": 2, "b": 6}
    assert share_by_backlog({"a": 1, "b": 1000}, 10) == {"a": 1, "b": 9}  # a small partition is not starved
    assert share_by_backlog({"a": 0, "b": 50}, 10) == {"a": 0, "b": 10}


def test_partition_assigned_after_start_resumes_from_the_group_offset(make_reader, broker, master, keys):
    p0, p1 = broker.partitions(TOPIC)
    broker.set_stored_offset(GROUP, p1, 28 * 5)  # another query of the group committed 5 messages of p1
    master.push_event(EventType.CONNECT, [p0])
    reader = make_reader(assign=False)
    start = {keys[0]: 0}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert partitions_of(end) == {keys[0]: 280}
    master.push_event(EventType.CONNECT, [p1])  # the master hands p1 to this query later
    reader.broker.member.session().wait_for_partitions(2, timeout_s=5)

    end2 = reader.latestOffset(end, ReadAllAvailable())
    assert partitions_of(end2) == {keys[0]: 280, keys[1]: 140}  # p1 joins at the group's offset, nothing planned yet
    assert [t.partition_id for t in reader.partitions(end, end2)] == []
    end3 = reader.latestOffset(end2, ReadAllAvailable())
    assert partitions_of(end3) == {keys[0]: 280, keys[1]: 840}
    [task] = reader.partitions(end2, end3)
    assert (task.partition_id, task.start, task.end) == (p1.partition_id, 140, 840)


def test_available_now_stops_at_what_was_there(make_reader, broker, keys):
    p0, _ = broker.partitions(TOPIC)
    reader = make_reader()
    reader.prepareForTriggerAvailableNow()
    broker.append(p0, b"late-1", b"late-2")
    start = {keys[0]: 0, keys[1]: 28 * 20}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert partitions_of(end) == {keys[0]: 280, keys[1]: 840}  # not 336: the late messages are for the next run
    assert reader.reportLatestOffset() == {keys[0]: 336, keys[1]: 840}
    # with a limit the target still caps every share; the run then ends exactly at the target
    end2 = reader.latestOffset(end, ReadMaxRows(100))
    assert end2 == end


def test_planned_start_is_stored_as_the_group_offset(make_reader, broker, keys):
    p0, p1 = broker.partitions(TOPIC)
    reader = make_reader()
    end = reader.latestOffset({keys[0]: 56, keys[1]: 84}, ReadAllAvailable())
    assert (broker.stored_offset(GROUP, p0), broker.stored_offset(GROUP, p1)) == (56, 84)
    reader.commit(end)
    assert (broker.stored_offset(GROUP, p0), broker.stored_offset(GROUP, p1)) == (280, 840)


def test_commit_to_group_off_leaves_the_group_offset(make_reader, broker, keys):
    p0, _ = broker.partitions(TOPIC)
    reader = make_reader(commitToGroup="false")
    end = reader.latestOffset({keys[0]: 56, keys[1]: 84}, ReadAllAvailable())
    reader.commit(end)
    assert broker.stored_offset(GROUP, p0) == 0


def test_planned_tasks_read_exactly_their_range(make_reader, broker, keys):
    p0, _ = broker.partitions(TOPIC)
    reader = make_reader()
    start = {keys[0]: 28 * 3, keys[1]: 28 * 30}
    end = reader.latestOffset(start, ReadAllAvailable())
    [task] = reader.partitions(start, end)  # p1 has no new data: no task
    assert (task.host, task.port, task.topic, task.partition_id, task.start, task.end) == (
        p0.host, p0.port, TOPIC, p0.partition_id, 84, 280)
    assert task.read_group != GROUP  # executors never read under the user's group
    rows = [row for batch in reader.read(task) for row in batch.to_pylist()]
    assert [(r["offset"], r["value"]) for r in rows] == [(28 * i, f"a{i}".encode()) for i in range(3, 10)]
    assert broker.holder(task.read_group, p0) is None


@pytest.mark.parametrize(("start", "end", "max_records", "pieces"), [
    (0, 280, None, [(0, 280)]),
    (0, 280, 10, [(0, 280)]),
    (0, 280, 3, [(0, 84), (84, 168), (168, 252), (252, 280)]),
    (56, 280, 4, [(56, 168), (168, 280)]),
    (280, 280, 3, []),
    (300, 280, None, []),
])
def test_split_range(start, end, max_records, pieces):
    assert split_range(start, end, max_records, record_size=28) == pieces


def test_batch_plan_covers_every_partition_in_splits(master, broker, keys):
    p0, p1 = broker.partitions(TOPIC)
    broker.expire(p1, 28 * 4)
    options = TubeMQOptions.from_raw({"master": master.address, "topic": TOPIC, "startingOffsets": "earliest",
                                      "maxRecordsPerPartition": "12", **FAST}, mode="read")
    tasks = TubeBatchReader(options).plan()
    assert [(t.partition_id, t.start, t.end) for t in tasks] == [
        (p0.partition_id, 0, 280),
        (p1.partition_id, 112, 448), (p1.partition_id, 448, 784), (p1.partition_id, 784, 840)]
    assert len({t.read_group for t in tasks}) == len(tasks)  # splits of one partition run side by side
    for ref in (p0, p1):  # the planner released its probes
        assert all(broker.holder(g, ref) is None for g, _, pid in broker.groups if pid == ref.partition_id)


def test_batch_plan_with_json_bounds(master, broker, keys):
    options = TubeMQOptions.from_raw({"master": master.address, "topic": TOPIC, **FAST,
                                      "startingOffsets": f'{{"{keys[1]}": 280}}',
                                      "endingOffsets": f'{{"{keys[0]}": 140}}'}, mode="read")
    tasks = TubeBatchReader(options).plan()
    assert [(t.start, t.end) for t in tasks] == [(0, 140), (280, 840)]
    beyond = TubeMQOptions.from_raw({"master": master.address, "topic": TOPIC, **FAST,
                                     "endingOffsets": f'{{"{keys[0]}": 308}}'}, mode="read")
    with pytest.raises(OptionError, match="beyond the partition's max offset"):
        TubeBatchReader(beyond).plan()


# --- faults (issue 10): broker outage, occupied partitions, where partitions start, data loss -----------


def test_a_broker_outage_plans_no_data_and_the_query_catches_up(make_reader, broker, keys):
    reader = make_reader(requestTimeoutMs="500", connectTimeoutMs="300")
    start = {keys[0]: 0, keys[1]: 0}
    end = reader.latestOffset(start, ReadAllAvailable())
    broker.inject(Method.BROKER_REGISTER, 503, times=50)  # the broker does not serve (restarting)
    assert reader.latestOffset(end, ReadAllAvailable()) == end  # no error, no new data
    reader.commit(end)  # nor from commit
    broker.inject(Method.BROKER_REGISTER, 200, times=0)
    with broker.lock:
        broker._faults.clear()
    p0, _ = broker.partitions(TOPIC)
    broker.append(p0, b"after-1", b"after-2")
    assert partitions_of(reader.latestOffset(end, ReadAllAvailable())) == {keys[0]: 336, keys[1]: 840}


def test_a_dead_broker_is_skipped_not_raised(make_reader, broker, master, keys):
    reader = make_reader(requestTimeoutMs="500", connectTimeoutMs="300")
    start = {keys[0]: 0, keys[1]: 0}
    reader.latestOffset(start, ReadAllAvailable())
    broker.close()  # nothing listens any more: connection refused
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    reader.commit({keys[0]: 28, keys[1]: 28})
    assert set(reader.broker.member.session().assigned()) == set(keys)  # still assigned


def test_initial_partition_occupied_on_the_broker_starts_at_starting_offsets(make_reader, broker, master, keys):
    _p0, p1 = broker.partitions(TOPIC)
    broker.set_stored_offset(GROUP, p1, 28 * 5)  # the killed member got this far ...
    broker.hold(GROUP, p1, "killed-member")  # ... and its registration still occupies p1
    reader = make_reader(startingOffsets="earliest")
    assert reader.initialOffset() == {keys[0]: 0, keys[1]: 0}  # rule b: both initial, both at earliest
    reader.prepareForTriggerAvailableNow()
    targets = {state.key: state.target for state in reader.partitions_state}
    assert targets == {keys[0]: 280, keys[1]: 840}  # probed: the 410 does not hide p1's max
    threading.Timer(0.5, broker.hold, (GROUP, p1, None)).start()  # the broker times the stale one out
    end = reader.latestOffset({keys[0]: 280, keys[1]: 0}, ReadAllAvailable())  # p0 done: waits for p1
    assert partitions_of(end) == {keys[0]: 280, keys[1]: 840}


def test_available_now_fails_naming_a_partition_that_stays_occupied(make_reader, broker, keys):
    _p0, p1 = broker.partitions(TOPIC)
    broker.hold(GROUP, p1, "killed-member")
    reader = make_reader(startingOffsets="earliest", assignmentTimeoutMs="1000")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert partitions_of(end) == {keys[0]: 280, keys[1]: 0}
    with pytest.raises(AssignmentUnavailableError, match=f"{keys[1]}: occupied on broker .* 410"):
        reader.latestOffset(end, ReadAllAvailable())


def test_group_starting_offsets_wait_for_an_occupied_partition(make_reader, broker, keys):
    _p0, p1 = broker.partitions(TOPIC)
    broker.set_stored_offset(GROUP, p1, 28 * 5)
    broker.hold(GROUP, p1, "killed-member")
    reader = make_reader(startingOffsets="group")
    assert reader.initialOffset() == {keys[0]: 0}  # p1's committed offset is known once held
    end = reader.latestOffset({keys[0]: 0}, ReadAllAvailable())
    assert partitions_of(end) == {keys[0]: 280}
    broker.hold(GROUP, p1, None)
    wait_until(lambda: keys[1] in reader.broker.member.session().held(), what="p1 to be held")
    assert partitions_of(reader.latestOffset(end, ReadAllAvailable())) == {keys[0]: 280, keys[1]: 140}  # rule e


def test_regained_partition_resumes_at_the_later_of_group_and_own_offset(make_reader, broker, master, keys):
    _p0, p1 = broker.partitions(TOPIC)
    reader = make_reader()
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadMaxRows(8))  # p1 got to 6 messages
    assert end[keys[1]] == 6 * 28
    master.push_event(EventType.DISCONNECT, [p1])  # the master moves p1 to another member ...
    wait_until(lambda: keys[1] not in reader.broker.member.session().assigned(), what="p1 to be revoked")
    end2 = reader.latestOffset(end, ReadMaxRows(8))
    assert end2[keys[1]] == 6 * 28  # carried, nothing planned for it: the checkpoint keeps its place
    assert [t.start for t in reader.partitions(end, end2) if t.partition_id == p1.partition_id] == []
    broker.set_stored_offset(GROUP, p1, 28 * 20)  # ... which read on to 20 and committed
    master.push_event(EventType.CONNECT, [p1])  # and p1 comes back
    wait_until(lambda: keys[1] in reader.broker.member.session().held(), what="p1 to be held again")
    end3 = reader.latestOffset(end2, ReadAllAvailable())
    assert end3[keys[1] + "#from"] == 20 * 28  # rule d: it resumes at the group's offset, ahead of its own (6)
    # [6, 20) is skipped, not read, also when Spark replays this batch (the mark is in the offsets)
    assert [(t.start, t.end) for t in reader.partitions(end2, end3) if t.partition_id == p1.partition_id] == [
        (20 * 28, end3[keys[1]])]
    after = reader.latestOffset(end3, ReadAllAvailable())  # the next batch reads on from 20
    assert after[keys[1]] >= 20 * 28 and keys[1] + "#skip" not in after
    assert [task.start for task in reader.partitions(end3, after) if task.partition_id == p1.partition_id] in (
        [], [20 * 28])
    # the other way round: the other member did not get as far as this query
    master.push_event(EventType.DISCONNECT, [p1])
    wait_until(lambda: keys[1] not in reader.broker.member.session().assigned(), what="p1 to be revoked again")
    end4 = reader.latestOffset({**end3, keys[1]: 25 * 28}, ReadAllAvailable())
    broker.set_stored_offset(GROUP, p1, 28 * 22)
    master.push_event(EventType.CONNECT, [p1])
    wait_until(lambda: keys[1] in reader.broker.member.session().held(), what="p1 to be held again")
    end5 = reader.latestOffset(end4, ReadAllAvailable())
    assert end4[keys[1]] == 25 * 28 and keys[1] + "#skip" not in end5  # its own offset is later: no jump
    assert [task.start for task in reader.partitions(end4, end5) if task.partition_id == p1.partition_id] in (
        [], [25 * 28])


def test_broker_below_the_query_offset_fails_with_fail_on_data_loss(make_reader, broker, keys):
    p0, _ = broker.partitions(TOPIC)
    reader = make_reader()
    end = reader.latestOffset({keys[0]: 0, keys[1]: 840}, ReadAllAvailable())
    broker.lose(p0, keep=4)  # a kill -9 before the flush: max falls from 280 to 112
    with pytest.raises(DataLossError, match=rf"partition {keys[0]}: the broker's max offset 112 is below this "
                                            r"query's offset 280"):
        reader.latestOffset(end, ReadAllAvailable())


def _read_in_batches(reader: TubeStreamReader, keys: tuple[str, str]) -> dict[str, int]:
    """p0 read two messages a batch up to 280 (p1 stays at its end): each batch end is a mark; the last end."""
    end = {keys[0]: 0, keys[1]: 840}
    for want in (56, 112, 168, 224, 280):
        end = reader.latestOffset(end, ReadMaxRows(2))
        assert partitions_of(end)[keys[0]] == want
    return end


def _values(reader: TubeStreamReader, start: dict[str, int], end: dict[str, int]) -> list[bytes]:
    return [row["value"] for task in reader.partitions(start, end) for batch in reader.read(task)
            for row in batch.to_pylist()]


def test_broker_below_the_query_offset_resumes_where_the_new_messages_begin(make_reader, broker, keys, caplog):
    """Issue 37 part 5, the broker not yet refilled past the query: it lost a4..a9 (offsets [112, 280)), and took
    two new messages at 112 and 140 before the query's next trigger. Reading on at the broker's end (168) skipped
    both; the query resumes at 112, the highest batch end whose message the broker still holds."""
    p0, _ = broker.partitions(TOPIC)
    reader = make_reader(failOnDataLoss="false")
    end = _read_in_batches(reader, keys)
    broker.lose(p0, keep=4)  # a kill -9 before the flush: max falls from 280 to 112
    broker.append(p0, b"new-1", b"new-2")  # written at the reused offsets 112 and 140
    with caplog.at_level("WARNING", logger="tubespark.spark.stream_engine"):
        end2 = reader.latestOffset(end, ReadAllAvailable())
    assert partitions_of(end2) == {keys[0]: 168, keys[1]: 840} and end2[keys[0] + "#from"] == 112
    assert _values(reader, end, end2) == [b"new-1", b"new-2"]  # the new messages, none of them skipped
    assert [(loss.key, loss.offset, loss.resumes_at) for loss in reader.data_losses] == [(keys[0], 280, 112)]
    assert "the broker's max offset 168 is below this query's offset 280" in caplog.text
    assert ("diverge from what this query read at an offset L in [112, 140]: the messages this query read in "
            "[112, L) are read a second time (at most 28 offsets)") in caplog.text
    assert "the broker lost the messages at offsets [L, 280) (140 to 168 offsets" in caplog.text
    assert "continuing from offset 112" in caplog.text


def test_broker_below_the_query_offset_after_one_batch_resumes_where_the_query_began(make_reader, broker, keys):
    """Read in one batch, the only mark below the broker's end is where the query began: it re-reads what the
    broker kept of that batch (a0..a3) rather than skip what it wrote since (new-1, new-2)."""
    p0, _ = broker.partitions(TOPIC)
    reader = make_reader(failOnDataLoss="false")
    end = reader.latestOffset({keys[0]: 0, keys[1]: 840}, ReadAllAvailable())
    broker.lose(p0, keep=4)
    broker.append(p0, b"new-1", b"new-2")
    end2 = reader.latestOffset(end, ReadAllAvailable())
    assert [(loss.key, loss.offset, loss.resumes_at) for loss in reader.data_losses] == [(keys[0], 280, 0)]
    assert _values(reader, end, end2) == [b"a0", b"a1", b"a2", b"a3", b"new-1", b"new-2"]


# --- reused offsets (issue 23 part 3): the #last fingerprint -------------------------------------------


def _lose_and_refill(broker: FakeBroker, keep: int, refill: int) -> None:
    """A kill -9 within the durability window: p0 keeps ``keep`` messages, then producers write ``refill`` new
    ones at the lost offsets and beyond (the broker's end moves back past where the query stood)."""
    p0, _ = broker.partitions(TOPIC)
    broker.lose(p0, keep=keep)
    broker.append(p0, *[f"new{i}".encode() for i in range(refill)])


def test_a_restart_after_the_broker_reused_the_offsets_fails_with_fail_on_data_loss(make_reader, broker, keys):
    """The independent soak's case: the query stood at 280 on p0, the broker lost 6 acknowledged messages, was
    refilled past 280 before the query restarted from its checkpoint; the restarted run must not read on."""
    reader = make_reader()
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadAllAvailable())
    assert keys[0] + "#last" in end and keys[1] + "#last" in end  # taken while the broker still held them
    reader.stop()  # the query dies (or fails on the loss); its checkpoint holds ``end``
    _lose_and_refill(broker, keep=4, refill=8)  # 12 messages: max 336 > 280, offsets [112, 280) reused
    restarted = make_reader()
    with pytest.raises(DataLossError, match=rf"partition {keys[0]}: offsets this query read were reused: the last "
                                            rf"message below offset 280 is not the one this query read there.*"
                                            rf"failOnDataLoss=false reads on from offset 0, where this query began "
                                            rf"reading the partition.*Set failOnDataLoss=false to continue from "
                                            rf"offset 0\."):
        restarted.latestOffset(end, ReadAllAvailable())


def test_a_broker_restart_between_two_triggers_is_checked_by_the_running_query(make_reader, broker, keys):
    reader = make_reader()
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadAllAvailable())
    _lose_and_refill(broker, keep=4, refill=8)
    broker.drop_connections()  # the broker process died: the driver's connection to it broke
    with pytest.raises(DataLossError, match="offsets this query read were reused"):  # noqa: PT012
        for _ in range(5):  # the trigger that finds the connection broken may plan nothing for p0 first
            assert partitions_of(reader.latestOffset(end, ReadAllAvailable()))[keys[0]] == 280


def test_reused_offsets_with_fail_on_data_loss_false_resume_where_the_broker_diverges(make_reader, broker, keys,
                                                                                      caplog):
    """Issue 37 part 5, the defect as filed: the broker lost a4..a9 (offsets [112, 280)) and was refilled past the
    query's 280 before it restarted. failOnDataLoss=false skipped to the broker's end (336), so new0..new7, written
    at [112, 336) after the broker's restart, were never read. It resumes at 112 and reads them all."""
    reader = make_reader(failOnDataLoss="false")
    end = _read_in_batches(reader, keys)
    assert {k for k in end if k.startswith(keys[0] + "#last@")} == {
        f"{keys[0]}#last@{offset}" for offset in (0, 56, 112, 168, 224)}  # batch ends, and where p0 began
    reader.stop()
    _lose_and_refill(broker, keep=4, refill=8)  # new0..new7 at offsets [112, 336)
    restarted = make_reader(failOnDataLoss="false")
    with caplog.at_level("WARNING", logger="tubespark.spark.stream_engine"):
        end2 = restarted.latestOffset(end, ReadAllAvailable())
    assert partitions_of(end2) == {keys[0]: 336, keys[1]: 840} and end2[keys[0] + "#from"] == 112
    assert _values(restarted, end, end2) == [f"new{i}".encode() for i in range(8)]
    assert [(loss.key, loss.offset, loss.resumes_at) for loss in restarted.data_losses] == [(keys[0], 280, 112)]
    assert ("failOnDataLoss=false reads on from offset 112, the highest mark in this query's offsets whose message "
            "the broker still holds unchanged (3 mark(s) read to find it)") in caplog.text
    assert "L in [112, 140]" in caplog.text
    assert "lost the messages at offsets [L, 280) (140 to 168 offsets" in caplog.text
    assert "continuing from offset 112 (data loss event 1)" in caplog.text
    assert [k for k in end2 if k.startswith(keys[0] + "#last@")] == [  # the lost batch ends' marks are dropped
        f"{keys[0]}#last@{offset}" for offset in (0, 56, 112)]
    p0, _ = broker.partitions(TOPIC)
    broker.append(p0, b"after")
    end3 = restarted.latestOffset(end2, ReadAllAvailable())
    assert _values(restarted, end2, end3) == [b"after"] and len(restarted.data_losses) == 1


def test_reused_offsets_with_fail_on_data_loss_true_still_fail_naming_where_false_resumes(make_reader, broker, keys):
    reader = make_reader()
    end = _read_in_batches(reader, keys)
    reader.stop()
    _lose_and_refill(broker, keep=4, refill=8)
    for _ in range(2):  # a restart on the same checkpoint keeps failing
        restarted = make_reader()
        with pytest.raises(DataLossError, match=rf"^partition {keys[0]}: offsets this query read were reused: .*"
                                                rf"Set failOnDataLoss=false to continue from offset 112\."):
            restarted.latestOffset(end, ReadAllAvailable())
        restarted.stop()  # the query failed: its driver leaves the group


def test_an_old_checkpoint_with_one_fingerprint_mark_skips_to_the_broker_end_as_before(make_reader, broker, keys,
                                                                                       caplog):
    """A checkpoint written before the #last@ marks holds only the #last of its position: nothing tells where the
    loss began, so failOnDataLoss=false reads on from the broker's end, as that version did, and says so."""
    reader = make_reader(failOnDataLoss="false")
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadAllAvailable())
    old = {key: value for key, value in end.items() if "#last@" not in key}
    reader.stop()
    _lose_and_refill(broker, keep=4, refill=8)
    with caplog.at_level("WARNING", logger="tubespark.spark.stream_engine"):
        end2 = make_reader(failOnDataLoss="false").latestOffset(old, ReadAllAvailable())
    assert partitions_of(end2) == {keys[0]: 336, keys[1]: 840}
    assert "no mark in this query's offsets names a message the broker still holds unchanged" in caplog.text


def test_a_healthy_restart_and_an_old_checkpoint_read_on_without_a_loss(make_reader, broker, keys):
    reader = make_reader()
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadMaxRows(20))
    reader.stop()
    p0, _ = broker.partitions(TOPIC)
    broker.append(p0, b"later")
    restarted = make_reader()
    end2 = restarted.latestOffset(end, ReadAllAvailable())  # checked against #last: the same messages
    assert partitions_of(end2) == {keys[0]: 308, keys[1]: 840} and restarted.data_losses == []
    # a checkpoint written before the #last marks existed loads and plans as before (nothing to check)
    restarted.stop()
    _lose_and_refill(broker, keep=4, refill=8)
    old = make_reader()
    assert partitions_of(old.latestOffset({keys[0]: 280, keys[1]: 840}, ReadAllAvailable())) == {
        keys[0]: 336, keys[1]: 840}


def test_a_query_restarted_just_after_a_master_failover_waits_for_the_new_master(make_reader, master, broker, keys):
    """The rolling soak's query, restarted moments after the standby master took over, stopped on the new master's
    "topic ... not deployed" (431): a master answers so for every topic until it has loaded its configuration. The
    restarted query's checkpoint holds the topic, so it asks again and plans; a new query believes it at once."""
    reader = make_reader()
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadMaxRows(20))
    reader.stop()
    master.inject(Method.CONSUMER_REGISTER, 431, times=2, text=f"Requested topic [[{TOPIC}]] not deployed!")
    restarted = make_reader()
    assert partitions_of(restarted.latestOffset(end, ReadAllAvailable())) == {keys[0]: 280, keys[1]: 840}
    restarted.stop()
    master.inject(Method.CONSUMER_REGISTER, 431, text=f"Requested topic [[{TOPIC}]] not deployed!")
    with pytest.raises(UnknownTopicError, match="not deployed"):
        make_reader().initialOffset()


# --- a checkpoint of another cluster or topic incarnation (issue 25 item 1): the #origin mark --------------


@pytest.fixture
def web(broker: FakeBroker) -> Iterator[FakeMasterWeb]:
    with FakeMasterWeb() as fake:
        fake.topics[TOPIC] = [FakeDeploy(broker_id=broker.broker_id, partitions=1, stores=2, created="20261125074442")]
        yield fake


def _recreate(broker: FakeBroker, web: FakeMasterWeb, created: str = "20261125081500") -> None:
    """The topic deleted and added again (or the same name on a new cluster): a new deployment record, empty
    partitions."""
    web.topics[TOPIC] = [FakeDeploy(broker_id=broker.broker_id, partitions=1, stores=2, created=created)]
    for ref in broker.partitions(TOPIC):
        broker.lose(ref, keep=0)


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_restart_on_a_re_created_topic_fails_as_a_foreign_checkpoint(make_reader, broker, keys, web,
                                                                       fail_on_data_loss):
    """The README's read block again on a cluster restarted empty: the checkpoint is not data loss and
    failOnDataLoss=false must not read the new topic from the old offsets."""
    reader = make_reader(masterWebUrl=web.url, failOnDataLoss=fail_on_data_loss)
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadAllAvailable())
    scope = f"{broker.broker_id}:{TOPIC}"
    assert end[scope + "#origin"] == 20261125074442  # the deployment's createDate at the master
    reader.stop()
    _recreate(broker, web)
    restarted = make_reader(masterWebUrl=web.url, failOnDataLoss=fail_on_data_loss)
    with pytest.raises(ForeignCheckpointError, match=(
            rf"^use a new checkpointLocation: this query's checkpoint belongs to another cluster or to an earlier "
            rf"incarnation of the topic \(topic {TOPIC} on broker {broker.broker_id}: the checkpoint's was created "
            r"2026-11-25 07:44:42 \(the master's clock\), the one there now 2026-11-25 08:15:00")) as error:
        restarted.latestOffset(end, ReadAllAvailable())
    assert "failOnDataLoss does not apply" in str(error.value) and restarted.data_losses == []
    broker.append(broker.partitions(TOPIC)[0], *[f"new{i}".encode() for i in range(20)])  # refilled past 280:
    with pytest.raises(ForeignCheckpointError):  # the same, where the #last check would call it reused offsets
        make_reader(masterWebUrl=web.url, failOnDataLoss=fail_on_data_loss).latestOffset(end, ReadAllAvailable())


def test_a_topic_re_created_under_a_running_query_fails_as_foreign_at_the_loss(make_reader, broker, keys, web):
    reader = make_reader(masterWebUrl=web.url)
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadAllAvailable())
    _recreate(broker, web)
    with pytest.raises(ForeignCheckpointError, match="created 2026-11-25 07:44:42"):
        reader.latestOffset(end, ReadAllAvailable())


def test_a_loss_on_the_same_topic_incarnation_stays_data_loss_without_a_hint(make_reader, broker, keys, web):
    reader = make_reader(masterWebUrl=web.url)
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadAllAvailable())
    reader.stop()
    for ref in broker.partitions(TOPIC):  # a broker that lost everything it held; its deployment is the same
        broker.lose(ref, keep=0)
    with pytest.raises(DataLossError, match=rf"^partition {keys[0]}: the broker's max offset 0 is below") as error:
        make_reader(masterWebUrl=web.url).latestOffset(end, ReadAllAvailable())
    assert "another cluster" not in str(error.value)


def test_without_a_web_api_an_emptied_topic_says_a_foreign_checkpoint_looks_the_same_first(make_reader, broker,
                                                                                             keys):
    """No master web API (the default port 8080 has none here): the origin cannot be told, so a checkpoint
    ahead of a topic whose partitions are all empty stays a loss, but the message leads with the likelier
    cause and says how to tell."""
    reader = make_reader()
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadAllAvailable())
    assert not [key for key in end if key.endswith("#origin")]
    reader.stop()
    for ref in broker.partitions(TOPIC):
        broker.lose(ref, keep=0)
    with pytest.raises(DataLossError, match=(
            rf"^every partition of topic {TOPIC} on broker {broker.broker_id} is empty while this query's "
            r"checkpoint stands past their start. If the checkpoint was written against another cluster or before "
            r"the topic was deleted and re-created \(e.g. a local cluster restarted empty\), nothing was lost: use "
            r"a new checkpointLocation. tubespark cannot compare")) as error:
        make_reader().latestOffset(end, ReadAllAvailable())
    text = str(error.value)
    assert "this checkpoint records no origin" in text and "Set masterWebUrl" in text
    assert f"Otherwise the broker lost what it stored: partition {keys[0]}: the broker's max offset 0" in text


def test_without_a_web_api_a_partial_loss_notes_that_a_foreign_checkpoint_looks_the_same(make_reader, broker,
                                                                                           keys):
    reader = make_reader()
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadAllAvailable())
    p0, _ = broker.partitions(TOPIC)
    broker.lose(p0, keep=4)
    with pytest.raises(DataLossError, match=rf"^partition {keys[0]}: the broker's max offset 112") as error:
        reader.latestOffset(end, ReadAllAvailable())
    assert ("Set failOnDataLoss=false to continue from offset 0. A checkpoint written against another cluster "
            "or before the topic was deleted and re-created looks the same from here") in str(error.value)


def test_an_old_checkpoint_without_origin_marks_loads_and_gets_one(make_reader, broker, keys, web):
    old = {keys[0]: 280, keys[1]: 840}  # no #last, no #origin
    p0, _ = broker.partitions(TOPIC)
    broker.append(p0, b"later")
    reader = make_reader(masterWebUrl=web.url)
    end = reader.latestOffset(old, ReadAllAvailable())
    assert partitions_of(end) == {keys[0]: 308, keys[1]: 840}
    assert end[f"{broker.broker_id}:{TOPIC}#origin"] == 20261125074442
    reader.stop()
    web.topics[TOPIC] = []  # the master's web API no longer lists it: nothing to compare, the mark is carried
    broker.append(p0, b"later2")
    end2 = make_reader(masterWebUrl=web.url).latestOffset(end, ReadAllAvailable())
    assert end2[f"{broker.broker_id}:{TOPIC}#origin"] == 20261125074442 and partitions_of(end2)[keys[0]] == 336


def test_a_partition_not_moved_carries_its_fingerprint(make_reader, broker, keys):
    reader = make_reader()
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadAllAvailable())
    _p0, p1 = broker.partitions(TOPIC)
    broker.append(p1, b"more")
    end2 = reader.latestOffset(end, ReadAllAvailable())
    assert end2[keys[0] + "#last"] == end[keys[0] + "#last"]  # p0 did not move: its mark is carried over
    assert end2[keys[1]] == 868 and end2[keys[1] + "#last"] != end[keys[1] + "#last"]


def test_a_partition_moved_away_stays_in_the_offsets_across_a_restart(make_reader, master, broker, keys):
    """A revoked partition is carried in the offsets, so a restarted query resumes it at the checkpoint's
    offset (rule a) instead of treating it as new and starting it at startingOffsets (re-reading it)."""
    _p0, p1 = broker.partitions(TOPIC)
    reader = make_reader()
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadMaxRows(8))
    master.push_event(EventType.DISCONNECT, [p1])
    wait_until(lambda: keys[1] not in reader.broker.member.session().assigned(), what="p1 to be revoked")
    end2 = reader.latestOffset(end, ReadMaxRows(8))
    reader.stop()  # the query dies here; the checkpoint holds end2
    restarted = make_reader()
    restarted.broker.member.session()
    master.push_event(EventType.CONNECT, [p1])
    wait_until(lambda: keys[1] in restarted.broker.member.session().held(), what="p1 to be held by the new run")
    end3 = restarted.latestOffset(end2, ReadAllAvailable())
    assert end3[keys[1]] >= end2[keys[1]] == end[keys[1]] > 0
    assert all(task.start >= end2[keys[1]] for task in restarted.partitions(end2, end3)
               if task.partition_id == p1.partition_id)


def test_a_broker_refusing_the_member_fails_the_query_instead_of_stalling_it(make_reader, broker):
    from tubespark.errors import AuthError
    from tubespark.tubemq.wire.errcodes import ErrCode
    broker.inject(Method.BROKER_REGISTER, ErrCode.CONSUME_GROUP_FORBIDDEN, times=100, text="group not allowed")
    reader = make_reader(startingOffsets="group")  # no probe: only the member's own registrations are refused
    with pytest.raises(AuthError, match="group not allowed"):
        reader.latestOffset(reader.initialOffset(), ReadAllAvailable())


# --- admission like Kafka's, and a byte budget (issue 16) ---------------------------------------------


def test_min_offsets_per_trigger_waits_for_enough_messages_or_the_delay(make_reader, broker, keys):
    reader = make_reader(minOffsetsPerTrigger="50", maxTriggerDelay="400ms")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(50)
    start = {keys[0]: 0, keys[1]: 0}  # 40 messages wait: below 50
    assert reader.latestOffset(start, limit) == start  # no batch ...
    broker.append(broker.partitions(TOPIC)[0], *[b"more"] * 10)  # ... until 50 wait
    assert partitions_of(reader.latestOffset(start, limit)) == {keys[0]: 560, keys[1]: 840}
    reader._last_batch_at = __import__("time").monotonic()  # a batch just ran
    trickle = {keys[0]: 560, keys[1]: 812}  # 1 message waits
    assert reader.latestOffset(trickle, limit) == trickle
    wait_until(lambda: reader.latestOffset(trickle, limit) != trickle, timeout_s=3, what="maxTriggerDelay")
    # Trigger.Once:
    assert partitions_of(reader.latestOffset(trickle, ReadAllAvailable())) == {keys[0]: 560, keys[1]: 840}


def test_available_now_never_waits_for_min_offsets(make_reader, keys):
    reader = make_reader(minOffsetsPerTrigger="1000")
    reader.prepareForTriggerAvailableNow()
    assert partitions_of(reader.latestOffset({keys[0]: 0, keys[1]: 0}, reader.getDefaultReadLimit())) == {keys[0]: 280,
                                                                                            keys[1]: 840}


def _value_bytes(reader, start, end) -> int:
    return sum(len(r["value"]) for t in reader.partitions(start, end) for b in reader.read(t) for r in b.to_pylist())


def test_max_bytes_per_trigger_caps_each_batch_and_composes_with_max_offsets(make_reader, broker, keys):
    p0, _ = broker.partitions(TOPIC)
    broker.append(p0, *[b"x" * 1000] * 20)  # p0: 10 tiny messages, then 20 of 1,000 bytes
    reader = make_reader(maxBytesPerTrigger="5k")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxBytes(5 * 1024)
    start, seen, batches = {keys[0]: 0, keys[1]: 0}, 0, 0
    while True:
        end = partitions_of(reader.latestOffset(start, limit))
        if end == start:
            break
        size = _value_bytes(reader, start, end)
        assert 0 < size <= 5 * 1024 + 1000, (start, end, size)  # an estimate: within one message of the budget
        seen, start, batches = seen + size, end, batches + 1
    assert seen == 10 * 2 + 20 * 1000 + 30 * 2 + 20 * 1 and batches >= 4  # everything, in several batches
    reader.stop()  # leaves the group: the next reader gets the partitions
    both = make_reader(maxBytesPerTrigger="1m", maxOffsetsPerTrigger="8")
    end = partitions_of(both.latestOffset({keys[0]: 0, keys[1]: 0}, both.getDefaultReadLimit()))
    assert sum(end.values()) // 28 == 8  # the byte budget allows all: the row cap wins


def test_the_driver_opens_no_connection_per_partition_at_start_or_per_trigger(make_reader, master, broker):
    """Issue 23 part 7 (scale): the driver's probes (start offsets, size samples for maxBytesPerTrigger) opened
    a connection per partition: at a query's start, and on every trigger for every partition with a backlog.
    They share one client now; connects per trigger stay at zero whatever the number of partitions."""
    wide = broker.add_topic("topic_wide", stores=8)
    for ref in wide:
        broker.append(ref, *[b"v" * 100] * 30)
    master.push_event(EventType.CONNECT, wide)
    reader = make_reader(assign=False, topic="topic_wide", startingOffsets="earliest", maxBytesPerTrigger="2k")
    before = broker.accepted
    start = reader.initialOffset()
    assert len(start) == 8
    assert broker.accepted - before <= 3, "initialOffset: a connection per partition"  # group session + probe
    limit = reader.getDefaultReadLimit()
    start = partitions_of(reader.latestOffset(start, limit))  # the first fingerprints open their one client
    settled = broker.accepted
    for _ in range(3):
        for ref in wide:
            broker.append(ref, b"w" * 100)
        end = reader.latestOffset(start, limit)
        assert partitions_of(end) != start  # every trigger moves, with a backlog left (sizes sampled again)
        reader.commit(end)
        start = partitions_of(end)
    assert broker.accepted == settled, f"{broker.accepted - settled} connections opened in 3 triggers"


# --- start and end by time (issue 16) -----------------------------------------------------------------

MINUTE = 60_000
T0 = 1_700_000_040_000  # a whole minute (2023-11-14 22:14 UTC)


def _timed(broker: FakeBroker, ref, minutes: list[int | None]) -> list[int]:
    from datetime import UTC, datetime

    from tubespark.tubemq.wire.message import format_msg_time
    return broker.append(ref, *[OutgoingMessage(f"t{i}".encode(), msg_time="" if m is None else format_msg_time(
        datetime.fromtimestamp((T0 + m * MINUTE) / 1000, UTC))) for i, m in enumerate(minutes)])


@pytest.fixture
def timed_broker() -> Iterator[FakeBroker]:
    with FakeBroker(batch_size=5) as fake:
        p0, p1 = fake.add_topic(TOPIC, stores=2)
        _timed(fake, p0, [0, 0, 1, None, 2, 2, 2, 5, 9, 9])  # an untimed message among timed ones
        _timed(fake, p1, [0] * 3)
        yield fake


def test_start_by_time_is_the_first_message_of_that_minute(timed_broker):
    from tubespark.tubemq.client.broker import BrokerClient
    from tubespark.tubemq.client.ranges import probe_bounds
    from tubespark.tubemq.client.seek import offset_at_time
    p0, _ = timed_broker.partitions(TOPIC)
    broker = BrokerClient("seek-test")
    try:
        bounds = probe_bounds(broker, p0, "probe_g")
        def at(minute: float) -> int | None:
            seek = offset_at_time(broker, p0, bounds, int(T0 + minute * MINUTE), "seek_g")
            assert seek.probes <= 4  # ceil(log2(10 + 1)) reads for 10 records
            return seek.offset
        assert at(-5) == 0
        assert at(0.5) == 0  # minute precision: the whole minute 0 counts
        assert at(1) == 2 * 28
        assert at(1.99) == 2 * 28
        assert at(2) == 3 * 28  # the untimed message before minute 2's first comes along
        assert at(3) == 7 * 28  # nothing in minutes 3 and 4: the next one
        assert at(9) == 8 * 28
        assert at(10) is None  # every message is older
    finally:
        broker.close()


def test_stream_and_batch_start_and_end_by_time(timed_broker, monkeypatch):
    with FakeMaster(timed_broker) as master:
        monkeypatch.setattr(membership, "install_shutdown_hooks", lambda stop: None)
        p0, p1 = timed_broker.partitions(TOPIC)
        base = {"master": master.address, "topic": TOPIC, "group": GROUP, **FAST}
        master.push_event(EventType.CONNECT, [p0, p1])
        reader = TubeStreamReader(TubeMQOptions.from_raw(
            {**base, "startingOffsetsByTimestamp": f'{{"{p0.key}": {T0 + 2 * MINUTE}}}',
             "startingOffsets": "earliest"}, mode="read"))
        try:
            assert reader.initialOffset() == {p0.key: 3 * 28, p1.key: 0}  # p1 is not named: startingOffsets
        finally:
            reader.stop()
        batch = TubeBatchReader(TubeMQOptions.from_raw(
            {**base, "startingTimestamp": str(T0 + MINUTE), "endingTimestamp": str(T0 + 9 * MINUTE),
             "startingOffsetsByTimestampStrategy": "latest"}, mode="read"))
        assert [(t.partition_id, t.start, t.end) for t in batch.plan()] == [(p0.partition_id, 2 * 28, 8 * 28)]
        strict = TubeBatchReader(TubeMQOptions.from_raw({**base, "startingTimestamp": str(T0 + MINUTE)},
                                                        mode="read"))
        with pytest.raises(OptionError, match=rf"partition {p1.key} has no message at or after the start time "
                                              r"1700000100000 \(2023-11-14 22:15:00 UTC\).*Strategy=latest"):
            strict.plan()


# --- topicPattern (issue 16) -------------------------------------------------------------------------


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_topic_that_disappears_from_the_pattern_is_a_vanished_partition(monkeypatch, broker, master, keys,
                                                                           fail_on_data_loss):
    from tubespark.tubemq.client.group import GroupSession
    gone = broker.add_topic("topic_gone")[0]
    broker.append(gone, b"g1", b"g2")
    matching = [TOPIC, "topic_gone"]
    monkeypatch.setattr(membership, "subscribed_topics", lambda options, allow_none=False: tuple(sorted(matching)))
    monkeypatch.setattr(membership, "install_shutdown_hooks", lambda stop: None)

    class Session(GroupSession):  # the fake master assigns each new member every partition of its topics
        def start(self, **kwargs):
            master.push_event(EventType.CONNECT, [p for t in self.topics for p in broker.partitions(t)])
            return super().start(**kwargs)

    monkeypatch.setattr(membership, "GroupSession", Session)
    reader = TubeStreamReader(TubeMQOptions.from_raw(
        {"master": master.address, "topicPattern": "topic_.*", "group": GROUP, **FAST, "startingOffsets": "earliest",
         "topicRefreshIntervalMs": "1", "failOnDataLoss": fail_on_data_loss}, mode="read"))
    try:
        start = reader.initialOffset()
        assert set(start) == {*keys, gone.key}
        end = partitions_of(reader.latestOffset(start, ReadAllAvailable()))
        assert end[gone.key] == 56
        with broker.lock:  # the topic is deleted, so the pattern no longer matches it
            del broker.stores[("topic_gone", 0)]
        matching.remove("topic_gone")
        if fail_on_data_loss == "true":
            with pytest.raises(DataLossError, match=f"partition {gone.key} vanished at offset 56"):
                reader.latestOffset(end, ReadAllAvailable())
        else:
            assert reader.latestOffset(end, ReadAllAvailable()) == {keys[0]: 280, keys[1]: 840}
    finally:
        reader.stop()


def test_a_partition_whose_broker_is_down_is_not_a_vanished_one(make_reader, master, broker, keys):
    """The master stops listing a down broker's partitions and revokes them from the group, exactly as it
    would for a deleted partition; its configuration (web API) still holds them: the stream keeps the
    partition in its offsets and goes on. Removed from the configuration, it is a vanished partition."""
    with FakeMasterWeb() as web:
        web.topics[TOPIC] = [FakeDeploy(broker_id=broker.broker_id, partitions=1, stores=2, running=False)]
        reader = make_reader(masterWebUrl=web.url)
        end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadAllAvailable())
        p1 = broker.partitions(TOPIC)[1]
        master.push_event(EventType.DISCONNECT, [p1])  # the broker's heartbeat timed out at the master ...
        wait_until(lambda: keys[1] not in reader.broker.member.session().assigned(), what="p1 to be revoked")
        with broker.lock:  # ... which no longer lists its partitions
            del broker.stores[(TOPIC, p1.partition_id)]
        end2 = reader.latestOffset(end, ReadAllAvailable())
        assert partitions_of(end2)[keys[1]] == end[keys[1]]  # kept where the query stands, nothing lost
        assert reader.broker.ledger.state(keys[1]) is Assignment.REVOKED

        web.topics[TOPIC] = []  # the topic's deployment deleted from the configuration
        # the fake master hands its next event to whichever member beats first: the old reader leaves, so p0 goes
        # to the fresh one (seen in CI under load: the old reader took it, and the fresh one found p0 vanished)
        reader.stop()
        fresh = make_reader(masterWebUrl=web.url)
        with pytest.raises(DataLossError, match=f"partition {keys[1]} vanished at offset {end[keys[1]]}"):
            fresh.latestOffset(end2, ReadAllAvailable())


def test_a_restart_replaying_a_batch_of_a_partition_whose_broker_is_down_plans_it(make_reader, master, broker, keys):
    """Seen in the rolling soak: a query killed while one broker was down restarts and replays its last planned
    batch, which has a range of that broker's partition (planned before the crash). The master lists the
    partition no more; the replay must still read that range (its broker is configured, only down), not fail
    with "no longer exists" as it did. A partition removed from the configuration still fails."""
    with FakeMasterWeb() as web:
        web.topics[TOPIC] = [FakeDeploy(broker_id=broker.broker_id, partitions=1, stores=2, running=False)]
        p1 = broker.partitions(TOPIC)[1]
        with broker.lock:  # the master lists the down broker's partition no more
            del broker.stores[(TOPIC, p1.partition_id)]
        fresh = make_reader(assign=False, masterWebUrl=web.url)
        [task] = fresh.partitions({keys[1]: 0}, {keys[1]: 56})
        assert (task.broker_id, task.partition_id, task.start, task.end) == (p1.broker_id, p1.partition_id, 0, 56)
        assert (task.host, task.port) == (f"127.0.0.{broker.broker_id}", 8123)  # where the configuration has it
        web.topics[TOPIC] = []  # removed from the configuration: a vanished partition
        with pytest.raises(DataLossError, match=f"partition {keys[1]} vanished at offset 0 .*offsets \\[0, 56\\)"):
            make_reader(assign=False, masterWebUrl=web.url).partitions({keys[1]: 0}, {keys[1]: 56})


@pytest.mark.parametrize("broker_answers", [False, True])
def test_a_partition_whose_broker_is_down_is_not_a_vanished_one_when_no_web_api_answers(make_reader, master, broker,
                                                                                        keys, broker_answers):
    """Issue 22 part 7, issue 23 part 8: without a web API the configuration is unknown, which must never read
    as "not listed". The master stops listing a partition and revokes it; its broker, asked directly, does
    not answer: a broker that is down, so the partition stays in the offsets. A broker that answers that it
    has no such partition is evidence of removal: a vanished partition (failOnDataLoss)."""
    reader = make_reader()  # nothing answers at the default masterWebUrl (port 8080 of the master's host)
    end = reader.latestOffset({keys[0]: 0, keys[1]: 0}, ReadAllAvailable())
    p1 = broker.partitions(TOPIC)[1]
    master.push_event(EventType.DISCONNECT, [p1])
    wait_until(lambda: keys[1] not in reader.broker.member.session().assigned(), what="p1 to be revoked")
    with broker.lock:  # the master lists it no more
        del broker.stores[(TOPIC, p1.partition_id)]
    if broker_answers:
        with pytest.raises(DataLossError, match=f"partition {keys[1]} vanished at offset {end[keys[1]]}"):
            reader.latestOffset(end, ReadAllAvailable())
        return
    broker.fault(Method.BROKER_REGISTER, "reset", times=None)  # its broker does not answer: down
    end2 = reader.latestOffset(end, ReadAllAvailable())
    assert partitions_of(end2)[keys[1]] == end[keys[1]]  # kept where the query stands
    assert reader.broker.ledger.state(keys[1]) is Assignment.REVOKED
