"""Where planning's time goes: partitions() of a dataset of N metadata-only ledgers under cProfile, with the
CPU seconds of this process and of ZooKeeper's JVM over the call."""
import cProfile, os, pstats, sys, time
from bench.common import Cluster
from bench.planning import _plan_seconds
from bench.write_cpu import cpu_seconds
from bkspark.client import BookKeeper
from tests.harness.ledgers import create_metadata_only, publish_dataset

N = int(os.environ.get("N", "10000"))


def zk_pids():
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")
            except OSError:
                continue
            if b"java" in cmd and b"zookeeper.server" in cmd:
                out.append(int(pid))
    return out


with Cluster(None, False, make_jars=False) as cluster:
    uri = cluster.new_root("planprof")
    cluster.python_bookies(uri, 2, "planprof")
    with BookKeeper(uri) as bk:
        ids = list(range(10_000_000, 10_000_000 + N))
        create_metadata_only(bk, ids)
        publish_dataset(bk, "plan", ids)
    _plan_seconds(uri, "plan")  # warm-up (imports)
    zk = zk_pids()
    for run in range(2):
        z0, p0 = sum(cpu_seconds(p) for p in zk), time.process_time()
        seconds, parts, slices = _plan_seconds(uri, "plan")
        z1, p1 = sum(cpu_seconds(p) for p in zk), time.process_time()
        print(f"plan {N}: {seconds:.2f} s wall, this process {p1 - p0:.2f} s CPU, ZooKeeper {z1 - z0:.2f} s CPU", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    seconds, parts, slices = _plan_seconds(uri, "plan")
    prof.disable()
    print(f"profiled: {seconds:.2f} s")
    pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(40)
