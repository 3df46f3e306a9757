"""``make demo``: a DataFrame of a million rows written to BookKeeper ledgers from Spark, and read back.

Starts a local ZooKeeper and three Python bookies (``bkspark.devcluster.LocalCluster``, what
``bkspark cluster start`` runs), writes the rows with ``df.write.format("bookkeeper")``, reads them back
with ``spark.read.format("bookkeeper")``, checks the row count and a checksum of the payloads, prints the
rows per second both ways and stops everything.  It does so twice: one row per entry (the default), then with
rows packed into entries of up to 16 KiB (``rowsPerEntry``, ``entryMaxBytes``; docs/connector.md, "Rows per
entry"), which is how Kafka's producer batches records.

    python examples/demo.py                      # one million rows
    BKSPARK_DEMO_ROWS=20000 python examples/demo.py
    BKSPARK_METADATA_SERVICE_URI=zk+hierarchical://127.0.0.1:2181/ledgers python examples/demo.py
                                                 # use a running cluster instead of starting one

Spark's Python workers must run this interpreter (it sets ``PYSPARK_PYTHON`` for them), and it must have
bkspark installed: ``format("bookkeeper")`` is found with no registration call.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

ROWS = int(os.environ.get("BKSPARK_DEMO_ROWS", "1000000"))
PARTITIONS = int(os.environ.get("BKSPARK_DEMO_PARTITIONS", "4"))
PAYLOAD_BYTES = 100
DATASET = "demo-events"
#: The second round's write options: as many rows as fit in entries of at most Kafka's producer batch size.
PACKED = {"rowsPerEntry": "100000", "entryMaxBytes": str(16 * 1024)}


def run(uri: str) -> int:
    """Write ``ROWS`` rows as dataset ``DATASET`` on the cluster at ``uri``, read them back and check them."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bkspark-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        # Payloads: "event-<id>" padded to PAYLOAD_BYTES bytes, as binary.
        rows = spark.range(0, ROWS, 1, PARTITIONS).select(
            F.rpad(F.format_string("event-%d ", F.col("id")), PAYLOAD_BYTES, "x").cast("binary").alias("payload")
        )
        expected = rows.agg(F.count("*").alias("n"), F.sum(F.crc32("payload")).alias("crc")).collect()[0]

        failed = 0
        for dataset, options, label in ((DATASET, {}, "one row per entry"),
                                        (f"{DATASET}-packed", PACKED, "rows packed into entries of up to 16 KiB")):
            print(f"-- {label}")
            failed += write_and_read(spark, uri, rows, expected, dataset, options)
        return 1 if failed else 0
    finally:
        spark.stop()


def write_and_read(spark, uri: str, rows, expected, dataset: str, options: dict[str, str]) -> int:  # type: ignore[no-untyped-def]
    """Write ``rows`` as ``dataset`` (with extra write ``options``), read them back and check them: 0 when equal."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    (rows.write.format("bookkeeper")
         .option("metadataServiceUri", uri)
         .option("dataset", dataset)
         .option("ensembleSize", "3").option("writeQuorumSize", "2").option("ackQuorumSize", "2")
         .options(**options)
         .mode("overwrite")
         .save())
    write_seconds = time.perf_counter() - started

    events = (spark.read.format("bookkeeper")
              .option("metadataServiceUri", uri)
              .option("dataset", dataset)
              .load())
    started = time.perf_counter()
    got = events.agg(
        F.count("*").alias("n"), F.sum(F.crc32("payload")).alias("crc"),
        F.countDistinct("ledger_id").alias("ledgers"), F.min("ledger_id").alias("first_ledger"),
    ).collect()[0]
    read_seconds = time.perf_counter() - started

    print(f"wrote {expected.n:,} rows of {PAYLOAD_BYTES} bytes in {write_seconds:.1f} s: "
          f"{expected.n / write_seconds:,.0f} rows/s into {got.ledgers} ledgers")
    print(f"read  {got.n:,} rows in {read_seconds:.1f} s: {got.n / read_seconds:,.0f} rows/s")
    # The first entries of one ledger: options choose what is read, so this reads three entries.
    (spark.read.format("bookkeeper")
         .option("metadataServiceUri", uri)
         .option("ledgers", str(got.first_ledger))
         .option("endEntry", "2")
         .load()
         .select("ledger_id", "entry_id", F.substring(F.col("payload").cast("string"), 1, 16).alias("payload"))
         .show(3))
    if (got.n, got.crc) != (expected.n, expected.crc):
        print(f"MISMATCH: read {got.n} rows (payload checksum {got.crc}), wrote {expected.n} ({expected.crc})")
        return 1
    print(f"OK: {got.n:,} rows read back, payload checksum {got.crc} matches")
    return 0


def main() -> int:
    uri = os.environ.get("BKSPARK_METADATA_SERVICE_URI")
    with contextlib.ExitStack() as stack:
        if not uri:
            from bkspark.devcluster import LocalCluster

            print("starting ZooKeeper and 3 bookies ...", flush=True)
            cluster = stack.enter_context(LocalCluster(bookies=3))
            uri = cluster.metadata_service_uri
        print(f"cluster: {uri}", flush=True)
        return run(uri)


if __name__ == "__main__":
    sys.exit(main())
