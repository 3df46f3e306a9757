"""Spark connector write jobs inside campaign schedules (docs/reliability.md, "Spark jobs in schedules").

Now and then a schedule runs one Spark write job (append to a dataset of its own) on a Spark session shared by
the whole campaign module (one JVM start per run, not per schedule), while the schedule's faults hit the
cluster. The job is left alone, or made to fail at a random step of the commit protocol (a fault point of
bkspark/datasource/faults.py, set through a plan file that Spark's planner processes and Python workers read), or
cancelled at a random moment (Spark kills its tasks and aborts the write), or has its Python workers killed -9
mid-task. Then the dataset is read back and the orphan audit runs once; the history gets the job's outcome, its
rows, what was read, the ledgers the job left and the audit's report, for the checker's Spark property.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bkspark.audit.auditor import Auditor
from bkspark.audit.records import list_orphans
from bkspark.client import BookKeeper
from bkspark.datasource.faults import ENV_FAULTS, FAULT_POINTS
from bkspark.errors import NoSuchLedgerMetadataError
from tests.campaign.history import History

__all__ = ["SparkRunner", "SPARK_FAULTS", "plan_spark_job"]

#: How a job is disturbed, and which outcome a failure of it means. ``fail``: the job cannot have committed
#: (the fault fires before the commit point); ``info``: unknown (it may have committed, as after the commit point).
SPARK_FAULTS: dict[str, tuple[str, str]] = {
    "none": ("", "info"),
    "job-begun": ("job.begun=connection-loss", "fail"),
    "task-registered-once": ("task.registered=connection-loss*1", "info"),  # a task retry: may still commit
    "before-publish": ("commit.shards-written=connection-loss", "fail"),
    "after-publish": ("commit.published=connection-loss", "info"),
    "attempts-deleted": ("commit.attempts-deleted=connection-loss", "info"),
    "forgotten": ("commit.forgotten=connection-loss", "info"),
    "abort-fenced": ("commit.shards-written=connection-loss,abort.fenced=connection-loss", "fail"),
    "abort-ledgers-deleted": ("commit.shards-written=connection-loss,abort.ledgers-deleted=connection-loss", "fail"),
    "abort-delete-refused": ("commit.shards-written=connection-loss,ledger.delete=delete-refused", "fail"),
    "cancel": ("", "info"),
    "worker-kill": ("", "info"),
}
#: Dataset names of the campaign's jobs start with this.
DATASET_PREFIX = "campaign-"


def plan_spark_job(seed: int, share: float) -> dict[str, Any] | None:
    """Whether schedule ``seed`` runs a Spark job and how it is disturbed (a generator of its own, so the rest
    of the schedule stays what the seed always drew)."""
    rng = random.Random(f"spark-{seed}")
    if rng.random() >= share:
        return None
    kind = rng.choice(sorted(SPARK_FAULTS))
    for point in SPARK_FAULTS[kind][0].replace("*1", "").split(","):
        assert not point or point.split("=")[0] in FAULT_POINTS
    return {"kind": kind, "rows": rng.randint(50, 400), "at": rng.uniform(0.0, 2.5), "partitions": rng.choice((1, 2, 3))}


class SparkRunner:
    """One local Spark session for the campaign module, started on first use; faults planned through a file."""

    def __init__(self, work_dir: Path) -> None:
        self.plan_file = work_dir / "spark-faults.plan"
        self.plan_file.write_text("")
        self._session: Any = None
        self._saved: dict[str, str | None] = {}
        #: False when the JVM was started before the fault plan was in its environment (an earlier module's
        #: session in the same process): fault points cannot be set then, only cancels and worker kills.
        self.fault_points = True

    def session(self) -> Any:
        if self._session is None:
            from pyspark.sql import SparkSession

            repo = str(Path(__file__).resolve().parents[2])
            wanted = {
                "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
                ENV_FAULTS: f"@{self.plan_file}",
                "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p),
            }
            self._saved = {k: os.environ.get(k) for k in wanted}
            os.environ.update(wanted)
            self._session = (
                SparkSession.builder.master("local[2,2]")
                .appName("bkspark-campaign")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.driver.memory", "1g")
                .config("spark.python.worker.reuse", "true")
                .config(f"spark.executorEnv.{ENV_FAULTS}", f"@{self.plan_file}")
                .getOrCreate()
            )
            self._session.sparkContext.setLogLevel("OFF")
            self.fault_points = self._session._jvm.System.getenv(ENV_FAULTS) == f"@{self.plan_file}"
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.stop()
            self._session = None
            for key, value in self._saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    # -- one job ------------------------------------------------------------------------------------------------

    def run_job(
        self, seed: int, job: dict[str, Any], uri: str, options: dict[str, Any], history: History, stats: Any
    ) -> None:
        """Run schedule ``seed``'s job (while the schedule's faults run) and log its outcome and rows."""
        spark = self.session()
        kind = job["kind"]
        plan, failure_means = SPARK_FAULTS[kind]
        if plan and not self.fault_points:
            kind, plan, failure_means = "none", "", "info"
        dataset = f"{DATASET_PREFIX}{seed}"
        name = f"spark-job-{seed}"
        rows = [f"{seed}-{i}" for i in range(job["rows"])]
        stats.spark[f"fault:{kind}"] += 1
        from pyspark.sql import functions as F

        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        sc = spark.sparkContext
        group = f"campaign-{seed}"
        sc.setJobGroup(group, f"campaign schedule {seed}", interruptOnCancel=True)
        self.plan_file.write_text(plan)
        (self.plan_file.parent / (self.plan_file.name + ".fired")).unlink(missing_ok=True)
        disturb = None
        if kind in ("cancel", "worker-kill"):
            disturb = threading.Timer(job["at"], sc.cancelJobGroup if kind == "cancel" else _kill_python_workers,
                                      args=(group,) if kind == "cancel" else ())
            disturb.daemon = True
        history.log(name, "invoke", "spark-write", None, (dataset, rows))
        df = spark.range(0, job["rows"], 1, job["partitions"]).select(
            F.concat(F.lit(f"{seed}-"), F.col("id").cast("string")).alias("payload")
        )
        writer = df.write.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", dataset)
        for key, value in options.items():
            writer = writer.option(key, str(value))
        try:
            if disturb is not None:
                disturb.start()
            writer.mode("append").save()
        except Exception:  # noqa: BLE001 - a disturbed job may fail; what it means is the fault's to say
            history.log(name, failure_means, "spark-write", None)
            stats.spark["failed" if failure_means == "fail" else "failed, outcome unknown"] += 1
            if kind in ("cancel", "worker-kill"):
                stats.spark["killed"] += 1
        else:
            history.log(name, "ok", "spark-write", None)
            stats.spark["committed"] += 1
        finally:
            if disturb is not None:
                disturb.cancel()
            self.plan_file.write_text("")
            sc.setJobGroup("campaign-idle", "", interruptOnCancel=False)

    def read_and_audit(
        self,
        seed: int,
        uri: str,
        options: dict[str, Any],
        history: History,
        bk: BookKeeper,
        watermark: int,
        stats: Any,
    ) -> None:
        """After the schedule, healed: the dataset's rows, the ledgers the job left, and one audit pass."""
        spark = self.session()
        dataset = f"{DATASET_PREFIX}{seed}"
        name = f"spark-job-{seed}"
        reader = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", dataset)
        for key, value in options.items():
            if key.startswith("bookkeeper."):  # the client's settings; the quorums are write options
                reader = reader.option(key, str(value))
        try:
            got = [bytes(r.payload).decode() for r in reader.load().select("payload").collect()]
        except Exception as exc:  # noqa: BLE001 - no dataset: no job ever committed to it
            if "BOOKKEEPER_DATASET_NOT_FOUND" not in str(exc) and "not found" not in str(exc).lower():
                raise
            got = []
        history.log(f"{name}-read", "invoke", "spark-read", None)
        history.log(f"{name}-read", "ok", "spark-read", None, {"dataset": dataset, "rows": got})
        ledgers = dataset_ledgers(bk, dataset, watermark)
        history.log(f"{name}-ledgers", "ok", "spark-ledgers", None, (name, ledgers))
        auditor = Auditor(uri, grace_period=0, parent_grace_period=0, audit_period=3600)
        try:
            auditor.audit_once()
        finally:
            auditor.stop()
        orphans = {record.ledger_id for record in list_orphans(bk.store.zk, bk.store.root)}
        history.log("audit", "ok", "orphans", None, orphans)
        stats.spark["rows read back"] += len(got)
        if not got:  # the job did not commit: what it left is the audit's to report
            stats.spark["ledgers left by jobs that did not commit"] += len(ledgers)
            stats.spark["of which reported by the audit"] += len(ledgers & orphans)


def dataset_ledgers(bk: BookKeeper, dataset: str, watermark: int) -> set[int]:
    """The ledgers above ``watermark`` tagged with ``dataset`` (the connector's ``bkspark.dataset`` tag)."""
    from bkspark.datasource.writer import TAG_DATASET

    found = set()
    for lid in bk.list_ledgers():
        if lid <= watermark:
            continue
        try:
            if bk.get_ledger_metadata(lid).custom_metadata.get(TAG_DATASET) == dataset.encode():
                found.add(lid)
        except NoSuchLedgerMetadataError:
            pass
    return found


def _kill_python_workers() -> None:
    """kill -9 every Python worker of this process's Spark (forked by PySpark's daemon): their tasks fail."""
    me = psutil.Process()
    for proc in me.children(recursive=True):
        try:
            cmd = " ".join(proc.cmdline())
            if "pyspark.daemon" in cmd or "pyspark/daemon.py" in cmd:
                for worker in proc.children():
                    worker.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    time.sleep(0)
