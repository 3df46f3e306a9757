"""The ``bookkeeper`` data source on a Spark standalone cluster, not only ``local[*]``.

A master and a worker are started from PySpark's own ``bin/spark-class`` (the classes ``sbin/start-master.sh``
runs), the worker launches two executors, each in a JVM of its own with its own Python workers, and the
driver (this process) only plans and commits: every entry is written and read on the executors.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bkspark.client import BookKeeper
from bkspark.datasource.datasets import DatasetRegistry
from bkspark.datasource.clients import client_root, client_zk
from tests.harness.ports import free_port
from tests.harness.process import ManagedProcess
from tests.harness.python_bookie import PythonBookieCluster

pytestmark = [pytest.mark.integration]

def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _master_state(ui_port: int) -> dict[str, Any]:
    """The master's own view (its web UI's JSON): workers, applications, cores."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=30) as resp:
        return json.loads(resp.read().decode())


def _alive_workers(ui_port: int) -> int:
    try:
        return int(_master_state(ui_port).get("aliveworkers", 0))
    except (OSError, ValueError):  # the UI is slow, or not serving JSON yet, on a loaded machine: ask again
        return 0


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A Spark master and one worker (2 cores), both from PySpark's spark-class; stopped at the end."""
    base = tmp_path_factory.mktemp("spark-standalone")
    home = _spark_home()
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m",
               SPARK_LOG_DIR=str(base / "logs"), SPARK_WORKER_DIR=str(base / "work"))
    port, ui_port, worker_ui = free_port(), free_port(), free_port()
    spark_class = str(home / "bin" / "spark-class")
    master = ManagedProcess(
        "spark-master",
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(ui_port)],
        env=env, cwd=base, log_dir=base / "master",
    ).start()
    worker = None
    try:
        master.wait_for_port(port, timeout=120)
        master.wait_for_port(ui_port, timeout=60)
        worker = ManagedProcess(
            "spark-worker",
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
             "--memory", "2g", "--webui-port", str(worker_ui), "--work-dir", str(base / "work"),
             f"spark://127.0.0.1:{port}"],
            env=env, cwd=base, log_dir=base / "worker",
        ).start()
        deadline = time.monotonic() + 180
        while True:
            if _alive_workers(ui_port) >= 1:
                break
            if time.monotonic() > deadline or not worker.is_alive:
                raise worker.failure("the Spark worker did not register with the master")
            time.sleep(0.5)
        yield {"url": f"spark://127.0.0.1:{port}", "ui_port": ui_port, "base": base}
    finally:
        if worker is not None:
            worker.terminate()
        master.terminate()


@pytest.fixture(scope="module")
def py_cluster(module_zk_root, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonBookieCluster]:
    """Three Python bookies on this module's own ledgers root."""
    with PythonBookieCluster(module_zk_root.metadata_service_uri, tmp_path_factory.mktemp("standalone-bookies"), bookies=3) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark(standalone: dict[str, Any]) -> Iterator[Any]:
    """A session on the standalone master: two executors of one core each, Python workers on this venv.

    The executors inherit the worker's environment (this process's, PYTHONPATH included), so their Python
    workers import the same bkspark as the driver."""
    from pyspark.sql import SparkSession

    # PySpark names the Python of every Python function (a data source's too) from PYSPARK_PYTHON when the
    # SparkContext starts (spark.pyspark.python alone leaves it at "python3", outside this venv).
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(standalone["url"])
        .appName("bkspark-standalone-test")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.executor.memory", "512m")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.task.maxFailures", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        deadline = time.monotonic() + 120  # executors register a little after the application
        while session.sparkContext._jsc.sc().getExecutorIds().size() < 2:
            assert time.monotonic() < deadline, "the standalone worker started no executors"
            time.sleep(0.5)
        yield session
    finally:
        session.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_writes_and_reads_a_dataset_on_executors_of_their_own(spark, standalone, py_cluster) -> None:
    from pyspark.sql import functions as F

    uri = py_cluster.metadata_service_uri
    rows = 3000
    df = spark.range(0, rows, 1, 4).select(
        F.col("id"), F.expr("cast(concat('row-', cast(id as string), '-', repeat('z', cast(id % 50 as int))) as binary)")
        .alias("payload"),
    )
    df.select("payload").write.format("bookkeeper").option("metadataServiceUri", uri).option(
        "dataset", "standalone").mode("append").save()

    with BookKeeper(uri) as bk:
        manifest = DatasetRegistry(client_zk(bk), client_root(bk)).manifest("standalone")
        assert manifest is not None and len(manifest.ledgers) == 4  # one ledger per write task

    back = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", "standalone").option(
        "maxEntriesPerPartition", "400").load()
    assert back.rdd.getNumPartitions() >= 8
    got = sorted(bytes(r.payload) for r in back.select("payload").collect())
    want = sorted(f"row-{i}-{'z' * (i % 50)}".encode() for i in range(rows))
    assert got == want
    # The tasks ran in the two executor JVMs the worker started (each logs its tasks in its own work dir).
    assert spark.sparkContext._jsc.sc().getExecutorIds().size() == 2
    apps = _master_state(standalone["ui_port"])["activeapps"]
    assert [a["name"] for a in apps] == ["bkspark-standalone-test"]
    executor_logs = sorted((standalone["base"] / "work").glob("app-*/*/stderr"))
    assert len(executor_logs) == 2, executor_logs
    for log in executor_logs:
        assert "Running task" in log.read_text(errors="replace"), f"{log} shows no task"
