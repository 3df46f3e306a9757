"""A Spark write job killed mid-way leaves ledgers the orphan audit reports, and its own abort removes them.

The killed job runs in a Spark driver subprocess (driver JVM, its Python planner and workers, all in one process
group), after a job of the same driver that commits; its tasks write slowly: once the job's ledgers are registered
under ``<root>/bkspark/jobs/<job>``, the whole group gets SIGKILL, so neither the job's commit nor its abort ever
runs. Every ledger it created names the job's parent (``childOfLedger``), which only a commit creates, so one audit
pass reports each of them as ``BROKEN_PARENT_REF``; the ledgers of a job that committed are not reported. Then the
killed job's abort runs, on a writer rebuilt with the killed job's id and parent (as Spark's commit protocol would
hand it over), and the ledgers are gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkspark import cli
from bkspark.audit import Auditor, OrphanReason, list_orphans
from bkspark.client import BookKeeper
from bkspark.context import read_create_context
from bkspark.datasource.clients import client_conf, evict_client
from bkspark.datasource.datasets import DatasetRegistry
from bkspark.datasource.options import parse_write_options
from bkspark.datasource.writer import JOB_PARENT_ROLE, TAG_DATASET, TAG_JOB, TAG_ROLE, BookKeeperWriter
from tests.harness.process import kill_group, wait_group_gone
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZooKeeperServer, init_new_cluster

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]

# One Spark driver runs both jobs (one JVM start, not two): first a job that commits (300 rows, no delay), then,
# once the test has checked what the commit left and created the go file, the job to kill: 2 partitions of 4000
# rows, 20 rows per Arrow batch, every row slowed down by a UDF, so each task has created (and registered) its
# ledger long before it could finish.
JOBS = textwrap.dedent(
    """
    import os, sys, time
    from pyspark.sql import SparkSession, functions as F

    uri, kept, killed, go_file = sys.argv[1:5]
    spark = (SparkSession.builder.master("local[2,2]").appName("bkspark-killed-write")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "512m")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20").getOrCreate())

    # The job to kill writes a million rows: several seconds of adds, where the test kills it a moment after its
    # two ledgers are registered. (A slow UDF does not keep it writing longer: Spark hands a Python data source's
    # writer the rows of its partition only once they are all computed; BENCHMARKS.md, "Adds in flight; where a
    # session's first write waits".)
    def write(df, dataset):
        (df.write.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", dataset)
           .option("ensembleSize", "2").option("writeQuorumSize", "2").option("ackQuorumSize", "2")
           .mode("append").save())

    write(spark.range(0, 300, 1, 2).select(F.concat(F.lit("kept-"), F.col("id").cast("string")).alias("payload")),
          kept)
    print("committed", kept, flush=True)
    while not os.path.exists(go_file):
        time.sleep(0.05)
    print("writing", killed, flush=True)
    write(spark.range(0, 1000000, 1, 2).select(F.concat(F.lit("killed-"), F.col("id").cast("string")).alias("payload")),
          killed)
    print("committed", killed, flush=True)
    """
)


@pytest.fixture(scope="module")
def py_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonBookieCluster]:
    """Two Python bookies on a cluster root of their own."""
    zk = zookeeper.client()
    try:
        init_new_cluster(zk, "/bk-connector-orphans")
    finally:
        zk.stop()
        zk.close()
    uri = f"zk+hierarchical://{zookeeper.connect_string}/bk-connector-orphans"
    with PythonBookieCluster(uri, tmp_path_factory.mktemp("orphan-bookies"), bookies=2) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def bk(py_cluster: PythonBookieCluster) -> Iterator[BookKeeper]:
    with BookKeeper(py_cluster.metadata_service_uri) as client:
        yield client


def spark_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def job_ledgers(bk: BookKeeper) -> dict[str, list[tuple[int, int]]]:
    """Job id -> ledgers registered under it (``<root>/bkspark/jobs``)."""
    registry = DatasetRegistry(bk.store.zk, bk.store.root)
    jobs_path = f"{bk.store.root}/bkspark/jobs"
    jobs = bk.store.zk.get_children(jobs_path) if bk.store.zk.exists(jobs_path) else []
    return {job: registry.job_ledgers(job) for job in jobs}


def audit(uri: str, bk: BookKeeper) -> dict[tuple[int, int], set[tuple[OrphanReason, int]]]:
    """One audit pass with no parent grace period; (scope, ledger) -> {(reason, detail)} as it recorded them."""
    auditor = Auditor(uri, grace_period=3600, parent_grace_period=0, audit_period=3600)
    try:
        auditor.audit_once()
    finally:
        auditor.stop()
    found: dict[tuple[int, int], set[tuple[OrphanReason, int]]] = {}
    for record in list_orphans(bk.store.zk, bk.store.root):
        found.setdefault((record.scope_id, record.ledger_id), set()).add((record.reason, record.detail))
    return found


def test_a_killed_write_job_leaves_ledgers_the_audit_reports_and_its_abort_removes(
    bk: BookKeeper, py_cluster: PythonBookieCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = py_cluster.metadata_service_uri
    registry = DatasetRegistry(bk.store.zk, bk.store.root)

    script = tmp_path / "jobs.py"
    script.write_text(JOBS)
    log_path = tmp_path / "jobs.log"
    go_file = tmp_path / "go"
    log = log_path.open("w")
    proc = subprocess.Popen([sys.executable, str(script), uri, "kept", "killed", str(go_file)], env=spark_env(),
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # A job that commits: its ledgers and its parent must never be reported.
        deadline = time.monotonic() + 300
        while "committed kept" not in log_path.read_text():
            assert proc.poll() is None, f"the driver ended before its first job:\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the first job never committed"
            time.sleep(0.2)
        kept = registry.manifest("kept")
        assert kept is not None and len(kept.ledgers) == 2
        assert job_ledgers(bk) == {}

        # The job to kill.
        go_file.touch()
        deadline = time.monotonic() + 300
        while True:
            registered = job_ledgers(bk)
            if registered and all(len(ledgers) == 2 for ledgers in registered.values()):
                break
            assert proc.poll() is None, f"the job ended on its own:\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the job's two ledgers were never registered"
            time.sleep(0.2)
        time.sleep(0.5)  # let the tasks write some entries
    finally:
        kill_group(proc)  # driver JVM, planner and Python workers: the whole group
        log.close()
    assert proc.returncode == -signal.SIGKILL
    # Nothing of the job survives: no JVM or Python worker could still commit or abort.
    wait_group_gone(proc.pid, "the killed job")
    (job_id, created), = registered.items()
    assert registry.manifest("killed") is None  # never committed
    # Every ledger the job created (by its tag) is one it registered: its abort can find them all.
    tagged = [(0, lid) for lid in bk.list_ledgers()
              if bk.get_ledger_metadata(lid).custom_metadata.get(TAG_JOB) == job_id.encode()]
    assert sorted(tagged) == sorted(created) and len(created) == 2

    # What the job left: its task ledgers, each naming the same parent, which does not exist.
    parents = set()
    for scope_id, lid in created:
        md = bk.get_ledger_metadata(lid, scope_id=scope_id)
        assert md.custom_metadata[TAG_JOB] == job_id.encode() and md.custom_metadata[TAG_DATASET] == b"killed"
        create = read_create_context(md.custom_metadata)
        assert create is not None and create.child_of_ledger is not None
        parents.add((create.child_of_ledger.scope_id, create.child_of_ledger.ledger_id))
    (parent_scope, parent_id), = parents
    assert not bk.store.ledger_exists(parent_id, parent_scope)

    # One audit pass: every ledger of the killed job is a BROKEN_PARENT_REF (detail: the parent), nothing else is.
    found = audit(uri, bk)
    assert found == {pair: {(OrphanReason.BROKEN_PARENT_REF, parent_id)} for pair in created}
    # The committed job's ledgers and their parent exist and are not listed.
    kept_parents = set()
    for scope_id, lid in kept.ledgers:
        create = read_create_context(bk.get_ledger_metadata(lid, scope_id=scope_id).custom_metadata)
        assert create is not None and create.child_of_ledger is not None
        kept_parents.add((create.child_of_ledger.scope_id, create.child_of_ledger.ledger_id))
    (kept_scope, kept_parent), = kept_parents
    assert bk.get_ledger_metadata(kept_parent, scope_id=kept_scope).custom_metadata[TAG_ROLE] == JOB_PARENT_ROLE
    assert not (set(kept.ledgers) | kept_parents) & set(found)
    # The shell lists the same, with the reason.
    code = cli.main(["shell", "--metadata-service-uri", uri, "listorphaned", "--printorphanreason"])
    out = capsys.readouterr().out
    assert code == 0
    assert sorted(out.splitlines()) == sorted(f"{lid} BROKEN_PARENT_REF {parent_id}" for _, lid in created)

    # The killed job's abort, when it gets to run: the writer as Spark pickled it, with the job's id and parent.
    writer = BookKeeperWriter(parse_write_options({"metadataserviceuri": uri, "dataset": "killed"}), 0, False, False,
                              parent_ledger_id=parent_id)
    writer.job_id = job_id
    try:
        writer.abort([])  # the driver died: no task's commit message reached it
    finally:
        # abort() used the connector's cached client in this process: close it while ZooKeeper is still up.
        evict_client(writer.options.metadata_service_uri, client_conf(writer.options.client_conf))
    listed = set(bk.list_ledgers())
    assert not {lid for _, lid in created} & listed and parent_id not in listed
    assert job_ledgers(bk) == {}
    assert audit(uri, bk) == {}
    assert {lid for _, lid in kept.ledgers} <= listed and kept_parent in listed
    assert len(list(bk.list_ledgers())) == 3  # the committed job's two ledgers and its parent
