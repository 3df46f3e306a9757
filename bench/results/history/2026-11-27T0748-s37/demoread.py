"""Ad-hoc: make demo's one-row read with CPU per process kind (3 Python bookies, 3/2/2, 4 partitions)."""
import os, sys, time
from pyspark.sql import functions as F
from bench.common import Cluster, spark_session
from bench.write_cpu import cpu_by_process, cpu_seconds_by_kind, cpu_by_thread, thread_seconds
from tests.harness.python_bookie import PythonBookieCluster
rows_n = int(sys.argv[1]); check = sys.argv[2] == "check"
with Cluster(make_jars=False) as cluster:
    uri = cluster.new_root("demo")
    b = PythonBookieCluster(uri, cluster.base / "bookies", bookies=3, journal_sync_data=True)
    b.start_all(); cluster.callback(b.close)
    spark = spark_session(2, "demoread")
    rows = spark.range(0, rows_n, 1, 4).select(F.expr("cast(concat('event-', id, ' ', repeat('x', 80)) as binary)").alias("payload"))
    rows.write.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", "d").option("ensembleSize", "3").option("writeQuorumSize", "2").option("ackQuorumSize", "2").mode("append").save()
    for r in range(3):
        ev = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", "d").load()
        spy = None
        if r == int(os.environ.get("SPYROUND", "2")) and os.environ.get("SPY"):
            import subprocess
            pid = next(p for p, (_t, cmd) in cpu_by_process().items() if "bookie_server" in cmd and "bookie1" in cmd and "py-spy" not in cmd)
            spy = subprocess.Popen(["/work/main/.venv/bin/py-spy", "record", "--pid", str(pid), "-r", "300", "--nonblocking",
                                    "--threads", "--format", "raw", "-o", os.environ["SPY"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        before = cpu_by_process(); tb = cpu_by_thread()
        t0 = time.perf_counter()
        if check:
            got = ev.agg(F.count("*").alias("n"), F.sum(F.crc32("payload")).alias("crc"), F.countDistinct("ledger_id")).collect()[0]
        else:
            ev.write.format("noop").mode("overwrite").save()
        secs = time.perf_counter() - t0
        if spy is not None:
            import signal; spy.send_signal(signal.SIGINT); spy.wait()
        used = cpu_seconds_by_kind(before, cpu_by_process()); th = thread_seconds(tb, cpu_by_thread())
        print(f"round {r} {'check' if check else 'noop'}: {rows_n / secs:,.0f} rows/s")
        for k, v in sorted(used.items(), key=lambda kv: -kv[1]):
            if v > 0.02: print(f"   {k:30s} {v / rows_n * 1e6:5.2f} µs/row  {v / secs:4.2f} cores")
        for k, v in sorted(th.items()):
            if v > 0.02: print(f"   {str(k):70s} {v / rows_n * 1e6:5.2f} µs/row")
    spark.stop()
