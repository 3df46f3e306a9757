"""A topic's schema from Pulsar's schema registry, and ``value`` decoded by it (docs/pulsar.md, "Schemas").

The broker (``BookkeeperSchemaStorage``) keeps, under Pulsar's metadata root:

* the znode ``/schemas/<tenant>/<namespace>/<encoded topic>`` (a partitioned topic's partitions share their
  topic's): a ``SchemaLocator``, the latest version and the (ledger, entry) of every version;
* one BookKeeper ledger per version (the broker's ``managedLedgerDigestType`` and empty password), whose entry is a
  ``SchemaEntry`` whose ``schema_data`` is the version's ``SchemaInfo``: a type and, for AVRO and JSON, an Avro
  schema definition.

A message carries its producer's version in ``MessageMetadata.schema_version`` (eight bytes, big-endian).  The
parsing below is pure; :func:`load_topic_schema` is the only I/O (ZooKeeper ``get`` and non-recovery reads).
"""

from __future__ import annotations

import base64
import datetime
import functools
import io
import json
import posixpath
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Callable

from bkspark.errors import BKError
from bkspark.pulsar.errors import PulsarSchemaError
from bkspark.pulsar.managed_ledger import parse_metadata_proto
from bkspark.pulsar.proto.SchemaStorage_pb2 import SchemaEntry, SchemaInfo, SchemaLocator

__all__ = [
    "SchemaVersion", "TopicSchema", "ValueDecoder", "schema_path", "parse_locator", "parse_schema_entry",
    "version_bytes", "load_topic_schema", "value_decoder", "SUPPORTED_TYPES",
]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_EPOCH_DAY = datetime.date(1970, 1, 1)


def schema_path(root: str, topic: Any) -> str:
    """The locator znode of ``topic`` (a :class:`bkspark.pulsar.topics.TopicName`): Pulsar's
    ``TopicName.getSchemaName()``, the partitioned topic's encoded local name, under ``<root>/schemas``."""
    from bkspark.pulsar.topics import encode_local_name

    base = topic.partitioned_topic
    return posixpath.join(root, "schemas", base.tenant, base.namespace, encode_local_name(base.local))


@functools.lru_cache(maxsize=4096)
def registry_name(topic: str) -> str:
    """The name of the registry that holds the schema versions of ``topic``'s messages: a partition's versions
    are its partitioned topic's, another topic's are its own (versions are numbered per registry)."""
    from bkspark.pulsar.topics import parse_topic_name

    return str(parse_topic_name(topic).partitioned_topic)


def version_bytes(version: int) -> bytes:
    """A version as ``MessageMetadata.schema_version`` carries it (Pulsar's ``LongSchemaVersion``)."""
    return struct.pack(">q", version)


def parse_locator(data: bytes, *, path: str = "") -> SchemaLocator:
    return parse_metadata_proto(SchemaLocator, data, "schema locator", path=path)


def parse_schema_entry(data: bytes, *, where: str = "") -> SchemaInfo:
    """The ``SchemaInfo`` inside a schema ledger's entry."""
    entry = parse_metadata_proto(SchemaEntry, data, "schema entry", path=where)
    return parse_metadata_proto(SchemaInfo, entry.schema_data, "schema entry's SchemaInfo", path=where)


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a topic's schema: its registry type name (``AVRO``, ``INT32``...) and definition bytes."""

    version: int
    type: str
    definition: bytes
    deleted: bool = False


@dataclass(frozen=True)
class TopicSchema:
    """Every version of a topic's schema the bookies still give; ``latest`` is the one rows are typed by."""

    topic: str
    latest: SchemaVersion
    #: By ``version_bytes``: every version whose ledger could be read.
    versions: tuple[tuple[bytes, SchemaVersion], ...]

    @functools.cached_property
    def by_version(self) -> dict[bytes, SchemaVersion]:
        """:attr:`versions` as a lookup table (built once: decoders look a version up per message)."""
        return dict(self.versions)

    def same_type(self, other: "TopicSchema") -> bool:
        return (self.latest.type, self.latest.definition) == (other.latest.type, other.latest.definition)


def load_topic_schema(zk: Any, bk: Any, root: str, topic: Any, *, digest_type: str, password: bytes) -> TopicSchema | None:
    """The schema of ``topic`` (None without one, or when its latest version is a deletion): a ZooKeeper ``get``
    and a non-recovery read of each version's ledger, nothing written.  A version whose ledger is gone is left
    out (its messages then have an unknown version)."""
    from bkspark.errors import NoSuchLedgerMetadataError
    from bkspark.pulsar.topics import znode_data

    path = schema_path(root, topic)
    data = znode_data(zk, path)
    if data is None:
        return None
    locator = parse_locator(data, path=path)
    versions: dict[bytes, SchemaVersion] = {}
    for index in {e.version: e for e in [*locator.index, locator.info]}.values():
        ledger_id, entry_id = index.position.ledgerId, index.position.entryId
        try:
            handle = bk.open_ledger(ledger_id, recovery=False, password=password, digest_type=digest_type)
        except NoSuchLedgerMetadataError:
            continue
        try:
            (entry,) = handle.read(entry_id, entry_id)
            payload = bytes(entry.payload)
        finally:
            handle.close()
        info = parse_schema_entry(payload, where=f"{path} version {index.version} (ledger {ledger_id})")
        versions[version_bytes(index.version)] = SchemaVersion(
            index.version, SchemaInfo.SchemaType.Name(info.type), bytes(info.schema), info.deleted
        )
    latest = versions.get(version_bytes(locator.info.version))
    if latest is None:
        raise PulsarSchemaError(
            f"[BOOKKEEPER_PULSAR_SCHEMA] the latest schema version {locator.info.version} of topic {topic} "
            f"(ledger {locator.info.position.ledgerId}) cannot be read from the bookies; read the topic with "
            ".option('schema', 'raw')"
        )
    if latest.deleted or latest.type == "NONE":
        return None
    return TopicSchema(str(topic), latest, tuple(sorted(versions.items())))


# -- value decoders ----------------------------------------------------------------------------------------------


def _ms(value: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=value)


#: Pulsar's primitive schemas: Spark type and the decoder of the bytes Pulsar's Java schema of that type writes.
_PRIMITIVES: dict[str, tuple[str, Callable[[bytes], Any]]] = {
    "STRING": ("STRING", lambda b: b.decode("utf-8")),
    "BOOLEAN": ("BOOLEAN", lambda b: struct.unpack(">?", b)[0]),
    "INT8": ("TINYINT", lambda b: struct.unpack(">b", b)[0]),
    "INT16": ("SMALLINT", lambda b: struct.unpack(">h", b)[0]),
    "INT32": ("INT", lambda b: struct.unpack(">i", b)[0]),
    "INT64": ("BIGINT", lambda b: struct.unpack(">q", b)[0]),
    "FLOAT": ("FLOAT", lambda b: struct.unpack(">f", b)[0]),
    "DOUBLE": ("DOUBLE", lambda b: struct.unpack(">d", b)[0]),
    "TIMESTAMP": ("TIMESTAMP", lambda b: _ms(struct.unpack(">q", b)[0])),
    "DATE": ("TIMESTAMP", lambda b: _ms(struct.unpack(">q", b)[0])),
    "INSTANT": ("TIMESTAMP", lambda b: _EPOCH + datetime.timedelta(
        seconds=struct.unpack(">q", b[:8])[0], microseconds=struct.unpack(">i", b[8:12])[0] // 1000)),
    "LOCALDATE": ("DATE", lambda b: _EPOCH_DAY + datetime.timedelta(days=struct.unpack(">q", b)[0])),
}
SUPPORTED_TYPES = ("AVRO", "JSON", *_PRIMITIVES)


def _spark_type(avro: Any, where: str) -> Any:
    """The Spark type of an Avro type (the one Spark's own ``from_avro`` gives)."""
    from pyspark.sql import types as t

    if isinstance(avro, list):
        rest = [x for x in avro if x != "null"]
        if len(rest) == 1:
            return _spark_type(rest[0], where)
        raise PulsarSchemaError(f"[BOOKKEEPER_PULSAR_SCHEMA] {where}: a union of {rest} has no Spark type; read with "
                                ".option('schema', 'raw')")
    if isinstance(avro, str):
        avro = {"type": avro}
    kind, logical = avro.get("type"), avro.get("logicalType")
    if isinstance(kind, (dict, list)):
        return _spark_type(kind, where)
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return t.TimestampType()
    if logical == "date" and kind == "int":
        return t.DateType()
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return t.DecimalType(avro["precision"], avro.get("scale", 0))
    if kind in _AVRO_SIMPLE and not (logical and logical.startswith("time-")):
        return _spark_simple(_AVRO_SIMPLE[kind])
    if kind == "array":
        return t.ArrayType(_spark_type(avro["items"], where))
    if kind == "map":
        return t.MapType(t.StringType(), _spark_type(avro["values"], where))
    if kind == "record":
        return t.StructType([t.StructField(f["name"], _spark_type(f["type"], where)) for f in avro["fields"]])
    raise PulsarSchemaError(f"[BOOKKEEPER_PULSAR_SCHEMA] {where}: Avro type {avro!r} has no Spark type here; read "
                            "with .option('schema', 'raw')")


_AVRO_SIMPLE = {"null": "STRING", "boolean": "BOOLEAN", "int": "INT", "long": "BIGINT", "float": "FLOAT",
                "double": "DOUBLE", "bytes": "BINARY", "string": "STRING", "enum": "STRING", "fixed": "BINARY"}


def _spark_simple(name: str) -> Any:
    """The Spark type of a simple DDL type name."""
    from pyspark.sql import types as t

    return {"STRING": t.StringType, "BOOLEAN": t.BooleanType, "TINYINT": t.ByteType, "SMALLINT": t.ShortType,
            "INT": t.IntegerType, "BIGINT": t.LongType, "FLOAT": t.FloatType, "DOUBLE": t.DoubleType,
            "BINARY": t.BinaryType, "TIMESTAMP": t.TimestampType, "DATE": t.DateType}[name]()


def _arrow_value(avro: Any, value: Any, from_json: bool) -> Any:
    """A decoded value as Arrow takes it for its Avro type: maps as (key, value) pairs, records and arrays walked;
    ``from_json``: a JSON value, whose logical types and base64 bytes (Jackson's ``byte[]``) are converted as
    fastavro converts them from Avro."""
    if value is None:
        return None
    if isinstance(avro, list):
        rest = [x for x in avro if x != "null"]
        return _arrow_value(rest[0], value, from_json) if len(rest) == 1 else value
    if isinstance(avro, str):
        avro = {"type": avro}
    kind, logical = avro.get("type"), avro.get("logicalType")
    if isinstance(kind, (dict, list)):
        return _arrow_value(kind, value, from_json)
    if kind == "record":
        return {f["name"]: _arrow_value(f["type"], value.get(f["name"]), from_json) for f in avro["fields"]}
    if kind == "array":
        return [_arrow_value(avro["items"], v, from_json) for v in value]
    if kind == "map":
        return [(k, _arrow_value(avro["values"], v, from_json)) for k, v in value.items()]
    if not from_json:
        return value
    if logical == "timestamp-millis":
        return _ms(value)
    if logical == "timestamp-micros":
        return _EPOCH + datetime.timedelta(microseconds=value)
    if logical == "date":
        return _EPOCH_DAY + datetime.timedelta(days=value)
    if kind in ("bytes", "fixed") and isinstance(value, str):
        return base64.b64decode(value)
    return value


def _needs_walk(avro: Any, from_json: bool) -> bool:
    """Whether :func:`_arrow_value` changes values of this type (a map anywhere; from JSON also a logical type or
    bytes): the other fields are taken as decoded, with no walk per message."""
    if isinstance(avro, list):
        return any(_needs_walk(x, from_json) for x in avro)
    if isinstance(avro, str):
        return from_json and avro in ("bytes", "fixed")
    kind = avro.get("type")
    if isinstance(kind, (dict, list)):
        return _needs_walk(kind, from_json)
    if kind == "map":
        return True
    if kind == "record":
        return any(_needs_walk(f["type"], from_json) for f in avro["fields"])
    if kind == "array":
        return _needs_walk(avro["items"], from_json)
    return from_json and ("logicalType" in avro or kind in ("bytes", "fixed"))


class ValueDecoder:
    """Turns a message's ``value`` bytes into the typed columns that replace ``value``: a record's fields for AVRO
    and JSON (flattened, as StreamNative's connector does), one typed ``value`` for a primitive schema.

    Rule for versions (docs/pulsar.md, "Schemas"): a message is decoded with the version its producer wrote
    (an older AVRO version resolved into the latest by Avro's rules); a message without a version with the latest;
    a message whose version the registry does not have is a :class:`PulsarSchemaError` naming it.  A version the
    decoder was not built with (registered after the query was planned: a producer's schema evolved while a
    stream runs) is looked up once in the registry through :attr:`refresh` and, when there, resolved into the
    columns the query was planned with (Avro's rules for AVRO, the fields by name for JSON)."""

    #: Re-reads a registry (by :func:`registry_name`) from ZooKeeper and the bookies (set by the reader on
    #: executors, never pickled); None: the versions the decoder was built with are all it knows.
    refresh: "Callable[[str], TopicSchema | None] | None" = None

    def __init__(self, schema: TopicSchema, others: "Sequence[TopicSchema]" = ()) -> None:
        #: The schema whose latest version types the columns (every other topic's latest is the same).
        self.schema = schema
        #: Each read topic's versions by its registry: version numbers are per registry, so topic B's version 0
        #: may be another schema than topic A's (a message is decoded by its own topic's table).
        self.registries: dict[str, TopicSchema] = {registry_name(s.topic): s for s in (*others, schema)}
        latest = schema.latest
        self.kind = latest.type
        where = f"schema version {latest.version} of topic {schema.topic}"
        if self.kind not in SUPPORTED_TYPES:
            raise PulsarSchemaError(
                f"[BOOKKEEPER_PULSAR_SCHEMA] {where} is {self.kind}, which bkspark does not decode (it decodes "
                f"{', '.join(SUPPORTED_TYPES)}); read the topic with .option('schema', 'raw')"
            )
        if self.kind in _PRIMITIVES:
            self.fields: tuple[tuple[str, Any], ...] = (("value", _spark_simple(_PRIMITIVES[self.kind][0])),)
            self._avro: Any = None
            return
        self._avro = self._definition(latest, where)
        if not (isinstance(self._avro, dict) and self._avro.get("type") == "record"):
            raise PulsarSchemaError(f"[BOOKKEEPER_PULSAR_SCHEMA] {where} is not an Avro record; read with "
                                    ".option('schema', 'raw')")
        self.fields = tuple((f["name"], _spark_type(f["type"], where)) for f in self._avro["fields"])
        from_json = self.kind == "JSON"
        #: (position, Avro type) of the fields whose decoded values :func:`_arrow_value` must convert.
        self._walked = tuple((i, f["type"]) for i, f in enumerate(self._avro["fields"])
                             if _needs_walk(f["type"], from_json))
        from bkspark.pulsar.columns import PULSAR_COLUMNS

        clash = sorted({name for name, _ in self.fields} & {name for name, _ in PULSAR_COLUMNS[1:]})
        if clash:
            raise PulsarSchemaError(f"[BOOKKEEPER_PULSAR_SCHEMA] {where}: its fields {clash} have the names of "
                                    "the message's own columns; read with .option('schema', 'raw')")
        self._writers: dict[tuple[str, bytes], Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("refresh", None)  # a client of the process that set it
        state.pop("_looked_up", None)
        return state

    @staticmethod
    def _definition(version: SchemaVersion, where: str) -> Any:
        try:
            return json.loads(version.definition)
        except ValueError:
            raise PulsarSchemaError(f"[BOOKKEEPER_PULSAR_SCHEMA] {where}: the definition is not JSON") from None

    def _registry(self, topic: str | None) -> str:
        return registry_name(topic) if topic is not None else registry_name(self.schema.topic)

    def _version(self, schema_version: bytes | None, where: str, registry: str) -> SchemaVersion:
        if schema_version is None:
            return self.schema.latest
        table = self.registries.get(registry)
        found = table.by_version.get(bytes(schema_version)) if table is not None else None
        if found is None:
            found = self._look_up(bytes(schema_version), registry)
        if found is None:
            number = struct.unpack(">q", schema_version)[0] if len(schema_version) == 8 else schema_version.hex()
            raise PulsarSchemaError(
                f"[BOOKKEEPER_PULSAR_SCHEMA] {where} has schema version {number}, which topic {registry}'s "
                "schema registry does not have (deleted, or its ledger is gone); read the topic with "
                ".option('schema', 'raw')"
            )
        return found

    def _look_up(self, schema_version: bytes, registry: str) -> SchemaVersion | None:
        """A version the decoder was not built with, from the registry now (once per registry and version): its
        versions are added to that registry's table; the query's columns (the first schema's latest) stay."""
        looked_up: set[tuple[str, bytes]] = self.__dict__.setdefault("_looked_up", set())
        if self.refresh is None or (registry, schema_version) in looked_up:
            return None
        now = self.refresh(registry)  # a metadata error propagates as itself, and the version is asked again later
        looked_up.add((registry, schema_version))
        if now is None:
            return None
        table = self.registries.get(registry, now)
        known = dict(table.by_version)
        for key, version in now.versions:
            known.setdefault(key, version)
        table = replace(table, versions=tuple(sorted(known.items())))
        self.registries[registry] = table
        if registry == registry_name(self.schema.topic):
            self.schema = replace(self.schema, versions=table.versions)
        return known.get(schema_version)

    def decode(
        self, value: bytes | memoryview | None, schema_version: bytes | None, where: str, topic: str | None = None,
    ) -> tuple[Any, ...]:
        """One value per field of :attr:`fields`; all None for a null value.  ``topic``: the message's topic (or
        partition), whose registry its ``schema_version`` is a version of; None: the first schema's."""
        if value is None:
            return (None,) * len(self.fields)
        registry = self._registry(topic)
        try:
            if self.kind in _PRIMITIVES:
                self._version(schema_version, where, registry)
                return (_PRIMITIVES[self.kind][1](bytes(value)),)
            if self.kind == "JSON":
                self._version(schema_version, where, registry)
                record = json.loads(bytes(value))
            else:
                record = self._read_avro(bytes(value), schema_version, where, registry)
            values = [record.get(name) for name, _ in self.fields]
            for index, avro in self._walked:
                values[index] = _arrow_value(avro, values[index], from_json=self.kind == "JSON")
            return tuple(values)
        except BKError:  # a schema error said already, or the registry's metadata or bookies failing (retriable)
            raise
        except Exception as exc:  # noqa: BLE001 - any decoder's error, said with the message's place
            raise PulsarSchemaError(
                f"[BOOKKEEPER_PULSAR_SCHEMA] {where}: its value does not decode as {self.kind} "
                f"({type(exc).__name__}: {exc}); read the topic with .option('schema', 'raw')"
            ) from None

    def _read_avro(self, data: bytes, schema_version: bytes | None, where: str, registry: str) -> Any:
        import fastavro

        key = (registry, bytes(schema_version) if schema_version is not None else b"")
        if key not in self._writers:
            version = self._version(schema_version, where, registry)
            writer = fastavro.parse_schema(self._definition(version, where))
            same = version.definition == self.schema.latest.definition
            reader = None if same else fastavro.parse_schema(self._avro)
            self._writers[key] = (writer, reader)
        writer, reader = self._writers[key]
        return fastavro.schemaless_reader(io.BytesIO(data), writer, reader)


def value_decoder(schemas: list[TopicSchema]) -> ValueDecoder | None:
    """The decoder of a read's topics: None when none has a schema; every topic with one must have the same
    latest schema (one set of columns), and a topic without one cannot be read with them."""
    if not schemas:
        return None
    first = schemas[0]
    for other in schemas[1:]:
        if not first.same_type(other):
            raise PulsarSchemaError(
                f"[BOOKKEEPER_PULSAR_SCHEMA] topics {first.topic} and {other.topic} have different schemas "
                f"({first.latest.type} and {other.latest.type}): read them apart, or with .option('schema', 'raw')"
            )
    return ValueDecoder(first, schemas[1:])
