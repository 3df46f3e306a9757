"""Ad-hoc: a one-row Spark write's CPU by process kind over time (50 ms samples)."""
import sys, threading, time
from bench.common import Cluster, spark_session, payload_frame
from bench.write_cpu import cpu_by_process, kind_of, _TICK

kind = sys.argv[1]; size = int(sys.argv[2]); rows = int(sys.argv[3])
with Cluster(make_jars=False) as cluster:
    uri = cluster.one_bookie(kind, "4.17.3")
    spark = spark_session(2, "timeline")
    def write(n, ds):
        payload_frame(spark, n, size, 2).write.format("bookkeeper").options(
            metadataServiceUri=uri, ensembleSize="1", writeQuorumSize="1", ackQuorumSize="1", digestType="CRC32C",
            rowsPerEntry="1").option("dataset", ds).mode("append").save()
    write(20000, "warm"); write(rows, "warm2")
    samples = []; stop = threading.Event()
    def sampler():
        prev = cpu_by_process(); t_prev = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.1)
            cur = cpu_by_process(); t = time.perf_counter()
            by = {}
            for pid, (ticks, cmd) in cur.items():
                d = ticks - prev.get(pid, (0, ""))[0]
                if d > 0: by[kind_of(cmd)] = by.get(kind_of(cmd), 0) + d / _TICK / (t - t_prev)
            samples.append((t, by)); prev, t_prev = cur, t
    th = threading.Thread(target=sampler); th.start()
    import os, subprocess
    spy = None
    if os.environ.get("SPY"):
        pid = next(p for p, (_t, cmd) in cpu_by_process().items() if os.environ["SPY"] in cmd and "py-spy" not in cmd)
        spy = subprocess.Popen(["/work/main/.venv/bin/py-spy", "record", "--pid", str(pid), "-r", "400", "--nonblocking",
                                "--threads", "--format", "raw", "-o", os.environ["SPYOUT"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    t0 = time.perf_counter(); write(rows, "timed"); t1 = time.perf_counter()
    if spy is not None:
        import signal; spy.send_signal(signal.SIGINT); spy.wait()
    stop.set(); th.join()
    print(f"{rows / (t1 - t0):,.0f} rows/s in {t1 - t0:.2f} s")
    for t, by in samples:
        print(f"{t - t0:6.2f} " + "  ".join(f"{k[:12]}={v:.2f}" for k, v in sorted(by.items()) if v >= 0.05))
    spark.stop()
