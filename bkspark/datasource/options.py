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

from bkspark.config.typed import DEFAULT_ACK_QUORUM_SIZE, DEFAULT_ENSEMBLE_SIZE, DEFAULT_WRITE_QUORUM_SIZE
from bkspark.confkeys import refuse_misspelled_security_keys
from bkspark.datasource.packing import DEFAULT_ENTRY_MAX_BYTES
from bkspark.errors import InvalidOptionError
from bkspark.protocol.values import INT64_MAX, INT64_MIN, parse_bool
from bkspark.config.secrets import MASK, secret_from

__all__ = [
    "ReadOptions",
    "ScanLimits",
    "WriteOptions",
    "parse_read_options",
    "parse_write_options",
    "parse_ledger_list",
    "DATASET_NAME",
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
#: What may name a dataset (its znode's name); match with ``fullmatch`` (``$`` alone lets a trailing newline in).
DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")

@dataclass(frozen=True)
class OptionSpec:
    """One option of the data source, as docs/connector.md and docs/streaming.md document it.

    ``side`` is ``"read"`` (``spark.read`` / ``spark.readStream``) or ``"write"`` (``df.write`` /
    ``df.writeStream``); ``batch`` and ``stream`` say which of the two kinds accepts it; ``default`` is the
    documented default as the docs' tables write it (``required``, ``none``, or the value a user would type).
    ``tests/unit/test_connector_option_docs.py`` checks the docs' tables against this table.
    """

    name: str
    side: str
    default: str
    batch: bool = True
    stream: bool = True
    aliases: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The name as Spark hands it over (lower-cased)."""
        return self.name.lower()


def _read(name: str, default: str, *, batch: bool = True, stream: bool = True, aliases: tuple[str, ...] = ()) -> OptionSpec:
    return OptionSpec(name, "read", default, batch, stream, aliases)


def _write(name: str, default: str, *, batch: bool = True, stream: bool = True) -> OptionSpec:
    return OptionSpec(name, "write", default, batch, stream)


#: Every option of the data source: the one home of their names, kinds and documented defaults.
OPTIONS: tuple[OptionSpec, ...] = (
    _read("metadataServiceUri", "required"),
    _read("ledgers", "none"),
    _read("dataset", "none"),
    _read("path", "none"),
    _read("scopeId", "0"),
    _read("startEntry", "0"),
    _read("endEntry", "-1", stream=False),
    _read("startingOffsets", "earliest"),
    _read("endingOffsets", "latest", stream=False),
    _read("startingTimestamp", "none"),
    _read("endingTimestamp", "none", stream=False),
    _read("includeOpenLedgers", "false"),
    _read("maxEntriesPerPartition", "100000"),
    _read("maxBytesPerPartition", str(DEFAULT_MAX_BYTES_PER_PARTITION)),
    _read("minPartitions", "none"),
    _read("maxPartitions", "none"),
    _read("batchReadEnabled", "true"),
    _read("batchMaxCount", "1000"),
    _read("batchMaxSize", "4194304"),
    _read("digestType", "none"),
    _read("password", '""'),
    _read("passwordFile", "none"),
    _read("passwordEnv", "none"),
    _read("failOnDataLoss", "true"),
    _read("includeCustomMetadata", "false"),
    _read("includeHeaders", "false"),
    _read("maxEntriesPerTrigger", "none", batch=False, aliases=("maxOffsetsPerTrigger",)),
    _read("maxBytesPerTrigger", "none", batch=False),
    _read("minEntriesPerTrigger", "none", batch=False, aliases=("minOffsetsPerTrigger",)),
    _read("maxTriggerDelay", "15m", batch=False),
    _read("longPollTimeoutMs", "2000", batch=False, aliases=("longPollTimeout",)),
    _write("metadataServiceUri", "required"),
    _write("dataset", "required"),
    _write("path", "none"),
    _write("scopeId", "0"),
    _write("ensembleSize", str(DEFAULT_ENSEMBLE_SIZE)),
    _write("writeQuorumSize", str(DEFAULT_WRITE_QUORUM_SIZE)),
    _write("ackQuorumSize", str(DEFAULT_ACK_QUORUM_SIZE)),
    _write("digestType", "CRC32C"),
    _write("password", '""'),
    _write("passwordFile", "none"),
    _write("passwordEnv", "none"),
    _write("applicationId", "none"),
    _write("rowsPerEntry", "1"),
    _write("entryMaxBytes", str(DEFAULT_ENTRY_MAX_BYTES)),
    _write("checkpointLocation", "required", batch=False),
    _write("queryName", "none", batch=False),
)


def option_keys(side: str, *, stream: bool) -> frozenset[str]:
    """The lower-cased names (aliases included) that a ``side`` of the given kind accepts."""
    return frozenset(
        key for spec in OPTIONS if spec.side == side and (spec.stream if stream else spec.batch)
        for key in (spec.key, *(a.lower() for a in spec.aliases))
    )


def option_named(side: str, key: str) -> OptionSpec | None:
    """The option of ``side`` whose name or alias is ``key`` (any case)."""
    key = key.lower()
    for spec in OPTIONS:
        if spec.side == side and key in (spec.key, *(a.lower() for a in spec.aliases)):
            return spec
    return None


_READ_KEYS = option_keys("read", stream=False)
_WRITE_KEYS = option_keys("write", stream=False)


def _lower(options: Mapping[str, str | None], side: str = "read") -> dict[str, str]:
    """The options with lower-cased keys and every alias under its option's own name (both given: an error)."""
    out: dict[str, str] = {}
    for raw_key, value in options.items():
        if value is None:
            continue
        key = str(raw_key).lower()
        spec = option_named(side, key)
        name = spec.key if spec is not None else key
        if name in out and out[name] != value:
            raise _bad(str(raw_key), value, f"it is another name of option '{spec.name if spec else name}', "
                       "which is set to another value; give one of them")
        out[name] = value
    return out


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


def _check_unknown(opts: Mapping[str, str], side: str, *, stream: bool) -> None:
    """Refuse an option this kind of query does not take: unknown ones, and those of the other kind (a
    ``readStream`` option on ``spark.read``, a batch-only one on ``readStream``), each named with the fix."""
    known = option_keys(side, stream=stream)
    this = ("spark.readStream" if stream else "spark.read") if side == "read" else ("df.writeStream" if stream else "df.write")
    other = ("spark.read" if stream else "spark.readStream") if side == "read" else ("df.write" if stream else "df.writeStream")
    for key in opts:
        if key in known or key.startswith(_CLIENT_PREFIX):
            continue
        spec = option_named(side, key)
        if spec is not None:
            raise _bad(spec.name, opts[key], f"it is an option of {other} only, not of {this} (docs/connector.md, "
                       "docs/streaming.md)")
        raise _bad(key, MASK if _looks_secret(key) else opts[key], f"not a {side} option of the bookkeeper data source "
                   "(see docs/connector.md); client settings go in 'bookkeeper.<key>'")


def _dataset(opts: Mapping[str, str], required: bool) -> str | None:
    name = opts.get("dataset") or opts.get("path")
    if not name:
        if required:
            raise InvalidOptionError(
                "[BOOKKEEPER_MISSING_OPTION] option 'dataset' is required for writes: it names the set of "
                "ledgers the job writes, e.g. .option('dataset', 'events'); a write may instead route "
                "each row by a string column 'dataset' (docs/connector.md, \"Routing rows by a dataset column\")"
            )
        return None
    return check_dataset_name(name)


def check_dataset_name(name: str, option: str = "dataset") -> str:
    """``name`` if it can name a dataset (its znode's name), else :class:`InvalidOptionError` naming ``option``."""
    if not DATASET_NAME.fullmatch(name):
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


def selected_ledgers(
    ranges: tuple[tuple[int, int], ...], list_between: Callable[[int, int], Iterable[int]]
) -> list[int]:
    """The ledger ids of the ``ledgers`` option, sorted, each once: every single id (it must exist: the caller
    checks), and the ids ``list_between(first, last)`` gives for each range (the ledgers that exist in it: the
    metadata store lists only the znodes under the range, docs/connector.md "Partitions")."""
    wanted = single_ids(ranges)
    for first, last in ranges:
        if first != last:
            wanted.update(lid for lid in list_between(first, last) if first <= lid <= last)
    return sorted(wanted)


@dataclass(frozen=True, kw_only=True)
class ScanLimits:
    """How a batch scan is cut into partitions and read: the knobs a ledger read (:class:`ReadOptions`) and a
    Pulsar topic read (``PulsarReadOptions``) share, under the same option names (docs/connector.md, "Partitions")."""

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


@dataclass(frozen=True)
class ReadOptions(ScanLimits):
    """What ``spark.read.format("bookkeeper")`` was asked to read."""

    metadata_service_uri: str
    ledger_ranges: tuple[tuple[int, int], ...] | None
    dataset: str | None
    scope_id: int = 0
    start_entry: int = 0
    end_entry: int | None = None
    include_open_ledgers: bool = False
    max_entries_per_partition: int = 100_000
    digest_type: str | None = None
    password: bytes = field(default=b"", repr=False)
    fail_on_data_loss: bool = True
    client_conf: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    #: The ledger-level ``custom_metadata`` column is in the schema; off by default, as Kafka's ``includeHeaders``
    #: (Spark's JVM and the Arrow transfer pay for the map in every row; docs/connector.md, "Schema").
    include_custom_metadata: bool = False
    #: The per-row ``headers`` column (Kafka's ``includeHeaders``): the headers a write kept (docs/connector.md).
    include_headers: bool = False
    #: Batch reads: ``((scope, ledger), first entry)`` from JSON ``startingOffsets``; other ledgers start at
    #: ``start_entry``.
    starting_offsets: tuple[tuple[tuple[int, int], int], ...] = ()
    #: Batch reads: ``((scope, ledger), end)`` from JSON ``endingOffsets``, the end exclusive as Kafka's.
    ending_offsets: tuple[tuple[tuple[int, int], int], ...] = ()
    #: Only ledgers created at or after / before these times (ms since the epoch; Kafka's ``startingTimestamp``).
    starting_timestamp_ms: int | None = None
    ending_timestamp_ms: int | None = None


@dataclass(frozen=True)
class WriteOptions:
    """What ``df.write.format("bookkeeper")`` was asked to write."""

    metadata_service_uri: str
    #: The dataset of every row; empty when each row names its own (the DataFrame's ``dataset`` column).
    dataset: str
    scope_id: int = 0
    ensemble_size: int = DEFAULT_ENSEMBLE_SIZE
    write_quorum_size: int = DEFAULT_WRITE_QUORUM_SIZE
    ack_quorum_size: int = DEFAULT_ACK_QUORUM_SIZE
    digest_type: str = "CRC32C"
    password: bytes = field(default=b"", repr=False)
    client_conf: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    #: Spark's application id, for the BP-44 ``createdBy`` of the ledgers (Spark does not hand it to data sources).
    application_id: str | None = None
    #: Rows packed into one entry at most (1: one row per entry, the default; docs/connector.md "Rows per entry").
    rows_per_entry: int = 1
    #: Bytes of one packed entry at most (a larger row still gets an entry of its own).
    entry_max_bytes: int = DEFAULT_ENTRY_MAX_BYTES


def stream_only_keys() -> frozenset[str]:
    """The lower-cased names of ``readStream``'s own options (docs/streaming.md), aliases included."""
    return option_keys("read", stream=True) - option_keys("read", stream=False)


def _timestamp(opts: Mapping[str, str], option: str) -> int | None:
    """A ledger creation time bound: milliseconds since the epoch (as Kafka's ``startingTimestamp``)."""
    value = _int(opts, option, -1, minimum=0)
    return None if value == -1 else value


def _batch_offsets(
    opts: Mapping[str, str], option: str, scope_id: int, word: str, markers: Mapping[int, str]
) -> tuple[tuple[tuple[int, int], int], ...]:
    """A batch read's ``startingOffsets``/``endingOffsets``: ``word`` (``earliest``/``latest``, the default, the
    same for every ledger) or JSON per ledger; Kafka's ``-2`` (earliest) and ``-1`` (latest) where ``markers``
    allow them.  Returns ``((scope, ledger), value)`` pairs, sorted."""
    from bkspark.datasource.stream_offsets import parse_offsets_json

    raw = (opts.get(option.lower()) or "").strip()
    if not raw or raw.lower() == word:
        return ()
    fix = (f"a batch read takes '{word}' or JSON such as {{\"7\": 10, \"0:9\": 120}} (ledger id or 'scope:ledger' "
           f"-> entry id; {', '.join(f'{k} {v}' for k, v in markers.items())})")
    if not raw.startswith("{"):
        raise _bad(option, raw, fix)
    parsed = parse_offsets_json(raw, option, scope_id, markers=markers, fix=fix)
    return tuple(sorted(parsed.items()))


def parse_read_options(options: Mapping[str, str | None], *, stream: bool | None = False) -> ReadOptions:
    """Validate read options; raises :class:`InvalidOptionError` naming the option and the fix.

    ``stream``: False for ``spark.read``, True for ``spark.readStream`` (each refuses the other's own options),
    None for ``schema()`` at ``load()``, which PySpark runs alike for both (it checks every value, not the kind).
    """
    from bkspark.datasource.stream_offsets import KAFKA_EARLIEST, KAFKA_LATEST

    opts = _lower(options)
    if stream is None:
        _check_unknown({k: v for k, v in opts.items() if k not in stream_only_keys()}, "read", stream=False)
        opts = {k: v for k, v in opts.items() if k not in stream_only_keys()}
    else:
        _check_unknown(opts, "read", stream=stream)
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
    scope_id = _int(opts, "scopeId", 0, minimum=INT64_MIN)
    starting: tuple[tuple[tuple[int, int], int], ...] = ()
    if stream is False:  # a stream's startingOffsets is its own (stream_offsets.parse_starting_offsets)
        starting = tuple(
            (ref, 0 if value == KAFKA_EARLIEST else value)
            for ref, value in _batch_offsets(opts, "startingOffsets", scope_id, "earliest", {KAFKA_EARLIEST: "earliest"})
        )
    ending = tuple(
        (ref, value) for ref, value in _batch_offsets(opts, "endingOffsets", scope_id, "latest", {KAFKA_LATEST: "latest"})
        if value != KAFKA_LATEST
    )
    starting_ts = _timestamp(opts, "startingTimestamp")
    ending_ts = _timestamp(opts, "endingTimestamp")
    if starting_ts is not None and ending_ts is not None and ending_ts <= starting_ts:
        raise _bad("endingTimestamp", ending_ts, f"must be > startingTimestamp ({starting_ts})")
    return ReadOptions(
        metadata_service_uri=uri,
        ledger_ranges=parse_ledger_list(ledgers_text) if ledgers_text else None,
        dataset=dataset,
        scope_id=scope_id,
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
        include_custom_metadata=_bool(opts, "includeCustomMetadata", False),
        include_headers=_bool(opts, "includeHeaders", False),
        starting_offsets=starting,
        ending_offsets=ending,
        starting_timestamp_ms=starting_ts,
        ending_timestamp_ms=ending_ts,
    )


def parse_write_options(
    options: Mapping[str, str | None], *, stream: bool = False, routed: bool = False
) -> WriteOptions:
    """Validate write options (``stream``: of ``df.writeStream``; ``routed``: the DataFrame has a ``dataset``
    column, so the ``dataset`` option may be absent); raises :class:`InvalidOptionError` naming the option and
    the fix."""
    opts = _lower(options, "write")
    _check_unknown(opts, "write", stream=stream)
    uri = _uri(opts)
    dataset = _dataset(opts, required=not routed) or ""
    ensemble = _int(opts, "ensembleSize", DEFAULT_ENSEMBLE_SIZE, minimum=1, maximum=1024)
    write_quorum = _int(opts, "writeQuorumSize", min(DEFAULT_WRITE_QUORUM_SIZE, ensemble), minimum=1, maximum=1024)
    ack_quorum = _int(opts, "ackQuorumSize", min(DEFAULT_ACK_QUORUM_SIZE, write_quorum), minimum=1, maximum=1024)
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
