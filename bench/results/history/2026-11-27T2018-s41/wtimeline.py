"""Ad-hoc: CPU by process kind every 50 ms through one-row Spark writes into one bookie (as bench.write_cpu).

python $H/wtimeline.py KIND SIZE ROWS ROUNDS

wtimeline-python-100.log came from this script's first version (commit 301db55), whose sampler was its own;
bench.write_cpu.CpuTimeline is that sampler, moved.
"""
import sys, time
from bench.common import Cluster, payload_frame, spark_session
from bench.write_cpu import CpuTimeline

kind = sys.argv[1]; size = int(sys.argv[2]); n = int(sys.argv[3]); rounds = int(sys.argv[4])
marks = []
with Cluster(make_jars=False) as cluster:
    uri = cluster.one_bookie(kind, "4.17.3")
    spark = spark_session(2, "wtimeline")
    def write(rows, ds, fmt="bookkeeper"):
        w = payload_frame(spark, rows, size, 2).write.format(fmt)
        if fmt == "bookkeeper":
            w = w.options(metadataServiceUri=uri, ensembleSize="1", writeQuorumSize="1", ackQuorumSize="1",
                          digestType="CRC32C").option("dataset", ds).mode("append")
        else:
            w = w.mode("overwrite")
        w.save()
    write(200000, "warm")
    with CpuTimeline(0.05) as timeline:
        for r in range(rounds):
            time.sleep(0.5)
            t0 = time.perf_counter(); write(n, f"d{r}"); t1 = time.perf_counter(); marks.append((f"write{r}", t0, t1))
            print(f"round {r}: {n / (t1 - t0):,.0f} rows/s ({t1 - t0:.2f} s)", flush=True)
            time.sleep(0.5)
            t0 = time.perf_counter(); write(n, "", "noop"); t1 = time.perf_counter(); marks.append((f"noop{r}", t0, t1))
            print(f"round {r}: noop {n / (t1 - t0):,.0f} rows/s ({t1 - t0:.2f} s)", flush=True)
    for name, a, b in marks:
        print(f"== {name}: {b - a:.2f} s")
        for t, by in timeline.between(a - 0.1, b + 0.1):
            print(f"{t - 0.1:6.2f} " + "  ".join(f"{k[:14]}={v:.2f}" for k, v in sorted(by.items()) if v >= 0.05))
    spark.stop()
