"""The TubeMQ source and sink on a cluster of three brokers (127.0.0.1-3, ids 1-3), and with one of them down.

One 3-broker cluster, started ahead, serves the whole file (``tubemq_brokers``); a test that takes a broker
down brings it back before it ends. What is checked is what a user sees: exact rows, on which broker, errors
that name the broker and its partitions, and nothing left out without a word. Streams: one query reading
partitions on all three brokers, and two queries of one group splitting them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from tubespark_testbed import ClusterSettings, LocalCluster
from tubespark_testbed.errors import ClusterError

from tests.integration.conftest import TopicPool
from tests.integration.helpers import SharedSession, bodies, produce
from tests.readers import TubeBatchReader
from tubespark.apps import backfill
from tubespark.apps.lag import parse_offsets  # the partitions' offsets, without the marks
from tubespark.errors import PartitionsUnavailableError
from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.client.configured import configured_by_master
from tubespark.tubemq.client.metadata import topic_partitions
from tubespark.tubemq.client.placement import Placement, configured_partitions
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.message import OutgoingMessage

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[3]

# Topics deployed on all three brokers before they start: (partitions, stores) -> count.
TOPIC_POOL: dict[tuple[int, int], int] = {(1, 2): 10, (2, 1): 2, (4, 1): 1}


@contextlib.contextmanager
def _brokers(_tmp: Path) -> Iterator[tuple[LocalCluster, TopicPool]]:
    """A 3-broker cluster (``broker``, ``broker-2``, ``broker-3`` on 127.0.0.1-3, ids 1-3) and its topics."""
    plan = TopicPool.plan(TOPIC_POOL)
    # No memory cache: an acknowledged message is in the segment file, so a broker taken down and brought back
    # still holds it (these tests are about placement; the durability window is test_soak's and test_faults')
    with LocalCluster(brokers=3, topics=[(name, p, s) for (p, s), names in plan.items() for name in names],
                      settings=ClusterSettings().tight_flush(mem_store=False)) as cluster:
        yield cluster, TopicPool(cluster, plan)


PRESTART = {"brokers": _brokers}  # started ahead of this module (tubespark_testbed/prestart.py)
PRESTART_LIGHT = True  # a cluster: mostly waiting while it starts, so it may start beside another


@pytest.fixture(scope="module")
def tubemq_brokers(prestarted) -> tuple[LocalCluster, TopicPool]:
    return prestarted("brokers")


RELEASE_TIMEOUT_S = 40.0  # the testbed's broker heartbeat timeout is 10 s; a graceful stop is released at once


def _read(spark, cluster, topic: str, **options: str):
    return (spark.read.format("tubemq").option("master", cluster.master_address).option("topic", topic)
            .option("masterWebUrl", ",".join(cluster.master_web_urls)).options(**options).load())


def _placement(cluster, topic: str) -> Placement:
    return configured_partitions(cluster.master_web_urls, [topic])


def _wait_released(cluster, topic: str, broker_id: int) -> None:
    """Until the master lists none of ``broker_id``'s partitions of ``topic`` (it released the broker)."""
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while time.monotonic() < deadline:
        listed = topic_partitions(cluster.master_address, [topic], timeout_s=5, missing_ok=True)[topic]
        if listed and broker_id not in {p.broker_id for p in listed}:
            return
        time.sleep(0.5)
    raise AssertionError(f"the master still lists broker {broker_id}'s partitions of {topic} after "
                         f"{RELEASE_TIMEOUT_S:.0f} s")


def _sent(cluster, topic: str, count: int, prefix: str) -> dict[bytes, int]:
    """Send ``count`` messages round-robin; value -> the broker that acknowledged it."""
    results = produce(cluster.master_address, topic, bodies([f"{prefix}{i}".encode() for i in range(count)]))
    return {f"{prefix}{i}".encode(): r.partition.broker_id for i, r in enumerate(results)}


def test_three_brokers_on_their_own_addresses_serve_every_topic(tubemq_brokers):
    cluster, pool = tubemq_brokers
    topic = pool.take(1, 2)
    assert [(b.name, b.broker_id, b.host) for b in cluster.brokers] == [
        ("broker", 1, "127.0.0.1"), ("broker-2", 2, "127.0.0.2"), ("broker-3", 3, "127.0.0.3")]
    assert cluster.broker_address == cluster.brokers[0].address  # the single-broker API: the first broker
    with pytest.raises(ClusterError, match="Duplicated broker configure record, query by brokerIp"):
        cluster.master_admin("admin_add_broker_configure", brokerId=9, brokerIp="127.0.0.2", brokerPort=1)
    for node in cluster.brokers:
        status = cluster.broker_run_status(node.name)
        assert (status["brokerId"], status["brokerIp"], status["runStatus"]) == (node.broker_id, node.host, "running")
    listed = topic_partitions(cluster.master_address, [topic])[topic]
    assert {(p.broker_id, p.host, p.port) for p in listed} == {(b.broker_id, b.host, b.port) for b in cluster.brokers}
    assert len(listed) == 6  # 2 stores x 1 partition on each of the three
    placement = _placement(cluster, topic)
    assert placement.partitions[topic] == {p.key for p in listed}
    assert placement.offline_brokers == frozenset() and placement.missing_from(p.key for p in listed) == {}
    started = time.monotonic()
    rpc = configured_by_master(cluster.master_address, [topic], ClientSettings())  # the same over RPC
    took = time.monotonic() - started
    print(f"configured_by_master: {took * 1000:.0f} ms")  # what a batch read adds to its planning
    assert rpc.partitions == placement.partitions and rpc.unserved() == {} and took < 3.0


def test_batch_read_is_exact_with_rows_from_every_broker(spark, tubemq_brokers):
    cluster, pool = tubemq_brokers
    topic = pool.take(1, 2)
    sent = _sent(cluster, topic, 3000, "b")
    rows = _read(spark, cluster, topic, maxRecordsPerPartition="400").select("value", "brokerId").collect()
    assert sorted(r.value for r in rows) == sorted(sent)  # every message once, nothing else
    assert {r.value: r.brokerId for r in rows} == sent  # each from the broker that acknowledged it
    assert set(Counter(sent.values())) and set(sent.values()) == {1, 2, 3}


def test_sink_spreads_rows_over_the_brokers_and_each_is_acknowledged_once(spark, tubemq_brokers):
    cluster, pool = tubemq_brokers
    topic = pool.take(1, 2)
    plain = spark.createDataFrame([(f"w{i}",) for i in range(3000)], "value string")
    plain.write.format("tubemq").option("master", cluster.master_address).option("topic", topic).mode("append").save()
    keyed = spark.createDataFrame([(f"x{i}", f"k{i % 11}") for i in range(1100)], "value string, partitionKey string")
    keyed.write.format("tubemq").option("master", cluster.master_address).option("topic", topic).mode("append").save()
    back = _read(spark, cluster, topic).select("value", "brokerId", "partitionKey").collect()
    values = Counter(r.value.decode() for r in back)
    assert values == Counter([f"w{i}" for i in range(3000)] + [f"x{i}" for i in range(1100)])  # each once
    per_broker = Counter(r.brokerId for r in back if r.value.startswith(b"w"))
    assert set(per_broker) == {1, 2, 3} and min(per_broker.values()) >= 3000 // 6, per_broker
    partitions_of_key: dict[str, set[str]] = {}
    for r in back:
        if r.value.startswith(b"x"):
            partitions_of_key.setdefault(f"k{int(r.value[1:]) % 11}", set()).add(r.partitionKey)
    assert all(len(parts) == 1 for parts in partitions_of_key.values())  # one key, one partition
    assert len({p for parts in partitions_of_key.values() for p in parts}) > 3  # keys spread over the brokers


def _stream_query(spark, cluster, topic: str, name: str, **options: str):
    """A running stream of ``topic`` into the memory table ``name`` (value, brokerId, partitionKey, offset)."""
    frame = (spark.readStream.format("tubemq").option("master", cluster.master_address).option("topic", topic)
             .option("masterWebUrl", ",".join(cluster.master_web_urls)).option("heartbeatIntervalMs", "1000")
             .options(**options).load())
    return (frame.select("value", "brokerId", "partitionKey", "offset").writeStream.format("memory")
            .queryName(name).trigger(processingTime="500 milliseconds").start())


def _table(spark, name: str) -> list:
    return spark.sql(f"select value, brokerId, partitionKey, offset from {name}").collect()


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        time.sleep(0.5)


def test_a_stream_reads_partitions_on_three_brokers_each_message_once(spark, tubemq_brokers):
    cluster, pool = tubemq_brokers
    topic = pool.take(1, 2)
    name = "three_" + uuid.uuid4().hex[:6]
    sent = _sent(cluster, topic, 1500, "s")
    query = _stream_query(spark, cluster, topic, name, group="g" + uuid.uuid4().hex[:8], startingOffsets="earliest",
                          maxOffsetsPerTrigger="400")
    try:
        _wait(lambda: len(_table(spark, name)) >= len(sent), 120, "the first 1500 messages")
        sent.update(_sent(cluster, topic, 900, "t"))  # written while the stream runs
        _wait(lambda: len(_table(spark, name)) >= len(sent), 120, "the 900 written while it runs")
        time.sleep(2)  # a trigger more: nothing else may come
        rows = _table(spark, name)
        assert Counter(r.value for r in rows) == Counter(list(sent))  # every message once, nothing else
        assert {r.value: r.brokerId for r in rows} == sent  # each from the broker that acknowledged it
        assert {int(r.partitionKey.split(":")[0]) for r in rows} == {1, 2, 3}
        assert all(q.exception() is None for q in [query])
        keys = set(parse_offsets(query.lastProgress["sources"][0]["endOffset"]) or {})
        assert len(keys) == 6 and {key.split(":")[0] for key in keys} == {"1", "2", "3"}  # all in the offsets
    finally:
        query.stop()


def test_two_queries_in_one_group_split_partitions_on_different_brokers(spark, tubemq_brokers):
    """The master splits the six partitions 3/3 between two queries of one group; each query's three sit on at
    least two brokers. Once split, every message is read by exactly one of them."""
    cluster, pool = tubemq_brokers
    topic = pool.take(1, 2)
    group = "g" + uuid.uuid4().hex[:8]
    one, two = "one_" + uuid.uuid4().hex[:6], "two_" + uuid.uuid4().hex[:6]
    first = _sent(cluster, topic, 600, "f")
    q1 = _stream_query(spark, cluster, topic, one, group=group, startingOffsets="earliest")
    q2 = None
    try:
        _wait(lambda: set(first) <= {r.value for r in _table(spark, one)}, 120, "q1 to read everything")
        q2 = _stream_query(spark, cluster, topic, two, group=group, startingOffsets="group")
        parts1: set[str] = set()
        parts2: set[str] = set()
        for attempt in range(40):  # until the master's split is stable: a burst lands 3/3
            burst = set(_sent(cluster, topic, 120, f"split{attempt}-"))
            _wait(lambda b=burst: b <= {r.value for r in _table(spark, one) + _table(spark, two)}, 90, "a burst")
            parts1 = {r.partitionKey for r in _table(spark, one) if r.value in burst}
            parts2 = {r.partitionKey for r in _table(spark, two) if r.value in burst}
            if len(parts1) == 3 and len(parts2) == 3 and not parts1 & parts2:
                break
            time.sleep(1)
        else:
            pytest.fail(f"the group never split 3/3: {sorted(parts1)} / {sorted(parts2)}")
        assert {p.split(":")[0] for p in parts1 | parts2} == {"1", "2", "3"}
        assert len({p.split(":")[0] for p in parts1}) >= 2 and len({p.split(":")[0] for p in parts2}) >= 2
        assert not set(first) & {r.value for r in _table(spark, two)}, "q2 re-read what q1 had committed"
        more = _sent(cluster, topic, 1200, "m")
        _wait(lambda: set(more) <= {r.value for r in _table(spark, one) + _table(spark, two)}, 120, "the last burst")
        read = Counter(r.value for r in _table(spark, one) + _table(spark, two) if r.value in more)
        assert read == Counter(list(more))  # split: each message read once, by one of the two
        assert {r.partitionKey for r in _table(spark, one) if r.value in more} == parts1
        assert {r.partitionKey for r in _table(spark, two) if r.value in more} == parts2
        assert q1.exception() is None and q2.exception() is None
    finally:
        for query in (q1, q2):
            if query is not None and query.isActive:
                query.stop()


def test_a_gracefully_stopped_broker_fails_a_batch_read_naming_it_unless_skipped(spark, tubemq_brokers, tmp_path,
                                                                                  caplog, capsys):
    """Today's reader planned the partitions the master listed and returned two thirds of the topic without an
    error; it must fail naming the broker and its partitions, or, asked to, read the rest and say so."""
    cluster, pool = tubemq_brokers
    topic = pool.take(1, 2)
    sent = _sent(cluster, topic, 1200, "g")
    gone = sorted(f"2:{topic}:{pid}" for pid in (0, 10000))
    with cluster.outage("broker-2", how="terminate"):
        _wait_released(cluster, topic, 2)
        placement = _placement(cluster, topic)  # the helper: configured, on a broker that is not running
        assert placement.offline_brokers == {2} and placement.unserved() == {2: tuple(gone)}
        assert all(placement.is_configured(key) for key in gone) and len(placement.partitions[topic]) == 6
        rpc = configured_by_master(cluster.master_address, [topic], ClientSettings())  # over RPC: the same
        assert rpc.partitions == placement.partitions and rpc.unserved() == {2: tuple(gone)}

        # issue 37: without masterWebUrl (the web API is not on the guessed port 8080 here) the read returned the
        # served two thirds with a warning; the master's RPC view fails it the same way
        with pytest.raises(Exception, match="PartitionsUnavailableError") as unset:
            spark.read.format("tubemq").option("master", cluster.master_address).option("topic", topic).load().collect()
        assert "broker 2 (127.0.0.2:" in str(unset.value) and gone[0] in str(unset.value), str(unset.value)[-3000:]
        bare = {"master": cluster.master_address, "topic": topic, "startingOffsets": "earliest"}
        with caplog.at_level(logging.WARNING), pytest.raises(PartitionsUnavailableError) as typed_bare:
            TubeBatchReader(TubeMQOptions.from_raw(bare, mode="read")).plan()
        assert typed_bare.value.unavailable == {2: tuple(gone)}
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        code = backfill.main(["export", "--master", cluster.master_address, "--topic", topic, "--format", "json",
                              "--output", str(tmp_path / "bare")], session_factory=lambda: SharedSession(spark))
        err = capsys.readouterr().err
        assert code == 2 and "broker 2" in err and gone[0] in err and not (tmp_path / "bare").exists(), err

        with pytest.raises(Exception, match="PartitionsUnavailableError") as failed:
            _read(spark, cluster, topic).collect()
        text = str(failed.value)
        assert "broker 2 (127.0.0.2:" in text, text[-3000:]
        assert all(key in text for key in gone) and "onUnavailablePartitions=skip" in text

        raw = {"master": cluster.master_address, "topic": topic, "masterWebUrl": ",".join(cluster.master_web_urls),
               "startingOffsets": "earliest"}
        with pytest.raises(PartitionsUnavailableError) as typed:
            TubeBatchReader(TubeMQOptions.from_raw(raw, mode="read")).plan()
        assert typed.value.unavailable == {2: tuple(gone)} and typed.value.retriable

        skipping = TubeMQOptions.from_raw({**raw, "onUnavailablePartitions": "skip"}, mode="read")
        with caplog.at_level(logging.WARNING, logger="tubespark.tubemq.spark.availability"):
            reader = TubeBatchReader(skipping)
            tasks = reader.plan()
        assert reader.left_out == {2: tuple(gone)} and {t.ref.broker_id for t in tasks} == {1, 3}
        assert any("LEAVES OUT 2 of its 6 partitions" in r.getMessage() and gone[0] in r.getMessage()
                   for r in caplog.records)
        rows = _read(spark, cluster, topic, onUnavailablePartitions="skip").select("value").collect()
        assert sorted(r.value for r in rows) == sorted(v for v, b in sent.items() if b != 2)

        def export(*extra: str) -> tuple[int, str]:
            code = backfill.main(["export", "--master", cluster.master_address, "--topic", topic,
                                  "--master-web-url", ",".join(cluster.master_web_urls), "--format", "json",
                                  *extra], session_factory=lambda: SharedSession(spark))
            return code, capsys.readouterr().err

        code, err = export("--output", str(tmp_path / "refused"))
        assert code == 2 and "export: FAILED" in err and "broker 2" in err and gone[0] in err, err
        assert not (tmp_path / "refused").exists()
        code, err = export("--output", str(tmp_path / "partial"), "--on-unavailable-partitions", "skip")
        assert code == backfill.EXIT_LEFT_OUT, err
        assert "LEAVES OUT 2 partitions" in err and all(key in err for key in gone), err
        exported = spark.read.json(str(tmp_path / "partial")).select(F.unbase64("value").alias("v")).collect()
        assert sorted(r.v for r in exported) == sorted(v for v, b in sent.items() if b != 2)
    rows = _read(spark, cluster, topic).select("value").collect()  # back: all of it again, no error
    assert sorted(r.value for r in rows) == sorted(sent)
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # and without masterWebUrl: checked over RPC, nothing to warn about
        tasks = TubeBatchReader(TubeMQOptions.from_raw(bare, mode="read")).plan()
    assert {t.ref.broker_id for t in tasks} == {1, 2, 3}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    rows = spark.read.format("tubemq").option("master", cluster.master_address).option("topic", topic).load().collect()
    assert sorted(r.value for r in rows) == sorted(sent)


def test_sink_routes_around_a_crashed_broker_and_each_row_lands_once(spark, tubemq_brokers, caplog):
    """kill -9 of a broker: the master keeps listing its partitions until its heartbeat times out, and a sink
    that sends to them fails its tasks. It must send to the other brokers, say so, and store every row once."""
    cluster, pool = tubemq_brokers
    topic = pool.take(1, 2)
    with cluster.outage("broker-3", how="kill"):
        listed = topic_partitions(cluster.master_address, [topic], timeout_s=5)[topic]
        assert 3 in {p.broker_id for p in listed}  # not released yet: the window the producer must handle
        with caplog.at_level(logging.WARNING, logger="tubespark.tubemq.client.producer"), \
                Producer(cluster.master_address, ClientSettings(heartbeat_interval_s=2)) as producer:
            producer.publish([topic])
            for i in range(300):
                producer.send_async(topic, OutgoingMessage(f"c{i}".encode()), defer=True)
            acked = producer.flush()
        assert len(acked) == 300 and {r.partition.broker_id for r in acked} <= {1, 2}
        assert any("broker 3 (127.0.0.3:" in r.getMessage() and "other brokers" in r.getMessage()
                   for r in caplog.records)
        frame = spark.createDataFrame([(f"s{i}",) for i in range(3000)], "value string")
        frame.write.format("tubemq").option("master", cluster.master_address).option("topic", topic) \
            .mode("append").save()

        _wait_released(cluster, topic, 3)  # a crash is released after the heartbeat timeout
        placement = _placement(cluster, topic)
        assert placement.offline_brokers == {3} and all(placement.is_configured(f"3:{topic}:{pid}")
                                                        for pid in (0, 10000))
        with pytest.raises(Exception, match="PartitionsUnavailableError"):
            _read(spark, cluster, topic).collect()
    back = _read(spark, cluster, topic).select("value", "brokerId").collect()
    assert Counter(r.value.decode() for r in back) == Counter([f"c{i}" for i in range(300)] +
                                                              [f"s{i}" for i in range(3000)])
    assert {r.brokerId for r in back} == {1, 2}  # nothing reached the dead broker


def test_a_deleted_deployment_is_not_configured_any_more(tubemq_brokers):
    """A broker that is down keeps its partitions configured; a deployment deleted at the master does not."""
    cluster, pool = tubemq_brokers
    topic = pool.take(1, 2)

    def modify(method: str, **params: object) -> None:
        [item] = cluster.master_admin(method, topicName=topic, brokerId=3, **params)["data"]
        assert item["success"], item  # result=true covers the request; each record has its own flag

    # 2.4.0 refuses to delete an open deployment: errCode 406 "The values of acceptPublish and acceptSubscribe
    # must be false before change status of brokerId-topicName(3:<topic>) record!"
    [refused] = cluster.master_admin("admin_delete_topic_deploy_info", topicName=topic, brokerId=3)["data"]
    assert (refused["success"], refused["errCode"]) == (False, 406) and "must be false" in refused["errInfo"]
    modify("admin_update_topic_deploy_info", acceptPublish=False, acceptSubscribe=False)
    assert _placement(cluster, topic).is_configured(f"3:{topic}:0")  # closed, still configured
    modify("admin_delete_topic_deploy_info")
    placement = _placement(cluster, topic)
    assert not any(placement.is_configured(f"3:{topic}:{pid}") for pid in (0, 10000))
    assert {key.split(":")[0] for key in placement.partitions[topic]} == {"1", "2"}
    listed = topic_partitions(cluster.master_address, [topic], timeout_s=10)[topic]
    assert placement.missing_from(p.key for p in listed) == {}  # nothing to report: that data was deleted


def test_the_scale_bench_runs_on_three_brokers(tubemq_brokers, tmp_path):
    """``python -m bench.scale`` (issue 23 part 7) at its smallest: 12 partitions, 3 triggers. Not a timed test:
    it proves the command measures a 3-broker topic end to end (the figures are in docs/performance/index.md)."""
    cluster, pool = tubemq_brokers
    topic = pool.take(4, 1)  # 4 partitions in one store on each broker: 12
    out = tmp_path / "scale.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "testbed"), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "bench.scale", "--tubemq-master", cluster.master_address,
                           "--web-urls", ",".join(cluster.master_web_urls), "--topics", topic, "--partitions", "12",
                           "--triggers", "3", "--warmup", "1", "--fill", "5", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    [result] = json.loads(out.read_text())["results"]
    assert result["partitions"] == 12 and len(result["plan_ms"]) == 3 and all(ms > 0 for ms in result["plan_ms"])
    assert result["driver"]["steady_connects"] == 0  # no connection opened per trigger
    by_address = result["driver"]["start_connects_by_address"]
    for node in cluster.brokers:  # the group session's and the probes' connection: per broker, not per partition
        assert by_address.get(node.address, 0) <= 2, by_address  # (it was 1 + one per partition: 5)
    assert result["executor"]["rows"] == 12 * (5 + 2 * 4)  # every partition: the fill, 2 per trigger
    assert result["executor"]["tasks"] == 12 and result["executor"]["peak_open"] == 1
    assert "baseline = 12 partitions" in proc.stdout


def _crash_on_first_row_of(broker_id: int, pid: int, flag: Path):
    """A UDF that kill -9s the broker process group ``pid`` when it sees the first row read from broker
    ``broker_id`` (once: ``flag``), so the crash lands while that row's read task is still in its range."""

    def crash(broker: int) -> bool:
        if broker == broker_id:
            try:
                os.close(os.open(flag, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return True
            os.killpg(pid, 9)
        return True

    return F.udf(crash, "boolean")


def _deferred_starts(checkpoint: Path, prefix: str) -> list[tuple[str, int, int]]:
    """``(key, old end, #from)`` of each batch in the offset log that moved a partition of ``prefix`` back to a
    deferred remainder's start."""
    logs = sorted((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    found, previous = [], {}
    for path in logs:
        if not path.name.isdigit():
            continue
        offsets = json.loads(path.read_text().splitlines()[-1])
        for key, value in offsets.items():
            if key.startswith(prefix) and key.endswith("#from") and value < previous.get(key[:-5], -1):
                found.append((key[:-5], previous[key[:-5]], value))
        previous = {k: v for k, v in offsets.items() if "#" not in k}
    return found


def test_a_stream_goes_on_while_a_crashed_broker_holds_a_batch_in_flight(spark, tubemq_brokers, tmp_path):
    """Issue 23 part 2: broker 3 crashes while a micro-batch reads its range. The read task used to wait for it
    (up to outageTimeoutMs, 15 min) and with it the whole query: nothing committed while it was down. With a
    ``deferredRangesPath`` (issue 37: only a directory given to the query defers) the task returns what it read
    after one short try and leaves the rest to later batches: the stream keeps committing the other brokers' rows
    while broker 3 is down, and reads the remainder once it is back, each message once."""
    cluster, pool = tubemq_brokers
    topic = pool.take(1, 2)
    # Enough bytes on broker 3 that a read task of its two partitions still has range left when the UDF sees the
    # first row: the other partition's task, or that one's own. Spark's pipes between the read and the UDF hold
    # megabytes, and with 1,000-byte messages (1.5 MB a partition) a loaded CI run had read both ranges whole
    # before the crash, so nothing was left to defer. The sink keeps the values without the pad.
    pad = b"." * 4000
    produce(cluster.master_address, topic, bodies([b"b%d%s" % (i, pad) for i in range(9000)]))
    sent = Counter(b"b%d" % i for i in range(9000))
    name = "inflight_" + uuid.uuid4().hex[:6]
    checkpoint = tmp_path / "checkpoint"
    flag = tmp_path / "crashed"
    frame = (spark.readStream.format("tubemq").option("master", cluster.master_address).option("topic", topic)
             .option("masterWebUrl", ",".join(cluster.master_web_urls)).option("heartbeatIntervalMs", "1000")
             .option("group", "g" + uuid.uuid4().hex[:8]).option("startingOffsets", "earliest")
             .option("requestTimeoutMs", "2000").option("deferredRangesPath", str(tmp_path / "deferred")).load())
    crash = _crash_on_first_row_of(3, cluster.process("broker-3").pid, flag)
    unpadded = F.expr("CAST(trim(TRAILING '.' FROM CAST(value AS STRING)) AS BINARY)").alias("value")
    query = (frame.where(crash(F.col("brokerId"))).select(unpadded, "brokerId", "partitionKey", "offset")
             .writeStream.format("memory").queryName(name).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="500 milliseconds").start())
    try:
        _wait(flag.exists, 120, "the first row of broker 3 (the crash)")
        cluster.kill("broker-3")  # the UDF killed it: the cluster only takes note
        down_at = time.monotonic()
        with Producer(cluster.master_address, ClientSettings(heartbeat_interval_s=2)) as producer:
            producer.publish([topic])
            for i in range(300):
                producer.send_async(topic, OutgoingMessage(b"d%d" % i), defer=True)
            during = producer.flush()
        assert {r.partition.broker_id for r in during} <= {1, 2}
        sent.update(b"d%d" % i for i in range(300))
        during_values = {b"d%d" % i for i in range(300)}
        _wait(lambda: during_values <= {r.value for r in _table(spark, name)}, 45,
              "the rows written to brokers 1 and 2 while broker 3 is down (the old code: none, the batch waited)")
        assert query.exception() is None and not cluster.process("broker-3").alive()
        moved = _deferred_starts(checkpoint, "3:")
        assert moved, "a batch moved a partition of broker 3 back to its unread remainder"
        cluster.start_again("broker-3", wait=False)
        _wait(lambda: len(_table(spark, name)) >= sum(sent.values()), 150, "every message once broker 3 is back")
        time.sleep(2)  # a trigger more: nothing else may come
        rows = _table(spark, name)
        assert Counter(r.value for r in rows) == sent, "every message once, nothing else"
        assert query.exception() is None
        print(f"broker 3 down {time.monotonic() - down_at:.0f} s; deferrals {moved}")
    finally:
        query.stop()  # the module's last test in CI: nothing waits for broker 3's new registration


LONG = os.environ.get("TUBESPARK_SOAK", "") == "long"


def _a_read_task_on_a_crashed_broker_waits_for_it_and_reads_its_range_once(tubemq_brokers, caplog):
    """The executor's read of a range on a broker that was killed (a micro-batch planned just before the crash,
    or replayed after a restart; issue 23 part 2): it used to fail after ``6 x requestTimeoutMs`` (6 s here),
    stopping the query. It waits for the broker (``outageTimeoutMs``), saying so, and reads the range once the
    broker is back: each message once, none lost (no memory cache: the kill loses nothing acknowledged)."""
    import threading

    from tubespark.tubemq.client.broker import BrokerClient
    from tubespark.tubemq.client.ranges import probe_bounds
    from tubespark.tubemq.spark.read_task import QueueRange, read_range

    cluster, pool = tubemq_brokers
    cluster.wait_back()  # after the test above, broker 3's new registration
    topic = pool.take(1, 2)
    acks = produce(cluster.master_address, topic, bodies([f"w{i}".encode() for i in range(600)]))
    on_3 = Counter(a.partition.key for a in acks if a.partition.broker_id == 3)
    part = next(a.partition for a in acks if a.partition.key == on_3.most_common(1)[0][0])
    probe = BrokerClient(f"inflight-{uuid.uuid4().hex[:6]}", ClientSettings())
    try:
        bounds = probe_bounds(probe, part, "inflight_probe")
    finally:
        probe.close()
    task = QueueRange(3, part.host, part.port, topic, part.partition_id, bounds.min_offset, bounds.max_offset,
                      "inflight_read", f"inflight-{uuid.uuid4().hex[:6]}")
    options = TubeMQOptions.from_raw({"master": cluster.master_address, "topic": topic, "requestTimeoutMs": "1000",
                                      "connectTimeoutMs": "1000", "outageTimeoutMs": "90000"}, mode="read")
    down_s = 8.0  # past the old budget of 6 x requestTimeoutMs
    cluster.kill("broker-3")
    started = time.monotonic()
    failure: list[BaseException] = []

    def back() -> None:
        try:
            time.sleep(down_s)
            # the read needs the broker's port, not the master's ~30 s of registering it again (which the CI run
            # saw pass 60 s under load); this is the module's last test, so nothing waits for it to serve
            cluster.start_again("broker-3", new_registration=False, wait=False)
        except ClusterError as exc:  # the test fails on it below, after the read
            failure.append(exc)

    restarter = threading.Thread(target=back, daemon=True)
    restarter.start()
    try:
        with caplog.at_level(logging.WARNING, logger="tubespark.core.outage"):
            values = [v for batch in read_range(task, options) for v in batch.column("value").to_pylist()]
    finally:
        restarter.join(180)
    waited = time.monotonic() - started
    assert not failure, failure
    assert waited >= down_s
    assert len(values) == len(set(values)) == on_3[part.key], "every message of the range once"
    assert {v.decode() for v in values} == {f"w{i}" for i, a in enumerate(acks) if a.partition.key == part.key}
    warnings = [r.getMessage() for r in caplog.records if "waiting for the broker" in r.getMessage()]
    assert warnings and f"read of partition {part.key} [{task.start}, {task.end}) from broker {part.host}:" \
                        f"{part.port}: waiting for the broker" in warnings[0], warnings


if LONG:  # the waiting read task (deferOnOutage=false, batch reads, streams with no reports key) on a real cluster;
    # CI holds the same rule with tests/unit/tubemq/test_read_outage.py and rocketmq/test_broker_groups.py, and CI fails
    # every skip, so the test is defined only with the long switch
    test_a_read_task_on_a_crashed_broker_waits_for_it_and_reads_its_range_once = (
        _a_read_task_on_a_crashed_broker_waits_for_it_and_reads_its_range_once)
