"""The Spark writer's shape without Spark: bulk appends of PackedPayloads (500 entries each, at most 2,000 in flight),
E/W/A 1/1/1 on one Python bookie; prints the client process's CPU per entry (user, system; the load only, start-up
excluded) and entries/s.  Run as a child (`load URI N SIZE`) by its own main, which starts the cluster and takes
turns between this tree and TREE (PYTHONPATH)."""
import json, os, subprocess, sys, time
from collections import deque

def load(uri, n, size):
    import numpy as np
    from bkspark.client import BookKeeper, PackedPayloads
    rows = 10000
    data = os.urandom(size * rows)
    bounds = np.arange(0, size * rows + 1, size, dtype=np.int64)
    with BookKeeper(uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=b"pw")
        t0, c0 = time.perf_counter(), os.times()
        pending, in_flight = deque(), 0
        for b in range(n // rows):
            run = PackedPayloads(data, bounds)
            for lo in range(0, rows, 500):
                pending.append(lh.append_many(run[lo:lo + 500])); in_flight += 500
                while in_flight > 2000:
                    pending.popleft().result(); in_flight -= 500
        for f in pending: f.result()
        t1, c1 = time.perf_counter(), os.times()
        lh.close()
    print(json.dumps({"entries_per_s": round(n / (t1 - t0)), "user_us": round((c1.user - c0.user) / n * 1e6, 3),
                      "sys_us": round((c1.system - c0.system) / n * 1e6, 3)}))

if __name__ == "__main__" and sys.argv[1:2] == ["load"]:
    load(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])); sys.exit()

from bench.common import Cluster
from bench.write_cpu import cpu_seconds
N, SIZE, ROUNDS = int(os.environ.get("ENTRIES", "400000")), int(os.environ.get("SIZE", "100")), int(os.environ.get("ROUNDS", "3"))
trees = [("this", os.getcwd())] + ([("other", os.environ["TREE"])] if os.environ.get("TREE") else [])
with Cluster(None, False, make_jars=False) as c:
    uri = c.new_root("python")
    pb = c.python_bookies(uri, 1, "python")
    pid = pb.bookies[0].process.pid
    for r in range(ROUNDS):
        for name, tree in (trees if r % 2 == 0 else trees[::-1]):
            b0 = cpu_seconds(pid)
            out = subprocess.run([sys.executable, __file__, "load", uri, str(N), str(SIZE)], capture_output=True, text=True,
                                 env=dict(os.environ, PYTHONPATH=tree), cwd=tree)
            if out.returncode: raise SystemExit(out.stderr)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            got.update(round=r, tree=name, bookie_us=round((cpu_seconds(pid) - b0) / N * 1e6, 3))
            print(json.dumps(got), flush=True)
