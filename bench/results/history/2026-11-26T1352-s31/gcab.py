"""bench.pyclient bulk write (100 B, append_many of 10000) on one bookie: default collector vs variants; client CPU per entry."""
import os, subprocess, sys, json, resource, statistics
from bench.common import Cluster
KIND = sys.argv[1] if len(sys.argv) > 1 else "python"
VARIANTS = (sys.argv[2] if len(sys.argv) > 2 else "default,nogc").split(",")
N = int(os.environ.get("N", "500000")); ROUNDS = int(os.environ.get("ROUNDS", "3")); BULK = os.environ.get("BULK", "10000")
PRE = {"default": "", "nogc": "import gc; gc.disable(); ", "thresh": "import gc; gc.set_threshold(10000, 10, 10); "}
with Cluster(None, False, make_jars=False) as c:
    uri = c.one_bookie(KIND, "4.17.3")
    res = {v: [] for v in VARIANTS}
    for r in range(ROUNDS):
        for v in VARIANTS:
            code = PRE.get(v, "") + "import sys; from bench.pyclient import main; sys.exit(main(sys.argv[1:]))"
            tree = os.environ.get("TREE_" + v, ".")
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            p = subprocess.run([sys.executable, "-c", code, "write", "--zk", uri, "--digest", "CRC32C", "--entries", str(N), "--size", "100", "--warmup", "2000", "--bulk", BULK, "--ensemble", "1", "--write", "1", "--ack", "1"], capture_output=True, text=True, cwd=tree, env=dict(os.environ, PYTHONPATH=os.path.abspath(tree)))
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e6 / N
            line = [l for l in p.stdout.splitlines() if l.startswith("{")]
            d = json.loads(line[-1]) if line else {"entries_per_sec": 0, "error": p.stderr[-500:]}
            res[v].append((d.get("entries_per_sec", 0), cpu))
            print(f"round {r} {v}: {d.get('entries_per_sec', 0):,.0f} entries/s, client cpu {cpu:.2f} us/entry {d.get('error','')}", flush=True)
    for v in VARIANTS:
        print(f"MEDIAN {v}: {statistics.median(x[0] for x in res[v]):,.0f} entries/s, {statistics.median(x[1] for x in res[v]):.2f} us/entry")
