"""Ad-hoc: Apache BookKeeper's Java client reads a cold striped ledger (3/2/2) with pipelined single reads
(BenchClient read --mode single), v3 and v2, from three Python bookies and from three Java bookies.

PYTHONPATH=. python $H/javastriped.py ENTRIES SIZE OUTSTANDING
"""
import sys
from bench.common import Cluster, java_bench
from bench.write_cpu import cpu_seconds as _cpu

entries, size, outstanding = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
V = "4.17.3"
with Cluster() as cluster:
    for kind in ("python", "java"):
        uri = cluster.new_root(kind)
        b = cluster.java_bookies(uri, 3, V, kind) if kind == "java" else cluster.python_bookies(uri, 3, kind)
        w = java_bench(cluster, V, uri, "write", ensemble=3, write=2, ack=2, entries=entries, size=size, outstanding=1000)
        for v2 in ("false", "true"):
            b.close() if kind == "python" else [b.stop(i) for i in range(3)]
            b.start_all()
            pids = [x.process.pid for x in b.bookies]
            before = [_cpu(p) for p in pids]
            r = java_bench(cluster, V, uri, "read", ledger=w["ledger_id"], mode="single", batch_size=100,
                           outstanding=outstanding, passes=1, warmup_passes=0, v2=v2)
            used = sum(_cpu(p) for p in pids) - sum(before)
            print(f"RESULT {kind} bookies, v2={v2}: {r['entries_per_sec']:,.0f} entries/s cold; bookies "
                  f"{used * 1e6 / entries:.2f} us/entry", flush=True)
