"""Offsets and admission of the Pulsar stream (bkspark/datasource/pulsar_stream_offsets.py, docs/pulsar.md
"Streaming"): positions (ledger, entry, batch index), startingOffsets forms, rolled ledgers, budgets, and the
option table of docs/pulsar.md against the options the stream accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bkspark.datasource.pulsar_stream import parse_pulsar_stream_options
from bkspark.datasource.pulsar_stream_offsets import STREAM_ALIASES, STREAM_OPTIONS
from bkspark.datasource.pulsar_stream_offsets import (
    LATEST,
    PartitionView,
    ReadableLedger,
    admit,
    canonical,
    entries_waiting,
    grant_entries,
    parse_stream_starting_offsets,
    positions_of,
    readable_end,
)
from bkspark.datasource.stream_offsets import Admission
from bkspark.errors import InvalidOptionError
from bkspark.pulsar.columns import message_id_bytes

T = "persistent://public/default/t"
URI = "zk:127.0.0.1:2181"
#: Ledger 3 closed with 5 entries, ledger 7 closed with 4, ledger 9 open with 2 readable.
VIEW = PartitionView(T, (ReadableLedger(3, 5, True, 100.0), ReadableLedger(7, 4, True, 100.0),
                         ReadableLedger(9, 2, False, 100.0)))


def test_offsets_round_trip_in_one_order() -> None:
    offset = canonical({"b": (9, 1, -1), "a": (3, 4, 2)})
    assert list(offset["topics"]) == ["a", "b"]
    assert offset["topics"]["a"] == {"ledgerId": 3, "entryId": 4, "batchIndex": 2}
    assert positions_of(json.loads(json.dumps(offset))) == {"a": (3, 4, 2), "b": (9, 1, -1)}
    assert positions_of(LATEST) == {}


def test_starting_offsets_forms() -> None:
    assert parse_stream_starting_offsets(None) == (canonical({}), {})
    assert parse_stream_starting_offsets("LATEST") == (LATEST, {})
    ids = list(message_id_bytes(3, 4, -1, batch_index=2, batch_size=5))
    start, latest = parse_stream_starting_offsets(json.dumps({T: ids, "u": -1, "v": -2}))
    assert positions_of(start) == {T: (3, 4, 2)} and latest == {"persistent://public/default/u": "latest"}
    copied = json.dumps(canonical({T: (7, 0, 0)}))  # an offset copied from a progress report; index 0 = entry start
    assert positions_of(parse_stream_starting_offsets(copied)[0]) == {T: (7, 0, -1)}
    for bad in ("soon", "[1]", json.dumps({T: "x"}), json.dumps({T: {"ledgerId": -1, "entryId": 0}})):
        with pytest.raises(InvalidOptionError, match="startingOffsets"):
            parse_stream_starting_offsets(bad)


def test_entries_waiting_and_grants_roll_over_closed_ledgers() -> None:
    assert entries_waiting(VIEW, (3, 3, -1)) == [(3, 3, 4), (7, 0, 3), (9, 0, 1)]
    assert entries_waiting(VIEW, (3, 3, 2)) == [(3, 3, 4), (7, 0, 3), (9, 0, 1)]  # inside entry 3: it counts
    assert entries_waiting(VIEW, (3, 3, -1), limit=(7, 2, -1)) == [(3, 3, 4), (7, 0, 1)]
    assert grant_entries(VIEW, (3, 3, -1), 1) == (3, 4, -1)
    assert grant_entries(VIEW, (3, 3, -1), 2) == (7, 0, -1)  # the end of closed ledger 3 is ledger 7's start
    assert grant_entries(VIEW, (3, 3, -1), 100) == (9, 2, -1) == readable_end(VIEW)
    assert grant_entries(VIEW, (3, 3, -1), 0) == (3, 3, -1)


def test_admission_splits_budgets_across_partitions() -> None:
    other = PartitionView("u", (ReadableLedger(4, 10, False, 1000.0),))
    starts = {T: (3, 0, -1)}
    assert admit([VIEW, other], starts, Admission()) == {T: (9, 2, -1), "u": (4, 10, -1)}
    ends = admit([VIEW, other], starts, Admission(max_rows=7))
    assert ends[T] > (3, 0, -1) and ends["u"] > (4, 0, -1)
    taken = sum(sum(l - f + 1 for _, f, l in entries_waiting(v, s or (v.ledgers[0].ledger_id, 0, -1), ends[v.topic]))
                for v, s in ((VIEW, starts[T]), (other, None)))
    assert taken == 7
    assert admit([other], {}, Admission(max_bytes=2500)) == {"u": (4, 2, -1)}
    assert admit([other], {}, Admission(max_bytes=1)) == {"u": (4, 1, -1)}  # always one entry
    assert admit([VIEW], {T: (9, 2, -1)}, Admission()) == {T: (9, 2, -1)}  # nothing new: the start
    assert admit([VIEW, other], starts, Admission(), limits={T: (7, 1, -1)}) == {T: (7, 1, -1)}  # AvailableNow


def test_stream_options_are_parsed_and_checked() -> None:
    read, stream = parse_pulsar_stream_options({"metadataServiceUri": URI, "topic": "t", "maxOffsetsPerTrigger": "5",
                                                "maxMessagesPerTrigger": "9", "longPollTimeoutMs": "2s"})
    assert read.topics == ("t",) and stream.max_entries_per_trigger == 5 and stream.max_messages_per_trigger == 9
    assert stream.long_poll_timeout_ms == 2000
    with pytest.raises(InvalidOptionError, match="endingOffsets"):
        parse_pulsar_stream_options({"metadataServiceUri": URI, "topic": "t", "endingOffsets": "latest"})
    with pytest.raises(InvalidOptionError, match="maxBytesPerTrigger"):
        parse_pulsar_stream_options({"metadataServiceUri": URI, "topic": "t", "maxBytesPerTrigger": "0"})
    with pytest.raises(InvalidOptionError, match="CONFLICTING"):
        parse_pulsar_stream_options({"metadataServiceUri": URI, "topic": "t", "maxOffsetsPerTrigger": "1",
                                     "maxEntriesPerTrigger": "2"})
    with pytest.raises(InvalidOptionError, match="(?i)maxTriggerDelay"):  # a ledger stream's option, not a topic's
        parse_pulsar_stream_options({"metadataServiceUri": URI, "topic": "t", "maxTriggerDelay": "1s"})


def test_docs_streaming_table_lists_exactly_the_stream_options() -> None:
    """docs/pulsar.md's "Streaming" table names every option only a stream takes, aliases in their lines."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "pulsar.md").read_text(encoding="utf-8")
    section = text.split("## Streaming", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    documented = {re.findall(r"`([^`]+)`", row.split(" | ")[0])[0]: row for row in rows}
    assert set(documented) == set(STREAM_OPTIONS)
    for alias, name in STREAM_ALIASES.items():
        assert f"`{alias}`" in documented[name]


def test_a_pulsar_stream_needs_admission_control_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before PySpark 4.2 (no ``pyspark.sql.streaming.datasource``) readStream on a topic fails as it starts,
    naming the release (docs/connector.md, "Spark versions"), before any client or ZooKeeper is touched."""
    from bkspark.datasource import spark_features
    from bkspark.datasource.source import BookKeeperDataSource

    monkeypatch.setattr(spark_features, "ADMISSION_CONTROL", False)
    source = BookKeeperDataSource({"metadataServiceUri": "zk://127.0.0.1:1/ledgers", "topic": "persistent://a/b/c"})
    with pytest.raises(InvalidOptionError, match=r"\[BOOKKEEPER_SPARK_VERSION\] readStream on a Pulsar topic needs "
                                                 r"PySpark 4\.2"):
        source.streamReader(None)


def test_a_pulsar_read_plans_without_the_stream_module() -> None:
    """``schema()`` of a Pulsar read comes from a module that imports no PySpark 4.2 streaming class, so batch
    reads of topics work on PySpark 4.0 and 4.1 (the stream module needs them)."""
    import ast

    source = Path(__file__).resolve().parents[2] / "bkspark" / "datasource" / "pulsar_stream_offsets.py"
    imported = {node.module for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.ImportFrom)}
    assert "pyspark.sql.streaming.datasource" not in imported and "bkspark.datasource.pulsar_stream" not in imported
