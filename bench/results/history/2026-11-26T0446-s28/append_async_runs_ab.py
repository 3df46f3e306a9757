import json, os, subprocess, sys
sys.path.insert(0, os.getcwd())
from bench.common import Cluster
kind = sys.argv[1] if len(sys.argv) > 1 else "python"
with Cluster(None, False, make_jars=False) as cluster:
    uri = cluster.new_root(kind)
    cluster.python_bookies(uri, 1, "p") if kind == "python" else cluster.java_bookies(uri, 1, "4.17.3", "j")
    for rnd in range(3):
        for label, cmd in (("runs", ["-m", "bench.pyclient"]), ("one by one", ["bench/results/history/2026-11-26T0446-s28/pyclient_one_by_one.py"])):
            out = subprocess.run([sys.executable, *cmd, "write", "--zk", uri, "--entries", "200000", "--size", "100",
                                  "--outstanding", "1000", "--warmup", "5000", "--ensemble", "1", "--write", "1", "--ack", "1"],
                                 capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.getcwd()))
            try:
                d = json.loads(out.stdout.strip().splitlines()[-1])
                print(kind, "bookie, round", rnd, label, d["entries_per_sec"], flush=True)
            except Exception:
                print(out.stdout[-500:], out.stderr[-2000:])
