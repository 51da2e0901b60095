"""TLS against a real TubeMQ 2.4.0 master and broker (issue 13, part 3; no secret anywhere: part 4).

The module makes a throw-away PKI with the JDK's ``keytool`` (``tubespark_testbed.tls.make_pki``: a CA,
an unrelated CA, server certificates that are good, expired or for another host, client certificates)
and starts one cluster whose master and broker serve TLS next to their plain ports. What 2.4.0 does
over TLS (``docs/tubemq/tls.md``), and so what these tests assert:

* a TLS server requires a client certificate signed by a CA in its trust store: without a trust store
  2.4.0 exits at its first TLS connection, so one-way TLS does not exist (``ClusterSettings`` refuses it);
* a client calling the master on its TLS port gets the brokers' TLS ports in the metadata, so a client
  that is given the master's TLS port reaches the brokers over TLS with nothing else configured;
* the servers load their key store afresh for every connection, so replacing the master's key store
  file makes the next connection see another certificate; the expired and wrong-host cases use that.

Every refusal must come at once (well under the connect timeout) as a :class:`TlsError`, which is not
retried, with a message that names the cause. The module takes about a minute, mostly the cluster's
start (the PKI adds about 10 s).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tubespark_testbed import ClusterSettings, LocalCluster
from tubespark_testbed.errors import ClusterError
from tubespark_testbed.tls import WRONG_HOST, LocalPki, make_pki

from tests.integration.tubemq.group_consumer import Consumer
from tubespark.core.framed_io import open_socket
from tubespark.core.tls import TlsChannel, client_context
from tubespark.errors import OptionError, TlsError
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.common import ClientSettings, new_client_id
from tubespark.tubemq.client.metadata import topic_partitions
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.client.ranges import RangeReader, probe_bounds
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.message import OutgoingMessage

pytestmark = [pytest.mark.integration, pytest.mark.spark]

CLIENT_TOPIC = "tls_client"
SPARK_TOPIC = "tls_spark"
TOPICS = [CLIENT_TOPIC, SPARK_TOPIC]
CONNECT_TIMEOUT_S = 10.0  # generous on purpose: every refusal below must come long before it
AT_ONCE_S = 3.0


@dataclass(frozen=True)
class Tls:
    cluster: LocalCluster
    pki: LocalPki


@contextlib.contextmanager
def _tls(tmp: Path) -> Iterator[Tls]:
    pki = make_pki(tmp / "pki")
    settings = ClusterSettings().with_tls(pki.server_keystore, pki.password, truststore=pki.truststore)
    with LocalCluster(settings=settings, topics=[(t, 1, 2) for t in TOPICS]) as cluster:
        yield Tls(cluster, pki)


PRESTART = {"tls": _tls}  # the PKI and the cluster, made ahead of this module (tubespark_testbed/prestart.py)
PRESTART_LIGHT = True  # a cluster: mostly waiting while it starts, so it may start beside another


@pytest.fixture(scope="module")
def tls(prestarted) -> Tls:
    return prestarted("tls")


def client(pki: LocalPki, *, ca: Path | None = None, cert: Path | None = None, key: Path | None = None,
           with_cert: bool = True, verify_hostname: bool = True) -> ClientSettings:
    """Client settings over TLS: our CA and our client certificate unless told otherwise."""
    context = client_context(ca_file=str(ca or pki.ca_pem),
                             cert_file=str(cert or pki.client_cert_pem) if with_cert else None,
                             key_file=str(key or pki.client_key_pem) if with_cert else None,
                             verify_hostname=verify_hostname)
    return ClientSettings(connect_timeout_s=CONNECT_TIMEOUT_S, heartbeat_interval_s=1.0, ssl_context=context)


def refused(action: Callable[[], object], match: str) -> TlsError:
    """``action`` must fail with TlsError matching ``match``, at once."""
    started = time.monotonic()
    with pytest.raises(TlsError, match=match) as info:
        action()
    took = time.monotonic() - started
    assert took < AT_ONCE_S, f"took {took:.1f}s: {info.value}"
    assert not info.value.retriable
    return info.value


def partitions(master: str, settings: ClientSettings) -> list:
    return topic_partitions(master, [CLIENT_TOPIC], settings)[CLIENT_TOPIC]


@contextlib.contextmanager
def master_serving(cluster: LocalCluster, keystore: Path) -> Iterator[None]:
    """The master's TLS port presents the certificate in ``keystore`` to new connections, then the good one.

    The 2.4.0 master reads its key store file for every TLS connection (docs/tubemq/tls.md), so an
    atomic replace of the file is all it takes.
    """
    live = cluster.tls_keystore_path("master")
    original = live.with_name(live.name + ".good")
    shutil.copyfile(live, original)

    def install(source: Path) -> None:
        staged = live.with_name(live.name + ".new")
        shutil.copyfile(source, staged)
        os.replace(staged, live)

    install(keystore)
    try:
        yield
    finally:
        install(original)


# --- the servers ------------------------------------------------------------------------------------


def test_master_and_broker_serve_tls_and_the_master_hands_out_tls_ports(tls):
    cluster = tls.cluster
    logs = {name: (cluster.work_dir / "logs" / f"{name}.log").read_text() for name in ("master", "broker")}
    assert f"TLS RpcServer started, listen port: {cluster.master_tls_address.rpartition(':')[2]}" in logs["master"]
    assert f"TLS RpcServer started, listen port: {cluster.broker_tls_address.rpartition(':')[2]}" in logs["broker"]
    for address in (cluster.master_tls_address, cluster.broker_tls_address):
        channel = open_socket(address, connect_timeout_s=CONNECT_TIMEOUT_S, io_timeout_s=5.0,
                              ssl_context=client(tls.pki).ssl_context)
        try:
            assert isinstance(channel, TlsChannel) and channel.version() in ("TLSv1.2", "TLSv1.3")
        finally:
            channel.close()
    # the same master answers plain-text callers with the plain ports and TLS callers with the TLS ports
    assert {p.broker.address for p in partitions(cluster.master_address, ClientSettings())} == \
        {cluster.broker_address}
    assert {p.broker.address for p in partitions(cluster.master_tls_address, client(tls.pki))} == \
        {cluster.broker_tls_address}


def test_a_cluster_without_a_trust_store_is_refused_before_it_starts(tls):
    with pytest.raises(ClusterError, match="exits at its first TLS connection"):
        ClusterSettings(tls_keystore=str(tls.pki.server_keystore), tls_keystore_password=tls.pki.password)


# --- the client over TLS ----------------------------------------------------------------------------


def test_producer_consumer_group_and_range_reader_over_tls(tls):
    master, settings = tls.cluster.master_tls_address, client(tls.pki)
    values = [f"tls-{uuid.uuid4().hex[:6]}-{i}".encode() for i in range(40)]
    with Producer(master, settings) as producer:
        producer.publish([CLIENT_TOPIC], timeout_s=30)
        for value in values:
            producer.send_async(CLIENT_TOPIC, OutgoingMessage(value))  # pipelined: the reader runs meanwhile
        results = producer.flush()
    assert len(results) == len(values)
    assert {r.partition.broker.address for r in results} == {tls.cluster.broker_tls_address}

    got: set[bytes] = set()
    deadline = time.monotonic() + 30
    with Consumer(master, f"tls_group_{uuid.uuid4().hex[:8]}", [CLIENT_TOPIC], settings=settings) as consumer:
        while not set(values) <= got and time.monotonic() < deadline:
            batch = consumer.poll(timeout_s=2)
            if batch is not None:
                assert batch.partition.broker.address == tls.cluster.broker_tls_address
                got.update(m.data for m in batch.messages)
    assert set(values) <= got

    read: set[bytes] = set()
    broker = BrokerClient(new_client_id("tls_range"), settings)
    try:
        for part in partitions(master, settings):
            bounds = probe_bounds(broker, part, f"tls_probe_{uuid.uuid4().hex[:8]}")
            reader = RangeReader(broker, f"tls_read_{uuid.uuid4().hex[:8]}")
            read.update(m.data for m in reader.read(part, bounds.min_offset, bounds.max_offset))
    finally:
        broker.close()
    assert set(values) <= read


def test_spark_sink_batch_read_and_stream_over_tls_with_an_encrypted_key(spark, tls, tmp_path):
    """Options only: the master's TLS port, the CA, a client certificate whose key needs a password."""
    pki = tls.pki
    options = {"master": tls.cluster.master_tls_address, "topic": SPARK_TOPIC, "tubemq.tlsEnable": "true",
               "tubemq.tlsCaFile": str(pki.ca_pem), "tubemq.tlsCertFile": str(pki.client_cert_pem),
               "tubemq.tlsKeyFile": str(pki.client_key_encrypted_pem), "tubemq.tlsKeyPassword": pki.password,
               "requestTimeoutMs": "5000"}
    values = [f"spark-tls-{i}" for i in range(200)]
    (spark.createDataFrame([(v,) for v in values], "value string")
     .write.format("tubemq").options(**options).mode("append").save())

    batch = spark.read.format("tubemq").options(**options).load()
    assert sorted(r.value.decode() for r in batch.select("value").collect()) == sorted(values)

    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (spark.readStream.format("tubemq").options(**options)
             .option("group", f"tls_stream_{uuid.uuid4().hex[:8]}").option("startingOffsets", "earliest")
             .option("assignmentTimeoutMs", "30000").load()
             .selectExpr("CAST(value AS STRING) AS value")
             .writeStream.format("json").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(r.value for r in spark.read.json(str(out)).collect()) == sorted(values)
    progress = "\n".join(p.json for p in query.recentProgress)
    assert progress and pki.password not in progress


# --- refusals, each at once and named -------------------------------------------------------------------


def test_a_server_certificate_from_an_unknown_ca_is_refused(tls):
    settings = client(tls.pki, ca=tls.pki.other_ca_pem)
    error = refused(lambda: partitions(tls.cluster.master_tls_address, settings),
                    "not signed by a CA the client trusts")
    assert tls.cluster.master_tls_address in str(error)


def test_an_expired_server_certificate_is_refused(tls):
    with master_serving(tls.cluster, tls.pki.expired_keystore):
        refused(lambda: partitions(tls.cluster.master_tls_address, client(tls.pki)),
                "the server's certificate has expired")
    assert partitions(tls.cluster.master_tls_address, client(tls.pki))  # the good certificate is back


def test_a_certificate_for_another_host_is_refused_unless_hostname_checks_are_turned_off(tls):
    """Hostname verification is on by default; ``verify_hostname=False`` (``tubemq.tlsVerifyHostname``)
    accepts the certificate of another host but still checks that our CA signed it."""
    master = tls.cluster.master_tls_address
    with master_serving(tls.cluster, tls.pki.wrong_host_keystore):
        refused(lambda: partitions(master, client(tls.pki)), "not valid for the host name '127.0.0.1'")
        assert partitions(master, client(tls.pki, verify_hostname=False))
        refused(lambda: partitions(master, client(tls.pki, ca=tls.pki.other_ca_pem, verify_hostname=False)),
                "not signed by a CA the client trusts")
    assert WRONG_HOST not in master


def test_a_client_without_an_accepted_certificate_is_refused(tls):
    master = tls.cluster.master_tls_address
    refused(lambda: partitions(master, client(tls.pki, with_cert=False)), "refused the client's certificate")
    refused(lambda: partitions(master, client(tls.pki, cert=tls.pki.other_client_cert_pem,
                                              key=tls.pki.other_client_key_pem)),
            "refused the client's certificate")


def test_a_plain_text_client_at_a_tls_port_is_refused(tls):
    plain = ClientSettings(connect_timeout_s=CONNECT_TIMEOUT_S)
    refused(lambda: partitions(tls.cluster.master_tls_address, plain),
            "it is a TLS port and this client connected in plain text")


def test_a_tls_client_at_a_plain_port_fails_within_the_connect_timeout(tls):
    """The plain port ignores a ClientHello, so only the handshake's timeout can tell; still a TlsError."""
    settings = ClientSettings(connect_timeout_s=1.0, ssl_context=client(tls.pki).ssl_context)
    refused(lambda: partitions(tls.cluster.master_address, settings),
            "no answer to the TLS handshake within 1s.*plain-text port")


def test_spark_with_an_untrusted_server_fails_at_once_naming_the_cause(spark, tls):
    pki = tls.pki
    frame = (spark.read.format("tubemq").option("master", tls.cluster.master_tls_address)
             .option("topic", SPARK_TOPIC).option("tubemq.tlsEnable", "true")
             .option("tubemq.tlsCaFile", str(pki.other_ca_pem)).option("tubemq.tlsCertFile", str(pki.client_cert_pem))
             .option("tubemq.tlsKeyFile", str(pki.client_key_pem)).option("connectTimeoutMs", "10000"))
    started = time.monotonic()
    with pytest.raises(Exception, match="TlsError") as info:
        frame.load().count()
    assert time.monotonic() - started < 10.0, "the plan must not retry a TLS refusal"
    assert "not signed by a CA the client trusts" in str(info.value)


# --- no secret anywhere ------------------------------------------------------------------------------


def test_passwords_stay_out_of_reprs_errors_logs_and_the_testbed(tls, caplog):
    pki, cluster = tls.pki, tls.cluster
    password = pki.password
    assert password not in repr(cluster.settings) and password not in repr(pki)
    # The 2.4.0 servers print their store passwords in their start-up log line; the testbed's error
    # texts quote log tails, so it masks them there.
    master = cluster.process("master")
    assert password in master.log_path.read_text()
    assert password not in master.diagnostics(lines=100_000) and "***" in master.diagnostics(lines=100_000)

    raw = {"master": cluster.master_tls_address, "topic": CLIENT_TOPIC, "tubemq.tlsEnable": "true",
           "tubemq.tlsCaFile": str(pki.ca_pem), "tubemq.tlsCertFile": str(pki.client_cert_pem),
           "tubemq.tlsKeyFile": str(pki.client_key_encrypted_pem), "tubemq.tlsKeyPassword": password}
    with caplog.at_level(logging.DEBUG, logger="tubespark"):
        options = TubeMQOptions.from_raw(raw, mode="read")
        assert options.tls_key_password == password and password not in repr(options)
        assert partitions(cluster.master_tls_address, options.client_settings())
        with pytest.raises(OptionError, match="cannot load the client certificate") as wrong:
            TubeMQOptions.from_raw({**raw, "tubemq.tlsKeyPassword": password[::-1]}, mode="read")
        with pytest.raises(OptionError, match="cannot load the client certificate") as missing:
            TubeMQOptions.from_raw({k: v for k, v in raw.items() if k != "tubemq.tlsKeyPassword"}, mode="read")
    for text in (str(wrong.value), repr(wrong.value), str(missing.value), caplog.text):
        assert password not in text and password[::-1] not in text
