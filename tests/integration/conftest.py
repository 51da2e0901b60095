"""Fixtures for the integration tests: one real TubeMQ cluster per test session.

Everything collected under ``tests/integration`` is marked ``integration`` (``-m "not integration"``
skips it). ``TUBESPARK_SKIP_INTEGRATION=1`` skips instead of starting the cluster (outside CI only: with ``CI`` set
it fails, see ``tests/conftest.py``);
``TUBESPARK_KEEP_CLUSTER=1`` keeps the cluster's work dir (logs) after the session.

Topics are the slow part of a TubeMQ test: the master holds every *new* topic back from producers for
a fixed 30 s. So the session cluster deploys a pool of fresh topics before its broker starts (they are
ready when the cluster is), and ``topic_factory`` hands those out. A shape with no pooled topic left is
refilled in one batch (one ~32 s wait for several topics). Asking for extra deploy parameters
(``deletePolicy=...``) always creates a dedicated topic.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tubespark_testbed import ClusterSettings, LocalCluster

_HERE = Path(__file__).resolve().parent

# (partitions, stores) -> how many fresh topics to deploy with the session cluster.
# Override with TUBESPARK_TOPIC_POOL="1:4x8,4:1x4" (PARTITIONS:STORESxCOUNT, comma separated).
# Sized to what the whole suite takes (about 29, 8 and 3 of the first three shapes; the contract suite,
# tests/integration/contract, takes 11 of the first): a refill costs ~32 s.
DEFAULT_TOPIC_POOL: dict[tuple[int, int], int] = {(1, 4): 30, (4, 1): 9, (1, 1): 4, (2, 1): 2}
REFILL_BATCH = 4


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs the real local TubeMQ cluster (JVMs)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


def _topic_pool_spec() -> dict[tuple[int, int], int]:
    raw = os.environ.get("TUBESPARK_TOPIC_POOL")
    if raw is None:
        return dict(DEFAULT_TOPIC_POOL)
    pool: dict[tuple[int, int], int] = {}
    for item in filter(None, (x.strip() for x in raw.split(","))):
        shape, _, count = item.partition("x")
        partitions, stores = (int(v) for v in shape.split(":"))
        pool[(partitions, stores)] = int(count or 1)
    return pool


class TopicPool:
    """Fresh, already-publishable topics by shape, with batched refill; thread-safe."""

    def __init__(self, cluster: LocalCluster, names: dict[tuple[int, int], list[str]]) -> None:
        self.cluster = cluster
        self._free = names
        self._lock = threading.Lock()

    @staticmethod
    def plan(spec: dict[tuple[int, int], int]) -> dict[tuple[int, int], list[str]]:
        run = uuid.uuid4().hex[:6]
        return {(p, s): [f"pool_{run}_p{p}s{s}_{i}" for i in range(count)] for (p, s), count in spec.items()}

    def take(self, partitions: int, stores: int) -> str:
        with self._lock:
            free = self._free.setdefault((partitions, stores), [])
            if not free:
                batch = [_unique_name(f"pool_p{partitions}s{stores}") for _ in range(REFILL_BATCH)]
                self.cluster.create_topics(batch, partitions, stores)
                free.extend(batch)
            return free.pop(0)


README_TOPIC = "demo_events"


def _unique_name(prefix: str) -> str:
    # Topic names: a letter first, then letters, digits, underscores (no hyphens, unlike group names).
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def _topic_pool_plan() -> dict[tuple[int, int], list[str]]:
    return TopicPool.plan(_topic_pool_spec())


@pytest.fixture(scope="session")
def tubemq_cluster(_topic_pool_plan: dict[tuple[int, int], list[str]]) -> Iterator[LocalCluster]:
    """A started :class:`LocalCluster` shared by the whole session (about 40 s to start)."""
    if os.environ.get("TUBESPARK_SKIP_INTEGRATION", "") not in ("", "0"):
        # Never a green CI run without the cluster (tests/conftest.py turns any skip into a failure in CI, too).
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail("TUBESPARK_SKIP_INTEGRATION is set in CI, where the integration tests must run")
        pytest.skip("TUBESPARK_SKIP_INTEGRATION is set")
    initial = [(name, p, s) for (p, s), names in _topic_pool_plan.items() for name in names]
    initial.append((README_TOPIC, 1, 4))  # the README example's topic, deployed with the pool (no 30 s wait)
    cluster = LocalCluster(topics=initial)
    try:
        cluster.start()  # stops whatever it started if it fails
        yield cluster
    finally:
        cluster.stop()


# Topics of the 3-broker cluster, deployed on all three before they start: (partitions, stores) -> count.
BROKERS_TOPIC_POOL: dict[tuple[int, int], int] = {(1, 2): 10, (2, 1): 2}


@pytest.fixture(scope="session")
def tubemq_brokers() -> Iterator[tuple[LocalCluster, TopicPool]]:
    """A started 3-broker :class:`LocalCluster` (``broker``, ``broker-2``, ``broker-3`` on 127.0.0.1-3, ids 1-3)
    and its pool of topics deployed on all three, shared by the tests whose behaviour depends on placement.

    Started on first use (about 45 s), once per session. A test that takes a broker down brings it back
    (``cluster.outage(...)``) before it ends, so the next one finds all three serving.
    """
    if os.environ.get("TUBESPARK_SKIP_INTEGRATION", "") not in ("", "0"):
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail("TUBESPARK_SKIP_INTEGRATION is set in CI, where the integration tests must run")
        pytest.skip("TUBESPARK_SKIP_INTEGRATION is set")
    plan = TopicPool.plan(BROKERS_TOPIC_POOL)
    # No memory cache: an acknowledged message is in the segment file, so a broker taken down and brought back
    # still holds it (these tests are about placement; the durability window is test_soak's and test_faults')
    cluster = LocalCluster(brokers=3, topics=[(name, p, s) for (p, s), names in plan.items() for name in names],
                           settings=ClusterSettings().tight_flush(mem_store=False))
    try:
        cluster.start()
        yield cluster, TopicPool(cluster, plan)
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def topic_factory(
    tubemq_cluster: LocalCluster, _topic_pool_plan: dict[tuple[int, int], list[str]]
) -> Callable[..., str]:
    """``make_topic(partitions=1, stores=4, **deploy_params) -> name`` of a fresh, publishable topic."""
    pool = TopicPool(tubemq_cluster, {shape: list(names) for shape, names in _topic_pool_plan.items()})

    def make_topic(partitions: int = 1, stores: int = 4, **kw: Any) -> str:
        if kw:
            name = _unique_name("t")
            tubemq_cluster.create_topic(name, partitions=partitions, stores=stores, **kw)
            return name
        return pool.take(partitions, stores)

    return make_topic


@pytest.fixture(scope="session")
def java():
    """The official TubeMQ Java client, driven by our interop tool (built once, cached)."""
    from tests.interop.javaclient import shared_client

    client = shared_client()
    client.build()
    return client


@pytest.fixture(scope="session")
def rocketmq_stack():
    """A started RocketMQ name server + broker (``broker-a``) shared by the session (about 10 s to start)."""
    from tubespark_testbed.rocketmq import RocketMQStack

    stack = RocketMQStack.single()
    try:
        stack.start()  # stops whatever it started if it fails
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def rocketmq_topic(rocketmq_stack) -> Callable[..., str]:
    """``make(queues=4) -> name`` of a fresh topic on the session's RocketMQ broker."""

    def make(queues: int = 4) -> str:
        return rocketmq_stack.create_topic(_unique_name("rmq"), queues)

    return make
