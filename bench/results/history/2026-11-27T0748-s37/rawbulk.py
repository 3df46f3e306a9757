"""Ad-hoc: bulk appends from N client processes into one bookie, no Spark."""
import subprocess, sys, time, json
from bench.common import Cluster
kind = sys.argv[1]; size = sys.argv[2]; procs = int(sys.argv[3]); bulk = sys.argv[4]; outstanding = sys.argv[5]
with Cluster(make_jars=False) as cluster:
    uri = cluster.one_bookie(kind, "4.17.3")
    for r in range(2):
        cmd = [sys.executable, "-m", "bench.pyclient", "write", "--zk", uri, "--entries", "1000000", "--size", size,
               "--outstanding", outstanding, "--warmup", "20000", "--bulk", bulk]
        ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in ps]
        print(r, outs)
