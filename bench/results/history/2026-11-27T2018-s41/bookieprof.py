"""Ad-hoc: py-spy of the Python bookie under bkspark's bulk appends (two client processes, as a Spark write's two
tasks), 100 B entries."""
import signal, subprocess, sys, time
from bench.common import Cluster, py_bench
from bench.write_cpu import cpu_by_process, kind_of

size = int(sys.argv[1]); n = int(sys.argv[2]); out = sys.argv[3]; procs = int(sys.argv[4]) if len(sys.argv) > 4 else 2
with Cluster(make_jars=False) as cluster:
    uri = cluster.one_bookie("python", "4.17.3")
    py_bench(uri, "write", entries=200000, size=size, outstanding=5000, warmup=0, bulk=500, digest="CRC32C")
    pid = next(p for p, (_t, cmd) in cpu_by_process().items() if kind_of(cmd) == "Python bookie")
    spy = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "-r", "250", "--format", "raw", "--threads", "-o", out],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    cmd = [sys.executable, "-m", "bench.pyclient", "write", "--zk", uri, "--entries", str(n), "--size", str(size),
           "--outstanding", "5000", "--warmup", "0", "--bulk", "500", "--digest", "CRC32C"]
    t0 = time.perf_counter()
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    outs = [p.communicate()[0].strip().splitlines()[-1] for p in ps]
    t1 = time.perf_counter()
    spy.send_signal(signal.SIGINT); spy.wait()
    print(f"{procs * n / (t1 - t0):,.0f} entries/s together", outs)
