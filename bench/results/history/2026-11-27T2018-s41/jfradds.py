"""Ad-hoc: JFR profile of the Java bookie under bkspark's bulk appends (one process, 100 B, 1,000,000 entries)."""
import subprocess, sys, time
from bench.common import Cluster, py_bench
from bench.write_cpu import cpu_by_process, kind_of

size = int(sys.argv[1]); n = int(sys.argv[2]); out = sys.argv[3]
with Cluster(make_jars=False) as cluster:
    uri = cluster.one_bookie("java", "4.17.3")
    py_bench(uri, "write", entries=200000, size=size, outstanding=2000, warmup=0, bulk=500, digest="CRC32C")
    pid = next(p for p, (_t, cmd) in cpu_by_process().items() if kind_of(cmd) == "bookie JVM")
    subprocess.run(["jcmd", str(pid), "JFR.start", "name=s", "settings=profile", f"filename={out}"], check=True, capture_output=True)
    r = py_bench(uri, "write", entries=n, size=size, outstanding=2000, warmup=0, bulk=500, digest="CRC32C")
    subprocess.run(["jcmd", str(pid), "JFR.stop", "name=s"], check=True, capture_output=True)
    print(r["entries_per_sec"], "entries/s")
