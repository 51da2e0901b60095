"""Fixtures for the integration tests: one real TubeMQ cluster per test session.

Everything collected under ``tests/integration`` is marked ``integration`` (``-m "not integration"``
skips it). ``TUBESPARK_SKIP_INTEGRATION=1`` skips instead of starting the cluster (outside CI only: with ``CI`` set
it fails, see ``tests/conftest.py``);
``TUBESPARK_KEEP_CLUSTER=1`` keeps the cluster's work dir (logs) after the session.

Clusters start ahead of their use (``tubespark_testbed/prestart.py``): the session's TubeMQ cluster and
RocketMQ stack as soon as the tests are collected (``./dev test`` runs the unit tests meanwhile), and
what a module declares in its ``PRESTART`` (its own cluster, a wheel build, a demo run; taken with the
``prestarted`` fixture) in the background before the module that needs it, so their
~30-40 s of start-up overlaps other tests instead of adding to the run. A module may list topics to
deploy with the session cluster in ``SESSION_TOPICS`` (names it needs before its test runs).

Topics are the slow part of a TubeMQ test: the master holds every *new* topic back from producers for
a fixed 30 s. So the session cluster deploys a pool of fresh topics before its broker starts (they are
ready when the cluster is), and ``topic_factory`` hands those out. A shape with no pooled topic left is
refilled in one batch (one ~32 s wait for several topics). Asking for extra deploy parameters
(``deletePolicy=...``) always creates a dedicated topic.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tubespark_testbed import LocalCluster, lanes, prestart, sparkjvm, sparkpython
from tubespark_testbed.prestart import Prestarter

_HERE = Path(__file__).resolve().parent
_PARENT = os.getppid()  # the process that started this session (see _wait_for_the_unit_tests)

# (partitions, stores) -> how many fresh topics to deploy with the session cluster.
# Override with TUBESPARK_TOPIC_POOL="1:4x8,4:1x4" (PARTITIONS:STORESxCOUNT, comma separated).
# Sized to what the whole suite takes, with a few to spare (the full run at e1f8050 took 37 of the first shape,
# 11 of the second and 21 of the third, which cost it two refills, 64 s): a refill costs ~32 s, a deployed topic
# nothing until it is used. The run's summary line says what was taken and any refill.
DEFAULT_TOPIC_POOL: dict[tuple[int, int], int] = {(1, 4): 41, (4, 1): 14, (1, 1): 24, (2, 1): 2}
REFILL_BATCH = 4


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs the real local TubeMQ cluster (JVMs)")
    config.addinivalue_line("markers", "quiet: bounds a latency, so runs while the other lane of ./dev test waits")
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # a script's background job (./dev test runs this session as one) starts with SIGINT ignored, which every
        # process it starts would inherit: the demo's Ctrl-C test would find a demo that ignores Ctrl-C
        signal.signal(signal.SIGINT, signal.default_int_handler)
    sparkjvm.apply_to_environment()  # start-up-speed flags for every Spark driver the tests start (sparkjvm.py)
    sparkpython.apply_to_environment()  # Spark's Python processes import PySpark with bytecode (sparkpython.py)
    config.stash[_PRESTARTER] = Prestarter(background=prestart.enabled(), ahead=prestart.ahead())
    config.stash[_POOL_PLAN] = TopicPool.plan(_topic_pool_spec())
    config.stash[_SESSION_TOPICS] = []
    which, lock = lanes.lane(), os.environ.get(lanes.LOCK_ENV)
    if which is not None and lock:
        config.stash[_TURNS] = lanes.QuietTurns(Path(lock))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    which, count = lanes.lane(), lanes.lane_count()
    kept: list[pytest.Item] = []
    other_lane: list[pytest.Item] = []  # ./dev test's lanes (tubespark_testbed/lanes.py)
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if _HERE in path.parents:
            item.add_marker(pytest.mark.integration)
            if which is not None and not lanes.in_lane(path.relative_to(_HERE).as_posix(), which, count):
                other_lane.append(item)
                continue
        kept.append(item)
    if other_lane:
        config.hook.pytest_deselected(items=other_lane)
    # Quiet modules last: a quiet test waits for every other lane's test under way, and the long lane's soak is one
    # test of minutes at the start; by the end of this lane it has long ended (whole modules move, with their
    # module-scoped fixtures, in their own order)
    kept.sort(key=lambda item: bool(getattr(getattr(item, "module", None), "PRESTART_QUIET", False)))
    items[:] = kept


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
        self.initial = {shape: len(free) for shape, free in names.items()}
        self.taken: dict[tuple[int, int], int] = {}
        self.refills: dict[tuple[int, int], int] = {}

    @staticmethod
    def plan(spec: dict[tuple[int, int], int]) -> dict[tuple[int, int], list[str]]:
        run = uuid.uuid4().hex[:6]
        return {(p, s): [f"pool_{run}_p{p}s{s}_{i}" for i in range(count)] for (p, s), count in spec.items()}

    def take(self, partitions: int, stores: int) -> str:
        with self._lock:
            shape = (partitions, stores)
            free = self._free.setdefault(shape, [])
            if not free:
                batch = [_unique_name(f"pool_p{partitions}s{stores}") for _ in range(REFILL_BATCH)]
                self.cluster.create_topics(batch, partitions, stores)
                free.extend(batch)
                self.refills[shape] = self.refills.get(shape, 0) + 1
            self.taken[shape] = self.taken.get(shape, 0) + 1
            return free.pop(0)

    def summary(self) -> str:
        shapes = sorted(set(self.initial) | set(self.taken))
        text = ", ".join(f"{p}x{s}: {self.taken.get((p, s), 0)} of {self.initial.get((p, s), 0)}"
                         + (f" + {self.refills[(p, s)]} refills" if (p, s) in self.refills else "")
                         for p, s in shapes)
        return f"topic pool (partitions x stores: taken of pooled): {text}"


README_TOPICS = ("demo_events", "demo_copy")
"""The topics the README's cluster command deploys, so its blocks run as written (test_readme_example.py)."""


def _unique_name(prefix: str) -> str:
    # Topic names: a letter first, then letters, digits, underscores (no hyphens, unlike group names).
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _skipping() -> bool:
    return os.environ.get("TUBESPARK_SKIP_INTEGRATION", "") not in ("", "0")


def _refuse_or_skip() -> None:
    if _skipping():
        # Never a green CI run without the cluster (tests/conftest.py turns any skip into a failure in CI, too).
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail("TUBESPARK_SKIP_INTEGRATION is set in CI, where the integration tests must run")
        pytest.skip("TUBESPARK_SKIP_INTEGRATION is set")


# --- set-up started ahead of its use (tubespark_testbed/prestart.py) ---------------------------------

_PRESTARTER = pytest.StashKey[Prestarter]()
_POOL_PLAN = pytest.StashKey[dict[tuple[int, int], list[str]]]()
_SESSION_TOPICS = pytest.StashKey[list[tuple[str, int, int]]]()
_POOL = pytest.StashKey[TopicPool]()
_CLUSTER = pytest.StashKey[LocalCluster]()
_TURNS = pytest.StashKey[lanes.QuietTurns]()


def _session_cluster(config: pytest.Config) -> Callable[[Path], contextlib.AbstractContextManager[LocalCluster]]:
    @contextlib.contextmanager
    def start(_tmp: Path) -> Iterator[LocalCluster]:
        initial = [(name, p, s) for (p, s), names in config.stash[_POOL_PLAN].items() for name in names]
        initial += [(name, 1, 4) for name in README_TOPICS]  # the README's topics, deployed with the pool
        initial += config.stash[_SESSION_TOPICS]
        with LocalCluster(topics=initial) as cluster:  # stops whatever it started if the start fails
            yield cluster

    return start


@contextlib.contextmanager
def _rocketmq_stack(_tmp: Path) -> Iterator[Any]:
    from tubespark_testbed.rocketmq import RocketMQStack

    stack = RocketMQStack.single()
    try:
        stack.start()  # stops whatever it started if it fails
        yield stack
    finally:
        stack.stop()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Plan what starts ahead: the session's clusters by first use, then each module's ``PRESTART``."""
    try:
        if not _skipping():
            _plan_and_start(session)
    finally:
        _wait_for_the_unit_tests()


def _wait_for_the_unit_tests() -> None:
    """``./dev test`` starts this session beside the unit tests, so the session's clusters start while those run
    (about 40 s of mostly waiting on the master's timers); ``TUBESPARK_START_GATE`` names the file it creates when
    they have ended, and the first test waits for it. A gate whose creator is gone (the parent process this
    session began with, or the gate's directory, which ``./dev test`` removes on exit) ends the run."""
    gate = os.environ.get("TUBESPARK_START_GATE")
    if not gate:
        return
    while not os.path.exists(gate):
        if os.getppid() != _PARENT or not os.path.isdir(os.path.dirname(gate) or "."):
            pytest.exit(f"the ./dev test that started this run ended before it opened {gate}", returncode=3)
        time.sleep(0.2)


def _plan_and_start(session: pytest.Session) -> None:
    prestarter = session.config.stash[_PRESTARTER]
    mine = [item for item in session.items if _HERE in Path(str(item.fspath)).resolve().parents]
    # the session's clusters first (no limit on those), then the modules' pieces in the order of the tests
    if any("tubemq_cluster" in item.fixturenames for item in mine):
        prestarter.plan("session:tubemq_cluster", _session_cluster(session.config), None)
    rocketmq_users = [item for item in mine if _uses_rocketmq_stack(item)]
    if rocketmq_users:  # stopped after its last user: an idle RocketMQ broker keeps some 10% of a core busy
        prestarter.plan("session:rocketmq_stack", _rocketmq_stack, None, last_user=rocketmq_users[-1].nodeid)
    modules = list(dict.fromkeys(item.module for item in mine if getattr(item, "module", None) is not None))
    for module in modules:
        session.config.stash[_SESSION_TOPICS] += list(getattr(module, "SESSION_TOPICS", ()))
        light = bool(getattr(module, "PRESTART_LIGHT", False))
        for name, factory in getattr(module, "PRESTART", {}).items():
            prestarter.plan(f"{module.__name__}:{name}", factory, module.__name__, light=light)
    if not session.config.option.collectonly:
        prestarter.start()  # the session's clusters come up while the unit tests run (./dev test)


def _uses_rocketmq_stack(item: pytest.Item) -> bool:
    # directly, or as the contract suite's RocketMQ broker (tests/integration/contract/conftest.py)
    params = getattr(getattr(item, "callspec", None), "params", {})
    return "rocketmq_stack" in item.fixturenames or params.get("broker") == "rocketmq"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    prestarter = item.config.stash[_PRESTARTER]
    prestarter.set_quiet(bool(getattr(getattr(item, "module", None), "PRESTART_QUIET", False)))
    prestarter.open()  # the integration tests run: modules' pieces may start now (the unit tests ran first)
    cluster = item.config.stash.get(_CLUSTER, None)
    if cluster is not None:  # a test before this one may have left the session cluster's broker coming back
        cluster.wait_back()  # (LocalCluster.start_again(wait=False)): wait here, before any fixture uses it


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Once a module's last test is torn down, stop what was started for it (all of it after the last test), and
    after a session piece's last user, that piece."""
    result = yield
    prestarter = item.config.stash[_PRESTARTER]
    errors = prestarter.release_after(item.nodeid)
    module = getattr(item, "module", None)
    if module is not None and (nextitem is None or getattr(nextitem, "module", None) is not module):
        errors += prestarter.release(module.__name__, everything=nextitem is None)
    if errors:
        raise RuntimeError("stopping what was started for the tests failed: " + "; ".join(errors))
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """In lanes, a quiet test and the other lanes' tests take turns (tubespark_testbed/lanes.py)."""
    turns = item.config.stash.get(_TURNS, None)
    if turns is None:
        return (yield)
    quiet = getattr(getattr(item, "module", None), "PRESTART_QUIET", False) or item.get_closest_marker("quiet")
    with turns.test(quiet=bool(quiet)):
        return (yield)


def pytest_sessionfinish(session: pytest.Session) -> None:
    errors = session.config.stash[_PRESTARTER].stop()  # what is still up: the session's clusters, an interrupted run's
    if errors:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("stopping what was started for the tests failed: " + "; ".join(errors), red=True)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    prestarter = config.stash[_PRESTARTER]
    lines = prestarter.report()
    if lines:
        terminalreporter.write_sep("-", "started ahead (tubespark_testbed/prestart.py)")
        for line in lines:
            terminalreporter.write_line(line)
    pool = config.stash.get(_POOL, None)
    if pool is not None:
        terminalreporter.write_line(pool.summary(), yellow=bool(pool.refills))


@pytest.fixture(scope="session")
def _topic_pool_plan(pytestconfig: pytest.Config) -> dict[tuple[int, int], list[str]]:
    return pytestconfig.stash[_POOL_PLAN]


@pytest.fixture(scope="session")
def tubemq_cluster(pytestconfig: pytest.Config) -> LocalCluster:
    """A started :class:`LocalCluster` shared by the whole session (about 40 s to start, ahead of use)."""
    _refuse_or_skip()
    cluster: LocalCluster = pytestconfig.stash[_PRESTARTER].get("session:tubemq_cluster",
                                                                _session_cluster(pytestconfig), None)
    pytestconfig.stash[_CLUSTER] = cluster
    return cluster


@pytest.fixture(scope="module")
def prestarted(request: pytest.FixtureRequest) -> Callable[[str], Any]:
    """``prestarted(name)``: the started piece ``name`` of this module's ``PRESTART`` (see prestart.py)."""
    _refuse_or_skip()
    module = request.module
    prestarter = request.config.stash[_PRESTARTER]

    def get(name: str) -> Any:
        return prestarter.get(f"{module.__name__}:{name}", module.PRESTART[name], module.__name__)

    return get




@pytest.fixture(scope="session")
def topic_factory(
    request: pytest.FixtureRequest, tubemq_cluster: LocalCluster, _topic_pool_plan: dict[tuple[int, int], list[str]]
) -> Callable[..., str]:
    """``make_topic(partitions=1, stores=4, **deploy_params) -> name`` of a fresh, publishable topic."""
    pool = TopicPool(tubemq_cluster, {shape: list(names) for shape, names in _topic_pool_plan.items()})
    request.config.stash[_POOL] = pool

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
def rocketmq_stack(pytestconfig: pytest.Config) -> Any:
    """A started RocketMQ name server + broker (``broker-a``) shared by the session (about 10 s to start, ahead
    of use)."""
    return pytestconfig.stash[_PRESTARTER].get("session:rocketmq_stack", _rocketmq_stack, None)


@pytest.fixture
def rocketmq_topic(rocketmq_stack) -> Callable[..., str]:
    """``make(queues=4) -> name`` of a fresh topic on the session's RocketMQ broker."""

    def make(queues: int = 4) -> str:
        return rocketmq_stack.create_topic(_unique_name("rmq"), queues)

    return make
