"""Shared pytest fixtures: a real ZooKeeper, formatted cluster roots, Java bookie clusters and the Java shell.

See docs/contracts.md, "Test harness". Every process the harness starts is stopped at teardown, and whatever is
still running when the session ends is killed (tests.harness.process.kill_all).
"""

from __future__ import annotations

import itertools
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.harness.java_bookkeeper import (
    BK_VERSIONS,
    DEFAULT_BK_VERSION,
    ConfValue,
    JavaBookieCluster,
    JavaTools,
)
from tests.harness.process import kill_all
from tests.harness.zookeeper import ZkRoot, ZooKeeperServer, init_new_cluster

_MARKERS = {
    "compat": "talks to real Apache BookKeeper (Java) bookies, client or shell",
    "integration": "needs a real ZooKeeper and real bookies",
    "fault": "kills or cuts servers on purpose (slow)",
}


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers (also listed in pyproject.toml) so that -m and --strict-markers know them."""
    known = {line.split(":", 1)[0].strip() for line in config.getini("markers")}
    for name, doc in _MARKERS.items():
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {doc}")


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


def _root_name(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")[:60] or "test"
    return f"/bk-{name}-{next(_root_counter)}"


@pytest.fixture
def zk_root(request: pytest.FixtureRequest, zookeeper: ZooKeeperServer) -> Iterator[ZkRoot]:
    """A unique ledgers root (`/bk-<test>-<n>`) formatted as `BookKeeperAdmin.initNewCluster` does.

    `.path`, `.metadata_service_uri` (zk+hierarchical://127.0.0.1:PORT/<path>), `.zk_client` (kazoo, closed at
    teardown), `.connect_string`, `.instance_id`.
    """
    if not zookeeper.is_alive:  # a test killed it: bring it back with the same port and data
        zookeeper.start()
    client = zookeeper.client()
    path = _root_name(request)
    try:
        instance_id = init_new_cluster(client, path)
    except BaseException:
        client.stop()
        client.close()
        raise
    root = ZkRoot(path=path, server=zookeeper, zk_client=client, instance_id=instance_id)
    try:
        yield root
    finally:
        root.close()


# -- Java BookKeeper ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def java_tools(tmp_path_factory: pytest.TempPathFactory) -> JavaTools:
    """Runs BookieShell (`.shell(version, uri, *args)`) and tools/java programs (`.run(version, main, *args)`)."""
    return JavaTools(tmp_path_factory.mktemp("java-tools"))


JavaClusterFactory = Callable[..., JavaBookieCluster]


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
    clusters: list[JavaBookieCluster] = []

    def factory(
        version: str = DEFAULT_BK_VERSION,
        bookies: int = 3,
        root: ZkRoot | None = None,
        *,
        bookie_ids: Sequence[str | None] | None = None,
        journal_sync_data: bool = True,
        conf_overrides: Mapping[str, ConfValue] | None = None,
        jvm_args: Sequence[str] = (),
        start: bool = True,
    ) -> JavaBookieCluster:
        if version not in BK_VERSIONS:
            raise ValueError(f"unknown BookKeeper version {version!r}; choose one of {BK_VERSIONS}")
        target: ZkRoot = root if root is not None else request.getfixturevalue("zk_root")
        base: Path = tmp_path_factory.mktemp(f"java-{version}-cluster")
        cluster = JavaBookieCluster(
            version=version,
            metadata_service_uri=target.metadata_service_uri,
            base_dir=base,
            bookies=bookies,
            bookie_ids=bookie_ids,
            journal_sync_data=journal_sync_data,
            conf_overrides=conf_overrides,
            jvm_args=jvm_args,
        )
        clusters.append(cluster)
        if start:
            cluster.start_all()
        return cluster

    try:
        yield factory
    finally:
        for cluster in reversed(clusters):
            cluster.close()
