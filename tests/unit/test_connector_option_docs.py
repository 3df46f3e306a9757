"""The option tables of docs/connector.md and docs/streaming.md against the options the code accepts.

``bkspark.datasource.options.OPTIONS`` is the one home of the options' names, kinds and defaults; the parsers
accept exactly its names. :func:`check_option_docs` compares it with the docs' tables (name, default, whether
streams take it, aliases) and returns every difference, so an option added without a doc line (or a doc line
without an option) fails here. The checker itself is tested on altered tables and docs.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from bkspark.datasource.options import OPTIONS, OptionSpec, parse_read_options, parse_write_options
from bkspark.datasource.stream_reader import parse_stream_read_options
from bkspark.datasource.stream_writer import parse_stream_write_options
from bkspark.errors import InvalidOptionError

DOCS = Path(__file__).resolve().parents[2] / "docs"
URI = "zk+hierarchical://127.0.0.1:2181/ledgers"
TABLE_HEADER = "| option | default | streams | meaning |"
#: Rows every table may have that are not options of their own.
NOT_OPTIONS = {"bookkeeper.<key>"}
#: The sections holding each table: (file, heading prefix) -> (side, whether the table lists batch options).
SECTIONS = {
    ("connector.md", "## Read options"): ("read", True),
    ("connector.md", "## Write"): ("write", True),
    ("streaming.md", "## `spark.readStream"): ("read", False),
    ("streaming.md", "## `df.writeStream"): ("write", False),
}


def _sections(text: str) -> dict[str, str]:
    """Level-2 sections of a markdown text, by heading line."""
    parts = re.split(r"^(## .*)$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _table_rows(section: str) -> list[list[str]]:
    """The rows of the option tables in a section: cells, stripped."""
    rows: list[list[str]] = []
    inside = False
    for line in section.splitlines():
        if line.strip() == TABLE_HEADER:
            inside = True
            continue
        if inside and line.startswith("|---"):
            continue
        if inside and line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
        else:
            inside = False
    return rows


def documented_options(docs: dict[str, str]) -> dict[tuple[str, bool, str], tuple[str, str, str]]:
    """``(side, batch table?, name) -> (default, streams, meaning)`` from every table of :data:`SECTIONS`."""
    found: dict[tuple[str, bool, str], tuple[str, str, str]] = {}
    for (filename, heading), (side, batch) in SECTIONS.items():
        sections = [body for title, body in _sections(docs[filename]).items() if title.startswith(heading)]
        assert len(sections) == 1, f"{filename}: one section {heading!r} expected"
        for cells in _table_rows(sections[0]):
            names = re.findall(r"`([^`]+)`", cells[0])
            assert len(names) == 1, f"{filename}: one option per row: {cells[0]}"
            found[(side, batch, names[0])] = (cells[1].strip("`"), cells[2], cells[3])
    return found


def check_option_docs(options: tuple[OptionSpec, ...], docs: dict[str, str]) -> list[str]:
    """Every difference between ``options`` and the docs' tables, as sentences (empty: they agree)."""
    problems: list[str] = []
    documented = documented_options(docs)
    expected: set[tuple[str, bool, str]] = set()
    for spec in options:
        where = (spec.side, spec.batch, spec.name)
        expected.add(where)
        doc_file = "docs/connector.md" if spec.batch else "docs/streaming.md"
        row = documented.get(where)
        if row is None:
            problems.append(f"{spec.side} option {spec.name!r} has no line in the table of {doc_file}")
            continue
        default, streams, meaning = row
        if default != spec.default:
            problems.append(f"{spec.side} option {spec.name!r}: {doc_file} says default {default!r}, the code {spec.default!r}")
        if streams != ("yes" if spec.stream else "no"):
            problems.append(f"{spec.side} option {spec.name!r}: {doc_file} says streams {streams!r}, the code "
                            f"{'yes' if spec.stream else 'no'}")
        for alias in spec.aliases:
            if f"`{alias}`" not in meaning:
                problems.append(f"{spec.side} option {spec.name!r}: its alias {alias!r} is not in its line of {doc_file}")
    # an option of both kinds may be restated in the streams' table, where its meaning differs (startingOffsets)
    restated = {(s.side, False, s.name): s for s in options if s.batch and s.stream}
    for where in sorted(set(documented) & set(restated)):
        spec, (default, streams, _meaning) = restated[where], documented[where]
        if (default, streams) != (spec.default, "yes"):
            problems.append(f"{spec.side} option {spec.name!r}: docs/streaming.md says default {default!r} and streams "
                            f"{streams!r}, the code {spec.default!r} and yes")
    for where in sorted(set(documented) - expected - set(restated)):
        if where[2] not in NOT_OPTIONS:
            problems.append(f"{where[0]} option {where[2]!r} is documented ({'batch' if where[1] else 'stream'} "
                            "table) but the code has no such option there")
    return problems


def _docs() -> dict[str, str]:
    return {name: (DOCS / name).read_text(encoding="utf-8") for name in ("connector.md", "streaming.md")}


def test_the_docs_tables_are_exactly_the_options_the_code_accepts() -> None:
    assert check_option_docs(OPTIONS, _docs()) == []


def test_the_checker_fails_on_an_option_added_without_a_doc_line() -> None:
    added = OPTIONS + (OptionSpec("maxEntriesPerSecond", "read", "none", batch=False),)
    assert check_option_docs(added, _docs()) == [
        "read option 'maxEntriesPerSecond' has no line in the table of docs/streaming.md"
    ]
    added = OPTIONS + (OptionSpec("compressionType", "write", "none"),)
    assert check_option_docs(added, _docs()) == [
        "write option 'compressionType' has no line in the table of docs/connector.md"
    ]


def test_the_checker_fails_on_a_changed_default_kind_alias_or_a_line_without_an_option() -> None:
    docs = _docs()
    changed = tuple(replace(s, default="50000") if (s.side, s.name) == ("read", "maxEntriesPerPartition") else s
                    for s in OPTIONS)
    assert check_option_docs(changed, docs) == [
        "read option 'maxEntriesPerPartition': docs/connector.md says default '100000', the code '50000'"
    ]
    batch_only = tuple(replace(s, stream=False) if (s.side, s.name) == ("read", "includeOpenLedgers") else s
                       for s in OPTIONS)
    assert check_option_docs(batch_only, docs) == [
        "read option 'includeOpenLedgers': docs/connector.md says streams 'yes', the code no"
    ]
    aliased = tuple(replace(s, aliases=("maxRecordsPerTrigger",)) if s.name == "maxBytesPerTrigger" else s
                    for s in OPTIONS)
    assert check_option_docs(aliased, docs) == [
        "read option 'maxBytesPerTrigger': its alias 'maxRecordsPerTrigger' is not in its line of docs/streaming.md"
    ]
    removed = tuple(s for s in OPTIONS if (s.side, s.name) != ("write", "entryMaxBytes"))
    assert check_option_docs(removed, docs) == [
        "write option 'entryMaxBytes' is documented (batch table) but the code has no such option there"
    ]


def test_the_parsers_accept_exactly_the_table_and_refuse_the_other_kind() -> None:
    """Each option of the table is accepted where the table says, and refused, naming the kind, elsewhere."""
    values = {"ledgers": "1", "batchReadEnabled": "false", "failOnDataLoss": "false", "includeCustomMetadata": "true",
              "includeHeaders": "true", "ackQuorumSize": "1", "writeQuorumSize": "1", "ensembleSize": "1", "dataset": None, "path": None, "startingOffsets": '{"1": 0}', "endingOffsets": '{"1": 5}',
              "startingTimestamp": "5", "endingTimestamp": "9", "password": "pw", "passwordFile": None,
              "passwordEnv": None, "checkpointLocation": "/cp", "metadataServiceUri": URI, "digestType": "CRC32",
              "applicationId": "app", "maxTriggerDelay": "30s", "includeOpenLedgers": "true",
              "maxBytesPerPartition": "4096", "batchMaxSize": "4096", "entryMaxBytes": "4096"}
    base_read = {"metadataServiceUri": URI, "ledgers": "1"}
    base_write = {"metadataServiceUri": URI, "dataset": "d"}
    parsers = {
        ("read", False): parse_read_options, ("read", True): parse_stream_read_options,
        ("write", False): parse_write_options, ("write", True): lambda o: parse_stream_write_options({**o, "checkpointLocation": "/cp"}),
    }
    for spec in OPTIONS:
        value = values.get(spec.name, "3")
        if value is None:
            continue
        base = base_read if spec.side == "read" else base_write
        for stream in (False, True):
            parse = parsers[(spec.side, stream)]
            takes = spec.stream if stream else spec.batch
            if takes:
                parse({**base, spec.name: value})
            else:
                with pytest.raises(InvalidOptionError, match=rf"option '{spec.name}'.*an option of .* only"):
                    parse({**base, spec.name: value})


def test_aliases_are_the_same_option_and_both_given_differently_is_an_error() -> None:
    _, stream = parse_stream_read_options({"metadataServiceUri": URI, "ledgers": "1", "maxOffsetsPerTrigger": "30",
                                           "minOffsetsPerTrigger": "5", "longPollTimeout": "15m"})
    assert (stream.max_entries_per_trigger, stream.min_entries_per_trigger) == (30, 5)
    assert stream.long_poll_timeout_ms == 15 * 60 * 1000  # a duration: "15m" is 15 minutes
    _, same = parse_stream_read_options({"metadataServiceUri": URI, "ledgers": "1", "maxOffsetsPerTrigger": "30",
                                         "maxEntriesPerTrigger": "30"})
    assert same.max_entries_per_trigger == 30
    with pytest.raises(InvalidOptionError, match="another name of option 'maxEntriesPerTrigger'"):
        parse_stream_read_options({"metadataServiceUri": URI, "ledgers": "1", "maxOffsetsPerTrigger": "30",
                                   "maxEntriesPerTrigger": "31"})


def test_hmac_is_mac_by_its_metadata_name() -> None:
    """docs/connector.md: ``MAC`` (also called ``HMAC``)."""
    for name in ("MAC", "hmac", "HMAC"):
        assert parse_read_options({"metadataServiceUri": URI, "ledgers": "1", "digestType": name}).digest_type == "HMAC"
        assert parse_write_options({"metadataServiceUri": URI, "dataset": "d", "digestType": name}).digest_type == "HMAC"


def test_the_schema_step_checks_every_value_of_both_kinds_but_not_the_kind() -> None:
    """docs/connector.md, "Read options": load() (schema()) checks the values, streaming ones too; the kind is
    checked when the query is planned or started."""
    from bkspark.datasource.source import BookKeeperDataSource

    base = {"metadataserviceuri": URI, "ledgers": "1"}
    assert "key BINARY" in BookKeeperDataSource({**base, "maxentriespertrigger": "10", "endentry": "4"}).schema()
    with pytest.raises(InvalidOptionError, match="'maxEntriesPerTrigger'"):
        BookKeeperDataSource({**base, "maxentriespertrigger": "0"}).schema()
    with pytest.raises(InvalidOptionError, match="'longPollTimeoutMs'"):
        BookKeeperDataSource({**base, "longpolltimeoutms": "soon"}).schema()
    with pytest.raises(InvalidOptionError, match="'ledgerz'"):
        BookKeeperDataSource({**base, "ledgerz": "1"}).schema()
    with pytest.raises(InvalidOptionError, match=r"'maxEntriesPerTrigger'.*spark.readStream only, not of spark.read"):
        BookKeeperDataSource({**base, "maxentriespertrigger": "10"}).reader(None)
    with pytest.raises(InvalidOptionError, match=r"'endEntry'.*spark.read only, not of spark.readStream"):
        BookKeeperDataSource({**base, "endentry": "4"}).streamReader(None)
    with pytest.raises(InvalidOptionError, match=r"'includeOpenLedgers'='false' is invalid: a stream always reads"):
        parse_stream_read_options({**base, "includeopenledgers": "false"})


def test_password_env_is_resolved_from_the_parsing_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/connector.md, "Passwords from the environment": the variable is read where the options are parsed,
    when they are parsed; a missing one is a clear error naming it, and the options never show the value."""
    monkeypatch.setenv("BKSPARK_TEST_LEDGER_PASSWORD", "s3cret")
    opts = parse_read_options({"metadataServiceUri": URI, "ledgers": "1", "passwordEnv": "BKSPARK_TEST_LEDGER_PASSWORD"})
    assert opts.password == b"s3cret" and "s3cret" not in repr(opts)
    wopts = parse_write_options({"metadataServiceUri": URI, "dataset": "d", "passwordEnv": "BKSPARK_TEST_LEDGER_PASSWORD"})
    assert wopts.password == b"s3cret"
    monkeypatch.delenv("BKSPARK_TEST_LEDGER_PASSWORD")
    with pytest.raises(InvalidOptionError, match="BKSPARK_TEST_LEDGER_PASSWORD") as info:
        parse_read_options({"metadataServiceUri": URI, "ledgers": "1", "passwordEnv": "BKSPARK_TEST_LEDGER_PASSWORD"})
    assert str(info.value).startswith("[BOOKKEEPER_INVALID_OPTION]")
