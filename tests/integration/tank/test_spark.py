"""``format("tank")`` in Spark local mode against the TANK test double (tests/doubles/tank_broker.py).

No real TANK broker can be had here (the double's docstring says why and which facts it follows); the
double is a TCP server in this process, and Spark's Python workers reach it over sockets like a broker.
These tests need no TubeMQ cluster (no fixture asks for it). They cover what only TANK has: partial last
bundles (the double cutting every chunk at fetchSize) and Snappy bundles read through Spark, the sink's
keys, partitions and timestamps, retention under a stream, TANK's own bad input. What every broker
promises (exact ranges, restarts, admission, AvailableNow, the sink, bad options, empty plans):
tests/integration/contract/.
"""

from __future__ import annotations

import time
import uuid

import pytest
from pyspark.sql import functions as F

from tests.doubles.tank_broker import TankBroker
from tubespark.tank.client.broker import TankClient
from tubespark.tank.client.producer import Producer
from tubespark.tank.wire.bundle import encode_bundle


@pytest.fixture(scope="module")
def tank():
    with TankBroker() as broker:
        yield broker


def new_topic(broker: TankBroker, partitions: int = 2) -> str:
    name = f"t_{uuid.uuid4().hex[:8]}"
    with TankClient(broker.address) as client:
        assert client.create_topic(name, partitions)
    return name


def produce(broker: TankBroker, topic: str, partitions: int, start: int, count: int, *, per_bundle: int = 50,
            compression: str = "auto") -> None:
    """Messages ``v<n>`` for n in [start, start + count), spread round-robin, ``per_bundle`` per bundle."""
    producer = Producer(broker.address)
    n = start
    while n < start + count:
        bundles = {}
        for p in range(partitions):
            size = min(per_bundle, start + count - n)
            if size <= 0:
                break
            values = [b"v%07d" % (n + i) for i in range(size)]
            bundles[p] = encode_bundle(values, [1_700_000_000_000 + n] * size, [b"k%d" % p] * size,
                                       compression=compression)
            n += size
        producer.send(topic, bundles)
    producer.flush()
    producer.close()


def reader(spark, broker: TankBroker, topic: str, **options: str):
    stream = spark.readStream.format("tank").option("broker", broker.address).option("topic", topic)
    for key, value in options.items():
        stream = stream.option(key, value)
    return stream.load()


def test_stream_reads_partial_last_bundles_and_snappy_exactly_once(spark, tmp_path):
    """With the double cutting every chunk at fetchSize, Spark's reads go through partial last bundles
    (fetched again, grown) of Snappy bundles of every size: each message once."""
    with TankBroker() as broker:
        broker.cut_chunks = True  # every chunk ends at fetchSize: partial last bundles all the way
        topic = new_topic(broker, 3)
        produce(broker, topic, 3, 0, 600, per_bundle=40, compression="snappy")
        produce(broker, topic, 3, 600, 150, per_bundle=7)
        query = (reader(spark, broker, topic, startingOffsets="earliest", maxOffsetsPerTrigger="200",
                        fetchSizeBytes="700").writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        assert query.awaitTermination(120) and query.exception() is None, query.exception()
        values = [r.value for r in spark.read.parquet(str(tmp_path / "out")).select("value").collect()]
    assert sorted(values) == [b"v%07d" % n for n in range(750)]


def test_stream_starts_latest_by_default(spark, tank, tmp_path):
    topic = new_topic(tank, 2)
    produce(tank, topic, 2, 0, 100)
    name = f"tank_{uuid.uuid4().hex[:6]}"
    query = (reader(spark, tank, topic).writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="100 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not query.recentProgress:
            time.sleep(0.1)
        produce(tank, topic, 2, 100, 150, per_bundle=25)
        while time.monotonic() < deadline and spark.table(name).count() < 150:
            time.sleep(0.2)
        rows = spark.table(name).select("value").collect()
    finally:
        query.stop()
    assert sorted(r.value for r in rows) == [b"v%07d" % n for n in range(100, 250)]  # not the 100 before it started


def test_sink_round_trip_with_keys_partitions_timestamps_and_snappy(spark, tank):
    topic = new_topic(tank, 3)
    base_ms = 1_714_979_289_123  # 2024-05-06 07:08:09.123 UTC
    frame = (spark.range(1200, numPartitions=2)
             .select(F.format_string("row-%05d", "id").alias("value"),
                     F.when(F.col("id") % 5 == 0, None).otherwise(F.format_string("key%d", F.col("id") % 11))
                     .alias("key"),
                     F.when(F.col("id") < 100, (F.col("id") % 3).cast("int")).alias("partition"),
                     F.timestamp_millis(F.lit(base_ms) + F.col("id") * 1000).alias("timestamp")))
    (frame.write.format("tank").option("broker", tank.address).option("topic", topic).option("bundleMaxRows", "100")
     .option("bundleCompression", "snappy").option("maxInFlight", "4").mode("append").save())
    back = (spark.read.format("tank").option("broker", tank.address).option("topic", topic).load()
            .withColumn("ms", F.unix_millis("timestamp")))
    rows = {r.value.decode(): r for r in back.collect()}
    assert len(rows) == 1200
    for i in (0, 1, 7, 99, 100, 555, 1199):
        r = rows[f"row-{i:05d}"]
        assert r.key == (None if i % 5 == 0 else f"key{i % 11}".encode())
        assert r.ms == base_ms + i * 1000
        if i < 100:
            assert r.partition == i % 3
    keyed = {}
    for r in rows.values():
        if r.key is not None and int(r.value[4:]) >= 100:
            keyed.setdefault(r.key, set()).add(r.partition)
    assert all(len(parts) == 1 for parts in keyed.values())  # one key, one partition


def test_retention_under_a_stream_is_data_loss(spark, tank, tmp_path):
    topic = new_topic(tank, 1)
    produce(tank, topic, 1, 0, 100, per_bundle=10)
    checkpoint, out = tmp_path / "cp", tmp_path / "out"

    def run(**options: str):
        return (reader(spark, tank, topic, **options).select("offset").writeStream.format("parquet")
                .option("path", str(out)).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
                .start())

    assert run(startingOffsets="earliest", maxOffsetsPerTrigger="30").awaitTermination(60)
    produce(tank, topic, 1, 100, 100, per_bundle=10)
    tank.drop_before(topic, 0, 151)  # 101..150 were never read by the query
    with pytest.raises(Exception, match=r"retention removed numbers this query had not read \(query at 101"):
        run().awaitTermination(60)
    assert run(failOnDataLoss="false").awaitTermination(60)
    offsets = sorted(r.offset for r in spark.read.parquet(str(out)).collect())
    assert offsets == list(range(1, 101)) + list(range(151, 201))


def test_bad_input_fails_with_typed_errors(spark, tank):
    unreachable = "127.0.0.1:1"  # nothing listens: bad options must fail before any network use
    cases = {  # parsers: tests/unit/tank/test_sink_and_options.py; shared options: tests/integration/contract
        (("broker", unreachable),): "option topic is required",
        (("broker", unreachable), ("topic", "t"), ("startingOffsets", '{"t:x": 1}')): "expected topic:partition",
    }
    for options, message in cases.items():
        stream = spark.readStream.format("tank")
        for key, value in options:
            stream = stream.option(key, value)
        started = time.monotonic()
        with pytest.raises(Exception, match=message.replace("{", r"\{")):
            stream.load().writeStream.format("noop").start().awaitTermination(30)
        assert time.monotonic() - started < 30
    with pytest.raises(Exception, match="unknown topic"):
        spark.read.format("tank").option("broker", tank.address).option("topic", "nope").load().count()
    topic = new_topic(tank, 2)
    sink = spark.range(3).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises(Exception, match="column 'id' is not sent to TANK"):
        (spark.range(3).selectExpr("id", "CAST(id AS STRING) AS value").write.format("tank")
         .option("broker", tank.address).option("topic", topic).mode("append").save())
    with pytest.raises(Exception, match="needs a 'value' column"):
        spark.range(3).write.format("tank").option("broker", tank.address).option("topic", topic).mode("append").save()
    with pytest.raises(Exception, match="unknown topic"):
        sink.write.format("tank").option("broker", tank.address).option("topic", "nope").mode("append").save()
    with pytest.raises(Exception, match="partition 5 does not exist"):  # bad rows: more in the unit tests
        (sink.selectExpr("value", "5 AS partition").write.format("tank").option("broker", tank.address)
         .option("topic", topic).mode("append").save())
    with pytest.raises(Exception, match="beyond the partition's next sequence number"):
        (spark.read.format("tank").option("broker", tank.address).option("topic", topic)
         .option("endingOffsets", f'{{"{topic}:0": 99}}').load().count())
