"""Offsets and admission control of the streaming source (pure functions)."""

from __future__ import annotations

import json

import pytest

from bkspark.datasource.stream_offsets import (
    DONE,
    LATEST,
    Admission,
    LedgerPosition,
    canonical,
    lag,
    next_offset,
    parse_starting_offsets,
)
from bkspark.datasource.stream_reader import parse_stream_read_options
from bkspark.errors import InvalidOptionError

URI = "zk+hierarchical://127.0.0.1:2181/ledgers"


def test_canonical_order_makes_equal_offsets_equal_json() -> None:
    a = canonical({"0:10": 1, "0:9": 2, "3:1": 0})
    b = canonical({"3:1": 0, "0:9": 2, "0:10": 1})
    assert json.dumps(a) == json.dumps(b)
    assert list(a["ledgers"]) == ["0:9", "0:10", "3:1"]  # numeric (scope, ledger) order


def test_starting_offsets() -> None:
    assert parse_starting_offsets(None, 0) == {"ledgers": {}}
    assert parse_starting_offsets("LATEST", 0) == LATEST
    assert parse_starting_offsets('{"7": 3, "2:9": 0}', 5) == {"ledgers": {"2:9": 0, "5:7": 3}}
    assert parse_starting_offsets('{"ledgers": {"0:7": 3}}', 0) == {"ledgers": {"0:7": 3}}
    for bad in ("yesterday", '{"x": 1}', '{"7": -5}', '{"7": -3}', '{"7": "3"}', "[1]"):
        with pytest.raises(InvalidOptionError, match="startingOffsets|offset key"):
            parse_starting_offsets(bad, 0)


def test_admission_is_proportional_across_ledgers_and_marks_closed_ones_done() -> None:
    """docs/streaming.md, "Admission control": as Kafka splits maxOffsetsPerTrigger across partitions, each ledger
    gets its share of the limit in proportion to what it has waiting; the total is exactly the limit."""
    positions = [LedgerPosition("0:2", 50, True, 10.0), LedgerPosition("0:1", 50, False, 10.0)]
    end, lost = next_offset({"ledgers": {}}, positions, start_entry=0, admission=Admission(max_rows=70))
    assert end == {"ledgers": {"0:1": 35, "0:2": 35}} and lost == []
    end2, _ = next_offset(end, positions, start_entry=0, admission=Admission(max_rows=70))
    assert end2 == {"ledgers": {"0:1": 50, "0:2": DONE}}
    assert next_offset(end2, positions, start_entry=0)[0] == end2  # nothing new: the same offset
    assert lag(end, positions, 0) == (30, 300)
    # 90 waiting against 10: 9 and 1 of a limit of 10; one entry each of 3 ledgers with a limit of 2: the
    # largest remainders, ties in key order
    uneven = [LedgerPosition("0:1", 90, False, 1.0), LedgerPosition("0:2", 10, False, 1.0)]
    assert next_offset({"ledgers": {}}, uneven, start_entry=0, admission=Admission(max_rows=10))[0] == {
        "ledgers": {"0:1": 9, "0:2": 1}}
    three = [LedgerPosition(f"0:{i}", 1, False, 1.0) for i in (1, 2, 3)]
    assert next_offset({"ledgers": {}}, three, start_entry=0, admission=Admission(max_rows=2))[0] == {
        "ledgers": {"0:1": 1, "0:2": 1, "0:3": 0}}
    # bytes: shares of the byte limit by bytes waiting
    sized = [LedgerPosition("0:1", 100, False, 100.0), LedgerPosition("0:2", 100, False, 300.0)]
    assert next_offset({"ledgers": {}}, sized, start_entry=0, admission=Admission(max_bytes=8000))[0] == {
        "ledgers": {"0:1": 20, "0:2": 20}}


def test_done_is_renamed_and_old_checkpoints_still_read() -> None:
    """The "read to its end" marker is "done" now; a checkpoint written before holds -1 there, read as "done"."""
    from bkspark.datasource.stream_offsets import positions_of

    assert DONE == "done"
    old = {"ledgers": {"0:1": -1, "0:2": 7}}
    assert positions_of(old) == {"0:1": DONE, "0:2": 7}
    positions = [LedgerPosition("0:1", 5, True, 1.0), LedgerPosition("0:2", 9, False, 1.0)]
    end, lost = next_offset(old, positions, start_entry=0)
    assert end == {"ledgers": {"0:1": DONE, "0:2": 9}} and lost == []
    assert json.loads(json.dumps(end)) == end


def test_kafka_markers_in_json_starting_offsets() -> None:
    """-2 is the ledger's earliest entry, -1 its latest: batch 0 resolves it to the ledger's end and reads none."""
    from bkspark.datasource.stream_offsets import LATEST_ENTRY

    start = parse_starting_offsets('{"7": -1, "8": -2, "9": 4}', 0)
    assert start == {"ledgers": {"0:7": LATEST_ENTRY, "0:8": 0, "0:9": 4}}
    positions = [LedgerPosition("0:7", 30, False, 1.0), LedgerPosition("0:8", 5, True, 1.0),
                 LedgerPosition("0:9", 6, False, 1.0), LedgerPosition("0:10", 2, True, 1.0)]
    end, _ = next_offset(start, positions, start_entry=0)
    assert end == {"ledgers": {"0:7": 30, "0:8": DONE, "0:9": 6, "0:10": DONE}}
    # a progress report's offset copied in: "done" is the ledger's latest
    assert parse_starting_offsets('{"ledgers": {"0:7": "done"}}', 0) == {"ledgers": {"0:7": LATEST_ENTRY}}


def test_lag_per_ledger_in_kafkas_terms() -> None:
    from bkspark.datasource.stream_offsets import lag_per_ledger

    positions = [LedgerPosition("0:1", 10, False), LedgerPosition("0:2", 4, False), LedgerPosition("0:3", 9, True)]
    end = {"ledgers": {"0:1": 4, "0:2": 4, "0:3": DONE}}
    assert lag_per_ledger(end, positions, 0) == {
        "minOffsetsBehindLatest": 0, "maxOffsetsBehindLatest": 6, "avgOffsetsBehindLatest": 3.0}
    assert lag_per_ledger({"ledgers": {}}, [], 0)["maxOffsetsBehindLatest"] == 0


def test_bytes_limit_admits_at_least_one_entry_and_latest_reads_nothing() -> None:
    positions = [LedgerPosition("0:1", 10, False, 1000.0)]
    assert next_offset({"ledgers": {}}, positions, start_entry=0, admission=Admission(max_bytes=10))[0] == {"ledgers": {"0:1": 1}}
    assert next_offset({"ledgers": {}}, positions, start_entry=0, admission=Admission(max_bytes=3500))[0] == {"ledgers": {"0:1": 3}}
    closed = [LedgerPosition("0:1", 10, False), LedgerPosition("0:2", 5, True)]
    assert next_offset(LATEST, closed, start_entry=0)[0] == {"ledgers": {"0:1": 10, "0:2": DONE}}


def test_deleted_ledgers_are_lost_only_if_not_read_to_their_end() -> None:
    positions = [LedgerPosition("0:1", 0, False, missing=True), LedgerPosition("0:2", 0, False, missing=True)]
    end, lost = next_offset({"ledgers": {"0:1": 4, "0:2": DONE}}, positions, start_entry=0)
    assert lost == ["0:1"] and end == {"ledgers": {"0:1": DONE, "0:2": DONE}}


def test_stream_options() -> None:
    batch, stream = parse_stream_read_options(
        {"metadataServiceUri": URI, "ledgers": "7", "maxEntriesPerTrigger": "30", "maxTriggerDelay": "30s",
         "minEntriesPerTrigger": "5", "startingOffsets": "latest"}
    )
    assert batch.ledger_ranges == ((7, 7),)
    assert (stream.max_entries_per_trigger, stream.min_entries_per_trigger, stream.max_trigger_delay_ms) == (30, 5, 30_000)
    with pytest.raises(InvalidOptionError, match="endEntry"):
        parse_stream_read_options({"metadataServiceUri": URI, "ledgers": "7", "endEntry": "9"})
    with pytest.raises(InvalidOptionError, match="maxEntriesPerTrigger"):
        parse_stream_read_options({"metadataServiceUri": URI, "ledgers": "7", "maxEntriesPerTrigger": "0"})
    with pytest.raises(InvalidOptionError, match="maxTriggerDelay"):
        parse_stream_read_options({"metadataServiceUri": URI, "ledgers": "7", "maxTriggerDelay": "soon"})


def test_stream_option_defaults() -> None:
    """docs/streaming.md, the options table: startingOffsets earliest, no trigger limits, maxTriggerDelay 15m,
    longPollTimeoutMs 2000, failOnDataLoss true."""
    batch, stream = parse_stream_read_options({"metadataServiceUri": URI, "ledgers": "7"})
    assert stream.starting_offsets == parse_starting_offsets("earliest", 0) == {"ledgers": {}}
    assert (stream.max_entries_per_trigger, stream.max_bytes_per_trigger, stream.min_entries_per_trigger) == (None,) * 3
    assert stream.max_trigger_delay_ms == 15 * 60 * 1000 and stream.long_poll_timeout_ms == 2000
    assert batch.fail_on_data_loss is True
    _, stream = parse_stream_read_options({"metadataServiceUri": URI, "ledgers": "7", "longPollTimeoutMs": "750",
                                           "maxTriggerDelay": "500ms"})
    assert (stream.long_poll_timeout_ms, stream.max_trigger_delay_ms) == (750, 500)


@pytest.mark.parametrize(
    ("options", "limit", "admission"),
    [
        ({"maxEntriesPerTrigger": "30", "maxBytesPerTrigger": "4000", "minEntriesPerTrigger": "5"}, ("ReadMaxRows", 30), (30, 4000)),
        ({"maxBytesPerTrigger": "4000", "minEntriesPerTrigger": "5"}, ("ReadMaxBytes", 4000), (None, 4000)),
        ({"minEntriesPerTrigger": "5"}, ("ReadMinRows", 5), (None, None)),
        ({}, ("ReadAllAvailable", None), (None, None)),
    ],
)
def test_spark_gets_one_read_limit_and_the_source_applies_the_others(
    options: dict[str, str], limit: tuple[str, int | None], admission: tuple[int | None, int | None]
) -> None:
    """docs/streaming.md, "Admission control": Spark is passed one read limit (ReadMaxRows, ReadMaxBytes or
    ReadMinRows, in that order of preference among the options set); the source applies the other options itself,
    and ignores them all when Spark asks for everything (ReadAllAvailable)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from bkspark.datasource.stream_reader import BookKeeperStreamReader

    reader = BookKeeperStreamReader(*parse_stream_read_options({"metadataServiceUri": URI, "ledgers": "7", **options}))
    default = reader.getDefaultReadLimit()
    assert type(default).__name__ == limit[0]
    assert getattr(default, "max_rows", getattr(default, "max_bytes", getattr(default, "min_rows", None))) == limit[1]
    got = reader._admission(default)
    assert (got.max_rows, got.max_bytes) == admission
    assert reader._admission(ReadAllAvailable()) == Admission()  # Trigger.AvailableNow / Once: everything


@pytest.mark.parametrize(("text", "ms"), [("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("2h", 7_200_000), ("1500", 1500)])
def test_durations_take_the_units_the_options_table_names(text: str, ms: int) -> None:
    """docs/streaming.md, `maxTriggerDelay`: `500ms`, `30s`, `15m`, or milliseconds (and hours); the same for
    `longPollTimeoutMs`."""
    _, stream = parse_stream_read_options({"metadataServiceUri": URI, "ledgers": "7", "maxTriggerDelay": text,
                                           "longPollTimeoutMs": text})
    assert (stream.max_trigger_delay_ms, stream.long_poll_timeout_ms) == (ms, ms)


@pytest.mark.parametrize("name", ["maxEntriesPerTrigger", "maxBytesPerTrigger", "minEntriesPerTrigger", "maxTriggerDelay", "longPollTimeoutMs"])
@pytest.mark.parametrize("value", ["0", "-1", "1.5", "ten"])
def test_trigger_options_refuse_what_is_not_a_positive_count_or_a_duration(name: str, value: str) -> None:
    """The trigger limits are whole numbers >= 1 and the waits durations; anything else is refused with the
    option's name (a duration of 0 is a valid wait)."""
    options = {"metadataServiceUri": URI, "ledgers": "7", name: value}
    if value == "0" and name in ("maxTriggerDelay", "longPollTimeoutMs"):
        parse_stream_read_options(options)
        return
    with pytest.raises(InvalidOptionError, match=rf"\[BOOKKEEPER_INVALID_OPTION\] option '{name}'"):
        parse_stream_read_options(options)
