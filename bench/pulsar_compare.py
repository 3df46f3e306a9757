"""Issue 43's comparison: a Pulsar topic scanned by bkspark straight from the bookies vs read through the broker
with Pulsar's own Reader (the Java client and the Python client), same machine, one run.

    python -m bench.pulsar_compare [--messages 200000] [--size 100] [--batching on|off] [--rounds 3] [--cores 2]
                                   [--json FILE]

One Apache Pulsar standalone (tests/harness/pulsar.py: ``make pulsar-jars``), one topic of --messages messages of
--size bytes (LZ4, batched or not), produced untimed.  Each round times, in turns: ``spark.read.format(
"bookkeeper").option("topic", ...)`` into the ``noop`` sink (``local[--cores]``, ``minPartitions`` --cores), and
Pulsar's Reader (Python, then Java) from the earliest message to the last through the broker.  Printed:
messages/s of each side per round, the medians, their ratios (bkspark ÷ each Reader), and the broker's CPU seconds during each side's reads (``/proc/<pid>/stat``): bkspark does not
touch the broker, the Reader is served by it.  The Java Reader is bench/java/PulsarReaderBench.java, run as a
single source file on Pulsar's own jars (its JVM's start is not timed, only the reads).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
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


def java_reader_scan(service_url: str, messages: int) -> float:
    """Seconds Pulsar's Java Reader takes to read the topic's ``messages`` (bench/java/PulsarReaderBench.java)."""
    from bkspark.devcluster.java import java_executable
    from tests.harness.pulsar import pulsar_lib

    source = Path(__file__).resolve().parent / "java" / "PulsarReaderBench.java"
    done = subprocess.run([java_executable(), "-Xmx512m", "-cp", str(pulsar_lib() / "*"), str(source), service_url,
                           TOPIC, str(messages)], capture_output=True, text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the Java Reader failed ({done.returncode}): {done.stderr[-2000:]}")
    result = json.loads(lines[-1])
    if result["messages"] != messages:
        raise RuntimeError(f"the Java Reader read {result['messages']} of {messages} messages")
    return float(result["seconds"])


def bkspark_scan(spark: Any, uri: str, cores: int) -> None:
    """The scan into Spark's ``noop`` sink, in at least ``cores`` partitions (``minPartitions``, Kafka's option):
    a topic below ``maxBytesPerPartition`` is one partition otherwise, which keeps one core busy."""
    (spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("topic", TOPIC)
     .option("minPartitions", str(cores)).load()
     .write.format("noop").mode("overwrite").save())


def main() -> None:
    from tests.harness.pulsar import PulsarStandalone

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--batching", choices=("on", "off"), default="on")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--json", help="write the rounds and medians here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pulsar-") as tmp:
        broker = PulsarStandalone(Path(tmp), max_entries_per_ledger=50_000)
        broker.start()
        try:
            produce(broker.service_url, args.messages, args.size, args.batching == "on")
            spark = spark_session(args.cores, "bench-pulsar-compare")
            bkspark_scan(spark, broker.metadata_service_uri, args.cores)  # untimed: Python workers and the client warm
            rounds: list[dict[str, float]] = []
            pid = broker.process.pid if broker.process is not None else None
            for index in range(args.rounds):
                result: dict[str, float] = {}
                sides = [("bkspark", lambda: bkspark_scan(spark, broker.metadata_service_uri, args.cores)),
                         ("reader", lambda: reader_scan(broker.service_url)),
                         ("java_reader", lambda: java_reader_scan(broker.service_url, args.messages))]
                for name, run in sides if index % 2 == 0 else sides[::-1]:
                    cpu0, t0 = cpu_seconds(pid) if pid else 0.0, time.monotonic()
                    timed = run()  # the Java side says how long its reads took, without its JVM's start
                    elapsed = timed if isinstance(timed, float) else time.monotonic() - t0
                    result[f"{name}_msgs_per_sec"] = args.messages / elapsed
                    result[f"{name}_broker_cpu_s"] = (cpu_seconds(pid) if pid else 0.0) - cpu0
                rounds.append(result)
                print(json.dumps({"round": index, **{k: round(v, 2) for k, v in result.items()}}), flush=True)
            spark.stop()
        finally:
            broker.stop()
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    summary = {"messages": args.messages, "size": args.size, "batching": args.batching,
               **{k: round(v, 2) for k, v in med.items()},
               "ratio_bkspark_over_reader": round(med["bkspark_msgs_per_sec"] / med["reader_msgs_per_sec"], 2),
               "ratio_bkspark_over_java_reader": round(med["bkspark_msgs_per_sec"]
                                                       / med["java_reader_msgs_per_sec"], 2)}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"command": " ".join(["python -m bench.pulsar_compare", *sys.argv[1:]]),
                                               "rounds": rounds, "median": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
