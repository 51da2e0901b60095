"""RocketMQ filters (``subExpression``): what the requests carry, the broker's refusal as a typed error, and
how a filtered range read moves over messages the broker skipped (holes, PULL_RETRY_IMMEDIATELY with
``nextBeginOffset`` moved) and drops tag hash collisions, ending exactly at the range's end. The real
broker's side: tests/integration/rocketmq/test_filter.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tubespark.errors import BadRequestError, DataLossError, NoDataError, OptionError, ServerBusyError
from tubespark.rocketmq.client.client import RocketMQClient
from tubespark.rocketmq.client.ranges import RangeReader
from tubespark.rocketmq.errors import FilterNotSupportedError
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.wire import codes, headers
from tubespark.rocketmq.wire.filter import ALL, SQL92, TAG, Filter, check_client_request
from tubespark.rocketmq.wire.frame import FLAG_RESPONSE, Command
from tubespark.rocketmq.wire.message import StoredMessage, encode_stored
from tubespark.rocketmq.wire.route import MessageQueue

MQ = MessageQueue("events", "broker-a", 0)


def java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (what the broker's consume queue keeps of a tag)."""
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def test_tag_expressions_parse_as_the_broker_splits_them() -> None:
    assert Filter("TagA || TagB ||  ").tags == {"TagA", "TagB"}
    assert Filter("TagA||TagB").sub_string == "TagA||TagB"
    assert ALL.everything and Filter(" * ").everything and ALL.sub_string == "*"
    assert not Filter("a", TAG).everything and not Filter("a > 1", SQL92).everything
    with pytest.raises(ValueError, match="needs an expression"):
        Filter(" ", SQL92)
    with pytest.raises(ValueError, match="TAG or SQL92"):
        Filter("a", "REGEX")


def test_the_client_drops_tag_hash_collisions_and_untagged_messages() -> None:
    assert java_hash("Aa") == java_hash("BB") == 2112  # the broker cannot tell these apart
    flt = Filter("Aa || TagC")
    assert flt.keeps("Aa") and flt.keeps("TagC")
    assert not flt.keeps("BB") and not flt.keeps(None)
    assert ALL.keeps(None) and ALL.keeps("BB")
    assert Filter("a = 1", SQL92).keeps("BB")  # the broker evaluates SQL92 exactly


def test_pull_and_pop_requests_carry_the_filter() -> None:
    pull = headers.pull_request(group="g", topic="t", queue_id=0, offset=5, max_messages=32, now_ms=9,
                                flt=Filter("a > 5", SQL92))
    assert pull.ext["subscription"] == "a > 5" and pull.ext["expressionType"] == "SQL92"
    assert int(pull.ext["sysFlag"]) & headers.PULL_FLAG_SUBSCRIPTION and pull.ext["subVersion"] == "9"
    plain = headers.pull_request(group="g", topic="t", queue_id=0, offset=5, max_messages=32, now_ms=9)
    assert (plain.ext["subscription"], plain.ext["expressionType"]) == ("*", "TAG")
    pop = headers.pop_request(group="g", topic="t", max_messages=8, invisible_ms=60000, poll_ms=100, born_ms=1,
                              flt=Filter(" TagA || TagB "))
    assert (pop.ext["expType"], pop.ext["exp"]) == ("TAG", "TagA || TagB")


def test_check_client_config_carries_the_subscription() -> None:
    cmd = check_client_request(group="g", topic="t", flt=Filter("a > 5", SQL92), client_id="c", now_ms=7)
    assert cmd.code == codes.CHECK_CLIENT_CONFIG == 46
    body = json.loads(cmd.body)
    assert body["group"] == "g" and body["clientId"] == "c"
    assert body["subscriptionData"] == {"topic": "t", "subString": "a > 5", "expressionType": "SQL92",
                                        "tagsSet": [], "codeSet": [], "subVersion": 7, "classFilterMode": False}


def test_a_broker_without_property_filters_is_a_typed_error_naming_the_setting() -> None:
    refusal = Command(codes.SYSTEM_ERROR, remark="The broker does not support consumer to filter message by SQL92",
                      flag=FLAG_RESPONSE)
    with pytest.raises(FilterNotSupportedError, match="enablePropertyFilter=true") as error:
        headers.read_ok(refusal, "check")
    assert not error.value.retriable and isinstance(error.value, BadRequestError)
    with pytest.raises(FilterNotSupportedError):
        headers.read_pull(refusal, "pull")
    with pytest.raises(ServerBusyError):  # any other SYSTEM_ERROR stays the passing kind
        headers.read_ok(Command(codes.SYSTEM_ERROR, remark="store busy", flag=FLAG_RESPONSE), "check")


def test_options_build_the_filter() -> None:
    base = {"namesrv": "h:1", "topic": "t"}
    assert RocketMQOptions.from_raw(base, mode="read").filter == ALL
    tagged = RocketMQOptions.from_raw({**base, "subExpression": "A || B"}, mode="read").filter
    assert tagged.tags == {"A", "B"} and tagged.kind == TAG
    sql = RocketMQOptions.from_raw({**base, "subExpression": "a > 1", "expressionType": "SQL92"}, mode="read")
    assert sql.filter == Filter("a > 1", SQL92)
    with pytest.raises(OptionError, match="needs option subExpression"):
        RocketMQOptions.from_raw({**base, "expressionType": "sql92"}, mode="read")
    with pytest.raises(OptionError, match="names no tag"):  # the broker would match nothing, not everything
        RocketMQOptions.from_raw({**base, "subExpression": "||"}, mode="read")
    with pytest.raises(OptionError, match="subExpression is empty"):
        RocketMQOptions.from_raw({**base, "subExpression": " "}, mode="read")


# --- the range reader's side of a filtered pull ------------------------------------------------------


@pytest.fixture
def client() -> Iterator[RocketMQClient]:
    c = RocketMQClient(["127.0.0.1:1"])  # never called: these tests hand the reader its answers
    yield c
    c.close()


def _found(offsets_tags: list[tuple[int, str | None]], *, next_offset: int, min_offset: int = 0) -> headers.PullResult:
    messages = [StoredMessage(MQ.topic, MQ.queue_id, o, f"v{o}".encode(), {"TAGS": t} if t else {}, 1, 2)
                for o, t in offsets_tags]
    return headers.PullResult(headers.FOUND, next_offset, min_offset, 10_000, encode_stored(messages), 0)


def _retry(next_offset: int, min_offset: int = 0) -> headers.PullResult:
    return headers.PullResult(headers.RETRY, next_offset, min_offset, 10_000, b"", 0)


def test_a_scan_without_a_match_moves_the_read_on_to_next_begin_offset_never_past_the_end(client) -> None:
    reader = RangeReader(client, "g", flt=Filter("Aa"))
    assert reader._take(MQ, _retry(next_offset=900), 100, 132) == ([], 132)  # past the window: its end
    assert reader._take(MQ, _retry(next_offset=120), 100, 132) == ([], 120)
    with pytest.raises(NoDataError):  # an answer that did not move is a broker that lags, retried as before
        reader._take(MQ, _retry(next_offset=100), 100, 132)
    unfiltered = RangeReader(client, "g")
    with pytest.raises(NoDataError):  # without a filter "retry" never means skipped messages
        unfiltered._take(MQ, _retry(next_offset=900), 100, 132)


def test_holes_are_skipped_messages_and_collisions_are_dropped(client) -> None:
    reader = RangeReader(client, "g", flt=Filter("Aa"))
    answer = _found([(103, "Aa"), (107, "BB"), (110, None), (131, "Aa"), (140, "Aa")], next_offset=141)
    messages, reached = reader._take(MQ, answer, 100, 132)
    assert [m.queue_offset for m in messages] == [103, 131] and reached == 132
    messages, reached = reader._take(MQ, _found([(103, "Aa")], next_offset=120), 100, 132)
    assert [m.queue_offset for m in messages] == [103] and reached == 120  # the broker scanned to 119
    assert reader.lost == []


def test_a_queue_minimum_above_the_position_is_still_loss_under_a_filter(client) -> None:
    with pytest.raises(DataLossError, match=r"\[100, 120\)"):
        RangeReader(client, "g", flt=Filter("Aa"))._take(MQ, _found([(125, "Aa")], next_offset=126,
                                                                    min_offset=120), 100, 132)
    skipping = RangeReader(client, "g", flt=Filter("Aa"), fail_on_data_loss=False)
    assert skipping._take(MQ, _retry(next_offset=500, min_offset=120), 100, 132) == ([], 120)
    assert skipping.lost == [(MQ.key, 100, 120)]
