"""Fixtures the TubeMQ client tests share: a fake master in front of the module's own ``broker`` fixture.

Each module defines ``broker`` (its topics, batch sizes and stored messages differ); the master that serves
it is the same everywhere, so it is defined once here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.doubles.fakebroker import FakeBroker, FakeMaster


@pytest.fixture
def master(broker: FakeBroker) -> Iterator[FakeMaster]:
    with FakeMaster(broker) as fake:
        yield fake
