"""The ``rocketmq`` pull stream reader on the shared engine, against an in-memory name server and brokers.

``FakeRocketMQ`` is a test double of :class:`tubespark.rocketmq.client.client.RocketMQClient` (routes, min
and max offsets, group offsets) and of the driver's reads of stored messages (the ``#last`` fingerprints):
the real 5.3.x broker's behaviour is proved in tests/integration/rocketmq/; here the reader's rules run in
milliseconds.
"""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from tests.readers import PullStreamReader
from tubespark.errors import AvailableNowIncompleteError, BrokerConnectionError, BrokerUnavailableError, DataLossError
from tubespark.rocketmq.spark import adapter as stream_reader
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.read_task import PullRange
from tubespark.rocketmq.wire.route import MessageQueue

Q0, Q1, Q2 = "orders:broker-a:0", "orders:broker-a:1", "orders:broker-b:0"


class FakeRocketMQ:
    """Queues with ``[min, max)`` offsets; a broker in ``dead`` answers nothing (``follow=False`` leaves its
    queues out, as the real client does for a planner)."""

    def __init__(self, queues: dict[str, tuple[int, int]]) -> None:
        self.queues = dict(queues)
        self.dead: set[str] = set()
        self.group_offsets: dict[str, int] = {}
        self.bodies: dict[tuple[str, int], bytes] = {}  # (queue, offset) -> value; unset: "<queue>@<offset>"
        self.closed = False
        self.filter_checks: list[str] = []

    def bounds(self, queues: list[MessageQueue], *, follow: bool = True) -> dict[str, tuple[int, int]]:
        return {mq.key: self.queues[mq.key] for mq in queues if follow or mq.broker_name not in self.dead}

    def consumer_offset(self, group: str, mq: MessageQueue) -> int | None:
        return self.group_offsets.get(mq.key)

    def commit_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        self.group_offsets[mq.key] = offset

    def close(self) -> None:
        self.closed = True

    def check_filter(self, topic: str, group: str, flt: object) -> None:
        self.filter_checks.append(topic)

    def read_range(self, task: PullRange, options: RocketMQOptions, *, retry_s: float | None = None,
                   outage_s: float | None = None, filtered: bool = True, defer: bool = True):
        """The stored messages of ``[start, end)`` (those within the queue's bounds), as the read path's rows."""
        key = task.mq.key
        if task.broker_name in self.dead:
            raise BrokerConnectionError(f"{task.broker_name} does not answer")
        low, high = self.queues[key]
        offsets = range(max(task.start, low), min(task.end, high))
        if offsets:
            yield pa.record_batch({"queueOffset": list(offsets), "msgId": [f"{key}/{o}" for o in offsets],
                                   "value": [self.bodies.get((key, o), f"{key}@{o}".encode()) for o in offsets]})


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeRocketMQ:
    fake = FakeRocketMQ({Q0: (0, 30), Q1: (0, 10)})
    monkeypatch.setattr(stream_reader, "all_queues",
                        lambda client, topics, refresh=False: sorted(MessageQueue.parse_key(k) for k in fake.queues))
    monkeypatch.setattr(stream_reader, "read_range", fake.read_range)
    return fake


def make_reader(cluster: FakeRocketMQ, **options: str) -> PullStreamReader:
    raw = {"namesrv": "127.0.0.1:9876", "topic": "orders", "group": "g", "startingOffsets": "earliest", **options}
    reader = PullStreamReader(RocketMQOptions.from_raw(raw, mode="read"))
    reader.broker._client = cluster  # type: ignore[assignment]  # the in-memory double stands in for the client
    return reader


def positions(offsets: dict[str, int]) -> dict[str, int]:
    return {key: value for key, value in offsets.items() if "#" not in key}


def test_starts_where_asked_and_reads_everything(cluster: FakeRocketMQ) -> None:
    reader = make_reader(cluster)
    start = reader.initialOffset()
    assert start == {Q0: 0, Q1: 0}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert positions(end) == {Q0: 30, Q1: 10}
    assert sorted((t.queue_id, t.start, t.end) for t in reader.partitions(start, end)) == [(0, 0, 30), (1, 0, 10)]
    assert make_reader(cluster, startingOffsets="latest").initialOffset() == {Q0: 30, Q1: 10}


def test_max_offsets_per_trigger_bounds_every_batch(cluster: FakeRocketMQ) -> None:
    reader = make_reader(cluster, maxOffsetsPerTrigger="8")
    offsets = reader.initialOffset()
    while True:
        end = reader.latestOffset(offsets, reader.getDefaultReadLimit())
        if end == offsets:
            break
        assert sum(t.end - t.start for t in reader.partitions(offsets, end)) <= 8
        offsets = end
    assert positions(offsets) == {Q0: 30, Q1: 10}


def test_a_dead_broker_stalls_only_its_queues(cluster: FakeRocketMQ) -> None:
    cluster.queues[Q2] = (0, 5)
    reader = make_reader(cluster)
    start = reader.initialOffset()
    cluster.dead.add("broker-b")
    cluster.queues[Q0] = (0, 40)
    cluster.queues[Q2] = (0, 9)
    end = reader.latestOffset({Q0: 30, Q1: 10, Q2: 5}, ReadAllAvailable())
    assert positions(end) == {Q0: 40, Q1: 10, Q2: 5}  # Q2 stays in the offsets, planned nothing
    cluster.dead.clear()
    assert positions(reader.latestOffset(end, ReadAllAvailable()))[Q2] == 9  # back: it catches up
    assert start == {Q0: 0, Q1: 0, Q2: 0}


def test_a_topic_whose_route_vanished_while_its_broker_restarts_stalls_and_resumes(
        cluster: FakeRocketMQ, monkeypatch: pytest.MonkeyPatch) -> None:
    """The only broker of the topic stopped: the name server drops the route, and the client says so as the
    retriable BrokerUnavailableError (a route it had before). The queues stay in the offsets and plan
    nothing; the stream goes on, and reads on when the route is back (issue 23 part 8)."""
    reader = make_reader(cluster)
    end = reader.latestOffset({Q0: 0, Q1: 0}, ReadAllAvailable())
    assert positions(end) == {Q0: 30, Q1: 10}
    routed = stream_reader.all_queues

    def no_route(client: object, topics: list[str], refresh: bool = False) -> list[MessageQueue]:
        raise BrokerUnavailableError("the name server has no route for topic orders now, though it had one")

    monkeypatch.setattr(stream_reader, "all_queues", no_route)
    cluster.queues[Q0] = (0, 45)
    assert positions(reader.latestOffset(end, ReadAllAvailable())) == {Q0: 30, Q1: 10}  # stalled, not failed
    monkeypatch.setattr(stream_reader, "all_queues", routed)
    assert positions(reader.latestOffset(end, ReadAllAvailable())) == {Q0: 45, Q1: 10}


def test_a_serving_broker_behind_the_query_is_waited_for(cluster: FakeRocketMQ) -> None:
    reader = make_reader(cluster)
    cluster.queues[Q0] = (0, 20)  # a slave acting for its master has replicated only 20
    end = reader.latestOffset({Q0: 30, Q1: 10}, ReadAllAvailable())
    assert end == {Q0: 30, Q1: 10}  # the offset never moves back, nothing is read twice
    cluster.queues[Q0] = (0, 35)
    assert positions(reader.latestOffset(end, ReadAllAvailable())) == {Q0: 35, Q1: 10}


def test_a_new_queue_joins_at_its_min_offset_and_is_read_from_the_next_batch(cluster: FakeRocketMQ) -> None:
    reader = make_reader(cluster)
    start = {Q0: 30, Q1: 10}
    cluster.queues[Q2] = (3, 8)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {Q0: 30, Q1: 10, Q2: 3} and reader.partitions(start, end) == []
    end2 = reader.latestOffset(end, ReadAllAvailable())
    [task] = reader.partitions(end, end2)
    assert (task.broker_name, task.start, task.end) == ("broker-b", 3, 8)


def test_offsets_removed_by_retention_are_data_loss(cluster: FakeRocketMQ) -> None:
    cluster.queues[Q0] = (12, 30)
    with pytest.raises(DataLossError, match=rf"partition {Q0}: offsets \[4, 12\) are gone"):
        make_reader(cluster).latestOffset({Q0: 4, Q1: 10}, ReadAllAvailable())
    reader = make_reader(cluster, failOnDataLoss="false")
    end = reader.latestOffset({Q0: 4, Q1: 10}, ReadAllAvailable())
    [task] = reader.partitions({Q0: 4, Q1: 10}, end)
    assert (task.start, task.end) == (12, 30)
    assert [(loss.key, loss.offset, loss.resumes_at) for loss in reader.data_losses] == [(Q0, 4, 12)]


def test_the_committed_batch_is_stored_as_the_groups_offsets(cluster: FakeRocketMQ) -> None:
    reader = make_reader(cluster)
    end = reader.latestOffset({Q0: 0, Q1: 0}, ReadAllAvailable())
    assert cluster.group_offsets == {Q0: 0, Q1: 0}  # the start of a planned batch is committed already
    reader.commit(end)
    assert cluster.group_offsets == {Q0: 30, Q1: 10}
    assert make_reader(cluster, startingOffsets="group").initialOffset() == {Q0: 30, Q1: 10}


def test_available_now_reads_to_its_target_and_stops(cluster: FakeRocketMQ) -> None:
    reader = make_reader(cluster)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    cluster.queues[Q0] = (0, 50)  # arrives after the run started: for the next run
    end = reader.latestOffset(start, ReadAllAvailable())
    assert positions(end) == {Q0: 30, Q1: 10}
    assert reader.latestOffset(end, ReadAllAvailable()) == end


def test_available_now_fails_naming_a_queue_it_cannot_read(cluster: FakeRocketMQ) -> None:
    reader = make_reader(cluster, failoverTimeoutMs="1500")
    reader.prepareForTriggerAvailableNow()
    cluster.dead.add("broker-a")
    with pytest.raises(AvailableNowIncompleteError, match=f"{Q0}: its broker did not answer"):
        reader.latestOffset({Q0: 0, Q1: 0}, ReadAllAvailable())


def test_executors_get_the_options_not_the_client(cluster: FakeRocketMQ) -> None:
    reader = make_reader(cluster)
    reader.initialOffset()
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.options == reader.options and copy.broker._client is None


def test_offsets_reused_after_a_restart_are_data_loss(cluster: FakeRocketMQ) -> None:
    """A broker that lost its store and was refilled holds other messages at the offsets the query read: the
    restarted query's first plan compares the message below its start with the one it read last."""
    end = make_reader(cluster).latestOffset({Q0: 0, Q1: 0}, ReadAllAvailable())
    assert positions(end) == {Q0: 30, Q1: 10}
    assert make_reader(cluster).latestOffset(end, ReadAllAvailable()) == end  # the same messages: nothing to do
    cluster.bodies[(Q0, 29)] = b"another message at the same offset"
    with pytest.raises(DataLossError, match=f"{Q0}.*reused"):
        make_reader(cluster).latestOffset(end, ReadAllAvailable())


def test_the_filter_is_checked_once_per_process_also_on_a_restart(cluster: FakeRocketMQ) -> None:
    """A pull does not tell when an SQL92 filter does not compile (the broker passes everything): the brokers
    are asked before planning, by a new query and by one restarted on its checkpoint (no initialOffset)."""
    fresh = make_reader(cluster, subExpression="a > 1", expressionType="sql92")
    offsets = fresh.initialOffset()
    fresh.latestOffset(offsets, ReadAllAvailable())
    assert cluster.filter_checks == ["orders"]
    restarted = make_reader(cluster, subExpression="a > 1", expressionType="sql92")
    restarted.latestOffset(offsets, ReadAllAvailable())
    restarted.latestOffset(offsets, ReadAllAvailable())
    assert cluster.filter_checks == ["orders", "orders"]
