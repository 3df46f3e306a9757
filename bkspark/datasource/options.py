"""Options of the ``bookkeeper`` Spark data source, parsed and validated once.

Spark hands a Python data source its options as a case-insensitive dict of
strings (keys arrive lower-cased).  Everything is parsed here, into frozen and
picklable dataclasses, so that the reader and writer never look at raw
strings, and every mistake is reported with the option's name and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from bkspark.confkeys import refuse_misspelled_security_keys
from bkspark.datasource.packing import DEFAULT_ENTRY_MAX_BYTES
from bkspark.errors import InvalidOptionError
from bkspark.protocol.values import INT64_MAX, INT64_MIN, parse_bool
from bkspark.security.secrets import MASK, secret_from

__all__ = [
    "ReadOptions",
    "WriteOptions",
    "parse_read_options",
    "parse_write_options",
    "parse_ledger_list",
    "check_dataset_name",
    "selected_ledgers",
    "DIGEST_TYPES",
    "DEFAULT_MAX_BYTES_PER_PARTITION",
]

#: Digest names accepted by the ``digestType`` option (BookKeeper's API names and metadata names).
DIGEST_TYPES = ("CRC32", "CRC32C", "MAC", "HMAC", "DUMMY")

#: The most partitions ``minPartitions`` / ``maxPartitions`` may ask for (a plan of more tasks than this is a mistake).
MAX_PARTITIONS = 1_000_000

#: The ``maxBytesPerPartition`` default: 128 MiB, Spark's ``spark.sql.files.maxPartitionBytes`` default.
DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024

#: Bounds of the write options ``rowsPerEntry`` and ``entryMaxBytes``.
MAX_ROWS_PER_ENTRY = 1_000_000
MAX_ENTRY_MAX_BYTES = 1 << 30

_CLIENT_PREFIX = "bookkeeper."
_DATASET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")

_READ_KEYS = {
    "metadataserviceuri", "ledgers", "scopeid", "dataset", "startentry", "endentry",
    "includeopenledgers", "maxentriesperpartition", "maxbytesperpartition", "minpartitions", "maxpartitions", "batchreadenabled", "batchmaxcount",
    "batchmaxsize", "digesttype", "password", "passwordfile", "passwordenv", "failondataloss", "path",
    "includecustommetadata",
}
_WRITE_KEYS = {
    "metadataserviceuri", "dataset", "scopeid", "ensemblesize", "writequorumsize",
    "ackquorumsize", "digesttype", "password", "passwordfile", "passwordenv", "path", "applicationid",
    "rowsperentry", "entrymaxbytes",
}


def _lower(options: Mapping[str, str | None]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in options.items() if v is not None}


def _bad(option: str, value: object, fix: str) -> InvalidOptionError:
    return InvalidOptionError(f"[BOOKKEEPER_INVALID_OPTION] option '{option}'={value!r} is invalid: {fix}")


def _int(opts: Mapping[str, str], option: str, default: int, *, minimum: int, maximum: int = INT64_MAX) -> int:
    raw = opts.get(option.lower())
    if raw is None or raw == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise _bad(option, raw, f"expected a whole number between {minimum} and {maximum}") from None
    if not minimum <= value <= maximum:
        raise _bad(option, raw, f"expected a whole number between {minimum} and {maximum}")
    return value


def _bool(opts: Mapping[str, str], option: str, default: bool) -> bool:
    raw = opts.get(option.lower())
    if raw is None or raw == "":
        return default
    try:
        return parse_bool(str(raw), option)
    except InvalidOptionError:
        raise _bad(option, raw, "expected 'true' or 'false'") from None


def _digest(opts: Mapping[str, str], default: str | None) -> str | None:
    raw = opts.get("digesttype")
    if raw is None or raw == "":
        return default
    name = str(raw).strip().upper()
    if name not in DIGEST_TYPES:
        raise _bad("digestType", raw, f"expected one of {', '.join(DIGEST_TYPES)}")
    return "HMAC" if name == "MAC" else name


def _uri(opts: Mapping[str, str]) -> str:
    uri = (opts.get("metadataserviceuri") or "").strip()
    if not uri:
        raise InvalidOptionError(
            "[BOOKKEEPER_MISSING_OPTION] option 'metadataServiceUri' is required, e.g. "
            ".option('metadataServiceUri', 'zk+hierarchical://127.0.0.1:2181/ledgers')"
        )
    if "://" not in uri or not uri.split("://", 1)[0].startswith("zk"):
        raise _bad("metadataServiceUri", uri, "expected zk+hierarchical://host:port/ledgers-root (or zk://, zk+longhierarchical://)")
    return uri


def _client_conf(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``bookkeeper.*`` options, passed to the client with the prefix removed.

    Spark lower-cases option keys; BookKeeper's keys are camelCase, so the client
    matches them case-insensitively.
    """
    conf = tuple(sorted((k[len(_CLIENT_PREFIX):], v) for k, v in opts.items() if k.startswith(_CLIENT_PREFIX)))
    refuse_misspelled_security_keys(dict(conf), prefix=_CLIENT_PREFIX)  # at load()/save(), not on every executor
    return conf


def _password(opts: Mapping[str, str]) -> bytes:
    """The ledger password: ``password``, ``passwordFile`` (a file's contents) or ``passwordEnv`` (a variable's
    value), resolved on the driver; the options' ``repr`` never shows it (docs/security.md)."""
    try:
        secret = secret_from(
            value=opts.get("password"), file=opts.get("passwordfile"), env=opts.get("passwordenv"), what="the ledger password"
        )
    except InvalidOptionError as exc:
        raise InvalidOptionError(f"[BOOKKEEPER_INVALID_OPTION] {exc} (options password, passwordFile, passwordEnv)") from None
    return b"" if secret is None else secret.reveal_bytes()


def _looks_secret(key: str) -> bool:
    return any(word in key.lower() for word in ("pass", "pasw", "pwd", "secret", "token", "credential"))


def _check_unknown(opts: Mapping[str, str], known: set[str], kind: str) -> None:
    for key in opts:
        if key not in known and not key.startswith(_CLIENT_PREFIX):
            raise _bad(key, MASK if _looks_secret(key) else opts[key], f"not a {kind} option of the bookkeeper data source (see docs/connector.md); "
                       "client settings go in 'bookkeeper.<key>'")


def _dataset(opts: Mapping[str, str], required: bool) -> str | None:
    name = opts.get("dataset") or opts.get("path")
    if not name:
        if required:
            raise InvalidOptionError(
                "[BOOKKEEPER_MISSING_OPTION] option 'dataset' is required for writes: it names the set of "
                "ledgers the job writes, e.g. .option('dataset', 'events')"
            )
        return None
    return check_dataset_name(name)


def check_dataset_name(name: str, option: str = "dataset") -> str:
    """``name`` if it can name a dataset (its znode's name), else :class:`InvalidOptionError` naming ``option``."""
    if not _DATASET_NAME.match(name):
        raise _bad(option, name, "use 1-200 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


def parse_ledger_list(text: str) -> tuple[tuple[int, int], ...]:
    """Parse ``"7,9,12"`` or ``"10-20,31"`` into sorted inclusive ranges: overlapping or adjacent ranges merged,
    single ids kept as ``(id, id)`` (a single id must exist, a range takes the ledgers that exist in it, so
    ``"7,8"`` is two single ids, not the range ``7-8``)."""
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        match = re.fullmatch(r"(\d+)\s*(?:-\s*(\d+))?", part)
        if not match:
            raise _bad("ledgers", text, "expected ledger ids and ranges such as '7,9,12' or '10-20'")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        if last < first or last > INT64_MAX:
            raise _bad("ledgers", text, f"range '{part}' is empty or beyond 2^63-1")
        ranges.append((first, last))
    if not ranges:
        raise _bad("ledgers", text, "expected at least one ledger id")
    singles = single_ids(ranges)
    spans = sorted((first, last) for first, last in ranges if first != last)
    merged = spans[:1]
    for first, last in spans[1:]:
        if first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(last, merged[-1][1]))
        else:
            merged.append((first, last))
    return tuple(sorted(merged + [(lid, lid) for lid in singles]))


def single_ids(ranges: Iterable[tuple[int, int]]) -> set[int]:
    """The ids the ``ledgers`` option names by themselves (``(id, id)``), not only inside a range: each must exist
    (``BOOKKEEPER_LEDGER_NOT_FOUND``, docs/connector.md)."""
    return {first for first, last in ranges if first == last}


def selected_ledgers(ranges: tuple[tuple[int, int], ...], list_ledgers: Callable[[], Iterable[int]]) -> list[int]:
    """The ledger ids of the ``ledgers`` option, sorted, each once: every single id (it must exist: the caller
    checks), and the ids ``list_ledgers()`` gives within each range (called once, only when there is a range)."""
    wanted = single_ids(ranges)
    spans = [(first, last) for first, last in ranges if first != last]
    if spans:
        wanted.update(lid for lid in list_ledgers() if any(first <= lid <= last for first, last in spans))
    return sorted(wanted)


@dataclass(frozen=True)
class ReadOptions:
    """What ``spark.read.format("bookkeeper")`` was asked to read."""

    metadata_service_uri: str
    ledger_ranges: tuple[tuple[int, int], ...] | None
    dataset: str | None
    scope_id: int = 0
    start_entry: int = 0
    end_entry: int | None = None
    include_open_ledgers: bool = False
    max_entries_per_partition: int = 100_000
    #: Slices of closed ledgers hold at most this many (estimated) bytes, and packing stops there: Spark's
    #: ``spark.sql.files.maxPartitionBytes`` default (docs/connector.md, "Partitions").
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    #: Kafka's ``minPartitions``: split slices until there are at least this many partitions (docs/connector.md).
    min_partitions: int | None = None
    #: pack slices into at most this many partitions.
    max_partitions: int | None = None
    batch_read_enabled: bool = True
    batch_max_count: int = 1000
    batch_max_size: int = 4 * 1024 * 1024
    digest_type: str | None = None
    password: bytes = field(default=b"", repr=False)
    fail_on_data_loss: bool = True
    client_conf: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    #: The ``custom_metadata`` column is in the schema (Kafka's ``includeHeaders``, but on by default: the
    #: column has always been there); false leaves it out, which Spark's JVM and the Arrow transfer pay for in
    #: every row (docs/connector.md, "Schema").
    include_custom_metadata: bool = True


@dataclass(frozen=True)
class WriteOptions:
    """What ``df.write.format("bookkeeper")`` was asked to write."""

    metadata_service_uri: str
    dataset: str
    scope_id: int = 0
    ensemble_size: int = 3
    write_quorum_size: int = 2
    ack_quorum_size: int = 2
    digest_type: str = "CRC32C"
    password: bytes = field(default=b"", repr=False)
    client_conf: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    #: Spark's application id, for the BP-44 ``createdBy`` of the ledgers (Spark does not hand it to data sources).
    application_id: str | None = None
    #: Rows packed into one entry at most (1: one row per entry, the default; docs/connector.md "Rows per entry").
    rows_per_entry: int = 1
    #: Bytes of one packed entry at most (a larger row still gets an entry of its own).
    entry_max_bytes: int = DEFAULT_ENTRY_MAX_BYTES


#: ``readStream``'s own options (docs/streaming.md), which a batch read refuses.
_STREAM_KEYS = frozenset({
    "startingoffsets", "maxentriespertrigger", "maxbytespertrigger", "minentriespertrigger",
    "maxtriggerdelay", "longpolltimeoutms",
})


def without_stream_options(options: Mapping[str, str | None]) -> dict[str, str]:
    """The options minus the streaming-only ones (what a batch read would accept)."""
    return {str(k).lower(): v for k, v in options.items() if v is not None and str(k).lower() not in _STREAM_KEYS}


def parse_read_options(options: Mapping[str, str | None]) -> ReadOptions:
    """Validate read options; raises :class:`InvalidOptionError` naming the option and the fix."""
    opts = _lower(options)
    _check_unknown(opts, _READ_KEYS, "read")
    uri = _uri(opts)
    dataset = _dataset(opts, required=False)
    ledgers_text = opts.get("ledgers")
    if ledgers_text and dataset:
        raise InvalidOptionError(
            "[BOOKKEEPER_CONFLICTING_OPTIONS] set only one of 'ledgers' and 'dataset': "
            "'ledgers' names ledger ids, 'dataset' the ledgers a bookkeeper write job committed"
        )
    if not ledgers_text and not dataset:
        raise InvalidOptionError(
            "[BOOKKEEPER_MISSING_OPTION] say what to read: .option('ledgers', '7,9,12') (ids or ranges like '10-20') "
            "or .option('dataset', 'name') for the ledgers a bookkeeper write job committed"
        )
    start_entry = _int(opts, "startEntry", 0, minimum=0)
    end_entry = _int(opts, "endEntry", -1, minimum=-1)
    if end_entry != -1 and end_entry < start_entry:
        raise _bad("endEntry", end_entry, f"must be >= startEntry ({start_entry}), or -1 for the last entry")
    # 0 is the "not set" default (a given value must be >= 1)
    min_partitions = _int(opts, "minPartitions", 0, minimum=1, maximum=MAX_PARTITIONS) or None
    max_partitions = _int(opts, "maxPartitions", 0, minimum=1, maximum=MAX_PARTITIONS) or None
    if min_partitions is not None and max_partitions is not None and min_partitions > max_partitions:
        raise _bad("minPartitions", min_partitions, f"must be <= maxPartitions ({max_partitions})")
    return ReadOptions(
        metadata_service_uri=uri,
        ledger_ranges=parse_ledger_list(ledgers_text) if ledgers_text else None,
        dataset=dataset,
        scope_id=_int(opts, "scopeId", 0, minimum=INT64_MIN),
        start_entry=start_entry,
        end_entry=None if end_entry == -1 else end_entry,
        include_open_ledgers=_bool(opts, "includeOpenLedgers", False),
        max_entries_per_partition=_int(opts, "maxEntriesPerPartition", 100_000, minimum=1),
        max_bytes_per_partition=_int(opts, "maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION, minimum=1),
        min_partitions=min_partitions,
        max_partitions=max_partitions,
        batch_read_enabled=_bool(opts, "batchReadEnabled", True),
        batch_max_count=_int(opts, "batchMaxCount", 1000, minimum=1, maximum=(1 << 31) - 1),
        batch_max_size=_int(opts, "batchMaxSize", 4 * 1024 * 1024, minimum=1024),
        digest_type=_digest(opts, None),
        password=_password(opts),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        client_conf=_client_conf(opts),
        include_custom_metadata=_bool(opts, "includeCustomMetadata", True),
    )


def parse_write_options(options: Mapping[str, str | None]) -> WriteOptions:
    """Validate write options; raises :class:`InvalidOptionError` naming the option and the fix."""
    opts = _lower(options)
    _check_unknown(opts, _WRITE_KEYS, "write")
    uri = _uri(opts)
    dataset = _dataset(opts, required=True)
    assert dataset is not None
    ensemble = _int(opts, "ensembleSize", 3, minimum=1, maximum=1024)
    write_quorum = _int(opts, "writeQuorumSize", min(2, ensemble), minimum=1, maximum=1024)
    ack_quorum = _int(opts, "ackQuorumSize", min(2, write_quorum), minimum=1, maximum=1024)
    if write_quorum > ensemble:
        raise _bad("writeQuorumSize", write_quorum, f"must be <= ensembleSize ({ensemble})")
    if ack_quorum > write_quorum:
        raise _bad("ackQuorumSize", ack_quorum, f"must be <= writeQuorumSize ({write_quorum})")
    return WriteOptions(
        metadata_service_uri=uri,
        dataset=dataset,
        scope_id=_int(opts, "scopeId", 0, minimum=INT64_MIN),
        ensemble_size=ensemble,
        write_quorum_size=write_quorum,
        ack_quorum_size=ack_quorum,
        digest_type=_digest(opts, "CRC32C") or "CRC32C",
        password=_password(opts),
        client_conf=_client_conf(opts),
        application_id=_application_id(opts),
        rows_per_entry=_int(opts, "rowsPerEntry", 1, minimum=1, maximum=MAX_ROWS_PER_ENTRY),
        entry_max_bytes=_int(opts, "entryMaxBytes", DEFAULT_ENTRY_MAX_BYTES, minimum=1024, maximum=MAX_ENTRY_MAX_BYTES),
    )


def _application_id(opts: Mapping[str, str]) -> str | None:
    raw = (opts.get("applicationid") or "").strip()
    if not raw:
        return None
    if len(raw) > 200 or not raw.isprintable():
        raise _bad("applicationId", raw, "expected Spark's application id, e.g. spark.sparkContext.applicationId")
    return raw
