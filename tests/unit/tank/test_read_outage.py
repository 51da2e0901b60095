"""A TANK read task whose broker goes down mid-range waits for it (``outageTimeoutMs``, issue 23 parts 2 and 8),
the same rule as TubeMQ's (tubespark/core/outage.py ``read_through_outage``; tests/unit/tubemq/test_read_outage.py).

The broker is the documented TANK double behind the testbed's fault proxy: "down" is the proxy stopped, "back"
a new proxy on the same port.
"""

from __future__ import annotations

import threading
import time

import pytest
from tubespark_testbed.faultproxy import FaultProxy

from tests.doubles.tank_broker import TankBroker
from tubespark.errors import BrokerUnavailableError
from tubespark.tank.spark.options import TankOptions
from tubespark.tank.spark.read_task import SeqRange, read_range
from tubespark.tank.wire.bundle import encode_bundle

REQUEST_TIMEOUT_MS = 300
OLD_BUDGET_S = 6 * REQUEST_TIMEOUT_MS / 1000
BUNDLES, PER_BUNDLE = 20, 5


def options(address: str, outage_ms: int) -> TankOptions:
    return TankOptions.from_raw({"broker": address, "topic": "events", "requestTimeoutMs": str(REQUEST_TIMEOUT_MS),
                                 "connectTimeoutMs": "300", "fetchSizeBytes": "64",
                                 "outageTimeoutMs": str(outage_ms)}, mode="read")


@pytest.mark.parametrize("comes_back", [True, False])
def test_a_tank_read_waits_for_its_broker_then_reads_on_or_fails_retriably(comes_back: bool) -> None:
    with TankBroker({"events": 1}) as broker:
        values = []
        for b in range(BUNDLES):
            batch = [b"v%04d" % (b * PER_BUNDLE + i) for i in range(PER_BUNDLE)]
            broker.append_bundle("events", 0, encode_bundle(batch, [1000 + i for i in range(PER_BUNDLE)]))
            values += batch
        proxy = FaultProxy(broker.address).start()
        port = int(proxy.address.rsplit(":", 1)[1])
        holder = {"proxy": proxy}

        def back() -> None:
            holder["proxy"] = FaultProxy(broker.address, port=port).start()

        timer = threading.Timer(2 * OLD_BUDGET_S + 0.5, back)
        task = SeqRange(proxy.address, "events", 0, 0, BUNDLES * PER_BUNDLE + 1)  # numbers start at 1
        got: list[bytes] = []
        started = time.monotonic()
        try:
            reading = read_range(task, options(proxy.address, 20_000 if comes_back else 2_500))
            if comes_back:
                for batch in reading:
                    got += batch.column("value").to_pylist()
                    if got and not timer.is_alive() and holder["proxy"] is proxy:  # once, after the first batch
                        proxy.stop()
                        timer.start()
                assert got == values, "every message once, in order"
                assert time.monotonic() - started >= 2 * OLD_BUDGET_S
            else:
                def consume() -> None:
                    for batch in reading:
                        got.extend(batch.column("value").to_pylist())
                        proxy.stop()

                with pytest.raises(BrokerUnavailableError, match=r"read of partition events:0 \[0, 101\) from broker"):
                    consume()
                assert 2.5 <= time.monotonic() - started < 2.5 + OLD_BUDGET_S + 2
                assert 0 < len(got) < len(values)
        finally:
            timer.cancel()
            if timer.is_alive():
                timer.join(5)
            holder["proxy"].stop()
            proxy.stop()
