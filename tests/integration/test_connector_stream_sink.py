"""The exactly-once ``writeStream.format("bookkeeper")`` sink against real ZooKeeper, Python bookies and Spark.

* The commit protocol step by step, without Spark: a batch committed twice publishes once, a replayed batch's
  new ledgers are deleted, an aborted batch leaves nothing; what a dead run leaves is reported by the orphan
  audit and removed by the restarted query's next commit; output mode complete replaces the dataset.
* A Spark query from the bookkeeper source into the sink: every input entry lands in the dataset exactly once;
  a streaming aggregation in output mode complete leaves exactly its last result; update mode is refused.
* (fault) The same query's driver SIGKILLed at random points several times, restarted from its checkpoint; and
  killed at two chosen points of one batch's commit, with the audit's findings checked after each kill.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pytest

from bkspark.audit import Auditor, OrphanReason, list_orphans
from bkspark.client import BookKeeper
from bkspark.context import read_create_context
from bkspark.datasource.clients import client_conf, evict_client
from bkspark.datasource.datasets import DatasetRegistry, JobRecord, JobState
from bkspark.datasource.options import parse_write_options
from bkspark.datasource.stream_writer import BookKeeperStreamWriter, StreamCommitMessage, batch_job_id
from bkspark.datasource import faults
from bkspark.datasource.cleanup import recover_jobs
from bkspark.datasource.writer import JOB_PARENT_ROLE, TAG_DATASET, TAG_JOB, TAG_ROLE, reserve_parent_id
from bkspark.errors import NoSuchLedgerMetadataError
from tests.harness.process import kill_group, wait_group_gone
from tests.integration.test_connector_orphans import audit
from tests.integration.test_connector_spark import spark, write_bkspark_ledger  # noqa: F401 - the Spark fixture
from tests.integration.test_connector_streaming import bk, py_cluster  # noqa: F401 - bookies of this module

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def sink_client(py_cluster) -> Iterator[None]:  # noqa: F811
    """The connector's cached client that the sink's commits use in this process: closed before the cluster."""
    yield
    evict_client(py_cluster.metadata_service_uri, client_conf(()))


def parent_of(bk: BookKeeper, lid: int) -> int:  # noqa: F811
    """The ``childOfLedger`` a sink ledger's create context names."""
    create = read_create_context(bk.get_ledger_metadata(lid).custom_metadata)
    assert create is not None and create.child_of_ledger is not None
    return create.child_of_ledger.ledger_id


def query_jobs(bk: BookKeeper, writer: BookKeeperStreamWriter) -> list[str]:  # noqa: F811
    return [j for j in DatasetRegistry(bk.zk, bk.ledgers_root).jobs() if j.startswith(writer.writer + "-")]


def sink_writer(uri: str, dataset: str, checkpoint: str, complete: bool = False) -> BookKeeperStreamWriter:
    options = parse_write_options({"metadataServiceUri": uri, "dataset": dataset})
    return BookKeeperStreamWriter(options, 0, False, checkpoint, complete=complete)


def run_task(writer: BookKeeperStreamWriter, batch_id: int, run: str, payloads: list[bytes]) -> StreamCommitMessage:
    """What one Spark task of ``batch_id`` does (its batch and run ids from the local properties, here given)."""
    rows = [pa.record_batch([pa.array(payloads, pa.binary())], names=["payload"])] if payloads else []
    return writer._tasks.write_batch(iter(rows), batch_id, run)


def dataset_payloads(bk: BookKeeper, name: str) -> list[bytes]:  # noqa: F811
    manifest = DatasetRegistry(bk.zk, bk.ledgers_root).manifest(name)
    out: list[bytes] = []
    for scope, lid in (manifest.ledgers if manifest else ()):
        handle = bk.open_ledger(lid, scope_id=scope)
        out.extend(e.payload for e in handle)
    return out


def exists(bk: BookKeeper, lid: int) -> bool:  # noqa: F811
    try:
        bk.get_ledger_metadata(lid)
        return True
    except NoSuchLedgerMetadataError:
        return False


def test_commit_twice_publishes_once_and_replayed_or_aborted_batches_leave_nothing(bk, py_cluster, tmp_path) -> None:  # noqa: F811
    uri = py_cluster.metadata_service_uri
    name = f"sink-{uuid.uuid4().hex[:8]}"
    writer = sink_writer(uri, name, str(tmp_path / "cp"))
    registry = DatasetRegistry(bk.zk, bk.ledgers_root)

    first = run_task(writer, 0, "runA", [b"a", b"b"])
    writer.commit([first], 0)
    assert dataset_payloads(bk, name) == [b"a", b"b"]
    writer.commit([first], 0)  # Spark retried the commit (crash before its commits/0): nothing new
    assert dataset_payloads(bk, name) == [b"a", b"b"]

    # A restarted query replays batch 0 (same rows, new run): its ledger is a duplicate and is deleted.
    replay = run_task(writer, 0, "runB", [b"a", b"b"])
    writer.commit([replay], 0)
    assert dataset_payloads(bk, name) == [b"a", b"b"] and not exists(bk, replay.ledger_id)

    # Batch 1 fails: abort removes its ledgers and its job, whichever run wrote them.
    failed = run_task(writer, 1, "runB", [b"c"])
    straggler = run_task(writer, 1, "runC", [b"c"])
    writer.abort([failed, None], 1)
    assert not exists(bk, failed.ledger_id) and not exists(bk, straggler.ledger_id)
    assert not [j for j in registry.jobs() if j.startswith(writer.writer)]

    second = run_task(writer, 1, "runD", [b"c"])
    writer.commit([second], 1)
    assert dataset_payloads(bk, name) == [b"a", b"b", b"c"]
    # Another query (another checkpoint) has its own key: its batch 0 publishes.
    other = sink_writer(uri, name, str(tmp_path / "other-cp"))
    writer_b = run_task(other, 0, "runE", [b"d"])
    other.commit([writer_b], 0)
    assert dataset_payloads(bk, name) == [b"a", b"b", b"c", b"d"]

    # A run whose driver died after its tasks wrote and before its commit: never published; recoverjobs (here
    # with no age limit) aborts its stale job and deletes its ledger.
    dead = run_task(writer, 2, "runDead", [b"e"])
    assert dataset_payloads(bk, name) == [b"a", b"b", b"c", b"d"]
    assert (dead.job_id, "stale writing job aborted") in recover_jobs(bk, registry, dataset=name, stale_after=0)
    assert not exists(bk, dead.ledger_id) and dataset_payloads(bk, name) == [b"a", b"b", b"c", b"d"]


def test_a_batch_whose_ledger_was_deleted_before_its_commit_fails_and_its_rerun_publishes_once(bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """docs/connector.md, "A job publishes only ledgers that still exist": a micro-batch's commit refuses a ledger
    of the batch deleted after its task wrote it (nothing published, Spark's abort removes the rest), and the batch
    run again, as a restarted query runs it, publishes its rows once."""
    uri = py_cluster.metadata_service_uri
    name = f"sink-gone-{uuid.uuid4().hex[:8]}"
    writer = sink_writer(uri, name, str(tmp_path / "cp"))
    first = run_task(writer, 0, "runA", [b"a"])
    writer.commit([first], 0)
    messages = [run_task(writer, 1, "runA", [b"b"]), run_task(writer, 1, "runA", [b"c"])]
    bk.delete_ledger(messages[1].ledger_id)
    with pytest.raises(NoSuchLedgerMetadataError, match=rf"BOOKKEEPER_DATA_LOSS.*ledger\(s\) {messages[1].ledger_id} "):
        writer.commit(messages, 1)
    writer.abort(messages, 1)
    assert dataset_payloads(bk, name) == [b"a"] and not exists(bk, messages[0].ledger_id)
    rerun = [run_task(writer, 1, "runB", [b"b"]), run_task(writer, 1, "runB", [b"c"])]
    writer.commit(rerun, 1)
    assert sorted(dataset_payloads(bk, name)) == [b"a", b"b", b"c"]
    assert not query_jobs(bk, writer)


def test_a_dead_runs_batch_is_audited_and_the_restarted_querys_commit_removes_it(bk, py_cluster, tmp_path) -> None:  # noqa: F811
    uri = py_cluster.metadata_service_uri
    name = f"dead-{uuid.uuid4().hex[:8]}"
    writer = sink_writer(uri, name, str(tmp_path / "cp"))
    first = run_task(writer, 0, "runA", [b"a", b"b"])
    writer.commit([first], 0)
    # Committed: the batch's parent exists (a commit marker), its child is in the manifest; nothing is reported.
    committed_parent = parent_of(bk, first.ledger_id)
    assert bk.get_ledger_metadata(committed_parent).custom_metadata[TAG_ROLE] == JOB_PARENT_ROLE
    assert not {(0, first.ledger_id), (0, committed_parent)} & set(audit(uri, bk))

    # Run A dies in batch 1, after both of its tasks wrote (no commit, no abort): the tasks' ledgers share the
    # parent the first task reserved, which does not exist, so the audit reports each of them.
    dead = [run_task(writer, 1, "runA", [b"c"]), run_task(writer, 1, "runA", [b"d"])]
    dead_parent = parent_of(bk, dead[0].ledger_id)
    assert parent_of(bk, dead[1].ledger_id) == dead_parent and not exists(bk, dead_parent)
    # Within the audit's parentGracePeriodSeconds (as for a batch still being written) they are not reported.
    patient = Auditor(uri, grace_period=3600, parent_grace_period=3600, audit_period=3600)
    try:
        patient.audit_once()
    finally:
        patient.stop()
    assert not {(r.scope_id, r.ledger_id) for r in list_orphans(bk.store.zk, bk.store.root)} & {(0, m.ledger_id) for m in dead}
    found = audit(uri, bk)
    assert {pair: found.get(pair) for pair in [(0, m.ledger_id) for m in dead]} == {
        (0, m.ledger_id): {(OrphanReason.BROKEN_PARENT_REF, dead_parent)} for m in dead
    }
    assert dataset_payloads(bk, name) == [b"a", b"b"]

    # Run B (restarted from the checkpoint) replays batch 1 and commits it: the rows once, run A's job gone.
    replay = [run_task(writer, 1, "runB", [b"c"]), run_task(writer, 1, "runB", [b"d"])]
    writer.commit(replay, 1)
    assert sorted(dataset_payloads(bk, name)) == [b"a", b"b", b"c", b"d"]
    assert not any(exists(bk, m.ledger_id) for m in dead) and query_jobs(bk, writer) == []
    assert not {(0, m.ledger_id) for m in dead + replay} & set(audit(uri, bk))

    # Run B dies in batch 2 right after its commit point (its clean-up never ran: the record stays committed);
    # run C replays batch 2: nothing is published twice, and run B's leftover job is finished.
    doomed = run_task(writer, 2, "runB", [b"e"])
    failed_attempt = run_task(writer, 2, "runB", [b"e"])  # a task attempt that failed: not in the commit's messages
    with faults.injected("commit.published=connection-loss"):
        writer.commit([doomed], 2)  # the commit point passed; each clean-up attempt fails
    assert query_jobs(bk, writer) == [doomed.job_id]
    # The batch's parent exists now; the failed attempt's ledger is a leftover of a committed job.
    assert audit(uri, bk).get((0, failed_attempt.ledger_id)) == {
        (OrphanReason.DATASET_LEFTOVER, parent_of(bk, doomed.ledger_id))
    }
    again = run_task(writer, 2, "runC", [b"e"])
    writer.commit([again], 2)
    assert sorted(dataset_payloads(bk, name)) == [b"a", b"b", b"c", b"d", b"e"]
    assert not exists(bk, again.ledger_id) and not exists(bk, failed_attempt.ledger_id) and exists(bk, doomed.ledger_id)
    assert query_jobs(bk, writer) == [] and (0, failed_attempt.ledger_id) not in audit(uri, bk)


def test_tasks_racing_to_begin_a_batch_share_the_parent_of_the_record_created_first(
    bk, py_cluster, tmp_path, monkeypatch  # noqa: F811
) -> None:
    uri = py_cluster.metadata_service_uri
    name = f"race-{uuid.uuid4().hex[:8]}"
    writer = sink_writer(uri, name, str(tmp_path / "cp"))
    registry = DatasetRegistry(bk.zk, bk.ledgers_root)
    winner_parent = reserve_parent_id(bk, 0)
    # Another task of the batch creates the record between this task's look (no record yet) and its create.
    registry.begin_job(batch_job_id(writer.writer, 0, "runA"), JobRecord(JobState.WRITING, name, parent=(0, winner_parent)))
    real_job = DatasetRegistry.job
    looks: list[str] = []

    def first_look_misses(self: DatasetRegistry, job_id: str) -> JobRecord | None:
        looks.append(job_id)
        return None if len(looks) == 1 else real_job(self, job_id)

    monkeypatch.setattr(DatasetRegistry, "job", first_look_misses)
    message = run_task(writer, 0, "runA", [b"x"])
    monkeypatch.undo()
    assert len(looks) == 2 and parent_of(bk, message.ledger_id) == winner_parent
    writer.commit([message], 0)
    assert dataset_payloads(bk, name) == [b"x"] and exists(bk, winner_parent)


def test_an_empty_append_batch_publishes_nothing_and_still_removes_what_a_dead_run_left(bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """docs/streaming.md, step 3: a batch with no rows in append mode publishes nothing, and the clean-up of dead
    runs' jobs runs at every commit, also that one's."""
    uri = py_cluster.metadata_service_uri
    name = f"empty-{uuid.uuid4().hex[:8]}"
    writer = sink_writer(uri, name, str(tmp_path / "cp"))
    writer.commit([run_task(writer, 0, "runA", [b"a"])], 0)
    registry = DatasetRegistry(bk.zk, bk.ledgers_root)
    before = registry.manifest(name)
    dead = run_task(writer, 1, "runA", [b"lost"])  # run A dies in batch 1 after its task wrote
    # Run B's batch 1 has no rows (its input replayed nothing for it): nothing new is published ...
    writer.commit([run_task(writer, 1, "runB", []), run_task(writer, 1, "runB", [])], 1)
    after = registry.manifest(name)
    assert before is not None and after is not None and after.ledgers == before.ledgers
    assert dataset_payloads(bk, name) == [b"a"]
    # ... and run A's job of batch 1 is aborted all the same.
    assert not exists(bk, dead.ledger_id) and query_jobs(bk, writer) == []


def test_complete_mode_replaces_the_dataset_once_per_batch(bk, py_cluster, tmp_path) -> None:  # noqa: F811
    uri = py_cluster.metadata_service_uri
    name = f"complete-{uuid.uuid4().hex[:8]}"
    writer = sink_writer(uri, name, str(tmp_path / "cp"), complete=True)
    batch0 = [run_task(writer, 0, "runA", [b"k0=1"]), run_task(writer, 0, "runA", [b"k1=1"])]
    writer.commit(batch0, 0)
    assert sorted(dataset_payloads(bk, name)) == [b"k0=1", b"k1=1"]
    parent0 = parent_of(bk, batch0[0].ledger_id)

    # Batch 1's result replaces batch 0's: batch 0's ledgers and their parent are deleted by the clean-up.
    batch1 = [run_task(writer, 1, "runA", [b"k0=2", b"k1=1"]), run_task(writer, 1, "runA", [])]
    writer.commit(batch1, 1)
    assert sorted(dataset_payloads(bk, name)) == [b"k0=2", b"k1=1"]
    assert not any(exists(bk, lid) for lid in [m.ledger_id for m in batch0] + [parent0])
    parent1 = parent_of(bk, batch1[0].ledger_id)
    assert exists(bk, parent1)

    # A replay of batch 1 (a restarted run) changes nothing; its ledger is a duplicate and goes.
    replay = run_task(writer, 1, "runB", [b"k0=2", b"k1=1"])
    writer.commit([replay], 1)
    assert sorted(dataset_payloads(bk, name)) == [b"k0=2", b"k1=1"] and not exists(bk, replay.ledger_id)

    # An empty result (every task empty) empties the dataset, and only once.
    writer.commit([run_task(writer, 2, "runB", []), run_task(writer, 2, "runB", [])], 2)
    registry = DatasetRegistry(bk.zk, bk.ledgers_root)
    assert dataset_payloads(bk, name) == [] and registry.manifest(name) is not None
    assert not exists(bk, batch1[0].ledger_id) and not exists(bk, parent1)
    batch3 = run_task(writer, 3, "runB", [b"k2=1"])
    writer.commit([batch3], 3)
    writer.commit([run_task(writer, 2, "runC", [])], 2)  # a late replay of the empty batch 2: already published
    assert dataset_payloads(bk, name) == [b"k2=1"]
    assert query_jobs(bk, writer) == []
    assert not {(0, batch3.ledger_id), (0, parent_of(bk, batch3.ledger_id))} & set(audit(uri, bk))


def test_a_stream_following_a_complete_mode_dataset_loses_a_result_replaced_before_it_read_it(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """docs/streaming.md, output mode complete: a dataset written in complete mode is meant for batch reads; a
    stream that follows it sees a replaced ledger it had not read to its end as deleted (`failOnDataLoss`)."""
    from tests.integration.test_connector_streaming import Collector, stream

    uri = py_cluster.metadata_service_uri
    name = f"follow-complete-{uuid.uuid4().hex[:8]}"
    writer = sink_writer(uri, name, str(tmp_path / "sink-cp"), complete=True)
    first = run_task(writer, 0, "runA", [b"k0=1", b"k1=1", b"k2=1"])
    writer.commit([first], 0)

    class ReplaceWhileReading(Collector):
        def __call__(self, df, batch_id: int) -> None:  # type: ignore[no-untyped-def]
            super().__call__(df, batch_id)
            if batch_id == 0:  # the stream read 1 of the result's 3 entries: the sink's batch 1 replaces them
                writer.commit([run_task(writer, 1, "runA", [b"k0=2"])], 1)

    sink = ReplaceWhileReading()
    query = stream(spark, uri, dataset=name, maxEntriesPerTrigger="1").writeStream.foreachBatch(sink) \
        .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "cp")).start()
    with pytest.raises(Exception, match="BOOKKEEPER_DATA_LOSS"):
        query.awaitTermination(120)
    assert sink.rows() == [(first.ledger_id, 0, b"k0=1")] and not exists(bk, first.ledger_id)
    assert dataset_payloads(bk, name) == [b"k0=2"]


@pytest.mark.parametrize("rows_per_entry", ["1", "16"])
def test_bookkeeper_to_bookkeeper_query_writes_each_entry_once(spark, bk, py_cluster, tmp_path, rows_per_entry: str) -> None:  # noqa: F811
    from bkspark.datasource.packing import ENTRY_FORMAT_KEY

    uri = py_cluster.metadata_service_uri
    name = f"copy-{uuid.uuid4().hex[:8]}"
    payloads = [b"row-%d" % i for i in range(120)]
    lid = write_bkspark_ledger(bk, payloads)
    query = (
        spark.readStream.format("bookkeeper").option("metadataServiceUri", uri).option("ledgers", str(lid))
        .option("maxEntriesPerTrigger", "50").load()
        .select("payload").writeStream.format("bookkeeper").option("metadataServiceUri", uri)
        .option("dataset", name).option("rowsPerEntry", rows_per_entry)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(180)
    # The sink's dataset is itself a source: read it back in a batch query too.
    rows = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", name).load()
    assert sorted(bytes(r.payload) for r in rows.collect()) == sorted(payloads)
    manifest = DatasetRegistry(bk.zk, bk.ledgers_root).manifest(name)
    assert manifest is not None
    if rows_per_entry == "1":
        assert sorted(dataset_payloads(bk, name)) == sorted(payloads)  # one entry per row, as any reader sees it
    else:  # rows packed into entries (docs/connector.md, "Rows per entry"): fewer entries, every ledger tagged
        assert len(dataset_payloads(bk, name)) < 120
        assert all(ENTRY_FORMAT_KEY in bk.get_ledger_metadata(l, scope_id=sc).custom_metadata for sc, l in manifest.ledgers)


def test_an_aggregation_in_complete_mode_leaves_exactly_its_last_result(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    from pyspark.sql import functions as F

    uri = py_cluster.metadata_service_uri
    name = f"counts-{uuid.uuid4().hex[:8]}"
    lid = write_bkspark_ledger(bk, [b"k%d" % (i % 3) for i in range(60)])
    counts = (
        spark.readStream.format("bookkeeper").option("metadataServiceUri", uri).option("ledgers", str(lid))
        .option("maxEntriesPerTrigger", "20").load()
        .groupBy(F.col("payload").cast("string").alias("key")).count()
        .select(F.concat("key", F.lit("="), F.col("count").cast("string")).alias("payload"))
    )
    sink = (
        counts.writeStream.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", name)
        .option("checkpointLocation", str(tmp_path / "cp"))
    )
    query = sink.outputMode("complete").trigger(availableNow=True).start()
    assert query.awaitTermination(240)
    assert [p.numInputRows for p in query.recentProgress if p.numInputRows] == [20, 20, 20]
    # Three batches, each replacing the whole result: the dataset holds the last one, once.
    assert sorted(dataset_payloads(bk, name)) == [b"k0=20", b"k1=20", b"k2=20"]
    manifest = DatasetRegistry(bk.zk, bk.ledgers_root).manifest(name)
    assert manifest is not None
    jobs = {bk.get_ledger_metadata(lid, scope_id=scope).custom_metadata[TAG_JOB].decode() for scope, lid in manifest.ledgers}
    assert len(jobs) == 1 and jobs.pop().split("-")[2] == "2"  # stream-<query>-<batch>-<run>: batch 2's job only
    # The earlier batches' ledgers were deleted: the sink's ledgers left are batch 2's and their parent.
    sink_ledgers = [x for x in bk.list_ledgers() if bk.get_ledger_metadata(x).custom_metadata.get(TAG_DATASET) == name.encode()]
    assert sorted(sink_ledgers) == sorted({lid for _, lid in manifest.ledgers} | {parent_of(bk, manifest.ledgers[0][1])})

    # Update mode: Spark refuses it for every Python data source (no SupportsStreamingUpdateAsAppend).
    with pytest.raises(Exception, match="bookkeeper does not support Update mode"):
        sink.option("checkpointLocation", str(tmp_path / "cp-update")).outputMode("update").start().awaitTermination(60)

    # A checkpoint location from the session alone is refused (docs/streaming.md): Spark does not pass it to a
    # Python sink, and the sink needs it as the query's identity.
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "session-cp"))
    try:
        with pytest.raises(Exception, match="needs a checkpoint location"):
            refused = counts.writeStream.format("bookkeeper").option("metadataServiceUri", uri) \
                .option("dataset", name).outputMode("complete").start()
            try:
                refused.awaitTermination(60)
            finally:
                refused.stop()  # were it not refused, no query is left running
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")


@pytest.fixture
def drivers() -> Iterator[list[subprocess.Popen[str]]]:
    """The Spark drivers a test starts (each in a session of its own): SIGKILLed at its end if still running."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        kill_group(proc)


def start_driver(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    """A stream_sink_driver run with ``--wait``: it builds its SparkSession, then waits for :func:`go`.

    The test starts a run's driver while the run before it is still going (a driver's JVM start, not what is
    tested, overlaps that run) and lets it start its query only once the run before it is dead."""
    with open(log, "w") as out:
        return subprocess.Popen([*command, "--wait"], cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=out,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)


def go(proc: subprocess.Popen[str]) -> None:
    """Let a driver of :func:`start_driver` start its query (before, it touches neither cluster nor checkpoint)."""
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError):  # a driver that died starting: its exit code says why
        proc.stdin.write("go\n")
        proc.stdin.close()


@pytest.mark.fault
def test_exactly_once_with_the_driver_sigkilled_at_random_points(bk, py_cluster, tmp_path, drivers) -> None:  # noqa: F811
    uri = py_cluster.metadata_service_uri
    name = f"killed-{uuid.uuid4().hex[:8]}"
    payloads = [b"k-%d" % i for i in range(400)]
    lid = write_bkspark_ledger(bk, payloads)
    checkpoint = str(tmp_path / "cp")
    seed = int(os.environ.get("BKSPARK_SEED", time.time()))
    rng = random.Random(seed)
    print(f"seed={seed}")
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", PYSPARK_PYTHON=sys.executable)
    command = [sys.executable, "-m", "tests.integration.stream_sink_driver", uri, str(lid), name, checkpoint]
    kills = 0
    drivers.append(start_driver(command, env, tmp_path / "driver-0.log"))
    for attempt in range(12):
        proc = drivers[attempt]
        if kills < 4:  # this run may be killed: the next one's driver starts now (its query once this run is gone)
            drivers.append(start_driver(command, env, tmp_path / f"driver-{attempt + 1}.log"))
        go(proc)
        try:
            if kills < 4:
                started = time.monotonic()
                deadline = started + 300
                # A random point: after 0 to 2 of this run's micro-batches (the query has 10), then up to 1.5 s more.
                # A random delay alone could outlast a fast run and kill nothing.
                batches, delay = rng.randint(0, 2), rng.uniform(0.0, 1.5)
                while proc.poll() is None:
                    text = (tmp_path / f"driver-{attempt}.log").read_text()
                    if "STARTED" in text and text.count("PROGRESS") >= batches:
                        break
                    if time.monotonic() > deadline:
                        raise AssertionError("driver never started its query")
                    time.sleep(0.1)
                time.sleep(delay)
                if proc.poll() is None:
                    kill_group(proc)
                    wait_group_gone(proc.pid, f"driver {attempt}")  # nothing of it may still write or commit
                    kills += 1
                    continue
            assert proc.wait(600) == 0, (tmp_path / f"driver-{attempt}.log").read_text()[-3000:]
            break
        finally:
            kill_group(proc)
    else:
        raise AssertionError(f"the query never finished (seed {seed})")
    counts = Counter(dataset_payloads(bk, name))
    assert kills >= 1
    assert set(counts) == set(payloads), f"seed {seed}: missing {set(payloads) - set(counts)}"
    assert all(n == 1 for n in counts.values()), f"seed {seed}: duplicates {[p for p, n in counts.items() if n > 1]}"


@pytest.mark.fault
def test_a_driver_killed_in_a_batchs_commit_leaves_what_the_audit_reports_and_its_restart_removes(bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """Killed (SIGKILL, the whole driver) in batch 0's commit, after its tasks wrote, before the commit point.

    The dead run's ledgers are audited as BROKEN_PARENT_REF (their parent was never created); the restarted run
    replays batch 0, commits it once, removes the dead run's job and ledgers, and finishes.  (A kill just after
    the commit point, whose replay publishes nothing, is the ``runB`` case of the Spark-less test above.)
    """
    uri = py_cluster.metadata_service_uri
    name = f"killed-at-{uuid.uuid4().hex[:8]}"
    payloads = [b"c-%d" % i for i in range(60)]
    lid = write_bkspark_ledger(bk, payloads)
    plan = tmp_path / "faults"
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               PYSPARK_PYTHON=sys.executable, BKSPARK_WRITER_FAULTS=f"@{plan}")
    command = [sys.executable, "-m", "tests.integration.stream_sink_driver", uri, str(lid), name, str(tmp_path / "cp")]
    registry = DatasetRegistry(bk.zk, bk.ledgers_root)

    def run(attempt: int, fault_plan: str) -> int:
        plan.write_text(fault_plan)
        Path(f"{plan}.fired").unlink(missing_ok=True)
        log_path = tmp_path / f"driver-{attempt}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = proc.wait(420)
            finally:
                kill_group(proc)
        wait_group_gone(proc.pid, f"driver {attempt}")  # nothing of it may still commit or abort
        print(f"driver {attempt} ({fault_plan or 'no faults'}): exit {code}")
        if code not in (0, -signal.SIGKILL):
            raise AssertionError(log_path.read_text()[-3000:])
        return code

    def jobs_of_dataset() -> dict[str, JobRecord]:
        records = {job: registry.job(job) for job in registry.jobs()}
        return {job: r for job, r in records.items() if r is not None and r.dataset == name}

    # Run 1: killed in batch 0's commit, after its tasks wrote and before the multi.
    assert run(1, "commit.shards-written=kill*1") == -signal.SIGKILL
    (dead_job, dead_record), = jobs_of_dataset().items()
    dead_ledgers = registry.job_ledgers(dead_job)
    assert dead_record.state is JobState.WRITING and dead_record.parent is not None and len(dead_ledgers) == 3
    assert dataset_payloads(bk, name) == []
    found = audit(uri, bk)
    expected = {pair: {(OrphanReason.BROKEN_PARENT_REF, dead_record.parent[1])} for pair in dead_ledgers}
    assert {pair: found.get(pair) for pair in dead_ledgers} == expected

    # Run 2 (restarted from the checkpoint): replays batch 0 and commits it, runs batch 1, ends.
    assert run(2, "") == 0
    counts = Counter(dataset_payloads(bk, name))
    assert set(counts) == set(payloads) and set(counts.values()) == {1}
    assert jobs_of_dataset() == {} and not any(exists(bk, lid) for _, lid in dead_ledgers)
    sink_ledgers = {(0, x) for x in bk.list_ledgers() if bk.get_ledger_metadata(x).custom_metadata.get(TAG_DATASET) == name.encode()}
    manifest = registry.manifest(name)
    assert manifest is not None
    parents = {(0, parent_of(bk, lid)) for _, lid in manifest.ledgers}
    assert sink_ledgers == set(manifest.ledgers) | parents  # nothing of the dead run survived
    assert not sink_ledgers & set(audit(uri, bk))
