"""Ad-hoc: how much of the wall time the Python bookie's GIL is held under two clients' bulk appends of 100 B
(py-spy --gil samples ÷ rate × seconds), and the bookie's CPU per add."""
import signal, subprocess, sys, time, os
from bench.common import Cluster, py_bench
from bench.write_cpu import cpu_by_process, kind_of, stat_ticks

size = int(sys.argv[1]); n = int(sys.argv[2]); out = sys.argv[3]; procs = int(sys.argv[4]) if len(sys.argv) > 4 else 2
rate = 200
with Cluster(make_jars=False) as cluster:
    uri = cluster.one_bookie("python", "4.17.3")
    py_bench(uri, "write", entries=200000, size=size, outstanding=5000, warmup=0, bulk=500, digest="CRC32C")
    pid = next(p for p, (_t, cmd) in cpu_by_process().items() if kind_of(cmd) == "Python bookie")
    for mode in ("gil", "all"):
        args = ["py-spy", "record", "--pid", str(pid), "-r", str(rate), "--format", "raw", "--nonblocking", "-o", f"{out}-{mode}.txt"]
        args += ["--gil"] if mode == "gil" else ["--threads"]
        spy = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        cmd = [sys.executable, "-m", "bench.pyclient", "write", "--zk", uri, "--entries", str(n), "--size", str(size),
               "--outstanding", "5000", "--warmup", "0", "--bulk", "500", "--digest", "CRC32C"]
        u0 = sum(stat_ticks(pid))
        t0 = time.perf_counter()
        ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
        outs = [p.communicate()[0].strip().splitlines()[-1] for p in ps]
        t1 = time.perf_counter()
        u1 = sum(stat_ticks(pid))
        time.sleep(0.2)
        spy.send_signal(signal.SIGINT); spy.wait()
        samples = 0
        with open(f"{out}-{mode}.txt") as f:
            for line in f:
                samples += int(line.rsplit(" ", 1)[1])
        secs = t1 - t0
        cpu = (u1 - u0) / os.sysconf("SC_CLK_TCK")
        print(f"{mode}: {procs * n / secs:,.0f} entries/s, {secs:.2f} s, bookie cpu {cpu:.2f} s = {cpu/secs:.2f} cores, "
              f"{cpu / (procs*n) * 1e6:.2f} us/add; samples {samples} (~{samples / rate / (secs + 1.7):.2f} of wall incl. 1.7 s idle)", flush=True)
