"""Pulsar's schema registry (locator znode, schema ledgers) and ``value`` decoded by it (docs/pulsar.md, "Schemas"):
no broker, a fake ZooKeeper and a fake BookKeeper client; values encoded as Pulsar's Java schemas write them."""

from __future__ import annotations

import datetime
import io
import json
import re
import struct
from pathlib import Path
from typing import Any

import fastavro
import pytest
from kazoo.exceptions import NoNodeError

from bkspark.datasource.pulsar_options import _KNOWN, parse_pulsar_read_options
from bkspark.errors import InvalidOptionError, NoSuchLedgerMetadataError
from bkspark.pulsar.columns import MessageColumns, _arrow_schema, spark_schema
from bkspark.pulsar.entry import PulsarMessage
from bkspark.pulsar.errors import PulsarMetadataError, PulsarSchemaError
from bkspark.pulsar.proto.SchemaStorage_pb2 import SchemaEntry, SchemaInfo, SchemaLocator
from bkspark.pulsar.schemas import (
    SchemaVersion, TopicSchema, ValueDecoder, load_topic_schema, parse_locator, schema_path, value_decoder,
    version_bytes,
)
from bkspark.pulsar.topics import TopicName

UTC = datetime.timezone.utc
V1 = {"type": "record", "name": "Reading", "fields": [
    {"name": "name", "type": ["null", "string"]},
    {"name": "count", "type": "int"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "inner", "type": ["null", {"type": "record", "name": "Inner", "fields": [
        {"name": "raw", "type": "bytes"}]}]},
]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "unit", "type": ["null", "string"], "default": None}]}


def _avro(schema: Any, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def _topic(kind: str, *definitions: Any, name: str = "persistent://t/ns/x") -> TopicSchema:
    versions = tuple((version_bytes(i), SchemaVersion(i, kind, json.dumps(d).encode() if d is not None else b""))
                     for i, d in enumerate(definitions))
    return TopicSchema(name, versions[-1][1], versions)


def _message(value: bytes | None, version: int | None) -> PulsarMessage:
    return PulsarMessage(value=value, key=None, properties=(), publish_time=1_700_000_000_000, event_time=0,
                         producer_name="p", sequence_id=0,
                         schema_version=None if version is None else version_bytes(version))


def test_schema_path_is_the_partitioned_topics_encoded_name() -> None:
    assert schema_path("/", TopicName("t", "ns", "a b-partition-3")) == "/schemas/t/ns/a+b"
    assert schema_path("/chroot", TopicName("t", "ns", "x")) == "/chroot/schemas/t/ns/x"
    assert version_bytes(2) == b"\0" * 7 + b"\2"


@pytest.mark.parametrize("kind, data, want", [
    ("STRING", "héllo".encode(), "héllo"),
    ("BOOLEAN", b"\1", True),
    ("INT8", b"\xff", -1),
    ("INT16", struct.pack(">h", -300), -300),
    ("INT32", struct.pack(">i", 1 << 30), 1 << 30),
    ("INT64", struct.pack(">q", -(1 << 40)), -(1 << 40)),
    ("FLOAT", struct.pack(">f", 1.5), 1.5),
    ("DOUBLE", struct.pack(">d", -2.25), -2.25),
    ("TIMESTAMP", struct.pack(">q", 1_700_000_000_123),
     datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)),
    ("INSTANT", struct.pack(">qi", 1_700_000_000, 5_000), datetime.datetime(2023, 11, 14, 22, 13, 20, 5, tzinfo=UTC)),
    ("LOCALDATE", struct.pack(">q", 19_000), datetime.date(2022, 1, 8)),
])
def test_primitive_values_as_pulsars_java_schemas_write_them(kind: str, data: bytes, want: Any) -> None:
    decoder = ValueDecoder(_topic(kind, None))
    assert [name for name, _ in decoder.fields] == ["value"]
    assert decoder.decode(data, version_bytes(0), "here") == (want,)
    assert decoder.decode(data, None, "here") == (want,)  # no version: the latest
    assert decoder.decode(None, version_bytes(0), "here") == (None,)  # a null value


def test_avro_versions_resolve_into_the_latest_and_unknown_versions_fail() -> None:
    decoder = ValueDecoder(_topic("AVRO", V1, V2))
    assert [name for name, _ in decoder.fields] == ["name", "count", "at", "attrs", "inner", "unit"]
    old = _avro(V1, {"name": "a", "count": 1, "at": 1_000, "attrs": {"k": 5}, "inner": {"raw": b"\0\1"}})
    new = _avro(V2, {"name": None, "count": 2, "at": 2_000, "attrs": {}, "inner": None, "unit": "C"})
    at = datetime.datetime.fromtimestamp(1, UTC)
    assert decoder.decode(old, version_bytes(0), "m") == ("a", 1, at, [("k", 5)], {"raw": b"\0\1"}, None)
    assert decoder.decode(new, version_bytes(1), "m")[5] == "C"
    assert decoder.decode(new, None, "m")[1] == 2
    with pytest.raises(PulsarSchemaError, match=r"ledger 4 entry 5.*schema version 9.*schema', 'raw'"):
        decoder.decode(new, version_bytes(9), "the message at ledger 4 entry 5")
    with pytest.raises(PulsarSchemaError, match="does not decode as AVRO"):
        decoder.decode(b"\xff", version_bytes(1), "m")


def test_a_version_registered_after_planning_is_looked_up_once_and_resolved_into_the_planned_columns() -> None:
    """A stream's producer moves to a new version while the query runs: the decoder (built with V1 only) asks the
    registry once, decodes the new version's messages into V1's columns (Avro's resolution drops ``unit``), keeps
    V1 as its latest, and a version the registry still lacks is the documented error; the lookup is not pickled."""
    import pickle

    calls: list[int] = []
    registry = _topic("AVRO", V1, V2)

    def refresh(name: str) -> TopicSchema:
        assert name == "persistent://t/ns/x"
        calls.append(1)
        return registry

    decoder = ValueDecoder(_topic("AVRO", V1))
    decoder.refresh = refresh
    new = _avro(V2, {"name": "n", "count": 7, "at": 2_000, "attrs": {}, "inner": None, "unit": "C"})
    at = datetime.datetime.fromtimestamp(2, UTC)
    assert decoder.decode(new, version_bytes(1), "m") == ("n", 7, at, [], None)
    assert decoder.decode(new, version_bytes(1), "m")[1] == 7 and len(calls) == 1
    assert decoder.schema.latest.version == 0 and [n for n, _ in decoder.fields][-1] == "inner"
    for _ in range(2):  # asked once; the error names the version each time
        with pytest.raises(PulsarSchemaError, match=r"schema version 5, which topic .* does not have"):
            decoder.decode(new, version_bytes(5), "m")
    assert len(calls) == 2
    copy = pickle.loads(pickle.dumps(decoder))
    assert copy.refresh is None and copy.decode(new, version_bytes(1), "m")[1] == 7
    json_decoder = ValueDecoder(_topic("JSON", V1))
    json_decoder.refresh = lambda name: _topic("JSON", V1, V2)
    payload = json.dumps({"name": "j", "count": 3, "at": 1_000, "attrs": {}, "inner": None, "unit": "K"}).encode()
    assert json_decoder.decode(payload, version_bytes(1), "m")[:2] == ("j", 3)


def test_a_registry_that_cannot_be_read_is_its_own_error_and_asked_again() -> None:
    """A failing registry read (ZooKeeper or the bookies down) is raised as itself, not as a value that does not
    decode, and the version is looked up again at the next message."""
    from bkspark.errors import MetadataError

    answers: list[Any] = [MetadataError("ZooKeeper unreachable"), _topic("AVRO", V1, V2)]

    def refresh(name: str) -> TopicSchema:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    decoder = ValueDecoder(_topic("AVRO", V1))
    decoder.refresh = refresh
    new = _avro(V2, {"name": "n", "count": 7, "at": 2_000, "attrs": {}, "inner": None, "unit": "C"})
    with pytest.raises(MetadataError, match="ZooKeeper unreachable"):
        decoder.decode(new, version_bytes(1), "m")
    assert decoder.decode(new, version_bytes(1), "m")[1] == 7 and answers == []


def test_each_topic_s_versions_are_its_own_registry_s() -> None:
    """Two topics whose latest schema is the same but whose registries number it differently (x: V1 then V2; y:
    V2 only, as version 0): a message of y at version 0 is decoded by V2, one of x at version 0 by V1, and a
    partition's versions are its partitioned topic's."""
    x = _topic("AVRO", V1, V2, name="persistent://t/ns/x-partition-0")
    y = _topic("AVRO", V2, name="persistent://t/ns/y")
    decoder = value_decoder([x, y])
    assert decoder is not None
    record = {"name": "n", "count": 7, "at": 2_000, "attrs": {}, "inner": None, "unit": "C"}
    at = datetime.datetime.fromtimestamp(2, UTC)
    assert decoder.decode(_avro(V2, record), version_bytes(0), "m", "persistent://t/ns/y") == (
        "n", 7, at, [], None, "C")
    old = _avro(V1, {k: v for k, v in record.items() if k != "unit"})
    assert decoder.decode(old, version_bytes(0), "m", "persistent://t/ns/x-partition-3") == (
        "n", 7, at, [], None, None)
    with pytest.raises(PulsarSchemaError, match=r"schema version 1, which topic persistent://t/ns/y's"):
        decoder.decode(_avro(V2, record), version_bytes(1), "m", "persistent://t/ns/y")


def test_json_values_typed_by_their_avro_definition() -> None:
    decoder = ValueDecoder(_topic("JSON", V2))
    payload = json.dumps({"name": "j", "count": 3, "at": 1_500, "attrs": {"x": 1}, "inner": {"raw": "AAE="},
                          "unit": None}).encode()
    assert decoder.decode(payload, version_bytes(0), "m") == (
        "j", 3, datetime.datetime.fromtimestamp(1.5, UTC), [("x", 1)], {"raw": b"\0\1"}, None)
    with pytest.raises(PulsarSchemaError, match="does not decode as JSON"):
        decoder.decode(b"{not json", version_bytes(0), "m")


def test_typed_columns_replace_value_in_the_arrow_batch() -> None:
    decoder = ValueDecoder(_topic("AVRO", V2))
    schema = spark_schema(decoder)
    assert schema.fieldNames()[:7] == ["name", "count", "at", "attrs", "inner", "unit", "__key"]
    assert "value" not in schema.fieldNames()
    assert [f.dataType.simpleString() for f in schema.fields[:6]] == [
        "string", "int", "timestamp", "map<string,bigint>", "struct<raw:binary>", "string"]
    columns = MessageColumns(decoder)
    columns.add(_message(_avro(V2, {"name": "a", "count": 1, "at": 5, "attrs": {"k": 1}, "inner": None,
                                    "unit": "K"}), 0), "persistent://t/ns/x", -1, 7, 0)
    columns.add(_message(None, 0), "persistent://t/ns/x", -1, 7, 1)
    batch = columns.batch()
    assert batch.schema == _arrow_schema(decoder)
    rows = batch.to_pylist()
    assert [r["name"] for r in rows] == ["a", None] and rows[0]["attrs"] == [("k", 1)]
    assert [r["__entryId"] for r in rows] == [0, 1]
    # a typed read takes batch entries message by message: the compiled split (untyped columns) hands them back
    from bkspark.pulsar.entry import parse_entry
    from tests.unit.test_pulsar_entry import PLAIN

    batch_entry = parse_entry(PLAIN["persistent://public/default/batch-zstd"]["entries"][0]["data"])
    assert batch_entry.is_batch and columns.add_batch(batch_entry, "t", -1, 7, 2) is False and len(columns) == 2


def test_schemas_bkspark_cannot_type_are_clear_errors() -> None:
    with pytest.raises(PulsarSchemaError, match="PROTOBUF.*schema', 'raw'"):
        ValueDecoder(_topic("PROTOBUF", V1))
    with pytest.raises(PulsarSchemaError, match="union"):
        ValueDecoder(_topic("AVRO", {**V1, "fields": [{"name": "u", "type": ["int", "string"]}]}))
    with pytest.raises(PulsarSchemaError, match="__key"):
        ValueDecoder(_topic("AVRO", {**V1, "fields": [{"name": "__key", "type": "int"}]}))
    with pytest.raises(PulsarSchemaError, match="different schemas"):
        value_decoder([_topic("AVRO", V1), _topic("AVRO", V2)])
    assert value_decoder([]) is None


class _Zk:
    def __init__(self, nodes: dict[str, bytes]) -> None:
        self.nodes = nodes

    def get(self, path: str) -> tuple[bytes, None]:
        if path not in self.nodes:
            raise NoNodeError(path)
        return self.nodes[path], None


class _Entry:
    def __init__(self, entry_id: int, payload: bytes) -> None:
        self.entry_id, self.payload = entry_id, payload


class _Bk:
    """Ledgers of one entry each; records how they were opened."""

    def __init__(self, ledgers: dict[int, bytes]) -> None:
        self.ledgers = ledgers
        self.opens: list[tuple[int, bool]] = []

    def open_ledger(self, ledger_id: int, *, recovery: bool, password: bytes, digest_type: str) -> Any:
        self.opens.append((ledger_id, recovery))
        if ledger_id not in self.ledgers:
            raise NoSuchLedgerMetadataError(f"no ledger {ledger_id}")
        bk = self

        class Handle:
            def read(self, first: int, last: int) -> list[_Entry]:
                return [_Entry(first, bk.ledgers[ledger_id])]

            def close(self) -> None:
                pass

        return Handle()


def _registry(versions: list[tuple[int, str, Any, bool]], *, latest: int) -> tuple[_Zk, _Bk]:
    locator, ledgers = SchemaLocator(), {}
    for version, kind, definition, present in versions:
        index = locator.index.add(version=version, hash=b"h")
        index.position.ledgerId, index.position.entryId = 100 + version, 0
        if version == latest:
            locator.info.CopyFrom(index)
        info = SchemaInfo(schema_id="t/ns/x", user="u", type=SchemaInfo.SchemaType.Value(kind),
                          schema=json.dumps(definition).encode() if definition else b"", timestamp=1, deleted=False)
        if present:
            ledgers[100 + version] = SchemaEntry(schema_data=info.SerializeToString()).SerializeToString()
    return _Zk({"/schemas/t/ns/x": locator.SerializeToString()}), _Bk(ledgers)


def test_load_topic_schema_reads_the_locator_and_each_versions_ledger_without_recovery() -> None:
    zk, bk = _registry([(0, "AVRO", V1, False), (1, "AVRO", V2, True)], latest=1)
    schema = load_topic_schema(zk, bk, "/", TopicName("t", "ns", "x-partition-1"), digest_type="CRC32C", password=b"")
    assert schema is not None and schema.latest == SchemaVersion(1, "AVRO", json.dumps(V2).encode())
    assert [v for v, _ in schema.versions] == [version_bytes(1)]  # version 0's ledger is gone: left out
    assert sorted(bk.opens) == [(100, False), (101, False)]  # never a recovery open
    assert load_topic_schema(zk, bk, "/", TopicName("t", "ns", "other"), digest_type="CRC32C", password=b"") is None
    zk, bk = _registry([(0, "AVRO", V1, True), (1, "AVRO", V2, False)], latest=1)
    with pytest.raises(PulsarSchemaError, match="latest schema version 1 .*ledger 101"):
        load_topic_schema(zk, bk, "/", TopicName("t", "ns", "x"), digest_type="CRC32C", password=b"")
    with pytest.raises(PulsarMetadataError, match="locator"):
        load_topic_schema(_Zk({"/schemas/t/ns/x": b"\xff\xff"}), bk, "/", TopicName("t", "ns", "x"),
                          digest_type="CRC32C", password=b"")
    assert parse_locator(zk.nodes["/schemas/t/ns/x"]).info.version == 1


def test_schema_option_and_the_docs_options_table() -> None:
    base = {"metadataServiceUri": "zk:127.0.0.1:2181", "topic": "t"}
    assert parse_pulsar_read_options(base).schema == "auto"
    assert parse_pulsar_read_options({**base, "schema": "RAW"}).schema == "raw"
    with pytest.raises(InvalidOptionError, match="'schema'"):
        parse_pulsar_read_options({**base, "schema": "avro"})
    docs = (Path(__file__).resolve().parents[2] / "docs" / "pulsar.md").read_text()
    table = docs.split("## Options", 1)[1].split("\n## ", 1)[0]
    documented = {name.lower() for name in re.findall(r"`([A-Za-z]+)`", table)}
    assert sorted(_KNOWN - documented) == []


def test_starting_and_ending_time_options_and_publish_time_bounds() -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, LessThan, LessThanOrEqual

    from bkspark.datasource.pulsar_reader import PulsarPushdownReader, PulsarReader

    base = {"metadataServiceUri": "zk:127.0.0.1:2181", "topic": "t"}
    options = parse_pulsar_read_options({**base, "startingTime": "1000", "endingTime": "2000"})
    assert (options.starting_time, options.ending_time) == (1000, 2000)
    assert parse_pulsar_read_options(base).starting_time is None
    with pytest.raises(InvalidOptionError, match="'startingTime'"):
        parse_pulsar_read_options({**base, "startingTime": "-5"})
    reader = PulsarReader(options)
    assert [reader._in_time_range(t) for t in (999, 1000, 1999, 2000)] == [False, True, True, False]
    at = datetime.datetime(2023, 11, 14, 22, 13, 20, 123999, tzinfo=UTC)  # ms 1_700_000_000_123 and 999 µs
    pushed = PulsarPushdownReader(parse_pulsar_read_options(base))
    filters = [LessThanOrEqual(("__publishTime",), at), GreaterThan(("__publishTime",), at - datetime.timedelta(1)),
               LessThan(("other",), at)]
    assert list(pushed.pushFilters(filters)) == filters
    assert pushed.max_publish_ms == 1_700_000_000_124  # the message at ...123 ms passes <= ...123.999
    assert pushed._in_time_range(1_700_000_000_123) and not pushed._in_time_range(1_700_000_000_124)
    assert not pushed._in_time_range(1_600_000_000_000)  # below the lower bound
    for filter_ in (EqualTo(("__publishTime",), at), In(("__publishTime",), (at, at - datetime.timedelta(1)))):
        one = PulsarPushdownReader(parse_pulsar_read_options(base))
        list(one.pushFilters([filter_]))
        assert one.max_publish_ms == 1_700_000_000_124
