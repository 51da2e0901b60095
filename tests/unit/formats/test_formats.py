"""Text formats inside protobuf string fields (docs/tubemq/protocol.md#text-formats-in-string-fields)."""

from __future__ import annotations

import pytest

from tubespark.errors import MessageFormatError
from tubespark.tubemq.wire.formats import (
    MAX_TOPIC_PARTITIONS,
    BrokerInfo,
    ConfiguredDeployment,
    PartitionRef,
    TopicLayout,
    parse_subscribe_info,
    subscribe_info,
)

# --- broker info ------------------------------------------------------------------------------------


def test_broker_info_parse() -> None:
    info = BrokerInfo.parse("3:10.0.0.7:8125")
    assert info == BrokerInfo(3, "10.0.0.7", 8125)
    assert info.address == "10.0.0.7:8125"


@pytest.mark.parametrize("text", ["1:127.0.0.1: ", "1:127.0.0.1:"])
def test_broker_info_blank_port_means_8123(text: str) -> None:
    assert BrokerInfo.parse(text) == BrokerInfo(1, "127.0.0.1", 8123)


@pytest.mark.parametrize("text", ["", "1:127.0.0.1", "1:h:2:3", "x:127.0.0.1:8123", "1:127.0.0.1:port"])
def test_bad_broker_info(text: str) -> None:
    with pytest.raises(MessageFormatError):
        BrokerInfo.parse(text)


@pytest.mark.parametrize("text", ["1:127.0.0.1:65536", "1:127.0.0.1:-1", "1:h:2147483648"])
def test_broker_info_with_a_port_outside_0_65535_is_refused(text: str) -> None:
    # issue 13 fuzzing: such a port used to parse, then failed as a plain ValueError when connecting
    with pytest.raises(MessageFormatError, match=r"outside 0\.\.65535"):
        BrokerInfo.parse(text)
    with pytest.raises(MessageFormatError):
        PartitionRef.parse_wire(f"{text}#t:0")


def test_broker_info_port_bounds_are_accepted() -> None:
    assert [BrokerInfo.parse(f"1:h:{port}").port for port in (0, 65535)] == [0, 65535]


# --- partitions -------------------------------------------------------------------------------------


def test_partition_key_and_wire_string() -> None:
    part = PartitionRef(2, "orders", 10001, "10.0.0.2", 8123)
    assert part.key == "2:orders:10001"
    assert part.wire_string() == "2:10.0.0.2:8123#orders:10001"
    assert part.store_id == 1
    assert part.broker == BrokerInfo(2, "10.0.0.2", 8123)


@pytest.mark.parametrize("topic", ["orders", "my_topic_v2", "a_b_c", "t"])
def test_partition_round_trips(topic: str) -> None:
    part = PartitionRef(12, topic, 20003, "broker-a", 8124)
    assert PartitionRef.parse_wire(part.wire_string()) == part
    assert PartitionRef.parse_key(part.key) == (12, topic, 20003)


def test_parse_wire_with_blank_port_defaults_to_8123() -> None:
    assert PartitionRef.parse_wire("1:h: #t:0") == PartitionRef(1, "t", 0, "h", 8123)


@pytest.mark.parametrize("text", ["", "1:h:8123", "1:h:8123#t", "1:h:8123#t:x", "1:h:8123#:0", "1:h#t:0",
                                  "x:h:8123#t:0"])
def test_bad_partition_wire_strings(text: str) -> None:
    with pytest.raises(MessageFormatError):
        PartitionRef.parse_wire(text)


@pytest.mark.parametrize("key", ["", "1", "1:t", "1::0", "x:t:0", "1:t:x", ":t:0"])
def test_bad_partition_keys(key: str) -> None:
    with pytest.raises(MessageFormatError):
        PartitionRef.parse_key(key)


# --- subscribe info ---------------------------------------------------------------------------------


def test_subscribe_info_round_trip() -> None:
    part = PartitionRef(1, "my_topic", 10000, "127.0.0.1", 8123)
    consumer = "grp_1_127.0.0.1-1234-1700000000000-1-Pull-2.5.0"
    text = subscribe_info(consumer, "grp_1", part)
    assert text == f"{consumer}@grp_1#1:127.0.0.1:8123#my_topic:10000"
    assert parse_subscribe_info(text) == (consumer, "grp_1", part)


@pytest.mark.parametrize("text", ["", "c@g", "cg#1:h:8123#t:0", "c@g#1:h:8123", "c@g#garbage"])
def test_bad_subscribe_info(text: str) -> None:
    with pytest.raises(MessageFormatError):
        parse_subscribe_info(text)


# --- producer topic layout --------------------------------------------------------------------------


BROKERS = {1: BrokerInfo(1, "10.0.0.1", 8123), 2: BrokerInfo(2, "10.0.0.2", 8123)}


def test_topic_layout_parse() -> None:
    layout = TopicLayout.parse("t#1:2:3,2:1:1#1048576", BROKERS)
    assert layout.topic == "t"
    assert layout.max_msg_size == 1048576
    by_broker = {b: [p.partition_id for p in layout.partitions if p.broker_id == b] for b in (1, 2)}
    assert by_broker == {1: [0, 1, 10000, 10001, 20000, 20001], 2: [0]}
    assert all(p.topic == "t" for p in layout.partitions)
    assert {p.host for p in layout.partitions if p.broker_id == 2} == {"10.0.0.2"}


@pytest.mark.parametrize("text", ["t#1:1:1#", "t#1:1:1# ", "t#1:1:1"])
def test_topic_layout_without_max_size(text: str) -> None:
    layout = TopicLayout.parse(text, BROKERS)
    assert layout.max_msg_size is None
    assert [p.key for p in layout.partitions] == ["1:t:0"]


def test_topic_layout_with_unknown_broker_keeps_its_partitions() -> None:
    layout = TopicLayout.parse("my_t#9:1:2#", BROKERS)
    assert [(p.broker_id, p.partition_id, p.host) for p in layout.partitions] == [(9, 0, ""), (9, 10000, "")]


@pytest.mark.parametrize("text", [
    "t",                  # no partition segment
    "#1:1:1#100",         # no topic
    "t#1:1#100",          # two numbers instead of three
    "t#1:a:1#100",        # not a number
    "t#1:1:1:1#100",      # four numbers
    "t#1:1:1#big",        # bad max size
    "t#1:-1:1#",          # negative partition count
    "t#1:1:-1#",          # negative store count
    "t#1:10001:1#",       # more partitions per store than ids can tell apart (store*10000 + index)
])
def test_bad_topic_layouts(text: str) -> None:
    with pytest.raises(MessageFormatError):
        TopicLayout.parse(text, BROKERS)


@pytest.mark.parametrize("text", [
    "t#1:10000:10#",              # issue 13 fuzzing: 13 characters made 100,000 partitions (137 ms)
    "t#1:10000:2147483647#",      # ... or 2e13 of them (memory exhausted)
    "t#1:10000:1,2:1:1#",         # the bound is on the whole line, not per broker
])
def test_topic_layout_expanding_past_the_partition_limit_is_refused(text: str) -> None:
    with pytest.raises(MessageFormatError, match="more than 10000 partitions"):
        TopicLayout.parse(text, BROKERS)


def test_topic_layout_at_the_partition_limit_is_accepted() -> None:
    assert len(TopicLayout.parse("t#1:5000:1,2:5000:1#", BROKERS).partitions) == MAX_TOPIC_PARTITIONS


# --- client-balance topicMetaInfo: the configured deployments ---------------------------------------


def test_topic_meta_info_lists_every_deployment_stores_before_partitions() -> None:
    items = ConfiguredDeployment.parse_all("t#1:2:3:1,2:1:4:0")
    assert items == [ConfiguredDeployment("t", 1, 2, 3, True), ConfiguredDeployment("t", 2, 1, 4, False)]
    assert ConfiguredDeployment.parse_all("t#") == []


@pytest.mark.parametrize("text", [
    "t",                 # no deployment segment
    "#1:1:1:1",          # no topic
    "t#1:1:1",           # three numbers instead of four
    "t#1:a:1:1",         # not a number
    "t#1:1:-1:1",        # negative partition count
    "t#1:-1:1:1",        # negative store count
    "t#1:1:10001:1",     # more partitions per store than ids allow
    "t#1:10:10000:1",    # expands past the partition limit
])
def test_bad_topic_meta_infos(text: str) -> None:
    with pytest.raises(MessageFormatError):
        ConfiguredDeployment.parse_all(text)
