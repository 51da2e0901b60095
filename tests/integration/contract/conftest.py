"""The contract suite's ``broker`` fixture: every test of this package runs once per broker.

The parameter is session-scoped, so pytest runs all of one broker's contract tests together, and each
broker's server is the one the whole test session shares (TubeMQ, RocketMQ) or the suite's one TANK double.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.doubles.tank_broker import TankBroker
from tests.integration.contract.brokers import NAMES, Broker, RocketMQ, Tank, TubeMQ


@pytest.fixture(scope="session")
def tank_double() -> Iterator[TankBroker]:
    with TankBroker() as double:
        yield double


@pytest.fixture(scope="session", params=NAMES)
def broker(request: pytest.FixtureRequest) -> Broker:
    if request.param == "tubemq":
        return TubeMQ(request.getfixturevalue("tubemq_cluster"), request.getfixturevalue("topic_factory"))
    if request.param == "rocketmq":
        return RocketMQ(request.getfixturevalue("rocketmq_stack"))
    return Tank(request.getfixturevalue("tank_double"))
