"""A Spark driver for the namespace test bed: ``ip netns exec <client host> python -m tests.harness.netns_spark_job``.

Spark's JVM, its Python workers and the driver all run on the client host (a network namespace has its own
loopback, so py4j's driver and JVM must share it). The program writes ``--rows`` rows to ``--dataset`` with
``df.write.format("bookkeeper")`` (a slow source: each row waits ``--row-ms``, so that a test can fault the
network mid-write), prints one JSON line with the outcome, waits for ``--go-on`` to exist (the test heals the
network meanwhile), reads the dataset back and prints the rows it read. Used by
tests/integration/test_netns_spark_rack_loss.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _emit(**event: object) -> None:
    print(json.dumps(event), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--row-ms", type=float, default=2.0)
    parser.add_argument("--options", default="{}", help="JSON: connector options (client settings as bookkeeper.*)")
    parser.add_argument("--go-on", required=True, help="a file whose existence lets the read-back begin")
    args = parser.parse_args(argv)
    options = json.loads(args.options)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    spark = (
        SparkSession.builder.master(f"local[{args.partitions}]")
        .appName("bkspark-netns")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")  # rows reach the writer as they come
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pause = args.row_ms / 1000.0

    def slow_row(i: int) -> str:
        time.sleep(pause)
        return f"row-{i}"

    df = spark.range(0, args.rows, 1, args.partitions).select(F.udf(slow_row, StringType())("id").alias("payload"))
    writer = df.write.format("bookkeeper").option("metadataServiceUri", args.uri).option("dataset", args.dataset)
    for key, value in options.items():
        writer = writer.option(key, str(value))
    _emit(event="writing")
    try:
        writer.mode("append").save()
    except Exception as exc:  # noqa: BLE001 - the outcome is what the test judges
        _emit(event="written", outcome="failed", error=f"{type(exc).__name__}: {exc}"[:4000])
    else:
        _emit(event="written", outcome="committed")
    go_on = Path(args.go_on)
    while not go_on.exists():
        time.sleep(0.1)
    reader = spark.read.format("bookkeeper").option("metadataServiceUri", args.uri).option("dataset", args.dataset)
    for key, value in options.items():
        if key.startswith("bookkeeper."):
            reader = reader.option(key, str(value))
    try:
        rows = [bytes(r.payload).decode() for r in reader.load().select("payload").collect()]
    except Exception as exc:  # noqa: BLE001 - no dataset: the job never committed
        _emit(event="read", rows=None, error=f"{type(exc).__name__}: {exc}"[:2000])
    else:
        _emit(event="read", rows=rows)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
