"""The Python bookie's event loop, this checkout against another one: ``bench.bookie_loop`` of each, alternating.

    python -m bench.bookie_loop_ab --tree PATH [--rounds 6] [--inner-rounds 1] [--entries 100000] [--size 1024]
                                   [--batch-reads 1] [--single-reads 1] [--json PATH]

``PATH`` is another checkout of this repository with its C extensions built (e.g. ``git worktree add --detach
/tmp/old COMMIT`` then ``python setup.py build_ext --inplace`` there).  Each round runs ``python -m
bench.bookie_loop --rounds INNER`` once in each tree (its own bookie, its own copy of the benchmark,
``PYTHONPATH`` naming the tree; ``bench.bookie_loop`` reports the best of its INNER rounds), the order swapped
every round so that a change of load on the machine hits both alike, and reads the ``bookie GC`` figures: the
loop thread's CPU per add, per entry of batch reads and per single read.  Then, per tree, the median and the
range of the rounds, this tree's median ÷ that tree's, and the median of the rounds' own ratios (a round's two
runs are back to back, so its ratio sees the least change of load); below 1: this tree spends less CPU.  CPU
time of one thread is what a loaded machine disturbs least; the load average is printed with every round.
Figures and commands of past runs: docs/benchmark-history.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from bench.common import REPO_ROOT, machine_facts

#: (section heading of ``bench.bookie_loop``'s output, the unit of its figures, our key)
SECTIONS = (("adds of", "µs/add", "add"), ("batch reads", "µs/entry", "batch read"), ("single reads", "µs/read", "single read"))
_FIGURE = re.compile(r"^\s*bookie GC\s+([0-9.]+) (µs/\w+)")


def parse(output: str) -> dict[str, float]:
    """The ``bookie GC`` figure of each section of one ``bench.bookie_loop`` output, keyed by :data:`SECTIONS`."""
    found: dict[str, float] = {}
    section: str | None = None
    for line in output.splitlines():
        for heading, _unit, key in SECTIONS:
            if heading in line and not line.lstrip().startswith("bookie GC"):
                section = key
        m = _FIGURE.match(line)
        if m and section is not None and section not in found:
            found[section] = float(m.group(1))
    return found


def one_run(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    argv = [
        sys.executable, "-m", "bench.bookie_loop", "--rounds", str(args.inner_rounds), "--entries", str(args.entries), "--size",
        str(args.size), "--batch-reads", str(args.batch_reads), "--single-reads", str(args.single_reads),
    ]
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise SystemExit(f"bench.bookie_loop in {tree} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    figures = parse(proc.stdout)
    if "add" not in figures:
        raise SystemExit(f"no figures in the output of bench.bookie_loop in {tree}:\n{proc.stdout[-2000:]}")
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bookie_loop_ab", description=__doc__.splitlines()[0])
    p.add_argument("--tree", type=Path, required=True, help="the other checkout (its extensions built)")
    p.add_argument("--rounds", type=int, default=6, help="runs per tree, alternating (default 6)")
    p.add_argument("--inner-rounds", type=int, default=1, help="bench.bookie_loop's own rounds, best taken (default 1)")
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--batch-reads", type=int, default=1, help="passes of batch reads per run (default 1)")
    p.add_argument("--single-reads", type=int, default=1, help="passes of single reads per run (default 1)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds one run may take")
    p.add_argument("--json", type=Path, help="also write every run and the medians as JSON to PATH")
    args = p.parse_args(argv)
    trees = {"this tree": REPO_ROOT.resolve(), "that tree": args.tree.resolve()}
    print(f"this tree: {trees['this tree']}; that tree: {trees['that tree']}", flush=True)
    before = machine_facts()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    loads: list[list[float]] = []
    for rnd in range(args.rounds):
        order = list(trees) if rnd % 2 == 0 else list(reversed(trees))
        for name in order:
            figures = one_run(trees[name], args)
            runs[name].append(figures)
            load = list(os.getloadavg())
            loads.append(load)
            shown = ", ".join(f"{k} {v:.2f}" for k, v in figures.items())
            print(f"round {rnd + 1}/{args.rounds} {name}: {shown} (load {load[0]:.1f})", flush=True)
    summary: dict[str, dict[str, dict[str, float]]] = {}
    print(f"\n{args.entries:,} adds of {args.size} B per run; loop-thread CPU, bookie GC; {args.rounds} runs per tree")
    print(f"{'':14}{'this tree median (range)':>30}{'that tree median (range)':>30}{'this ÷ that':>13}"
          f"{'per round':>11}")
    for _heading, unit, key in SECTIONS:
        per_tree = {name: [r[key] for r in rs if key in r] for name, rs in runs.items()}
        if not all(per_tree.values()):
            continue
        summary[key] = {
            name: {"median": statistics.median(v), "min": min(v), "max": max(v)} for name, v in per_tree.items()
        }
        cells = [
            f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f}) {unit}" for s in summary[key].values()
        ]
        ratio = summary[key]["this tree"]["median"] / summary[key]["that tree"]["median"]
        paired = statistics.median(a / b for a, b in zip(per_tree["this tree"], per_tree["that tree"]))
        summary[key]["ratio"] = {"of medians": ratio, "median per round": paired}
        print(f"{key:14}{cells[0]:>30}{cells[1]:>30}{ratio:>12.3f}x{paired:>10.3f}x")
    after = machine_facts()
    print(f"load average before {before['loadavg_1_5_15']}, after {after['loadavg_1_5_15']}; "
          f"1-minute load over the runs {min(x[0] for x in loads):.1f}-{max(x[0] for x in loads):.1f}")
    if args.json:
        args.json.write_text(json.dumps({
            "command": "python -m bench.bookie_loop_ab " + " ".join(argv if argv is not None else sys.argv[1:]),
            "trees": {k: str(v) for k, v in trees.items()}, "machine_before": before, "machine_after": after,
            "runs": runs, "loads": loads, "summary": summary,
        }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
