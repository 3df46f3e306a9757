# Ad-hoc (2026-11-26): per-process CPU per row of make demo's read check (count, CRC32 sum, distinct ledgers) against the same scan into noop; 3 Python bookies, 3/2/2, one row per entry. Run from the repository root with the venv.
import os, sys, time
sys.path.insert(0, "/work/main")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from bench.write_cpu import cpu_by_process, cpu_seconds_by_kind, cpu_by_thread, thread_seconds
from bkspark.devcluster import LocalCluster
ROWS = int(os.environ.get("ROWS", "400000"))
with LocalCluster(bookies=3) as cluster:
    uri = cluster.metadata_service_uri
    from pyspark.sql import SparkSession, functions as F
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    rows = spark.range(0, ROWS, 1, 4).select(F.rpad(F.format_string("event-%d ", F.col("id")), 100, "x").cast("binary").alias("payload"))
    rows.write.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", "d").option("ensembleSize", "3").option("writeQuorumSize", "2").option("ackQuorumSize", "2").mode("overwrite").save()
    for label in ("demo agg", "noop"):
        ev = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", "d").load()
        b, bt = cpu_by_process(), cpu_by_thread()
        t = time.perf_counter()
        if label == "noop":
            ev.write.format("noop").mode("overwrite").save()
        else:
            ev.agg(F.count("*"), F.sum(F.crc32("payload")), F.countDistinct("ledger_id"), F.min("ledger_id")).collect()
        secs = time.perf_counter() - t
        a, at = cpu_by_process(), cpu_by_thread()
        print(f"{label}: {ROWS/secs:,.0f} rows/s")
        for k, v in sorted(cpu_seconds_by_kind(b, a).items(), key=lambda kv: -kv[1]):
            print(f"   {k:30} {v*1e6/ROWS:6.2f} us/row")
        for k, v in sorted(thread_seconds(bt, at).items(), key=lambda kv: -kv[1]):
            print(f"      {' / '.join(k):60} {v*1e6/ROWS:6.2f} us/row")
    spark.stop()
