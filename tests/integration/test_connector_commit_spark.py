"""The writer's commit protocol through real Spark jobs: faults in Spark's own driver processes, SIGKILL of the
whole driver after each step, concurrent appends and overwrites.

The scenarios run in Spark drivers (each a subprocess in a session of its own, ``local[2,2]``) whose
environment names a fault plan file (``BKSPARK_WRITER_FAULTS=@file``, :mod:`bkspark.datasource.faults`): the
planner processes in which Spark runs ``commit`` and ``abort`` read it. The script prints one JSON line per job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import pytest

from bkspark import cli
from bkspark.client import BookKeeper
from bkspark.datasource.datasets import DatasetRegistry
from bkspark.datasource.faults import ENV_FAULTS
from tests.harness.process import kill_group
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZooKeeperServer
from tests.integration.test_connector_commit import ledgers_of, parents_of, two_bookies

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
ROOT = "/bk-connector-commit-spark"

# argv: uri, plan file, JSON list of jobs [{"dataset", "mode", "prefix", "rows", "plan", "concurrent"}]
DRIVER = textwrap.dedent(
    """
    import json, sys, threading
    from pyspark.sql import SparkSession, functions as F

    uri, plan_file, jobs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    spark = (SparkSession.builder.master("local[2,2]").appName("bkspark-commit-faults")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "512m").getOrCreate())

    def write(job):
        df = spark.range(0, job["rows"], 1, 2).select(
            F.concat(F.lit(job["prefix"] + "-"), F.col("id").cast("string")).alias("payload"))
        try:
            (df.write.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", job["dataset"])
               .option("ensembleSize", "2").option("writeQuorumSize", "2").option("ackQuorumSize", "2")
               .mode(job["mode"]).save())
            return "committed"
        except Exception as exc:
            print(json.dumps({"error": job["prefix"], "message": str(exc)[-2000:]}), flush=True)
            return "failed: " + type(exc).__name__

    def count(dataset):
        df = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", dataset).load()
        return sorted(r.payload.decode() for r in df.select("payload").collect())

    for job in jobs:
        with open(plan_file, "w") as f:
            f.write(job.get("plan", ""))
        if job.get("read_only"):
            outcome = "read"
        elif job.get("concurrent"):
            outcomes = [None] * job["concurrent"]
            def run(i, job=job):
                # A new Python thread runs on a JVM thread without an active session, where Spark's lookup of
                # Python data sources does not find "bookkeeper" (ClassNotFoundException: bookkeeper.DefaultSource).
                spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
                outcomes[i] = write(dict(job, prefix=f"{job['prefix']}{i}"))
            threads = [threading.Thread(target=run, args=(i,)) for i in range(job["concurrent"])]
            for t in threads: t.start()
            for t in threads: t.join()
            outcome = outcomes
        else:
            print(json.dumps({"starting": job["prefix"]}), flush=True)
            outcome = write(job)
        with open(plan_file, "w") as f:
            f.write("")
        print(json.dumps({"job": job["prefix"], "outcome": outcome, "rows": count(job["dataset"])}), flush=True)
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def py_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonBookieCluster]:
    yield from two_bookies(zookeeper, tmp_path_factory, ROOT)


@pytest.fixture(scope="module")
def bk(py_cluster: PythonBookieCluster) -> Iterator[BookKeeper]:
    with BookKeeper(py_cluster.metadata_service_uri) as client:
        yield client


def start_driver(uri: str, tmp_path: Path, jobs: list[dict]) -> subprocess.Popen[str]:
    """Start one Spark driver running the jobs, its output in files of ``tmp_path`` (several may run at once)."""
    plan = tmp_path / "faults.plan"
    plan.write_text("")
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = dict(os.environ)
    env[ENV_FAULTS] = f"@{plan}"
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with open(tmp_path / "stdout", "w") as stdout, open(tmp_path / "stderr", "w") as stderr:
        return subprocess.Popen([sys.executable, str(script), uri, str(plan), json.dumps(jobs)], env=env, cwd=REPO,
                                stdout=stdout, stderr=stderr, text=True, start_new_session=True)


def driver_output(proc: subprocess.Popen[str], tmp_path: Path, *, expect_kill: bool = False) -> list[dict]:
    """Wait for a driver of `start_driver`; its JSON lines (it must exit 0, or die by SIGKILL)."""
    try:
        returncode = proc.wait(timeout=600)
    finally:
        kill_group(proc)
    stdout, stderr = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if expect_kill:
        assert returncode == -signal.SIGKILL, (returncode, stdout, stderr[-3000:])
    else:
        assert returncode == 0, (returncode, stdout, stderr[-3000:])
    return [line for line in lines if "job" in line]


def run_driver(uri: str, tmp_path: Path, jobs: list[dict], *, expect_kill: bool = False) -> list[dict]:
    """Run the jobs in one Spark driver; their JSON lines (the driver must exit 0, or die by SIGKILL)."""
    return driver_output(start_driver(uri, tmp_path, jobs), tmp_path, expect_kill=expect_kill)


def payloads(prefix: str, n: int) -> list[str]:
    return sorted(f"{prefix}-{i}" for i in range(n))


def assert_only_committed(bk: BookKeeper, dataset: str) -> None:
    """After `bkspark shell recoverjobs`: the dataset's ledgers are its manifest's and their parents, no job left."""
    registry = DatasetRegistry(bk.store.zk, bk.store.root)
    manifest = registry.manifest(dataset)
    assert manifest is not None
    committed = {lid for _, lid in manifest.ledgers}
    # Every ledger of the dataset is committed, or the parent (commit marker) of committed ones.
    assert ledgers_of(bk, dataset) == committed | parents_of(bk, manifest.ledgers)
    assert not [j for j in registry.jobs() if (r := registry.job(j)) is not None and r.dataset == dataset]


def recover(uri: str) -> None:
    assert cli.main(["shell", "--metadata-service-uri", uri, "recoverjobs", "--stale-after", "0"]) == 0


def test_spark_jobs_with_faults_after_the_commit_point_and_concurrent_writers(
    py_cluster: PythonBookieCluster, bk: BookKeeper, tmp_path: Path
) -> None:
    """The issue's case through Spark, then concurrent appends and overwrites, in one Spark driver."""
    uri = py_cluster.metadata_service_uri
    jobs = [
        # The issue: overwrite 1,000 rows with 500, a ZooKeeper connection loss after the commit point.
        {"dataset": "ow", "mode": "overwrite", "prefix": "old", "rows": 1000},
        {"dataset": "ow", "mode": "overwrite", "prefix": "new", "rows": 500,
         "plan": "commit.published=connection-loss"},
        # Concurrent writers in one Spark application.
        {"dataset": "cap", "mode": "append", "prefix": "a", "rows": 40, "concurrent": 2},
        {"dataset": "cow", "mode": "overwrite", "prefix": "o", "rows": 40, "concurrent": 2},
    ]
    results = run_driver(uri, tmp_path, jobs)
    by_job = {r["job"]: r for r in results}
    assert by_job["new"]["outcome"] == "committed" and by_job["new"]["rows"] == payloads("new", 500)
    assert by_job["a"]["outcome"] == ["committed"] * 2
    assert by_job["a"]["rows"] == sorted(payloads("a0", 40) + payloads("a1", 40))
    assert by_job["o"]["outcome"] == ["committed"] * 2
    assert by_job["o"]["rows"] in [payloads(f"o{i}", 40) for i in range(2)]
    recover(uri)
    for dataset in ("ow", "cap", "cow"):
        assert_only_committed(bk, dataset)


#: Run by the fresh driver of `driver_lines`, for test_spark_jobs_with_faults_before_and_after_the_commit_point.
FAULT_JOBS = [
    {"dataset": "ap", "mode": "append", "prefix": "old", "rows": 100},
    # Append, a fault in the last step (forgetting the job).
    {"dataset": "ap", "mode": "append", "prefix": "new", "rows": 50,
     "plan": "commit.retired-deleted=connection-loss"},
    # Before the commit point: the job fails and the dataset keeps its rows.
    {"dataset": "ap", "mode": "overwrite", "prefix": "lost", "rows": 50,
     "plan": "commit.shards-written=connection-loss"},
    # A refused delete in the clean-up of an overwrite.
    {"dataset": "ap", "mode": "overwrite", "prefix": "over", "rows": 20, "plan": "ledger.delete=delete-refused"},
]


@pytest.mark.fault
def test_spark_jobs_with_faults_before_and_after_the_commit_point(
    py_cluster: PythonBookieCluster, bk: BookKeeper, driver_lines: dict[str, Any]
) -> None:
    """An error in Spark's commit before its commit point fails the job; after it (the last step) it does not."""
    results = driver_lines["faults"]
    assert [r["outcome"] for r in results][:2] == ["committed", "committed"]
    assert results[1]["rows"] == sorted(payloads("old", 100) + payloads("new", 50))
    assert results[2]["outcome"].startswith("failed") and results[2]["rows"] == results[1]["rows"]
    assert results[3]["outcome"] == "committed" and results[3]["rows"] == payloads("over", 20)
    recover(py_cluster.metadata_service_uri)
    assert_only_committed(bk, "ap")


#: One point before the commit point, one after, one in abort: every point is killed in test_connector_commit.py
#: (a process of its own running the real commit); here the whole Spark driver dies (one driver per point), and
#: one fresh driver, started after every kill, reads and appends to each point's dataset.
KILL_POINTS = ["commit.shards-written", "commit.published", "abort.fenced"]


def killed_dataset(point: str) -> str:
    return f"killed-{point}".replace(".", "-")


@pytest.fixture(scope="module")
def driver_lines(py_cluster: PythonBookieCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """For each kill point: the killed driver's lines and the (read, append) lines of one fresh driver, which also
    runs FAULT_JOBS first ("faults": their lines).

    Each point's driver is a JVM of its own that dies by SIGKILL at that point; the fresh driver that judges
    what they left never saw any of them (a driver per point after its kill proves nothing more, and costs a
    JVM start each)."""
    uri = py_cluster.metadata_service_uri
    # The killed drivers run at once: each has its own dataset, plan file and session (what a kill takes down).
    started: dict[str, tuple[subprocess.Popen[str], Path]] = {}
    try:
        for point in KILL_POINTS:
            plan = f"{point}=kill"
            if point.startswith("abort."):
                plan = f"commit.shards-written=connection-loss,{plan}"
            dataset = killed_dataset(point)
            tmp_path = tmp_path_factory.mktemp("killed")
            started[point] = start_driver(uri, tmp_path, [
                {"dataset": dataset, "mode": "append", "prefix": "old", "rows": 60},
                {"dataset": dataset, "mode": "overwrite", "prefix": "new", "rows": 30, "plan": plan},
            ]), tmp_path
        killed = {point: driver_output(proc, tmp_path, expect_kill=True) for point, (proc, tmp_path) in started.items()}
    finally:
        for proc, _ in started.values():
            kill_group(proc)
    after_jobs: list[dict] = []
    for point in KILL_POINTS:
        after_jobs += [
            {"dataset": killed_dataset(point), "read_only": True, "prefix": "read"},
            {"dataset": killed_dataset(point), "mode": "append", "prefix": "next", "rows": 5},
        ]
    # The same fresh driver first runs the jobs of test_spark_jobs_with_faults_before_and_after_the_commit_point
    # (one JVM start fewer; their dataset is another one).
    lines = run_driver(uri, tmp_path_factory.mktemp("after"), FAULT_JOBS + after_jobs)
    faults, after = lines[: len(FAULT_JOBS)], lines[len(FAULT_JOBS) :]
    assert len(after) == 2 * len(KILL_POINTS), lines
    by_point = {point: (killed[point], after[2 * i : 2 * i + 2]) for i, point in enumerate(KILL_POINTS)}
    return {"faults": faults, **by_point}


@pytest.mark.fault
@pytest.mark.parametrize("point", KILL_POINTS)
def test_the_spark_driver_killed_after_each_step_leaves_old_or_new_rows(
    py_cluster: PythonBookieCluster, bk: BookKeeper, driver_lines: dict[str, Any], point: str
) -> None:
    """SIGKILL of the whole Spark driver (JVM, planners, workers) after each step of an overwrite."""
    uri = py_cluster.metadata_service_uri
    dataset = killed_dataset(point)
    results, after = driver_lines[point]
    assert results[0]["outcome"] == "committed"
    committed = point.startswith("commit.") and point != "commit.shards-written"
    # What the killed driver left reads, from a fresh driver, as exactly the old or exactly the new rows; the
    # next job of the dataset commits on top.
    expected = payloads("new", 30) if committed else payloads("old", 60)
    assert after[0]["rows"] == expected
    assert after[1]["outcome"] == "committed" and after[1]["rows"] == sorted(expected + payloads("next", 5))
    recover(uri)
    assert_only_committed(bk, dataset)
