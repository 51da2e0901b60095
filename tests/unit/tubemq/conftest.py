"""Fixtures the TubeMQ unit tests share: a fake master in front of the module's own ``broker`` fixture, a
broker with two partitions, and stream readers made as Spark makes them.

Each module defines ``broker`` (its topics, batch sizes and stored messages differ); the master that serves
it is the same everywhere, so it is defined once here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from tests.doubles.fakebroker import FakeBroker, FakeMaster
from tubespark.spark.stream_engine import StreamEngine
from tubespark.tubemq.spark import membership
from tubespark.tubemq.spark.adapter import TubeAdapter
from tubespark.tubemq.spark.source import TubeMQDataSource
from tubespark.tubemq.wire.constants import EventType


@pytest.fixture
def master(broker: FakeBroker) -> Iterator[FakeMaster]:
    with FakeMaster(broker) as fake:
        yield fake


@contextmanager
def two_partitions(topic: str) -> Iterator[FakeBroker]:
    """A broker holding ``topic`` on two stores: 10 messages in partition 0, 30 in partition 1 (7 per fetch)."""
    with FakeBroker(batch_size=7) as fake:
        p0, p1 = fake.add_topic(topic, stores=2)
        fake.append(p0, *[f"a{i}".encode() for i in range(10)])
        fake.append(p1, *[f"b{i}".encode() for i in range(30)])
        yield fake


@contextmanager
def stream_readers(monkeypatch: pytest.MonkeyPatch, master: FakeMaster, broker: FakeBroker, topic: str,
                   base: dict[str, str]) -> Iterator[Callable[..., StreamEngine]]:
    """Make ``tubemq`` stream readers as Spark does (through the data source) on ``topic``, with ``base`` options;
    ``assign=False`` leaves the master's assignment out. Every reader made is stopped at the end."""
    monkeypatch.setattr(membership, "install_shutdown_hooks", lambda stop: None)
    readers: list[StreamEngine] = []

    def make(assign: bool = True, **raw: str) -> StreamEngine:
        if assign:
            master.push_event(EventType.CONNECT, broker.partitions(topic))
        source = TubeMQDataSource({"master": master.address, "topic": topic, **base, **raw})
        reader = source.streamReader(None)  # type: ignore[arg-type]  # the schema is not looked at
        assert isinstance(reader, StreamEngine) and isinstance(reader.broker, TubeAdapter), reader
        readers.append(reader)
        return reader

    try:
        yield make
    finally:
        for reader in readers:
            reader.stop()
