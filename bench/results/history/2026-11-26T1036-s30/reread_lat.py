"""Bookie-side batch-read latency (its own metrics) of the Java client's first and second pass over a 40,000-entry
ledger on disk, this tree's bookie vs another's, alternating."""
import re, sys, urllib.request
from pathlib import Path
from bench.common import DEFAULT_BK_VERSION, Cluster, java_bench
from tests.harness.python_bookie import PythonBookieCluster

def metric_sum(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    m = re.search(r'^bookkeeper_server_BATCH_READ_ENTRY_REQUEST_sum\{success="true"\} (\S+)', text, re.M)
    return float(m.group(1))

def one(tree):
    with Cluster(make_jars=False) as cluster:
        uri = cluster.new_root("reread")
        bookies = PythonBookieCluster(uri, cluster.base / "bookies", bookies=1, journal_sync_data=True, tree=tree)
        bookies.start_all()
        cluster.callback(bookies.close)
        w = java_bench(cluster, DEFAULT_BK_VERSION, uri, "write", ensemble=1, entries=int(__import__("os").environ.get("N", "40000")), size=1024, outstanding=1000, warmup=0, digest="CRC32C")
        bookies.close(); bookies.start_all()
        port = bookies.bookies[0].http_port
        pid = bookies.bookies[0].process.pid
        def faults():
            f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            return int(f[7]), int(f[11]) + int(f[12])  # minflt, utime+stime ticks
        out = []
        for label in ("first", "again", "again"):
            before, f0 = metric_sum(port), faults()
            r = java_bench(cluster, DEFAULT_BK_VERSION, uri, "read", ledger=w["ledger_id"], mode="batch", passes=1, warmup_passes=0, digest="CRC32C")
            out.append((label, round(r["entries_per_sec"]), round(metric_sum(port) - before, 1), faults()[0] - f0[0], faults()[1] - f0[1]))
        return out

trees = [Path(t) for t in sys.argv[1:3]]
for rnd in range(int(sys.argv[3]) if len(sys.argv) > 3 else 3):
    for t in (trees if rnd % 2 == 0 else trees[::-1]):
        print(rnd, t, one(t), flush=True)
