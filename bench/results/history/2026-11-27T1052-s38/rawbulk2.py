"""Ad-hoc: bulk appends (no Spark), 1,000,000 x SIZE B per client process, into one Python bookie per process
(N bookies, N processes, E/W/A 1/1/1, each client's ledger on its own bookie) or N processes into one bookie.
PYTHONPATH=. python $H/rawbulk2.py SIZE N separate|shared"""
import json, subprocess, sys, time
from bench.common import Cluster
from bench.write_cpu import cpu_seconds as _cpu
size, n, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with Cluster(make_jars=False) as cluster:
    uris = []
    for i in range(n if how == "separate" else 1):
        uris.append(cluster.new_root(f"py{i}"))
        cluster.python_bookies(uris[-1], 1, f"py{i}")
    for r in range(2):
        cmds = [[sys.executable, "-m", "bench.pyclient", "write", "--zk", uris[i % len(uris)], "--entries", "1000000",
                 "--size", size, "--outstanding", "2000", "--warmup", "20000", "--bulk", "500"] for i in range(n)]
        t0 = time.perf_counter()
        ps = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in cmds]
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in ps]
        rates = [round(o["entries_per_sec"]) for o in outs]
        print(f"round {r}: {how} x{n}: per process {rates}, sum {sum(rates):,}", flush=True)
