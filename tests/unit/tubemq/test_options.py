"""Options of the tubemq data source: validation before any network call, typed attributes, the Options page's table."""

from __future__ import annotations

import dataclasses
import pickle
import warnings
from pathlib import Path

import pytest

from tubespark.core.options import OptionSpec, attribute_name, parse_bool, parse_raw, render_table
from tubespark.errors import OptionError, TubeSparkError
from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.spark.options import OPTIONS, TubeMQOptions, is_partition_key

BASE = {"master": "127.0.0.1:8715", "topic": "events", "group": "etl_group"}


def parse(**extra: str) -> TubeMQOptions:
    return TubeMQOptions.from_raw({**BASE, **extra}, mode="read")


def test_defaults_and_parsing():
    opts = parse(maxOffsetsPerTrigger="500", streamIds="b, a,a", failOnDataLoss="False",
                 master="h1:1, h2:2", topic="t2,events")
    assert opts.masters == ("h1:1", "h2:2")
    assert opts.topics == ("events", "t2")
    assert opts.group == "etl_group"
    assert opts.max_offsets_per_trigger == 500
    assert opts.max_records_per_partition is None
    assert opts.stream_ids == ("a", "b")
    assert opts.fail_on_data_loss is False
    assert opts.starting_offsets == "latest"
    assert opts.commit_to_group is True
    assert opts.dedup_attribute is None
    assert opts.tls_enable is False
    settings = opts.client_settings()
    assert (settings.connect_timeout_s, settings.request_timeout_s, settings.heartbeat_interval_s) == (3.0, 10.0, 3.0)


def test_no_stream_ids_is_an_empty_tuple():
    assert parse().stream_ids == ()


def test_timeout_defaults_are_the_client_settings_defaults():
    defaults = {f.name: f.default for f in dataclasses.fields(ClientSettings)}
    opts = parse()
    assert opts.connect_timeout_ms == round(defaults["connect_timeout_s"] * 1000)
    assert opts.request_timeout_ms == round(defaults["request_timeout_s"] * 1000)
    assert opts.heartbeat_interval_ms == round(defaults["heartbeat_interval_s"] * 1000)
    settings = opts.client_settings()
    assert settings.connect_timeout_s == defaults["connect_timeout_s"]
    assert settings.request_timeout_s == defaults["request_timeout_s"]
    assert settings.heartbeat_interval_s == defaults["heartbeat_interval_s"]


def test_every_option_has_exactly_one_attribute():
    missing, extra = TubeMQOptions.missing_attributes()
    assert not missing and not extra
    attrs = [spec.attr for spec in OPTIONS]
    assert len(attrs) == len(set(attrs))
    assert {"masters", "topics", "max_offsets_per_trigger", "tls_enable", "tls_ca_file", "auth_user"} <= set(attrs)


def test_attribute_names_are_snake_case():
    assert attribute_name("maxOffsetsPerTrigger") == "max_offsets_per_trigger"
    assert attribute_name("auth.user") == "auth_user"
    assert attribute_name("tubemq.tlsCaFile") == "tubemq_tls_ca_file"
    assert attribute_name("group") == "group"


def test_options_are_frozen_and_picklable():
    opts = parse(startingOffsets='{"1:events:0": 280}', streamIds="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.group = "other"  # type: ignore[misc]
    copy = pickle.loads(pickle.dumps(opts))
    assert copy == opts and isinstance(copy, TubeMQOptions)


@pytest.mark.parametrize("key", ["maxoffsetspertrigger", "MAXOFFSETSPERTRIGGER", "MaxOffsetsPerTrigger"])
def test_option_names_are_case_insensitive(key):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known option in another case is not "unknown"
        opts = TubeMQOptions.from_raw({**BASE, key: "7", "TOPIC": "other", "Master": "h:1"}, mode="read")
    assert opts.max_offsets_per_trigger == 7
    assert opts.topics == ("other",) and opts.masters == ("h:1",)


def test_spark_lower_cases_keys_and_errors_still_name_the_option():
    with pytest.raises(OptionError, match=r"option maxOffsetsPerTrigger='0'"):
        TubeMQOptions.from_raw({**BASE, "maxoffsetspertrigger": "0"}, mode="read")


def test_a_spark_case_insensitive_map_is_accepted():
    from pyspark.sql.datasource import CaseInsensitiveDict

    opts = TubeMQOptions.from_raw(CaseInsensitiveDict({**BASE, "includeAttributes": "true"}), mode="read")
    assert opts.include_attributes is True and opts.group == "etl_group"


BAD_VALUES = [
    ("master", "localhost", "expected host:port"),
    ("master", "h:99999", "bad: h:99999"),
    ("topic", "9bad", "bad: 9bad"),
    ("group", "g", r"option group='g'"),
    ("group", "has space", "expected a group name: a letter"),
    ("maxOffsetsPerTrigger", "ten", "expected a positive integer"),
    ("commitToGroup", "sometimes", "expected true or false"),
    ("streamIds", "a,b c", "bad: b c"),
    ("streamIdPushdown", "maybe", "expected true or false"),
    ("startingOffsets", "yesterday", "expected earliest | latest | group"),
    ("startingOffsets", "{not json", "invalid JSON"),
    ("startingOffsets", '{"1:events": 0}', "bad partition key"),
    ("startingOffsets", '{"x:events:0": 0}', "bad partition key"),
    ("startingOffsets", '{"1:9bad:0": 0}', "bad partition key"),
    ("startingOffsets", '{"-1:events:0": 0}', "bad partition key"),
    ("startingOffsets", '{"1:events:0": -7}', "must be -2"),
    ("startingOffsets", '{"1:events:0": true}', "must be -2"),
    ("endingOffsets", "earliest", "expected latest"),
    ("dedupAttribute", "$id", "expected an attribute name"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD_VALUES)
def test_bad_values_name_option_and_value(key, value, message):
    with pytest.raises(OptionError, match=message):
        parse(**{key: value})


# Bad values of the options the table above does not cover (issue 10: every option of OPTIONS has one).
# (option, bad value, what the message says, mode)
MORE_BAD_VALUES = [
    ("master", "", "expected host:port", "write"),
    ("topic", ",", "expected topic names", "write"),
    ("topic", "a1,b1", "writes to one topic", "write"),
    ("endingOffsets", '{"1:events:0": -7}', "must be", "read"),
    ("maxRecordsPerPartition", "0", "expected a positive integer", "read"),
    ("maxOffsetsPerTrigger", "-5", "expected a positive integer", "read"),
    ("minOffsetsPerTrigger", "0", "expected a positive integer", "read"),
    ("topicPattern", "events_(", "expected a regular expression", "read"),
    ("masterWebUrl", "127.0.0.1:8080", "expected http://host:port", "read"),
    ("topicRefreshIntervalMs", "0", "expected a positive integer", "read"),
    ("maxTriggerDelay", "soon", "expected a duration like", "read"),
    ("maxBytesPerTrigger", "10q", "expected a positive size in bytes", "read"),
    ("startingTimestamp", "yesterday", "expected a time in milliseconds", "read"),
    ("startingOffsetsByTimestamp", '{"1:events:0": -1}', "must be epoch milliseconds", "read"),
    ("startingOffsetsByTimestampStrategy", "skip", "expected error or latest", "read"),
    ("endingTimestamp", "-3", "expected a time in milliseconds", "read"),
    ("endingOffsetsByTimestamp", '{"1:events": 5}', "bad partition key", "read"),
    ("failOnDataLoss", "maybe", "expected true or false", "read"),
    ("onUnavailablePartitions", "ignore", "expected fail or skip", "read"),
    ("includeAttributes", "2", "expected true or false", "read"),
    ("verifyChecksums", "off", "expected true or false", "read"),
    ("dedupe", "sure", "expected true or false", "read"),
    ("dedupAttribute", "", "expected an attribute name", "write"),
    ("maxInFlight", "0", "expected a positive integer", "write"),
    ("sendRetries", "three", "expected a non-negative integer", "write"),
    ("outageTimeoutMs", "-1", "expected a non-negative integer", "write"),
    ("connectTimeoutMs", "-1", "expected a positive integer", "read"),
    ("requestTimeoutMs", "1.5", "expected a positive integer", "write"),
    ("heartbeatIntervalMs", "0", "expected a positive integer", "read"),
    ("heartbeatIntervalMs", "30000", "below the servers' 30000 ms session timeout", "write"),
    ("assignmentTimeoutMs", "soon", "expected a positive integer", "read"),
    ("auth.user", "", "expected a user name", "read"),
    ("auth.user", " alice", "expected a user name", "write"),
    ("auth.password", "secret", r"auth\.user is not", "write"),  # a password without a user
    ("tubemq.tlsEnable", "enable", "expected true or false", "read"),
    ("tubemq.tlsCaFile", "/nonexistent/ca.pem", "expected a readable PEM file", "read"),
    ("tubemq.tlsCertFile", "/nonexistent/client.pem", "expected a readable PEM file", "read"),
    ("tubemq.tlsKeyFile", "/nonexistent/client.key", "expected a readable PEM file", "write"),
    ("tubemq.tlsKeyPassword", "pw", "tubemq.tlsEnable is not true", "read"),  # TLS options without TLS
    ("tubemq.tlsVerifyHostname", "never", "expected true or false", "write"),
    ("brokerAddressMap", "127.0.0.1:8123", "expected listed=reachable", "read"),
    ("brokerAddressMap", "127.0.0.1:8123=127.0.0.9", "expected listed=reachable", "write"),
    ("brokerAddressMap", "a:1=b:2,a:1=c:3", "mapped twice", "read"),
    ("streamIds", "x" * 257, "expected at most 500 streamIds", "read"),
    ("payloadFormat", "json", "expected raw or inlongmsg", "read"),
    ("payloadFormat", "", "expected raw or inlongmsg", "write"),
    ("ignoreParseErrors", "skip", "expected true or false", "read"),
    ("skippedBundlesPath", "", "expected a directory path or a URI", "read"),
    ("readStatsPath", "nosuchfs://bucket/x", "unknown filesystem 'nosuchfs'", "read"),
    ("skippedBundlesPath", "nosuchfs://bucket/x", "unknown filesystem 'nosuchfs'", "read"),
    ("skippedBundlesPath", "/tmp/skips", "needs payloadFormat=inlongmsg and ignoreParseErrors=true", "read"),
    ("deferOnOutage", "later", "expected true or false", "read"),
    ("deferredRangesPath", "", "expected a directory path or a URI", "read"),
    ("deferredRangesPath", "nosuchfs://bucket/x", "unknown filesystem 'nosuchfs'", "read"),
    ("bundleMaxBytes", "100", "expected at least 1024 bytes", "write"),
    ("bundleMaxBytes", "big", "expected a positive integer", "write"),
    ("bundleMaxRows", "0", "expected a positive integer", "write"),
    ("bundleLingerMs", "-1", "expected a non-negative integer", "write"),
    ("bundleCompression", "gzip", "expected snappy or none", "write"),
]


@pytest.mark.parametrize(("key", "value", "message", "mode"), MORE_BAD_VALUES)
def test_more_bad_values_name_option_and_value(key, value, message, mode):
    raw = {"master": "127.0.0.1:8715", "topic": "events", "group": "etl_group", key: value}
    with pytest.raises(OptionError, match=message) as error:
        TubeMQOptions.from_raw(raw, mode=mode)
    assert key in str(error.value)


def test_every_option_has_a_bad_value_case():
    """A new option must come with a bad value in one of the tables (this file's only job for issue 10)."""
    covered = {key for key, *_ in BAD_VALUES} | {key for key, *_ in MORE_BAD_VALUES}
    missing = [spec.name for spec in OPTIONS if spec.name not in covered]
    assert not missing, f"options without a bad-value test case: {missing}"


def test_payload_format_options():
    opts = parse(payloadFormat="InLongMsg", ignoreParseErrors="true", skippedBundlesPath="/tmp/tubespark-skips")
    assert opts.inlongmsg and opts.payload_format == "inlongmsg" and opts.ignore_parse_errors
    assert opts.skipped_bundles_path == "/tmp/tubespark-skips"
    assert not parse().inlongmsg and parse().ignore_parse_errors is False
    write = TubeMQOptions.from_raw({"master": "h:1", "payloadFormat": "inlongmsg", "bundleMaxBytes": "65536",
                                    "bundleLingerMs": "0", "bundleCompression": "NONE"}, mode="write")
    assert (write.bundle_max_bytes, write.bundle_max_rows, write.bundle_linger_ms, write.bundle_compression) == \
        (65536, 500, 0, "none")
    defaults = TubeMQOptions.from_raw({"master": "h:1"}, mode="write")
    assert (defaults.payload_format, defaults.bundle_max_bytes, defaults.bundle_linger_ms,
            defaults.bundle_compression) == ("raw", None, 200, "snappy")


def test_a_bad_value_is_refused_before_any_network_call(monkeypatch):
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("an option was checked over the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    with pytest.raises(OptionError):
        parse(requestTimeoutMs="0")


def test_offset_json():
    opts = parse(startingOffsets='{"1:events:0": 280, "1:events:10000": -2}', endingOffsets=" LATEST ")
    assert opts.starting_offsets == {"1:events:0": 280, "1:events:10000": -2}
    assert opts.ending_offsets == "latest"


def test_partition_keys_are_checked_with_the_wire_parser():
    assert is_partition_key("1:events:0") and is_partition_key("12:a_b:10001")
    assert not any(map(is_partition_key, ["1:events", "events:0", "1::0", "1:events:x", "+1:events:0",
                                          "1:events: 0"]))


def test_required_and_protected_options():
    with pytest.raises(OptionError, match="option master is required"):
        TubeMQOptions.from_raw({"topic": "events"}, mode="read")
    with pytest.raises(OptionError, match="option group is required"):
        TubeMQOptions.from_raw({"master": "h:1", "topic": "events"}, mode="read", required=("group",))
    with pytest.raises(OptionError, match="use group instead"):
        parse(**{"tubemq.groupName": "other"})
    with pytest.raises(OptionError, match=r"auth\.user is not"):
        parse(**{"auth.password": "secret"})
    with pytest.raises(OptionError, match="needs dedupAttribute"):
        parse(dedupe="true")


def test_modes():
    write = TubeMQOptions.from_raw({"master": "h:1", "maxInFlight": "8"}, mode="write")
    assert write.max_in_flight == 8 and write.topics is None
    assert write.group is None  # read-only option: not parsed for writes
    read = parse(maxInFlight="8")  # write-only option on a read: its default
    assert read.max_in_flight == 64
    with pytest.raises(OptionError, match="writes to one topic"):
        TubeMQOptions.from_raw({"master": "h:1", "topic": "a1,b1"}, mode="write")


def test_per_call_defaults():
    opts = TubeMQOptions.from_raw(BASE, mode="read", defaults={"startingOffsets": "earliest"})
    assert opts.starting_offsets == "earliest"
    assert parse().starting_offsets == "latest"
    explicit = TubeMQOptions.from_raw({**BASE, "startingoffsets": "latest"}, mode="read",
                                      defaults={"startingOffsets": "earliest"})
    assert explicit.starting_offsets == "latest"


@pytest.mark.parametrize("spelled", ["maxOffsetPerTrigger", "maxoffsetpertrigger", "MAXOFFSETPERTRIGGER"])
def test_a_misspelt_option_fails_naming_the_closest_one_as_documented(spelled):
    # Spark lower-cases the keys of the option map: the suggestion is still in the Options page's spelling
    with pytest.raises(OptionError, match=rf"^unknown option '{spelled}' for format\('tubemq'\): did you mean "
                                          r"maxOffsetsPerTrigger\?"):
        parse(**{spelled: "5"})


def test_an_option_like_no_other_fails_without_a_guess():
    with pytest.raises(OptionError, match=r"^unknown option 'colour' for format\('tubemq'\): remove it, or "
                                          r"correct its name"):
        parse(colour="blue")


@pytest.mark.parametrize("mode", ["read", "write"])
def test_options_spark_passes_itself_are_allowed(mode):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a streaming sink gets checkpointLocation and queryName from Spark
        # as PySpark 4.3 passes them: lower-cased (checkpointlocation, queryname), paths from load([...])
        for own in ({"checkpointLocation": "/tmp/ck", "path": "x"},
                    {"checkpointlocation": "/tmp/ck", "queryname": "q", "path": "x"}, {"paths": '["a","b"]'}):
            TubeMQOptions.from_raw({**BASE, **own}, mode=mode)


def test_option_error_is_a_tubespark_error_and_a_value_error():
    assert issubclass(OptionError, TubeSparkError) and issubclass(OptionError, ValueError)


def test_credentials_and_tls():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opts = parse(**{"auth.user": "alice", "auth.password": "pw", "tubemq.tlsEnable": "true"})
    settings = opts.client_settings()
    assert settings.credentials.user == "alice" and settings.ssl_context is not None


def test_core_framework_on_its_own():
    specs = (OptionSpec("flagOn", "false", parse_bool, "A flag.", applies="both"),
             OptionSpec("name", None, lambda n, v: v.upper(), "A name.", required=True, applies="write"))
    assert parse_raw({"FLAGON": "yes", "name": "x"}, specs, mode="write") == {"flag_on": True, "name": "X"}
    assert parse_raw({"flagon": "no"}, specs, mode="read") == {"flag_on": False, "name": None}
    with pytest.raises(OptionError, match="option name is required"):
        parse_raw({}, specs, mode="write")
    with pytest.raises(OptionError, match="use name instead"):
        parse_raw({"Old.Name": "x"}, specs, mode="read", protected={"old.name": "name"})
    assert render_table(specs, "read") == ("| option | default | applies to | meaning |\n|---|---|---|---|\n"
                                           "| `flagOn` | `false` | both | A flag. |")
    with pytest.raises(ValueError, match="applies"):
        OptionSpec("x", None, parse_bool, "X.", applies="sometimes")


def test_the_options_page_says_option_names_are_case_insensitive():
    page = (Path(__file__).parents[3] / "docs" / "reference" / "options.md").read_text()
    assert "case-insensitive" in page and "case-sensitive" not in page.replace("case-insensitive", "")


@pytest.mark.parametrize(("text", "ms"), [("250", 250), ("500ms", 500), ("30s", 30_000), ("15m", 900_000),
                                          ("2min", 120_000), ("1h", 3_600_000), ("1d", 86_400_000)])
def test_trigger_delay_takes_sparks_duration_forms(text, ms):
    assert parse(maxTriggerDelay=text).max_trigger_delay_ms == ms


@pytest.mark.parametrize(("text", "size"), [("1000", 1000), ("512k", 512 * 1024), ("10m", 10 << 20),
                                            ("10MB", 10 << 20), ("1g", 1 << 30)])
def test_byte_budget_takes_sparks_size_forms(text, size):
    assert parse(maxBytesPerTrigger=text).max_bytes_per_trigger == size


def test_min_offsets_above_max_offsets_is_refused():
    with pytest.raises(OptionError, match="minOffsetsPerTrigger=50 is above maxOffsetsPerTrigger=10"):
        parse(minOffsetsPerTrigger="50", maxOffsetsPerTrigger="10")


def test_start_times_parse_per_partition():
    options = parse(startingOffsetsByTimestamp='{"1:events:0": 1700000000000}', endingTimestamp="1700000600000")
    assert options.starting_offsets_by_timestamp == {"1:events:0": 1700000000000}
    assert (options.ending_timestamp, options.starting_offsets_by_timestamp_strategy) == (1700000600000, "error")


def test_reading_needs_exactly_one_of_topic_and_topic_pattern():
    with pytest.raises(OptionError, match=r"exactly one of the options topic .* and topicPattern"):
        TubeMQOptions.from_raw({"master": "127.0.0.1:8715", "group": "etl_group"}, mode="read")
    with pytest.raises(OptionError, match="exactly one of the options topic"):
        parse(topicPattern="events_.*")
    options = TubeMQOptions.from_raw({"master": "10.0.0.1:8715,10.0.0.2:8715", "topicPattern": "events_.*"},
                                     mode="read")
    assert options.topic_pattern.fullmatch("events_eu") and not options.topic_pattern.fullmatch("my_events_eu")
    assert options.web_urls() == ("http://10.0.0.1:8080", "http://10.0.0.2:8080")


def test_broker_address_map_reaches_the_client_settings() -> None:
    options = TubeMQOptions.from_raw({"master": "m:8715", "topic": "tt", "group": "g1",
                                      "brokerAddressMap": "10.0.0.5:8123=127.0.0.1:18123, 10.0.0.6:8123=gw:9000"},
                                     mode="read")
    assert dict(options.client_settings().broker_address_map) == {"10.0.0.5:8123": "127.0.0.1:18123",
                                                                   "10.0.0.6:8123": "gw:9000"}
    assert TubeMQOptions.from_raw({"master": "m:8715", "topic": "tt", "group": "g1"},
                                  mode="read").client_settings().broker_address_map == ()
