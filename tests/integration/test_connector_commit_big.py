"""A dataset of 100,000 real ledgers (metadata in ZooKeeper) commits, lists and plans (slow: marked ``fault``).

The 100,000 ledgers are closed ledgers whose metadata is created directly in ZooKeeper (pipelined multi ops of
creates), each claiming one entry that no bookie stores: the test proves the commit (one job publishing 100,000
ledgers, each looked up and as many checked in the commit's multi as its bound allows), the listing (the sharded manifest) and the planning (from the manifest and every ledger's metadata, one-entry
ledgers packed 100 to a partition), not the reading of their entries; the reading of a dataset is tested on real rows in
test_connector_commit.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from bkspark.client import BookKeeper
from bkspark.datasource.clients import client_conf, evict_client
from bkspark.datasource.datasets import CommitKey, DatasetRegistry, JobRecord, JobState
from bkspark.datasource.publishing import checks_in_multi
from bkspark.datasource.options import parse_read_options
from bkspark.datasource.planning import SLICE_OPEN_COST_ENTRIES, SliceGroup, partition_slices
from bkspark.datasource.reader import BookKeeperReader
from tests.harness.ledgers import create_metadata_only
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZooKeeperServer
from tests.integration.test_connector_commit import two_bookies

pytestmark = [pytest.mark.integration, pytest.mark.fault]

ROOT = "/bk-connector-commit-big"
BIG = 100_000
FIRST_ID = 7_000_000


@pytest.fixture(scope="module")
def py_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonBookieCluster]:
    yield from two_bookies(zookeeper, tmp_path_factory, ROOT)


def test_a_dataset_of_100000_real_ledgers_commits_lists_and_plans(py_cluster: PythonBookieCluster) -> None:
    uri = py_cluster.metadata_service_uri
    ids = list(range(FIRST_ID, FIRST_ID + BIG))
    with BookKeeper(uri) as bk:
        started = time.monotonic()
        create_metadata_only(bk, ids)
        created = time.monotonic()
        registry = DatasetRegistry(bk.store.zk, bk.store.root)
        job_id = uuid.uuid4().hex
        registry.begin_job(job_id, JobRecord(JobState.WRITING, "big"))
        for i in range(BIG):
            if i % 10_000 == 0:
                registry.register(job_id, 0, ids[i])
        # As many ledgers as MULTI_CHECK_BYTES allows are checked in the commit's multi, the others looked up with
        # multi reads just before it.
        in_multi = checks_in_multi([bk.store.ledger_path(lid) for lid in ids])
        assert 1_000 < len(in_multi) < 2_000
        result = registry.publish("big", [(0, lid) for lid in ids], replace_all=False, job_id=job_id,
                                  key=CommitKey(job_id), ledger_path=bk.store.ledger_path)
        assert not result.already and result.root.ledger_count == BIG
        registry.forget_job(job_id)
        committed = time.monotonic()
        manifest = registry.manifest("big")
        assert manifest is not None and [lid for _, lid in manifest.ledgers] == ids
        listed = time.monotonic()
    reader = BookKeeperReader(parse_read_options({"metadataserviceuri": uri, "dataset": "big"}))
    try:
        parts = reader.partitions()
    finally:
        evict_client(uri, client_conf((), batch_read_enabled=True))
    planned = time.monotonic()
    # one-entry ledgers are packed: each costs 1 + SLICE_OPEN_COST_ENTRIES, so 100 fit one partition of 100,000
    per_partition = (100_000 + SLICE_OPEN_COST_ENTRIES) // (1 + SLICE_OPEN_COST_ENTRIES)
    assert len(parts) == BIG // per_partition and all(isinstance(p, SliceGroup) for p in parts)
    slices = [piece for part in parts for piece in partition_slices(part)]
    assert all(piece.first_entry == piece.last_entry == 0 for piece in slices)
    assert [piece.ledger_id for piece in slices] == ids
    print(f"100,000 ledgers: metadata {created - started:.1f}s, commit {committed - created:.1f}s, "
          f"list {listed - committed:.1f}s, plan {planned - listed:.1f}s")
