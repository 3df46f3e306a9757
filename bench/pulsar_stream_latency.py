"""Issue 43's streaming benchmark: publish -> row latency of ``spark.readStream`` on a Pulsar topic, with the
broker's explicit LAC on.

    python -m bench.pulsar_stream_latency [--messages 200] [--rate 20] [--explicit-lac-ms 100] [--long-poll-ms 2000]
                                          [--trigger-ms 0] [--cores 2]

One Apache Pulsar standalone (tests/harness/pulsar.py: ``make pulsar-jars``) with ``bookkeeperExplicitLacIntervalInMills``
= --explicit-lac-ms; Spark ``local[--cores]`` in this process.  A stream query follows the topic into a
``foreachBatch`` sink (the default trigger, or a processing-time one of --trigger-ms); a producer sends --messages
messages (batching off) at --rate per second.  Latency of a message = the moment its row reaches the sink minus the
moment its send was acknowledged, both on this process's monotonic clock.  A warm-up message first, not counted.
Printed: one JSON line with p50, p99 and max in ms, and the medians of Spark's progress durations.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import spark_session

TOPIC = "persistent://public/default/latency"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    from tests.harness.pulsar import PulsarStandalone

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200)
    p.add_argument("--rate", type=float, default=20.0)
    p.add_argument("--explicit-lac-ms", type=int, default=100)
    p.add_argument("--long-poll-ms", type=int, default=2000)
    p.add_argument("--trigger-ms", type=int, default=0)
    p.add_argument("--cores", type=int, default=2)
    args = p.parse_args()

    import pulsar

    acked: dict[bytes, float] = {}
    arrived: dict[bytes, float] = {}
    lock = threading.Lock()

    def sink(df: Any, _batch_id: int) -> None:
        values = [bytes(r.value) for r in df.select("value").collect()]
        now = time.monotonic()
        with lock:
            for value in values:
                arrived.setdefault(value, now)

    def wait_for(value: bytes, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with lock:
                if value in arrived:
                    return
            if time.monotonic() > deadline:
                raise SystemExit(f"message {value!r} never reached the sink")
            time.sleep(0.01)

    with tempfile.TemporaryDirectory(prefix="bench-pulsar-latency-") as tmp:
        broker = PulsarStandalone(Path(tmp), max_entries_per_ledger=50_000, explicit_lac_ms=args.explicit_lac_ms)
        broker.start()
        client = pulsar.Client(broker.service_url)
        try:
            producer = client.create_producer(TOPIC, batching_enabled=False)
            producer.send(b"warm-up")
            spark = spark_session(args.cores, "bench-pulsar-stream-latency")
            writer = (spark.readStream.format("bookkeeper").option("metadataServiceUri", broker.metadata_service_uri)
                      .option("topic", TOPIC).option("longPollTimeoutMs", str(args.long_poll_ms)).load()
                      .writeStream.foreachBatch(sink).option("checkpointLocation", str(Path(tmp) / "cp")))
            if args.trigger_ms:
                writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
            query = writer.start()
            wait_for(b"warm-up")
            for index in range(args.messages):
                value = f"m{index}".encode()
                producer.send(value)
                acked[value] = time.monotonic()
                time.sleep(1.0 / args.rate)
            wait_for(f"m{args.messages - 1}".encode())
            progress = [p for p in query.recentProgress if p["numInputRows"]]
            query.stop()
            spark.stop()
            producer.close()
        finally:
            client.close()
            broker.stop()
    latencies = [(arrived[v] - t) * 1000 for v, t in acked.items()]
    durations = {k: statistics.median(p["durationMs"].get(k, 0) for p in progress)
                 for k in ("latestOffset", "addBatch", "triggerExecution")} if progress else {}
    print(json.dumps({"messages": args.messages, "rate": args.rate, "explicit_lac_ms": args.explicit_lac_ms,
                      "trigger_ms": args.trigger_ms, "p50_ms": round(_percentile(latencies, 0.5), 1),
                      "p99_ms": round(_percentile(latencies, 0.99), 1), "max_ms": round(max(latencies), 1),
                      "median_progress_ms": durations}))


if __name__ == "__main__":
    main()
