"""Option parsing and planning of the Spark connector: no Spark session, no servers."""

from __future__ import annotations

import pickle
from typing import Callable

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, In, LessThanOrEqual, StringStartsWith
from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

from bkspark.datasource.options import (
    DEFAULT_MAX_BYTES_PER_PARTITION,
    parse_ledger_list,
    parse_read_options,
    parse_write_options,
    selected_ledgers,
)
from bkspark.datasource.planning import Bounds, LedgerSlice, push_filters, split_ledger
from bkspark.datasource.schema import COLUMNS, SCHEMA_DDL, arrow_schema, check_user_schema, schema_ddl, spark_schema
from bkspark.errors import InvalidOptionError

URI = "zk+hierarchical://127.0.0.1:2181/ledgers"


def test_read_options_parse_spark_style_lower_cased_strings() -> None:
    opts = parse_read_options({
        "metadataserviceuri": URI, "ledgers": "7, 9,10-12", "scopeid": "0", "startentry": "5",
        "endentry": "99", "includeopenledgers": "true", "maxentriesperpartition": "1000",
        "batchreadenabled": "false", "batchmaxcount": "50", "digesttype": "mac", "password": "pw",
        "bookkeeper.readentrytimeout": "7",
    })
    assert opts.ledger_ranges == ((7, 7), (9, 9), (10, 12))  # 9 stays a single id: it must exist
    assert (opts.start_entry, opts.end_entry, opts.include_open_ledgers) == (5, 99, True)
    assert (opts.batch_read_enabled, opts.batch_max_count, opts.digest_type) == (False, 50, "HMAC")
    assert opts.password == b"pw"
    assert opts.client_conf == (("readentrytimeout", "7"),)
    assert pickle.loads(pickle.dumps(opts)) == opts


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"ledgers": "1"}, "metadataServiceUri"),
        ({"metadataserviceuri": URI}, "ledgers"),
        ({"metadataserviceuri": URI, "ledgers": "1", "dataset": "d"}, "only one of"),
        ({"metadataserviceuri": URI, "ledgers": "x"}, "'ledgers'"),
        ({"metadataserviceuri": URI, "ledgers": "5-2"}, "'ledgers'"),
        ({"metadataserviceuri": URI, "ledgers": "1", "digesttype": "md5"}, "'digestType'"),
        ({"metadataserviceuri": URI, "ledgers": "1", "maxentriesperpartition": "0"}, "'maxEntriesPerPartition'"),
        ({"metadataserviceuri": URI, "ledgers": "1", "minpartitions": "0"}, "'minPartitions'"),
        ({"metadataserviceuri": URI, "ledgers": "1", "maxpartitions": "-3"}, "'maxPartitions'"),
        ({"metadataserviceuri": URI, "ledgers": "1", "maxpartitions": "many"}, "'maxPartitions'"),
        ({"metadataserviceuri": URI, "ledgers": "1", "minpartitions": "9", "maxpartitions": "3"}, "'minPartitions'.*<= maxPartitions"),
        ({"metadataserviceuri": URI, "ledgers": "1", "batchreadenabled": "maybe"}, "'batchReadEnabled'"),
        ({"metadataserviceuri": URI, "ledgers": "1", "startentry": "9", "endentry": "3"}, "'endEntry'"),
        ({"metadataserviceuri": URI, "ledgers": "1", "ledgerz": "1"}, "'ledgerz'"),
        ({"metadataserviceuri": "http://x", "ledgers": "1"}, "'metadataServiceUri'"),
    ],
)
def test_bad_read_options_name_the_option(options: dict, names: str) -> None:
    with pytest.raises(InvalidOptionError, match=names):
        parse_read_options(options)


@pytest.mark.parametrize("scope", [-7, -(2**63), 2**63 - 1])
def test_scope_ids_are_signed_64_bit_in_reads_and_writes(scope: int) -> None:
    assert parse_read_options({"metadataserviceuri": URI, "ledgers": "1", "scopeid": str(scope)}).scope_id == scope
    assert parse_write_options({"metadataserviceuri": URI, "dataset": "d", "scopeid": str(scope)}).scope_id == scope


@pytest.mark.parametrize("scope", [str(-(2**63) - 1), str(2**63), "1.5"])
def test_scope_ids_beyond_64_bits_are_refused(scope: str) -> None:
    with pytest.raises(InvalidOptionError, match="'scopeId'"):
        parse_read_options({"metadataserviceuri": URI, "ledgers": "1", "scopeid": scope})
    with pytest.raises(InvalidOptionError, match="'scopeId'"):
        parse_write_options({"metadataserviceuri": URI, "dataset": "d", "scopeid": scope})


def test_bounds_admit_every_signed_scope_until_a_filter_narrows_them() -> None:
    bounds = Bounds()
    assert all(bounds.admits("scope_id", s) for s in (-(2**63), -7, 0, 2**63 - 1))
    assert not bounds.admits("ledger_id", -1)
    push_filters([EqualTo(("scope_id",), -7)], bounds)
    assert bounds.admits("scope_id", -7) and not bounds.admits("scope_id", 0)


def test_write_options_defaults_and_quorum_checks() -> None:
    opts = parse_write_options({"metadataserviceuri": URI, "dataset": "events"})
    assert (opts.ensemble_size, opts.write_quorum_size, opts.ack_quorum_size, opts.digest_type) == (3, 2, 2, "CRC32C")
    assert (opts.scope_id, opts.password, opts.application_id, opts.client_conf) == (0, b"", None, ())
    # the quorum defaults shrink to a smaller ensemble or write quorum (docs/connector.md, "Write")
    small = parse_write_options({"metadataserviceuri": URI, "dataset": "e", "ensemblesize": "1"})
    assert (small.ensemble_size, small.write_quorum_size, small.ack_quorum_size) == (1, 1, 1)
    one_copy = parse_write_options({"metadataserviceuri": URI, "dataset": "e", "writequorumsize": "1"})
    assert (one_copy.ensemble_size, one_copy.write_quorum_size, one_copy.ack_quorum_size) == (3, 1, 1)
    with pytest.raises(InvalidOptionError, match="writeQuorumSize"):
        parse_write_options({"metadataserviceuri": URI, "dataset": "e", "ensemblesize": "2", "writequorumsize": "3"})
    with pytest.raises(InvalidOptionError, match="ackQuorumSize"):
        parse_write_options({"metadataserviceuri": URI, "dataset": "e", "writequorumsize": "2", "ackquorumsize": "3"})
    with pytest.raises(InvalidOptionError, match="'dataset' is required"):
        parse_write_options({"metadataserviceuri": URI})
    with pytest.raises(InvalidOptionError, match="'dataset'"):
        parse_write_options({"metadataserviceuri": URI, "dataset": "../etc"})


def test_ledger_lists_merge_overlapping_ranges_and_keep_single_ids() -> None:
    """Ranges merge; single ids stay single (each must exist), also next to each other or inside a range."""
    assert parse_ledger_list("3,1,2,10-12,11-15,16-17,3") == ((1, 1), (2, 2), (3, 3), (10, 17))
    assert parse_ledger_list("5-9,7") == ((5, 9), (7, 7))


def test_selected_ledgers_are_the_single_ids_and_the_listed_ids_in_ranges_once_each() -> None:
    """Each range is listed by itself (the store walks only the znodes under it), never the whole cluster."""
    listings: list[tuple[int, int]] = []

    def list_between(first: int, last: int) -> list[int]:
        listings.append((first, last))
        return [lid for lid in (1, 4, 6, 7, 12, 40) if first <= lid <= last]

    assert selected_ledgers(parse_ledger_list("3,7"), list_between) == [3, 7] and listings == []  # no range: no listing
    assert selected_ledgers(parse_ledger_list("3,5-7,7,10-20"), list_between) == [3, 6, 7, 12]
    assert listings == [(5, 7), (10, 20)]


def test_pushed_filters_become_exact_bounds_and_the_rest_come_back_by_identity() -> None:
    bounds = Bounds()
    keep = StringStartsWith(("payload",), "x")
    odd = EqualTo(("entry_id",), "3")  # not an int: Spark keeps it
    filters = [EqualTo(("ledger_id",), 7), GreaterThan(("entry_id",), 10), LessThanOrEqual(("entry_id",), 20),
               In(("entry_id",), [12, 13, 15, 40]), keep, odd]
    rejected = push_filters(filters, bounds)
    assert rejected == [keep, odd] and rejected[0] is keep
    assert bounds.admits("ledger_id", 7) and not bounds.admits("ledger_id", 8)
    assert bounds.entry_runs(0, 100) == [(12, 13), (15, 15)]


@pytest.mark.parametrize("column", ["scope_id", "ledger_id", "entry_id"])
def test_each_documented_operator_on_each_pushable_column_admits_exactly_its_rows(column: str) -> None:
    """docs/connector.md, "Filter pushdown": filters on scope_id, ledger_id and entry_id with =, <, <=, >, >=, IN
    are all taken (Spark drops them from its plan), so the bounds must admit exactly the values each one keeps."""
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    operators: list[tuple[object, Callable[[int], bool]]] = [
        (EqualTo((column,), 5), lambda v: v == 5),
        (LessThan((column,), 5), lambda v: v < 5),
        (LessThanOrEqual((column,), 5), lambda v: v <= 5),
        (GreaterThan((column,), 5), lambda v: v > 5),
        (GreaterThanOrEqual((column,), 5), lambda v: v >= 5),
        (In((column,), [2, 5, 9]), lambda v: v in (2, 5, 9)),
    ]
    for pushed, keeps in operators:
        bounds = Bounds()
        assert push_filters([pushed], bounds) == []
        assert [v for v in range(0, 12) if bounds.admits(column, v)] == [v for v in range(0, 12) if keeps(v)], pushed
        if column == "entry_id":
            admitted = [v for lo, hi in bounds.entry_runs(0, 11) for v in range(lo, hi + 1)]
            assert admitted == [v for v in range(0, 12) if keeps(v)], pushed


def test_split_ledger_cuts_exact_slices() -> None:
    slices = split_ledger(0, 9, 0, 24, 10, ctime_ms=5, custom_metadata=[("k", b"v")])
    assert [(s.first_entry, s.last_entry) for s in slices] == [(0, 9), (10, 19), (20, 24)]
    assert sum(s.entry_count for s in slices) == 25
    assert isinstance(pickle.loads(pickle.dumps(slices[0])), LedgerSlice)


def test_schema_is_fixed_and_arrow_form_matches() -> None:
    """docs/connector.md, "Schema": six columns by default; includeHeaders adds ``headers``, includeCustomMetadata
    ``custom_metadata`` (in that order), in every form."""
    assert tuple(spark_schema(True, True).fieldNames()) == COLUMNS
    assert tuple(spark_schema().fieldNames()) == COLUMNS[:6]
    assert tuple(spark_schema(include_headers=True).fieldNames()) == COLUMNS[:7]
    assert tuple(spark_schema(include_custom_metadata=True).fieldNames()) == COLUMNS[:6] + ("custom_metadata",)
    arrow = arrow_schema(True, True)
    assert [f.name for f in arrow] == list(COLUMNS)
    assert not arrow.field("ledger_id").nullable
    check_user_schema(spark_schema())
    from pyspark.sql.types import LongType, StructField

    with pytest.raises(InvalidOptionError, match="fixed schema"):
        check_user_schema(StructType([StructField("ledger_id", LongType())]))
    assert schema_ddl(True, True) == SCHEMA_DDL
    assert schema_ddl() + ", custom_metadata MAP<STRING, BINARY>" == schema_ddl(True)
    with pytest.raises(InvalidOptionError, match="includeCustomMetadata"):
        check_user_schema(spark_schema(True))
    check_user_schema(spark_schema(True), include_custom_metadata=True)
    with pytest.raises(InvalidOptionError, match="fixed schema"):
        check_user_schema(spark_schema(), include_custom_metadata=True)


def test_include_custom_metadata_is_off_unless_turned_on() -> None:
    """Off by default, as Kafka's ``includeHeaders`` (docs/connector.md, "Schema")."""
    base = {"metadataserviceuri": URI, "ledgers": "1"}
    assert parse_read_options(base).include_custom_metadata is False
    assert parse_read_options({**base, "includecustommetadata": "false"}).include_custom_metadata is False
    assert parse_read_options({**base, "includeCustomMetadata": "TRUE"}).include_custom_metadata is True
    with pytest.raises(InvalidOptionError, match="'includeCustomMetadata'"):
        parse_read_options({**base, "includecustommetadata": "no thanks"})


def test_auto_registration_module_exposes_default_source() -> None:
    import pyspark_bookkeeper

    assert pyspark_bookkeeper.DefaultSource.name() == "bookkeeper"


def test_application_id_option_names_the_spark_application_in_created_by() -> None:
    from bkspark.datasource.writer import BookKeeperWriter

    opts = parse_write_options({"metadataserviceuri": URI, "dataset": "d", "applicationid": "local-1795320451855"})
    assert opts.application_id == "local-1795320451855"
    writer = BookKeeperWriter(opts, 0, False, False)
    assert writer.creator_application() == f"local-1795320451855/job-{writer.job_id}"
    plain = BookKeeperWriter(parse_write_options({"metadataserviceuri": URI, "dataset": "d"}), 0, False, False)
    assert plain.creator_application() == f"job-{plain.job_id}"
    with pytest.raises(InvalidOptionError, match="'applicationId'"):
        parse_write_options({"metadataserviceuri": URI, "dataset": "d", "applicationid": "x" * 201})


def test_read_options_defaults_are_the_documented_ones() -> None:
    """docs/connector.md, "Read options": each default of the table, for options left out."""
    opts = parse_read_options({"metadataserviceuri": URI, "ledgers": "1"})
    assert (opts.scope_id, opts.start_entry, opts.end_entry) == (0, 0, None)  # endEntry: the last entry
    assert opts.include_open_ledgers is False
    assert opts.max_entries_per_partition == 100_000
    assert opts.max_bytes_per_partition == 128 * 1024 * 1024 == DEFAULT_MAX_BYTES_PER_PARTITION
    assert (opts.min_partitions, opts.max_partitions) == (None, None)
    assert opts.batch_read_enabled is True
    assert (opts.batch_max_count, opts.batch_max_size) == (1000, 4_194_304)
    assert (opts.digest_type, opts.password) == (None, b"")  # None: the digest comes from the metadata
    assert opts.fail_on_data_loss is True
    assert opts.include_custom_metadata is False and opts.include_headers is False
    assert (opts.starting_offsets, opts.ending_offsets) == ((), ())
    assert (opts.starting_timestamp_ms, opts.ending_timestamp_ms) == (None, None)
    assert opts.client_conf == ()
    # endEntry -1 says "the last entry" as leaving it out does
    assert parse_read_options({"metadataserviceuri": URI, "ledgers": "1", "endentry": "-1"}).end_entry is None


@pytest.mark.parametrize(
    ("parse", "options", "tag"),
    [
        (parse_read_options, {"ledgers": "1"}, "BOOKKEEPER_MISSING_OPTION"),
        (parse_read_options, {"metadataserviceuri": URI}, "BOOKKEEPER_MISSING_OPTION"),
        (parse_write_options, {"metadataserviceuri": URI}, "BOOKKEEPER_MISSING_OPTION"),
        (parse_read_options, {"metadataserviceuri": URI, "ledgers": "1", "dataset": "d"}, "BOOKKEEPER_CONFLICTING_OPTIONS"),
        (parse_read_options, {"metadataserviceuri": URI, "ledgers": "1", "digesttype": "md5"}, "BOOKKEEPER_INVALID_OPTION"),
        (parse_read_options, {"metadataserviceuri": URI, "ledgers": "1", "batchmaxcount": "x"}, "BOOKKEEPER_INVALID_OPTION"),
        (parse_read_options, {"metadataserviceuri": URI, "ledgers": "1", "failondataloss": "nope"}, "BOOKKEEPER_INVALID_OPTION"),
        (parse_read_options, {"metadataserviceuri": "http://x", "ledgers": "1"}, "BOOKKEEPER_INVALID_OPTION"),
        (parse_read_options, {"metadataserviceuri": URI, "ledgers": "1", "ledgerz": "1"}, "BOOKKEEPER_INVALID_OPTION"),
        (parse_write_options, {"metadataserviceuri": URI, "dataset": "d", "rowsperentry": "1000001"}, "BOOKKEEPER_INVALID_OPTION"),
        (parse_write_options, {"metadataserviceuri": URI, "dataset": "d", "ensemblesize": "two"}, "BOOKKEEPER_INVALID_OPTION"),
        (parse_write_options, {"metadataserviceuri": URI, "dataset": "d", "ackquorumsize": "3"}, "BOOKKEEPER_INVALID_OPTION"),
        (parse_write_options, {"metadataserviceuri": URI, "dataset": "d", "ledgers": "1"}, "BOOKKEEPER_INVALID_OPTION"),
    ],
)
def test_every_option_error_starts_with_its_stable_tag(parse: Callable[[dict], object], options: dict, tag: str) -> None:
    """docs/connector.md: "every message starts with a stable tag", the one its table gives for the mistake."""
    with pytest.raises(InvalidOptionError) as info:
        parse(options)
    assert str(info.value).startswith(f"[{tag}]")


def test_load_and_save_with_a_name_read_and_write_that_dataset() -> None:
    """Spark hands ``load("name")`` / ``save("name")`` over as the ``path`` option: the dataset's name."""
    assert parse_read_options({"metadataserviceuri": URI, "path": "events"}).dataset == "events"
    assert parse_write_options({"metadataserviceuri": URI, "path": "events"}).dataset == "events"
    with pytest.raises(InvalidOptionError, match=r"^\[BOOKKEEPER_CONFLICTING_OPTIONS\]"):
        parse_read_options({"metadataserviceuri": URI, "path": "events", "ledgers": "1"})


def test_the_largest_rows_per_entry_and_entry_max_bytes_are_accepted() -> None:
    """docs/connector.md, "Rows per entry": ``rowsPerEntry`` 1 to 1,000,000, ``entryMaxBytes`` 1,024 to 1 GiB, inclusive."""
    base = {"metadataserviceuri": URI, "dataset": "d"}
    opts = parse_write_options({**base, "rowsperentry": "1000000", "entrymaxbytes": str(1 << 30)})
    assert (opts.rows_per_entry, opts.entry_max_bytes) == (1_000_000, 1 << 30)
    assert parse_write_options({**base, "entrymaxbytes": "1024"}).entry_max_bytes == 1024
    with pytest.raises(InvalidOptionError, match="'entryMaxBytes'"):
        parse_write_options({**base, "entrymaxbytes": str((1 << 30) + 1)})


@pytest.mark.parametrize(
    ("payload_type", "tag"),
    [(None, "BOOKKEEPER_MISSING_PAYLOAD"), (IntegerType(), "BOOKKEEPER_PAYLOAD_TYPE"),
     (ArrayType(BinaryType()), "BOOKKEEPER_PAYLOAD_TYPE")],
)
def test_a_write_without_a_binary_or_string_payload_is_refused_with_its_tag(payload_type: DataType | None, tag: str) -> None:
    """The writer is refused on the driver, before any ledger id is reserved (nothing reaches ZooKeeper); so is
    the stream sink (docs/streaming.md: it needs a `payload` column, binary or string)."""
    from bkspark.datasource.source import BookKeeperDataSource

    schema = StructType().add("key", StringType())
    if payload_type is not None:
        schema = schema.add("payload", payload_type)
    options = {"metadataserviceuri": "zk+hierarchical://127.0.0.1:1/ledgers", "dataset": "d"}
    source = BookKeeperDataSource(options)
    with pytest.raises(InvalidOptionError) as info:
        source.writer(schema, False)
    assert str(info.value).startswith(f"[{tag}]")
    stream_source = BookKeeperDataSource({**options, "checkpointlocation": "/cp/d"})
    with pytest.raises(InvalidOptionError) as info:
        stream_source.streamWriter(schema, False)
    assert str(info.value).startswith(f"[{tag}]")


def _doc_section(title: str) -> str:
    """The text of docs/connector.md's section ``title`` (up to the next heading of any level)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "connector.md").read_text(encoding="utf-8")
    match = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#)", text, re.S | re.M)
    assert match is not None, title
    return match.group(1)


def test_the_documented_schema_table_is_the_sources_schema() -> None:
    """docs/connector.md, "Schema": each row of the table (name, Spark SQL type, NOT NULL) is the column the source
    declares, in order; a column or type changed on either side fails here."""
    import re

    documented = [(name, kind.upper().replace(" ", "")) for name, kind in
                  re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", _doc_section("Schema (fixed by the options)"), re.M)]
    declared = [(f.name, f.dataType.simpleString().upper() + ("" if f.nullable else "NOTNULL"))
                for f in spark_schema(True, True).fields]
    assert documented == declared


def test_batch_starting_and_ending_offsets_take_kafkas_json_and_markers() -> None:
    """docs/connector.md, "Read options": per-ledger JSON, -2 earliest in startingOffsets, -1 latest in
    endingOffsets (exclusive ends), and the words a batch read refuses, as Kafka's does."""
    base = {"metadataserviceuri": URI, "ledgers": "7,9", "scopeid": "0"}
    opts = parse_read_options({**base, "startingoffsets": '{"7": 10, "0:9": -2}', "endingoffsets": '{"7": 20, "9": -1}'})
    assert opts.starting_offsets == (((0, 7), 10), ((0, 9), 0))
    assert opts.ending_offsets == (((0, 7), 20),)  # -1: the ledger's latest, as without the option
    assert parse_read_options({**base, "startingoffsets": "earliest", "endingoffsets": "LATEST"}).starting_offsets == ()
    for option, value in (("startingoffsets", "latest"), ("startingoffsets", '{"7": -1}'), ("endingoffsets", "earliest"),
                          ("endingoffsets", '{"7": -2}'), ("startingoffsets", '{"7": "x"}'), ("endingoffsets", "[7]")):
        with pytest.raises(InvalidOptionError, match=r"^\[BOOKKEEPER_INVALID_OPTION\] option '(starting|ending)Offsets'"):
            parse_read_options({**base, option: value})


def test_timestamps_select_ledgers_by_creation_time() -> None:
    from bkspark.datasource.planning import ctime_admitted

    opts = parse_read_options({"metadataserviceuri": URI, "ledgers": "1", "startingtimestamp": "1000",
                               "endingtimestamp": "2000"})
    assert (opts.starting_timestamp_ms, opts.ending_timestamp_ms) == (1000, 2000)
    assert [ctime_admitted(t, 1000, 2000) for t in (999, 1000, 1999, 2000, None)] == [False, True, True, False, False]
    assert ctime_admitted(None, None, None)  # no bound: a ledger without a time is read
    with pytest.raises(InvalidOptionError, match="'endingTimestamp'"):
        parse_read_options({"metadataserviceuri": URI, "ledgers": "1", "startingtimestamp": "5", "endingtimestamp": "5"})


def test_ledger_ctime_filters_are_pushed_exactly_and_a_null_time_passes_none() -> None:
    from datetime import datetime, timezone

    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    bounds = Bounds()
    t = datetime(2026, 11, 29, 1, 2, 3, 4000, tzinfo=timezone.utc)
    micros = int(t.timestamp()) * 1_000_000 + 4000
    naive = GreaterThanOrEqual(("ledger_ctime",), datetime(2026, 1, 1))  # no time zone: left to Spark
    assert push_filters([GreaterThanOrEqual(("ledger_ctime",), t), LessThan(("ledger_ctime",), t.replace(year=2027)),
                         naive], bounds) == [naive]
    assert bounds.admits("ledger_ctime", micros) and not bounds.admits("ledger_ctime", micros - 1)
    assert not bounds.admits("ledger_ctime", None)
    assert Bounds().admits("ledger_ctime", None)
    assert In(("ledger_ctime",), (t,)) not in push_filters([In(("ledger_ctime",), (t,))], Bounds())
