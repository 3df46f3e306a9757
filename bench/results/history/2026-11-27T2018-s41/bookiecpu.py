"""Ad-hoc: the Java (or Python) bookie's CPU per add under Apache BookKeeper's Java client and under bkspark's
client (bulk appends), same bookie, same entries, taking turns."""
import sys, time
from bench.common import Cluster, java_bench, py_bench
from bench.write_cpu import cpu_by_process, kind_of

kind = sys.argv[1]; size = int(sys.argv[2]); n = int(sys.argv[3]); rounds = int(sys.argv[4])
extra = sys.argv[5:]
TICK = 100.0
with Cluster(make_jars=False) as cluster:
    uri = cluster.one_bookie(kind, "4.17.3")
    def bookie_ticks():
        tot = 0
        for pid, (t, cmd) in cpu_by_process().items():
            k = kind_of(cmd)
            if k in ("bookie JVM", "Python bookie"):
                tot += t
        return tot
    def measure(label, fn):
        b0 = bookie_ticks(); t0 = time.perf_counter()
        r = fn()
        t1 = time.perf_counter(); b1 = bookie_ticks()
        eps = r.get("entries_per_sec")
        print(f"{label:40s} {eps:>12,.0f} entries/s  bookie {1e6*(b1-b0)/TICK/n:.2f} us/add (wall {t1-t0:.1f}s incl start)", flush=True)
    for r in range(rounds):
        measure(f"round {r} java client", lambda: java_bench(cluster, "4.17.3", uri, "write", entries=n, size=size, outstanding=1000, warmup=5000, digest="CRC32C"))
        for bulk in (0, 500):
            measure(f"round {r} bkspark bulk {bulk}", lambda: py_bench(uri, "write", entries=n, size=size, outstanding=2000 if bulk > 1 else 1000, warmup=5000, bulk=bulk, digest="CRC32C"))
