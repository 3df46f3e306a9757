"""Issue 15's benchmark: end-to-end latency of ``spark.readStream.format("bookkeeper")``.

    python -m bench.streaming_latency [--entries 300] [--rate 20] [--bookie-kind python|java] [--long-poll-ms 2000]
                                      [--trigger-ms 0] [--explicit-lac-ms 100] [--source-entries 40]

One ZooKeeper, three bookies, Spark ``local[2]`` in this process.  A writer (--explicit-lac-ms, 100 ms) appends
--entries entries at --rate entries per second to an open ledger of a dataset; a stream query follows the
dataset into a ``foreachBatch`` sink, with the default trigger (``--trigger-ms 0``: the next micro-batch starts as
soon as the last one ends) or a processing-time trigger of --trigger-ms.  Latency of an entry = the moment its
row reaches the ``foreachBatch`` function minus the moment its add was acknowledged, both on this process's
monotonic clock.  A warm-up entry first (Spark starts its Python workers), not counted.

Where the time goes: the medians of Spark's own progress durations (``durationMs``) over the micro-batches that
read rows.  ``latestOffset`` includes the source's long-poll wait for the next entry (idle time, not work);
``addBatch`` is the Spark job (the source's ``partitions``/``read`` and the ``foreachBatch`` function).

The source alone, first (no Spark): the same writer appends --source-entries entries, 2 per second, while this
process calls the stream reader's ``latestOffset`` in a loop, then ``partitions`` and ``read`` of each new range,
as Spark's driver and a task would.  Append acknowledged -> ``latestOffset`` returned it is the source's share
of the latency (it includes the wait for the entry to be confirmed: the explicit LAC interval).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from typing import Any

from bench.common import Cluster, Report, add_common_args, command_line, machine_facts, run_main, timed


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _source_alone(uri: str, args: argparse.Namespace, report: Report) -> None:
    """The stream reader driven directly, without Spark (see the module's docstring)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from bkspark.client import BookKeeper
    from bkspark.datasource.clients import evict_client
    from bkspark.datasource.reader import _client_settings
    from bkspark.datasource.stream_reader import BookKeeperStreamReader, parse_stream_read_options

    with BookKeeper(uri, explicitLacInterval=args.explicit_lac_ms) as bk:
        lh = bk.create_ledger(3, 2, 2)
        name = _publish_open_ledger(bk, lh.ledger_id)
        options = {"metadataServiceUri": uri, "dataset": name, "longPollTimeoutMs": str(args.long_poll_ms)}
        reader = BookKeeperStreamReader(*parse_stream_read_options(options))
        acked: dict[int, float] = {}
        seen: dict[int, float] = {}
        reading: list[float] = []

        def append() -> None:
            for _ in range(args.source_entries):
                time.sleep(0.5)
                acked[lh.append(b"x" * args.size)] = time.monotonic()

        writer = threading.Thread(target=append, name="bench-source-writer")
        start = reader.initialOffset()
        key = f"0:{lh.ledger_id}"
        with timed(f"the source alone: {args.source_entries} entries, 2/s"):
            writer.start()
            deadline = time.monotonic() + 60 + args.source_entries
            while len(seen) < args.source_entries and time.monotonic() < deadline:
                end = reader.latestOffset(start, ReadAllAvailable())
                returned = time.monotonic()
                first, stop = start.get("ledgers", {}).get(key, 0), end["ledgers"].get(key, 0)
                for entry_id in range(first, stop):
                    seen.setdefault(entry_id, returned)
                if stop > first:
                    t0 = time.monotonic()
                    rows = sum(batch.num_rows for part in reader.partitions(start, end) for batch in reader.read(part))
                    reading.append((time.monotonic() - t0) * 1000)
                    assert rows == stop - first
                start = end
            writer.join()
        reader.stop()
        lh.close()
        evict_client(uri, _client_settings(reader.options))  # the reader's cached client, before ZooKeeper stops
    latencies = [(seen[e] - t) * 1000 for e, t in acked.items() if e in seen]
    if len(latencies) < len(acked):
        report.fail("source alone", f"{len(acked) - len(latencies)} entries never returned by latestOffset")
    if latencies:
        report.row("source alone: append acknowledged -> latestOffset, p50", _percentile(latencies, 0.50), "ms")
        report.row("source alone: append acknowledged -> latestOffset, p99", _percentile(latencies, 0.99), "ms")
    if reading:
        report.row("source alone: partitions + read of a micro-batch, median", statistics.median(reading), "ms")


def _publish_open_ledger(bk: Any, ledger_id: int) -> str:
    """A new dataset naming one (open) ledger, as a committing writer would publish it."""
    from bkspark.datasource.datasets import CommitKey, DatasetRegistry, JobRecord, JobState

    registry = DatasetRegistry(bk.zk, bk.ledgers_root)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    registry.begin_job(f"{name}-publish", JobRecord(JobState.WRITING, name))
    registry.publish(name, [(0, ledger_id)], replace_all=False, job_id=f"{name}-publish", key=CommitKey(name, 1))
    registry.forget_job(f"{name}-publish")
    return name


def run(args: argparse.Namespace) -> Report:
    from pyspark.sql import SparkSession

    from bkspark.client import BookKeeper

    report = Report(
        name="streaming_latency",
        title="readStream: append acknowledged -> row in foreachBatch (issue 15)",
        command=command_line("bench.streaming_latency"),
        params={"entries": args.entries, "rate": f"{args.rate}/s", "bookies": f"3 x {args.bookie_kind}",
                "longPollTimeoutMs": args.long_poll_ms, "writer explicitLacInterval": f"{args.explicit_lac_ms} ms",
                "trigger": f"processingTime {args.trigger_ms} ms" if args.trigger_ms else "default (as fast as possible)"},
    )
    report.machine_before = machine_facts()
    with Cluster(args.workdir, args.keep, make_jars=not args.no_make) as cluster:
        with timed(f"starting 3 {args.bookie_kind} bookies"):
            uri = cluster.new_root(args.bookie_kind)
            if args.bookie_kind == "java":
                cluster.java_bookies(uri, 3, args.bk_version, "java")
            else:
                cluster.python_bookies(uri, 3, "python")
        if args.source_entries:
            _source_alone(uri, args, report)
        os.environ["PYSPARK_PYTHON"] = sys.executable
        spark = (
            SparkSession.builder.master("local[2]").appName("bkspark-bench-streaming")
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.streaming.numRecentProgressUpdates", "100000").getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        arrivals: dict[int, float] = {}
        lock = threading.Lock()

        def sink(df: Any, _batch_id: int) -> None:
            ids = [r.entry_id for r in df.select("entry_id").collect()]
            now = time.monotonic()
            with lock:
                for entry_id in ids:
                    arrivals.setdefault(entry_id, now)

        with BookKeeper(uri, explicitLacInterval=args.explicit_lac_ms) as bk:
            lh = bk.create_ledger(3, 2, 2)
            name = _publish_open_ledger(bk, lh.ledger_id)
            writer = (
                spark.readStream.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", name)
                .option("longPollTimeoutMs", str(args.long_poll_ms)).load()
                .writeStream.foreachBatch(sink).option("checkpointLocation", os.path.join(cluster.base, "checkpoint"))
            )
            if args.trigger_ms:
                writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
            query = writer.start()
            try:
                lh.append(b"warm-up")
                deadline = time.monotonic() + 300
                while 0 not in arrivals:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the warm-up entry never arrived")
                    time.sleep(0.05)
                acked: dict[int, float] = {}
                with timed(f"appending {args.entries} entries at {args.rate}/s"):
                    for i in range(args.entries):
                        entry_id = lh.append(b"x" * args.size)
                        acked[entry_id] = time.monotonic()
                        time.sleep(max(0.0, 1.0 / args.rate))
                    deadline = time.monotonic() + 120
                    while not all(e in arrivals for e in acked):
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"{sum(e not in arrivals for e in acked)} entries never arrived")
                        time.sleep(0.05)
                progress = [p for p in query.recentProgress if p.numInputRows > 0]
            finally:
                query.stop()
                lh.close()
        spark.stop()
    latencies = [(arrivals[e] - t) * 1000 for e, t in acked.items()]
    report.row("latency p50", _percentile(latencies, 0.50), "ms")
    report.row("latency p99", _percentile(latencies, 0.99), "ms")
    report.row("latency mean", statistics.fmean(latencies), "ms")
    report.row("latency max", max(latencies), "ms")
    report.row("micro-batches with rows", len(progress), "batches")
    report.row("rows per micro-batch, median", statistics.median(p.numInputRows for p in progress[1:] or progress), "rows")
    for part in ("triggerExecution", "latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets"):
        spent = [p.durationMs.get(part) for p in progress[1:] or progress if p.durationMs.get(part) is not None]
        if spent:
            report.row(f"durationMs.{part}, median", statistics.median(spent), "ms")
    report.machine_after = machine_facts()
    return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.streaming_latency", description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=300, help="entries measured (default 300)")
    p.add_argument("--rate", type=float, default=20.0, help="entries appended per second (default 20)")
    p.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    p.add_argument("--bookie-kind", choices=("java", "python"), default="python")
    p.add_argument("--long-poll-ms", type=int, default=2000, help="the source's longPollTimeoutMs (default 2000)")
    p.add_argument("--explicit-lac-ms", type=int, default=100,
                   help="the writer's explicitLacInterval: how late an idle writer's last entry is confirmed (default 100)")
    p.add_argument("--source-entries", type=int, default=40,
                   help="entries of the source-alone part, without Spark (default 40; 0 skips it)")
    p.add_argument("--trigger-ms", type=int, default=0,
                   help="processing-time trigger interval; 0 (default): Spark's default trigger, as fast as possible")
    add_common_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
