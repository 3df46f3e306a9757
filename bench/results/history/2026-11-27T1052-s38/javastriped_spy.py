"""Ad-hoc: py-spy of one of three Python bookies while Apache BookKeeper's Java client (v3) reads a cold striped
ledger (3/2/2) with pipelined single reads.  PYTHONPATH=. python $H/javastriped_spy.py ENTRIES SIZE OUTSTANDING OUT V2"""
import signal, subprocess, sys, time
from bench.common import Cluster, java_bench
from bench.write_cpu import cpu_seconds as _cpu

entries, size, outstanding, out, v2 = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
V = "4.17.3"
with Cluster() as cluster:
    uri = cluster.new_root("py")
    b = cluster.python_bookies(uri, 3, "py")
    w = java_bench(cluster, V, uri, "write", ensemble=3, write=2, ack=2, entries=entries, size=size, outstanding=1000)
    b.close(); b.start_all()
    pids = [x.process.pid for x in b.bookies]
    spy = subprocess.Popen(["/work/main/.venv/bin/py-spy", "record", "--pid", str(pids[0]), "-r", "250", "--nonblocking",
                            "--threads", "--format", "raw", "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    before = [_cpu(p) for p in pids]
    r = java_bench(cluster, V, uri, "read", ledger=w["ledger_id"], mode="single", batch_size=100,
                   outstanding=outstanding, passes=1, warmup_passes=0, v2=v2)
    used = sum(_cpu(p) for p in pids) - sum(before)
    spy.send_signal(signal.SIGINT); spy.wait()
    print(f"RESULT v2={v2}: {r['entries_per_sec']:,.0f} entries/s cold; bookies {used * 1e6 / entries:.2f} us/entry", flush=True)
