"""py-spy of one Python bookie during a cold striped read (bench.striped_reads' round: 3 bookies, E/W/A 3/2/2,
bookies restarted after the write so every entry is on disk), collapsed stacks to coldprof-bookie.txt; with
TOOL=strace, the bookie's syscall counts to coldstrace.txt instead."""
import os, subprocess, sys, time
from pathlib import Path
from bench.common import REPO_ROOT, Cluster, py_bench

OUT = Path("/tmp/s34/coldprof-bookie-gil.txt")
with Cluster(make_jars=False) as cluster:
    from tests.harness.python_bookie import PythonBookieCluster
    uri = cluster.new_root("striped")
    bookies = PythonBookieCluster(uri, cluster.base / "bookies", bookies=3, journal_sync_data=True, tree=REPO_ROOT)
    bookies.start_all()
    cluster.callback(bookies.close)
    w = py_bench(uri, "write", tree=REPO_ROOT, entries=200000, size=100, ensemble=3, write=2, ack=2, bulk=500)
    bookies.close()
    bookies.start_all()
    pid = bookies.bookies[0].process.pid
    if os.environ.get("TOOL") == "strace":  # syscall counts instead: coldstrace.txt
        argv = ["strace", "-f", "-c", "-p", str(pid), "-o", str(OUT.with_name("coldstrace.txt"))]
    else:
        argv = [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid), "--rate", "250",
                "--format", "raw", "--output", str(OUT), "--nonblocking", "--gil", "--threads"]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    r = py_bench(uri, "read", tree=REPO_ROOT, ledger=w["ledger_id"], mode="arrow", passes=1, warmup_passes=0)
    spy.send_signal(2)
    spy.wait(30)
    print(r["entries_per_sec"])
