"""Spark's pushed filters -> what a broker's read serves (tubespark/spark/pushdown.py): each kind, what is left to
Spark, combinations, types; and the engine's plan with them (a fake broker)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from tubespark.spark.batch_engine import BatchEngine, PushdownReader
from tubespark.spark.broker import Broker, Catalog, Deferring, Range
from tubespark.spark.planning import Bounds
from tubespark.spark.pushdown import Column, Kind, Span, clip, describe_filter, pushdown_enabled, translate
from tubespark.tubemq.spark.adapter import PUSHDOWN_COLUMNS, TubeAdapter
from tubespark.tubemq.spark.options import TubeMQOptions

COLUMNS = PUSHDOWN_COLUMNS
T = datetime(2026, 11, 20, 8, 3, 30, 250_500, tzinfo=UTC)
T_MS = int(T.timestamp() * 1000)  # 250.5 ms: the ms below


def test_partition_columns_are_served_exactly():
    filters = [EqualTo(("partitionId",), 1), In(("brokerId",), (1, 2)), EqualTo(("partitionKey",), "1:t:1"),
               IsNotNull(("offset",)), EqualNullSafe(("topic",), "t")]
    pushed, left = translate(filters, COLUMNS)
    assert left == []
    assert pushed.values == {"partitionId": {1}, "brokerId": {1, 2}, "partitionKey": {"1:t:1"}, "topic": {"t"}}
    assert pushed.selects({"partitionKey": "1:t:1", "topic": "t", "brokerId": 2, "partitionId": 1})
    assert not pushed.selects({"partitionKey": "1:t:0", "topic": "tt", "brokerId": 1, "partitionId": 0})
    assert pushed.served == ["EqualTo(partitionId,1)", "In(brokerId,[1,2])", "EqualTo(partitionKey,1:t:1)",
                             "IsNotNull(offset)", "EqualNullSafe(topic,t)"]


def test_stream_ids_go_to_the_broker_and_stay_with_spark():
    a, b = EqualTo(("streamId",), "a"), In(("streamId",), ("a", "b"))
    pushed, left = translate([a, b], COLUMNS)
    assert left == [a, b] and left[0] is a  # returned by identity: PySpark matches them so
    assert pushed.values == {"streamId": {"a"}} and pushed.pruning == ["EqualTo(streamId,a)", "In(streamId,[a,b])"]


def test_time_ranges_prune_and_stay_with_spark():
    ge, lt = GreaterThanOrEqual(("msgTime",), T), LessThan(("msgTime",), T + timedelta(minutes=2))
    pushed, left = translate([ge, lt], COLUMNS)
    assert left == [ge, lt]
    assert pushed.times == {"msgTime": Span(T_MS, T_MS + 120_000 + 1)}  # widened outward to whole ms
    eq = EqualTo(("msgTime",), T.astimezone(timezone(timedelta(hours=8))))  # another zone, the same instant
    assert translate([eq], COLUMNS)[0].times == {"msgTime": Span(T_MS, T_MS + 1)}


def test_offset_ranges_cut_on_message_boundaries():
    filters = [GreaterThan(("offset",), 27), LessThanOrEqual(("offset",), 280), In(("offset",), (0, 56, 1000))]
    pushed, left = translate(filters, COLUMNS)
    assert left == filters and pushed.offsets == Span(28, 280)
    assert clip(0, 10_000, pushed.offsets, 28) == (28, 308)  # messages at 28 ... 280
    assert clip(0, 10_000, Span(29, 55), 28) == (56, 56)  # no message boundary in between: nothing
    assert clip(100, 200, Span(None, None), 28) == (100, 200)


@pytest.mark.parametrize("f", [
    Not(EqualTo(("partitionId",), 1)),  # NOT is never served
    IsNull(("msgTime",)),
    IsNotNull(("msgTime",)),  # msgTime can be null: not every row satisfies it
    StringStartsWith(("streamId",), "a"),
    EqualTo(("value",), b"x"),  # a column the broker cannot act on
    EqualTo(("partitionId",), "1"),  # the wrong type
    EqualTo(("partitionId",), True),
    EqualTo(("msgTime",), datetime(2026, 11, 20)),  # TIMESTAMP_NTZ: no instant
    EqualTo(("streamId",), "a b"),  # the broker's filter takes letters, digits, '_' and '-'
    In(("streamId",), ("a", "x" * 300)),
    EqualNullSafe(("partitionId",), None),
    EqualTo(("attributes", "k"), "v"),  # a nested path
    LessThan(("partitionId",), 3),  # a partition column takes value sets only
])
def test_what_cannot_be_served_is_left_to_spark_untouched(f):
    pushed, left = translate([f], COLUMNS)
    assert left == [f] and left[0] is f
    assert pushed.served == [] and pushed.pruning == [] and not pushed.nothing
    assert pushed.values == {} and pushed.times == {} and pushed.offsets == Span()


def test_contradictions_match_nothing():
    assert translate([EqualTo(("partitionId",), 0), EqualTo(("partitionId",), 1)], COLUMNS)[0].nothing
    assert translate([GreaterThan(("offset",), 100), LessThan(("offset",), 50)], COLUMNS)[0].nothing
    assert translate([In(("streamId",), ("a",)), EqualTo(("streamId",), "b")], COLUMNS)[0].nothing
    assert not translate([In(("streamId",), ("a", "b")), EqualTo(("streamId",), "b")], COLUMNS)[0].nothing


def test_a_mix_keeps_spark_order_and_identity():
    keep = Not(EqualTo(("streamId",), "a"))
    served, pruning = EqualTo(("brokerId",), 1), GreaterThan(("offset",), 0)
    pushed, left = translate([keep, served, pruning], COLUMNS)
    assert left == [keep, pruning] and all(x is y for x, y in zip(left, [keep, pruning], strict=True))
    assert "EqualTo(brokerId,1)" in pushed.describe() and "GreaterThan(offset,0)" in pushed.describe()


def test_a_broker_declares_its_columns():
    custom = {"queueId": Column(Kind.PARTITION, int, never_null=True)}
    pushed, left = translate([EqualTo(("queueId",), 3), EqualTo(("partitionId",), 3)], custom)
    assert pushed.values == {"queueId": {3}} and len(left) == 1


def test_stream_ids_reach_the_broker_only_when_asked():
    def columns(**extra: str) -> set[str]:
        options = TubeMQOptions.from_raw({"master": "m:8715", "topic": "tt", **extra}, mode="read")
        return set(TubeAdapter(options, batch=True).pushdown_columns())

    assert "msgTime" in columns() and "streamId" not in columns()  # the offset column stays exact
    assert {"streamId", "msgTime"} <= columns(streamIdPushdown="true")
    # InLong bundles: a row's streamId and msgTime are its record's, which the broker does not see
    assert not {"streamId", "msgTime"} & columns(streamIdPushdown="true", payloadFormat="inlongmsg")
    assert {"partitionKey", "offset"} <= columns(payloadFormat="inlongmsg")


def test_stream_ids_meet_the_option():
    adapter = TubeAdapter(TubeMQOptions.from_raw({"master": "m:8715", "topic": "tt", "streamIds": "a,b"},
                                                 mode="read"), batch=True)
    assert adapter.use_tags("streamId", frozenset({"b", "c"})) == {"b"}
    assert adapter.options.stream_ids == ("b",)
    assert adapter.use_tags("streamId", frozenset({"c"})) == frozenset()  # nothing can match: the plan reads none


def test_outside_a_pyspark_worker_no_pushdown():
    assert pushdown_enabled(depth=1) is False


def test_describe_filter_reads_like_explain():
    assert describe_filter(In(("streamId",), ("a", "b"))) == "In(streamId,[a,b])"
    assert describe_filter(IsNotNull(("offset",))) == "IsNotNull(offset)"


# --- the batch engine's plan with pushed filters (a broker that is a table) --------------------------------


class _TableBroker(Broker):
    """Partitions ``p0``/``p1`` of offsets [0, 100); the message at offset ``o`` has time ``o`` minutes."""

    def __init__(self, options: Any, *, batch: bool = True) -> None:
        super().__init__(options, batch=batch)
        self.tags: frozenset[object] | None = None

    def catalog(self) -> Catalog:
        return Catalog(bounds={"p0": Bounds(0, 100), "p1": Bounds(0, 100)}, topics=("t",))

    def pushdown_columns(self) -> Mapping[str, Column]:
        return {"partitionId": Column(Kind.PARTITION, int, never_null=True), "offset": Column(Kind.OFFSET, int),
                "msgTime": Column(Kind.TIME, datetime), "streamId": Column(Kind.TAG, str)}

    def partition_values(self, key: str) -> Mapping[str, object]:
        return {"partitionId": int(key[1:])}

    def time_position(self, key: str, bounds: Bounds, column: str, when_ms: int) -> int:
        return min(bounds.high, max(bounds.low or 0, -(-when_ms // 60_000)))

    def use_tags(self, column: str, values: frozenset[object]) -> frozenset[object]:
        self.tags = values
        return values

    def read_tasks(self, ranges: Sequence[Range], defer: Deferring = None) -> Sequence[InputPartition]:
        return [InputPartition(r) for r in ranges]


def _plan(filters: list[Any]) -> tuple[list[Any], list[Any], _TableBroker]:
    options = SimpleNamespace(starting_offsets="earliest", ending_offsets="latest", fail_on_data_loss=True,
                              max_records_per_partition=None, on_unavailable_partitions="fail", topics=("t",))
    broker = _TableBroker(options)
    engine = PushdownReader(BatchEngine(broker))
    left = list(engine.pushFilters(filters))
    return [p.value for p in engine.partitions()], left, broker


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def test_the_plan_reads_only_what_the_filters_select():
    ranges, left, broker = _plan([EqualTo(("partitionId",), 1), GreaterThanOrEqual(("offset",), 10),
                                  LessThan(("msgTime",), EPOCH + timedelta(minutes=30)), In(("streamId",), ("a",))])
    assert ranges == [("p1", 10, 31)]  # the time end is found by the broker: ms 1800001 -> minute 31
    assert len(left) == 3 and broker.tags == {"a"}
    assert _plan([EqualTo(("partitionId",), 3)])[0] == []
    assert _plan([GreaterThan(("offset",), 500)])[0] == []  # beyond every end: empty ranges plan no task


def test_a_plan_without_filters_is_unchanged():
    assert _plan([])[0] == [("p0", 0, 100), ("p1", 0, 100)]


def test_tank_and_rocketmq_select_partitions_and_cut_offsets():
    from tubespark.rocketmq.spark.adapter import PullAdapter
    from tubespark.rocketmq.spark.options import RocketMQOptions
    from tubespark.tank.spark.adapter import TankAdapter
    from tubespark.tank.spark.options import TankOptions

    tank = TankAdapter(TankOptions.from_raw({"broker": "h:11011", "topic": "tt"}, mode="read"), batch=True)
    pushed, left = translate([EqualTo(("partition",), 2), GreaterThan(("offset",), 9)], tank.pushdown_columns())
    assert pushed.selects(tank.partition_values("tt:2")) and not pushed.selects(tank.partition_values("tt:1"))
    assert pushed.offsets == Span(10, None) and len(left) == 1
    rocket = PullAdapter(RocketMQOptions.from_raw({"namesrv": "h:9876", "topic": "tt"}, mode="read"), batch=True)
    pushed, left = translate([EqualTo(("brokerName",), "b"), In(("queueId",), (0, 3)), EqualTo(("tags",), "x")],
                             rocket.pushdown_columns())
    assert [pushed.selects(rocket.partition_values(k)) for k in ("tt:b:3", "tt:b:1", "tt:c:0")] == [True, False, False]
    assert left == [] and pushed.values["tags"] == {"x"}  # tags: the read's own filter, exact


def _rocket(**extra: str) -> Any:
    from tubespark.rocketmq.spark.adapter import PullAdapter
    from tubespark.rocketmq.spark.options import RocketMQOptions

    return PullAdapter(RocketMQOptions.from_raw({"namesrv": "h:9876", "topic": "tt", **extra}, mode="read"),
                       batch=True)


def _push(adapter: Any, filters: list[Any]) -> tuple[Any, list[Any]]:
    reader = PushdownReader(BatchEngine(adapter))
    left = list(reader.pushFilters(filters))
    return reader.engine.pushdown, left


def test_rocketmq_tags_become_the_pulls_tag_filter_served_exactly():
    """The read checks each message's real tag after the broker's hash filter: taken off Spark's list."""
    adapter = _rocket()
    pushed, left = _push(adapter, [In(("tags",), ("b", "a")), IsNotNull(("tags",))])
    assert pushed.served == ["In(tags,[b,a])"] and [describe_filter(f) for f in left] == ["IsNotNull(tags)"]
    assert adapter.options.filter.tags == {"a", "b"} and adapter.options.filter.keeps("a")
    assert not adapter.options.filter.keeps("c") and not adapter.options.filter.keeps(None)  # untagged: no match


def test_rocketmq_tags_meet_the_users_tag_list():
    adapter = _rocket(subExpression="a || b")
    assert _push(adapter, [In(("tags",), ("b", "c"))])[0].values["tags"] == {"b"}
    assert adapter.options.sub_expression == "b"
    adapter = _rocket(subExpression="a")
    pushed, left = _push(adapter, [EqualTo(("tags",), "c")])
    assert pushed.nothing and left == [] and adapter.options.sub_expression == "a"  # no row can match: none read


def test_rocketmq_tags_stay_with_spark_under_an_sql92_filter():
    adapter = _rocket(subExpression="n > 3", expressionType="sql92")
    f = EqualTo(("tags",), "a")
    pushed, left = _push(adapter, [f])
    assert left == [f] and pushed.values == {} and adapter.options.sub_expression == "n > 3"


@pytest.mark.parametrize("tag", ["*", "a || b", " a", "", "a\t"])
def test_rocketmq_tags_a_tag_expression_cannot_name_stay_with_spark(tag):
    adapter = _rocket()
    f = EqualTo(("tags",), tag)
    assert _push(adapter, [f])[1] == [f] and adapter.options.sub_expression == "*"


def test_an_empty_in_matches_nothing():
    assert translate([In(("partitionId",), ())], COLUMNS)[0].nothing
    assert translate([In(("offset",), ())], COLUMNS)[0].nothing
    adapter = _rocket()
    assert _push(adapter, [In(("tags",), ())])[0].nothing and adapter.options.sub_expression == "*"
