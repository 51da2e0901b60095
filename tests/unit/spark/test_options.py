"""The options the brokers share (tubespark.spark.options): defined once, parsed the same on every broker, the
old name of a renamed option working with a warning, and the Options page's tables (docs/reference/options.md)
made from the definitions."""

from __future__ import annotations

import warnings

import pytest

from scripts.docs_options import BLOCKS, PAGE, generated, tables
from tubespark.core.settings import ConnectionSettings
from tubespark.errors import OptionError
from tubespark.rocketmq.client.client import ClientSettings as RocketMQSettings
from tubespark.rocketmq.spark import options as rocketmq
from tubespark.spark.options import (
    COMMIT_TO_GROUP,
    EVERY_BROKER,
    GROUP,
    ON_UNAVAILABLE_PARTITIONS,
    SHARED,
    BrokerTerms,
    SharedOptions,
    SharedSpec,
)
from tubespark.tank.client.broker import ClientSettings as TankSettings
from tubespark.tank.spark import options as tank
from tubespark.tubemq.client.common import ClientSettings as TubeMQSettings
from tubespark.tubemq.spark import options as tubemq

# broker -> (its options module, its parsed options class, what a read needs, what a write needs, its settings)
BROKERS = {
    "tubemq": (tubemq, tubemq.TubeMQOptions, {"master": "127.0.0.1:8715", "topic": "events", "group": "etl_group"},
               {"master": "127.0.0.1:8715"}, TubeMQSettings),
    "tank": (tank, tank.TankOptions, {"broker": "127.0.0.1:11011", "topic": "events"},
             {"broker": "127.0.0.1:11011"}, TankSettings),
    "rocketmq": (rocketmq, rocketmq.RocketMQOptions, {"namesrv": "127.0.0.1:9876", "topic": "events"},
                 {"namesrv": "127.0.0.1:9876"}, RocketMQSettings),
}
GROUP_BROKERS = ("tubemq", "rocketmq")  # the brokers that store a group's offsets: commitToGroup


def parse(broker: str, mode: str = "read", **raw: str) -> SharedOptions:
    _, cls, read, write, _ = BROKERS[broker]
    return cls.from_raw({**(read if mode == "read" else write), **raw}, mode=mode)


@pytest.fixture(params=list(BROKERS))
def broker(request: pytest.FixtureRequest) -> str:
    return request.param


def test_every_broker_composes_every_shared_option_from_its_one_definition(broker):
    module, cls, *_ = BROKERS[broker]
    assert issubclass(cls, SharedOptions) and cls.missing_attributes() == (set(), set())
    names = [spec.name for spec in module.OPTIONS]
    assert len(names) == len(set(names))
    for option in EVERY_BROKER:
        spec = next(spec for spec in module.OPTIONS if spec.name == option.name)
        assert isinstance(spec, SharedSpec) and spec.template is option and spec.broker is module.TERMS


def test_what_a_broker_says_of_a_shared_option_applies_to_an_option_it_has(broker):
    module, *_ = BROKERS[broker]
    shared = {spec.name for spec in module.OPTIONS if isinstance(spec, SharedSpec)}
    terms = module.TERMS
    assert {*terms.defaults, *terms.parsers, *terms.notes, *terms.deprecated} <= shared


def test_a_misspelt_shared_option_name_in_broker_terms_fails_at_once():
    with pytest.raises(ValueError, match="notes name options that are not shared: maxInflight"):
        BrokerTerms("X", "topic:partition", "{}", bool, lambda name, value: value, ConnectionSettings,
                    notes={"maxInflight": "per task"})


# the same text on every broker -> the same attribute values (keys lower-cased, as Spark hands them over)
READ_VALUES = {
    "maxoffsetspertrigger": ("500", "max_offsets_per_trigger", 500),
    "maxbytespertrigger": ("64m", "max_bytes_per_trigger", 64 << 20),
    "minoffsetspertrigger": ("100", "min_offsets_per_trigger", 100),
    "maxtriggerdelay": ("30s", "max_trigger_delay_ms", 30_000),
    "maxrecordsperpartition": ("1000", "max_records_per_partition", 1000),
    "failondataloss": ("False", "fail_on_data_loss", False),
    "onunavailablepartitions": (" Skip ", "on_unavailable_partitions", "skip"),  # TANK's too (issue 38)
    "startingoffsets": (" Earliest ", "starting_offsets", "earliest"),
    "endingoffsets": ("LATEST", "ending_offsets", "latest"),
    "connecttimeoutms": ("1500", "connect_timeout_ms", 1500),
    "requesttimeoutms": ("2500", "request_timeout_ms", 2500),
}
WRITE_VALUES = {
    "maxinflight": ("8", "max_in_flight", 8),
    "sendretries": ("0", "send_retries", 0),
    "topic": ("orders", "topics", ("orders",)),
}


def test_shared_options_parse_the_same_on_every_broker(broker):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every one is a known option of every broker
        read = parse(broker, **{key: text for key, (text, _, _) in READ_VALUES.items()})
        write = parse(broker, "write", **{key: text for key, (text, _, _) in WRITE_VALUES.items()})
    assert {attr: getattr(read, attr) for _, attr, _ in READ_VALUES.values()} == \
        {attr: value for _, attr, value in READ_VALUES.values()}
    assert {attr: getattr(write, attr) for _, attr, _ in WRITE_VALUES.values()} == \
        {attr: value for _, attr, value in WRITE_VALUES.values()}


def test_shared_defaults_are_the_same_on_every_broker(broker):
    options = parse(broker)
    assert (options.max_offsets_per_trigger, options.max_bytes_per_trigger, options.min_offsets_per_trigger,
            options.max_trigger_delay_ms) == (None, None, None, 15 * 60_000)
    assert (options.starting_offsets, options.ending_offsets, options.max_records_per_partition,
            options.fail_on_data_loss, options.send_retries) == ("latest", "latest", None, True, 3)
    assert options.on_unavailable_partitions == "fail"


def test_timeout_defaults_come_from_the_brokers_client_settings(broker):
    _, _, _, _, settings_class = BROKERS[broker]
    assert issubclass(settings_class, ConnectionSettings)
    options = parse(broker)
    assert options.connect_timeout_ms == round(settings_class.default("connect_timeout_s") * 1000) == 3000
    assert options.request_timeout_ms == round(settings_class.default("request_timeout_s") * 1000) == 10000
    settings = parse(broker, requestTimeoutMs="2500", connectTimeoutMs="1500").client_settings()
    assert isinstance(settings, settings_class)
    assert (settings.connect_timeout_s, settings.request_timeout_s) == (1.5, 2.5)


BAD_SHARED_VALUES = [  # option, bad value, what the message says, mode
    ("maxOffsetsPerTrigger", "0", "expected a positive integer", "read"),
    ("maxBytesPerTrigger", "10q", "expected a positive size in bytes", "read"),
    ("minOffsetsPerTrigger", "-1", "expected a positive integer", "read"),
    ("maxTriggerDelay", "soon", "expected a duration like", "read"),
    ("maxRecordsPerPartition", "many", "expected a positive integer", "read"),
    ("failOnDataLoss", "maybe", "expected true or false", "read"),
    ("onUnavailablePartitions", "sometimes", "expected fail or skip", "read"),
    ("startingOffsets", "yesterday", "expected earliest | latest", "read"),
    ("endingOffsets", "earliest", "expected latest", "read"),
    ("connectTimeoutMs", "0", "expected a positive integer", "read"),
    ("requestTimeoutMs", "1.5", "expected a positive integer", "write"),
    ("maxInFlight", "0", "expected a positive integer", "write"),
    ("sendRetries", "-1", "expected a non-negative integer", "write"),
]


@pytest.mark.parametrize(("option", "value", "message", "mode"), BAD_SHARED_VALUES)
def test_a_bad_shared_value_fails_the_same_on_every_broker(broker, option, value, message, mode):
    with pytest.raises(OptionError, match=message) as error:
        parse(broker, mode, **{option.lower(): value})
    assert f"option {option}={value!r}" in str(error.value)


def test_offset_json_is_checked_against_the_brokers_own_partition_keys(broker):
    module, *_ = BROKERS[broker]
    with pytest.raises(OptionError, match="bad partition key 'nokey'") as error:
        parse(broker, startingOffsets='{"nokey": 5}')
    assert f"expected {module.TERMS.partition_key}" in str(error.value)


def test_min_offsets_above_max_offsets_is_refused_on_every_broker(broker):
    with pytest.raises(OptionError, match="minOffsetsPerTrigger=50 is above maxOffsetsPerTrigger=10"):
        parse(broker, minOffsetsPerTrigger="50", maxOffsetsPerTrigger="10")


def test_the_sink_writes_to_one_topic_on_every_broker(broker):
    with pytest.raises(OptionError, match="the sink writes to one topic; use a 'topic' column"):
        parse(broker, "write", topic="a1,b1")


def test_a_shared_doc_names_the_brokers_own_key_form_and_notes(broker):
    module, *_ = BROKERS[broker]
    docs = {spec.name: spec.doc for spec in module.OPTIONS}
    assert module.TERMS.partition_key in docs["startingOffsets"] and "<key>" not in docs["startingOffsets"]
    for option in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "maxBytesPerTrigger"):
        assert ("Pull mode only" in docs[option]) == (broker == "rocketmq"), option  # pop mode has its own limit


# --- one name per idea: commitToGroup, RocketMQ's old commitOffsets ------------------------------


@pytest.mark.parametrize("group_broker", GROUP_BROKERS)
def test_commit_to_group_is_one_option_on_both_group_brokers(group_broker):
    module, *_ = BROKERS[group_broker]
    spec = next(spec for spec in module.OPTIONS if spec.name == "commitToGroup")
    assert isinstance(spec, SharedSpec) and spec.template is COMMIT_TO_GROUP
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name never warns
        assert parse(group_broker, commitToGroup="false").commit_to_group is False
    assert parse(group_broker).commit_to_group is True


def test_on_unavailable_partitions_is_one_option_whose_brokers_say_what_unavailable_means(broker):
    module, *_ = BROKERS[broker]
    spec = next(spec for spec in module.OPTIONS if spec.name == "onUnavailablePartitions")
    assert spec.template is ON_UNAVAILABLE_PARTITIONS and spec.doc.startswith(ON_UNAVAILABLE_PARTITIONS.doc)
    assert ("master's configuration" in spec.doc) == (broker == "tubemq")
    assert ("name server" in spec.doc) == (broker == "rocketmq")
    assert ("answered before in this process" in spec.doc) == (broker == "tank")


@pytest.mark.parametrize("group_broker", GROUP_BROKERS)
def test_group_is_one_option_on_both_group_brokers_with_each_brokers_name_rules(group_broker):
    module, *_ = BROKERS[group_broker]
    spec = next(spec for spec in module.OPTIONS if spec.name == "group")
    assert isinstance(spec, SharedSpec) and spec.template is GROUP
    assert spec.doc == f"{GROUP.doc} {module.TERMS.notes['group']}"
    assert parse(group_broker, group=" etl_1 ").group == "etl_1"
    if group_broker == "tubemq":  # TubeMQ: a letter first, 2 to 200 characters
        with pytest.raises(OptionError, match=r"option group='1etl': expected a group name: a letter"):
            parse(group_broker, group="1etl")
    else:  # RocketMQ: its name characters, at most 120
        assert parse(group_broker, group="1etl|a%b").group == "1etl|a%b"
        with pytest.raises(OptionError, match=r"at most 120 chars"):
            parse(group_broker, group="g" * 121)


def test_tank_has_no_group():
    assert "group" not in {spec.name for spec in tank.OPTIONS}


@pytest.mark.parametrize("key", ["commitOffsets", "commitoffsets"])
def test_rocketmqs_old_name_commit_offsets_still_works_and_warns(key, caplog):
    with pytest.warns(FutureWarning, match="rocketmq: option 'commitOffsets' is deprecated: use 'commitToGroup'"):
        options = parse("rocketmq", **{key: "false"})
    assert options.commit_to_group is False
    assert "deprecated" in caplog.text  # also logged: a Spark driver's warnings may go unseen, its log does not


def test_the_old_name_names_itself_in_a_bad_value_message():
    with pytest.warns(FutureWarning), pytest.raises(OptionError, match="option commitOffsets='maybe'"):
        parse("rocketmq", commitOffsets="maybe")


def test_old_and_new_name_together_are_refused():
    with pytest.raises(OptionError, match="give only commitToGroup"):
        parse("rocketmq", commitOffsets="false", commitToGroup="true")


def test_the_old_name_is_only_rocketmqs():
    with pytest.raises(OptionError, match=r"unknown option 'commitOffsets' for format\('tubemq'\): remove it"):
        parse("tubemq", commitOffsets="false")


def test_a_name_close_to_an_old_one_suggests_the_new_name():
    with pytest.raises(OptionError, match=r"unknown option 'commitoffset' for format\('rocketmq'\): did you mean "
                                          r"commitToGroup\?"):
        parse("rocketmq", commitoffset="false")


@pytest.mark.parametrize("mode", ["read", "write"])
def test_every_broker_refuses_a_misspelt_option_in_either_mode(broker, mode):
    with pytest.raises(OptionError, match=rf"unknown option 'maxoffsetpertrigger' for format\('{broker}'\): "
                                          r"did you mean maxOffsetsPerTrigger\?"):
        parse(broker, mode, maxoffsetpertrigger="5")


# --- the Options page -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BLOCKS))
def test_the_option_table_is_generated_from_the_definitions(name):
    found = tables(PAGE.read_text())
    assert name in found, f"docs/reference/options.md lost its {name} block"
    assert found[name] == BLOCKS[name][1](), f"the {name} table is stale: run python scripts/docs_options.py"


def test_the_option_blocks_are_exactly_what_the_script_writes():
    page = PAGE.read_text()
    assert generated(page) == page, "docs/reference/options.md's blocks are stale: run python scripts/docs_options.py"


def test_the_options_page_documents_each_shared_option_once():
    found = tables(PAGE.read_text())
    every_table = "\n".join(found.values())
    for option in SHARED:
        assert every_table.count(f"| `{option.name}` |") == 1, option.name
        assert f"| `{option.name}` |" in found["shared-options"], option.name
    assert "`commitOffsets` still works, with a deprecation warning" in found["shared-options"]
