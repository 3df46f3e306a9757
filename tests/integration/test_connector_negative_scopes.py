"""The connector's ZooKeeper records keep negative (signed 64-bit) scope ids: a job's ledger registrations."""

from __future__ import annotations

import pytest

from bkspark.datasource.datasets import DatasetRegistry, JobRecord, JobState
from tests.harness.zookeeper import ZkRoot

pytestmark = pytest.mark.integration


def test_job_registrations_round_trip_negative_scopes(zk_root: ZkRoot) -> None:
    registry = DatasetRegistry(zk_root.zk_client, zk_root.path)
    pairs = [(-(2**63), 1), (-7, 12), (0, 5), (2**63 - 1, 2**63 - 1)]
    registry.begin_job("job-1", JobRecord(JobState.WRITING, "negative-scopes"))  # ledgers register under a live job
    for scope, ledger in pairs:
        registry.register("job-1", scope, ledger)
    assert registry.job_ledgers("job-1") == sorted(pairs)
