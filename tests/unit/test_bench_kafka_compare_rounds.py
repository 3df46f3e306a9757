"""The anchor benchmark's rounds (bench/kafka_compare.py): which round a figure reports, and who goes first.

BENCHMARKS.md's verdicts on issue 14's goals come from these medians, so the choice of round is tested here
rather than trusted; the servers themselves are exercised when the benchmark runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench import kafka_compare
from bench.common import Report, _fmt


def _run() -> kafka_compare._Run:
    return kafka_compare._Run(Report(name="t", title="t", command="t"))


def test_a_figure_is_its_median_round_with_that_rounds_cpu_and_every_round_beside_it() -> None:
    run = _run()
    for value, cpu in ((120.0, 3.0), (180.0, 1.0), (100.0, 5.0)):
        run.last_cpu = {"Spark JVM": cpu}
        run.put(100, "Kafka", "Spark write", value, "rows/s", records=1_000_000)
    run.put(100, "Kafka", "raw producer (Java)", 50.0, "records/s")
    run.put(1024, "Kafka", "Spark write", 7.0, "rows/s")
    run.flush(100)

    write, raw = run.report.rows
    assert write["what"] == "100 B: Kafka: Spark write"
    assert write["value"] == 120.0
    assert write["rounds"] == [120.0, 180.0, 100.0]  # in the order they ran
    assert write["cpu_us_per_record"] == {"Spark JVM": 3.0}  # the median round's, not another's
    assert raw["value"] == 50.0 and "rounds" not in raw  # one round: nothing beside it
    assert run.values == {(100, "Kafka", "Spark write"): 120.0, (100, "Kafka", "raw producer (Java)"): 50.0}
    # Another size's samples wait for their own flush, and a flushed size is not reported twice.
    run.flush(100)
    assert len(run.report.rows) == 2
    run.flush(1024)
    assert run.report.rows[-1]["value"] == 7.0


def test_an_even_count_of_rounds_reports_the_lower_median() -> None:
    run = _run()
    for value in (4.0, 1.0, 3.0, 2.0):
        run.put(100, "Kafka", "Spark scan", value, "rows/s")
    run.flush(100)
    assert run.report.rows[0]["value"] == 2.0


def test_a_failed_round_is_left_out_not_counted_as_zero() -> None:
    run = _run()
    for value in (10.0, None, 30.0, 20.0):
        run.put(100, "Kafka", "Spark scan", value, "rows/s")
    run.flush(100)
    assert run.report.rows[0]["value"] == 20.0
    assert run.report.rows[0]["rounds"] == [10.0, 30.0, 20.0]


def test_notes_repeated_by_rounds_are_kept_once() -> None:
    run = _run()
    for _ in range(3):
        run.note("100 B: Kafka's connector planned 2 partitions for the scan.")
    assert run.report.notes == ["100 B: Kafka's connector planned 2 partitions for the scan."]


def test_the_sides_take_turns_to_go_first(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[tuple[int, str]] = []
    monkeypatch.setattr(kafka_compare, "_kafka_spark",
                        lambda run, kafka, spark, size, n, cores, round_no: order.append((round_no, "kafka")))
    monkeypatch.setattr(kafka_compare, "_bookkeeper_spark",
                        lambda run, uri, kind, spark, size, n, cores, round_no: order.append((round_no, kind)))
    broker: Any = object()
    kafka_compare._spark_rounds(_run(), None, broker, {"java": "zk://a", "python": "zk://b"}, 100, 10, 2, 4)
    assert order == [
        (0, "kafka"), (0, "java"), (0, "python"),
        (1, "java"), (1, "python"), (1, "kafka"),
        (2, "python"), (2, "kafka"), (2, "java"),
        (3, "kafka"), (3, "java"), (3, "python"),
    ]
    order.clear()
    kafka_compare._spark_rounds(_run(), None, None, {"python": "zk://b"}, 100, 10, 2, 2)  # no broker
    assert order == [(0, "python"), (1, "python")]


def test_rounds_render_in_the_table() -> None:
    assert _fmt([127237.4, 135399.0, 99.5]) == "127,237 / 135,399 / 99.5"
    report = Report(name="t", title="t", command="t")
    report.row("100 B: Kafka: Spark write", 120.0, "rows/s", rounds=[120.0, 180.0])
    assert "| each round |" in report.markdown()
    assert "120 / 180" in report.markdown()
