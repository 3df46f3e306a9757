"""Issue 14, item 5: planning that scales, and small ledgers packed into partitions.

    python -m bench.planning [--sizes 1000,10000,100000] [--small 2000] [--cores 2]

One ZooKeeper and two Python bookies. In one run:

1. **Planning time** of a dataset of N ledgers (N in --sizes): the ledgers are closed one-entry ledgers whose
   metadata alone exists (created with ZooKeeper multi ops), published as one dataset; the figure is the
   data source reader's ``partitions()`` (manifest read, every ledger's metadata read, slices packed into
   partitions), timed in this process as Spark's planner process runs it. Goal: 100,000 ledgers under 30 s.
2. **End to end**: --small real one-entry ledgers (written with the async client, 64 at once), published as a
   dataset, scanned by Spark (``local[cores]``) into the ``noop`` sink, first as planned by default (small
   slices packed, 100 to a partition: the median of --repeat scans after one warm-up scan), then once with
   ``minPartitions`` = the ledger count (one partition per ledger: the plan before packing existed).
   Goal: 2,000 one-entry ledgers in under 10 s.
3. **A ``ledgers`` range** over the same --small ledgers (``<first>-<first + 10 x small>``, e.g. ``0-20000`` over
   2,000 ledgers, as a user of an existing cluster gives it): ``partitions()`` of the range (the ledgers listed
   under the range only, their metadata in multi reads, packed as a dataset's), beside the dataset's, and the
   same Spark scan; and, for comparison, the full walk of the cluster's ledger tree that a range plan made
   before (the root also holds the metadata-only ledgers of step 1).

Goals of the form "under T seconds" are printed as T ÷ measured time, met when ≥ 1.0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from bench.common import (
    Cluster,
    Report,
    add_common_args,
    command_line,
    machine_facts,
    run_main,
    spark_session,
    timed,
)

#: The goals of issue 14, in seconds.
PLAN_100K_GOAL_S = 30.0
SMALL_SCAN_GOAL_S = 10.0


def _plan_seconds(uri: str, dataset: str | None = None, **options: str) -> tuple[float, int, int]:
    """(seconds, partitions, slices) of one ``partitions()`` of the dataset (or of ``options``, e.g. a ``ledgers``
    range), on a fresh cached client."""
    from bkspark.datasource.clients import client_conf, evict_client
    from bkspark.datasource.options import parse_read_options
    from bkspark.datasource.planning import partition_slices
    from bkspark.datasource.reader import BookKeeperReader

    chosen = {"dataset": dataset} if dataset is not None else {}
    reader = BookKeeperReader(parse_read_options({"metadataserviceuri": uri, **chosen, **options}))
    started = time.perf_counter()
    try:
        parts = reader.partitions()
    finally:
        seconds = time.perf_counter() - started
        evict_client(uri, client_conf((), batch_read_enabled=True))
    return seconds, len(parts), sum(len(partition_slices(p)) for p in parts)


def _dataset_reader(spark: Any, uri: str, dataset: str | None, **options: str) -> Any:
    reader = spark.read.format("bookkeeper").option("metadataServiceUri", uri)
    if dataset is not None:
        reader = reader.option("dataset", dataset)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def _scan_seconds(spark: Any, uri: str, dataset: str | None, **options: str) -> tuple[float, int]:
    """(seconds, partitions) of one Spark scan of the dataset into the noop sink (planning included)."""
    started = time.perf_counter()
    df = _dataset_reader(spark, uri, dataset, **options).load()
    partitions = df.rdd.getNumPartitions()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started, partitions


def run(args: argparse.Namespace) -> Report:
    from bkspark.client import BookKeeper
    from tests.harness.ledgers import create_metadata_only, publish_dataset, write_small_ledgers

    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    report = Report(
        name="planning",
        title="Planning at scale and packed partitions (issue 14, item 5)",
        command=command_line("bench.planning"),
        params=dict(sizes=sizes, small=args.small, cores=args.cores, repeat=args.repeat, bookies="2 x Python"),
        machine_before=machine_facts(),
    )
    with Cluster(args.workdir, args.keep, make_jars=not args.no_make) as cluster:
        uri = cluster.new_root("planning")
        with timed("starting 2 Python bookies"):
            cluster.python_bookies(uri, 2, "planning")
        next_id = 10_000_000
        plan_100k: float | None = None
        with BookKeeper(uri) as bk:
            for size in sizes:
                ids = list(range(next_id, next_id + size))
                next_id += size
                with timed(f"{size:,} ledgers: metadata and dataset"):
                    create_metadata_only(bk, ids)
                    publish_dataset(bk, f"plan-{size}", ids)
                seconds, parts, slices = _plan_seconds(uri, f"plan-{size}")
                if slices != size:
                    report.fail(f"planning {size:,}", f"{slices} slices planned, expected {size}")
                report.row(f"planning {size:,} ledgers (partitions(): manifest, metadata, packing)", seconds, "s",
                           partitions=parts, ledgers_per_s=round(size / seconds))
                if size == 100_000:
                    plan_100k = seconds
        if plan_100k is not None:
            report.add_ratio(f"{PLAN_100K_GOAL_S:.0f} s ÷ planning 100,000 ledgers", PLAN_100K_GOAL_S, plan_100k, goal=1.0)

        if args.small:
            with timed(f"{args.small:,} one-entry ledgers with real entries"):
                lids = write_small_ledgers(uri, args.small, quorum=(1, 1, 1))
                with BookKeeper(uri) as bk:
                    publish_dataset(bk, "small", lids)
            _range_plan_figures(report, uri, lids, args)
            if args.skip_scans:
                report.machine_after = machine_facts()
                return report
            spark = spark_session(args.cores, "bkspark-bench-planning")
            try:
                figures: dict[str, float] = {}
                _scan_seconds(spark, uri, "small")  # warm-up: the Python workers and their cached clients
                for label, options, repeat in (
                    ("packed (default plan)", {}, args.repeat),
                    # the old plan's scan takes a minute or more: once is enough to compare
                    ("one partition per ledger (minPartitions = ledgers)", {"minPartitions": str(args.small)}, 1),
                ):
                    runs = [_scan_seconds(spark, uri, "small", **options) for _ in range(repeat)]
                    seconds = statistics.median(r[0] for r in runs)
                    parts = runs[0][1]
                    rows = _dataset_reader(spark, uri, "small", **options).load().count()  # once, untimed
                    if rows != args.small:
                        report.fail(f"scan {label}", f"{rows} rows read, expected {args.small}")
                    figures[label] = seconds
                    report.row(f"Spark scan of {args.small:,} one-entry ledgers, {label}", seconds, "s",
                               partitions=parts, rows_per_s=round(rows / seconds),
                               runs=[round(r[0], 2) for r in runs])
                _range_scan_figures(report, spark, uri, lids, args)
            finally:
                spark.stop()
            packed = figures.get("packed (default plan)")
            unpacked = figures.get("one partition per ledger (minPartitions = ledgers)")
            report.add_ratio(f"{SMALL_SCAN_GOAL_S:.0f} s ÷ scan of {args.small:,} one-entry ledgers (packed)",
                             SMALL_SCAN_GOAL_S, packed, goal=1.0)
            report.add_ratio("scan time, one partition per ledger ÷ packed", unpacked, packed)
    report.machine_after = machine_facts()
    report.notes.append("planning figures are one partitions() call each, on a new client (its ZooKeeper session "
                        "included); packed scans are medians of --repeat runs after one warm-up scan, the one-per-ledger scan runs once.")
    return report


def _span(lids: list[int]) -> str:
    """The ``ledgers`` range of step 3: from the first small ledger, ten ids for each ledger."""
    return f"{min(lids)}-{min(lids) + 10 * len(lids)}"


def _range_plan_figures(report: Report, uri: str, lids: list[int], args: argparse.Namespace) -> None:
    """Step 3, planning: a ``ledgers`` range over the small ledgers beside their dataset, and the listings."""
    from bkspark.client import BookKeeper

    first = min(lids)
    span = _span(lids)
    if max(lids) > first + 10 * len(lids):
        report.fail("range", f"the small ledgers' ids {first}..{max(lids)} do not fit the range {span}")
        return
    plans = [_plan_seconds(uri, ledgers=span) for _ in range(args.repeat)]
    datasets = [_plan_seconds(uri, "small") for _ in range(args.repeat)]
    if plans[0][2] != len(lids):
        report.fail(f"planning range {span}", f"{plans[0][2]} slices planned, expected {len(lids)}")
    plan_s = statistics.median(p[0] for p in plans)
    report.row(f"planning the range ledgers={span} ({len(lids):,} one-entry ledgers in it)", plan_s, "s",
               partitions=plans[0][1], runs=[round(p[0], 3) for p in plans])
    report.row(f"planning the dataset of the same {len(lids):,} ledgers", statistics.median(p[0] for p in datasets), "s",
               partitions=datasets[0][1], runs=[round(p[0], 3) for p in datasets])
    with BookKeeper(uri) as bk:
        walks = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            listed = bk.store.list_ledgers_between(first, first + 10 * len(lids))
            walks.append(time.perf_counter() - started)
        before = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            everything = list(bk.store.list_ledgers())
            before.append(time.perf_counter() - started)
    report.row(f"listing the range's znodes ({len(listed):,} ledgers)", statistics.median(walks), "s")
    report.row(f"listing every ledger of the root, as a range plan did before ({len(everything):,} ledgers)",
               statistics.median(before), "s")


def _range_scan_figures(report: Report, spark: Any, uri: str, lids: list[int], args: argparse.Namespace) -> None:
    """Step 3, scanning: the range scanned by Spark as the dataset was."""
    span = _span(lids)
    _scan_seconds(spark, uri, None, ledgers=span)  # warm-up of this plan's path
    runs = [_scan_seconds(spark, uri, None, ledgers=span) for _ in range(args.repeat)]
    rows = _dataset_reader(spark, uri, None, ledgers=span).load().count()
    if rows != len(lids):
        report.fail(f"scan of range {span}", f"{rows} rows read, expected {len(lids)}")
    report.row(f"Spark scan of the range ledgers={span}", statistics.median(r[0] for r in runs), "s",
               partitions=runs[0][1], runs=[round(r[0], 2) for r in runs])


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.planning", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,10000,100000", help="dataset sizes to plan, comma-separated")
    p.add_argument("--small", type=int, default=2000, help="one-entry ledgers scanned end to end (0: skip)")
    p.add_argument("--cores", type=int, default=2, help="Spark local[cores]")
    p.add_argument("--repeat", type=int, default=3, help="timed scans per plan (median reported)")
    p.add_argument("--skip-scans", action="store_true", help="planning figures only: no Spark session, no scans")
    add_common_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(make_parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
