"""Ad-hoc: make demo's first one-row write (and read) in a fresh Spark session, CPU by process kind over time.

PYTHONPATH=. python $H/demotimeline.py ROWS   (LocalCluster of 3 Python bookies, as make demo)
"""
import os, sys, threading, time
sys.path.insert(0, "examples")
from bench.write_cpu import cpu_by_process, kind_of, _TICK
from bkspark.devcluster import LocalCluster

rows_n = int(sys.argv[1])
samples = []; stop = threading.Event(); marks = []
def sampler():
    """Every 0.1 s: cores used per kind of process since the last sample (the same measure as s37's timeline.py)."""
    import collections
    last, last_t = cpu_by_process(), time.perf_counter()
    while not stop.wait(0.1):
        now, now_t = cpu_by_process(), time.perf_counter()
        cores = collections.Counter()
        for pid, (ticks, cmd) in now.items():
            cores[kind_of(cmd)] += max(0, ticks - last.get(pid, (0, ""))[0]) / _TICK / (now_t - last_t)
        samples.append((now_t, {k: v for k, v in cores.items() if v > 0}))
        last, last_t = now, now_t

with LocalCluster(bookies=3) as cluster:
    uri = cluster.metadata_service_uri
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession, functions as F
    spark = (SparkSession.builder.master("local[2]").appName("bkspark-demo").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    rows = spark.range(0, rows_n, 1, 4).select(
        F.rpad(F.format_string("event-%d ", F.col("id")), 100, "x").cast("binary").alias("payload"))
    expected = rows.agg(F.count("*").alias("n"), F.sum(F.crc32("payload")).alias("crc")).collect()[0]
    th = threading.Thread(target=sampler); th.start()
    spies = []
    def spy_daemons():
        import subprocess
        seen = set()
        while not stop.is_set():
            for pid, (_t, cmd) in cpu_by_process().items():
                if "pyspark.daemon" in cmd and pid not in seen:
                    seen.add(pid)
                    spies.append(subprocess.Popen(["/work/main/.venv/bin/py-spy", "record", "--pid", str(pid), "--subprocesses",
                        "-r", "200", "--nonblocking", "--format", "raw", "-o", os.environ["SPYOUT"] + f".{pid}"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(0.02)
    if os.environ.get("SPYOUT"):
        threading.Thread(target=spy_daemons, daemon=True).start()
    for r in range(int(os.environ.get("ROUNDS", "1"))):
        t0 = time.perf_counter()
        (rows.write.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", f"demo{r}")
         .option("ensembleSize", "3").option("writeQuorumSize", "2").option("ackQuorumSize", "2").mode("overwrite").save())
        t1 = time.perf_counter(); marks.append((f"write{r}", t0, t1))
        ev = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", f"demo{r}").load()
        t2 = time.perf_counter()
        got = ev.agg(F.count("*").alias("n"), F.sum(F.crc32("payload")).alias("crc")).collect()[0]
        t3 = time.perf_counter(); marks.append((f"load{r}", t1, t2)); marks.append((f"read{r}", t2, t3))
        assert (got.n, got.crc) == (expected.n, expected.crc)
        print(f"round {r}: write {rows_n / (t1 - t0):,.0f} rows/s ({t1 - t0:.2f} s), load() {t2 - t1:.2f} s, "
              f"read {rows_n / (t3 - t2):,.0f} rows/s ({t3 - t2:.2f} s)", flush=True)
    stop.set(); th.join()
    import signal
    for sp in spies:
        sp.send_signal(signal.SIGINT); sp.wait()
    base = marks[0][1]
    for name, a, b in marks:
        print(f"{name}: {a - base:6.2f} .. {b - base:6.2f}")
    for t, by in samples:
        print(f"{t - base:6.2f} " + "  ".join(f"{k[:14]}={v:.2f}" for k, v in sorted(by.items()) if v >= 0.05))
    spark.stop()
