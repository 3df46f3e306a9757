"""The project's tests on the container backend (bkspark.testing, docs/testing.md).

The fixtures are bkspark.testing.pytest_plugin's, imported here as a user's conftest.py may import them (a user
project names the plugin in ``pytest_plugins`` instead: examples/user_project). Without a container engine every
test here is skipped with the reason in one line; `make test` as root builds the images first and sets
BKSPARK_TESTCONTAINERS_REQUIRED=1, so that a missing engine fails instead.
"""

from __future__ import annotations

from bkspark.testing.pytest_plugin import (  # noqa: F401  (fixtures and the report hook, registered by import)
    bookkeeper_cluster,
    bookkeeper_cluster_factory,
    pytest_runtest_makereport,
)
from tests.integration.test_connector_spark import spark  # noqa: F401  (the connector tests' local[2,2] session)

