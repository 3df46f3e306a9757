"""What a user's conftest.py holds to test a pipeline against BookKeeper in containers (docs/testing.md)."""

from __future__ import annotations

import os
import sys

import pytest

# bookkeeper_cluster (ZooKeeper and three bookies for the session) and bookkeeper_cluster_factory.
pytest_plugins = ["bkspark.testing.pytest_plugin"]


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers need bkspark too
    session = (SparkSession.builder.master("local[2]").appName("user-pipeline-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    yield session
    session.stop()
