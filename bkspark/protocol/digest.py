"""Entries, explicit-LAC blobs and their digests (docs/protocol.md §7).

An entry is what a client writes, a bookie stores verbatim and a read returns:

* scope 0 (every ledger Apache BookKeeper knows): BookKeeper's V1 format,
  ``ledgerId, entryId, lastAddConfirmed, length`` (4 x int64 BE, 32 bytes),
  then the digest, then the payload.  Byte-identical to Java's ``DigestManager``.
* scope != 0 (our BP-35 extension, docs/extensions.md): entry format V2,
  a format byte ``0x80 | 2 << 4 | digest_type`` (``0xA0 | dt``), then
  ``scopeId, ledgerId, entryId, lastAddConfirmed, length`` (41 bytes), then the
  digest, then the payload.  A reader tells the two apart by the high bit of
  byte 0: a V1 entry starts with a non-negative ledger id.

The digest covers ``header ‖ payload`` (never the digest bytes) with the
ledger's algorithm: CRC32 (8 bytes: the unsigned CRC as an int64), CRC32C
(4 bytes), HMAC-SHA1 keyed with SHA-1("mac" ‖ password) (20 bytes) or DUMMY
(nothing).  Explicit-LAC blobs follow the same scheme with a 16-byte
(scope 0) or 25-byte (scope != 0) header.

Only C-backed primitives are used (``zlib.crc32``, ``crc32c.crc32c``,
OpenSSL's HMAC through ``hmac``); structs are compiled once.  ``verify_entry``
does not copy the payload: it returns a memoryview slice of the data given.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
import zlib
from typing import Callable, NamedTuple

import crc32c as _crc32c

from bkspark.errors import (
    DigestMismatchError,
    InvalidOptionError,
    LocalProtocolError,
    MalformedFrameError,
)
from bkspark.protocol.speedups import speedups as _speedups

__all__ = [
    "DigestType",
    "Digester",
    "VerifiedEntry",
    "ENTRY_HEADER_SIZE",
    "ENTRY_V2_HEADER_SIZE",
    "LAC_HEADER_SIZE",
    "LAC_V2_HEADER_SIZE",
    "ENTRY_FORMAT_V2",
    "EMPTY_PASSWORD_MASTER_KEY",
    "master_key",
    "mac_key",
    "entry_header",
    "lac_header",
    "is_v2_format",
]

#: BookKeeper's ``DigestManager.METADATA_LENGTH``: the V1 entry header.
ENTRY_HEADER_SIZE = 32
#: Our entry format V2 header: format byte + scope, ledger, entry, LAC, length.
ENTRY_V2_HEADER_SIZE = 41
#: BookKeeper's ``DigestManager.LAC_METADATA_LENGTH``: ledger id + LAC.
LAC_HEADER_SIZE = 16
#: Explicit-LAC blob header for scope != 0: format byte + scope, ledger, LAC.
LAC_V2_HEADER_SIZE = 25
#: The format version stored in bits 4-6 of a V2 format byte.
ENTRY_FORMAT_V2 = 2

_FORMAT_HIGH_BIT = 0x80
_FORMAT_V2_BITS = _FORMAT_HIGH_BIT | (ENTRY_FORMAT_V2 << 4)  # 0xA0

_V1_HEADER = struct.Struct(">qqqq")
_V2_HEADER = struct.Struct(">Bqqqqq")
_LAC_V1_HEADER = struct.Struct(">qq")
_LAC_V2_HEADER = struct.Struct(">Bqqq")
_INT64_UNSIGNED = struct.Struct(">Q")
_INT32_UNSIGNED = struct.Struct(">I")


class DigestType(enum.IntEnum):
    """Digest algorithms, numbered as ``LedgerMetadataFormat.DigestType``."""

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4

    @property
    def digest_size(self) -> int:
        """Bytes the digest takes in an entry (8, 20, 4 or 0)."""
        return _DIGEST_SIZES[self]

    @property
    def api_name(self) -> str:
        """The name in Java's ``client.api.DigestType`` (``MAC`` for HMAC)."""
        return "MAC" if self is DigestType.HMAC else self.name

    @classmethod
    def parse(cls, value: "DigestType | int | str") -> "DigestType":
        """Accept a member, its metadata number, or a name (metadata or Java API, any case).

        ``"MAC"`` (Java's ``BookKeeper.DigestType.MAC``) and ``"HMAC"`` (the
        metadata enum) both mean :attr:`HMAC`.  Raises :class:`InvalidOptionError`.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, bool):
            raise InvalidOptionError("not a digest type", value=value)
        if isinstance(value, int):
            try:
                return cls(value)
            except ValueError:
                raise InvalidOptionError("unknown digest type number", value=value) from None
        if isinstance(value, str):
            name = value.strip().upper()
            if name.isdigit():
                return cls.parse(int(name))
            member = _DIGEST_NAMES.get(name)
            if member is None:
                raise InvalidOptionError(
                    "unknown digest type (expected CRC32, CRC32C, MAC/HMAC or DUMMY)", value=value
                )
            return member
        raise InvalidOptionError("not a digest type", value=value)


_DIGEST_SIZES = {DigestType.CRC32: 8, DigestType.HMAC: 20, DigestType.CRC32C: 4, DigestType.DUMMY: 0}
_DIGEST_NAMES = {
    "CRC32": DigestType.CRC32,
    "HMAC": DigestType.HMAC,
    "MAC": DigestType.HMAC,
    "CRC32C": DigestType.CRC32C,
    "DUMMY": DigestType.DUMMY,
}


def _check_password(password: bytes | bytearray | memoryview) -> bytes:
    if isinstance(password, str) or not isinstance(password, (bytes, bytearray, memoryview)):
        raise TypeError(f"password must be bytes, not {type(password).__name__}")
    return bytes(password)


def master_key(password: bytes) -> bytes:
    """SHA-1("ledger" ‖ password): the 20-byte key sent with adds, fences and WRITE_LAC."""
    return hashlib.sha1(b"ledger" + _check_password(password)).digest()


def mac_key(password: bytes) -> bytes:
    """SHA-1("mac" ‖ password): the HMAC-SHA1 key of HMAC ledgers."""
    return hashlib.sha1(b"mac" + _check_password(password)).digest()


#: ``master_key(b"")``, which the Java bookie special-cases.
EMPTY_PASSWORD_MASTER_KEY = master_key(b"")


class VerifiedEntry(NamedTuple):
    """An entry whose digest and ids checked out.

    ``payload`` is a memoryview slice of the data given to ``verify_entry``
    (zero copy; ``bytes(entry.payload)`` detaches it).  ``length`` is the
    cumulative ledger length the writer recorded.  A NamedTuple because it is
    built once per entry read: cheap to create, immutable.
    """

    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int
    payload: memoryview | bytes
    scope_id: int = 0


def _byte_view(data: bytes | bytearray | memoryview) -> memoryview:
    """A flat unsigned-byte view of ``data`` (no copy)."""
    if isinstance(data, memoryview):
        return data if data.format == "B" and data.ndim == 1 else data.cast("B")
    return memoryview(data)


def is_v2_format(data: bytes | bytearray | memoryview) -> bool:
    """True when ``data`` (an entry or LAC blob) starts with a V2 format byte's high bit."""
    return len(data) > 0 and (data[0] & _FORMAT_HIGH_BIT) != 0


def entry_header(data: bytes | bytearray | memoryview) -> tuple[int, int, int, int]:
    """``(scope_id, ledger_id, entry_id, last_add_confirmed)`` of a stored entry, no digest check.

    What a bookie needs to index an add.  Raises :class:`MalformedFrameError`
    when the bytes are too short for the header or carry an unknown format.
    """
    try:
        if data[0] & _FORMAT_HIGH_BIT:
            fmt, scope_id, ledger_id, entry_id, lac, _length = _V2_HEADER.unpack_from(data, 0)
            if fmt & 0xF0 != _FORMAT_V2_BITS:
                raise MalformedFrameError("unknown entry format byte", format_byte=fmt)
            return scope_id, ledger_id, entry_id, lac
        ledger_id, entry_id, lac, _length = _V1_HEADER.unpack_from(data, 0)
        return 0, ledger_id, entry_id, lac
    except (struct.error, IndexError):
        raise MalformedFrameError("entry shorter than its header", size=len(data)) from None


def lac_header(data: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """``(scope_id, ledger_id, lac)`` of an explicit-LAC blob, no digest check (for the bookie)."""
    try:
        if data[0] & _FORMAT_HIGH_BIT:
            fmt, scope_id, ledger_id, lac = _LAC_V2_HEADER.unpack_from(data, 0)
            if fmt & 0xF0 != _FORMAT_V2_BITS:
                raise MalformedFrameError("unknown LAC blob format byte", format_byte=fmt)
            return scope_id, ledger_id, lac
        ledger_id, lac = _LAC_V1_HEADER.unpack_from(data, 0)
        return 0, ledger_id, lac
    except (struct.error, IndexError):
        raise MalformedFrameError("explicit-LAC blob shorter than its header", size=len(data)) from None


class Digester:
    """Packages and verifies entries and explicit-LAC blobs of one ledger's digest type and password.

    Stateless after construction, so one instance may serve many ledgers
    with the same type and password, from many threads.
    """

    __slots__ = ("digest_type", "size", "_digest", "_format_byte", "_hmac")

    def __init__(self, digest_type: DigestType | int | str, password: bytes = b"") -> None:
        self.digest_type = DigestType.parse(digest_type)
        self.size = self.digest_type.digest_size
        self._format_byte = _FORMAT_V2_BITS | int(self.digest_type)
        self._hmac = None
        if self.digest_type is DigestType.HMAC:
            # One keyed object; each digest works on a copy of it.
            self._hmac = hmac.new(mac_key(password), digestmod="sha1")
        else:
            _check_password(password)
        self._digest: Callable[[object, object], bytes] = {
            DigestType.CRC32: self._crc32,
            DigestType.HMAC: self._hmac_sha1,
            DigestType.CRC32C: self._crc32c,
            DigestType.DUMMY: self._dummy,
        }[self.digest_type]

    def __repr__(self) -> str:
        return f"Digester({self.digest_type.name})"

    # -- the four algorithms over (header, payload) ---------------------------

    @staticmethod
    def _crc32(header: object, payload: object) -> bytes:
        return _INT64_UNSIGNED.pack(zlib.crc32(payload, zlib.crc32(header)))  # type: ignore[arg-type]

    @staticmethod
    def _crc32c(header: object, payload: object) -> bytes:
        return _INT32_UNSIGNED.pack(_crc32c.crc32c(payload, _crc32c.crc32c(header)))

    def _hmac_sha1(self, header: object, payload: object) -> bytes:
        mac = self._hmac.copy()  # type: ignore[union-attr]
        mac.update(header)  # type: ignore[arg-type]
        mac.update(payload)  # type: ignore[arg-type]
        return mac.digest()

    @staticmethod
    def _dummy(header: object, payload: object) -> bytes:
        return b""

    # -- entries ----------------------------------------------------------------

    def entry_overhead(self, scope_id: int = 0) -> int:
        """Bytes :meth:`package_entry` adds to a payload: the header of the entry format, then the digest."""
        return (ENTRY_HEADER_SIZE if scope_id == 0 else ENTRY_V2_HEADER_SIZE) + self.size

    def package_entry(
        self,
        ledger_id: int,
        entry_id: int,
        last_add_confirmed: int,
        length: int,
        payload: bytes | bytearray | memoryview,
        scope_id: int = 0,
    ) -> bytes:
        """Header ‖ digest ‖ payload, ready to send in an add (one copy of the payload).

        ``length`` is the cumulative ledger length including this payload.
        Scope 0 gives bytes identical to Java's ``DigestManager``; any other
        scope gives our entry format V2.  Raises :class:`LocalProtocolError`
        for ids that do not fit an int64 or a negative ledger id (which the
        V1 format could not tell from a V2 format byte).
        """
        if ledger_id < 0:
            raise LocalProtocolError("ledger ids are non-negative", ledger_id=ledger_id)
        try:
            if scope_id == 0:
                header = _V1_HEADER.pack(ledger_id, entry_id, last_add_confirmed, length)
            else:
                header = _V2_HEADER.pack(
                    self._format_byte, scope_id, ledger_id, entry_id, last_add_confirmed, length
                )
        except struct.error as exc:
            raise LocalProtocolError(
                f"entry header field out of int64 range: {exc}",
                scope_id=scope_id,
                ledger_id=ledger_id,
                entry_id=entry_id,
            ) from None
        return b"".join((header, self._digest(header, payload), payload))

    def verify_entry(
        self,
        data: bytes | bytearray | memoryview,
        ledger_id: int,
        entry_id: int | None,
        scope_id: int = 0,
    ) -> VerifiedEntry:
        """Check an entry as BookKeeper's ``DigestManager.verifyDigest`` does; return its fields.

        Checks, in Java's order: the size, the digest, the ledger id, then the
        entry id unless ``entry_id`` is None (a read of entry -1 / recovery
        read, where Java skips it).  For V2 entries the format byte's digest
        type and the scope id are checked too.  The returned payload is a
        memoryview slice of ``data`` (no copy).  Raises :class:`DigestMismatchError`.
        """
        view = _byte_view(data)
        data_size = len(view)
        digest_size = self.size
        if data_size and view[0] & _FORMAT_HIGH_BIT:
            header_size = ENTRY_V2_HEADER_SIZE
            if data_size < header_size + digest_size:
                raise DigestMismatchError(
                    "entry shorter than header and digest", ledger_id=ledger_id, entry_id=entry_id, size=data_size
                )
            fmt, got_scope, got_ledger, got_entry, lac, length = _V2_HEADER.unpack_from(view, 0)
            if fmt != self._format_byte:
                reason = (
                    "unknown entry format"
                    if fmt & 0xF0 != _FORMAT_V2_BITS
                    else f"entry written with digest type {fmt & 0x0F}, ledger uses {int(self.digest_type)}"
                )
                raise DigestMismatchError(reason, ledger_id=ledger_id, entry_id=entry_id, format_byte=fmt)
        else:
            header_size = ENTRY_HEADER_SIZE
            if data_size < header_size + digest_size:
                raise DigestMismatchError(
                    "entry shorter than header and digest", ledger_id=ledger_id, entry_id=entry_id, size=data_size
                )
            got_ledger, got_entry, lac, length = _V1_HEADER.unpack_from(view, 0)
            got_scope = 0
        payload_start = header_size + digest_size
        payload = view[payload_start:]
        if digest_size and self._digest(view[:header_size], payload) != view[header_size:payload_start]:
            raise DigestMismatchError("digest does not match", ledger_id=ledger_id, entry_id=entry_id)
        if got_ledger != ledger_id:
            raise DigestMismatchError(
                "ledger id mismatch", ledger_id=ledger_id, entry_id=entry_id, actual_ledger_id=got_ledger
            )
        if entry_id is not None and got_entry != entry_id:
            raise DigestMismatchError(
                "entry id mismatch", ledger_id=ledger_id, entry_id=entry_id, actual_entry_id=got_entry
            )
        if got_scope != scope_id:
            raise DigestMismatchError(
                "scope id mismatch",
                ledger_id=ledger_id,
                entry_id=entry_id,
                scope_id=scope_id,
                actual_scope_id=got_scope,
            )
        return VerifiedEntry(got_ledger, got_entry, lac, length, payload, got_scope)

    def verify_payloads(
        self,
        items: "list[bytes | bytearray | memoryview]",
        ledger_id: int,
        first_entry_id: int,
        scope_id: int = 0,
        detach: bool = True,
    ) -> "tuple[list[bytes], DigestMismatchError | None]":
        """Verify consecutive entries ``first_entry_id, first_entry_id + 1, ...``; return their payloads.

        The checks are :meth:`verify_entry`'s, item by item; the result is
        ``(payloads of the verified prefix, the error that stopped it or None)``.
        Each payload is detached (``bytes``), or with ``detach=False`` a zero-copy view of ``items`` (for a
        caller that gathers the payloads into one buffer anyway).  The batch-read hot path: for
        scope 0 and CRC32C no :class:`VerifiedEntry` is built per entry; any
        item the fast check does not pass goes through :meth:`verify_entry`,
        which raises the precise error (or accepts it).
        """
        fast = scope_id == 0 and self.digest_type is DigestType.CRC32C
        out: list[bytes] = []
        if fast and _speedups is not None and type(items) is list:
            # The compiled loop takes the common case (bkspark/protocol/speedups.py); the loop below checks the
            # item it stopped at, and what follows, and reports the precise error.
            out = _speedups.verify_crc32c_payloads(items, ledger_id, first_entry_id, detach)
            if len(out) == len(items):
                return out, None
            items = items[len(out) :]
        append = out.append
        unpack_header = _V1_HEADER.unpack_from
        unpack_crc = _INT32_UNSIGNED.unpack_from
        crc = _crc32c.crc32c
        start = ENTRY_HEADER_SIZE + 4
        entry_id = first_entry_id + len(out)
        for data in items:
            if fast and len(data) >= start and not data[0] & _FORMAT_HIGH_BIT:
                got_ledger, got_entry, _lac, _length = unpack_header(data, 0)
                payload = data[start:]
                if (
                    got_ledger == ledger_id
                    and got_entry == entry_id
                    and crc(payload, crc(data[:ENTRY_HEADER_SIZE])) == unpack_crc(data, ENTRY_HEADER_SIZE)[0]
                ):
                    append(bytes(payload) if detach else payload)
                    entry_id += 1
                    continue
            try:
                verified = self.verify_entry(data, ledger_id, entry_id, scope_id)
            except DigestMismatchError as exc:
                return out, exc
            append(bytes(verified.payload) if detach else verified.payload)
            entry_id += 1
        return out, None

    def verify_payloads_packed(
        self, body: "bytes | memoryview", offset: int, limit: int, ledger_id: int, first_entry_id: int,
        scope_id: int = 0,
    ) -> "tuple[bytes, memoryview, int, int, int] | None":
        """:meth:`verify_payloads` of the length-prefixed items of a batch-read response body from ``offset``, at
        most ``limit`` of them, as one pass with no object per entry: ``(data, bounds, max_size, count,
        next_offset)``, the payloads of the verified prefix laid end to end in ``data`` with their ``count + 1``
        int64 ``bounds`` (a ``q`` memoryview), the largest payload's size and the offset of the first item not
        taken.  ``None`` when only :meth:`verify_payloads` applies (a digest other than CRC32C, a scope other than
        0, the compiled path off): that method stays the reference, and checks any item this stops at.
        """
        if scope_id != 0 or self.digest_type is not DigestType.CRC32C or _speedups is None:
            return None
        data, bounds, max_size, count, next_offset = _speedups.verify_gather_crc32c(
            body, offset, limit, ledger_id, first_entry_id
        )
        return data, memoryview(bounds).cast("q"), max_size, count, next_offset

    # -- explicit LAC -----------------------------------------------------------

    def package_lac(self, ledger_id: int, lac: int, scope_id: int = 0) -> bytes:
        """The explicit-LAC blob for WRITE_LAC: header ‖ digest over the header.

        Scope 0 gives BookKeeper's 16-byte header; other scopes our 25-byte one.
        """
        try:
            if scope_id == 0:
                header = _LAC_V1_HEADER.pack(ledger_id, lac)
            else:
                header = _LAC_V2_HEADER.pack(self._format_byte, scope_id, ledger_id, lac)
        except struct.error as exc:
            raise LocalProtocolError(
                f"LAC blob field out of int64 range: {exc}", scope_id=scope_id, ledger_id=ledger_id, lac=lac
            ) from None
        return header + self._digest(header, b"")

    def verify_lac(self, data: bytes | bytearray | memoryview, ledger_id: int, scope_id: int = 0) -> int:
        """Check an explicit-LAC blob as ``verifyDigestAndReturnLac`` does; return the LAC.

        Raises :class:`DigestMismatchError`.
        """
        view = _byte_view(data)
        data_size = len(view)
        digest_size = self.size
        if data_size and view[0] & _FORMAT_HIGH_BIT:
            header_size = LAC_V2_HEADER_SIZE
            if data_size < header_size + digest_size:
                raise DigestMismatchError("LAC blob shorter than header and digest", ledger_id=ledger_id, size=data_size)
            fmt, got_scope, got_ledger, lac = _LAC_V2_HEADER.unpack_from(view, 0)
            if fmt != self._format_byte:
                raise DigestMismatchError("LAC blob format or digest type mismatch", ledger_id=ledger_id, format_byte=fmt)
        else:
            header_size = LAC_HEADER_SIZE
            if data_size < header_size + digest_size:
                raise DigestMismatchError("LAC blob shorter than header and digest", ledger_id=ledger_id, size=data_size)
            got_ledger, lac = _LAC_V1_HEADER.unpack_from(view, 0)
            got_scope = 0
        if digest_size and self._digest(view[:header_size], b"") != view[header_size : header_size + digest_size]:
            raise DigestMismatchError("LAC digest does not match", ledger_id=ledger_id)
        if got_ledger != ledger_id:
            raise DigestMismatchError("LAC ledger id mismatch", ledger_id=ledger_id, actual_ledger_id=got_ledger)
        if got_scope != scope_id:
            raise DigestMismatchError(
                "LAC scope id mismatch", ledger_id=ledger_id, scope_id=scope_id, actual_scope_id=got_scope
            )
        return lac
