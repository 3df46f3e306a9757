"""Ad-hoc: py-spy profile of the client's striped single reads (read_batches over a 3/2/2 ledger, 3 Python bookies)."""
import os, subprocess, sys
from bench.common import REPO_ROOT, Cluster, py_bench
from tests.harness.python_bookie import PythonBookieCluster

out = sys.argv[1]
with Cluster(make_jars=False) as cluster:
    uri = cluster.new_root("striped")
    bookies = PythonBookieCluster(uri, cluster.base / "bookies", bookies=3, journal_sync_data=True)
    bookies.start_all()
    cluster.callback(bookies.close)
    w = py_bench(uri, "write", entries=400000, size=100, ensemble=3, write=2, ack=2, bulk=500)
    argv = [str(REPO_ROOT / ".venv/bin/py-spy"), "record", "--nonblocking", "--threads", "-r", "400", "--format", "raw",
            "-o", out, "--", sys.executable, "-m", "bench.pyclient", "read", "--zk", uri, "--ledger", str(w["ledger_id"]),
            "--mode", "arrow", "--passes", "3", "--warmup-passes", "1"]
    print(subprocess.run(argv, capture_output=True, text=True, cwd=REPO_ROOT).stdout.strip().splitlines()[-1])
