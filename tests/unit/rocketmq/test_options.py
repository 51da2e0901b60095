"""``rocketmq`` options: typed values, defaults, cross-option rules, all before any network call."""

from __future__ import annotations

import pytest

from tubespark.errors import OptionError
from tubespark.rocketmq.spark.options import OPTIONS, RocketMQOptions, is_queue_key, option_table
from tubespark.spark.options import SharedSpec

BASE = {"namesrv": "127.0.0.1:9876", "topic": "orders"}


def test_defaults_and_types() -> None:
    options = RocketMQOptions.from_raw(BASE, mode="read")
    assert options.namesrvs == ("127.0.0.1:9876",) and options.topics == ("orders",)
    assert options.consume_mode == "pull" and not options.pop and options.starting_offsets == "latest"
    assert options.pop_invisible_time_ms == 120000 and options.pop_partitions == 2
    settings = options.client_settings()
    assert (settings.connect_timeout_s, settings.request_timeout_s, settings.failover_s) == (3.0, 10.0, 45.0)


def test_every_spec_has_a_field() -> None:
    assert RocketMQOptions.missing_attributes() == (set(), set())
    assert all(f"`{spec.name}`" in option_table() for spec in OPTIONS if not isinstance(spec, SharedSpec))


@pytest.mark.parametrize(("raw", "message"), [
    ({"topic": "t"}, "namesrv is required"),
    ({**BASE, "consumeMode": "pop"}, "needs option group"),
    ({**BASE, "consumeMode": "pop", "group": "g", "startingOffsets": '{"orders:b:0": 1}'}, "earliest or latest"),
    ({**BASE, "startingOffsets": "group"}, "needs option group"),
    ({**BASE, "startingOffsets": '{"orders:b": 1}'}, "topic:brokerName:queueId"),
    ({**BASE, "topic": "a b"}, "topic names"),
    ({**BASE, "popPartitions": "0"}, "an integer from 1 to 1024"),
    ({**BASE, "popPollMs": "30000"}, "an integer from 1 to 20000"),
    ({"namesrv": "h:1"}, "topic is required"),
])
def test_bad_read_options(raw: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        RocketMQOptions.from_raw(raw, mode="read")


def test_write_options() -> None:
    options = RocketMQOptions.from_raw({"namesrv": "h:1", "batchMaxBytes": "65536"}, mode="write")
    assert options.topics is None and options.batch_max_bytes == 65536 and options.max_in_flight == 64
    with pytest.raises(OptionError, match="one topic"):
        RocketMQOptions.from_raw({"namesrv": "h:1", "topic": "a,b"}, mode="write")
    with pytest.raises(OptionError, match="1024"):
        RocketMQOptions.from_raw({"namesrv": "h:1", "batchMaxBytes": "9999999"}, mode="write")


def test_queue_keys() -> None:
    assert is_queue_key("orders:broker-a:3") and is_queue_key("%RETRY%g_t:b:0")
    assert not is_queue_key("orders:broker-a") and not is_queue_key("bad topic:b:1")


def test_the_driver_acks_the_receipts_of_each_tasks_last_attempt(tmp_path) -> None:
    """A retried task pops anew: only the rows of its last attempt reached the sink, so only its receipts are
    acked. Spark's task attempt ids grow with every attempt, also when a stage runs again."""
    import json

    from tubespark.core.shared_dir import SharedDir
    from tubespark.rocketmq.spark.pop_task import last_attempt_receipts, receipt_name

    directory = SharedDir(str(tmp_path), "popReceiptsPath")

    def leave(index: int, task_attempt_id: int, receipt: str) -> None:
        body = json.dumps([{"topic": "t", "receipt": receipt}]).encode()
        directory.publish(receipt_name(index, task_attempt_id), body)

    leave(0, 7, "task0-failed")
    leave(0, 12, "task0-kept")
    leave(1, 9, "task1-first-stage-attempt")
    leave(1, 130, "task1-stage-run-again")
    assert last_attempt_receipts(directory) == {"t": ["task0-kept", "task1-stage-run-again"]}


def test_a_receipt_is_renewed_once_less_than_half_of_the_invisible_time_is_left() -> None:
    from tubespark.rocketmq.client.keeper import due, look_interval_s
    from tubespark.rocketmq.wire.pop import Receipt

    receipt = str(Receipt(5, 100_000, 8000, 1, "0", "broker-a", 2, 7))  # popped at 100 s, hidden until 108 s
    assert not due(receipt, 8000, 100_000)
    assert not due(receipt, 8000, 104_000)  # exactly half left
    assert due(receipt, 8000, 104_001)
    assert due(receipt, 8000, 200_000)  # long run out (a change then comes too late: the broker revived it)
    assert look_interval_s(8000) == 1.0


def test_pop_offsets_name_their_receipts_directory_so_a_restarted_driver_finds_it(tmp_path) -> None:
    """The run id travels in the checkpointed offsets: a new reader (a restarted driver) adopts the one of
    the offsets Spark hands it and acks what its predecessor left there; a batch planned again after a
    restart starts without the receipts of the attempts before."""
    from tubespark.core.shared_dir import SharedDir
    from tubespark.rocketmq.spark.pop_reader import BATCH_KEY, RUN_KEY, PopStreamReader

    options = RocketMQOptions.from_raw({"namesrv": "127.0.0.1:1", "topic": "t", "consumeMode": "pop",
                                        "group": "g", "popReceiptsPath": str(tmp_path)}, mode="read")
    first = PopStreamReader(options)
    start = first.initialOffset()
    assert start == {BATCH_KEY: 0, RUN_KEY: first.run_id}
    tasks = first.partitions(start, {BATCH_KEY: 1, RUN_KEY: first.run_id})
    assert {t.receipts_dir for t in tasks} == {f"{tmp_path}/{first.run_id}/batch-000000001"}
    left = SharedDir(f"{tmp_path}/{first.run_id}/batch-000000002", "popReceiptsPath")
    left.publish("part-00000-attempt-00000000000000000009.json", b"[]")
    first.stop()

    second = PopStreamReader(options)
    assert second.run_id != first.run_id
    second.commit({BATCH_KEY: 0, RUN_KEY: first.run_id})  # acks nothing (no batch <= 0), adopts the run
    assert second.run_id == first.run_id
    assert left.names() == ["part-00000-attempt-00000000000000000009.json"]
    second.partitions({BATCH_KEY: 1, RUN_KEY: first.run_id}, {BATCH_KEY: 2, RUN_KEY: first.run_id})
    assert left.names() == []  # batch 2 planned again: the earlier attempts' receipts are dropped
    second.stop()
