"""A striped ledger read with pipelined single reads: entries/s and the CPU each side spends per entry.

    python -m bench.striped_reads [--entries 200000] [--size 100] [--rounds 2] [--tree PATH] [--json PATH]

A striped ledger (E/W/A 3/2/2, ``make demo``'s) cannot be batch-read, so every entry is one READENTRY request
(docs/client.md, "Read path"). Per round, on three fresh Python bookies: the bkspark client writes one ledger of
--entries entries, the bookies restart (every entry on disk, the read caches empty), and ``bench.pyclient read
--mode arrow`` (``read_batches``, what the Spark reader uses) reads it once cold, then once warm (from the read
caches). For each pass: entries/s, the client's CPU per entry (its own process time over the pass), and the
bookies' CPU per entry (``/proc/<pid>/stat``, all three, user + system), with the event loop threads' share.

With ``--tree PATH`` (another checkout, e.g. a ``git worktree`` of an older commit, its extensions built) each
round also runs that tree's bookies and client, the two trees alternating, and the ratios this tree ÷ that one
are printed: CPU is what the machine's load disturbs least, so compare the CPU lines first.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, Cluster, machine_facts, medians, py_bench
from bench.write_cpu import cpu_seconds as _cpu


def one_round(args: argparse.Namespace, tree: Path) -> dict[str, float]:
    """Write, restart, read cold and warm with the bookies and the client of ``tree``."""
    from tests.harness.python_bookie import PythonBookieCluster

    with Cluster(make_jars=False) as cluster:  # no Java side: no jars needed
        uri = cluster.new_root("striped")
        bookies = PythonBookieCluster(uri, cluster.base / "bookies", bookies=3, journal_sync_data=True, tree=tree)
        bookies.start_all()
        cluster.callback(bookies.close)
        w = py_bench(uri, "write", tree=tree, entries=args.entries, size=args.size, ensemble=3, write=2, ack=2,
                     bulk=500)
        bookies.close()
        bookies.start_all()  # every entry on disk now, the read caches empty
        pids = [b.process.pid for b in bookies.bookies]  # type: ignore[union-attr]
        out: dict[str, float] = {}
        for label in ("cold", "warm"):
            before = [_cpu(p) for p in pids]
            loops_before = [_cpu(p, p) for p in pids]
            r = py_bench(uri, "read", tree=tree, ledger=w["ledger_id"], mode="arrow", passes=1, warmup_passes=0)
            bookie_s = sum(_cpu(p) for p in pids) - sum(before)
            loop_s = sum(_cpu(p, p) for p in pids) - sum(loops_before)
            n = float(r["entries"])
            out[f"{label} entries/s"] = float(r["entries_per_sec"])
            out[f"{label} client µs/entry"] = float(r["cpu_seconds"]) * 1e6 / n
            out[f"{label} bookies µs/entry"] = bookie_s * 1e6 / n
            out[f"{label} bookie loops µs/entry"] = loop_s * 1e6 / n
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.striped_reads", description=__doc__.splitlines()[0])
    p.add_argument("--entries", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2, help="rounds (per tree, alternated); medians printed")
    p.add_argument("--tree", type=Path, help="another checkout to run side by side (its bookies and client)")
    p.add_argument("--json", type=Path, help="also write the results as JSON to PATH")
    args = p.parse_args(argv)
    machine = machine_facts()
    print(f"machine: {machine['cores']} cores, load average {machine['loadavg_1_5_15']}; {machine['date']}")
    trees = {"this tree": REPO_ROOT} | ({"other tree": args.tree.resolve()} if args.tree else {})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            runs[name].append(one_round(args, tree))
    med = {name: medians(rounds) for name, rounds in runs.items()}
    keys = list(med["this tree"])
    print(f"{args.entries:,} entries of {args.size} B, E/W/A 3/2/2, 3 Python bookies; medians of {args.rounds} "
          f"round(s)")
    print(f"{'':34}" + "".join(f"{name:>14}" for name in trees) + ("         ratio" if args.tree else ""))
    for key in keys:
        row = [med[name][key] for name in trees]
        line = f"{key:34}" + "".join(f"{v:>14,.2f}" if v < 1000 else f"{v:>14,.0f}" for v in row)
        if args.tree:
            line += f"{row[0] / row[1]:>13.2f}x"
        print(line)
    print(f"load average after: {machine_facts()['loadavg_1_5_15']}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "args": {k: str(v) for k, v in vars(args).items()},
                                         "trees": {k: str(v) for k, v in trees.items()}, "runs": runs,
                                         "medians": med}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
