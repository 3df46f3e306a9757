"""The client's CPU per entry in the Spark writer's shape (bulk 500, 2,000 in flight, 100 B, E/W/A 1/1/1, one
Python bookie): bench.pyclient write, its CPU seconds (RUSAGE_CHILDREN) and the bookie's; with PROFILE=1 the
first round runs under py-spy (raw stacks in $OUT/client-prof.txt)."""
import json, os, resource, subprocess, sys, time
from bench.common import Cluster
from bench.write_cpu import cpu_seconds

N = int(os.environ.get("ENTRIES", "1000000"))
OUT = os.environ.get("OUT", "/tmp/s34")
PROFILE = os.environ.get("PROFILE", "1") == "1"
ROUNDS = int(os.environ.get("ROUNDS", "3"))


def cmd(uri, n, warm):
    return [sys.executable, "-m", "bench.pyclient", "write", "--zk", uri, "--digest", "CRC32C", "--entries", str(n),
            "--size", "100", "--warmup", str(warm), "--bulk", "500", "--outstanding", "2000",
            "--ensemble", "1", "--write", "1", "--ack", "1"]


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


with Cluster(None, False, make_jars=False) as c:
    uri = c.new_root("python")
    pb = c.python_bookies(uri, 1, "python")
    pid = pb.bookies[0].process.pid
    subprocess.run(cmd(uri, 100000, 2000), check=True, capture_output=True)
    for r in range(ROUNDS):
        profiled = PROFILE and r == 0
        before, cbefore = cpu_seconds(pid), children_cpu()
        spy = [os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "--format", "raw", "--rate", "200",
               "--nonblocking", "-o", f"{OUT}/client-prof.txt", "--"] if profiled else []
        p = subprocess.run(spy + cmd(uri, N, 0), capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(p.stderr)
        after, cafter = cpu_seconds(pid), children_cpu()
        line = [l for l in p.stdout.splitlines() if l.startswith("{")][-1]
        print(json.dumps({"round": r, "profiled": profiled,
                          "bookie_us_per_entry": round((after - before) / N * 1e6, 3),
                          "client_us_per_entry": None if profiled else round((cafter - cbefore) / N * 1e6, 3),
                          "entries_per_s": json.loads(line)["entries_per_sec"]}), flush=True)
