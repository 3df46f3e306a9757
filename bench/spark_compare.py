"""Issue 5's benchmark: the Spark connector against the raw bkspark client, on the same ledgers, in one run.

    python -m bench.spark_compare [--rows 100000] [--size 1024] [--bookies 3] [--bookie-kind java|python]

One ZooKeeper and --bookies bookies (Apache BookKeeper 4.17.3 by default, fsync journal); Spark ``local[2]``
(``local[N]`` with N = the machine's cores) started in this process with PYSPARK_PYTHON = this interpreter.

* write: ``df.write.format("bookkeeper").mode("append")`` of --rows rows of --size byte payloads in one
  partition per core (one ledger per task), against the raw client appending the same number of entries
  to one ledger (``bench.pyclient write``, --outstanding in flight).  Goal: Spark ÷ raw ≥ 0.8.
* read: the dataset just written, read with ``spark.read.format("bookkeeper")`` and 1 and 2 partitions per
  core (``maxEntriesPerPartition``), materialised with the ``noop`` sink; against the raw client reading the
  same ledgers with batched reads of the same size (``bench.pyclient read --mode batch``), one after the
  other.  Goal: Spark ÷ raw ≥ 0.8.

Every Spark job runs once untimed first (Python workers start, clients connect), then timed.  Spark uses all
cores; the raw client is one process, one call at a time: the ratio is what a user gets either way.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any

from bench.common import (
    BenchError,
    Cluster,
    Report,
    add_common_args,
    command_line,
    machine_facts,
    py_bench,
    run_main,
    spark_session,
    timed,
)


def _spark(cores: int) -> Any:
    return spark_session(cores, "bkspark-bench")


def _dataset_ledgers(uri: str, name: str) -> list[int]:
    from bkspark.client import BookKeeper
    from bkspark.datasource.clients import client_root, client_zk
    from bkspark.datasource.datasets import DatasetRegistry

    with BookKeeper(metadata_service_uri=uri) as bk:
        manifest = DatasetRegistry(client_zk(bk), client_root(bk)).manifest(name)
        if manifest is None:
            raise BenchError(f"dataset {name!r} has no manifest after the Spark write")
        return [int(lid) for _scope, lid in manifest.ledgers]


def run(args: argparse.Namespace) -> Report:
    cores = args.cores or os.cpu_count() or 2
    report = Report(
        name="spark_compare",
        title="Spark connector vs raw bkspark client (issue 5)",
        command=command_line("bench.spark_compare"),
        params={
            "rows": args.rows,
            "size": args.size,
            "spark": f"local[{cores}]",
            "bookies": f"{args.bookies} x {args.bookie_kind}" + (f" {args.bk_version}" if args.bookie_kind == "java" else ""),
            "ensemble": f"{args.ensemble}/{args.write}/{args.ack}",
            "batch": f"{args.batch_size} entries / {args.max_size} bytes",
            "outstanding": args.outstanding,
        },
    )
    report.machine_before = machine_facts()
    raw_write = raw_read = None
    spark_write = None
    spark_reads: dict[int, float] = {}
    with Cluster(args.workdir, args.keep, make_jars=not args.no_make) as cluster:
        with timed(f"starting {args.bookies} {args.bookie_kind} bookies"):
            uri = cluster.new_root(args.bookie_kind)
            if args.bookie_kind == "java":
                cluster.java_bookies(uri, args.bookies, args.bk_version, "java")
            else:
                cluster.python_bookies(uri, args.bookies, "python")
        with timed("raw client append"):
            try:
                raw_write = py_bench(
                    uri, "write", ensemble=args.ensemble, write=args.write, ack=args.ack, entries=args.rows,
                    size=args.size, outstanding=args.outstanding, warmup=min(args.rows, 5000), digest="CRC32C",
                )
            except BenchError as exc:
                report.fail("raw client append", exc)
        spark = None
        with timed(f"starting Spark local[{cores}]"):
            try:
                spark = _spark(cores)
            except Exception as exc:  # noqa: BLE001
                report.fail("Spark session", exc)
        ledgers: list[int] = []
        if spark is not None:
            try:
                from pyspark.sql import functions as F

                def frame(rows: int) -> Any:
                    return spark.range(0, rows, 1, cores).select(
                        F.expr(f"cast(repeat('x', {args.size}) as binary)").alias("payload")
                    )

                wopts = {
                    "metadataServiceUri": uri,
                    "ensembleSize": str(args.ensemble),
                    "writeQuorumSize": str(args.write),
                    "ackQuorumSize": str(args.ack),
                    "digestType": "CRC32C",
                }
                with timed("Spark write (warm-up, untimed)"):
                    frame(min(args.rows, 2000)).write.format("bookkeeper").options(**wopts).option(
                        "dataset", "bench-warmup"
                    ).mode("append").save()
                with timed(f"Spark write of {args.rows} rows"):
                    t0 = time.perf_counter()
                    frame(args.rows).write.format("bookkeeper").options(**wopts).option("dataset", "bench").mode(
                        "append"
                    ).save()
                    spark_write = args.rows / (time.perf_counter() - t0)
                ledgers = _dataset_ledgers(uri, "bench")
            except Exception as exc:  # noqa: BLE001 - the connector may not be ready: say so, go on
                report.fail("Spark write (df.write.format('bookkeeper'))", f"{type(exc).__name__}: {str(exc)[:1500]}")
        if ledgers:
            with timed(f"raw client batched reads of the Spark-written ledgers {ledgers}"):
                try:
                    entries = 0
                    secs = 0.0
                    for lid in ledgers:
                        r = py_bench(
                            uri, "read", ledger=lid, mode="batch", batch_size=args.batch_size, max_size=args.max_size,
                            passes=1, warmup_passes=1, digest="CRC32C",
                        )
                        entries += int(r["entries"])
                        secs += float(r["seconds"])
                    raw_read = entries / secs
                except BenchError as exc:
                    report.fail("raw client batched reads", exc)
            for per_core in (1, 2):
                parts = cores * per_core
                per_part = max(1, math.ceil(args.rows / parts))
                ropts = {
                    "metadataServiceUri": uri,
                    "dataset": "bench",
                    "maxEntriesPerPartition": str(per_part),
                    "batchMaxCount": str(args.batch_size),
                    "batchMaxSize": str(args.max_size),
                    "digestType": "CRC32C",
                }
                try:
                    df = spark.read.format("bookkeeper").options(**ropts).load()
                    nparts = df.rdd.getNumPartitions()
                    with timed(f"Spark read, {per_core} partition(s) per core ({nparts} partitions), warm-up"):
                        df.write.format("noop").mode("overwrite").save()
                    with timed(f"Spark read, {per_core} partition(s) per core ({nparts} partitions)"):
                        t0 = time.perf_counter()
                        df.write.format("noop").mode("overwrite").save()
                        spark_reads[per_core] = args.rows / (time.perf_counter() - t0)
                    report.notes.append(f"{per_core} partition(s) per core: Spark planned {nparts} partitions.")
                except Exception as exc:  # noqa: BLE001
                    report.fail(f"Spark read, {per_core} partition(s) per core", f"{type(exc).__name__}: {str(exc)[:1500]}")
            if args.verify:
                try:
                    n = spark.read.format("bookkeeper").options(metadataServiceUri=uri, dataset="bench").load().count()
                    report.notes.append(f"verify: Spark counted {n} rows, {args.rows} written")
                    if n != args.rows:
                        report.fail("verify", f"Spark counted {n} rows, {args.rows} were written")
                except Exception as exc:  # noqa: BLE001
                    report.fail("verify", exc)
        if spark is not None:
            spark.stop()

    mb = args.size / 1e6
    if raw_write is not None:
        report.row("raw client append (1 ledger)", float(raw_write["entries_per_sec"]), "entries/s",
                   mb_s=float(raw_write["mb_per_sec"]))
    if spark_write is not None:
        report.row(f"Spark write ({cores} tasks, 1 ledger each)", spark_write, "rows/s", mb_s=spark_write * mb)
    if raw_read is not None:
        report.row(f"raw client batched reads ({len(ledgers)} ledgers, one after the other)", raw_read, "entries/s",
                   mb_s=raw_read * mb)
    for per_core, v in spark_reads.items():
        report.row(f"Spark read, {per_core} partition(s) per core", v, "rows/s", mb_s=v * mb)
    report.add_ratio(
        "write: Spark ÷ raw client append", spark_write, None if raw_write is None else float(raw_write["entries_per_sec"]),
        goal=0.8,
    )
    for per_core in (1, 2):
        report.add_ratio(f"read, {per_core} partition(s)/core: Spark ÷ raw client batched read", spark_reads.get(per_core),
                         raw_read, goal=0.8)
    report.notes.append(
        "Spark timings cover the whole job (planning, tasks, commit) after an untimed warm-up job; "
        "the read jobs end in the noop sink, so every row is produced and dropped."
    )
    report.machine_after = machine_facts()
    return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.spark_compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100_000, help="rows written and read (default 100000)")
    p.add_argument("--size", type=int, default=1024, help="payload bytes per row (default 1024)")
    p.add_argument("--cores", type=int, default=0, help="Spark local[N] (default: the machine's cores)")
    p.add_argument("--bookies", type=int, default=3)
    p.add_argument("--bookie-kind", choices=("java", "python"), default="java")
    p.add_argument("--ensemble", type=int, default=3)
    p.add_argument("--write", type=int, default=3)
    p.add_argument("--ack", type=int, default=2)
    p.add_argument("--outstanding", type=int, default=1000, help="raw client adds in flight (default 1000)")
    p.add_argument("--batch-size", type=int, default=1000, help="batch read max count, both sides (connector default)")
    p.add_argument("--max-size", type=int, default=4 * 1024 * 1024, help="batch read max bytes, both sides")
    p.add_argument("--verify", action="store_true", help="also count the rows Spark reads back")
    add_common_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
