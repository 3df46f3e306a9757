"""BENCHMARKS.md's generated section (bench.run_all) and its throughput picture (bench.plot), from result JSON.

The short page keeps each benchmark's command, run and goal ratios; the full tables go to the lab notebook
(docs/benchmark-history.md); the picture is drawn from kafka_compare's JSON.  Checked on small results written
here, and on the repository's own results and pages (what `make bench` leaves).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from bench import plot, run_all
from bench.common import REPO_ROOT, Report


def _kafka_report() -> Report:
    report = Report(name="kafka_compare", title="bkspark vs Kafka", command="python -m bench.kafka_compare --x")
    report.machine_before = {"date": "2026-11-28 10:00 UTC", "cores": 2, "cpu": "test", "loadavg_1_5_15": [1, 1, 1]}
    for side, scale in (("Kafka", 1.0), ("bkspark (java bookie)", 2.0), ("BookKeeper Java client (java bookie)", 1.5)):
        report.row(f"100 B: {side}: raw client write" if side != "Kafka" else "100 B: Kafka: raw producer (Java)",
                   100_000 * scale, "records/s")
    report.row("100 B: Kafka: Spark scan", 300_000, "rows/s")
    report.row("100 B: bkspark (java bookie): Spark scan", 450_000, "rows/s")
    report.row("100 B: bkspark (java bookie): Spark scan, packed", 900_000, "rows/s")
    report.row("100 B: bkspark (java bookie): Spark scan, with custom_metadata", 400_000, "rows/s")
    report.add_ratio("100 B: Spark scan, bkspark ÷ Kafka", 450_000, 300_000, goal=1.0)
    report.add_ratio("100 B: raw write, bkspark client ÷ Kafka producer", 200_000, 100_000)
    return report


def test_the_short_page_shows_commands_and_goal_ratios_and_points_at_the_notebook(tmp_path: Path) -> None:
    (tmp_path / "kafka_compare.json").write_text(json.dumps(_kafka_report().as_dict()))
    summary = run_all.render_summary(tmp_path, list(run_all.BENCHES))
    assert "### bkspark vs Kafka" in summary and "Command: `python -m bench.kafka_compare --x`" in summary
    assert "| 100 B: Spark scan, bkspark ÷ Kafka | 1.50× | ≥ 1.0× (met) |" in summary
    assert "raw write, bkspark client" not in summary and "1 more ratios without a goal" in summary
    assert "records/s" not in summary  # the measurements themselves are the notebook's
    assert "docs/benchmark-history.md" in summary

    page = tmp_path / "BENCHMARKS.md"
    page.write_text(f"# Benchmarks\n\nintro\n\n{run_all.BEGIN}\nold\n{run_all.END}\n\n## after\n")
    run_all.update_markdown(page, summary)
    run_all.update_markdown(page, summary)  # again: the same page
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nintro\n\n") and text.endswith(f"{run_all.END}\n\n## after\n")
    assert "old" not in text and text.count("### bkspark vs Kafka") == 1


def test_the_picture_is_drawn_from_the_results(tmp_path: Path) -> None:
    figures = plot.throughput(_kafka_report().as_dict())
    assert figures["100 B"]["raw write"] == {
        "Kafka": 100_000, "bkspark (java bookie)": 200_000, "BookKeeper Java client (java bookie)": 150_000,
    }
    # Kafka's one Spark figure is the packed case's reference; the custom_metadata variant is not drawn.
    assert figures["100 B"]["Spark scan, packed rows"] == {"bkspark (java bookie)": 900_000, "Kafka": 300_000}
    out = plot.plot(_kafka_report().as_dict(), tmp_path / "t.png")
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert width > 400 and height > 300
    with pytest.raises(ValueError):
        plot.plot({"rows": []}, tmp_path / "none.png")
    assert plot.main(["--json", str(tmp_path / "missing.json"), "--out", str(tmp_path / "x.png")]) == 1


def test_the_repository_pages_are_what_make_bench_writes() -> None:
    """BENCHMARKS.md's generated section is render_summary of bench/results, and shows the picture drawn from it."""
    page = (REPO_ROOT / "BENCHMARKS.md").read_text()
    begin = page.index(run_all.BEGIN.split(" (")[0])
    section = page[page.index("\n", begin) + 1 : page.index(run_all.END)]
    results = REPO_ROOT / "bench" / "results"
    expected = run_all.render_summary(results, list(run_all.BENCHES))
    assert section.strip().endswith(expected.strip())
    assert "![Throughput per case](bench/results/throughput.png)" in section
    assert (results / "throughput.png").is_file()
    assert len(page.splitlines()) < 200, "BENCHMARKS.md is the short page; the notebook is docs/benchmark-history.md"
    notebook = (REPO_ROOT / "docs" / "benchmark-history.md").read_text()
    assert run_all.BEGIN.split(" (")[0] in notebook and run_all.END in notebook
