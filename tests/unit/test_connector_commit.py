"""The commit protocol's pieces without servers: manifest and job-record encodings, fault plans.

The protocol itself runs against real ZooKeeper, bookies and Spark in tests/integration/test_connector_commit*.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from kazoo.exceptions import ConnectionLoss

from bkspark.datasource.datasets import (
    DatasetManifest,
    DatasetRegistry,
    JobRecord,
    JobState,
    ManifestRoot,
    Shard,
    ShardRef,
)
from bkspark.datasource.faults import FAULT_POINTS, fault_point, injected
from bkspark.errors import BadMetadataError, BookieIOError, InvalidOptionError


def test_a_root_names_shards_and_keys_and_round_trips() -> None:
    root = ManifestRoot(
        name="d", generation=3, shards=(ShardRef("job1.ab.0", 10_000), ShardRef("job2.cd.0", 5)),
        retired=(ShardRef("job0.ef.0", 7),), keys=(("job1", 0), ("stream-q", 41)), version=9,
    )
    again = ManifestRoot.from_bytes("d", root.to_bytes(), 9)
    assert again == root
    assert again.ledger_count == 10_005 and again.committed and again.token("stream-q") == 41
    assert again.token("nobody") is None
    assert root.shards[0].owner == "job1"


def test_an_empty_root_is_not_committed_and_a_format_1_manifest_reads_as_legacy() -> None:
    empty = ManifestRoot.from_bytes("d", b"", 0)
    assert not empty.committed and empty.ledger_count == 0
    old = DatasetManifest("d", ((0, 5), (7, 9))).to_bytes()
    root = ManifestRoot.from_bytes("d", old, 4)
    assert root.legacy == ((0, 5), (7, 9)) and root.committed and root.ledger_count == 2
    assert DatasetManifest.from_bytes("d", old, 4).ledgers == ((0, 5), (7, 9))


@pytest.mark.parametrize("data", [b"{", b'{"format":3}', b'{"format":2,"name":"d"}', b"\xff", b"[]"])
def test_a_malformed_root_is_a_typed_error(data: bytes) -> None:
    with pytest.raises(BadMetadataError, match="dataset manifest of 'd'"):
        ManifestRoot.from_bytes("d", data, 0)


def test_a_full_shard_fits_zookeepers_1_mb_limit_whatever_its_ids() -> None:
    """docs/connector.md, "The manifest": ZooKeeper's 1 MB limit applies to each shard. A full shard of the
    longest ids (scope -2^63, ledger ids near 2^63, as BP-35's random ids are) with a parent for every ledger (a
    streaming sink's batch of one ledger each) is the largest a publish writes: it must still fit, with room
    for the request's path and framing (jute.maxbuffer is 1 MiB - 1)."""
    from bkspark.datasource.datasets import SHARD_MAX_LEDGERS

    scope, top = -(2**63), 2**63 - 1
    ledgers = tuple((scope, top - i) for i in range(SHARD_MAX_LEDGERS))
    parents = tuple((scope, top - SHARD_MAX_LEDGERS - i) for i in range(SHARD_MAX_LEDGERS))
    assert len(Shard(ledgers, parents).to_bytes()) < 1_000_000
    # the doc's figure for scope 0 (ids from ZooKeeper's generator, one job parent)
    assert len(Shard(tuple((0, 50_000_000 + i) for i in range(10_000)), ((0, 49_999_999),)).to_bytes()) < 150_000


def test_a_root_stays_small_whatever_the_datasets_size() -> None:
    """docs/connector.md, "The manifest": the root names shards, never ledgers: a few kB for 100,000 ledgers (20
    shards), and the idempotency keys it remembers (MAX_COMMIT_KEYS writers, a streaming query's key the longest
    the connector writes) add at most about 60 kB."""
    import uuid

    from bkspark.datasource.publishing import MAX_COMMIT_KEYS

    refs = tuple(ShardRef(f"{uuid.uuid4().hex}.{uuid.uuid4().hex[:12]}.{i}", 10_000) for i in range(20))
    assert len(ManifestRoot("events", 5, refs).to_bytes()) < 4_000
    keys = tuple((f"stream-{uuid.uuid4()}", 10**12 + i) for i in range(MAX_COMMIT_KEYS))
    assert len(ManifestRoot("events", 5, refs, (), keys).to_bytes()) < 4_000 + 64_000


def test_a_commit_multi_with_the_most_existence_checks_fits_zookeepers_1_mb_limit() -> None:
    """docs/connector.md, "The commit protocol": the commit's ``multi`` checks that the job's ledgers still exist,
    as many as MULTI_CHECK_BYTES of check operations (over a thousand ledgers of scope 0).  With the longest paths (a
    BP-35 scope), the largest root (MAX_COMMIT_KEYS keys) and a parent ledger's metadata, the request kazoo sends
    stays under jute.maxbuffer (1 MiB - 1)."""
    import uuid

    from kazoo.protocol.serialization import CheckVersion, Create, SetData, Transaction
    from kazoo.security import OPEN_ACL_UNSAFE

    from bkspark.datasource.publishing import CHECK_OP_OVERHEAD, MAX_COMMIT_KEYS, MULTI_CHECK_BYTES, checks_in_multi
    from bkspark.protocol import zk_paths

    scoped = [zk_paths.ledger_path("/ledgers", 2**63 - 1 - i, scope_id=-(2**63)) for i in range(20_000)]
    checked = checks_in_multi(scoped)
    assert 0 < len(checked) < len(scoped) and checked == scoped[: len(checked)]
    assert sum(len(p) + CHECK_OP_OVERHEAD for p in checked) <= MULTI_CHECK_BYTES
    assert sum(len(p) + CHECK_OP_OVERHEAD for p in scoped[: len(checked) + 1]) > MULTI_CHECK_BYTES
    refs = tuple(ShardRef(f"{uuid.uuid4().hex}.{uuid.uuid4().hex[:12]}.{i}", 10_000) for i in range(20))
    keys = tuple((f"stream-{uuid.uuid4()}", 10**12 + i) for i in range(MAX_COMMIT_KEYS))
    root = ManifestRoot("events", 5, refs, (), keys).to_bytes()
    record = JobRecord(JobState.COMMITTED, "events", overwrite=True, parent=(0, 2**62)).to_bytes()
    multi = Transaction([
        SetData("/ledgers/bkspark/jobs/" + uuid.uuid4().hex, record, 3),
        SetData("/ledgers/bkspark/datasets/events", root, 7),
        Create(scoped[-1], b"p" * 8192, OPEN_ACL_UNSAFE, 0),  # the job's parent ledger: metadata of a few kB
        *[CheckVersion(path, -1) for path in checked],
    ])
    assert len(multi.serialize()) < (1 << 20) - 1
    # scope 0's paths are shorter: over a thousand ledgers a multi, a job's tasks
    assert 1_000 < len(checks_in_multi([zk_paths.ledger_path("/ledgers", 50_000_000 + i) for i in range(20_000)])) < 2_000
    assert checks_in_multi([]) == []


def test_shards_and_job_records_round_trip() -> None:
    shard = Shard(((0, 1), (0, 2)), ((0, 99),))
    assert Shard.from_bytes(shard.to_bytes()) == shard
    legacy = Shard(((0, 1),), None)
    assert Shard.from_bytes(legacy.to_bytes()).parents is None
    with pytest.raises(BadMetadataError):
        Shard.from_bytes(b'{"ledgers": 5}')
    record = JobRecord(JobState.COMMITTED, "d", overwrite=True, parent=(0, 42), created_ms=1, version=3)
    assert JobRecord.from_bytes(record.to_bytes(), 3) == record
    assert JobRecord.from_bytes(b"", 0) is None  # a record of a writer older than the protocol
    with pytest.raises(BadMetadataError):
        JobRecord.from_bytes(b'{"state":"flying","dataset":"d"}', 0)


def test_a_routed_jobs_record_and_shared_parents_round_trip_and_old_ones_read_as_before() -> None:
    """docs/connector.md, "Routing rows by a dataset column": a routed record names its datasets once committed;
    shards mark shared parents; a record or shard without those keys reads as a single-dataset one."""
    writing = JobRecord(JobState.WRITING, "", parent=(0, 7), routed=True)
    assert JobRecord.from_bytes(writing.to_bytes(), 1) == replace(writing, version=1)
    assert writing.names == ()
    done = replace(writing, state=JobState.COMMITTED, datasets=("a", "b"))
    assert JobRecord.from_bytes(done.to_bytes(), 2).names == ("a", "b")  # type: ignore[union-attr]
    single = JobRecord.from_bytes(b'{"state":"writing","dataset":"d"}', 0)
    assert single is not None and not single.routed and single.names == ("d",)
    shard = Shard(((0, 1),), ((0, 9),), ((0, 9),))
    assert Shard.from_bytes(shard.to_bytes()) == shard
    assert b"shared" not in Shard(((0, 1),), ((0, 9),)).to_bytes()


def test_rows_split_by_their_dataset_column_keep_their_order() -> None:
    import pyarrow as pa

    from bkspark.datasource.writer import _split_by_dataset

    batch = pa.RecordBatch.from_arrays(
        [pa.array([b"1", b"2", b"3", b"4"]), pa.array(["b", "a", "b", "a"])], names=["payload", "dataset"]
    )
    split = {name: part.column(0).to_pylist() for name, part in _split_by_dataset(batch, 1)}
    assert list(split) == ["b", "a"] and split == {"b": [b"1", b"3"], "a": [b"2", b"4"]}
    (only,) = _split_by_dataset(batch.slice(1, 1), 1)
    assert only[0] == "a" and only[1].num_rows == 1


def test_fault_plans_raise_the_real_error_types_and_count_their_firings() -> None:
    fault_point("commit.published")  # no plan: nothing happens
    with injected("commit.published=connection-loss*2, ledger.delete=delete-refused"):
        for _ in range(2):
            with pytest.raises(ConnectionLoss, match="commit.published"):
                fault_point("commit.published")
        fault_point("commit.published")  # fired twice already
        with pytest.raises(BookieIOError):
            fault_point("ledger.delete")
        fault_point("commit.forgotten")
    fault_point("ledger.delete")


def test_fault_plan_files_are_read_at_every_point_and_counted_across_processes(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    plan = Path(str(tmp_path)) / "plan"
    monkeypatch.setenv("BKSPARK_WRITER_FAULTS", f"@{plan}")
    fault_point("abort.fenced")  # no file yet
    plan.write_text("abort.fenced=connection-loss*1\n")
    with pytest.raises(ConnectionLoss):
        fault_point("abort.fenced")
    fault_point("abort.fenced")
    assert (Path(str(plan) + ".fired")).read_text() == "abort.fenced\n"


@pytest.mark.parametrize("plan", ["nowhere=kill", "commit.published=explode", "commit.published=kill*x"])
def test_a_bad_fault_plan_is_refused(plan: str) -> None:
    with pytest.raises(ValueError):
        with injected(plan):
            pass


def test_every_fault_point_has_a_distinct_name() -> None:
    assert len(set(FAULT_POINTS)) == len(FAULT_POINTS)
    with pytest.raises(ValueError):
        fault_point("commit.nowhere")


@pytest.mark.parametrize("job_id", ["", "a.b", "a/b", "job 1", "é", "a-b\n"])
def test_a_job_id_outside_its_alphabet_is_refused_before_zookeeper_is_touched(job_id: str) -> None:
    """docs/connector.md: ``job_id`` is ``[0-9A-Za-z_-]+``; it prefixes shard names ``<job>.<random>.<n>``, so a dot
    in it would make the sweep take a live job's shard for an unknown job's, and a slash would nest znodes."""
    registry = DatasetRegistry(None, "/ledgers")  # no ZooKeeper: the check comes first
    with pytest.raises(InvalidOptionError, match="job id"):
        registry.begin_job(job_id, JobRecord(JobState.WRITING, "d"))
