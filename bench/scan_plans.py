"""One dataset scanned under several read plans, alternating: what partitioning costs or gains a Spark scan.

    python -m bench.scan_plans [--rows 1000000] [--size 100] [--rows-per-entry 100000] [--bookie-kind java]
                               [--rounds 3] [--plan NAME:OPTION=VALUE,...] ...

One ZooKeeper, one bookie (ensemble 1/1/1, fsync journal) and Spark ``local[2]`` in this process.  A Spark write
of --rows rows of --size bytes (2 tasks, one ledger each; ``rowsPerEntry`` as given, 1 for one row per entry,
entries of at most 16 KiB), then, in each round, a scan into the ``noop`` sink under every plan in turn.  A plan
is a set of read options (``maxEntriesPerPartition``, ``maxBytesPerPartition``, ``minPartitions``, ...) on top of
``maxEntriesPerPartition`` = rows ÷ 2 (one slice per ledger, as ``bench.kafka_compare`` reads).  Prints each
plan's partitions and rows/s per round, and the median of each plan ÷ the first plan's (docs/connector.md,
"Partitions").
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

from bench.common import Cluster, Report, add_common_args, add_spark_job_args, command_line, machine_facts
from bench.common import payload_frame, run_main, spark_session, timed

#: The plans when none is given: the planner's default (which packs the two ledgers of a small packed dataset into
#: one partition) against one partition per ledger.
DEFAULT_PLANS = ("default:", "per-ledger:minPartitions=2")


def parse_plan(text: str) -> tuple[str, dict[str, str]]:
    """``NAME:KEY=VALUE,KEY=VALUE`` (options may be empty) as a name and read options."""
    name, _, rest = text.partition(":")
    options = dict(item.split("=", 1) for item in rest.split(",") if item.strip())
    return name or "plan", options


def run(args: argparse.Namespace) -> Report:
    plans = [parse_plan(p) for p in (args.plan or DEFAULT_PLANS)]
    params = {"rows": args.rows, "size": args.size, "spark": "local[2]", "bookie": f"1 x {args.bookie_kind}",
              "ensemble": "1/1/1", "rowsPerEntry": args.rows_per_entry, "rounds": args.rounds,
              "plans": "; ".join(f"{name}: {opts or 'no extra option'}" for name, opts in plans)}
    report = Report("scan_plans", "One dataset, several read plans (Spark scan rows/s)", command_line("bench.scan_plans"),
                    params, machine_before=machine_facts())
    rates: dict[str, list[float]] = {name: [] for name, _ in plans}
    with Cluster(args.workdir, args.keep, make_jars=not args.no_make) as cluster:
        uri = cluster.one_bookie(args.bookie_kind, args.bk_version)
        spark = spark_session(2, "bkspark-scan-plans")

        def write(rows: int, dataset: str) -> None:
            payload_frame(spark, rows, args.size, 2).write.format("bookkeeper").options(
                    metadataServiceUri=uri, ensembleSize="1", writeQuorumSize="1", ackQuorumSize="1",
                    digestType="CRC32C", rowsPerEntry=str(args.rows_per_entry), entryMaxBytes=str(16 * 1024),
                ).option("dataset", dataset).mode("append").save()

        def scan(dataset: str, rows: int, options: dict[str, str]) -> tuple[int, float]:
            df = spark.read.format("bookkeeper").options(
                metadataServiceUri=uri, dataset=dataset, digestType="CRC32C",
                maxEntriesPerPartition=str(max(1, math.ceil(rows / 2))),
            ).options(**options).load()
            parts = df.rdd.getNumPartitions()
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            return parts, rows / (time.perf_counter() - t0)

        try:
            with timed("warm-up (untimed)"):
                write(20_000, "warm")
                for _name, options in plans:
                    scan("warm", 20_000, options)
            with timed(f"write {args.rows:,} rows"):
                write(args.rows, "bench")
            for rnd in range(args.rounds):
                for name, options in plans:
                    parts, rate = scan("bench", args.rows, options)
                    rates[name].append(rate)
                    report.row(f"round {rnd}, {name}: Spark scan ({parts} partitions)", rate, "rows/s")
        finally:
            spark.stop()
    base = plans[0][0]
    for name, _ in plans:
        report.row(f"{name}: median Spark scan", statistics.median(rates[name]), "rows/s")
    for name, _ in plans[1:]:
        report.add_ratio(f"Spark scan rows/s, {name} ÷ {base} (medians)",
                         statistics.median(rates[name]), statistics.median(rates[base]))
    report.notes.append("Plans alternate within each round; every plan reads the same dataset, written once.")
    report.machine_after = machine_facts()
    return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.scan_plans", description=__doc__.split("\n\n")[0])
    add_spark_job_args(p, rounds=3)
    p.add_argument("--rows-per-entry", type=int, default=100_000, help="rowsPerEntry of the write (1: one row per entry)")
    p.add_argument("--plan", action="append", help="NAME:OPTION=VALUE,... (repeatable; the first is the base)")
    add_common_args(p)
    return p


if __name__ == "__main__":
    sys.exit(run_main(parser, run, None))
