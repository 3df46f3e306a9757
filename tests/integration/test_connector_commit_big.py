"""A dataset of 100,000 real ledgers (metadata in ZooKeeper) commits, lists and plans (slow: marked ``fault``).

The 100,000 ledgers are closed ledgers whose metadata is created directly in ZooKeeper (pipelined multi ops of
creates), each claiming one entry that no bookie stores: the test proves the commit (one job publishing 100,000
ledgers), the listing (the sharded manifest) and the planning (from the manifest and every ledger's metadata, one-entry
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
from bkspark.datasource.options import parse_read_options
from bkspark.datasource.planning import SLICE_OPEN_COST_ENTRIES, SliceGroup, partition_slices
from bkspark.datasource.reader import BookKeeperReader
from bkspark.protocol import ledger_metadata as md_codec
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZooKeeperServer
from tests.integration.test_connector_commit import two_bookies

pytestmark = [pytest.mark.integration, pytest.mark.fault]

ROOT = "/bk-connector-commit-big"
BIG = 100_000
FIRST_ID = 7_000_000
MULTI_OPS = 500
MULTIS_IN_FLIGHT = 8


@pytest.fixture(scope="module")
def py_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonBookieCluster]:
    yield from two_bookies(zookeeper, tmp_path_factory, ROOT)


def create_metadata(bk: BookKeeper, ids: list[int]) -> None:
    """Closed one-entry ledgers, metadata only, created with pipelined ZooKeeper multi ops."""
    bookies = tuple(sorted(bk.registry.writable_bookies()))[:2]
    md = LedgerMetadata(
        ensemble_size=2, write_quorum_size=2, ack_quorum_size=2, state=LedgerState.CLOSED, last_entry_id=0,
        length=10, ensembles={0: bookies}, ctime=int(time.time() * 1000),
    )
    data = md_codec.serialize(md, version=md.format_version)
    zk = bk.store.zk
    for path in sorted({bk.store.ledger_path(lid).rsplit("/", 1)[0] for lid in ids}):
        zk.ensure_path(path)
    # Multi ops of 500 creates, 8 in flight: one request (and one ZooKeeper transaction) per 500 ledgers is ~8x
    # faster here than one pipelined create per ledger. Every create of a multi must succeed (a failed op comes
    # back as an exception in the results: checked).
    pending: list = []
    for start in range(0, len(ids), MULTI_OPS):
        transaction = zk.transaction()
        for lid in ids[start : start + MULTI_OPS]:
            transaction.create(bk.store.ledger_path(lid), data)
        pending.append(transaction.commit_async())
        if len(pending) == MULTIS_IN_FLIGHT or start + MULTI_OPS >= len(ids):
            for result in pending:
                created = result.get(timeout=120)
                failed = [op for op in created if isinstance(op, Exception)]
                assert not failed, failed[:3]
            pending = []


def test_a_dataset_of_100000_real_ledgers_commits_lists_and_plans(py_cluster: PythonBookieCluster) -> None:
    uri = py_cluster.metadata_service_uri
    ids = list(range(FIRST_ID, FIRST_ID + BIG))
    with BookKeeper(uri) as bk:
        started = time.monotonic()
        create_metadata(bk, ids)
        created = time.monotonic()
        registry = DatasetRegistry(bk.store.zk, bk.store.root)
        job_id = uuid.uuid4().hex
        registry.begin_job(job_id, JobRecord(JobState.WRITING, "big"))
        for i in range(BIG):
            if i % 10_000 == 0:
                registry.register(job_id, 0, ids[i])
        result = registry.publish("big", [(0, lid) for lid in ids], replace_all=False, job_id=job_id,
                                  key=CommitKey(job_id))
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
