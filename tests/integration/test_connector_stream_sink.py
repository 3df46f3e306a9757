"""The exactly-once ``writeStream.format("bookkeeper")`` sink against real ZooKeeper, Python bookies and Spark.

* The commit protocol step by step, without Spark: a batch committed twice publishes once, a replayed batch's
  new ledgers are deleted, an aborted batch leaves nothing.
* A Spark query from the bookkeeper source into the sink: every input entry lands in the dataset exactly once.
* (fault) The same query's driver SIGKILLed at random points several times, restarted from its checkpoint.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from bkspark.client import BookKeeper
from bkspark.datasource.datasets import DatasetRegistry, JobRecord, JobState
from bkspark.datasource.options import parse_write_options
from bkspark.datasource.stream_writer import BookKeeperStreamWriter, StreamCommitMessage
from bkspark.datasource.writer import BookKeeperWriter, recover_jobs
from bkspark.errors import NoSuchLedgerMetadataError
from tests.integration.test_connector_spark import spark, write_bkspark_ledger  # noqa: F401 - the Spark fixture
from tests.integration.test_connector_streaming import bk, py_cluster  # noqa: F401 - bookies of this module

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]


def sink_writer(uri: str, dataset: str, checkpoint: str) -> BookKeeperStreamWriter:
    options = parse_write_options({"metadataServiceUri": uri, "dataset": dataset})
    return BookKeeperStreamWriter(options, 0, False, checkpoint)


def run_task(writer: BookKeeperStreamWriter, batch_id: int, run: str, payloads: list[bytes]) -> StreamCommitMessage:
    """What one Spark task of ``batch_id`` does (its job id from the local properties, here given)."""
    tasks = writer._tasks
    tasks.job_id = f"{writer.writer}-{batch_id}-{run}"
    bk_client = tasks._client()
    tasks._registry(bk_client).begin_job(tasks.job_id, JobRecord(JobState.WRITING, writer.options.dataset))
    message = BookKeeperWriter.write(tasks, iter([pa.record_batch([pa.array(payloads, pa.binary())], names=["payload"])]))
    return StreamCommitMessage(message.scope_id, message.ledger_id, message.entry_count, message.byte_count,
                               message.partition_id, message.attempt, tasks.job_id)


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


def test_bookkeeper_to_bookkeeper_query_writes_each_entry_once(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    uri = py_cluster.metadata_service_uri
    name = f"copy-{uuid.uuid4().hex[:8]}"
    payloads = [b"row-%d" % i for i in range(120)]
    lid = write_bkspark_ledger(bk, payloads)
    query = (
        spark.readStream.format("bookkeeper").option("metadataServiceUri", uri).option("ledgers", str(lid))
        .option("maxEntriesPerTrigger", "50").load()
        .select("payload").writeStream.format("bookkeeper").option("metadataServiceUri", uri)
        .option("dataset", name).option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(180)
    assert sorted(dataset_payloads(bk, name)) == sorted(payloads)
    # The sink's dataset is itself a source: read it back in a batch query too.
    rows = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", name).load()
    assert rows.count() == 120


@pytest.mark.fault
def test_exactly_once_with_the_driver_sigkilled_at_random_points(bk, py_cluster, tmp_path) -> None:  # noqa: F811
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
    for attempt in range(12):
        log = open(tmp_path / f"driver-{attempt}.log", "w")
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            if kills < 4:
                started = time.monotonic()
                deadline = started + 300
                while "STARTED" not in (tmp_path / f"driver-{attempt}.log").read_text() and proc.poll() is None:
                    if time.monotonic() > deadline:
                        raise AssertionError("driver never started its query")
                    time.sleep(0.2)
                time.sleep(rng.uniform(0.5, 12.0))
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    kills += 1
                    continue
            assert proc.wait(600) == 0, (tmp_path / f"driver-{attempt}.log").read_text()[-3000:]
            break
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
    else:
        raise AssertionError(f"the query never finished (seed {seed})")
    counts = Counter(dataset_payloads(bk, name))
    assert kills >= 1
    assert set(counts) == set(payloads), f"seed {seed}: missing {set(payloads) - set(counts)}"
    assert all(n == 1 for n in counts.values()), f"seed {seed}: duplicates {[p for p, n in counts.items() if n > 1]}"
