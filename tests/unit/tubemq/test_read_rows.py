"""The rows a TubeMQ read hands to Spark: one Arrow batch per fetch, built column by column."""

from __future__ import annotations

import datetime as dt

from tubespark.tubemq.spark.schema import arrow_schema, to_record_batch
from tubespark.tubemq.wire.message import OutgoingMessage, checksum, decode_columns
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb


def fetched(*messages: OutgoingMessage):
    out = []
    for k, message in enumerate(messages):
        payload, flag = message.encode()
        out.append(bpb.TransferedMessage(messageId=k, checkSum=checksum(payload), payLoadData=payload, flag=flag))
    return decode_columns(out, 280, step=28)


def test_each_row_carries_its_message_and_the_fetchs_partition():
    columns = fetched(OutgoingMessage(b"a", msg_type="s1", msg_time="202401021530", attributes={"k": "v"}),
                      OutgoingMessage(b"b"),
                      OutgoingMessage(b"c", msg_time="202401021531"))
    batch = to_record_batch(columns, topic="t", partition_key="7:t:3", broker_id=7, partition_id=3,
                            schema=arrow_schema(True))
    assert batch.schema == arrow_schema(True)
    utc = dt.UTC
    assert batch.to_pylist() == [
        {"value": b"a", "topic": "t", "partitionKey": "7:t:3", "brokerId": 7, "partitionId": 3, "offset": 280,
         "msgTime": dt.datetime(2024, 1, 2, 15, 30, tzinfo=utc), "streamId": "s1", "attributes": [("k", "v")]},
        {"value": b"b", "topic": "t", "partitionKey": "7:t:3", "brokerId": 7, "partitionId": 3, "offset": 308,
         "msgTime": None, "streamId": None, "attributes": []},
        {"value": b"c", "topic": "t", "partitionKey": "7:t:3", "brokerId": 7, "partitionId": 3, "offset": 336,
         "msgTime": dt.datetime(2024, 1, 2, 15, 31, tzinfo=utc), "streamId": None, "attributes": []},
    ]


def test_without_attributes_the_batch_has_the_eight_columns():
    batch = to_record_batch(fetched(OutgoingMessage(b"x", attributes={"k": "v"})), topic="t", partition_key="1:t:0",
                            broker_id=1, partition_id=0, schema=arrow_schema(False))
    assert batch.schema.names == ["value", "topic", "partitionKey", "brokerId", "partitionId", "offset", "msgTime",
                                  "streamId"]
    assert batch.num_rows == 1


def test_an_empty_fetch_gives_an_empty_batch():
    batch = to_record_batch(fetched(), topic="t", partition_key="1:t:0", broker_id=1, partition_id=0,
                            schema=arrow_schema(True))
    assert batch.num_rows == 0 and batch.schema == arrow_schema(True)


def test_a_raw_read_of_inlong_bundles_logs_one_hint(caplog, monkeypatch):
    """Issue 25 item 9: InLong data read without payloadFormat=inlongmsg gave bundle bytes with no hint."""
    from tubespark.tubemq.spark import read_task
    from tubespark.tubemq.wire.fetch import PackedColumns

    monkeypatch.setattr(read_task, "_hinted", set())
    plain = fetched(OutgoingMessage(b"a", attributes={"k": "v"}), OutgoingMessage(b"b"))
    bundles = fetched(OutgoingMessage(b"\x0f\x01...\x0f\x01", attributes={"msgEnType": "2"}))
    with caplog.at_level("WARNING", logger=read_task.__name__):
        assert not read_task.hint_inlong_bundles(plain, "1:t:0")
        assert not caplog.records
        assert read_task.hint_inlong_bundles(bundles, "1:t:0")
        packed = PackedColumns(1, b"", b"", b"", b"", b"", [{}, {"msgEnType": "1"}], ["", ""], ["", ""])
        assert read_task.hint_inlong_bundles(packed, "1:t:10000")  # the compiled twin's columns too
    (record,) = caplog.records  # once per process, not once per task or fetch
    assert record.getMessage() == (
        "partition 1:t:0 holds InLong bundles (TubeMQ attribute msgEnType=2: InLongMsg), read with payloadFormat=raw, "
        "so each row's value is a whole bundle's bytes, many records in one; set .option(\"payloadFormat\", "
        "\"inlongmsg\") for a row per record")


def test_read_stats_count_the_rows_of_the_range(tmp_path):
    """readStatsPath: what a task fetched, messages and value bytes, of a packed fetch cut at the range end too."""
    from tubespark.tubemq.spark.read_task import FetchCounter, QueueRange, read_stats
    from tubespark.tubemq.wire.fetch import PackedColumns

    values = [b"a" * 10, b"b" * 20, b"c" * 30]
    bounds = [0, 10, 30, 60]
    packed = PackedColumns(3, b"\0" * 24, b"\0" * 24, b"".join(v.to_bytes(4, "little") for v in bounds),
                           b"".join(values), b"\0" * 12, [{}], [""], [""])
    counter = FetchCounter()
    counter.add(packed.head(2))
    task = QueueRange(1, "h", 1, "tt", 0, 0, 56, "g", "c")
    counter.publish(str(tmp_path), task)
    assert read_stats(str(tmp_path)) == {"messages": 2, "bytes": 30, "tasks": 1}
