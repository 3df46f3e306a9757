import sys, time
sys.path.insert(0, "/tmp/s37/nullsink")
from bench.common import spark_session, payload_frame
from nullsink import NullSink
size = int(sys.argv[1]); rows = int(sys.argv[2])
spark = spark_session(2, "null")
spark.dataSource.register(NullSink)
for r in range(4):
    t0 = time.perf_counter()
    payload_frame(spark, rows, size, 2).write.format("nullsink").mode("append").save()
    print(f"round {r}: {rows / (time.perf_counter() - t0):,.0f} rows/s", flush=True)
spark.stop()
