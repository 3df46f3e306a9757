"""The throughput picture in BENCHMARKS.md: records per second per case, bkspark vs Kafka vs the Java client.

    python -m bench.plot [--json bench/results/kafka_compare.json] [--out bench/results/throughput.png]

Made from the JSON that ``python -m bench.kafka_compare`` writes (nothing typed in by hand): one panel per record
size, one group of bars per case (raw client write and read, Spark write and scan, one row per entry and rows
packed into entries; Kafka's one Spark figure is drawn in both, as the ratios compare them), one bar per side that
ran the case: Apache Kafka (its perf tools, Spark's Kafka connector),
bkspark's client and connector on a Java bookie and on a Python bookie, Apache BookKeeper's Java client.
``bench.run_all --update-md`` runs it after the benchmarks.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT

DEFAULT_JSON = REPO_ROOT / "bench" / "results" / "kafka_compare.json"
DEFAULT_PNG = REPO_ROOT / "bench" / "results" / "throughput.png"

#: kafka_compare's measurement names -> the case they measure (rows not named here are left out of the picture).
CASES = {
    "raw producer (Java)": "raw write",
    "raw client write": "raw write",
    "raw consumer (Java)": "raw read",
    "raw client batched read": "raw read",
    "Spark write": "Spark write",
    "Spark scan": "Spark scan",
    "Spark write, packed": "Spark write, packed rows",
    "Spark scan, packed": "Spark scan, packed rows",
}
CASE_ORDER = ["raw write", "raw read", "Spark write", "Spark scan", "Spark write, packed rows", "Spark scan, packed rows"]
#: Sides in the order of their bars, with their colours (the same side keeps its colour in every panel).
SIDES = {
    "Kafka": "#7f7f7f",
    "bkspark (java bookie)": "#1f77b4",
    "bkspark (python bookie)": "#2ca02c",
    "BookKeeper Java client (java bookie)": "#ff7f0e",
    "BookKeeper Java client (python bookie)": "#d62728",
}
ROW = re.compile(r"(?P<size>[^:]+): (?P<side>[^:]+): (?P<what>.+)")


def throughput(data: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """``{size: {case: {side: records per second}}}`` from kafka_compare's rows."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for row in data.get("rows", []):
        match = ROW.fullmatch(row["what"])
        if not match or row.get("value") is None:
            continue
        case = CASES.get(match["what"])
        if case is None or match["side"] not in SIDES:
            continue
        out.setdefault(match["size"], {}).setdefault(case, {})[match["side"]] = float(row["value"])
    for cases in out.values():  # Kafka batches by itself: its one Spark figure is the packed cases' reference too
        for plain in ("Spark write", "Spark scan"):
            if "Kafka" in cases.get(plain, {}) and f"{plain}, packed rows" in cases:
                cases[f"{plain}, packed rows"]["Kafka"] = cases[plain]["Kafka"]
    return out


def plot(data: dict[str, Any], out: Path) -> Path:
    """Write the picture of ``data`` (kafka_compare's JSON) to ``out``; ValueError when it holds no figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    figures = throughput(data)
    if not figures:
        raise ValueError("no throughput rows in the results (did kafka_compare run?)")
    sizes = list(figures)
    fig, axes = plt.subplots(1, len(sizes), figsize=(7 * len(sizes), 6), sharey=True, squeeze=False)
    axes[0][0].invert_yaxis()  # the first case on top (the panels share their y axis: inverted once for all)
    for ax, size in zip(axes[0], sizes):
        cases = [c for c in CASE_ORDER if c in figures[size]]
        sides = [s for s in SIDES if any(s in figures[size][c] for c in cases)]
        height = 0.8 / len(sides)
        top = max(v for c in cases for v in figures[size][c].values())
        for n, side in enumerate(sides):
            ys = [i + (n - (len(sides) - 1) / 2) * height for i in range(len(cases))]
            values = [figures[size][c].get(side, 0.0) for c in cases]
            bars = ax.barh(ys, values, height=height, color=SIDES[side], label=side)
            for bar, value in zip(bars, values):
                if value:
                    ax.text(value + top * 0.01, bar.get_y() + bar.get_height() / 2, f"{value / 1000:,.0f}k",
                            va="center", fontsize=7)
        ax.set_yticks(range(len(cases)), cases)
        ax.set_xlim(0, top * 1.15)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _pos: f"{x / 1000:,.0f}k"))
        ax.set_xlabel("records per second")
        ax.set_title(f"{size} records")
        ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    for ax in axes[0][:-1]:  # a side missing from the last panel still gets its legend entry
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 3), frameon=False)
    date = data.get("machine_before", {}).get("date", "")
    fig.suptitle(f"Throughput per case: bkspark vs Apache Kafka vs Apache BookKeeper's Java client ({date})")
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.plot", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=str(DEFAULT_JSON), help="kafka_compare's results")
    p.add_argument("--out", default=str(DEFAULT_PNG), help="the PNG to write")
    args = p.parse_args(argv)
    source = Path(args.json)
    if not source.is_file():
        print(f"bench.plot: no {source}: run python -m bench.kafka_compare first", file=sys.stderr)
        return 1
    try:
        written = plot(json.loads(source.read_text()), Path(args.out))
    except ValueError as exc:
        print(f"bench.plot: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
