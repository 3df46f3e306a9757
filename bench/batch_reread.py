"""Batch reads of ledgers only the disk holds, read once and then again, by this tree's Python bookie and by
another checkout's (an older commit's worktree), alternating.

    python -m bench.batch_reread --against-tree PATH [--entries 40000,200000] [--size 1024] [--rounds 3]

For each tree in every round, on a fresh Python bookie of that tree (fsync journal): Apache BookKeeper's Java
client (``BenchClient``, no Python in the reader) writes one ledger of each --entries count (ensemble 1/1/1), the
bookie restarts (its start-up checkpoint puts every entry on disk, the read cache empty), then the Java client
batch-reads each ledger once (the first pass, from disk) and then three passes more (again: from the read
cache, when the bookie kept what it read and the ledger fits it).  The default counts are a ledger that fits
the bookie's 64 MiB read cache and one that does not.  Prints the medians of entries/s per tree and this tree ÷
that tree, and of the bookie process's CPU per entry read (``/proc/<pid>/stat``, user + system; the Java client's
rates move with its own JIT warming up, the bookie's CPU does not).  What is measured: docs/bookie.md, "Reads"
(batch reads cached as ranges).

The other tree runs from its own directory (``python -m bookie_server`` imports that tree's code); give it this
tree's venv and compiled extensions (``make`` builds them in place; copy ``*/_speedups*.so`` when the C sources
are the same), or its bookie runs without them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.common import DEFAULT_BK_VERSION, REPO_ROOT, Cluster, java_bench, machine_facts, medians
from bench.write_cpu import cpu_seconds


def one_round(args: argparse.Namespace, tree: Path, counts: list[int]) -> dict[str, float]:
    """``{"<entries> first": rate, "<entries> again": rate, ...}`` on a fresh bookie of ``tree``."""
    from tests.harness.python_bookie import PythonBookieCluster

    out: dict[str, float] = {}
    with Cluster(make_jars=not args.no_make) as cluster:
        uri = cluster.new_root("reread")
        bookies = PythonBookieCluster(uri, cluster.base / "bookies", bookies=1, journal_sync_data=True, tree=tree)
        bookies.start_all()
        cluster.callback(bookies.close)
        ledgers = {}
        for n in counts:
            w = java_bench(cluster, args.bk_version, uri, "write", ensemble=1, entries=n, size=args.size,
                           outstanding=1000, warmup=0, digest="CRC32C")
            ledgers[n] = w["ledger_id"]
        bookies.close()
        bookies.start_all()  # every entry on disk now, the read cache empty
        process = bookies.bookies[0].process
        assert process is not None
        for n, ledger in ledgers.items():
            for label, passes in (("first", 1), ("again", 3)):
                cpu_before = cpu_seconds(process.pid)
                r = java_bench(cluster, args.bk_version, uri, "read", ledger=ledger, mode="batch", passes=passes,
                               warmup_passes=0, digest="CRC32C")
                out[f"{n} {label}"] = float(r["entries_per_sec"])
                out[f"{n} {label} cpu"] = (cpu_seconds(process.pid) - cpu_before) * 1e6 / (n * passes)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.batch_reread", description=__doc__.splitlines()[0])
    p.add_argument("--against-tree", required=True, help="another checkout of this repository (e.g. a worktree)")
    p.add_argument("--entries", default="40000,200000", help="entries of each ledger, comma-separated")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=3, help="rounds, the trees alternating in each; medians printed")
    p.add_argument("--bk-version", default=DEFAULT_BK_VERSION, help="Apache BookKeeper version of the Java client")
    p.add_argument("--no-make", action="store_true", help="do not run make for the jars")
    args = p.parse_args(argv)
    counts = [int(c) for c in args.entries.split(",") if c.strip()]
    trees = {"this tree": REPO_ROOT, "that tree": Path(args.against_tree).resolve()}
    machine = machine_facts()
    print(f"machine: {machine['cores']} cores, load average {machine['loadavg_1_5_15']}; {machine['date']}; "
          f"this tree {machine['code']}, that tree {trees['that tree']}")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for rnd in range(args.rounds):
        order = list(trees.items()) if rnd % 2 == 0 else list(reversed(trees.items()))
        for name, tree in order:
            runs[name].append(one_round(args, tree, counts))
            print(f"  round {rnd}, {name}: {runs[name][-1]}", flush=True)
    print_medians({name: medians(rounds) for name, rounds in runs.items()}, args.size)
    print(f"load average after: {machine_facts()['loadavg_1_5_15']}")
    return 0


def print_medians(med: dict[str, dict[str, float]], size: int) -> None:
    """One line per ledger and pass: both trees' medians of entries/s and their ratio, then of the bookie's CPU."""
    this, that = med["this tree"], med["that tree"]
    for key in this:
        if key.endswith(" cpu"):
            continue
        entries, label = key.split()
        cpu = f"{key} cpu"
        print(f"{int(entries):>8,} entries of {size} B, {label:>5} pass: this tree {this[key]:>9,.0f}, "
              f"that tree {that[key]:>9,.0f} entries/s; this ÷ that {this[key] / that[key]:.2f}x; "
              f"the bookie's CPU per entry {this[cpu]:.1f} and {that[cpu]:.1f} µs, this ÷ that {this[cpu] / that[cpu]:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
