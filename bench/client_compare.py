"""Issue 4's benchmark: the bkspark client against Apache BookKeeper's Java client, on the same Java bookies.

    python -m bench.client_compare [--entries 50000] [--size 1024] [--outstanding 1000] [--bookies 3]

One ZooKeeper and --bookies Apache BookKeeper 4.17.3 bookies (fsync journal).  In one run:

1. batched ÷ single reads with the bkspark client: the same ledger read with ``batch_read(start, 100)`` and
   with ``read(i, i)``, one entry per call, as BP-62's measurement (bookkeeper perf tool, non-batch) read it
   (goal ≥ 25×; BP-62 measured ≈ 22× in Java); also against ``read(first, first+99)`` (one request per entry,
   pipelined by the client), where a batch has much less to save.  The Java client's ratios are printed too.
2. bkspark ÷ Java client (tools/java BenchClient): adds/s (--size byte entries, --outstanding in flight, each
   client its own ledger) and batched-read entries/s of the same ledger (goal ≥ 1.0×); and bkspark's bulk
   append (``append_many`` of --bulk entries per call, same window) ÷ Java's adds (issue 14, goal ≥ 1.5×).
3. bkspark batched-read MB/s ÷ raw loopback TCP MB/s of this machine (bench.rawsocket).

The ledgers are --ensemble/--write/--ack (default 3/3/2: every bookie holds every entry, so batch reads apply;
a striped ledger, E > W, would fall back to single reads).  Each figure is the median of --repeat rounds; the
rounds alternate the clients so that a change of load on the machine hits both.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
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
from bench.rawsocket import loopback_throughput


#: the client label of the --against-tree checkout's bkspark client
OLD = "bkspark (other tree)"

#: (workload key, label) of every figure, in the order they are printed
WORKLOADS: tuple[tuple[str, str], ...] = (
    ("write", "adds"),
    ("batch read", "batched reads"),
    ("single read", "single reads (pipelined ranges)"),
    ("entry read", "single reads (one entry per call)"),
    ("arrow read", "Arrow batches (read_batches, pipelined over the bookies)"),
)


def _clients(args: argparse.Namespace) -> list[str]:
    """The clients of each round, in the first round's order (later rounds rotate it)."""
    clients = [] if args.skip_java else ["java"]
    if args.against_tree:
        clients.append(OLD)
    clients.append("bkspark")
    return clients


def _tree_has(tree: str | None, *markers: str) -> bool:
    """Whether the other tree's ``bench/pyclient.py`` knows every marker (an option or mode it has): older trees
    have no bulk append or Arrow read, and their runs are left out rather than failed."""
    if not tree:
        return False
    try:
        text = (Path(tree) / "bench" / "pyclient.py").read_text()
    except OSError:
        return False
    return all(marker in text for marker in markers)


def _median_cpu(runs: list[dict[str, Any]]) -> float | None:
    """The median client process CPU time (``py_bench``'s ``process_cpu_s``) of some runs; None without any."""
    m = median_run([r for r in runs if "process_cpu_s" in r], key="process_cpu_s")
    return None if m is None else float(m["process_cpu_s"])


def run(args: argparse.Namespace) -> Report:
    report = Report(
        name="client_compare",
        title="bkspark client vs Apache BookKeeper Java client (issue 4)",
        command=command_line("bench.client_compare"),
        params={
            "entries": args.entries,
            "size": args.size,
            "outstanding": args.outstanding,
            "ensemble": f"{args.ensemble}/{args.write}/{args.ack}",
            "bookies": f"{args.bookies} x Java {args.bk_version}, fsync journal",
            "digest": args.digest,
            "batch": args.batch_size,
            "read_passes": args.passes,
            "single_read_passes": args.single_passes,
            "repeat": args.repeat,
            "against_tree": args.against_tree or "-",
            "bulk": args.bulk,
        },
    )
    report.machine_before = machine_facts()
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    broken: set[str] = set()
    old_has_bulk = _tree_has(args.against_tree, '"--bulk"')
    old_has_arrow = _tree_has(args.against_tree, '"arrow"')

    def attempt(client: str, what: str, fn: Any) -> dict[str, Any] | None:
        if client in broken:
            return None
        try:
            r = fn()
        except Unavailable as exc:
            report.fail(f"{client} client {what}", exc)
            broken.add(client)
            return None
        except BenchError as exc:
            report.fail(f"{client} client {what}", exc)
            return None
        r["label"] = client  # which client (and tree) made it, in the JSON's raw records
        runs.setdefault((client, what), []).append(r)
        report.raw.append(r)
        return r

    with Cluster(args.workdir, args.keep, make_jars=not args.no_make) as cluster:
        with timed(f"starting {args.bookies} Java {args.bk_version} bookies"):
            uri = cluster.new_root("java")
            cluster.java_bookies(uri, args.bookies, args.bk_version, "java")
        common = dict(digest=args.digest, password="bench")
        wopts = dict(
            ensemble=args.ensemble, write=args.write, ack=args.ack, entries=args.entries, size=args.size,
            outstanding=args.outstanding, warmup=args.warmup, **common,
        )
        ropts = dict(batch_size=args.batch_size, max_size=args.max_size, warmup_passes=1, **common)
        clients = _clients(args)

        def bench(client: str, command: str, opts: dict[str, Any]) -> dict[str, Any]:
            if client == "java":
                return java_bench(cluster, args.bk_version, uri, command, **opts)
            return py_bench(uri, command, tree=args.against_tree if client == OLD else None, **opts)

        for rnd in range(args.repeat):
            # rotate the order each round, so that a change of load on the machine hits every client alike
            order = clients[rnd % len(clients):] + clients[: rnd % len(clients)]
            ledger = None
            with timed(f"round {rnd + 1}/{args.repeat}: writes"):
                for client in order:
                    w = attempt(client, "write", lambda c=client: bench(c, "write", wopts))
                    if args.bulk > 0 and (client == "bkspark" or (client == OLD and old_has_bulk)):
                        attempt(client, "bulk write", lambda c=client: bench(c, "write", dict(wopts, bulk=args.bulk)))
                    if w is not None and (ledger is None or client == "java"):
                        ledger = int(w["ledger_id"])  # both clients read the Java-written ledger when there is one
            if ledger is None:
                report.fail("reads", "no ledger was written")
                break
            with timed(f"round {rnd + 1}/{args.repeat}: reads of ledger {ledger}"):
                for client in order:
                    reads = (
                        ("batch read", "batch", args.passes, args.batch_size),
                        ("single read", "single", args.single_passes, args.batch_size),
                        ("entry read", "single", args.single_passes, 1),  # one entry per call: BP-62's method
                    )
                    if client == "bkspark" or (client == OLD and old_has_arrow):  # the Arrow read path (issue 14)
                        reads += (("arrow read", "arrow", args.passes, args.batch_size),)
                    reads = tuple(r for r in reads if r[0].split()[0] in args.reads.split(","))
                    for what, mode, passes, per_call in reads:
                        opts = dict(ropts, ledger=ledger, mode=mode, passes=passes, batch_size=per_call)
                        attempt(client, what, lambda c=client, o=opts: bench(c, "read", o))

    loop = None
    with timed("raw loopback TCP throughput"):
        try:
            loop = loopback_throughput(args.loopback_mib)
        except Exception as exc:  # noqa: BLE001
            report.fail("raw loopback probe", exc)

    fig: dict[tuple[str, str], dict[str, Any] | None] = {}
    for client in ("bkspark", OLD, "java"):
        for what, label in (*WORKLOADS, ("bulk write", f"adds, append_many of {args.bulk}")):
            m = median_run(runs.get((client, what), []))
            fig[(client, what)] = m
            if m is None:
                continue
            lat = m.get("latency_ms", {})
            report.row(
                f"{client} client: {label}",
                float(m["entries_per_sec"]),
                "entries/s",
                mb_s=float(m["mb_per_sec"]),
                p50_ms=lat.get("p50"),
                p99_ms=lat.get("p99"),
                runs=len(runs.get((client, what), [])),
            )
    if loop is not None:
        report.row("raw loopback TCP, 1 connection, 1 MiB buffers", float(loop["mb_per_sec"]), "MB/s")

    def eps(client: str, what: str) -> float | None:
        m = fig.get((client, what))
        return None if m is None else float(m["entries_per_sec"])

    report.add_ratio(
        "(1) bkspark batched ÷ single reads, one entry per call (BP-62's method)",
        eps("bkspark", "batch read"), eps("bkspark", "entry read"), goal=25.0,
    )
    report.add_ratio(
        "(1') Java client batched ÷ single reads, one entry per call (reference)",
        eps("java", "batch read"), eps("java", "entry read"),
    )
    report.add_ratio(
        "(1b) bkspark batched ÷ single reads, pipelined 100-entry ranges",
        eps("bkspark", "batch read"), eps("bkspark", "single read"),
    )
    report.add_ratio(
        "(1b') Java client batched ÷ single reads, pipelined 100-entry ranges (reference)",
        eps("java", "batch read"), eps("java", "single read"),
    )
    report.add_ratio("(2) adds/s, bkspark ÷ Java client", eps("bkspark", "write"), eps("java", "write"), goal=1.0)
    report.add_ratio(
        f"(2b) adds/s, bkspark bulk append ({args.bulk} per append_many) ÷ Java client",
        eps("bkspark", "bulk write"), eps("java", "write"), goal=1.5,
    )
    report.add_ratio(
        "(2) batched-read entries/s, bkspark ÷ Java client", eps("bkspark", "batch read"), eps("java", "batch read"), goal=1.0
    )
    report.add_ratio(
        "(2a) Arrow read_batches entries/s, bkspark ÷ Java client batched reads",
        eps("bkspark", "arrow read"), eps("java", "batch read"), goal=2.0,
    )
    report.add_ratio("(2') single-read entries/s, bkspark ÷ Java client", eps("bkspark", "single read"), eps("java", "single read"))
    m = fig.get(("bkspark", "batch read"))
    report.add_ratio(
        "(3) bkspark batched-read MB/s ÷ raw loopback MB/s",
        None if m is None else float(m["mb_per_sec"]),
        None if loop is None else float(loop["mb_per_sec"]),
    )
    if args.against_tree:
        compared = [
            (what, label) for what, label in (*WORKLOADS, ("bulk write", f"adds, append_many of {args.bulk}"))
            if (what != "arrow read" or old_has_arrow) and (what != "bulk write" or (old_has_bulk and args.bulk > 0))
        ]
        for what, label in compared:
            report.add_ratio(f"(4) {label}, this tree ÷ {args.against_tree}", eps("bkspark", what), eps(OLD, what))
        for what, label in compared:
            report.add_ratio(
                f"(4c) {label}, client process CPU seconds, {args.against_tree} ÷ this tree (> 1: this tree "
                "uses less)",
                _median_cpu(runs.get((OLD, what), [])), _median_cpu(runs.get(("bkspark", what), [])),
            )
    report.notes.append(
        f"Reads: one call at a time (batch of {args.batch_size}, or a range of {args.batch_size} single reads, all "
        "pipelined by the client); latency columns are per call. Adds: latency per add."
    )
    report.notes.append("MB/s counts payload bytes (10^6 bytes/s).")
    report.machine_after = machine_facts()
    return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.client_compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=50_000, help="entries per write run (default 50000)")
    p.add_argument("--size", type=int, default=1024, help="entry size in bytes (default 1024)")
    p.add_argument("--outstanding", type=int, default=1000, help="adds in flight (default 1000)")
    p.add_argument("--warmup", type=int, default=10000, help="untimed adds before each write run (default 10000)")
    p.add_argument("--bulk", type=int, default=100,
                   help="entries per append_many call for bkspark's bulk-append run (0: no such run; default 100)")
    p.add_argument("--bookies", type=int, default=3)
    p.add_argument("--ensemble", type=int, default=3)
    p.add_argument("--write", type=int, default=3)
    p.add_argument("--ack", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--max-size", type=int, default=1024 * 1024, help="batch read max size in bytes")
    p.add_argument("--passes", type=int, default=3, help="timed batched-read passes (default 3)")
    p.add_argument("--single-passes", type=int, default=1, help="timed single-read passes (default 1)")
    p.add_argument("--repeat", type=int, default=3, help="rounds; the median is reported (default 3)")
    p.add_argument("--digest", default="CRC32C")
    p.add_argument(
        "--against-tree",
        metavar="PATH",
        help="also run the bkspark client of another checkout (e.g. `git worktree add --detach PATH COMMIT`), "
        "interleaved with this tree's in every round, and print this tree ÷ that tree per workload",
    )
    p.add_argument(
        "--reads",
        default="batch,single,entry,arrow",
        help="read workloads to run, comma-separated among batch, single, entry, arrow (default: all)",
    )
    p.add_argument("--skip-java", action="store_true", help="leave out Apache BookKeeper's Java client")
    p.add_argument("--loopback-mib", type=int, default=2048, help="MiB pushed by the raw loopback probe")
    add_common_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
