"""Ad-hoc: make demo's one-row write with CPU per process kind (3 Python bookies, 3/2/2, 4 partitions)."""
import sys, time
from pyspark.sql import functions as F
from bench.common import Cluster, spark_session
from bench.write_cpu import cpu_by_process, cpu_seconds_by_kind, cpu_by_thread, thread_seconds
from tests.harness.python_bookie import PythonBookieCluster

rows_n = int(sys.argv[1])
with Cluster(make_jars=False) as cluster:
    uri = cluster.new_root("demo")
    b = PythonBookieCluster(uri, cluster.base / "bookies", bookies=3, journal_sync_data=True)
    b.start_all()
    cluster.callback(b.close)
    spark = spark_session(2, "demowrite")
    rows = spark.range(0, rows_n, 1, 4).select(
        F.expr("cast(concat('event-', id, ' ', repeat('x', 80)) as binary)").alias("payload"))
    for r in range(3):
        before, tb = cpu_by_process(), cpu_by_thread()
        t0 = time.perf_counter()
        rows.write.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", f"d{r}").option(
            "ensembleSize", "3").option("writeQuorumSize", "2").option("ackQuorumSize", "2").mode("append").save()
        secs = time.perf_counter() - t0
        used, th = cpu_seconds_by_kind(before, cpu_by_process()), thread_seconds(tb, cpu_by_thread())
        print(f"round {r} write: {rows_n / secs:,.0f} rows/s")
        for k, v in sorted(used.items(), key=lambda kv: -kv[1]):
            if v > 0.02:
                print(f"   {k:30s} {v / rows_n * 1e6:5.2f} µs/row  {v / secs:4.2f} cores")
        for k, v in sorted(th.items()):
            if v > 0.02:
                print(f"   {str(k):70s} {v / rows_n * 1e6:5.2f} µs/row")
    spark.stop()
