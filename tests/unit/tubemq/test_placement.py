"""Configured versus served partitions (the master's RPC view and its web API), and the batch read's check built
on them."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.doubles.fakebroker import FakeBroker, FakeMaster
from tests.doubles.fakepeer import closed_port_address
from tests.doubles.fakeweb import FakeDeploy, FakeMasterWeb
from tests.readers import TubeBatchReader
from tubespark.apps import backfill
from tubespark.errors import PartitionsUnavailableError, UnknownTopicError
from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.client.configured import configured_by_master
from tubespark.tubemq.client.placement import configured_partitions
from tubespark.tubemq.errors import AdminApiError, ConfigurationUnknownError, RpcError
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.constants import Method

TOPIC = "topic_w"
FAST = {"connectTimeoutMs": "1000", "requestTimeoutMs": "1000", "heartbeatIntervalMs": "50"}


@pytest.fixture
def web() -> Iterator[FakeMasterWeb]:
    with FakeMasterWeb() as fake:
        yield fake


def test_a_broker_that_does_not_run_keeps_its_partitions_configured(web):
    web.topics[TOPIC] = [FakeDeploy(1), FakeDeploy(2, running=False), FakeDeploy(3, accept_subscribe=False)]
    placement = configured_partitions([web.url], [TOPIC, "other_topic"])
    assert placement.partitions == {TOPIC: {f"{b}:{TOPIC}:{p}" for b in (1, 2, 3) for p in (0, 10000)}}
    assert placement.is_configured(f"2:{TOPIC}:10000") and not placement.is_configured(f"4:{TOPIC}:0")
    assert not placement.is_configured(f"1:{TOPIC}:1")  # numPartitions=1: no index 1 in a store
    assert placement.offline_brokers == {2} and placement.running_brokers == {1, 3}
    assert placement.unserved() == {2: (f"2:{TOPIC}:0", f"2:{TOPIC}:10000"), 3: (f"3:{TOPIC}:0", f"3:{TOPIC}:10000")}
    assert placement.describe_broker(2) == ("broker 2 (127.0.0.2:8123): the broker is not running at the master "
                                            "(down, stopped, stalled or offline)")
    assert "not open for subscription" in placement.describe_broker(3)
    listed = [f"1:{TOPIC}:0", f"1:{TOPIC}:10000", f"3:{TOPIC}:0"]
    assert placement.missing_from(listed) == {2: (f"2:{TOPIC}:0", f"2:{TOPIC}:10000"), 3: (f"3:{TOPIC}:10000",)}
    assert placement.deployment_of(f"2:{TOPIC}:0").num_stores == 2  # type: ignore[union-attr]
    assert web.forms[0]["topicName"] == f"other_topic,{TOPIC}"  # one call for every topic


def test_a_deleted_deployment_is_not_configured(web):
    web.topics[TOPIC] = [FakeDeploy(1), FakeDeploy(2, status_id=1, running=False)]  # soft-deleted on broker 2
    placement = configured_partitions([web.url], [TOPIC])
    assert placement.partitions[TOPIC] == {f"1:{TOPIC}:0", f"1:{TOPIC}:10000"}
    assert not placement.is_configured(f"2:{TOPIC}:0")
    assert placement.missing_from([f"1:{TOPIC}:0", f"1:{TOPIC}:10000"]) == {}
    assert placement.offline_brokers == frozenset()


def test_each_master_is_asked_in_turn(web):
    web.topics[TOPIC] = [FakeDeploy(1)]
    closed = f"http://{closed_port_address()}"
    assert len(configured_partitions([closed, web.url], [TOPIC]).partitions[TOPIC]) == 2
    with pytest.raises(AdminApiError, match="no master web API answered"):
        configured_partitions([closed], [TOPIC], timeout_s=1)


# --- the batch read on top of it -------------------------------------------------------------------------


@pytest.fixture
def cluster(web) -> Iterator[tuple[FakeBroker, FakeBroker, FakeMaster, FakeMasterWeb]]:
    """Brokers 1 and 2 with the topic; the master has released broker 2 (it went down)."""
    with FakeBroker(1) as one, FakeBroker(2) as two:
        for broker in (one, two):
            broker.add_topic(TOPIC, stores=2)
            for ref in broker.partitions(TOPIC):
                broker.append(ref, b"a", b"b", b"c")
        with FakeMaster(one, others=[two]) as master:
            master.release(two)
            web.topics[TOPIC] = [FakeDeploy(1), FakeDeploy(2, running=False)]
            yield one, two, master, web


def test_the_masters_rpc_view_lists_every_configured_partition_served_or_not(cluster):
    _one, two, master, _web = cluster
    placement = configured_by_master(master.address, [TOPIC], ClientSettings(request_timeout_s=2))
    assert placement.partitions == {TOPIC: {f"{b}:{TOPIC}:{p}" for b in (1, 2) for p in (0, 10000)}}
    assert placement.unserved() == {2: (f"2:{TOPIC}:0", f"2:{TOPIC}:10000")}
    assert placement.describe_broker(2).startswith(f"broker 2 ({two.address}): the master does not offer the topic")
    [register] = master.requests_of(Method.CONSUMER_REGISTER_V2)
    assert register.groupName.startswith("tubespark-config-probe-") and list(register.topicList) == [TOPIC]
    assert master.consumers_v2 == {}  # it left
    master.unsupported.add(Method.CONSUMER_REGISTER_V2)  # an older master
    with pytest.raises(RpcError, match="Unsupported method ID"):
        configured_by_master(master.address, [TOPIC], ClientSettings(request_timeout_s=2))


def _options(master: FakeMaster, **extra: str) -> TubeMQOptions:
    return TubeMQOptions.from_raw({"master": master.address, "topic": TOPIC, "startingOffsets": "earliest", **FAST,
                                   **extra}, mode="read")


def test_a_batch_read_with_a_broker_down_fails_naming_the_broker_and_its_partitions(cluster):
    _one, _two, master, web = cluster
    with pytest.raises(PartitionsUnavailableError) as failed:
        TubeBatchReader(_options(master, masterWebUrl=web.url)).plan()
    gone = (f"2:{TOPIC}:0", f"2:{TOPIC}:10000")
    assert failed.value.unavailable == {2: gone} and failed.value.retriable
    text = str(failed.value)
    assert f"batch read of {TOPIC}: 2 of its 4 partitions" in text and "nothing was read" in text
    assert "broker 2 (127.0.0.2:8123): the broker is not running at the master" in text
    assert all(key in text for key in gone) and "onUnavailablePartitions=skip" in text


def test_skip_reads_the_rest_and_says_what_it_left_out(cluster, caplog):
    _one, _two, master, web = cluster
    reader = TubeBatchReader(_options(master, masterWebUrl=web.url, onUnavailablePartitions="skip"))
    with caplog.at_level(logging.WARNING, logger="tubespark.tubemq.spark.availability"):
        tasks = reader.plan()
    assert [(t.ref.key, t.start, t.end) for t in tasks] == [(f"1:{TOPIC}:0", 0, 84), (f"1:{TOPIC}:10000", 0, 84)]
    assert reader.left_out == {2: (f"2:{TOPIC}:0", f"2:{TOPIC}:10000")}
    [warning] = [r.getMessage() for r in caplog.records if "LEAVES OUT" in r.getMessage()]
    assert "LEAVES OUT 2 of its 4 partitions" in warning and f"2:{TOPIC}:0, 2:{TOPIC}:10000" in warning


def _no_web_api_at_the_guess(monkeypatch) -> None:
    """masterWebUrl unset and nothing at the guess (port 8080 of the master host): a cluster whose webPort differs."""
    monkeypatch.setattr(TubeMQOptions, "web_urls", lambda self: (f"http://{closed_port_address()}",))


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_without_the_web_api_a_broker_down_still_fails_the_read(cluster, caplog, monkeypatch):
    """Issue 37: with the web API elsewhere than the guess, a read returned the served two thirds with only a
    warning. The master's RPC view of its configuration names broker 2's partitions: the read fails."""
    _one, _two, master, _web = cluster
    _no_web_api_at_the_guess(monkeypatch)
    with caplog.at_level(logging.WARNING), pytest.raises(PartitionsUnavailableError) as failed:
        TubeBatchReader(_options(master)).plan()
    gone = (f"2:{TOPIC}:0", f"2:{TOPIC}:10000")
    assert failed.value.unavailable == {2: gone} and failed.value.retriable
    text = str(failed.value)
    assert f"batch read of {TOPIC}: 2 of its 4 partitions" in text and "nothing was read" in text
    assert f"broker 2 ({two_address(master)})" in text and "does not offer the topic to consumers" in text
    assert _warnings(caplog) == []
    assert master.consumers_v2 == {}  # the probe member left


def two_address(master: FakeMaster) -> str:
    return master.brokers[1].address


def test_a_read_that_can_check_logs_no_warning_and_skips_the_web_api(cluster, caplog, monkeypatch):
    _one, _two, master, web = cluster
    master.released.clear()  # all brokers serve
    monkeypatch.setattr(TubeMQOptions, "web_urls", lambda self: (web.url,))
    with caplog.at_level(logging.WARNING):
        tasks = TubeBatchReader(_options(master)).plan()
    assert {t.ref.broker_id for t in tasks} == {1, 2} and len(tasks) == 4
    assert _warnings(caplog) == [] and web.forms == []  # nothing missing: nothing to ask the web API
    _no_web_api_at_the_guess(monkeypatch)  # ... and none at all: the same
    with caplog.at_level(logging.WARNING):
        assert len(TubeBatchReader(_options(master)).plan()) == 4
    assert _warnings(caplog) == []


def test_the_web_api_says_why_and_knows_a_deployment_being_deleted(cluster, monkeypatch):
    """What the RPC view finds missing, the (guessed) web API explains when it answers."""
    _one, _two, master, web = cluster
    monkeypatch.setattr(TubeMQOptions, "web_urls", lambda self: (web.url,))
    with pytest.raises(PartitionsUnavailableError, match="the broker is not running at the master"):
        TubeBatchReader(_options(master)).plan()
    web.topics[TOPIC] = [FakeDeploy(1), FakeDeploy(2, status_id=1, running=False)]  # soft-deleted on broker 2
    tasks = TubeBatchReader(_options(master)).plan()
    assert {t.ref.broker_id for t in tasks} == {1}  # not configured: not missing


def test_when_nothing_tells_the_configuration_the_read_fails_naming_master_web_url(cluster, caplog, monkeypatch):
    """A master without the client-balance calls and no web API at the guess: even with every broker up the read
    cannot tell a complete read from a partial one, so it fails, saying which option fixes it."""
    _one, _two, master, _web = cluster
    master.unsupported.update({Method.CONSUMER_REGISTER_V2, Method.CONSUMER_GET_PART_META})
    _no_web_api_at_the_guess(monkeypatch)
    for released in ({2}, set()):  # a broker down, and all up
        master.released = set(released)
        with caplog.at_level(logging.WARNING), pytest.raises(ConfigurationUnknownError) as failed:
            TubeBatchReader(_options(master)).plan()
        text = str(failed.value)
        assert text.startswith(f"batch read of {TOPIC} cannot check that every configured partition is served")
        assert "Unsupported method ID" in text and "no master web API answered" in text
        assert "nothing was read" in text and "Set masterWebUrl" in text
        assert "webPort in the master's master.ini, 8080 by default" in text
        assert "onUnavailablePartitions=skip" in text and not failed.value.retriable
        assert _warnings(caplog) == []


def test_skip_without_the_configuration_reads_what_is_listed_and_warns(cluster, caplog, monkeypatch):
    _one, _two, master, _web = cluster
    master.unsupported.update({Method.CONSUMER_REGISTER_V2, Method.CONSUMER_GET_PART_META})
    _no_web_api_at_the_guess(monkeypatch)
    reader = TubeBatchReader(_options(master, onUnavailablePartitions="skip"))
    with caplog.at_level(logging.WARNING):
        tasks = reader.plan()
    assert {t.ref.broker_id for t in tasks} == {1} and reader.left_out == {}  # what is left out is not known
    [warning] = _warnings(caplog)
    assert "cannot check that every configured partition is served" in warning
    assert "onUnavailablePartitions=skip" in warning and "set masterWebUrl" in warning


def test_an_export_that_could_not_check_fails_or_does_not_claim_to_be_complete(cluster, monkeypatch, capsys):
    """backfill export plans with the batch reader: without the configuration it fails (exit 2 through main), and
    with skip it exits 3 ("complete except what it says"), never 0."""
    _one, _two, master, _web = cluster
    master.unsupported.update({Method.CONSUMER_REGISTER_V2, Method.CONSUMER_GET_PART_META})
    _no_web_api_at_the_guess(monkeypatch)
    argv = ["export", "--master", master.address, "--topic", TOPIC, "--output", "unused", "--starting", "latest"]
    with pytest.raises(ConfigurationUnknownError, match="Set masterWebUrl"):
        backfill.export(None, backfill.parser().parse_args(argv))  # type: ignore[arg-type]  # fails before Spark
    code = backfill.export(None, backfill.parser().parse_args([*argv, "--on-unavailable-partitions", "skip"]))  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert code == backfill.EXIT_LEFT_OUT and "export: COULD NOT CHECK" in err and "--master-web-url" in err, err


def test_a_master_without_the_rpc_view_is_checked_through_the_guessed_web_api(cluster, caplog, monkeypatch):
    _one, _two, master, web = cluster
    master.unsupported.update({Method.CONSUMER_REGISTER_V2, Method.CONSUMER_GET_PART_META})
    monkeypatch.setattr(TubeMQOptions, "web_urls", lambda self: (web.url,))
    with pytest.raises(PartitionsUnavailableError, match=r"broker 2 \(127\.0\.0\.2:8123\): the broker is not running"):
        TubeBatchReader(_options(master)).plan()
    master.released.clear()
    web.topics[TOPIC] = [FakeDeploy(1), FakeDeploy(2)]
    with caplog.at_level(logging.WARNING):
        assert len(TubeBatchReader(_options(master)).plan()) == 4
    assert _warnings(caplog) == []


def test_a_given_master_web_url_that_does_not_answer_is_reported(cluster):
    _one, _two, master, _web = cluster
    with pytest.raises(AdminApiError, match="no master web API answered"):  # given explicitly: a mistake
        TubeBatchReader(_options(master, masterWebUrl=f"http://{closed_port_address()}")).plan()


def test_a_topic_whose_only_broker_is_down_is_unavailable_and_an_undeployed_one_unknown(cluster):
    one, _two, master, web = cluster
    master.release(one)  # nothing of the topic is listed any more
    with pytest.raises(PartitionsUnavailableError, match="4 of its 4 partitions"):
        TubeBatchReader(_options(master, masterWebUrl=web.url)).plan()
    web.topics.clear()  # and the configuration does not know it either: a topic that does not exist
    with pytest.raises(UnknownTopicError, match="not deployed or was deleted"):
        TubeBatchReader(_options(master, masterWebUrl=web.url)).plan()


def test_a_broker_the_master_still_lists_but_that_does_not_answer_is_unavailable_too(cluster, caplog):
    """A crashed broker is listed until its heartbeat times out at the master; probing it fails at once."""
    _one, two, master, web = cluster
    master.released.clear()  # the master has not noticed yet ...
    web.topics[TOPIC] = [FakeDeploy(1), FakeDeploy(2)]  # ... and its configuration says broker 2 runs
    two.close()  # but it is gone
    with pytest.raises(PartitionsUnavailableError, match="listed by the master but not answering") as failed:
        TubeBatchReader(_options(master, masterWebUrl=web.url)).plan()
    assert failed.value.unavailable == {2: (f"2:{TOPIC}:0", f"2:{TOPIC}:10000")}
    reader = TubeBatchReader(_options(master, masterWebUrl=web.url, onUnavailablePartitions="skip"))
    with caplog.at_level(logging.WARNING, logger="tubespark.tubemq.spark.availability"):
        tasks = reader.plan()
    assert {t.ref.broker_id for t in tasks} == {1} and reader.left_out == {2: (f"2:{TOPIC}:0", f"2:{TOPIC}:10000")}
    assert any("LEAVES OUT 2 of its 4 partitions" in r.getMessage() for r in caplog.records)
