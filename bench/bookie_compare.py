"""Issue 3's benchmark: the Python bookie against a Java bookie, with the same client, in one run.

    python -m bench.bookie_compare [--entries 50000] [--size 1024] [--outstanding 1000] [--clients bkspark,java]

Starts one ZooKeeper and two ledger roots on it: one with a single Python bookie (bookie_server, fsync
journal), one with a single Apache BookKeeper 4.17.3 bookie (fsync journal, DbLedgerStorage).  With each
client (ours, ``bench.pyclient``; Apache BookKeeper's, ``BenchClient``) and each bookie, on ensemble 1/1/1:
adds/s of --size byte entries with --outstanding adds in flight, then batched-read entries/s (batch 100) of
that ledger.  Prints Python-bookie ÷ Java-bookie ratios per client (goal: ≥ 1.0 on both).

Measurements alternate between the bookies (client A on Python, on Java, client B on Python, on Java ...) and
--repeat N takes the median of N rounds, so that a load change on the machine hits both sides alike.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bench.common import (
    BenchError,
    Cluster,
    Report,
    Unavailable,
    add_common_args,
    command_line,
    java_bench,
    machine_facts,
    median_run,
    py_bench,
    run_main,
    timed,
)

CLIENTS = ("bkspark", "java")


def run(args: argparse.Namespace) -> Report:
    report = Report(
        name="bookie_compare",
        title="Python bookie vs Java bookie (issue 3)",
        command=command_line("bench.bookie_compare"),
        params={
            "entries": args.entries,
            "size": args.size,
            "outstanding": args.outstanding,
            "ensemble": "1/1/1",
            "digest": args.digest,
            "batch": args.batch_size,
            "read_passes": args.passes,
            "repeat": args.repeat,
            "java_bookie": args.bk_version,
            "journal": "fsync on both",
        },
    )
    report.machine_before = machine_facts()
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    for c in clients:
        if c not in CLIENTS:
            raise SystemExit(f"--clients takes {', '.join(CLIENTS)}, not {c!r}")
    with Cluster(args.workdir, args.keep, make_jars=not args.no_make) as cluster:
        bookies: dict[str, str] = {}
        with timed("starting the Java bookie"):
            uri = cluster.new_root("java")
            try:
                cluster.java_bookies(uri, 1, args.bk_version, "java")
                bookies["java"] = uri
            except Exception as exc:  # noqa: BLE001
                report.fail(f"Java {args.bk_version} bookie", exc)
        with timed("starting the Python bookie"):
            uri = cluster.new_root("python")
            try:
                cluster.python_bookies(uri, 1, "python")
                bookies["python"] = uri
            except Exception as exc:  # noqa: BLE001
                report.fail("Python bookie (bookie_server)", exc)

        results: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        broken: set[tuple[str, str]] = set()
        for rnd in range(args.repeat):
            for client in clients:
                for bookie in ("python", "java"):
                    if bookie not in bookies or (client, bookie) in broken:
                        continue
                    uri = bookies[bookie]
                    with timed(f"round {rnd + 1}/{args.repeat}: {client} client -> {bookie} bookie"):
                        try:
                            w = _write(cluster, args, client, uri)
                            results.setdefault((client, bookie, "write"), []).append(w)
                            report.raw.append({"client": client, "bookie": bookie, **w})
                            r = _read(cluster, args, client, uri, int(w["ledger_id"]))
                            results.setdefault((client, bookie, "read"), []).append(r)
                            report.raw.append({"client": client, "bookie": bookie, **r})
                        except Unavailable as exc:
                            report.fail(f"{client} client on the {bookie} bookie", exc)
                            broken.add((client, bookie))
                        except BenchError as exc:
                            report.fail(f"{client} client on the {bookie} bookie", exc)
                            broken.add((client, bookie))

        for client in clients:
            figures: dict[tuple[str, str], float | None] = {}
            for bookie in ("python", "java"):
                for op, label in (("write", "adds"), ("read", "batched reads")):
                    runs = results.get((client, bookie, op))
                    if not runs:
                        figures[(bookie, op)] = None
                        continue
                    m = median_run(runs)
                    figures[(bookie, op)] = float(m["entries_per_sec"])
                    lat = m.get("latency_ms", {})
                    report.row(
                        f"{client} client, {bookie} bookie: {label}",
                        float(m["entries_per_sec"]),
                        "entries/s",
                        mb_s=float(m["mb_per_sec"]),
                        p50_ms=lat.get("p50"),
                        p99_ms=lat.get("p99"),
                        runs=len(runs),
                    )
            report.add_ratio(
                f"{client} client: adds/s, Python bookie ÷ Java bookie",
                figures.get(("python", "write")),
                figures.get(("java", "write")),
                goal=1.0,
            )
            report.add_ratio(
                f"{client} client: batched-read entries/s, Python bookie ÷ Java bookie",
                figures.get(("python", "read")),
                figures.get(("java", "read")),
                goal=1.0,
            )
    report.notes.append(
        "Latency columns: per add, and per batch_read call (batch of "
        f"{args.batch_size}); reads go one call at a time, adds with {args.outstanding} outstanding."
    )
    report.machine_after = machine_facts()
    return report


def _write(cluster: Cluster, args: argparse.Namespace, client: str, uri: str) -> dict[str, Any]:
    opts = dict(
        ensemble=1, write=1, ack=1, digest=args.digest, password="bench",
        entries=args.entries, size=args.size, outstanding=args.outstanding, warmup=args.warmup,
    )
    if client == "java":
        return java_bench(cluster, args.bk_version, uri, "write", **opts)
    return py_bench(uri, "write", **opts)


def _read(cluster: Cluster, args: argparse.Namespace, client: str, uri: str, ledger: int) -> dict[str, Any]:
    opts = dict(
        ledger=ledger, digest=args.digest, password="bench", mode="batch", batch_size=args.batch_size,
        max_size=args.max_size, passes=args.passes, warmup_passes=1,
    )
    if client == "java":
        return java_bench(cluster, args.bk_version, uri, "read", **opts)
    return py_bench(uri, "read", **opts)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.bookie_compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=50_000, help="entries per write run (default 50000)")
    p.add_argument("--size", type=int, default=1024, help="entry size in bytes (default 1024)")
    p.add_argument("--outstanding", type=int, default=1000, help="adds in flight (default 1000)")
    p.add_argument("--warmup", type=int, default=10000, help="untimed adds before each write run (default 10000)")
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--max-size", type=int, default=1024 * 1024, help="batch read max size in bytes")
    p.add_argument("--passes", type=int, default=3, help="timed read passes over the ledger (default 3)")
    p.add_argument("--repeat", type=int, default=3, help="rounds; the median is reported (default 3)")
    p.add_argument("--digest", default="CRC32C")
    p.add_argument("--clients", default="bkspark,java", help="comma-separated: bkspark, java")
    add_common_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
