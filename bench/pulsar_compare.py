"""Issue 43's comparison: a Pulsar topic scanned by bkspark straight from the bookies vs read through the broker
with Pulsar's own Reader (the Python client), same machine, one run.

    python -m bench.pulsar_compare [--messages 200000] [--size 100] [--batching on|off] [--rounds 3] [--cores 2]

One Apache Pulsar standalone (tests/harness/pulsar.py: ``make pulsar-jars``), one topic of --messages messages of
--size bytes (LZ4, batched or not), produced untimed.  Each round times, in turns: ``spark.read.format(
"bookkeeper").option("topic", ...)`` into the ``noop`` sink (``local[--cores]``), and a Reader from the earliest
message to the last through the broker.  Printed: messages/s of each side per round, the medians, their ratio
(bkspark ÷ Reader), and the broker's CPU seconds during each side's reads (``/proc/<pid>/stat``): bkspark does not
touch the broker, the Reader is served by it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import spark_session
from bench.write_cpu import cpu_seconds

TOPIC = "persistent://public/default/bench"


def produce(service_url: str, messages: int, size: int, batching: bool) -> None:
    import pulsar

    client = pulsar.Client(service_url)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=batching, batching_max_messages=1000,
                                          compression_type=pulsar.CompressionType.LZ4, max_pending_messages=5000,
                                          block_if_queue_full=True)
        value = (b"0123456789abcdef" * (size // 16 + 1))[:size]
        for _ in range(messages):
            producer.send_async(value, lambda result, msg_id: None)
        producer.flush()
        producer.close()
    finally:
        client.close()


def reader_scan(service_url: str) -> int:
    import pulsar

    client = pulsar.Client(service_url)
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest, receiver_queue_size=5000)
        count = 0
        while reader.has_message_available():
            reader.read_next(30_000)
            count += 1
        reader.close()
        return count
    finally:
        client.close()


def bkspark_scan(spark: Any, uri: str) -> None:
    (spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("topic", TOPIC).load()
     .write.format("noop").mode("overwrite").save())


def main() -> None:
    from tests.harness.pulsar import PulsarStandalone

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--batching", choices=("on", "off"), default="on")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cores", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pulsar-") as tmp:
        broker = PulsarStandalone(Path(tmp), max_entries_per_ledger=50_000)
        broker.start()
        try:
            produce(broker.service_url, args.messages, args.size, args.batching == "on")
            spark = spark_session(args.cores, "bench-pulsar-compare")
            bkspark_scan(spark, broker.metadata_service_uri)  # untimed: Python workers and the client warm
            rounds: list[dict[str, float]] = []
            pid = broker.process.pid if broker.process is not None else None
            for index in range(args.rounds):
                result: dict[str, float] = {}
                sides = [("bkspark", lambda: bkspark_scan(spark, broker.metadata_service_uri)),
                         ("reader", lambda: reader_scan(broker.service_url))]
                for name, run in sides if index % 2 == 0 else sides[::-1]:
                    cpu0, t0 = cpu_seconds(pid) if pid else 0.0, time.monotonic()
                    run()
                    elapsed = time.monotonic() - t0
                    result[f"{name}_msgs_per_sec"] = args.messages / elapsed
                    result[f"{name}_broker_cpu_s"] = (cpu_seconds(pid) if pid else 0.0) - cpu0
                rounds.append(result)
                print(json.dumps({"round": index, **{k: round(v, 2) for k, v in result.items()}}), flush=True)
            spark.stop()
        finally:
            broker.stop()
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(json.dumps({"messages": args.messages, "size": args.size, "batching": args.batching,
                      **{k: round(v, 2) for k, v in med.items()},
                      "ratio_bkspark_over_reader": round(med["bkspark_msgs_per_sec"] / med["reader_msgs_per_sec"], 2)}))


if __name__ == "__main__":
    main()
