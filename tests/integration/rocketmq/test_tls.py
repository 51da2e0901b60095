"""TLS against a real RocketMQ 5.3.3 name server and broker (issue 26, part 2).

The module makes a throw-away CA and a server certificate for ``127.0.0.1`` (``tubespark_testbed.tls.
make_pem_pki``: PEM, what the servers' ``tls.server.certPath``/``keyPath`` read) and starts one name server
and broker in ``tls.server.mode=enforcing`` (docs/rocketmq/tls.md): TLS only, on their usual ports, the
broker registering with the name server over TLS too. So every connection a test makes, to the name server
and to the broker, is TLS or fails. One stack serves the module; it starts ahead of it (PRESTART).

* a Spark write and a batch read with ``tlsEnable`` and ``tlsCaFile``: the server's chain and host name
  verified, every row back;
* a CA that did not sign the servers' certificate, and a host name the certificate does not name: a
  :class:`TlsError` at once (not retried), whose first line says what to do;
* plain text to the enforcing servers: the server closes the connection unanswered, and the error says
  it is a TLS port and to enable TLS.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.readers import RocketMQBatchReader
from tubespark.errors import TlsError
from tubespark.rocketmq.client.client import all_queues
from tubespark.rocketmq.spark.options import RocketMQOptions

pytestmark = [pytest.mark.integration, pytest.mark.spark]

AT_ONCE_S = 3.0


@dataclass(frozen=True)
class Tls:
    stack: object  # tubespark_testbed.rocketmq.RocketMQStack
    ca: Path
    other_ca: Path


@contextlib.contextmanager
def _tls_stack(tmp: Path) -> Iterator[Tls]:
    from tubespark_testbed.rocketmq import RocketMQStack, ServerTls
    from tubespark_testbed.tls import make_pem_pki

    pki = make_pem_pki(tmp / "pki")
    stack = RocketMQStack.single(tls=ServerTls(pki.server_cert_pem, pki.server_key_pem, pki.ca_pem))
    try:
        stack.start()
        yield Tls(stack, pki.ca_pem, pki.other_ca_pem)
    finally:
        stack.stop()


PRESTART = {"tls_stack": _tls_stack}
PRESTART_LIGHT = True  # a broker: mostly waiting while it starts, so it may start beside another


@pytest.fixture(scope="module")
def tls(prestarted) -> Tls:
    return prestarted("tls_stack")


def options(tls: Tls, topic: str, *, ca: Path | None = None, namesrv: str | None = None,
            enable: bool = True) -> dict[str, str]:
    raw = {"namesrv": namesrv or tls.stack.namesrv_address, "topic": topic}
    if enable:
        raw |= {"tlsEnable": "true", "tlsCaFile": str(ca or tls.ca)}
    return raw


def plan(raw: dict[str, str]) -> list[object]:
    return RocketMQBatchReader(RocketMQOptions.from_raw(raw, mode="read")).partitions()


def refused(raw: dict[str, str], match: str) -> TlsError:
    """Planning a read with ``raw`` fails with TlsError matching ``match`` on its first line, at once."""
    started = time.monotonic()
    with pytest.raises(TlsError) as info:
        plan(raw)
    took = time.monotonic() - started
    first = str(info.value).split("\n", 1)[0]
    assert match in first, first
    assert took < AT_ONCE_S, f"took {took:.1f}s: {info.value}"
    assert not info.value.retriable
    return info.value


def test_a_write_and_a_batch_read_over_tls_verify_the_servers_certificate(spark, tls):
    topic = tls.stack.create_topic("tls" + uuid.uuid4().hex[:8], 2)
    values = [f"v{i}" for i in range(40)]
    (spark.createDataFrame([(v, "t") for v in values], "value string, tags string").write
     .format("rocketmq").options(**options(tls, topic)).mode("append").save())
    client = tls.stack.client  # over TLS too: the set-up client of an enforcing stack
    deadline = time.monotonic() + 30  # the broker dispatches to its queues asynchronously
    while sum(high - low for low, high in client.bounds(all_queues(client, [topic])).values()) < len(values):
        assert time.monotonic() < deadline, "the written rows did not reach the queues"
        time.sleep(0.1)
    rows = spark.read.format("rocketmq").options(**options(tls, topic)).load().collect()
    assert sorted(r.value for r in rows) == sorted(v.encode() for v in values)
    assert {r.brokerName for r in rows} == {"broker-a"}


def test_a_wrong_ca_or_host_fails_at_once_with_a_tls_error_that_says_what_to_do(tls):
    topic = "TBW102"  # routed on every broker with autoCreateTopicEnable: the route call is the first one
    error = refused(options(tls, topic, ca=tls.other_ca), "give the CA that signed it as the CA file")
    assert "not signed by a CA the client trusts" in str(error)
    port = tls.stack.namesrv_address.rpartition(":")[2]
    refused(options(tls, topic, namesrv=f"localhost:{port}"), "connect by a name the certificate holds")


def test_plain_text_to_enforcing_servers_fails_saying_to_enable_tls(tls):
    error = refused(options(tls, "TBW102", enable=False), "it is a TLS port")
    assert "enable TLS in the client" in str(error)
