"""Ad hoc: the bkspark Spark write's rows/s and CPU per process, alone and with a Kafka broker / Java bookie beside."""
import os, sys, time
sys.path.insert(0, os.getcwd())
from bench.common import Cluster, payload_frame, spark_session
from bench.kafka_broker import KafkaBroker
from bench.kafka_broker import spark_kafka_jars
from bench.write_cpu import cpu_by_process, cpu_seconds_by_kind
ROWS = int(os.environ.get("ROWS", "1000000"))
steps = sys.argv[1].split(",")   # e.g. w,w,kafka,w,w,java,w
kind = os.environ.get("KIND", "python")
with Cluster(None, False, make_jars=False) as cluster:
    uri = cluster.new_root(kind)
    (cluster.python_bookies(uri, 1, "python") if kind == "python" else cluster.java_bookies(uri, 1, "4.17.3", "java"))
    spark = spark_session(2, "wctx", jars=spark_kafka_jars(), driver_memory="2g")
    opts = dict(metadataServiceUri=uri, ensembleSize="1", writeQuorumSize="1", ackQuorumSize="1", digestType="CRC32C")
    payload_frame(spark, 2000, 100, 2, "payload").write.format("bookkeeper").options(**opts).option("dataset", "warm").mode("append").save()
    for i, step in enumerate(steps):
        if step == "kafka":
            k = KafkaBroker(cluster.base / "kafka"); k.start(); cluster.callback(k.stop); print("kafka started"); continue
        if step == "java":
            u2 = cluster.new_root("java"); cluster.java_bookies(u2, 1, "4.17.3", "java"); print("java bookie started"); continue
        if step == "kw":
            k.create_topic(f"t{i}", 2); last_topic = f"t{i}"
            t = time.perf_counter()
            payload_frame(spark, ROWS, 100, 2, "value").write.format("kafka").option("kafka.bootstrap.servers", k.bootstrap).option("topic", f"t{i}").save()
            print(f"step {i} kafka write: {ROWS/(time.perf_counter()-t):,.0f} rows/s", flush=True); continue
        if step == "ks":
            t = time.perf_counter()
            spark.read.format("kafka").option("kafka.bootstrap.servers", k.bootstrap).option("subscribe", last_topic).option("startingOffsets", "earliest").option("endingOffsets", "latest").load().write.format("noop").mode("overwrite").save()
            print(f"step {i} kafka scan: {ROWS/(time.perf_counter()-t):,.0f} rows/s", flush=True); continue
        if step == "dirty":
            with open(cluster.base / f"dirty{i}", "wb") as f:
                for _ in range(300): f.write(b"x" * (1 << 20))
            print("dirty 300 MB written"); continue
        if step in ("raw", "rawj"):
            from bench.common import py_bench, java_bench
            t = time.perf_counter()
            if step == "raw":
                w = py_bench(uri, "write", entries=ROWS, size=100, outstanding=1000, warmup=5000, ensemble=1, write=1, ack=1, digest="CRC32C")
            else:
                w = java_bench(cluster, "4.17.3", uri, "write", entries=ROWS, size=100, outstanding=1000, warmup=5000, ensemble=1, write=1, ack=1, digest="CRC32C")
            print(f"step {i} {step} write {w['entries_per_sec']:,.0f}/s", flush=True)
            if os.environ.get("RAWREAD"):
                r = py_bench(uri, "read", ledger=int(w["ledger_id"]), mode="batch", batch_size=1000, max_size=4 << 20, passes=1, warmup_passes=1, digest="CRC32C")
                print(f"step {i} raw read {r['entries_per_sec']:,.0f}/s", flush=True)
            continue
        if step == "second":
            u2 = cluster.new_root("python2"); cluster.python_bookies(u2, 1, "python2")
            o2 = dict(opts, metadataServiceUri=u2)
            payload_frame(spark, 2000, 100, 2, "payload").write.format("bookkeeper").options(**o2).option("dataset", "warm").mode("append").save()
            spark.read.format("bookkeeper").options(metadataServiceUri=u2, dataset="warm").load().write.format("noop").mode("overwrite").save()
            print("second root used", flush=True); continue
        if step == "sleep":
            time.sleep(20); continue
        print(f"START {i}", flush=True)
        b = cpu_by_process(); t = time.perf_counter()
        payload_frame(spark, ROWS, 100, 2, "payload").write.format("bookkeeper").options(**opts).option("dataset", f"d{i}").mode("append").save()
        secs = time.perf_counter() - t
        used = cpu_seconds_by_kind(b, cpu_by_process())
        print(f"step {i} write: {ROWS/secs:,.0f} rows/s  " + "  ".join(f"{k}={v*1e6/ROWS:.2f}" for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if v > 0.01), flush=True)
    spark.stop()
