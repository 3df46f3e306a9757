"""Bookie CPU per entry under bkspark's bulk appends (100 B, calls of 10,000), one Python bookie."""
import subprocess, sys, os, time, json
from bench.common import Cluster
from bench.write_cpu import cpu_seconds
N = int(os.environ.get("ENTRIES", "1000000"))
with Cluster(None, False, make_jars=False) as c:
    uri = c.new_root("python"); pb = c.python_bookies(uri, 1, "python")
    pid = pb.bookies[0].process.pid
    def load(n, warm):
        return subprocess.run([sys.executable, "-m", "bench.pyclient", "write", "--zk", uri, "--digest", "CRC32C", "--entries", str(n), "--size", "100", "--warmup", str(warm), "--bulk", "10000", "--ensemble", "1", "--write", "1", "--ack", "1"], capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "BK_GCLOG"})
    load(100000, 2000)
    before = cpu_seconds(pid)
    p = load(N, 0)
    after = cpu_seconds(pid)
    rate = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1]).get("entries_per_s") if p.stdout else None
    print(f"bookie cpu us/entry {(after - before) / N * 1e6:.2f}", p.stdout.strip()[-200:])
