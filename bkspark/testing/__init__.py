"""A BookKeeper cluster in containers for tests of code that uses bkspark (docs/testing.md).

``BookKeeperCluster`` starts ZooKeeper and N bookies (Apache BookKeeper's Java bookie, or bkspark's own) with
testcontainers on loopback ports of the host's network; ``bkspark.testing.pytest_plugin`` gives them to pytest as
fixtures. ``bkspark.testing.images`` picks the images (official ones, or the project's built locally by
``make containers``). Needs ``pip install 'bkspark[testcontainers]'`` and a container engine.
"""

from bkspark.testing.cluster import DEFAULT_BOOKKEEPER_VERSION, BookKeeperCluster

__all__ = ["DEFAULT_BOOKKEEPER_VERSION", "BookKeeperCluster"]
