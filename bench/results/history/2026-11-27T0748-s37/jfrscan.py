"""Ad-hoc: JFR profile of the Java bookie during a one-row Spark scan (and optionally the write)."""
import os, subprocess, sys, time
from bench.common import Cluster, spark_session, payload_frame
from bench.write_cpu import cpu_by_process

size = int(sys.argv[1]); rows = int(sys.argv[2]); what = sys.argv[3]  # "scan" or "write"
with Cluster(make_jars=False) as cluster:
    uri = cluster.one_bookie("java", "4.17.3")
    spark = spark_session(2, "jfr")
    def write(n, ds):
        payload_frame(spark, n, size, 2).write.format("bookkeeper").options(
            metadataServiceUri=uri, ensembleSize="1", writeQuorumSize="1", ackQuorumSize="1", digestType="CRC32C",
            rowsPerEntry="1").option("dataset", ds).mode("append").save()
    def scan(ds):
        spark.read.format("bookkeeper").options(metadataServiceUri=uri, dataset=ds, digestType="CRC32C",
            maxEntriesPerPartition=str(rows)).load().write.format("noop").mode("overwrite").save()
    write(20000, "warm"); scan("warm"); write(rows, "d1"); scan("d1")
    pid = next(p for p, (_t, cmd) in cpu_by_process().items() if "java" in cmd and "bookkeeper" in cmd.lower() and "zookeeper.server" not in cmd)
    out = f"/tmp/s37/{what}-{size}.jfr"
    subprocess.run(["jcmd", str(pid), "JFR.start", "name=s", "settings=profile", f"filename={out}"], check=True, capture_output=True)
    t0 = time.perf_counter()
    if what == "scan":
        scan("d1"); scan("d1")
    else:
        write(rows, "d2"); write(rows, "d3")
    t1 = time.perf_counter()
    subprocess.run(["jcmd", str(pid), "JFR.stop", "name=s"], check=True, capture_output=True)
    print(f"{2 * rows / (t1 - t0):,.0f} rows/s")
    spark.stop()
