"""Issue 37 parts 4 and 6 for TANK (the ``broker`` option is the only endpoint): a broker address that never
answered in this process fails within seconds, typed and naming ``broker``, for a write and a new stream; one
seen alive that goes down is waited for (``outageTimeoutMs``), by the driver's check, by a write task the driver
vouched for, by a new stream, and by a stream restarted on its checkpoint. Bounds are 3x the 10 s goal."""

from __future__ import annotations

import pickle
import threading
import time

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from tests.doubles.fakepeer import closed_port_address
from tests.doubles.tank_broker import TankBroker
from tests.readers import TankStreamReader
from tubespark.core.outage import forget_all
from tubespark.errors import NeverAnsweredError
from tubespark.tank.spark.options import TankOptions
from tubespark.tank.spark.writer import TankBatchWriter, TankStreamWriter

GOAL_S = 10.0
BOUND_S = 3 * GOAL_S


def options(address: str, mode: str, **extra: str) -> TankOptions:
    raw = {"broker": address, "topic": "events", "connectTimeoutMs": "1000", "requestTimeoutMs": "1000", **extra}
    return TankOptions.from_raw(raw, mode=mode)


@pytest.fixture
def broker():
    with TankBroker({"events": 2}) as fake:
        yield fake


def back_after(broker: TankBroker, seconds: float) -> None:
    broker.stop()
    threading.Timer(seconds, broker.start).start()


@pytest.mark.parametrize("writer", [TankBatchWriter, TankStreamWriter], ids=["batch", "stream"])
def test_a_write_to_a_broker_address_that_never_answered_fails_within_seconds_naming_the_broker_option(writer):
    """The defect: the README's default address with nothing there waited 15 minutes (here 60 s, to keep the
    old behaviour's failure short) before failing."""
    address = closed_port_address()
    started = time.monotonic()
    with pytest.raises(NeverAnsweredError, match=rf"TANK broker at {address} \(option `broker`\) never answered.*"
                                                 r"check the `broker` option") as caught:
        writer(options(address, "write", outageTimeoutMs="60000"))
    assert time.monotonic() - started < BOUND_S
    assert caught.value.option == "broker"


def test_a_write_task_rides_an_outage_of_a_broker_its_driver_saw(broker):
    """The driver's check saw the broker; the task runs in another process (nothing seen there) and meets the
    broker down: it waits for it, as it would in the driver's process, and the rows land."""
    driver_writer = TankBatchWriter(options(broker.address, "write", outageTimeoutMs="30000"))
    task_writer = pickle.loads(pickle.dumps(driver_writer))
    forget_all()  # the executor's own process
    back_after(broker, 2.0)
    started = time.monotonic()
    sent = task_writer.write(iter([pa.record_batch({"value": [b"a", b"b"], "partition": [0, 0]})]))
    assert sent.rows == 2 and time.monotonic() - started >= 1.5
    assert broker.high_water_mark("events", 0) == 2


def test_the_driver_check_rides_an_outage_of_a_broker_this_process_saw(broker):
    opts = options(broker.address, "write", outageTimeoutMs="30000")
    TankStreamWriter(opts)  # an earlier micro-batch: the broker answered
    back_after(broker, 2.0)
    started = time.monotonic()
    TankStreamWriter(opts)
    assert 1.5 <= time.monotonic() - started < BOUND_S


def test_a_new_stream_on_a_broker_address_that_never_answered_fails_within_seconds_naming_the_broker_option():
    """Part 6's TANK case: a brand-new query's first trigger (initialOffset) on a dead address."""
    reader = TankStreamReader(options(closed_port_address(), "read", outageTimeoutMs="60000"))
    started = time.monotonic()
    with pytest.raises(NeverAnsweredError, match=r"\(option `broker`\) never answered"):
        reader.initialOffset()
    assert time.monotonic() - started < BOUND_S


def test_a_new_stream_whose_broker_this_process_saw_waits_for_it_at_its_first_trigger(broker):
    """Part 6: the stream used to die in initialOffset with BrokerConnectionError; it now waits, as a running
    stream does, for a broker known to be there."""
    opts = options(broker.address, "read", outageTimeoutMs="30000", startingOffsets="earliest")
    earlier = TankStreamReader(opts).initialOffset()  # an earlier query of this driver saw the broker
    reader = TankStreamReader(opts)
    back_after(broker, 2.0)
    started = time.monotonic()
    assert reader.initialOffset() == earlier
    assert 1.5 <= time.monotonic() - started < BOUND_S
    reader.broker.close()


def test_a_stream_restarted_on_its_checkpoint_while_its_broker_is_down_waits_for_it(broker):
    """Spark asks latestOffset with the checkpoint's offsets (never initialOffset): they are evidence the broker
    served this query, so a restarted driver that never saw it plans nothing and goes on, then reads on."""
    opts = options(broker.address, "read", outageTimeoutMs="60000", startingOffsets="earliest")
    checkpoint = TankStreamReader(opts).initialOffset()  # the query's first run
    forget_all()  # its restart: a new driver process
    broker.stop()
    reader = TankStreamReader(opts)
    started = time.monotonic()
    assert reader.latestOffset(checkpoint, ReadAllAvailable()) == checkpoint
    assert time.monotonic() - started < BOUND_S
    broker.start()
    TankBatchWriter(options(broker.address, "write")).write(iter([pa.record_batch({"value": [b"x"],
                                                                                  "partition": [1]})]))
    assert reader.latestOffset(checkpoint, ReadAllAvailable())["events:1"] == checkpoint["events:1"] + 1
    reader.broker.close()


def test_a_batch_read_of_a_broker_address_that_never_answered_fails_within_seconds_naming_the_broker_option():
    from tests.readers import TankBatchReader

    started = time.monotonic()
    with pytest.raises(NeverAnsweredError, match=r"\(option `broker`\) never answered"):
        TankBatchReader(options(closed_port_address(), "read")).partitions()
    assert time.monotonic() - started < BOUND_S


def test_a_batch_read_task_rides_an_outage_of_the_broker_its_driver_planned_it_on(broker):
    """A read task exists only because its driver saw the broker (or a checkpoint): it waits in any process."""
    from tests.readers import TankBatchReader

    TankBatchWriter(options(broker.address, "write")).write(iter([pa.record_batch({"value": [b"a", b"b"],
                                                                                    "partition": [0, 0]})]))
    opts = options(broker.address, "read", outageTimeoutMs="30000", startingOffsets="earliest")
    plan = TankBatchReader(opts).partitions()
    reader = pickle.loads(pickle.dumps(TankBatchReader(opts)))
    forget_all()  # the executor's own process
    back_after(broker, 2.0)
    started = time.monotonic()
    rows = [v for task in plan for batch in reader.read(task) for v in batch.column("value").to_pylist()]
    assert rows == [b"a", b"b"] and time.monotonic() - started >= 1.5


@pytest.mark.parametrize("committed", [False, True], ids=["new-query", "checkpoint-with-commits"])
def test_a_sink_streams_checkpoint_with_commits_is_evidence_its_broker_answered(tmp_path, committed):
    """A sink stream's driver check in a process that saw nothing (Spark replaced its Python worker): with a
    checkpoint that holds a committed batch, the query wrote through ``broker`` before, so a down broker is waited
    for (here a short outageTimeoutMs); a new query's checkpoint has no commit, so the address fails fast."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from tubespark.errors import BrokerUnavailableError
    from tubespark.tank.spark.source import TankDataSource

    (tmp_path / "commits").mkdir()
    if committed:
        (tmp_path / "commits" / "0").write_text("v1\n{}")
    source = TankDataSource({"broker": closed_port_address(), "topic": "events", "connectTimeoutMs": "1000",
                             "outageTimeoutMs": "6000", "checkpointLocation": str(tmp_path)})
    schema = StructType([StructField("value", BinaryType())])
    started = time.monotonic()
    expected = BrokerUnavailableError if committed else NeverAnsweredError
    with pytest.raises(expected):
        source.streamWriter(schema, False)
    waited = time.monotonic() - started
    assert (waited >= 5.5) if committed else (waited < BOUND_S)


def test_an_available_now_run_on_a_broker_address_that_never_answered_fails_within_seconds_naming_broker():
    """Spark asks an AvailableNow query for its target before its start: the same rule (the shared engine)."""
    reader = TankStreamReader(options(closed_port_address(), "read", outageTimeoutMs="60000"))
    started = time.monotonic()
    with pytest.raises(NeverAnsweredError, match=r"\(option `broker`\) never answered"):
        reader.prepareForTriggerAvailableNow()
    assert time.monotonic() - started < BOUND_S


@pytest.fixture
def silent_address():
    """A port that accepts connections (the kernel completes them from the backlog) and never says a word: another
    service, or a proxy in front of nothing. A TANK broker greets every connection with a Ping."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def test_a_batch_read_of_an_address_that_accepts_but_never_greets_fails_naming_the_broker_option(silent_address):
    """Issue 39: a TANK read of such an address said PartitionsUnavailableError ("TANK broker ... does not answer;
    set onUnavailablePartitions=skip"), naming no option, where TubeMQ and RocketMQ name `master` and `namesrv`."""
    from tests.readers import TankBatchReader

    started = time.monotonic()
    with pytest.raises(NeverAnsweredError, match=rf"TANK broker at {silent_address} \(option `broker`\) never answered"
                                                 r".*sent no Ping.*check the `broker` option") as caught:
        TankBatchReader(options(silent_address, "read")).partitions()
    assert time.monotonic() - started < BOUND_S
    assert caught.value.option == "broker"


def test_a_new_stream_on_an_address_that_accepts_but_never_greets_fails_within_seconds_naming_broker(silent_address):
    """The same address for a new stream waited outageTimeoutMs (here 40 s) and then named no option."""
    reader = TankStreamReader(options(silent_address, "read", outageTimeoutMs="40000"))
    started = time.monotonic()
    with pytest.raises(NeverAnsweredError, match=r"\(option `broker`\) never answered"):
        reader.initialOffset()
    assert time.monotonic() - started < BOUND_S
