"""Shared pytest fixtures: a real ZooKeeper, formatted cluster roots, Java bookie clusters and the Java shell.

See docs/contracts.md, "Test harness". Every process the harness starts is stopped at teardown, and whatever is
still running when the session ends is killed (tests.harness.process.kill_all).
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import threading
import warnings
from collections.abc import Callable, Iterator

import pytest

from bkspark.devcluster.java import JVM_OPTS
from bkspark.devcluster.ports import PORT_SHARD_ENV
from tests.harness.java_bookkeeper import JavaClusterFactory, JavaTools
from tests.harness.process import kill_all
from tests.harness.zookeeper import ZkRoot, ZooKeeperServer, init_new_cluster

_MARKERS = {
    "compat": "talks to real Apache BookKeeper (Java) bookies, client or shell",
    "integration": "needs a real ZooKeeper and real bookies",
    "fault": "kills or cuts servers on purpose (slow)",
    "floors": "installs and tests the oldest dependency versions pyproject.toml allows (a venv cached in .cache)",
    "campaign": "randomized fault schedules checked by a Jepsen-style checker (tests/campaign)",
    "netns": "hosts in Linux network namespaces, faults made by the kernel (tests/harness/netns.py); needs root",
}


#: Read by spark-submit for the driver JVM it starts (local mode: driver and executors in one JVM), in this
#: process and in every Spark driver subprocess a test starts with this environment: the quick-start JIT and GC
#: flags of the harness's own JVMs (C1 only, serial GC): a third to a half less wall time for a Spark session's
#: start and first job on the 2-core test machines. Heap sizes stay Spark's (spark.driver.memory).
SPARK_SUBMIT_OPTS = " ".join(opt for opt in JVM_OPTS if opt.startswith("-XX:"))


def _sigterm_to_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers (also listed in pyproject.toml) so that -m and --strict-markers know them; give Spark
    drivers quick-start JVM flags (unless SPARK_SUBMIT_OPTS is set already); give each pytest-xdist worker a shard
    of the free ports (bkspark.devcluster.ports), so that two workers never start servers on one port; make SIGTERM
    (`timeout`, CI cancellation) end the session like Ctrl-C, so that fixtures stop their servers."""
    known = {line.split(":", 1)[0].strip() for line in config.getini("markers")}
    for name, doc in _MARKERS.items():
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {doc}")
    os.environ.setdefault("SPARK_SUBMIT_OPTS", SPARK_SUBMIT_OPTS)
    worker = getattr(config, "workerinput", None)  # set in pytest-xdist's workers only (not from the environment,
    if worker is not None:  # which a pytest run in a subprocess of a worker inherits)
        os.environ[PORT_SHARD_ENV] = f"{int(worker['workerid'].removeprefix('gw'))}/{int(worker['workercount'])}"
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm_to_interrupt)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Safety net: kill every harness process a fixture failed to stop."""
    leaked = kill_all()
    if leaked:
        warnings.warn(f"bkspark harness killed processes left running at session end: {leaked}", stacklevel=1)


# -- ZooKeeper ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A real standalone ZooKeeper server on 127.0.0.1 for the whole session (`.connect_string`, `.port`)."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


_root_counter = itertools.count(1)


def _new_root(zookeeper: ZooKeeperServer, node_name: str) -> ZkRoot:
    """Format a unique root `/bk-<node name>-<n>` on `zookeeper` (restarted first if a test killed it)."""
    if not zookeeper.is_alive:  # a test killed it: bring it back with the same port and data
        zookeeper.start()
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", node_name).strip("-")[:60] or "test"
    path = f"/bk-{name}-{next(_root_counter)}"
    client = zookeeper.client()
    try:
        instance_id = init_new_cluster(client, path)
    except BaseException:
        client.stop()
        client.close()
        raise
    return ZkRoot(path=path, server=zookeeper, zk_client=client, instance_id=instance_id)


@pytest.fixture
def zk_root(request: pytest.FixtureRequest, zookeeper: ZooKeeperServer) -> Iterator[ZkRoot]:
    """A unique ledgers root (`/bk-<test>-<n>`) formatted as `BookKeeperAdmin.initNewCluster` does.

    `.path`, `.metadata_service_uri` (zk+hierarchical://127.0.0.1:PORT/<path>), `.zk_client` (kazoo, closed at
    teardown), `.connect_string`, `.instance_id`.
    """
    root = _new_root(zookeeper, request.node.name)
    try:
        yield root
    finally:
        root.close()


@pytest.fixture(scope="module")
def module_zk_root(request: pytest.FixtureRequest, zookeeper: ZooKeeperServer) -> Iterator[ZkRoot]:
    """Like `zk_root`, shared by the tests of one module (`/bk-<module>-<n>`)."""
    root = _new_root(zookeeper, request.node.name.rsplit("/", 1)[-1].removesuffix(".py"))
    try:
        yield root
    finally:
        root.close()


# -- Java BookKeeper ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def java_tools(tmp_path_factory: pytest.TempPathFactory) -> JavaTools:
    """Runs BookieShell (`.shell(version, uri, *args)`) and tools/java programs (`.run(version, main, *args)`)."""
    return JavaTools(tmp_path_factory.mktemp("java-tools"))


@pytest.fixture
def java_cluster_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaClusterFactory]:
    """`factory(version="4.17.3", bookies=3, root=None, **options) -> JavaBookieCluster`, started and registered.

    `root=None` uses this test's `zk_root` (so several clusters of one test, e.g. of different versions, form one
    mixed cluster); pass another ZkRoot to use that. Options: `bookie_ids` (custom BookieIds, BP-41),
    `journal_sync_data` (default True), `conf_overrides` (bk_server.conf settings), `jvm_args`, `start` (default
    True). Every cluster is stopped at teardown.
    """
    factory = JavaClusterFactory(
        lambda name: tmp_path_factory.mktemp(name), lambda: request.getfixturevalue("zk_root")
    )
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def module_roots(zookeeper: ZooKeeperServer) -> Iterator[Callable[[str], ZkRoot]]:
    """``module_roots(name)`` formats a fresh root on the session's ZooKeeper; all are closed with the module
    (one root per cluster of a module that runs several, e.g. one bookie per security set-up)."""
    made: list[ZkRoot] = []

    def new(name: str) -> ZkRoot:
        root = _new_root(zookeeper, name)
        made.append(root)
        return root

    yield new
    for root in made:
        root.close()


@pytest.fixture(scope="module")
def module_java_cluster_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaClusterFactory]:
    """`java_cluster_factory` whose clusters live until the end of the test module (start bookies once for many
    tests that do not need fresh ones); `root=None` means `module_zk_root`."""
    factory = JavaClusterFactory(
        lambda name: tmp_path_factory.mktemp(name), lambda: request.getfixturevalue("module_zk_root")
    )
    try:
        yield factory
    finally:
        factory.close()
