"""Options of the tubemq data source: validation before any network call, and the README table."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from tubespark.errors import OptionError, TubeSparkError
from tubespark.tubemq.spark.options import option_table, parse_options
from tubespark.tubemq.spark.stream_reader import share_by_backlog

BASE = {"master": "127.0.0.1:8715", "topic": "events", "group": "etl_group"}


def parse(**extra: str):
    return parse_options({**BASE, **extra}, mode="read")


def test_defaults_and_parsing():
    opts = parse(maxOffsetsPerTrigger="500", streamIds="b, a,a", failOnDataLoss="False",
                 master="h1:1, h2:2", topic="t2,events")
    assert opts["master"] == ["h1:1", "h2:2"]
    assert opts["topic"] == ["events", "t2"]
    assert opts["maxOffsetsPerTrigger"] == 500
    assert opts["streamIds"] == ["a", "b"]
    assert opts["failOnDataLoss"] is False
    assert opts["startingOffsets"] == "latest"
    assert opts["commitToGroup"] is True
    settings = opts.client_settings()
    assert (settings.connect_timeout_s, settings.call_timeout_s, settings.heartbeat_interval_s) == (3.0, 10.0, 3.0)


def test_spark_lower_cases_keys_and_errors_still_name_the_option():
    with pytest.raises(OptionError, match=r"option maxOffsetsPerTrigger='0'"):
        parse_options({**BASE, "maxoffsetspertrigger": "0"}, mode="read")


@pytest.mark.parametrize("key,value,message", [
    ("master", "localhost", "expected host:port"),
    ("master", "h:99999", "bad: h:99999"),
    ("topic", "9bad", "bad: 9bad"),
    ("group", "g", r"option group='g'"),
    ("group", "has space", "a group name starts with a letter"),
    ("maxOffsetsPerTrigger", "ten", "expected a positive integer"),
    ("commitToGroup", "sometimes", "expected true or false"),
    ("streamIds", "a,b c", "bad: b c"),
    ("startingOffsets", "yesterday", "expected earliest | latest | group"),
    ("startingOffsets", "{not json", "invalid JSON"),
    ("startingOffsets", '{"1:events": 0}', "bad partition key"),
    ("startingOffsets", '{"1:events:0": -7}', "must be -2"),
    ("startingOffsets", '{"1:events:0": true}', "must be -2"),
    ("endingOffsets", "earliest", "expected latest"),
])
def test_bad_values_name_option_and_value(key, value, message):
    with pytest.raises(OptionError, match=message):
        parse(**{key: value})


def test_offset_json():
    opts = parse(startingOffsets='{"1:events:0": 280, "1:events:10000": -2}')
    assert opts["startingOffsets"] == {"1:events:0": 280, "1:events:10000": -2}


def test_required_and_protected_options():
    with pytest.raises(OptionError, match="option master is required"):
        parse_options({"topic": "events"}, mode="read")
    with pytest.raises(OptionError, match="option group is required"):
        parse_options({"master": "h:1", "topic": "events"}, mode="read", required=("group",))
    with pytest.raises(OptionError, match="use group instead"):
        parse(**{"tubemq.groupName": "other"})
    with pytest.raises(OptionError, match="auth.user is not"):
        parse(**{"auth.password": "secret"})


def test_unknown_option_warns():
    with pytest.warns(UserWarning, match="unknown option 'maxOffsetPerTrigger'"):
        parse(maxOffsetPerTrigger="5")


def test_option_error_is_a_tubespark_error_and_a_value_error():
    assert issubclass(OptionError, TubeSparkError) and issubclass(OptionError, ValueError)


def test_credentials_and_tls():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opts = parse(**{"auth.user": "alice", "auth.password": "pw", "tubemq.tlsEnable": "true"})
    settings = opts.client_settings()
    assert settings.credentials.user == "alice" and settings.ssl_context is not None


def test_readme_option_table_is_generated_from_the_definitions():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    block = re.search(r"<!-- options:begin.*?-->\n(.*?)\n<!-- options:end -->", readme, re.S)
    assert block, "README.md lost its options block"
    assert block.group(1) == option_table(), "README option table is stale: paste option_table() output"


def test_share_by_backlog():
    assert share_by_backlog({"a": 10, "b": 0}, 100) == {"a": 10, "b": 0}
    shares = share_by_backlog({"a": 900, "b": 90, "c": 10}, 100)
    assert shares == {"a": 90, "b": 9, "c": 1}
    tiny = share_by_backlog({"a": 1000, "b": 1}, 10)
    assert tiny["b"] == 1 and tiny["a"] == 10  # rounded up: small partitions are never starved
