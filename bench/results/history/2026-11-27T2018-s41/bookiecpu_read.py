"""Ad-hoc: the Java (or Python) bookie's CPU per entry read, under Apache BookKeeper's Java client's batched reads
and under bkspark's batched and Arrow reads, same ledger, taking turns."""
import sys, time
from bench.common import Cluster, java_bench, py_bench
from bench.write_cpu import cpu_by_process, kind_of

kind = sys.argv[1]; size = int(sys.argv[2]); n = int(sys.argv[3]); rounds = int(sys.argv[4])
TICK = 100.0
with Cluster(make_jars=False) as cluster:
    uri = cluster.one_bookie(kind, "4.17.3")
    def bookie_ticks():
        return sum(t for pid, (t, cmd) in cpu_by_process().items() if kind_of(cmd) in ("bookie JVM", "Python bookie"))
    w = py_bench(uri, "write", entries=n, size=size, outstanding=2000, warmup=0, bulk=500, digest="CRC32C")
    led = int(w["ledger_id"])
    time.sleep(3)
    def measure(label, fn, passes):
        b0 = bookie_ticks()
        r = fn()
        b1 = bookie_ticks()
        print(f"{label:40s} {r.get('entries_per_sec'):>12,.0f} entries/s  bookie {1e6*(b1-b0)/TICK/(n*passes):.2f} us/entry", flush=True)
    for r in range(rounds):
        measure(f"round {r} java client batch", lambda: java_bench(cluster, "4.17.3", uri, "read", ledger=led, mode="batch", batch_size=1000, max_size=4194304, passes=2, warmup_passes=0, digest="CRC32C"), 2)
        measure(f"round {r} bkspark batch", lambda: py_bench(uri, "read", ledger=led, mode="batch", batch_size=1000, max_size=4194304, passes=2, warmup_passes=0, digest="CRC32C"), 2)
        measure(f"round {r} bkspark arrow", lambda: py_bench(uri, "read", ledger=led, mode="arrow", batch_size=1000, max_size=4194304, passes=2, warmup_passes=0, digest="CRC32C"), 2)
