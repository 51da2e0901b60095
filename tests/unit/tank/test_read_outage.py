"""A TANK read task whose broker goes down mid-range waits for it (``outageTimeoutMs``, issue 23 parts 2 and 8),
the same rule as TubeMQ's (tubespark/core/outage.py ``read_through_outage``; tests/unit/tubemq/test_read_outage.py).

The broker is the documented TANK double behind the testbed's fault proxy: "down" is the proxy stopped, "back"
a new proxy on the same port.
"""

from __future__ import annotations

import pickle
import threading
import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from tubespark_testbed.faultproxy import FaultProxy

from tests.doubles.tank_broker import TankBroker
from tests.readers import TankStreamReader
from tubespark.core.deferred import Deferral, DeferredRanges
from tubespark.errors import BrokerUnavailableError
from tubespark.tank.spark.options import TankOptions
from tubespark.tank.spark.read_task import SeqRange, read_range
from tubespark.tank.wire.bundle import encode_bundle

REQUEST_TIMEOUT_MS = 300
OLD_BUDGET_S = 6 * REQUEST_TIMEOUT_MS / 1000
BUNDLES, PER_BUNDLE = 20, 5


def options(address: str, outage_ms: int) -> TankOptions:
    return TankOptions.from_raw({"broker": address, "topic": "events", "requestTimeoutMs": str(REQUEST_TIMEOUT_MS),
                                 "connectTimeoutMs": "300", "fetchSizeBytes": "64",
                                 "outageTimeoutMs": str(outage_ms)}, mode="read")


@pytest.mark.parametrize("comes_back", [True, False])
def test_a_tank_read_waits_for_its_broker_then_reads_on_or_fails_retriably(comes_back: bool) -> None:
    with TankBroker({"events": 1}) as broker:
        values = []
        for b in range(BUNDLES):
            batch = [b"v%04d" % (b * PER_BUNDLE + i) for i in range(PER_BUNDLE)]
            broker.append_bundle("events", 0, encode_bundle(batch, [1000 + i for i in range(PER_BUNDLE)]))
            values += batch
        proxy = FaultProxy(broker.address).start()
        port = int(proxy.address.rsplit(":", 1)[1])
        holder = {"proxy": proxy}

        def back() -> None:
            holder["proxy"] = FaultProxy(broker.address, port=port).start()

        timer = threading.Timer(2 * OLD_BUDGET_S + 0.5, back)
        task = SeqRange(proxy.address, "events", 0, 0, BUNDLES * PER_BUNDLE + 1)  # numbers start at 1
        got: list[bytes] = []
        started = time.monotonic()
        try:
            reading = read_range(task, options(proxy.address, 20_000 if comes_back else 2_500))
            if comes_back:
                for batch in reading:
                    got += batch.column("value").to_pylist()
                    if got and not timer.is_alive() and holder["proxy"] is proxy:  # once, after the first batch
                        proxy.stop()
                        timer.start()
                assert got == values, "every message once, in order"
                assert time.monotonic() - started >= 2 * OLD_BUDGET_S
            else:
                def consume() -> None:
                    for batch in reading:
                        got.extend(batch.column("value").to_pylist())
                        proxy.stop()

                with pytest.raises(BrokerUnavailableError, match=r"read of partition events:0 \[0, 101\) from broker"):
                    consume()
                assert 2.5 <= time.monotonic() - started < 2.5 + OLD_BUDGET_S + 2
                assert 0 < len(got) < len(values)
        finally:
            timer.cancel()
            if timer.is_alive():
                timer.join(5)
            holder["proxy"].stop()
            proxy.stop()


# --- a stream leaves the rest of a down broker's range to the next batch (tubespark/core/deferred.py) ----------

DEFER_TIMEOUT_MS = 50
"""A stream's task gives up on its broker after one reader try: 6 x this (0.3 s) here."""
STEADY_TIMEOUT_MS = 5_000
"""For reads that must not defer: 50 ms is shorter than a busy machine may take to answer (a unit run at load 9
deferred part of a whole read)."""


def stream_reader(address: str, reports: str | None, outage_ms: int = 10_000,
                  timeout_ms: int = DEFER_TIMEOUT_MS) -> TankStreamReader:
    raw = {"broker": address, "topic": "events", "startingOffsets": "earliest", "fetchSizeBytes": "64",
           "requestTimeoutMs": str(timeout_ms), "connectTimeoutMs": str(timeout_ms),
           "outageTimeoutMs": str(outage_ms)}
    if reports is not None:
        raw["deferredRangesPath"] = reports
    return TankStreamReader(TankOptions.from_raw(raw, mode="read"))


def seed(broker: TankBroker) -> list[bytes]:
    values = []
    for b in range(BUNDLES):
        batch = [b"v%04d" % (b * PER_BUNDLE + i) for i in range(PER_BUNDLE)]
        broker.append_bundle("events", 0, encode_bundle(batch, [1000 + i for i in range(PER_BUNDLE)]))
        values += batch
    return values


def read_until_down(executor: TankStreamReader, task: SeqRange, broker: TankBroker) -> list[bytes]:
    """The task's rows, the broker stopped (port closed, data kept) after the first batch."""
    got: list[bytes] = []
    for batch in executor.read(task):
        got += batch.column("value").to_pylist()
        broker.stop()
    return got


def test_a_stream_task_on_a_down_broker_returns_its_rows_and_the_next_batches_read_the_rest_once(tmp_path):
    """Fails before the change: the task waited for its broker (BrokerUnavailableError after outageTimeoutMs)
    and the engine, without a report, never moved the offset back."""
    with TankBroker({"events": 1}) as broker:
        values = seed(broker)
        reader = stream_reader(broker.address, str(tmp_path))
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        (task,) = reader.partitions(start, end)
        assert isinstance(task, SeqRange) and task.defer is not None, "a stream's task carries where to report"
        executor = pickle.loads(pickle.dumps(reader))  # what Spark ships: options and task state only
        began = time.monotonic()
        first = read_until_down(executor, pickle.loads(pickle.dumps(task)), broker)
        assert time.monotonic() - began < 5, "one short try (0.3 s), not the outage wait (10 s)"
        assert 0 < len(first) < len(values) and first == values[:len(first)]
        reached = 1 + len(first)  # numbers start at 1
        assert DeferredRanges(*task.defer[:2]).take({"events:0": task.end}) == {
            "events:0": Deferral("events:0", task.start, task.end, reached)}

        down = reader.latestOffset(end, ReadAllAvailable())  # the broker is still down
        moved = {key: value for key, value in down.items() if "#last@" not in key}
        assert moved == {"events:0": reached, "events:0#from": reached, "#deferrals": end["#deferrals"]}, \
            "moved back, with where it starts"
        assert reader.partitions(end, down) == [], "nothing to read while the broker is down"
        broker.start()
        back = reader.latestOffset(down, ReadAllAvailable())
        (rest,) = reader.partitions(down, back)
        assert (rest.start, rest.end) == (reached, task.end)
        executor = stream_reader(broker.address, str(tmp_path), timeout_ms=STEADY_TIMEOUT_MS)
        assert [v for batch in executor.read(rest) for v in batch.column("value").to_pylist()] == values[len(first):]
        assert reader.latestOffset(back, ReadAllAvailable()) == back, "nothing read twice"
        reader.stop()


def test_without_a_reports_directory_a_tank_stream_task_waits_for_its_broker(tmp_path):
    """TANK has no group to key shared reports by: only a deferredRangesPath set for the query makes tasks defer."""
    with TankBroker({"events": 1}) as broker:
        seed(broker)
        reader = stream_reader(broker.address, None, outage_ms=500)
        start = reader.initialOffset()
        (task,) = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
        assert task.defer is None
        with pytest.raises(BrokerUnavailableError, match="outageTimeoutMs"):
            read_until_down(reader, task, broker)
        reader.stop()


def test_a_tank_stream_task_that_reads_everything_clears_an_earlier_attempts_report(tmp_path):
    with TankBroker({"events": 1}) as broker:
        values = seed(broker)
        reader = stream_reader(broker.address, str(tmp_path), timeout_ms=STEADY_TIMEOUT_MS)
        start = reader.initialOffset()
        (task,) = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
        reports = DeferredRanges(*task.defer[:2])
        reports.record(Deferral(task.key, task.start, task.end, 11))
        assert sum(batch.num_rows for batch in reader.read(task)) == len(values)
        assert reports.take({task.key: task.end}) == {}, "a replayed batch that read it all leaves no remainder"
        reader.stop()
