"""The Python bookie's read-ahead: pipelined single reads of a striped ledger, cold and warm, read-ahead off and on.

    python -m bench.read_ahead [--entries 300000] [--size 100] [--batch-sizes 1,100] [--rounds 1]

For each ``dbStorage_readAheadCacheBatchSize`` of --batch-sizes (1: no read-ahead; 100: BookKeeper's default),
on a fresh set of three Python bookies: the bkspark client writes one ledger of --entries entries, E/W/A
3/2/2 (striped: it can only be read with single reads, as ``make demo``'s ledgers), the bookies restart (the
journal replays and the start-up checkpoint puts every entry on disk, the read cache empty), and
``bench.pyclient read --mode single`` reads the whole ledger twice: the first pass cold (from disk), the second
warm (from the read cache).  Prints entries/s of each pass and the ratio of each batch size to the first one
(docs/bookie.md, "Reads").
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bench.common import Cluster, machine_facts, medians, py_bench


def one_round(args: argparse.Namespace, batch_size: int) -> dict[str, float]:
    from tests.harness.python_bookie import PythonBookieCluster

    with Cluster(make_jars=False) as cluster:  # no Java side: no jars needed
        uri = cluster.new_root(f"ahead{batch_size}")
        bookies = PythonBookieCluster(
            uri, cluster.base / "bookies", bookies=3, journal_sync_data=True,
            conf_overrides={"dbStorage_readAheadCacheBatchSize": batch_size},
        )
        bookies.start_all()
        cluster.callback(bookies.close)
        w = py_bench(uri, "write", entries=args.entries, size=args.size, ensemble=3, write=2, ack=2, bulk=500)
        bookies.close()
        bookies.start_all()  # every entry on disk now, the read caches empty
        passes: list[Any] = [
            py_bench(uri, "read", ledger=w["ledger_id"], mode="single", passes=1, warmup_passes=0)
            for _ in range(2)
        ]
        return {"cold": float(passes[0]["entries_per_sec"]), "warm": float(passes[1]["entries_per_sec"])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.read_ahead", description=__doc__.splitlines()[0])
    p.add_argument("--entries", type=int, default=300_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--batch-sizes", default="1,100", help="dbStorage_readAheadCacheBatchSize values, first = base")
    p.add_argument("--rounds", type=int, default=1, help="rounds per batch size, alternated; medians printed")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    machine = machine_facts()
    print(f"machine: {machine['cores']} cores, load average {machine['loadavg_1_5_15']}; {machine['date']}")
    runs: dict[int, list[dict[str, float]]] = {s: [] for s in sizes}
    for _ in range(args.rounds):
        for size in sizes:
            runs[size].append(one_round(args, size))
    base = medians(runs[sizes[0]])
    for size in sizes:
        med = medians(runs[size])
        print(f"read-ahead batch {size:>4}: cold pass {med['cold']:>9,.0f} entries/s ({med['cold'] / base['cold']:.2f}x), "
              f"warm pass {med['warm']:>9,.0f} entries/s ({med['warm'] / base['warm']:.2f}x)")
    print(f"load average after: {machine_facts()['loadavg_1_5_15']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
