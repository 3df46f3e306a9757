"""pytest fixtures for a BookKeeper cluster in containers (docs/testing.md).

In a project's ``conftest.py``::

    pytest_plugins = ["bkspark.testing.pytest_plugin"]

    def test_pipeline(bookkeeper_cluster, spark):
        df.write.format("bookkeeper").option("metadataServiceUri", bookkeeper_cluster.metadata_service_uri)...

``bookkeeper_cluster``: one cluster for the session (three Java bookies of the default Apache BookKeeper version).
``bookkeeper_cluster_factory``: ``factory(bookies=3, bookie="java", version=..., ...)`` for clusters of one test
(fault tests: ``kill_bookie``), removed at its end. A failed test's report gets the logs of every container of the
clusters it used. Where no container engine answers, the fixtures skip the test with the reason, unless
``BKSPARK_TESTCONTAINERS_REQUIRED=1`` (CI that has an engine: its absence is then an error).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bkspark.errors import LocalClusterError
from bkspark.testing.cluster import BookKeeperCluster
from bkspark.testing.images import IMAGES_ENV, SOURCES, docker_client

__all__ = ["REQUIRED_ENV", "bookkeeper_cluster", "bookkeeper_cluster_factory", "engine_or_skip"]

#: ``1``: no container engine is an error, not a skip.
REQUIRED_ENV = "BKSPARK_TESTCONTAINERS_REQUIRED"

_CLUSTERS_KEY = pytest.StashKey[list[BookKeeperCluster]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("bkspark").addoption(
        "--bookkeeper-images", choices=SOURCES, default=None,
        help=f"container images of bookkeeper_cluster: auto (default, or ${IMAGES_ENV}), official or project",
    )


def _images(config: pytest.Config) -> str | None:
    return config.getoption("--bookkeeper-images", default=None)


def engine_or_skip() -> None:
    """Skip the calling test, with the reason in one line, where no container engine answers (an error instead
    with :data:`REQUIRED_ENV` set)."""
    try:
        docker_client().close()
    except LocalClusterError as exc:
        if os.environ.get(REQUIRED_ENV, "").strip() in ("1", "true", "yes"):
            raise
        pytest.skip(f"no container engine: {str(exc).splitlines()[0]}")


def _remember(node: pytest.Item | pytest.Session, cluster: BookKeeperCluster) -> None:
    node.stash.setdefault(_CLUSTERS_KEY, []).append(cluster)


@pytest.fixture(scope="session")
def bookkeeper_cluster(request: pytest.FixtureRequest) -> Iterator[BookKeeperCluster]:
    """ZooKeeper and three Java bookies in containers for the whole session (``.metadata_service_uri``)."""
    engine_or_skip()
    with BookKeeperCluster(3, images=_images(request.config)) as cluster:
        _remember(request.session, cluster)
        yield cluster


@pytest.fixture
def bookkeeper_cluster_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., BookKeeperCluster]]:
    """``factory(bookies=3, *, bookie="java", version=..., images=None, conf_overrides=None)``: a started cluster
    of this test, removed at its end."""
    engine_or_skip()
    clusters: list[BookKeeperCluster] = []

    def factory(bookies: int = 3, **options: Any) -> BookKeeperCluster:
        options.setdefault("images", _images(request.config))
        cluster = BookKeeperCluster(bookies, **options)
        clusters.append(cluster)
        cluster.start()
        _remember(request.node, cluster)
        return cluster

    try:
        yield factory
    finally:
        for cluster in clusters:
            cluster.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that used a container cluster gets its containers' logs in its report."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    used = {"bookkeeper_cluster", "bookkeeper_cluster_factory"} & set(getattr(item, "fixturenames", ()))
    if not used:
        return
    clusters = item.stash.get(_CLUSTERS_KEY, []) + item.session.stash.get(_CLUSTERS_KEY, [])
    for cluster in clusters:
        for name, text in cluster.logs(tail=120).items():
            report.sections.append((f"container {name}", text))
