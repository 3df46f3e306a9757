"""The Spark writer's commit protocol (docs/connector.md, "The commit protocol") against real ZooKeeper and bookies.

The driver's side of a write job is driven here as Spark drives it (``writer()`` on the driver, ``write()`` per
task, then ``commit(messages)`` or, if it raises, ``abort(messages)``), in this process, so that a fault can be
placed after every step (:mod:`bkspark.datasource.faults`). After each fault the dataset must read exactly the
old rows or exactly the new ones, no committed ledger may be gone, the orphan audit must report what is left,
and ``bkspark shell recoverjobs`` must remove it. The same happens with the driver process SIGKILLed after each
step (a child process running ``commit``), and through real Spark jobs in test_connector_commit_spark.py.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kazoo.exceptions import ConnectionLoss

from bkspark import cli
from bkspark.audit import Auditor, OrphanReason, list_orphans
from bkspark.client import BookKeeper
from bkspark.context import read_context, read_create_context
from bkspark.datasource.cleanup import recover_jobs
from bkspark.datasource.clients import client_conf, evict_client
from bkspark.datasource.datasets import (
    DatasetManifest,
    DatasetRegistry,
    JobGoneError,
    JobState,
)
from bkspark.datasource.faults import ENV_FAULTS, FAULT_POINTS, injected
from bkspark.datasource.options import parse_read_options
from bkspark.datasource.reader import BookKeeperReader
from bkspark.datasource.source import BookKeeperDataSource
from bkspark.datasource.writer import (
    JOB_PARENT_ROLE,
    TAG_DATASET,
    TAG_JOB,
    TAG_ROLE,
    BookKeeperWriter,
)
from bkspark.errors import NoSuchLedgerMetadataError
from bkspark.protocol.ledger_metadata import LedgerState
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZooKeeperServer, init_new_cluster

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
ROOT = "/bk-connector-commit"


@pytest.fixture(scope="module")
def py_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonBookieCluster]:
    yield from two_bookies(zookeeper, tmp_path_factory, ROOT)


def two_bookies(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory, root: str
) -> Iterator[PythonBookieCluster]:
    """Two Python bookies on a cluster root of their own (the commit tests' cluster)."""
    zk = zookeeper.client()
    try:
        init_new_cluster(zk, root)
    finally:
        zk.stop()
        zk.close()
    uri = f"zk+hierarchical://{zookeeper.connect_string}{root}"
    with PythonBookieCluster(uri, tmp_path_factory.mktemp("commit-bookies"), bookies=2) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def uri(py_cluster: PythonBookieCluster) -> Iterator[str]:
    yield py_cluster.metadata_service_uri
    # The writer and reader used the connector's cached client in this process: close it while ZooKeeper is up.
    evict_client(py_cluster.metadata_service_uri, client_conf(()))
    evict_client(py_cluster.metadata_service_uri, client_conf((), batch_read_enabled=True))


@pytest.fixture(scope="module")
def bk(py_cluster: PythonBookieCluster) -> Iterator[BookKeeper]:
    with BookKeeper(py_cluster.metadata_service_uri) as client:
        yield client


@pytest.fixture(scope="module")
def registry(bk: BookKeeper) -> DatasetRegistry:
    return DatasetRegistry(bk.store.zk, bk.store.root)


# -- driving the writer as Spark does ----------------------------------------------------------------------------


def new_writer(uri: str, dataset: str, overwrite: bool, **options: str) -> BookKeeperWriter:
    """``df.write...save()`` on the driver: the source's ``writer()`` (reserves the parent, begins the job)."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    source = BookKeeperDataSource({
        "metadataserviceuri": uri, "dataset": dataset, "ensemblesize": "2", "writequorumsize": "2",
        "ackquorumsize": "2", **{k.lower(): v for k, v in options.items()},
    })
    writer = source.writer(StructType([StructField("payload", BinaryType())]), overwrite)
    assert isinstance(writer, BookKeeperWriter)
    return pickle.loads(pickle.dumps(writer))  # what the tasks and the commit get


def task(writer: BookKeeperWriter, rows: list[bytes]) -> Any:
    """One task's ``write()`` (outside Spark: partition 0, attempt 0)."""
    batch = pa.RecordBatch.from_arrays([pa.array(rows, pa.binary())], names=["payload"])
    return writer.write(iter([batch]))


def run_job(writer: BookKeeperWriter, partitions: list[list[bytes]], *, failed_attempts: int = 0) -> list[Any]:
    """The tasks of a job; ``failed_attempts`` more tasks write ledgers whose messages never reach the driver."""
    for i in range(failed_attempts):
        task(writer, [b"lost-attempt-%d" % i])
    return [task(writer, rows) for rows in partitions]


def spark_commit(writer: BookKeeperWriter, messages: list[Any]) -> str:
    """Spark's driver: commit, and abort if the commit raised; which one ended the job (abort errors are logged)."""
    try:
        writer.commit(messages)
        return "committed"
    except Exception:  # noqa: BLE001 - Spark calls abort after any commit failure
        try:
            writer.abort(messages)
        except Exception:  # noqa: BLE001 - Spark logs an abort's failure
            return "abort-failed"
        return "aborted"


def read_rows(uri: str, dataset: str) -> list[bytes]:
    """The dataset's rows as a Spark read plans and reads them (partitions() then read() of each slice)."""
    reader = BookKeeperReader(parse_read_options({"metadataserviceuri": uri, "dataset": dataset}))
    rows: list[bytes] = []
    for part in reader.partitions():
        for batch in reader.read(part):
            rows.extend(batch.column("payload").to_pylist())
    return sorted(rows)


def rows(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def ledgers_of(bk: BookKeeper, dataset: str | None = None) -> set[int]:
    """Every ledger of the cluster, or those tagged with ``dataset`` (``bkspark.dataset``)."""
    listed = set(bk.list_ledgers())
    if dataset is None:
        return listed
    tagged = set()
    for lid in listed:
        try:
            if bk.get_ledger_metadata(lid).custom_metadata.get(TAG_DATASET) == dataset.encode():
                tagged.add(lid)
        except NoSuchLedgerMetadataError:
            pass
    return tagged


def jobs_of(registry: DatasetRegistry, dataset: str) -> list[str]:
    return [job for job in registry.jobs() if (r := registry.job(job)) is not None and r.dataset == dataset]


def leftovers_of(bk: BookKeeper, registry: DatasetRegistry, dataset: str) -> set[int]:
    """The dataset's ledgers that neither its manifest nor a parent of a manifest ledger is."""
    manifest = registry.manifest(dataset)
    assert manifest is not None
    return ledgers_of(bk, dataset) - {lid for _, lid in manifest.ledgers} - parents_of(bk, manifest.ledgers)


def parents_of(bk: BookKeeper, ledgers: tuple[tuple[int, int], ...]) -> set[int]:
    found = set()
    for scope_id, lid in ledgers:
        create = read_create_context(bk.get_ledger_metadata(lid, scope_id=scope_id).custom_metadata)
        assert create is not None and create.child_of_ledger is not None
        found.add(create.child_of_ledger.ledger_id)
    return found


def audit(uri: str, bk: BookKeeper) -> dict[int, set[OrphanReason]]:
    """One audit pass, no grace periods: ledger -> reasons."""
    auditor = Auditor(uri, grace_period=0, parent_grace_period=0, audit_period=3600)
    try:
        auditor.audit_once()
    finally:
        auditor.stop()
    found: dict[int, set[OrphanReason]] = {}
    for record in list_orphans(bk.store.zk, bk.store.root):
        found.setdefault(record.ledger_id, set()).add(record.reason)
    return found


def assert_clean(bk: BookKeeper, registry: DatasetRegistry, dataset: str) -> None:
    """Nothing but the manifest's ledgers and their parents, no job record, no shard the root does not name."""
    manifest = registry.manifest(dataset)
    assert manifest is not None
    assert leftovers_of(bk, registry, dataset) == set()
    assert {lid for _, lid in manifest.ledgers} <= ledgers_of(bk)
    assert jobs_of(registry, dataset) == []
    root = registry.root(dataset)
    assert root is not None and root.retired == ()
    shards = bk.store.zk.get_children(registry.shards_path(dataset)) if bk.store.zk.exists(registry.shards_path(dataset)) else []
    assert sorted(shards) == sorted(r.shard_id for r in root.shards)
    for pid in parents_of(bk, manifest.ledgers):
        assert bk.get_ledger_metadata(pid).custom_metadata[TAG_ROLE] == JOB_PARENT_ROLE


def recoverjobs(uri: str, capsys: pytest.CaptureFixture[str], options: tuple[str, ...] = ("--stale-after", "0")) -> str:
    """``bkspark shell recoverjobs --stale-after 0`` (or with ``options``): what removes a crashed job's leftovers."""
    capsys.readouterr()
    code = cli.main(["shell", "--metadata-service-uri", uri, "recoverjobs", *options])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


# -- the state machine, step by step -------------------------------------------------------------------------------

#: (fault point, error, whether the job is committed when the fault hits there). A refused delete can only hit
#: the clean-up: every ledger delete of a commit comes after its commit point.
COMMIT_FAULTS = [
    ("task.registered", "connection-loss", False),
    ("commit.shards-written", "connection-loss", False),
    ("commit.published", "connection-loss", True),
    ("commit.attempts-deleted", "connection-loss", True),
    ("commit.retired-deleted", "connection-loss", True),
    ("commit.forgotten", "connection-loss", True),
    ("ledger.delete", "delete-refused", True),
]


def seed(uri: str, dataset: str) -> list[bytes]:
    """Two committed appends (so an overwrite replaces the ledgers of two jobs)."""
    for prefix in ("old-a", "old-b"):
        writer = new_writer(uri, dataset, overwrite=False)
        assert spark_commit(writer, run_job(writer, [rows(prefix, 3)])) == "committed"
    return sorted(rows("old-a", 3) + rows("old-b", 3))


def test_a_committed_jobs_parent_is_a_closed_zero_entry_marker_with_contexts_and_tags(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """docs/context-and-audit.md, What the Spark writer should call: the commit creates the parent of the job's
    ledgers, "a zero-entry closed ledger tagged bkspark.job, bkspark.dataset and bkspark.role=job-commit-marker,
    with its create and close contexts"; every task ledger is its child, and the audit reports none of them."""
    dataset = "parent-marker"
    writer = new_writer(uri, dataset, overwrite=False)
    assert spark_commit(writer, run_job(writer, [rows("a", 2), rows("b", 2)])) == "committed"
    manifest = registry.manifest(dataset)
    assert manifest is not None and len(manifest.ledgers) == 2
    (parent_id,) = parents_of(bk, manifest.ledgers)
    md = bk.get_ledger_metadata(parent_id)
    assert md.state == LedgerState.CLOSED and (md.last_entry_id, md.length) == (-1, 0)
    custom = md.custom_metadata
    assert custom[TAG_ROLE] == JOB_PARENT_ROLE and custom[TAG_DATASET] == dataset.encode()
    assert custom[TAG_JOB] == writer.job_id.encode()
    ctx = read_context(md)
    assert ctx.create is not None and ctx.create.data_set == dataset and ctx.close is not None
    assert not {parent_id, *(lid for _, lid in manifest.ledgers)} & set(audit(uri, bk))


@pytest.mark.parametrize("mode", ["append", "overwrite"])
@pytest.mark.parametrize("point,error,committed", COMMIT_FAULTS, ids=[p for p, _, _ in COMMIT_FAULTS])
def test_an_error_after_each_commit_step_leaves_old_or_new_rows_and_leftovers_the_audit_and_shell_remove(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, capsys: pytest.CaptureFixture[str],
    mode: str, error: str, point: str, committed: bool,
) -> None:
    """Transitions WRITING->COMMITTED (publish), COMMITTED->CLEANED and WRITING->ABORTED under a fault after each step."""
    dataset = f"err-{mode}-{error}-{point}".replace(".", "-")
    old = seed(uri, dataset)
    before = registry.manifest(dataset)
    assert before is not None
    writer = new_writer(uri, dataset, overwrite=mode == "overwrite")
    new = rows("new", 4)
    plan = f"{point}={error}"
    with injected(plan):
        try:
            messages = run_job(writer, [new[:2], new[2:]], failed_attempts=1)
        except Exception:  # noqa: BLE001 - the task failed: Spark aborts the job with no messages of it
            messages = None
        outcome = spark_commit(writer, messages) if messages is not None else spark_commit_abort(writer)
    got = read_rows(uri, dataset)
    expected_new = sorted(new) if mode == "overwrite" else sorted(old + new)
    if committed:
        assert outcome == "committed" and got == expected_new
    else:
        assert outcome in ("aborted", "abort-failed") and got == old
        assert registry.manifest(dataset) == before
    # No committed ledger was deleted.
    assert {lid for _, lid in registry.manifest(dataset).ledgers} <= ledgers_of(bk)  # type: ignore[union-attr]
    # Leftovers: reported by the audit, removed by `bkspark shell recoverjobs`.
    leftovers = leftovers_of(bk, registry, dataset)
    reported = audit(uri, bk)
    assert leftovers <= set(reported), (leftovers, reported)
    recoverjobs(uri, capsys)
    assert_clean(bk, registry, dataset)
    assert read_rows(uri, dataset) == got
    assert audit(uri, bk) == {}


def spark_commit_abort(writer: BookKeeperWriter) -> str:
    """A job whose task failed for good: Spark calls abort with no messages."""
    try:
        writer.abort([])
    except Exception:  # noqa: BLE001
        return "abort-failed"
    return "aborted"


ABORT_FAULTS = ["abort.fenced", "abort.ledgers-deleted", "abort.forgotten"]


@pytest.mark.parametrize("point", ABORT_FAULTS)
def test_an_error_after_each_abort_step_leaves_the_old_rows_and_leftovers_the_shell_removes(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, capsys: pytest.CaptureFixture[str], point: str,
) -> None:
    """Transitions WRITING->ABORTING (fence), ABORTING->ABORTED, under a fault after each abort step."""
    dataset = f"abort-{point}".replace(".", "-")
    old = seed(uri, dataset)
    writer = new_writer(uri, dataset, overwrite=True)
    messages = run_job(writer, [rows("new", 2)], failed_attempts=1)
    with injected(f"commit.shards-written=connection-loss,{point}=connection-loss"):
        assert spark_commit(writer, messages) == "abort-failed"
    assert read_rows(uri, dataset) == old
    with pytest.raises(JobGoneError):
        writer.commit(messages)  # a fenced job can never publish
    if point == "abort.forgotten":
        assert jobs_of(registry, dataset) == []
    else:
        (job,) = jobs_of(registry, dataset)
        record = registry.job(job)
        assert record is not None and record.state is JobState.ABORTING
    reported = audit(uri, bk)
    for _, lid in [(m.scope_id, m.ledger_id) for m in messages]:
        if lid in ledgers_of(bk):
            assert OrphanReason.BROKEN_PARENT_REF in reported[lid]
    recoverjobs(uri, capsys)
    assert_clean(bk, registry, dataset)
    assert read_rows(uri, dataset) == old


def test_recoverjobs_leaves_a_writing_job_younger_than_stale_after_an_hour_by_default(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/connector.md: recoverjobs aborts ``writing`` jobs older than ``--stale-after`` (default 3600 s) only: a
    younger one may still be running, and fencing it would fail its commit."""
    dataset = "young-writing-job"
    old = seed(uri, dataset)
    writer = new_writer(uri, dataset, overwrite=False)
    messages = run_job(writer, [rows("new", 2)])
    for options in ((), ("--dataset", dataset), ("--stale-after", "600")):
        recoverjobs(uri, capsys, options)
        (job,) = jobs_of(registry, dataset)
        assert registry.job(job).state is JobState.WRITING  # type: ignore[union-attr]
    assert spark_commit(writer, messages) == "committed"  # the job was left alone: it commits
    assert read_rows(uri, dataset) == sorted(old + rows("new", 2))
    assert_clean(bk, registry, dataset)


def test_recoverjobs_with_a_dataset_touches_only_that_datasets_jobs(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/connector.md: ``recoverjobs [--dataset NAME]``: with a name, a stale job of another dataset is left
    alone (it may be a live job of someone else's write), and commits afterwards."""
    chosen, other = new_writer(uri, "recover-chosen", overwrite=False), new_writer(uri, "recover-other", overwrite=False)
    chosen_messages, other_messages = run_job(chosen, [rows("c", 2)]), run_job(other, [rows("o", 2)])
    out = recoverjobs(uri, capsys, ("--dataset", "recover-chosen", "--stale-after", "0"))
    assert f"{chosen.job_id} stale writing job aborted" in out and other.job_id not in out
    assert jobs_of(registry, "recover-chosen") == [] and chosen_messages[0].ledger_id not in ledgers_of(bk)
    assert registry.job(other.job_id).state is JobState.WRITING  # type: ignore[union-attr]
    assert spark_commit(other, other_messages) == "committed"
    assert read_rows(uri, "recover-other") == rows("o", 2)


def test_the_shards_of_a_live_job_survive_another_jobs_sweep(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """docs/connector.md, The manifest: a shard is deleted only when no root names it and its job's record is gone,
    so the shards a live job wrote before its commit point survive the sweep of a job that commits meanwhile."""
    dataset = "live-job-shards"
    old = seed(uri, dataset)
    slow = new_writer(uri, dataset, overwrite=False)
    slow_messages = run_job(slow, [rows("slow", 2)])
    with injected("commit.shards-written=connection-loss"), pytest.raises(ConnectionLoss, match="commit.shards-written"):
        slow.commit(slow_messages)  # its shards are written, its multi never ran; its record stays `writing`

    def unnamed_shards_of(writer: BookKeeperWriter) -> set[str]:
        root = registry.root(dataset)
        assert root is not None
        named = {r.shard_id for r in (*root.shards, *root.retired)}
        written = set(bk.store.zk.get_children(registry.shards_path(dataset)))
        return {sid for sid in written - named if sid.startswith(f"{writer.job_id}.")}

    pending = unnamed_shards_of(slow)
    assert pending
    fast = new_writer(uri, dataset, overwrite=False)
    assert spark_commit(fast, run_job(fast, [rows("fast", 2)])) == "committed"  # its clean-up sweeps the dataset
    assert unnamed_shards_of(slow) == pending
    assert spark_commit(slow, slow_messages) == "committed"  # Spark's retried commit
    assert read_rows(uri, dataset) == sorted(old + rows("slow", 2) + rows("fast", 2))
    assert_clean(bk, registry, dataset)  # the slow job's unpublished shards went with its record


def test_a_straggling_task_of_an_aborted_job_fails_and_deletes_its_ledger(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """docs/connector.md, transition 2: a task registers its ledger only under an existing record, so a task still
    running after its job was aborted (the record gone) fails with JobGoneError and leaves no ledger behind."""
    dataset = "straggler-of-aborted-job"
    old = seed(uri, dataset)
    writer = new_writer(uri, dataset, overwrite=False)
    run_job(writer, [rows("new", 2)])
    assert spark_commit_abort(writer) == "aborted" and jobs_of(registry, dataset) == []
    before = ledgers_of(bk, dataset)
    with pytest.raises(JobGoneError):
        task(writer, rows("straggler", 2))
    assert ledgers_of(bk, dataset) == before
    assert read_rows(uri, dataset) == old
    assert_clean(bk, registry, dataset)


def test_abort_after_the_commit_point_never_deletes_committed_ledgers(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """The issue's case: the commit published, then Spark calls abort anyway (e.g. the commit RPC failed)."""
    for mode in ("append", "overwrite"):
        dataset = f"abort-after-commit-{mode}"
        old = seed(uri, dataset)
        writer = new_writer(uri, dataset, overwrite=mode == "overwrite")
        new = rows("new", 5)
        messages = run_job(writer, [new], failed_attempts=1)
        writer.commit(messages)
        writer.abort(messages)  # Spark's abort after a commit whose reply was lost
        writer.abort(messages)  # twice
        expected = sorted(new) if mode == "overwrite" else sorted(old + new)
        assert read_rows(uri, dataset) == expected
        assert_clean(bk, registry, dataset)


@pytest.mark.parametrize("when", ["before the commit", "between the shards and the multi"])
@pytest.mark.parametrize("which", [0, 2])
def test_a_ledger_deleted_before_the_commit_point_fails_the_commit_and_nothing_is_published(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, monkeypatch: pytest.MonkeyPatch, when: str, which: int
) -> None:
    """docs/connector.md, The commit protocol: a ledger of the job deleted after its task closed it (here by an
    operator's delete) fails the commit with BOOKKEEPER_DATA_LOSS naming it, whether it goes before the commit or
    between the shards' write and the ``multi`` (the ``multi``'s own check); the dataset keeps its old rows, no
    shard of the failed plan is left, and Spark's abort removes the job's other ledgers.  Ledger 0 is also the
    model of the job's parent ledger, read before the publish; ledger 1 goes too, and the error names both."""
    import bkspark.datasource.writer as writer_module

    dataset = f"gone-before-commit-{which}-{when.split()[0]}"
    old = seed(uri, dataset)
    writer = new_writer(uri, dataset, overwrite=True)
    messages = run_job(writer, [rows("a", 2), rows("b", 2), rows("c", 2)])
    victims = sorted({messages[which].ledger_id, messages[1].ledger_id})

    def delete() -> None:
        for victim in victims:
            bk.delete_ledger(victim)

    if when == "before the commit":
        delete()
    else:
        monkeypatch.setattr(writer_module, "fault_point", lambda point: point == "commit.shards-written" and delete())
    named = ", ".join(f"{victim} \\(scope 0\\)" for victim in victims)  # every missing ledger is named
    with pytest.raises(NoSuchLedgerMetadataError, match=rf"BOOKKEEPER_DATA_LOSS.*ledger\(s\) {named} written"):
        writer.commit(messages)
    writer.abort(messages)  # what Spark does after a failed commit
    assert read_rows(uri, dataset) == old
    assert not {m.ledger_id for m in messages} & ledgers_of(bk)
    assert_clean(bk, registry, dataset)


def test_commit_twice_publishes_once_and_finishes_a_partial_attempt(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """Idempotent commit: a retried commit RPC, and a commit after an attempt that stopped after its commit point."""
    dataset = "twice"
    old = seed(uri, dataset)
    writer = new_writer(uri, dataset, overwrite=False)
    new = rows("new", 3)
    messages = run_job(writer, [new], failed_attempts=1)
    with injected("commit.published=connection-loss"):
        writer.commit(messages)  # committed, clean-up left (the fault fires on every retry)
    root = registry.root(dataset)
    assert root is not None and root.token(writer.job_id) == 0
    (job,) = jobs_of(registry, dataset)
    assert registry.job(job).state is JobState.COMMITTED  # type: ignore[union-attr]
    writer.commit(messages)  # the retry publishes nothing and finishes the clean-up
    writer.commit(messages)  # and again, after the job was forgotten
    assert read_rows(uri, dataset) == sorted(old + new)
    assert registry.root(dataset).generation == root.generation  # type: ignore[union-attr]
    assert_clean(bk, registry, dataset)


# -- SIGKILL of the driver after each step ------------------------------------------------------------------------

KILLED_DRIVER = textwrap.dedent(
    """
    import pickle, sys
    writer, messages = pickle.load(open(sys.argv[1], "rb"))
    try:
        writer.commit(messages)
    except Exception:
        writer.abort(messages)
    print("survived", flush=True)
    """
)

KILL_POINTS = ["commit.shards-written", "commit.published", "commit.attempts-deleted", "commit.retired-deleted",
               "commit.forgotten", "abort.fenced", "abort.ledgers-deleted"]


#: Kill points in the default run (one before and one after the commit point, one in abort); the rest are `fault`.
KILL_DEFAULT = ("commit.shards-written", "commit.published", "abort.fenced")


@pytest.mark.parametrize(
    "point", [p if p in KILL_DEFAULT else pytest.param(p, marks=pytest.mark.fault) for p in KILL_POINTS]
)
def test_the_driver_killed_after_each_step_leaves_old_or_new_rows_and_the_next_job_cleans_up(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, tmp_path: Path, point: str,
) -> None:
    """SIGKILL of the process running commit/abort after each step; then the next write of the dataset cleans up."""
    dataset = f"kill-{point}".replace(".", "-")
    old = seed(uri, dataset)
    writer = new_writer(uri, dataset, overwrite=True)
    new = rows("new", 4)
    messages = run_job(writer, [new[:2], new[2:]], failed_attempts=1)
    state = tmp_path / "driver.pickle"
    state.write_bytes(pickle.dumps((writer, messages)))
    script = tmp_path / "driver.py"
    script.write_text(KILLED_DRIVER)
    plan = f"{point}=kill"
    if point.startswith("abort."):
        plan = f"commit.shards-written=connection-loss,{plan}"
    env = dict(os.environ, **{ENV_FAULTS: plan})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, str(script), str(state)], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120, start_new_session=True)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    committed = point.startswith("commit.") and point != "commit.shards-written"
    got = read_rows(uri, dataset)
    assert got == (sorted(new) if committed else old)
    leftovers = leftovers_of(bk, registry, dataset)
    assert leftovers <= set(audit(uri, bk))
    # The next job of the dataset finishes what the dead driver left (committed or aborting jobs); a job killed
    # while writing is left to `bkspark shell recoverjobs`, which other tests use.
    nxt = new_writer(uri, dataset, overwrite=False)
    assert spark_commit(nxt, run_job(nxt, [rows("next", 1)])) == "committed"
    if point != "commit.shards-written":
        assert_clean(bk, registry, dataset)
    else:
        (job,) = jobs_of(registry, dataset)
        assert registry.job(job).state is JobState.WRITING  # type: ignore[union-attr]
        recover_jobs(bk, registry, stale_after=0)
        assert_clean(bk, registry, dataset)
    assert read_rows(uri, dataset) == sorted(got + rows("next", 1))


# -- concurrency ---------------------------------------------------------------------------------------------------


def commit_at_once(jobs: list[tuple[BookKeeperWriter, list[Any]]]) -> list[str]:
    """Every job's commit from a thread of its own, released together by a barrier; their outcomes."""
    barrier = threading.Barrier(len(jobs))
    outcomes: list[str] = []

    def commit(writer: BookKeeperWriter, messages: list[Any]) -> None:
        barrier.wait()
        outcomes.append(spark_commit(writer, messages))

    threads = [threading.Thread(target=commit, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return outcomes


def test_concurrent_appends_all_commit_and_keep_each_others_ledgers(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    dataset = "concurrent-appends"
    writers = [new_writer(uri, dataset, overwrite=False) for _ in range(4)]
    expected: list[bytes] = []
    jobs = []
    for i, writer in enumerate(writers):
        data = rows(f"job{i}", 3)
        expected += data
        jobs.append((writer, run_job(writer, [data[:1], data[1:]])))
    assert commit_at_once(jobs) == ["committed"] * 4
    assert read_rows(uri, dataset) == sorted(expected)
    assert registry.root(dataset).generation == 4  # type: ignore[union-attr]
    assert_clean(bk, registry, dataset)


def test_concurrent_overwrites_exactly_one_wins_cleanly(uri: str, bk: BookKeeper, registry: DatasetRegistry) -> None:
    """All publish, one after the other (last writer wins, like Spark's file sources): the dataset holds exactly
    the rows of the job whose commit came last, and the others' ledgers are retired and deleted (docs/connector.md,
    "Concurrent jobs")."""
    dataset = "concurrent-overwrites"
    old = seed(uri, dataset)
    generation = registry.root(dataset).generation  # type: ignore[union-attr]
    jobs = []
    for i in range(3):
        writer = new_writer(uri, dataset, overwrite=True)
        jobs.append((writer, run_job(writer, [rows(f"job{i}", 2), rows(f"job{i}-b", 2)])))
    assert commit_at_once(jobs) == ["committed"] * 3
    got = read_rows(uri, dataset)
    candidates = [sorted(rows(f"job{i}", 2) + rows(f"job{i}-b", 2)) for i in range(3)]
    root = registry.root(dataset)
    assert root is not None and root.generation == generation + 3  # three publishes, each on the one before
    # The root names the shards of the job that published last (a shard is named after the job that wrote it).
    last = [i for i, (writer, _) in enumerate(jobs) if {s.owner for s in root.shards} == {writer.job_id}]
    assert len(last) == 1 and got == candidates[last[0]] and got != old
    others = {m.ledger_id for i, (_, messages) in enumerate(jobs) if i != last[0] for m in messages}
    assert others and not others & ledgers_of(bk)
    assert_clean(bk, registry, dataset)


def test_overwrite_during_reads_shows_old_or_new_never_a_mixture(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """A reader planning in a loop while overwrites commit sees complete old or complete new rows."""
    dataset = "read-during-overwrite"
    versions = [sorted(rows("v0", 6))]
    writer = new_writer(uri, dataset, overwrite=True)
    assert spark_commit(writer, run_job(writer, [versions[0][:3], versions[0][3:]])) == "committed"
    stop = threading.Event()
    seen: list[list[bytes]] = []
    errors: list[BaseException] = []

    def reader() -> None:
        own = BookKeeper(uri)
        try:
            reg = DatasetRegistry(own.store.zk, own.store.root)
            while not stop.is_set():
                manifest = reg.manifest(dataset)
                assert manifest is not None
                got = []
                for scope_id, lid in manifest.ledgers:
                    # Planned ledgers may be deleted after planning (failOnDataLoss); the plan itself is whole.
                    got.append(lid)
                seen.append(sorted(got))  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            own.close()

    thread = threading.Thread(target=reader)
    thread.start()
    committed_sets = [sorted(lid for _, lid in registry.manifest(dataset).ledgers)]  # type: ignore[union-attr]
    for v in range(1, 4):
        data = sorted(rows(f"v{v}", 6))
        writer = new_writer(uri, dataset, overwrite=True)
        assert spark_commit(writer, run_job(writer, [data[:3], data[3:]])) == "committed"
        committed_sets.append(sorted(lid for _, lid in registry.manifest(dataset).ledgers))  # type: ignore[union-attr]
        assert read_rows(uri, dataset) == data
    stop.set()
    thread.join(60)
    assert not errors, errors
    assert seen and all(s in committed_sets for s in seen)
    assert_clean(bk, registry, dataset)


# -- manifest format -----------------------------------------------------------------------------------------------


def test_a_dataset_of_the_old_single_znode_manifest_reads_and_migrates_on_the_next_commit(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """A format-1 manifest (one znode listing every ledger) reads as before; the next append shards it."""
    dataset = "legacy"
    written = []
    for prefix in ("legacy-a", "legacy-b"):
        handle = bk.create_ledger(ensemble_size=2, write_quorum_size=2, ack_quorum_size=2)
        for payload in rows(prefix, 2):
            handle.append(payload)
        handle.close()
        written.append((0, handle.ledger_id))
    bk.store.zk.create(registry.dataset_path(dataset), DatasetManifest(dataset, tuple(written)).to_bytes(), makepath=True)
    old = sorted(rows("legacy-a", 2) + rows("legacy-b", 2))
    assert read_rows(uri, dataset) == old
    assert registry.manifest(dataset).ledgers == tuple(written)  # type: ignore[union-attr]
    writer = new_writer(uri, dataset, overwrite=False)
    assert spark_commit(writer, run_job(writer, [rows("new", 2)])) == "committed"
    root = registry.root(dataset)
    assert root is not None and root.legacy is None and root.generation == 1
    assert read_rows(uri, dataset) == sorted(old + rows("new", 2))
    # An overwrite retires the migrated shard: its ledgers (whose parents are unknown) are deleted.
    writer = new_writer(uri, dataset, overwrite=True)
    assert spark_commit(writer, run_job(writer, [rows("over", 2)])) == "committed"
    assert read_rows(uri, dataset) == rows("over", 2)
    assert not {lid for _, lid in written} & ledgers_of(bk)
    assert_clean(bk, registry, dataset)


@pytest.mark.parametrize(("failures", "cleaned", "pauses"), [(2, True, [0.2, 0.4]), (3, False, [0.2, 0.4])])
def test_a_clean_up_step_is_tried_three_times_then_left_for_the_next_job(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, failures: int, cleaned: bool, pauses: list[float],
) -> None:
    """docs/connector.md: after the commit point each clean-up step is tried 3 times (0.2 s, then 0.4 s apart), then
    logged and left; commit returns normally, and what is left keeps its committed record for recoverjobs. The
    documented numbers are literal here: two failures are outlasted, three are not, and the pauses between tries
    are 0.2 s and 0.4 s (none after the last)."""
    from bkspark import retry as retry_module  # the clean-up's pauses are its RetryPolicy's (CLEANUP_RETRY)

    dataset = f"cleanup-tried-{failures}"
    old = seed(uri, dataset)
    writer = new_writer(uri, dataset, overwrite=False)
    new = rows("new", 2)
    messages = run_job(writer, [new], failed_attempts=1)  # the failed attempt's ledger is step 5's to delete
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds)

    # the retry policies' pauses only (kazoo's threads keep the real time.sleep)
    monkeypatch.setattr(retry_module, "time", type("Clock", (), {"sleep": staticmethod(sleep),
                                                                   "time": staticmethod(time.time),
                                                                   "monotonic": staticmethod(time.monotonic)}))
    with injected(f"commit.published=connection-loss*{failures}"):
        assert spark_commit(writer, messages) == "committed"
    monkeypatch.undo()
    assert slept == pauses
    assert read_rows(uri, dataset) == sorted(old + new)
    if cleaned:
        assert_clean(bk, registry, dataset)
        return
    assert [registry.job(job).state for job in jobs_of(registry, dataset)] == [JobState.COMMITTED]  # type: ignore[union-attr]
    assert leftovers_of(bk, registry, dataset)
    recoverjobs(uri, capsys)
    assert_clean(bk, registry, dataset)


def test_every_fault_point_is_named_by_a_test() -> None:
    named = {p for p, _, _ in COMMIT_FAULTS} | set(ABORT_FAULTS) | set(KILL_POINTS) | {"job.begun"}
    assert named == set(FAULT_POINTS)


# -- 100,000 ledgers ----------------------------------------------------------------------------------------------

BIG = 100_000


def publish_ids(registry: DatasetRegistry, dataset: str, ledgers: list[tuple[int, int]], *, replace_all: bool) -> None:
    """Publish ``ledgers`` as a job of their own would (job record, multi, forget)."""
    import uuid

    from bkspark.datasource.datasets import CommitKey, JobRecord

    job_id = uuid.uuid4().hex
    registry.begin_job(job_id, JobRecord(JobState.WRITING, dataset))
    result = registry.publish(dataset, ledgers, replace_all=replace_all, job_id=job_id, key=CommitKey(job_id))
    assert not result.already
    registry.forget_job(job_id)


def test_a_dataset_of_100000_ledgers_commits_lists_and_appends(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """Past ZooKeeper's 1 MB znode limit: the manifest is sharded, its root stays small, appends stay cheap.

    The 100,000 ledgers are ids published without ledgers behind them (commit and list need only the manifest;
    test_connector_commit_big.py plans 100,000 real ledger metadata, marked ``fault``); a real Spark-style job
    then appends real rows on top and reads them back through the manifest.
    """
    dataset = "big"
    ids = [(0, 50_000_000 + i) for i in range(BIG)]
    for start in range(0, BIG, 25_000):  # four jobs of 25,000 ledgers each
        publish_ids(registry, dataset, ids[start : start + 25_000], replace_all=False)
    root = registry.root(dataset)
    assert root is not None and root.ledger_count == BIG
    data, _ = bk.store.zk.get(registry.dataset_path(dataset))
    assert len(data) < 10_000  # the root names shards, not ledgers
    for ref in root.shards:
        shard, _ = bk.store.zk.get(f"{registry.shards_path(dataset)}/{ref.shard_id}")
        assert len(shard) < 1_000_000
    assert len(root.shards) <= 2 * BIG // 10_000 + 1
    manifest = registry.manifest(dataset)
    assert manifest is not None and manifest.ledgers == tuple(ids)
    # A single job's 100,000 ledgers in one commit (shards written before the one multi).
    publish_ids(registry, "big-one-job", ids, replace_all=True)
    assert registry.manifest("big-one-job").ledgers == tuple(ids)  # type: ignore[union-attr]
    # Shards of up to 10,000 pairs, named <job>.<random>.<n> (docs/connector.md, "The manifest").
    one_job = registry.root("big-one-job")
    assert one_job is not None and [ref.count for ref in one_job.shards] == [10_000] * 10
    names = [ref.shard_id.split(".") for ref in one_job.shards]
    assert all(len(parts) == 3 for parts in names) and len({(job, tag) for job, tag, _ in names}) == 1
    assert sorted(int(n) for _, _, n in names) == list(range(10))
    # Appends on top only rewrite the last shard, whose content moves into a new one.
    writer = new_writer(uri, dataset, overwrite=False)
    assert spark_commit(writer, run_job(writer, [rows("tail", 3)])) == "committed"
    after = registry.root(dataset)
    assert after is not None and after.ledger_count == BIG + 1
    assert after.shards[:-1] == root.shards[: len(after.shards) - 1]
    manifest = registry.manifest(dataset)
    assert manifest is not None and manifest.ledgers[:BIG] == tuple(ids)
    new_ledger = manifest.ledgers[-1]
    got = []
    reader = BookKeeperReader(parse_read_options({"metadataserviceuri": uri, "ledgers": str(new_ledger[1])}))
    for part in reader.partitions():
        for batch in reader.read(part):
            got.extend(batch.column("payload").to_pylist())
    assert sorted(got) == rows("tail", 3)
    assert jobs_of(registry, dataset) == [] and root.retired == ()


def test_a_fault_right_after_the_job_began_leaves_a_record_recoverjobs_removes(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """Transition (none) -> WRITING, then the driver fails before any task: only the job's record is left."""
    dataset = "begun"
    old = seed(uri, dataset)
    with injected("job.begun=connection-loss"), pytest.raises(Exception, match="job.begun"):
        new_writer(uri, dataset, overwrite=True)
    (job,) = jobs_of(registry, dataset)
    assert registry.job(job).state is JobState.WRITING  # type: ignore[union-attr]
    capsys.readouterr()
    # By default a job still writing is left alone for an hour (it may be running).
    assert cli.main(["shell", "--metadata-service-uri", uri, "--json", "recoverjobs"]) == 0
    assert jobs_of(registry, dataset) == [job]
    assert cli.main(["shell", "--metadata-service-uri", uri, "--json", "recoverjobs", "--stale-after", "0"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert {"job": job, "done": "stale writing job aborted"} in json.loads(out[-1])["jobs"]
    assert_clean(bk, registry, dataset)
    assert read_rows(uri, dataset) == old


def test_another_committer_publishes_with_an_idempotency_key_in_the_same_multi(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API a streaming sink uses: a record per micro-batch, CommitKey(query, batchId); a replay is a no-op."""
    import uuid

    from bkspark.datasource import publishing
    from bkspark.datasource.cleanup import CommitCleaner
    from bkspark.datasource.datasets import CommitKey, JobRecord

    dataset = "stream"
    cleaner = CommitCleaner(bk, registry)

    def batch(batch_id: int, payload: bytes) -> tuple[str, tuple[int, int], bool]:
        job_id = uuid.uuid4().hex
        registry.begin_job(job_id, JobRecord(JobState.WRITING, dataset))
        handle = bk.create_ledger(ensemble_size=2, write_quorum_size=2, ack_quorum_size=2)
        registry.register(job_id, 0, handle.ledger_id)
        handle.append(payload)
        handle.close()
        ledger = (0, handle.ledger_id)
        result = registry.publish(dataset, [ledger], replace_all=False, job_id=job_id,
                                  key=CommitKey("stream-q1", batch_id))
        if result.already:
            cleaner.abort_job(job_id, dataset)
        else:
            assert cleaner.finish_commit(job_id, dataset)
        return job_id, ledger, result.already

    _, first, already = batch(0, b"b0")
    assert not already
    _, replayed, already = batch(0, b"b0-again")  # the query restarted and replayed batch 0
    assert already and replayed[1] not in ledgers_of(bk)
    _, second, already = batch(1, b"b1")
    assert not already
    assert registry.manifest(dataset).ledgers == (first, second)  # type: ignore[union-attr]
    assert registry.root(dataset).token("stream-q1") == 1  # type: ignore[union-attr]
    assert jobs_of(registry, dataset) == []
    # The root remembers the most recently published writers only.
    monkeypatch.setattr(publishing, "MAX_COMMIT_KEYS", 2)
    for writer in ("other-a", "other-b"):
        job_id = uuid.uuid4().hex
        registry.begin_job(job_id, JobRecord(JobState.WRITING, dataset))
        registry.publish(dataset, [], replace_all=False, job_id=job_id, key=CommitKey(writer, 0))
        registry.forget_job(job_id)
    assert [w for w, _ in registry.root(dataset).keys] == ["other-a", "other-b"]  # type: ignore[union-attr]


def test_a_jobs_ledgers_and_its_parent_carry_the_documented_tags_and_contexts(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """docs/connector.md, "The commit protocol", transitions 2 and 4: what a task's ledger and the job's parent
    (its commit marker) record, key by key; and a task failing while writing closes its ledger abnormally,
    expecting deletion now. The audit and other tools (Java's shell shows the tags) rely on these names."""
    import socket
    from datetime import datetime, timedelta, timezone

    from bkspark.context import read_context

    def failing() -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_arrays([pa.array(rows("cut", 3), pa.binary())], names=["payload"])
        raise RuntimeError("the executor went away")

    writer = new_writer(uri, "tagged", overwrite=False)
    with pytest.raises(RuntimeError, match="executor went away"):
        writer.write(failing())
    ((_, failed),) = registry.job_ledgers(writer.job_id)
    close = read_context(bk.get_ledger_metadata(failed)).close
    assert bk.get_ledger_metadata(failed).state.name == "CLOSED"
    assert close is not None and close.abnormal and "RuntimeError: the executor went away" in (close.error_message or "")
    assert close.expect_delete_after is not None
    assert abs(close.expect_delete_after - datetime.now(timezone.utc)) < timedelta(minutes=1)

    message = task(writer, [b"a" * 10, b"b" * 30])
    assert spark_commit(writer, [message]) == "committed"
    assert failed not in ledgers_of(bk)  # the failed attempt's ledger went with the clean-up
    job, host = writer.job_id, socket.gethostname()
    md = bk.get_ledger_metadata(message.ledger_id)
    assert {k: md.custom_metadata[k] for k in ("bkspark.dataset", "bkspark.job", "bkspark.partition",
                                               "bkspark.attempt", "application")} == {
        "bkspark.dataset": b"tagged", "bkspark.job": job.encode(), "bkspark.partition": b"0",
        "bkspark.attempt": b"0", "application": f"bkspark-spark-writer@{host}".encode()}
    # "Schema": the custom_metadata column of such a ledger carries 8 pairs (these tags, the BP-44 create and close
    # contexts and the seal time), which every row of it repeats
    assert len(md.custom_metadata) == 8
    context = read_context(md)
    create = context.create
    assert create is not None and create.created_by is not None
    assert (create.created_by.enterprise, create.created_by.system, create.created_by.service,
            create.created_by.instance) == ("apache-spark", "bkspark-connector", f"job-{job}", host)
    assert create.data_set == "tagged"
    assert create.expected_average_entry_size is not None and create.expected_average_entry_size.size_in_bytes == 20
    assert create.child_of_ledger is not None
    parent = create.child_of_ledger.ledger_id
    assert context.close is not None and context.close.reason is not None and context.close.reason.name == "NO_MORE_DATA"

    pmd = bk.get_ledger_metadata(parent)
    assert {k: pmd.custom_metadata[k] for k in ("bkspark.dataset", "bkspark.job", "bkspark.role", "application")} == {
        "bkspark.dataset": b"tagged", "bkspark.job": job.encode(), "bkspark.role": b"job-commit-marker",
        "application": f"bkspark-spark-writer@{host}".encode()}
    pcontext = read_context(pmd)
    pcreate = pcontext.create
    assert pcreate is not None and pcreate.created_by is not None
    assert pcreate.created_by.service == f"job-{job}/commit-marker" and pcreate.data_set == "tagged"
    assert (pcreate.expected_max_entries, pcreate.expected_max_length) == (0, 0)
    assert pcontext.close is not None and pcontext.close.reason is not None
    assert pcontext.close.reason.name == "NO_MORE_DATA"
    assert (pmd.state.name, pmd.last_entry_id, pmd.length) == ("CLOSED", -1, 0)
    assert list(pmd.ensembles.values()) == [md.ensembles[0]]  # on the ensemble of one of the job's ledgers


def test_a_job_with_no_rows_publishes_no_ledger_and_creates_no_parent(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """docs/connector.md, transition 4: "A job with no rows publishes no ledger and creates no parent": its tasks
    create no ledger, its reserved parent id stays unused, and an append keeps the dataset's rows."""
    old = seed(uri, "no-rows")
    before = ledgers_of(bk)
    writer = new_writer(uri, "no-rows", overwrite=False)
    messages = run_job(writer, [[], []])
    assert spark_commit(writer, messages) == "committed"
    assert ledgers_of(bk) == before and writer.parent_ledger_id not in before
    assert read_rows(uri, "no-rows") == old
    assert jobs_of(registry, "no-rows") == []


def test_a_task_hands_its_rows_to_the_client_in_runs_of_500_entries(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/connector.md, "Write": entries are written with the client's bulk append in runs of 500, so the
    hand-over to the client's loop is per run, not per row; a run never spans two of Spark's Arrow batches."""
    from bkspark.client.bookkeeper import LedgerHandle

    runs: list[int] = []
    real = LedgerHandle.append_many

    def append_many(self: LedgerHandle, payloads: Any) -> Any:
        runs.append(len(payloads))
        return real(self, payloads)

    monkeypatch.setattr(LedgerHandle, "append_many", append_many)
    writer = new_writer(uri, "runs", overwrite=False)
    first, second = rows("run-a", 1_234), rows("run-b", 300)
    batches = [pa.RecordBatch.from_arrays([pa.array(part, pa.binary())], names=["payload"]) for part in (first, second)]
    message = writer.write(iter(batches))
    monkeypatch.undo()
    assert runs == [500, 500, 234, 300]
    assert spark_commit(writer, [message]) == "committed"
    assert read_rows(uri, "runs") == sorted(first + second)


def test_rows_are_packed_within_each_arrow_batch_never_across_two(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """docs/connector.md, "Rows per entry": packing happens within each Arrow batch Spark hands the writer, so an
    entry never holds rows of two batches (rowsPerEntry 10 and batches of 3 and 4 rows: entries of 3 and 4)."""
    from bkspark.datasource.packing import unpack_entries

    writer = new_writer(uri, "packed-batches", overwrite=False, rowsPerEntry="10")
    first, second = rows("pb-a", 3), rows("pb-b", 4)
    batches = [pa.RecordBatch.from_arrays([pa.array(part, pa.binary())], names=["payload"]) for part in (first, second)]
    message = writer.write(iter(batches))
    assert spark_commit(writer, [message]) == "committed"
    with bk.open_ledger(message.ledger_id, recovery=False) as handle:
        entries = handle.read(0, handle.last_add_confirmed)
    assert len(entries) == 2
    ids, payloads = unpack_entries(pa.array([e.entry_id for e in entries], pa.int64()),
                                   pa.array([e.payload for e in entries], pa.binary()))
    assert ids.tolist() == [0, 0, 0, 1, 1, 1, 1] and payloads.to_pylist() == first + second


def test_the_root_keeps_the_highest_token_of_the_1000_most_recent_writers(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """docs/connector.md, "Publishing from another writer": the root keeps the highest token per writer, for the
    1,000 most recently published writers; a token not above the kept one publishes nothing (``already``)."""
    import uuid

    from bkspark.datasource.datasets import CommitKey, JobRecord, ManifestRoot

    dataset = "keys-1000"
    oldest_first = tuple((f"w{i}", 5) for i in range(1_000))
    bk.store.zk.create(registry.dataset_path(dataset), ManifestRoot(dataset, generation=1, keys=oldest_first).to_bytes(),
                       makepath=True)

    def publish(writer: str, token: int) -> bool:
        job_id = uuid.uuid4().hex
        registry.begin_job(job_id, JobRecord(JobState.WRITING, dataset))
        already = registry.publish(dataset, [], replace_all=False, job_id=job_id, key=CommitKey(writer, token)).already
        registry.forget_job(job_id)
        return already

    assert publish("w1", 4) and publish("w1", 5)  # not above the kept token: nothing changes
    assert registry.root(dataset).keys == oldest_first  # type: ignore[union-attr]
    assert not publish("w1", 6)  # above it: published, and w1 is now the most recent writer
    assert not publish("new", 0)  # a 1,001st writer: the least recently published one (w0) is forgotten
    keys = registry.root(dataset).keys  # type: ignore[union-attr]
    assert len(keys) == 1_000 and keys[-2:] == (("w1", 6), ("new", 0))
    assert [w for w, _ in keys[:-2]] == [f"w{i}" for i in range(2, 1_000)]
    assert not publish("w0", 0)  # forgotten: its old token no longer refuses a replay


@pytest.mark.parametrize("rows_per_entry", ["1", "8"])
def test_a_row_over_the_frame_limit_fails_its_task_naming_row_partition_and_option(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, rows_per_entry: str
) -> None:
    """The client refuses the entry locally; the writer restates it with the row, the partition and the option key
    (with rows packed into entries too: a row over entryMaxBytes is an entry of its own, docs/connector.md)."""
    from bkspark.client.conf import DEFAULT_MAX_FRAME_SIZE
    from bkspark.datasource.writer import FRAME_LIMIT_OPTION
    from bkspark.errors import EntryTooLargeError

    dataset = f"too-large-{rows_per_entry}"
    old = seed(uri, dataset)
    writer = new_writer(uri, dataset, overwrite=False, rowsPerEntry=rows_per_entry)
    with pytest.raises(EntryTooLargeError) as raised:
        task(writer, [b"fits", b"x" * (DEFAULT_MAX_FRAME_SIZE + 1), b"never-sent"])
    message = str(raised.value)
    assert "row 1 of partition 0" in message and FRAME_LIMIT_OPTION in message
    assert raised.value.context["partition"] == 0 and raised.value.context["row"] == 1
    assert raised.value.context["size"] == DEFAULT_MAX_FRAME_SIZE + 1
    # Spark aborts the job: the failed task's ledger goes, the dataset keeps exactly its old rows.
    assert spark_commit_abort(writer) == "aborted"
    assert read_rows(uri, dataset) == old
    assert_clean(bk, registry, dataset)
