"""Ledger metadata: the value of a ledger znode, byte-compatible with Java's ``LedgerMetadataSerDe``.

Three formats share one header line, ``BookieMetadataFormatVersion\\t<n>\\n``:

* V1 (4.0): hand-written text lines (read, and written for V1 ledgers only);
* V2 (4.2): protobuf TextFormat of ``LedgerMetadataFormat``, never with ``cToken``;
* V3 (4.9+, Java's default writer): a varint32 length, then the protobuf binary.

:func:`serialize` puts in exactly the fields Java's writer puts in, in the
same order, so the bytes equal Java's for the same metadata (with one caveat:
``customMetadata`` entries come out in ``custom_metadata``'s dict order, while
Java uses its map's iteration order, a ``HashMap`` after a parse).
:func:`parse` applies the checks of Java's reader (``LedgerMetadataBuilder`` and
``LedgerMetadataImpl``), so a blob we accept is one Java can open, and any
bad blob raises :class:`~bkspark.errors.BadMetadataError`, nothing else.

Java quirk kept on purpose: deriving new metadata from old
(``LedgerMetadataBuilder.from``) drops ``cToken``, so every update Java writes
carries ``cToken = 0``.  Our derivation helpers (:meth:`LedgerMetadata.close`,
:meth:`LedgerMetadata.with_ensemble` ...) do the same.
"""

from __future__ import annotations

import bisect
import functools
import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bkspark.config.typed import is_int
from bkspark.protocol.values import INT32_MAX, INT64_RANGE, encode_varint
from bkspark.errors import BadMetadataError, InvalidBookieIdError, LocalProtocolError
from bkspark.protocol._textformat import parse_text, print_java
from bkspark.protocol.bookie_id import java_parse_int, java_split, validate_bookie_id
from bkspark.protocol.digest import DigestType
from bkspark.protocol.proto import DataFormats_pb2 as pb

__all__ = [
    "LedgerState",
    "LedgerMetadata",
    "write_set",
    "check_custom_metadata",
    "serialize",
    "parse",
    "header_version",
    "HEADER_KEY",
    "CURRENT_FORMAT_VERSION",
    "INVALID_ENTRY_ID",
    "V1_IN_RECOVERY_ENTRY_ID",
]

#: ``VERSION_KEY_BYTES``: what every metadata blob starts with.
HEADER_KEY = b"BookieMetadataFormatVersion\t"
#: ``CURRENT_METADATA_FORMAT_VERSION`` of every Java writer since 4.10.
CURRENT_FORMAT_VERSION = 3
#: ``LedgerHandle.INVALID_ENTRY_ID``: the last entry id of a ledger that is not closed.
INVALID_ENTRY_ID = -1
#: V1 writes an in-recovery ledger as ``-102\tCLOSED``.
V1_IN_RECOVERY_ENTRY_ID = -102

_MAX_VERSION_DIGITS = 10
_V1_CLOSED_TAG = "CLOSED"
_LINE_RE = re.compile(r"\r\n|\r|\n")  # BufferedReader.readLine's terminators


class LedgerState(enum.IntEnum):
    """A ledger's state, numbered as ``LedgerMetadataFormat.State``."""

    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


def _int_in(value: object, bounds: tuple[int, int]) -> bool:
    return is_int(value) and bounds[0] <= value <= bounds[1]  # type: ignore[operator]


def write_set(entry_id: int, ensemble_size: int, write_quorum_size: int) -> list[int]:
    """Ensemble indexes holding ``entry_id``: ``(e + i) mod E`` for ``i < Qw``, in that order.

    BookKeeper's ``RoundRobinDistributionSchedule``; the first index is the one
    a striped ledger's single copy and every read start from.
    """
    return [(entry_id + i) % ensemble_size for i in range(write_quorum_size)]


def check_custom_metadata(custom_metadata: object) -> dict[str, bytes]:
    """A copy of ``custom_metadata`` as ``{str: bytes}``; ``TypeError`` for anything else (None: empty).

    Java's ``customMetadata`` is ``Map<String, byte[]>``: a set, a list, or text
    values are a caller's mistake, refused before they reach ZooKeeper.
    """
    if custom_metadata is None:
        return {}
    if not isinstance(custom_metadata, Mapping):
        raise TypeError(f"custom_metadata must be a mapping of str to bytes, not {type(custom_metadata).__name__}")
    out: dict[str, bytes] = {}
    for key, value in custom_metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"custom_metadata keys must be str, not {type(key).__name__} ({key!r})")
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"custom_metadata[{key!r}] must be bytes, not {type(value).__name__}")
        out[key] = bytes(value)
    return out


@dataclass(frozen=True)
class LedgerMetadata:
    """One ledger's metadata, as Java's ``LedgerMetadataImpl`` holds it.

    ``ensembles`` maps the first entry id of each segment to its bookie ids
    (kept sorted by key).  ``password`` and ``digest_type`` are both ``None``
    for a ledger stored without a password (V1, or a blob lacking the field):
    the opener's own digest type then applies, as in Java.  ``ctime`` is the
    creation time in ms (-1 if unknown); it is written only when
    ``store_ctime`` is set (Java's ``storeSystemTimeAsLedgerCreationTime``).
    Construction validates like Java's builder and raises
    :class:`LocalProtocolError`.
    """

    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = INVALID_ENTRY_ID
    length: int = 0
    digest_type: DigestType | None = DigestType.CRC32C
    password: bytes | None = field(default=b"", repr=False)  # never printed (docs/security.md)
    ensembles: Mapping[int, tuple[str, ...]] = field(default_factory=dict, hash=False)
    ctime: int = -1
    custom_metadata: Mapping[str, bytes] = field(default_factory=dict, hash=False)
    ctoken: int = 0
    format_version: int = CURRENT_FORMAT_VERSION
    store_ctime: bool = False

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise LocalProtocolError(f"invalid ledger metadata: {problem}")

    def _problem(self) -> str | None:
        """Why this metadata is not something Java would build, or ``None``."""
        if self.format_version not in (1, 2, 3):
            return f"format version {self.format_version!r} is not 1, 2 or 3"
        sizes = (self.ensemble_size, self.write_quorum_size, self.ack_quorum_size)
        if not all(_int_in(s, (1, INT32_MAX)) for s in sizes):
            return f"ensemble/write quorum/ack quorum sizes must be positive int32: {sizes}"
        if self.ensemble_size < self.write_quorum_size:
            return "Write quorum must be less or equal to ensemble size"
        if self.write_quorum_size < self.ack_quorum_size:
            return "Write quorum must be greater or equal to ack quorum"
        try:
            object.__setattr__(self, "state", LedgerState(self.state))
        except ValueError:
            return f"unknown state {self.state!r}"
        if not (_int_in(self.last_entry_id, INT64_RANGE) and _int_in(self.length, INT64_RANGE)):
            return "last_entry_id and length must be int64"
        if self.state != LedgerState.CLOSED and (self.last_entry_id != INVALID_ENTRY_ID or self.length != 0):
            return "a ledger that is not closed has last_entry_id -1 and length 0"
        if (self.password is None) != (self.digest_type is None):
            return "Either both password and digest type must be set, or neither"
        if self.password is not None:
            if not isinstance(self.password, (bytes, bytearray, memoryview)):
                return "password must be bytes"
            object.__setattr__(self, "password", bytes(self.password))
            try:
                object.__setattr__(self, "digest_type", DigestType(self.digest_type))
            except ValueError:
                return f"unknown digest type {self.digest_type!r}"
        if not isinstance(self.ensembles, Mapping) or not self.ensembles:
            return "There must be at least one ensemble in the ledger"
        ensembles: dict[int, tuple[str, ...]] = {}
        for first in sorted(self.ensembles):
            if not _int_in(first, INT64_RANGE):
                return f"segment key {first!r} is not an int64 entry id"
            members = tuple(self.ensembles[first])
            if len(members) != self.ensemble_size:
                return (
                    f"Size of passed in ensemble must match the ensembleSize: segment {first} has "
                    f"{len(members)} bookies, ensemble size is {self.ensemble_size}"
                )
            for member in members:
                try:
                    validate_bookie_id(member)
                except InvalidBookieIdError as exc:
                    return f"segment {first}: {exc}"
            ensembles[first] = members
        object.__setattr__(self, "ensembles", ensembles)
        custom: dict[str, bytes] = {}
        for key, value in dict(self.custom_metadata).items():
            if not isinstance(key, str) or not isinstance(value, (bytes, bytearray, memoryview)):
                return "custom metadata maps str keys to bytes values"
            custom[key] = bytes(value)
        object.__setattr__(self, "custom_metadata", custom)
        if not (_int_in(self.ctime, INT64_RANGE) and _int_in(self.ctoken, INT64_RANGE)):
            return "ctime and ctoken must be int64"
        return None

    # -- queries ---------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        """Whether the ledger is closed (its last entry id and length are final)."""
        return self.state == LedgerState.CLOSED

    @property
    def has_password(self) -> bool:
        """Whether the metadata stores a password and digest type (V2/V3 written by Java do)."""
        return self.password is not None

    @property
    def last_ensemble(self) -> tuple[str, ...]:
        """The current (highest) segment's bookies: the one every new entry goes to."""
        return self.ensembles[self._segment_starts[-1]]

    @property
    def last_segment_start(self) -> int:
        """The first entry id of the current (highest) segment."""
        return self._segment_starts[-1]

    def segment(self, entry_id: int) -> tuple[int, tuple[str, ...]]:
        """``(first entry id, bookies)`` of the segment holding ``entry_id``: the greatest first entry id <= it.

        The one segment lookup of the code base (the client's reads, writes and recovery use it).
        """
        keys = self._segment_starts
        index = bisect.bisect_right(keys, entry_id) - 1
        if index < 0:
            raise LocalProtocolError(
                "no ensemble covers this entry", entry_id=entry_id, first_segment=keys[0]
            )
        return keys[index], self.ensembles[keys[index]]

    @functools.cached_property
    def _segment_starts(self) -> list[int]:
        """The segments' first entry ids, ascending (computed once: the metadata is immutable)."""
        return list(self.ensembles)

    def ensemble_at(self, entry_id: int) -> tuple[str, ...]:
        """The bookies of the segment holding ``entry_id``."""
        return self.segment(entry_id)[1]

    def next_segment_start(self, entry_id: int) -> int | None:
        """The first entry id of the segment after the one holding ``entry_id``; ``None`` in the last one."""
        keys = self._segment_starts
        index = bisect.bisect_right(keys, entry_id)
        return keys[index] if index < len(keys) else None

    def write_set(self, entry_id: int) -> list[int]:
        """Ensemble indexes holding ``entry_id`` (:func:`write_set` with this ledger's E and Qw)."""
        return write_set(entry_id, self.ensemble_size, self.write_quorum_size)

    # -- derivations (Java's LedgerMetadataBuilder.from(...): cToken is dropped) -------
    # Every change to a ledger's metadata is one of the methods below: no caller edits the
    # segment map or calls dataclasses.replace itself (docs/architecture.md, "Ledger metadata").

    def as_update(self) -> "LedgerMetadata":
        """This metadata as an update writes it: ``cToken`` 0.

        The one home of Java's rule that an update never carries the creation token
        (``LedgerMetadataBuilder.from`` does not copy it): every derivation below
        applies it, and :meth:`ZkMetadataStore.write_ledger_metadata
        <bkspark.metadata.store.ZkMetadataStore.write_ledger_metadata>` applies it to
        whatever it is handed.
        """
        return dataclasses.replace(self, ctoken=0) if self.ctoken else self

    def with_ctoken(self, ctoken: int) -> "LedgerMetadata":
        """A copy carrying ``ctoken``: what a create writes to recognise its own znode after a lost connection."""
        return dataclasses.replace(self, ctoken=ctoken)

    def _derive(self, **changes: object) -> "LedgerMetadata":
        return dataclasses.replace(self, **changes).as_update()  # type: ignore[arg-type]

    def with_state(
        self, state: LedgerState, last_entry_id: int = INVALID_ENTRY_ID, length: int = 0
    ) -> "LedgerMetadata":
        """A copy in ``state`` (``last_entry_id``/``length`` only count when CLOSED)."""
        return self._derive(state=LedgerState(state), last_entry_id=last_entry_id, length=length)

    def in_recovery(self) -> "LedgerMetadata":
        """A copy marked IN_RECOVERY (what recovery writes before fencing)."""
        return self.with_state(LedgerState.IN_RECOVERY)

    def close(self, last_entry_id: int, length: int) -> "LedgerMetadata":
        """A closed copy (``LedgerMetadataBuilder.closingAt``)."""
        return self.with_state(LedgerState.CLOSED, last_entry_id, length)

    def with_ensemble(self, first_entry_id: int, bookies: Sequence[str]) -> "LedgerMetadata":
        """A copy with a new segment from ``first_entry_id`` on (``newEnsembleEntry``: key must grow)."""
        last = self.last_segment_start
        if first_entry_id <= last:
            raise LocalProtocolError(
                "New entry must have a first entry greater than any existing ensemble key",
                first_entry_id=first_entry_id,
                last_key=last,
            )
        ensembles = dict(self.ensembles)
        ensembles[first_entry_id] = tuple(bookies)
        return self._derive(ensembles=ensembles)

    def with_last_ensemble(self, first_entry_id: int, bookies: Sequence[str]) -> "LedgerMetadata":
        """A copy whose current segment is ``bookies`` from ``first_entry_id`` on: Java's ensemble change.

        A new segment (:meth:`with_ensemble`) when ``first_entry_id`` is past the current segment's start;
        the current segment replaced (:meth:`replace_ensemble`) when it starts there already (a second
        change before any entry of the first one was acknowledged); an earlier start is refused.
        """
        if first_entry_id == self.last_segment_start:
            return self.replace_ensemble(first_entry_id, bookies)
        return self.with_ensemble(first_entry_id, bookies)

    def replace_ensemble(self, first_entry_id: int, bookies: Sequence[str]) -> "LedgerMetadata":
        """A copy with an existing segment's bookies replaced (``replaceEnsembleEntry``, re-replication)."""
        if first_entry_id not in self.ensembles:
            raise LocalProtocolError(
                "Ensemble must replace an existing ensemble in the ensemble map", first_entry_id=first_entry_id
            )
        ensembles = dict(self.ensembles)
        ensembles[first_entry_id] = tuple(bookies)
        return self._derive(ensembles=ensembles)

    def with_custom_metadata(self, custom_metadata: Mapping[str, bytes]) -> "LedgerMetadata":
        """A copy with other custom metadata."""
        return self._derive(custom_metadata=dict(custom_metadata))

    def empty_closed_sibling(self, ctime: int, custom_metadata: Mapping[str, bytes]) -> "LedgerMetadata":
        """The metadata of another ledger, created closed and empty on this one's first ensemble, with the same
        quorums, digest, password and format, created at ``ctime`` (ms) with ``custom_metadata``: what the Spark
        writer's commit marker holds (docs/connector.md).  Carries no cToken: its create draws one."""
        return self._derive(
            state=LedgerState.CLOSED, last_entry_id=INVALID_ENTRY_ID, length=0,
            ensembles={0: self.ensembles[self._segment_starts[0]]}, ctime=ctime, custom_metadata=dict(custom_metadata),
        )


# ---------------------------------------------------------------------------
# Writing


def _build_format(md: LedgerMetadata, include_ctoken: bool) -> pb.LedgerMetadataFormat:
    """``buildLedgerMetadataFormat``: the fields Java's V2/V3 writer sets."""
    if md.password is None or md.digest_type is None:
        raise LocalProtocolError(
            "metadata without a password/digest type can only be written as format 1 "
            "(Java's V2/V3 writer cannot express it either)"
        )
    fmt = pb.LedgerMetadataFormat(
        quorumSize=md.write_quorum_size,
        ackQuorumSize=md.ack_quorum_size,
        ensembleSize=md.ensemble_size,
        length=md.length,
        lastEntryId=md.last_entry_id,
        state=int(md.state),
    )
    if md.store_ctime:
        fmt.ctime = md.ctime
    fmt.digestType = int(md.digest_type)
    fmt.password = md.password
    for key, value in md.custom_metadata.items():
        fmt.customMetadata.add(key=key, value=value)
    for first, members in md.ensembles.items():
        fmt.segment.add(firstEntryId=first, ensembleMember=members)
    if include_ctoken:
        fmt.cToken = md.ctoken
    return fmt


def _serialize_v1(md: LedgerMetadata) -> bytes:
    lines = [str(md.write_quorum_size), str(md.ensemble_size), str(md.length)]
    text = "".join(line + "\n" for line in lines)
    for first, members in md.ensembles.items():
        text += "\t".join([str(first), *members]) + "\n"
    if md.state == LedgerState.IN_RECOVERY:
        text += f"{V1_IN_RECOVERY_ENTRY_ID}\t{_V1_CLOSED_TAG}"
    elif md.state == LedgerState.CLOSED:
        text += f"{md.last_entry_id}\t{_V1_CLOSED_TAG}"
    return text.encode("utf-8")


def serialize(md: LedgerMetadata, version: int | None = None) -> bytes:
    """The znode bytes Java's ``LedgerMetadataSerDe.serialize`` writes for ``md``.

    ``version`` defaults to ``md.format_version`` (Java keeps the version a
    ledger was read with); 3 is what a new ledger gets.  Deterministic: the
    same metadata always gives the same bytes.
    """
    version = md.format_version if version is None else version
    header = HEADER_KEY + str(version).encode("ascii") + b"\n"
    if version == 3:
        body = _build_format(md, include_ctoken=True).SerializeToString()
        return header + encode_varint(len(body)) + body
    if version == 2:
        return header + print_java(_build_format(md, include_ctoken=False)).encode("utf-8")
    if version == 1:
        return header + _serialize_v1(md)
    raise LocalProtocolError("Invalid format version", version=version)


# ---------------------------------------------------------------------------
# Reading


def header_version(data: bytes) -> tuple[int, int]:
    """``(format version, offset of the body)`` from a metadata header (Java's ``readHeader``)."""
    key_len = len(HEADER_KEY)
    if data.startswith(HEADER_KEY):  # the usual case in one look; the walk below names what is wrong
        end = data.find(b"\n", key_len, key_len + _MAX_VERSION_DIGITS)
        if end >= 0:
            version = java_parse_int(data[key_len:end].decode("utf-8", errors="replace"))
            if version is not None:
                return version, end + 1
    for i in range(key_len):
        if i >= len(data) or data[i] != HEADER_KEY[i]:
            raise BadMetadataError(f"Ledger metadata header corrupt at index {i}")
    for i in range(_MAX_VERSION_DIGITS):
        pos = key_len + i
        if pos >= len(data):
            break
        if data[pos] == 0x0A:
            text = data[key_len:pos].decode("utf-8", errors="replace")
            version = java_parse_int(text)
            if version is None:
                raise BadMetadataError(f"Unable to parse version number from {text!r}")
            return version, pos + 1
    raise BadMetadataError("Unable to find end of version number, metadata appears corrupt")


def _readencode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """protobuf-java's ``readRawVarint32``: up to 10 bytes, the value truncated to a signed int32."""
    result = 0
    for i in range(10):
        if pos >= len(data):
            raise BadMetadataError("V3 ledger metadata truncated inside the length varint")
        b = data[pos]
        pos += 1
        if i < 5:
            result |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            result &= 0xFFFFFFFF
            return (result - (1 << 32) if result & 0x80000000 else result), pos
    raise BadMetadataError("V3 ledger metadata has a malformed length varint")


def _text(value: str | bytes) -> str:
    # Python's protobuf hands back bytes for a proto2 string that is not UTF-8;
    # Java decodes such bytes with U+FFFD replacements.
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def _from_format(
    fmt: pb.LedgerMetadataFormat, version: int, znode_ctime: int | None
) -> LedgerMetadata:
    """``decodeFormat`` + ``LedgerMetadataBuilder.build``."""
    write_quorum = fmt.quorumSize
    ack_quorum = fmt.ackQuorumSize if fmt.HasField("ackQuorumSize") else write_quorum
    state = LedgerState(fmt.state)
    last_entry_id, length = INVALID_ENTRY_ID, 0
    if state == LedgerState.CLOSED:
        last_entry_id, length = fmt.lastEntryId, fmt.length
    password: bytes | None = None
    digest_type: DigestType | None = None
    if fmt.HasField("password"):
        password = fmt.password
        digest_type = DigestType(fmt.digestType)  # absent -> proto2 default, CRC32, as in Java
    ensembles: dict[int, tuple[str, ...]] = {}
    for segment in fmt.segment:
        members = tuple(_text(m) for m in segment.ensembleMember)
        for member in members:
            try:
                validate_bookie_id(member)
            except InvalidBookieIdError as exc:
                raise BadMetadataError(f"segment {segment.firstEntryId}: {exc}") from None
        if len(members) != fmt.ensembleSize:
            raise BadMetadataError(
                "Size of passed in ensemble must match the ensembleSize of the builder: "
                f"segment {segment.firstEntryId} has {len(members)} bookies, ensembleSize is {fmt.ensembleSize}"
            )
        if ensembles and segment.firstEntryId <= next(reversed(ensembles)):
            raise BadMetadataError(
                "New entry must have a first entry greater than any existing ensemble key: "
                f"segment {segment.firstEntryId} follows {next(reversed(ensembles))}"
            )
        ensembles[segment.firstEntryId] = members
    custom: dict[str, bytes] = {}
    for entry in fmt.customMetadata:
        key = _text(entry.key)
        if key in custom:  # Java's Collectors.toMap throws on a duplicate key
            raise BadMetadataError(f"duplicate custom metadata key {key!r}")
        custom[key] = entry.value
    if fmt.HasField("ctime"):
        ctime, store_ctime = fmt.ctime, True
    else:
        ctime, store_ctime = (znode_ctime if znode_ctime is not None else -1), False
    try:
        return LedgerMetadata(
            ensemble_size=fmt.ensembleSize,
            write_quorum_size=write_quorum,
            ack_quorum_size=ack_quorum,
            state=state,
            last_entry_id=last_entry_id,
            length=length,
            digest_type=digest_type,
            password=password,
            ensembles=ensembles,
            ctime=ctime,
            custom_metadata=custom,
            ctoken=fmt.cToken,
            format_version=version,
            store_ctime=store_ctime,
        )
    except LocalProtocolError as exc:
        raise BadMetadataError(str(exc)) from None


def _parse_v3(data: bytes, pos: int, znode_ctime: int | None) -> LedgerMetadata:
    size, pos = _readencode_varint(data, pos)
    if size < 0:
        raise BadMetadataError(f"V3 ledger metadata has a negative length {size}")
    if pos + size > len(data):
        raise BadMetadataError(
            f"V3 ledger metadata truncated: the message needs {size} bytes, {len(data) - pos} remain"
        )
    fmt = pb.LedgerMetadataFormat()
    try:
        fmt.ParseFromString(data[pos : pos + size])  # trailing bytes ignored, as in Java
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError and, rarely, others
        raise BadMetadataError(f"V3 ledger metadata is not a LedgerMetadataFormat: {exc}") from None
    missing = fmt.FindInitializationErrors()
    if missing:
        raise BadMetadataError(f"V3 ledger metadata misses required fields: {', '.join(missing)}")
    return _from_format(fmt, 3, znode_ctime)


def _parse_v2(data: bytes, pos: int, znode_ctime: int | None) -> LedgerMetadata:
    fmt = pb.LedgerMetadataFormat()
    parse_text(data[pos:].decode("utf-8", errors="replace"), fmt, "V2 ledger metadata")
    return _from_format(fmt, 2, znode_ctime)


def _parse_v1(data: bytes, pos: int) -> LedgerMetadata:
    lines = _LINE_RE.split(data[pos:].decode("utf-8", errors="replace"))
    if lines and lines[-1] == "":
        lines.pop()  # readLine() returns no empty line after a final terminator
    if len(lines) < 3:
        raise BadMetadataError("V1 ledger metadata needs quorum size, ensemble size and length lines")
    write_quorum = java_parse_int(lines[0])
    ensemble_size = java_parse_int(lines[1])
    length = java_parse_int(lines[2], *INT64_RANGE)
    if write_quorum is None or ensemble_size is None or length is None:
        raise BadMetadataError(f"V1 ledger metadata has a bad size line: {lines[:3]!r}")
    state, last_entry_id, final_length = LedgerState.OPEN, INVALID_ENTRY_ID, 0
    ensembles: dict[int, tuple[str, ...]] = {}
    for line in lines[3:]:
        parts = java_split(line, "\t")
        if len(parts) < 2:
            raise BadMetadataError(f"V1 ledger metadata line {line!r} has fewer than 2 fields")
        if parts[1] == _V1_CLOSED_TAG:
            closed_at = java_parse_int(parts[0], *INT64_RANGE)
            if closed_at is None:
                raise BadMetadataError(f"V1 ledger metadata has a bad CLOSED line {line!r}")
            if closed_at == V1_IN_RECOVERY_ENTRY_ID:
                state = LedgerState.IN_RECOVERY
            else:
                state, last_entry_id, final_length = LedgerState.CLOSED, closed_at, length
            break
        for member in parts[1:]:
            try:
                validate_bookie_id(member)
            except InvalidBookieIdError as exc:
                raise BadMetadataError(f"V1 ledger metadata: {exc}") from None
        first = java_parse_int(parts[0], *INT64_RANGE)
        if first is None:
            raise BadMetadataError(f"V1 ledger metadata has a bad first entry id in {line!r}")
        if len(parts) - 1 != ensemble_size:
            raise BadMetadataError(
                f"Size of passed in ensemble must match the ensembleSize of the builder: {line!r}"
            )
        if ensembles and first <= next(reversed(ensembles)):
            raise BadMetadataError(
                f"New entry must have a first entry greater than any existing ensemble key: {line!r}"
            )
        ensembles[first] = tuple(parts[1:])
    try:
        return LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum_size=write_quorum,
            ack_quorum_size=write_quorum,
            state=state,
            last_entry_id=last_entry_id,
            length=final_length,
            digest_type=None,
            password=None,
            ensembles=ensembles,
            format_version=1,
        )
    except LocalProtocolError as exc:
        raise BadMetadataError(str(exc)) from None


def parse(data: bytes | bytearray | memoryview, znode_ctime: int | None = None) -> LedgerMetadata:
    """Read a ledger znode's bytes (V1, V2 or V3) as Java's ``LedgerMetadataSerDe.parseConfig`` does.

    ``znode_ctime`` (the znode's ``stat.ctime``) becomes the creation time
    when the blob has none, as in Java.  Raises :class:`BadMetadataError`.
    Stricter than Java in two corners no Java writer produces: quorum sizes
    below 1 (Java only checks E >= Qw >= Qa), and a V3 length prefix longer
    than the data (4.17's protobuf-java may then parse the shorter message).
    """
    data = bytes(data)
    version, pos = header_version(data)
    if version == 3:
        return _parse_v3(data, pos, znode_ctime)
    if version == 2:
        return _parse_v2(data, pos, znode_ctime)
    if version == 1:
        return _parse_v1(data, pos)
    raise BadMetadataError(
        f"Metadata version not compatible. Expected between 1 and {CURRENT_FORMAT_VERSION}, but got {version}"
    )
