"""A TubeMQ read task hands Spark one Arrow batch per few fetches: the same rows, fewer and larger batches.

Each batch costs PySpark's hand-over and our Arrow building whatever its rows (docs/performance/breakdown.md),
and a fetch holds a few hundred rows; so the task joins consecutive fetches up to ``BATCH_ROWS`` rows or
``BATCH_BYTES`` value bytes, never a row past the planned end, and hands over what it holds when the range ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from tests.doubles.fakebroker import FakeBroker
from tubespark.tubemq.spark import read_task
from tubespark.tubemq.spark.adapter import QueueRange, read_range
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.schema import arrow_schema, fetches_record_batch, to_record_batch, value_bytes
from tubespark.tubemq.wire import twin
from tubespark.tubemq.wire.fetch import Columns, PackedColumns, ValueArena
from tubespark.tubemq.wire.message import OutgoingMessage

FETCH = 7  # messages per fetch of the fake broker
MESSAGES = 40


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker(batch_size=FETCH) as fake:
        [ref] = fake.add_topic("batches")
        # three producers' attribute texts, in runs that cross fetch boundaries, then messages without any
        fake.append(ref, *(OutgoingMessage(b"v%d" % k, msg_type=f"s{k // 9 % 3}", msg_time=f"2024010215{30 + k // 9}",
                                           attributes={"k": str(k // 9)}) for k in range(MESSAGES - 5)),
                    *(b"plain %d" % k for k in range(5)))
        yield fake


def _task(broker: FakeBroker, end: int) -> QueueRange:
    return QueueRange(broker.broker_id, broker.host, broker.port, "batches", 0, 0, end, "batches_reader",
                      "batches_client")


def _batches(broker: FakeBroker, end: int, attributes: bool = True) -> list[pa.RecordBatch]:
    options = TubeMQOptions.from_raw({"master": "127.0.0.1:1", "topic": "batches",
                                      "includeAttributes": str(attributes).lower()}, mode="read")
    return list(read_range(_task(broker, end), options))


def _rows(batches: list[pa.RecordBatch]) -> list[dict]:
    return [row for batch in batches for row in batch.to_pylist()]


@pytest.mark.parametrize("attributes", [True, False])
@pytest.mark.parametrize("compiled", [True, False])
def test_the_fetches_of_a_range_arrive_in_one_batch_with_the_rows_of_a_batch_per_fetch(
        broker: FakeBroker, monkeypatch: pytest.MonkeyPatch, attributes: bool, compiled: bool) -> None:
    end = 28 * (MESSAGES - 3) - 5  # inside the last fetch, unaligned: the rows stop below it
    if not compiled:
        monkeypatch.setattr(twin, "native", lambda: None)
    joined = _batches(broker, end, attributes)
    with monkeypatch.context() as per_fetch:
        per_fetch.setattr(read_task, "BATCH_ROWS", 1)
        single = _batches(broker, end, attributes)
    assert len(single) == 6 and [b.num_rows for b in joined] == [MESSAGES - 3]
    assert _rows(joined) == _rows(single)
    assert [r["offset"] for r in _rows(joined)] == [28 * k for k in range(MESSAGES - 3)]
    assert all(batch.schema == arrow_schema(attributes) for batch in joined)


def test_a_batch_holds_at_most_batch_rows(broker: FakeBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read_task, "BATCH_ROWS", 20)  # two fetches of 7 fit, a third would not
    batches = _batches(broker, 28 * MESSAGES)
    assert [b.num_rows for b in batches] == [14, 14, 12]
    assert [r["value"] for r in _rows(batches)][-1] == b"plain 4"


def test_a_batch_holds_at_most_batch_bytes(broker: FakeBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read_task, "BATCH_BYTES", 20)  # the first three fetches' values: 14, 18 and 21 bytes
    batches = _batches(broker, 28 * 21)
    assert [b.num_rows for b in batches] == [7, 7, 7]  # no two fetches fit


def _parts(broker: FakeBroker, arena: ValueArena | None) -> list[Columns]:
    from tubespark.tubemq.client.broker import BrokerClient
    from tubespark.tubemq.client.ranges import RangeReader

    client = BrokerClient("batches_client")
    try:
        return list(RangeReader(client, "batches_direct", arena=arena).read_columns(broker.ref("batches"), 0,
                                                                                     28 * MESSAGES))
    finally:
        client.close()


def test_joined_fetches_keep_each_fetchs_attributes(broker: FakeBroker) -> None:
    """The compiled twin's buffers of six fetches (each with its own attribute texts: uniform, mixed, none), their
    values one after the other in the reader's arena, give the batch the per-fetch batches give; so does a mix
    with the pure-Python twin's lists."""
    parts = _parts(broker, ValueArena(1 << 20))
    assert len(parts) == 6
    schema = arrow_schema(True)
    where = {"topic": "batches", "partition_key": "1:batches:0", "broker_id": 1, "partition_id": 0, "schema": schema}
    expected = pa.Table.from_batches([to_record_batch(p, **where) for p in parts]).to_pylist()
    assert fetches_record_batch(parts, **where).to_pylist() == expected
    mixed = [p.unpacked if k == 1 and isinstance(p, PackedColumns) else p for k, p in enumerate(parts)]
    assert fetches_record_batch(mixed, **where).to_pylist() == expected
    assert sum(value_bytes(p) for p in parts) == sum(len(r["value"]) for r in expected)
    assert value_bytes(parts[0].head(0)) == 0  # type: ignore[union-attr]
    if twin.loaded() is not None:  # one values buffer for the batch: the arena's, not a copy
        batch = fetches_record_batch(parts, **where)
        assert batch.column(0).buffers()[2].address == pa.py_buffer(parts[0].value_buffer).address  # type: ignore[union-attr]


def test_fetches_with_values_of_their_own_are_not_joined(broker: FakeBroker) -> None:
    """Without an arena each fetch's values have a buffer of their own: joining them would cost a copy, so the
    batch refuses, and a read task hands such fetches over one by one (``_joins``)."""
    parts = _parts(broker, None)
    if twin.loaded() is None:
        return  # lists: the pure-Python twin joins them
    with pytest.raises(ValueError, match="must follow each other"):
        fetches_record_batch(parts[:2], topic="batches", partition_key="1:batches:0", broker_id=1, partition_id=0,
                             schema=arrow_schema(False))
    assert not read_task._joins(parts[0], parts[1])


def test_rows_read_before_the_partition_vanished_are_handed_over(broker: FakeBroker,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With failOnDataLoss=false a partition that vanishes mid-read keeps the rows read before (a batch per fetch
    handed them over as they came); the fetches held for the next batch must not be dropped."""
    from tubespark.errors import UnknownTopicError
    from tubespark.tubemq.client.ranges import RangeReader

    read_columns = RangeReader.read_columns

    def vanishing(self: RangeReader, part, start: int, end: int):  # type: ignore[no-untyped-def]
        for k, columns in enumerate(read_columns(self, part, start, end)):
            if k == 3:
                raise UnknownTopicError(404, "topic batches was deleted")
            yield columns

    monkeypatch.setattr(RangeReader, "read_columns", vanishing)
    options = TubeMQOptions.from_raw({"master": "127.0.0.1:1", "topic": "batches", "failOnDataLoss": "false"},
                                     mode="read")
    rows = _rows(list(read_range(_task(broker, 28 * MESSAGES), options)))
    assert [r["offset"] for r in rows] == [28 * k for k in range(3 * FETCH)]
