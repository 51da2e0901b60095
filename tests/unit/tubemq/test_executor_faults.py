"""Executor-path faults (issue 10): a range read survives broker faults without losing or doubling a message.

The four faults, each scripted on the fake broker's answers *after* it handled the call (so its
position moved, as a real broker's does when only the answer is lost):

* ``reset``: the connection is cut instead of the answer (a connection reset mid-fetch);
* ``slow``: the answer comes after the request timeout;
* ``silent``: the broker stops answering (the connection stays open);
* ``serial``: the answer carries another serial number (it never matches the call).

Transient: the read resumes at the end of the last batch it yielded and returns exactly the range,
each message once. Persistent: a :class:`RangeReadError` names broker, partition, range and how far the
read got, within a bounded time. The key defect these tests pin down: a fetch whose answer was lost
had already moved the broker's position, so simply sending the fetch again skipped a batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.doubles.fakebroker import FakeBroker, fast_settings
from tubespark.errors import BrokerConnectionError, RangeReadError, ServerBusyError
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.ranges import RangeReader
from tubespark.tubemq.wire.constants import Method
from tubespark.tubemq.wire.formats import PartitionRef

READ_GROUP = "app-tubespark-read"
N = 20
BATCH = 4
REQUEST_TIMEOUT_S = 0.4
FAULTS = ["reset", "slow", "silent", "serial"]


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker(batch_size=BATCH) as fake:
        yield fake


@pytest.fixture
def part(broker: FakeBroker) -> PartitionRef:
    [ref] = broker.add_topic("topic_f")
    broker.append(ref, *[f"m{i}".encode() for i in range(N)])
    return ref


@pytest.fixture(params=[False, True], ids=["reader-thread", "caller-reads"])
def client(request: pytest.FixtureRequest) -> Iterator[BrokerClient]:
    """Both ways of reading answers: the connection's thread, and the read task's own (``caller_reads``)."""
    c = BrokerClient("reader-f", fast_settings(request_timeout_s=REQUEST_TIMEOUT_S, connect_timeout_s=0.5,
                                               caller_reads=request.param))
    yield c
    c.close()


def fault(broker: FakeBroker, method: int, action: str, times: int | None = 1) -> None:
    broker.fault(method, action, times=times, delay_s=REQUEST_TIMEOUT_S + 0.3)


def read_with_fault_after_first_batch(rr: RangeReader, broker: FakeBroker, part: PartitionRef, *, method: int,
                                      action: str, times: int | None, end: int = 28 * N) -> list[list[bytes]]:
    """Read [0, end); once the first batch was yielded, script the fault. Returns the batches' bodies."""
    batches: list[list[bytes]] = []
    for batch in rr.read_batches(part, 0, end):
        batches.append([m.data for m in batch])
        if len(batches) == 1:
            fault(broker, method, action, times)
    return batches


def flat(batches: list[list[bytes]]) -> list[bytes]:
    return [body for batch in batches for body in batch]


def everything(first: int = 0, last: int = N) -> list[bytes]:
    return [f"m{i}".encode() for i in range(first, last)]


@pytest.mark.parametrize("action", FAULTS)
def test_transient_fault_mid_range_resumes_at_the_last_yielded_batch(broker, part, client, action):
    rr = RangeReader(client, READ_GROUP, retry_s=5.0)
    started = time.monotonic()
    batches = read_with_fault_after_first_batch(rr, broker, part, method=Method.GET_MESSAGE, action=action, times=1)
    assert flat(batches) == everything(), "every message exactly once, in order"
    assert rr.resumes == 1
    # it registered again exactly at a batch boundary it had yielded
    seeks = [r.currOffset for r in broker.requests_of(Method.BROKER_REGISTER) if r.opType == 31]
    assert seeks == [0, 28 * BATCH]
    assert broker.holder(READ_GROUP, part) is None
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("action", FAULTS)
def test_several_faults_in_a_row_are_retried_with_backoff(broker, part, client, action):
    rr = RangeReader(client, READ_GROUP, retry_s=8.0)
    batches = read_with_fault_after_first_batch(rr, broker, part, method=Method.GET_MESSAGE, action=action, times=3)
    assert flat(batches) == everything()
    assert rr.resumes == 3


@pytest.mark.parametrize("action", FAULTS)
def test_persistent_fault_fails_naming_broker_partition_and_offsets(broker, part, client, action):
    retry_s = 1.5
    rr = RangeReader(client, READ_GROUP, retry_s=retry_s)
    got: list[list[bytes]] = []
    started = time.monotonic()

    def consume() -> None:
        for batch in rr.read_batches(part, 0, 28 * N):
            got.append([m.data for m in batch])
            if len(got) == 1:
                fault(broker, Method.GET_MESSAGE, action, times=None)

    with pytest.raises(RangeReadError) as error:
        consume()
    elapsed = time.monotonic() - started
    assert got == [everything(0, BATCH)], "what was yielded before the failure stays yielded, nothing more"
    exc = error.value
    text = str(exc)
    assert broker.address in text and part.key in text
    assert f"[0, {28 * N})" in text and f"below {28 * BATCH} was read ({BATCH} messages)" in text
    assert (exc.broker, exc.partition, exc.start, exc.end, exc.reached, exc.messages) == (
        broker.address, part.key, 0, 28 * N, 28 * BATCH, BATCH)
    assert exc.tries >= 2, "retried before giving up"
    assert exc.retriable and isinstance(exc.__cause__, BrokerConnectionError)
    # bounded: the budget, plus at most one request timeout in flight and the release of the registration
    assert elapsed < retry_s + 3 * REQUEST_TIMEOUT_S + 1.5


@pytest.mark.parametrize("action", FAULTS)
def test_the_read_recovers_when_the_broker_heals_within_the_budget(broker, part, client, action):
    rr = RangeReader(client, READ_GROUP, retry_s=8.0)
    healer = threading.Timer(1.2, broker.heal)
    batches: list[list[bytes]] = []
    try:
        for batch in rr.read_batches(part, 0, 28 * N):
            batches.append([m.data for m in batch])
            if len(batches) == 1:
                fault(broker, Method.GET_MESSAGE, action, times=None)
                healer.start()
    finally:
        healer.cancel()
    assert flat(batches) == everything()
    assert rr.resumes >= 1


@pytest.mark.parametrize("method", [Method.BROKER_REGISTER, Method.COMMIT_OFFSET])
def test_faults_on_register_and_commit_are_recovered(broker, part, client, method):
    fault(broker, method, "reset", times=1)
    rr = RangeReader(client, READ_GROUP, retry_s=5.0)
    assert flat([[m.data for m in b] for b in rr.read_batches(part, 0, 28 * N)]) == everything()


def test_a_broker_whose_rpc_server_is_not_running_yet_is_read_once_it_runs(broker, part, client):
    """A broker restarted under a running stream accepts connections before its RPC server runs, and answers
    ServerNotReadyException meanwhile (seen in the rolling soak): the read waits for it, as for any fault a
    retry can cure. Before, the read task failed at once and with it the query."""
    rr = RangeReader(client, READ_GROUP, retry_s=5.0)
    broker.not_ready(3)  # the register, then its two retries
    assert flat([[m.data for m in b] for b in rr.read_batches(part, 0, 28 * N)]) == everything()
    assert len(broker.requests_of(Method.BROKER_REGISTER)) >= 1


def test_fault_while_cutting_at_the_planned_end(broker, part, client):
    """The answer of the fetch of the batch straddling ``end`` ([8, 12) for end 10) is lost: still exact."""
    rr = RangeReader(client, READ_GROUP, retry_s=5.0)
    batches = read_with_fault_after_first_batch(rr, broker, part, method=Method.GET_MESSAGE, action="reset",
                                                times=1, end=28 * 10)
    assert flat(batches) == everything(0, 10)


def test_connections_cut_at_random_never_lose_or_double_a_message(broker, part, client):
    """A flaky network: the broker cuts every connection every few ms while a long range is read."""
    broker.batch_size = 3
    broker.append(part, *[f"m{i}".encode() for i in range(N, 200)])
    stop = threading.Event()

    def cutter() -> None:
        while not stop.wait(0.004):
            broker.drop_connections()

    thread = threading.Thread(target=cutter, daemon=True)
    thread.start()
    try:
        rr = RangeReader(client, READ_GROUP, retry_s=20.0)
        bodies = [m.data for m in rr.read(part, 0, 28 * 200)]
    finally:
        stop.set()
        thread.join(2)
    assert bodies == everything(0, 200)


def test_a_persistent_business_error_fails_as_a_range_read_error_naming_the_range(broker, part, client):
    """A busy broker is a retriable fault like a lost connection: after the budget the same error, the same
    text, with the broker's answer as the cause (before, it escaped as a bare ServerBusyError)."""
    broker.inject(Method.GET_MESSAGE, 500, times=1000)
    rr = RangeReader(client, READ_GROUP, retry_s=0.6)
    with pytest.raises(RangeReadError) as error:
        list(rr.read(part, 0, 28 * N))
    text = str(error.value)
    assert part.key in text and broker.address in text and f"[0, {28 * N})" in text and "ServerBusyError" in text
    assert isinstance(error.value.__cause__, ServerBusyError) and error.value.retriable


def test_an_unreachable_broker_fails_within_the_budget(part, client):
    from tests.doubles.fakepeer import closed_port_address

    host, port = closed_port_address().split(":")
    gone = PartitionRef(part.broker_id, part.topic, part.partition_id, host, int(port))
    rr = RangeReader(client, READ_GROUP, retry_s=1.0)
    started = time.monotonic()
    with pytest.raises(RangeReadError, match=rf"{gone.broker.address}.*\[0, 560\).*below 0 was read \(0 messages\)"):
        list(rr.read(gone, 0, 28 * N))
    assert time.monotonic() - started < 4


# --- the sink: bad input found before data moves, or naming the row ----------------------------------


def sink_options(master: str, **extra: str):
    from tubespark.tubemq.spark.options import TubeMQOptions

    return TubeMQOptions.from_raw({"master": master, "requestTimeoutMs": "1000", "connectTimeoutMs": "500",
                                   "sendRetries": "1", **extra}, mode="write")


def test_sink_preflight_refuses_an_unknown_topic_and_an_unreachable_master(broker):
    from tests.doubles.fakebroker import FakeMaster
    from tests.doubles.fakepeer import closed_port_address
    from tubespark.errors import UnknownTopicError
    from tubespark.tubemq.spark.writer import check_sink_reachable

    broker.add_topic("known_topic")
    with FakeMaster(broker) as master:
        check_sink_reachable(sink_options(master.address, topic="known_topic"))
        started = time.monotonic()
        with pytest.raises(UnknownTopicError, match="no_such_topic"):
            check_sink_reachable(sink_options(master.address, topic="no_such_topic"))
        assert time.monotonic() - started < 15
    with pytest.raises(BrokerConnectionError):
        check_sink_reachable(sink_options(closed_port_address(), topic="known_topic"))


def test_a_sink_made_while_the_topics_brokers_are_away_waits_for_them_and_a_missing_topic_fails_at_once(broker):
    """Issue 22 part 7, issue 23 part 8: the master lists no partition of a topic whose brokers are all down or
    restarting, as of a topic that is not deployed. Its configuration (``masterWebUrl``) tells them apart:
    a configured topic is waited for (``outageTimeoutMs``) and the sink is made once its broker serves again;
    a topic the configuration lacks fails at once with UnknownTopicError, as before."""
    from tests.doubles.fakebroker import FakeMaster
    from tests.doubles.fakeweb import FakeDeploy, FakeMasterWeb
    from tubespark.errors import BrokerUnavailableError, UnknownTopicError
    from tubespark.tubemq.spark.writer import TubeStreamWriter, check_sink_reachable

    with FakeMaster(broker) as master, FakeMasterWeb() as web:
        web.topics["restarting"] = [FakeDeploy(broker_id=broker.broker_id, running=False)]
        options = sink_options(master.address, topic="restarting", masterWebUrl=web.url, outageTimeoutMs="30000")
        with pytest.raises(BrokerUnavailableError, match="the master's configuration holds the topic"):
            check_sink_reachable(options)  # one try: the broker serves none of its partitions now
        threading.Timer(3.0, lambda: broker.add_topic("restarting")).start()  # the broker is back
        started = time.monotonic()
        TubeStreamWriter(options)  # what Spark makes for each micro-batch: waits for the broker
        assert 2.5 < time.monotonic() - started < 25
        started = time.monotonic()
        with pytest.raises(UnknownTopicError, match="never_deployed"):
            TubeStreamWriter(sink_options(master.address, topic="never_deployed", masterWebUrl=web.url))
        assert time.monotonic() - started < 15


def test_a_row_above_the_topics_max_size_fails_naming_row_size_and_limit(broker):
    import pyarrow as pa

    from tests.doubles.fakebroker import FakeMaster
    from tubespark.errors import MessageTooLargeError
    from tubespark.tubemq.spark import writer

    [ref] = broker.add_topic("small_topic")
    values = [b"ok-0", b"ok-1", b"x" * 600, b"never"]
    with FakeMaster(broker, max_msg_size=512) as master:
        options = sink_options(master.address, topic="small_topic")
        batches = iter([pa.RecordBatch.from_pydict({"value": values[:2]}),
                        pa.RecordBatch.from_pydict({"value": values[2:]})])
        try:
            with pytest.raises(MessageTooLargeError, match=r"row 2 of this task .*600 bytes.*maximum of 512"):
                writer.send_batches(batches, options, None)
        finally:
            for producer in writer._producers.values():
                producer.close()
            writer._producers.clear()
    assert broker.bodies(ref) == [b"ok-0", b"ok-1"], "rows before the bad one were acknowledged and stay"
