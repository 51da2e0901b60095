"""A pull stream's read task whose broker group goes down mid-range returns what it read and leaves the rest to
the next micro-batch (issue 23 part 8, tubespark/core/deferred.py), as TubeMQ's and TANK's do; the shared
engine moves the queue's offset back, and the rest is read once when the group is back.

The cluster is a few lines over the production codec (tests/unit/rocketmq/test_client_ranges.py): one socket
answers as the name server and, behind the testbed's fault proxy, as broker ``broker-a`` ("down" is the proxy
stopped: open connections dropped, new ones refused, as a stopped broker's port does). Pulls above the first
window are held until the proxy stops, so the task reads exactly one window before its group goes down. The
driver's view of bounds is the in-memory double of tests/unit/rocketmq/test_stream_reader.py; the real broker
and group restarts are proved in tests/integration/rocketmq/test_broker_groups.py.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from tubespark_testbed.faultproxy import FaultProxy

from tests.readers import PullStreamReader
from tests.unit.rocketmq.test_client_ranges import AnsweringNameServer
from tests.unit.rocketmq.test_stream_reader import FakeRocketMQ
from tubespark.core.deferred import Deferral, DeferredRanges
from tubespark.errors import BrokerUnavailableError
from tubespark.rocketmq.client.ranges import PULL_BATCH
from tubespark.rocketmq.spark import adapter as stream_reader
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.spark.read_task import PullRange, read_range
from tubespark.rocketmq.wire import codes
from tubespark.rocketmq.wire.frame import FLAG_RESPONSE, Command
from tubespark.rocketmq.wire.message import StoredMessage, encode_stored
from tubespark.rocketmq.wire.route import MessageQueue

N = 100
KEY = "events:broker-a:0"
FAILOVER_MS = 200
"""The reader's own retries around a dead broker (``failoverTimeoutMs``): a stream's task gives up after them."""
OUTAGE_MS = 10_000
"""How long a task that does not defer waits for its group: far above a stream task's whole read, even under load."""


class OneGroup(AnsweringNameServer):
    """Name server for topic ``events`` (one queue on ``broker-a``, listed at ``broker_address``) and that broker's
    pulls over ``N`` messages; pulls at or above ``PULL_BATCH`` wait for ``release`` while ``hold`` is set."""

    def __init__(self) -> None:
        super().__init__(codes.SUCCESS)
        self.broker_address = ""
        self.hold = True
        self.release = threading.Event()

    def answer(self, request: Command) -> Command:
        if request.code == codes.GET_BROKER_CLUSTER_INFO:
            body = (b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"%s"},"brokerName":"broker-a"}}}'
                    % self.broker_address.encode())
            return Command(codes.SUCCESS, flag=FLAG_RESPONSE, body=body)
        if request.code == codes.PULL_MESSAGE:
            return self.pull(int(request.ext["queueOffset"]), int(request.ext["maxMsgNums"]))
        route = {"queueDatas": [{"brokerName": "broker-a", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}],
                 "brokerDatas": [{"cluster": "c", "brokerName": "broker-a", "brokerAddrs": {"0": self.broker_address}}]}
        return Command(codes.SUCCESS, flag=FLAG_RESPONSE, body=json.dumps(route).encode())

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):  # a held pull answers into a connection the proxy closed
            super()._serve(conn)

    def pull(self, offset: int, count: int) -> Command:
        if self.hold and offset >= PULL_BATCH:
            self.release.wait(10)
        messages = [StoredMessage("events", 0, o, b"m%d" % o, {}, 1, 1) for o in range(offset, min(offset + count, N))]
        return Command(codes.SUCCESS, flag=FLAG_RESPONSE, body=encode_stored(messages),
                       ext={"nextBeginOffset": str(offset + len(messages)), "minOffset": "0", "maxOffset": str(N)})


class Link:
    """``broker-a``'s port: a fault proxy to the cluster socket, stopped ("down") and started again on its port."""

    def __init__(self, cluster: OneGroup) -> None:
        self.cluster = cluster
        self.proxy = FaultProxy(cluster.address).start()
        cluster.broker_address = self.proxy.address
        self.port = int(self.proxy.address.rsplit(":", 1)[1])

    def down(self) -> None:
        self.proxy.stop()
        self.cluster.release.set()  # the held pulls answer into closed connections

    def up(self) -> None:
        self.cluster.hold = False
        self.proxy = FaultProxy(self.cluster.address, port=self.port).start()


@pytest.fixture
def link() -> Iterator[Link]:
    cluster = OneGroup()
    link = Link(cluster)
    yield link
    cluster.release.set()
    link.proxy.stop()
    cluster.close()


def options(link: Link, **extra: str) -> RocketMQOptions:
    raw = {"namesrv": link.cluster.address, "topic": "events", "startingOffsets": "earliest",
           "requestTimeoutMs": "500", "connectTimeoutMs": "500", "failoverTimeoutMs": str(FAILOVER_MS),
           "outageTimeoutMs": str(OUTAGE_MS), **extra}
    return RocketMQOptions.from_raw(raw, mode="read")


def read_until_down(task: PullRange, opts: RocketMQOptions, link: Link) -> list[bytes]:
    """The task's rows (its executor's read path), the group's broker stopped after the first batch."""
    got: list[bytes] = []
    for batch in read_range(pickle.loads(pickle.dumps(task)), opts):
        got += batch.column("value").to_pylist()
        link.down()
    return got


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> FakeRocketMQ:
    """The driver's bounds of the queue and its own reads (the in-memory double); the tasks read from
    ``OneGroup``."""
    fake = FakeRocketMQ({KEY: (0, N)})
    monkeypatch.setattr(stream_reader, "all_queues",
                        lambda client, topics, refresh=False: sorted(MessageQueue.parse_key(k) for k in fake.queues))
    monkeypatch.setattr(stream_reader, "read_range", fake.read_range)
    return fake


def planner(driver: FakeRocketMQ, opts: RocketMQOptions) -> PullStreamReader:
    reader = PullStreamReader(opts)
    reader.broker._client = driver  # type: ignore[assignment]  # the in-memory double stands in for the client
    return reader


def test_a_stream_task_on_a_down_group_returns_its_rows_and_the_next_batches_read_the_rest_once(link, driver, tmp_path):
    """Fails before the change: the task waited for the group and failed with BrokerUnavailableError after
    outageTimeoutMs, holding every queue of the query meanwhile."""
    opts = options(link, deferredRangesPath=str(tmp_path))
    reader = planner(driver, opts)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    (task,) = reader.partitions(start, end)
    assert isinstance(task, PullRange) and task.defer is not None
    began = time.monotonic()
    got = read_until_down(task, opts, link)
    assert time.monotonic() - began < OUTAGE_MS / 2000, "one short try, no outage wait"
    assert got == [b"m%d" % o for o in range(PULL_BATCH)], "the rows read before the group went down"
    assert DeferredRanges(*task.defer[:2]).take({KEY: N}) == {KEY: Deferral(KEY, 0, N, PULL_BATCH)}

    driver.dead.add("broker-a")
    down = reader.latestOffset(end, ReadAllAvailable())
    moved = {key: value for key, value in down.items() if "#last@" not in key}
    assert moved == {KEY: PULL_BATCH, f"{KEY}#from": PULL_BATCH, "#deferrals": task.defer[1]}, \
        "moved back, with where it starts"
    assert reader.partitions(end, down) == [], "nothing to read while the group is down"
    driver.dead.clear()
    link.up()
    back = reader.latestOffset(down, ReadAllAvailable())
    (rest,) = reader.partitions(down, back)
    assert (rest.start, rest.end) == (PULL_BATCH, N)
    assert [v for batch in read_range(rest, opts) for v in batch.column("value").to_pylist()] == [
        b"m%d" % o for o in range(PULL_BATCH, N)]
    assert reader.latestOffset(back, ReadAllAvailable()) == back, "nothing read twice"
    reader.stop()


@pytest.mark.parametrize(("extra", "defers"), [
    pytest.param({"group": "g"}, False, id="a group alone: tasks wait"),
    pytest.param({}, False, id="no group, no deferredRangesPath: tasks wait"),
    pytest.param({"deferredRangesPath": "."}, True, id="deferredRangesPath: reports under the query's token"),
    pytest.param({"group": "g", "deferOnOutage": "false", "deferredRangesPath": "."}, False,
                 id="deferOnOutage=false: tasks wait"),
])
def test_which_pull_streams_defer(link, driver, tmp_path, extra, defers):
    if "deferredRangesPath" in extra:
        extra = {**extra, "deferredRangesPath": str(tmp_path / "own")}
    reader = planner(driver, options(link, **extra))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    (task,) = reader.partitions(start, end)
    if not defers:
        assert task.defer is None and "#deferrals" not in end
        return
    assert task.defer == (str(tmp_path / "own"), end["#deferrals"], reader.run_id)
    assert DeferredRanges(*task.defer[:2]).visible(reader.run_id), "the driver's marker is there"
    reader.stop()
    assert not DeferredRanges(*task.defer[:2]).visible(reader.run_id), "and gone when the query stops"


def test_a_pull_task_without_a_reports_directory_waits_for_its_group(link):
    opts = options(link, outageTimeoutMs="300")
    with pytest.raises(BrokerUnavailableError, match="outageTimeoutMs"):
        read_until_down(PullRange("events", "broker-a", 0, 0, N), opts, link)


def test_a_pull_task_that_reads_everything_clears_an_earlier_attempts_report(link, tmp_path):
    reports = DeferredRanges(str(tmp_path), "rocketmq:g")
    reports.announce("run1")
    reports.record(Deferral(KEY, 0, N, PULL_BATCH))
    link.cluster.hold = False
    task = PullRange("events", "broker-a", 0, 0, N, reports.where("run1"))
    assert sum(batch.num_rows for batch in read_range(task, options(link))) == N
    assert reports.take({KEY: N}) == {}, "a replayed batch that read it all leaves no remainder"
