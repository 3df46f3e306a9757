"""Options of a Pulsar read (``.option("topic", ...)``, docs/pulsar.md), parsed and validated once.

A read is a Pulsar read when it names ``topic``, ``topics`` or ``topicsPattern`` (StreamNative's connector's
names).  The ledger options of a raw read (``ledgers``, ``dataset``, entry bounds) make no sense on a topic and are
refused; the digest and password are Pulsar's defaults (CRC32C, empty) under the broker's own setting names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from bkspark.datasource.options import DEFAULT_MAX_BYTES_PER_PARTITION, DIGEST_TYPES, MAX_PARTITIONS, ScanLimits
from bkspark.errors import InvalidOptionError
from bkspark.protocol.values import INT64_MAX, parse_bool

__all__ = ["PulsarReadOptions", "is_pulsar_read", "parse_pulsar_read_options", "PULSAR_TOPIC_KEYS"]

#: The options that make a read a Pulsar read (lower-cased, as Spark hands them over).
PULSAR_TOPIC_KEYS = ("topic", "topics", "topicspattern")

_CLIENT_PREFIX = "bookkeeper."
#: (option, default, least, most) of the whole-number options.
_NUMBERS = {
    "maxEntriesPerPartition": (10_000, 1, INT64_MAX),
    "maxBytesPerPartition": (DEFAULT_MAX_BYTES_PER_PARTITION, 1, INT64_MAX),
    "minPartitions": (0, 1, MAX_PARTITIONS),
    "maxPartitions": (0, 1, MAX_PARTITIONS),
    "batchMaxCount": (1000, 1, (1 << 31) - 1),
    "batchMaxSize": (4 * 1024 * 1024, 1024, INT64_MAX),
    "publishTimeSkewMs": (60_000, 0, INT64_MAX),
    # -1: not set (a publish time in ms since the epoch otherwise)
    "startingTime": (-1, 0, INT64_MAX),
    "endingTime": (-1, 0, INT64_MAX),
}
_FLAGS = {"failOnDataLoss": True, "batchReadEnabled": True}
_KNOWN = {k.lower() for k in (*_NUMBERS, *_FLAGS)} | {
    "metadataserviceuri", "topic", "topics", "topicspattern", "managedledgerdigesttype", "startingoffsets",
    "endingoffsets",
    "managedledgerpassword", "schema",
}
#: ``schema``: ``auto`` types ``value`` by the topic's schema in Pulsar's registry, ``raw`` keeps the bytes.
SCHEMA_MODES = ("auto", "raw")


def is_pulsar_read(options: Mapping[str, str | None]) -> bool:
    """Whether the options name a Pulsar topic (then :mod:`bkspark.datasource.pulsar_reader` reads)."""
    return any(str(k).lower() in PULSAR_TOPIC_KEYS and v not in (None, "") for k, v in options.items())


@dataclass(frozen=True)
class PulsarReadOptions(ScanLimits):
    """What ``spark.read.format("bookkeeper").option("topic", ...)`` was asked to read."""

    #: The BookKeeper URI (``bkspark.pulsar.topics.bookkeeper_uri_of`` of what the user gave).
    metadata_service_uri: str
    topics: tuple[str, ...] = ()
    topics_pattern: str | None = None
    #: The broker's ``managedLedgerDigestType`` (Pulsar's default CRC32C) and ``managedLedgerPassword`` (empty).
    digest_type: str = "CRC32C"
    password: bytes = field(default=b"", repr=False)
    fail_on_data_loss: bool = True
    max_entries_per_partition: int = 10_000
    client_conf: tuple[tuple[str, str], ...] = ()
    #: How far ahead of the broker's clock a producer's may be, for ``__publishTime`` pruning (docs/pulsar.md).
    publish_time_skew_ms: int = 60_000
    #: ``startingOffsets`` (inclusive) and ``endingOffsets`` (exclusive) per topic or partition name:
    #: (ledger, entry, batch index) positions; a topic not named reads from its start / to its LAC.
    starting_offsets: tuple[tuple[str, tuple[int, int, int]], ...] = ()
    ending_offsets: tuple[tuple[str, tuple[int, int, int]], ...] = ()
    #: ``startingTime`` (inclusive) and ``endingTime`` (exclusive): publish times in ms, None when not set.
    starting_time: int | None = None
    ending_time: int | None = None
    #: One of :data:`SCHEMA_MODES` (docs/pulsar.md, "Schemas").
    schema: str = "auto"


def _bad(option: str, value: object, fix: str) -> InvalidOptionError:
    return InvalidOptionError(f"[BOOKKEEPER_INVALID_OPTION] option '{option}'={value!r} is invalid: {fix}")


def _number(opts: Mapping[str, str], option: str) -> int:
    default, least, most = _NUMBERS[option]
    raw = (opts.get(option.lower()) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = least - 1
    if not least <= value <= most:
        raise _bad(option, raw, f"expected a whole number between {least} and {most}")
    return value


def _flag(opts: Mapping[str, str], option: str) -> bool:
    raw = (opts.get(option.lower()) or "").strip()
    if not raw:
        return _FLAGS[option]
    try:
        return parse_bool(raw, option)
    except InvalidOptionError:
        raise _bad(option, raw, "expected 'true' or 'false'") from None


def parse_pulsar_read_options(options: Mapping[str, str | None]) -> PulsarReadOptions:
    """Validate a Pulsar read's options; :class:`InvalidOptionError` naming the option and the fix."""
    from bkspark.pulsar.topics import bookkeeper_uri_of, parse_topic_name

    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    for key in opts:
        if key not in _KNOWN and not key.startswith(_CLIENT_PREFIX):
            raise _bad(key, "***" if "pass" in key else opts[key], "not an option of a Pulsar topic read (see docs/pulsar.md)")
    uri = (opts.get("metadataserviceuri") or "").strip()
    if not uri:
        raise InvalidOptionError(
            "[BOOKKEEPER_MISSING_OPTION] option 'metadataServiceUri' is required: Pulsar's ZooKeeper, e.g. "
            "'zk+hierarchical://127.0.0.1:2181/ledgers' or Pulsar's own 'metadata-store:zk:127.0.0.1:2181/ledgers'"
        )
    names = [opts["topic"].strip()] if opts.get("topic", "").strip() else []
    names += [t.strip() for t in opts.get("topics", "").split(",") if t.strip()]
    pattern = opts.get("topicspattern", "").strip() or None
    if sum(bool(opts.get(k, "").strip()) for k in PULSAR_TOPIC_KEYS) > 1:
        raise InvalidOptionError(
            "[BOOKKEEPER_CONFLICTING_OPTIONS] set only one of 'topic', 'topics' and 'topicsPattern'"
        )
    for name in names:
        parse_topic_name(name)  # a clear error now, not in a task
    digest = (opts.get("managedledgerdigesttype") or "CRC32C").strip().upper()
    if digest not in DIGEST_TYPES:
        raise _bad("managedLedgerDigestType", digest, f"expected one of {', '.join(DIGEST_TYPES)}")
    schema = (opts.get("schema") or "auto").strip().lower()
    if schema not in SCHEMA_MODES:
        raise _bad("schema", schema, f"expected one of {', '.join(SCHEMA_MODES)}")
    least, most = _number(opts, "minPartitions") or None, _number(opts, "maxPartitions") or None
    if least is not None and most is not None and least > most:
        raise _bad("minPartitions", least, f"must be <= maxPartitions ({most})")
    return PulsarReadOptions(
        metadata_service_uri=bookkeeper_uri_of(uri),
        topics=tuple(names),
        topics_pattern=pattern,
        digest_type="HMAC" if digest == "MAC" else digest,
        password=(opts.get("managedledgerpassword") or "").encode("utf-8"),
        fail_on_data_loss=_flag(opts, "failOnDataLoss"),
        max_entries_per_partition=_number(opts, "maxEntriesPerPartition"),
        max_bytes_per_partition=_number(opts, "maxBytesPerPartition"),
        min_partitions=least,
        max_partitions=most,
        batch_read_enabled=_flag(opts, "batchReadEnabled"),
        batch_max_count=_number(opts, "batchMaxCount"),
        batch_max_size=_number(opts, "batchMaxSize"),
        publish_time_skew_ms=_number(opts, "publishTimeSkewMs"),
        starting_offsets=_offsets(opts, "startingOffsets", "earliest"),
        ending_offsets=_offsets(opts, "endingOffsets", "latest"),
        schema=schema,
        starting_time=None if _number(opts, "startingTime") < 0 else _number(opts, "startingTime"),
        ending_time=None if _number(opts, "endingTime") < 0 else _number(opts, "endingTime"),
        client_conf=tuple(sorted((k[len(_CLIENT_PREFIX):], v) for k, v in opts.items() if k.startswith(_CLIENT_PREFIX))),
    )


def _offsets(opts: Mapping[str, str], option: str, default: str) -> tuple[tuple[str, tuple[int, int, int]], ...]:
    """``earliest``/``latest`` (the only whole-read value each option takes), or a JSON object of topic (or
    partition) name to a message id: Pulsar's ``MessageId.toByteArray()`` as a JSON array of (signed or unsigned)
    byte values, as StreamNative's connector writes it; the position is (ledger, entry, batch index)."""
    import json

    from bkspark.pulsar.proto.PulsarApi_pb2 import MessageIdData
    from bkspark.pulsar.topics import parse_topic_name

    raw = (opts.get(option.lower()) or "").strip()
    if not raw or raw.lower() == default:
        return ()
    fix = (f"expected '{default}' or a JSON object of topic to message id bytes, e.g. "
           '{"persistent://public/default/t": [8, 7, 16, 4]}')
    try:
        spec = json.loads(raw)
    except ValueError:
        raise _bad(option, raw, fix) from None
    if not isinstance(spec, dict):
        raise _bad(option, raw, fix)
    out = []
    for topic, value in spec.items():
        if not isinstance(value, list) or not all(isinstance(b, int) and -128 <= b <= 255 for b in value):
            raise _bad(option, raw, fix)
        data = MessageIdData()
        try:
            data.ParseFromString(bytes(b & 0xFF for b in value))
        except Exception:  # noqa: BLE001 - protobuf's DecodeError
            raise _bad(option, raw, f"{topic!r}: the bytes are not a Pulsar message id") from None
        if not data.IsInitialized():
            raise _bad(option, raw, f"{topic!r}: the bytes are not a Pulsar message id")
        out.append((str(parse_topic_name(topic)), (data.ledgerId, data.entryId, data.batch_index)))
    return tuple(sorted(out))
