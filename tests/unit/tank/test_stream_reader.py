"""The ``tank`` stream reader on the shared engine, against the TANK double (tests/doubles/tank_broker.py:
no TANK artifact can be had from this machine's registries, so the double speaks the real wire protocol)."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from tests.doubles.tank_broker import TankBroker
from tests.readers import TankStreamReader
from tubespark.errors import DataLossError
from tubespark.tank.spark.options import TankOptions
from tubespark.tank.wire.bundle import encode_bundle


@pytest.fixture
def broker():
    with TankBroker({"events": 2}) as double:
        yield double


def fill(broker: TankBroker, partition: int, count: int, *, base: int | None = None) -> None:
    broker.append_bundle("events", partition, encode_bundle([b"v%d" % i for i in range(count)], [1] * count),
                         base)


def make_reader(broker: TankBroker, **options: str) -> TankStreamReader:
    raw = {"broker": broker.address, "topic": "events", "startingOffsets": "earliest", "connectTimeoutMs": "500",
           "requestTimeoutMs": "1000", **options}
    return TankStreamReader(TankOptions.from_raw(raw, mode="read"))


def rows(reader: TankStreamReader, start: dict[str, int], end: dict[str, int]) -> int:
    return sum(batch.num_rows for task in reader.partitions(start, end) for batch in reader.read(task))


def test_a_broker_restart_does_not_stop_the_stream(broker: TankBroker) -> None:
    fill(broker, 0, 3)
    reader = make_reader(broker)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert rows(reader, start, end) == 3
    broker.stop()
    assert reader.latestOffset(end, ReadAllAvailable()) == end  # no data this trigger, and no error
    broker.start()
    fill(broker, 0, 2)
    end2 = reader.latestOffset(end, ReadAllAvailable())
    assert rows(reader, end, end2) == 2
    reader.stop()


def test_numbers_removed_by_retention_are_data_loss(broker: TankBroker) -> None:
    fill(broker, 0, 5)
    fill(broker, 0, 5)
    reader = make_reader(broker)
    start = reader.initialOffset()
    broker.drop_before("events", 0, 6)
    with pytest.raises(DataLossError, match=r"events:0: retention removed numbers this query had not read "
                                            r"\(query at 1, broker at 6\)"):
        reader.latestOffset(start, ReadAllAvailable())
    lenient = make_reader(broker, failOnDataLoss="false")
    end = lenient.latestOffset(start, ReadAllAvailable())
    assert rows(lenient, start, end) == 5
    assert [(loss.key, loss.offset, loss.resumes_at) for loss in lenient.data_losses] == [("events:0", 1, 6)]


def test_numbers_a_producer_never_wrote_are_no_loss(broker: TankBroker) -> None:
    reader = make_reader(broker)
    start = reader.initialOffset()  # both partitions empty
    fill(broker, 1, 2, base=50)  # ProduceWithSeqnum: the producer chose its numbers
    end = reader.latestOffset(start, ReadAllAvailable())
    assert rows(reader, start, end) == 2 and reader.data_losses == []


def test_a_replayed_first_batch_reads_what_the_killed_run_planned(broker: TankBroker) -> None:
    fill(broker, 0, 4)
    first = make_reader(broker, startingOffsets="latest")
    start = first.initialOffset()
    fill(broker, 0, 3)
    end = first.latestOffset(start, ReadAllAvailable())
    # Spark replays batch 0 after a crash with a new process's initialOffset(), which "latest" moved on:
    fill(broker, 0, 5)
    replay = make_reader(broker, startingOffsets="latest")
    assert rows(replay, replay.initialOffset(), end) == 3  # the batch's own #from marks win


def test_numbers_a_broker_lost_and_gave_again_are_data_loss_after_a_restart(broker: TankBroker) -> None:
    """Issue 23 part 3 on TANK: the partition was refilled past the query's position before the query restarted
    from its checkpoint; the #last fingerprint (offset, timestamp, key, value of the last message read) differs."""
    broker.append_bundle("events", 0, encode_bundle([b"a1", b"a2"], [1, 1]))
    broker.append_bundle("events", 0, encode_bundle([b"a3", b"a4", b"a5"], [1, 1, 1]))
    reader = make_reader(broker)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end["events:0"] == 6 and "events:0#last" in end
    reader.stop()
    broker.lose_after("events", 0, 2)  # numbers 3-5 lost ...
    broker.append_bundle("events", 0, encode_bundle([b"b3", b"b4", b"b5", b"b6"], [2, 2, 2, 2]))  # ... and given again
    restarted = make_reader(broker)
    with pytest.raises(DataLossError, match=r"events:0: offsets this query read were reused.*failOnDataLoss=false "
                                            r"reads on from offset 1, where this query began reading the partition"):
        restarted.latestOffset(end, ReadAllAvailable())
    resuming = make_reader(broker, failOnDataLoss="false")  # read in one batch: only where it began is known
    after = resuming.latestOffset(end, ReadAllAvailable())
    assert (after["events:0"], after["events:0#from"]) == (7, 1) and rows(resuming, end, after) == 6
    healthy = make_reader(broker)  # a restart on an untouched partition reads on without a word
    fill(broker, 1, 2)
    assert healthy.latestOffset({**after, "events:1": 1}, ReadAllAvailable())["events:1"] == 3
    for each in (restarted, resuming, healthy):
        each.stop()


def test_numbers_given_again_after_a_loss_are_read_with_fail_on_data_loss_false(broker: TankBroker) -> None:
    """Issue 37 part 5 on TANK (the engine's own fingerprints, read through the executors' read path): the query
    read a1..a5 one a trigger; the broker lost 3-5 and wrote b3..b6 at those numbers before the query restarted.
    It resumes at 3, the highest batch end whose message the broker still holds, and reads b3..b6, none skipped."""
    broker.append_bundle("events", 0, encode_bundle([b"a1", b"a2"], [1, 1]))
    broker.append_bundle("events", 0, encode_bundle([b"a3", b"a4", b"a5"], [1, 1, 1]))
    reader = make_reader(broker, failOnDataLoss="false")
    end = reader.initialOffset()
    for _ in range(5):
        end = reader.latestOffset(end, ReadMaxRows(1))
    assert end["events:0"] == 6
    reader.stop()
    broker.lose_after("events", 0, 2)
    broker.append_bundle("events", 0, encode_bundle([b"b3", b"b4", b"b5", b"b6"], [2, 2, 2, 2]))
    restarted = make_reader(broker, failOnDataLoss="false")
    after = restarted.latestOffset(end, ReadAllAvailable())
    assert (after["events:0"], after["events:0#from"]) == (7, 3)
    values = [row["value"] for task in restarted.partitions(end, after) for batch in restarted.read(task)
              for row in batch.to_pylist()]
    assert values == [b"b3", b"b4", b"b5", b"b6"]
    assert [(loss.key, loss.offset, loss.resumes_at) for loss in restarted.data_losses] == [("events:0", 6, 3)]
    restarted.stop()


def test_a_partition_resumed_below_its_checkpoint_reads_what_comes_after_a_restart(broker: TankBroker) -> None:
    """failOnDataLoss=false resumes a partition whose broker lost numbers at the broker's new end, below the
    checkpoint: the batch end carries a #last mark of the message below the new position, not the lost one's,
    so a query restarted there reads every message written since (integration: test_faults_driver's
    test_broker_losing_acknowledged_messages_is_detected, which skipped them all before)."""
    broker.append_bundle("events", 0, encode_bundle([b"a1", b"a2"], [1, 1]))
    broker.append_bundle("events", 0, encode_bundle([b"a3", b"a4", b"a5"], [1, 1, 1]))
    end = make_reader(broker).latestOffset({"events:0": 1, "events:1": 1}, ReadAllAvailable())
    assert end["events:0"] == 6
    broker.lose_after("events", 0, 2)  # numbers 3-5 lost
    skipping = make_reader(broker, failOnDataLoss="false")
    resumed = skipping.latestOffset(end, ReadAllAvailable())
    assert resumed["events:0"] == 3
    skipping.stop()
    broker.append_bundle("events", 0, encode_bundle([b"b3", b"b4"], [2, 2]))  # written after the resumption
    restarted = make_reader(broker, failOnDataLoss="false")
    after = restarted.latestOffset(resumed, ReadAllAvailable())
    assert after["events:0"] == 5 and rows(restarted, resumed, after) == 2
    restarted.stop()


@pytest.mark.parametrize("empty_first", [0, 1], ids=["v4-broker", "first-is-1"])
def test_an_empty_partition_reads_from_its_first_message_whichever_first_number_it_reports(
        broker: TankBroker, monkeypatch: pytest.MonkeyPatch, empty_first: int) -> None:
    # a live v4 broker answers first available 0 and high-water mark 0 for a partition that never held a message;
    # the protocol's numbering starts at 1, so a reader must take both answers for the same empty partition
    import tests.doubles.tank_broker as double

    real = double._Partition.reported_first
    monkeypatch.setattr(double._Partition, "reported_first",
                        property(lambda part: empty_first if real.fget(part) == 0 else real.fget(part)))
    reader = make_reader(broker)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    fill(broker, 0, 3)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert rows(reader, start, end) == 3
    reader.stop()
