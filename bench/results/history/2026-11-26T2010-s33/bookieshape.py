"""Bookie CPU per entry by the load's shape: CLIENTS concurrent bkspark clients (one ledger each), BULK entries per
append_many call, OUTSTANDING entries in flight per client, 100 B entries, one Python bookie, fsync journal.
The Spark writer's shape is CLIENTS=2 BULK=500 OUTSTANDING=2000; bookiecpu.py's (s32) is 1, 10000, 1000."""
import json, os, subprocess, sys
from bench.common import Cluster
from bench.write_cpu import cpu_seconds

N = int(os.environ.get("ENTRIES", "1000000"))
SHAPES = [tuple(int(x) for x in s.split("/")) for s in os.environ.get("SHAPES", "1/10000/1000,1/500/2000,2/500/2000").split(",")]
ROUNDS = int(os.environ.get("ROUNDS", "3"))


def start(uri, n, warm, bulk, outstanding):
    return subprocess.Popen([sys.executable, "-m", "bench.pyclient", "write", "--zk", uri, "--digest", "CRC32C",
                             "--entries", str(n), "--size", "100", "--warmup", str(warm), "--bulk", str(bulk),
                             "--outstanding", str(outstanding), "--ensemble", "1", "--write", "1", "--ack", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


with Cluster(None, False, make_jars=False) as c:
    uri = c.new_root("python")
    pb = c.python_bookies(uri, 1, "python")
    pid = pb.bookies[0].process.pid
    start(uri, 100000, 2000, 10000, 1000).communicate()
    for r in range(ROUNDS):
        for clients, bulk, outstanding in SHAPES:
            before = cpu_seconds(pid)
            procs = [start(uri, N // clients, 0, bulk, outstanding) for _ in range(clients)]
            rates = []
            for p in procs:
                out, err = p.communicate()
                if p.returncode:
                    raise SystemExit(err)
                rates.append(json.loads([l for l in out.splitlines() if l.startswith("{")][-1])["entries_per_sec"])
            after = cpu_seconds(pid)
            print(json.dumps({"round": r, "clients": clients, "bulk": bulk, "outstanding": outstanding,
                              "bookie_us_per_entry": round((after - before) / N * 1e6, 3),
                              "entries_per_s": round(sum(rates))}), flush=True)
