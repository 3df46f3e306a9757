"""Client CPU per entry for bulk appends (Spark writer shape: bulk 500, 2,000 in flight, E/W/A 1/1/1, one Python bookie),
by payload size; PERF=1 runs perf record on the client of the last size."""
import json, os, resource, subprocess, sys
from bench.common import Cluster
from bench.write_cpu import cpu_seconds

N = int(os.environ.get("ENTRIES", "300000"))
SIZES = [int(s) for s in os.environ.get("SIZES", "100,1024").split(",")]
ROUNDS = int(os.environ.get("ROUNDS", "2"))
PERF = os.environ.get("PERF", "")
TREE = os.environ.get("TREE", "")

def cmd(uri, n, size, warm):
    return [sys.executable, "-m", "bench.pyclient", "write", "--zk", uri, "--digest", "CRC32C", "--entries", str(n),
            "--size", str(size), "--warmup", str(warm), "--bulk", "500", "--outstanding", "2000",
            "--ensemble", "1", "--write", "1", "--ack", "1"]

def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime, ru.ru_stime

with Cluster(None, False, make_jars=False) as c:
    uri = c.new_root("python")
    pb = c.python_bookies(uri, 1, "python")
    pid = pb.bookies[0].process.pid
    env = dict(os.environ, PYTHONPATH=TREE) if TREE else None
    subprocess.run(cmd(uri, 50000, 100, 2000), check=True, capture_output=True, env=env)
    for r in range(ROUNDS):
        for size in SIZES:
            before, (u0, s0) = cpu_seconds(pid), children_cpu()
            bperf = None
            if PERF == "bookie" and r == ROUNDS - 1:
                bperf = subprocess.Popen(["perf", "record", "-g", "-o", f"/tmp/s35/bperf-{size}.data", "-p", str(pid)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            pre = ["perf", "record", "-g", "-o", f"/tmp/s35/perf-{size}.data", "--"] if PERF == "client" and r == ROUNDS - 1 else []
            p = subprocess.run(pre + cmd(uri, N, size, 0), capture_output=True, text=True, env=env)
            if bperf is not None:
                import signal, time as _t
                bperf.send_signal(signal.SIGINT); bperf.wait()
            if p.returncode:
                raise SystemExit(p.stderr)
            after, (u1, s1) = cpu_seconds(pid), children_cpu()
            line = [l for l in p.stdout.splitlines() if l.startswith("{")][-1]
            print(json.dumps({"round": r, "size": size, "bookie_us": round((after - before) / N * 1e6, 3),
                              "client_user_us": round((u1 - u0) / N * 1e6, 3), "client_sys_us": round((s1 - s0) / N * 1e6, 3),
                              "entries_per_s": json.loads(line)["entries_per_sec"]}), flush=True)
