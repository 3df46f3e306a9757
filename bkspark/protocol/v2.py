"""The v2 bookie protocol (``BookieProtocol``), byte for byte as Apache BookKeeper 4.17 codes it.

Every v2 body starts with one big-endian int32 header, ``version << 24 |
opcode << 16 | flags``; a version-0 (legacy) header is just the opcode.  The
layouts are in docs/protocol.md §6; this module mirrors Java's
``BookieProtoEncoding.RequestEnDeCoderPreV3`` / ``ResponseEnDeCoderPreV3``,
including what they ignore:

* READENTRY / BATCH_READ_ENTRY read the 20-byte master key only when
  ``FLAG_DO_FENCING`` is set *and* the version is >= 2; other trailing bytes
  are ignored.  The encoder writes a key whenever one is given, as Java does.
* ADDENTRY: the master key, then the entry; the ledger and entry ids are read
  from the entry's first 16 bytes without consuming them.
* ADDENTRY responses ignore trailing bytes; READENTRY responses carry
  everything after the 24-byte prefix as the entry; BATCH_READ_ENTRY items
  (``[len int32][len bytes]``) run to the end of the frame and must fit exactly.
* AUTH carries a protobuf ``AuthMessage`` (both fields required) and no rc.
* Any other opcode is an :class:`UnknownOpcodeError` (Java throws and closes
  the connection); short or inconsistent bodies are :class:`MalformedFrameError`.
  ``decode_request`` / ``decode_response`` raise nothing else.

Two layers:

* Messages: frozen dataclasses with :func:`encode_request` /
  :func:`encode_response` (whole frames, length prefix included) and
  :func:`decode_request` / :func:`decode_response` (frame bodies).
* Fast paths for the client and bookie hot loops, which skip the dataclasses:
  :func:`encode_add_request`, :func:`encode_read_request`,
  :func:`encode_batch_read_request`, :func:`encode_add_response`,
  :func:`encode_read_response`, :func:`encode_batch_read_response` build a frame
  with one struct pack (plus one concatenation for the entry bytes), and
  :func:`decode_batch_read_response_entries` splits batch items as zero-copy
  memoryviews.  Decoding never copies entries: they are memoryview slices of
  the body given.

Passes over many frames at once (a received chunk's bodies, a run of answers in one buffer) are
:mod:`bkspark.protocol.v2_bulk`'s, built on this module's layouts.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Callable, ClassVar, Iterable, Iterator, NamedTuple, Union, overload

from bkspark.errors import LocalProtocolError, MalformedFrameError, UnknownOpcodeError
from bkspark.protocol.proto.BookkeeperProtocol_pb2 import AuthMessage
from bkspark.protocol.speedups import speedups as _speedups

__all__ = [
    "PROTOCOL_VERSION",
    "LOWEST_COMPAT_PROTOCOL_VERSION",
    "ADD_ENTRY",
    "ADD_RESPONSE_HEADER_V2",
    "READ_RESPONSE_HEADER_V2",
    "READ_ENTRY",
    "AUTH",
    "READ_LAC",
    "WRITE_LAC",
    "GET_BOOKIE_INFO",
    "BATCH_READ_ENTRY",
    "FLAG_NONE",
    "FLAG_DO_FENCING",
    "FLAG_RECOVERY_ADD",
    "FLAG_HIGH_PRIORITY",
    "MASTER_KEY_LENGTH",
    "RESPONSE_HEADER_SIZE",
    "BATCH_RESPONSE_HEADER_SIZE",
    "BATCH_RESPONSE_OVERHEAD",
    "ADD_REQUEST_OVERHEAD",
    "EOK",
    "ENOLEDGER",
    "ENOENTRY",
    "EBADREQ",
    "EIO",
    "EUA",
    "EBADVERSION",
    "EFENCED",
    "EREADONLY",
    "ETOOMANYREQUESTS",
    "EUNKNOWNLEDGERSTATE",
    "AUTH_DISABLED_PLUGIN_NAME",
    "AddRequest",
    "ReadRequest",
    "BatchReadRequest",
    "AuthRequest",
    "AddResponse",
    "ReadResponse",
    "BatchReadResponse",
    "BatchItems",
    "AuthResponse",
    "Request",
    "Response",
    "pack_header",
    "unpack_header",
    "encode_request",
    "encode_response",
    "decode_request",
    "decode_response",
    "encode_add_request",
    "encode_read_request",
    "encode_batch_read_request",
    "encode_auth_request",
    "encode_add_response",
    "encode_read_response",
    "encode_batch_read_response",
    "encode_auth_response",
    "decode_batch_read_response_entries",
]

#: ``BookieProtocol.CURRENT_PROTOCOL_VERSION``: what clients send.
PROTOCOL_VERSION = 2
#: ``BookieProtocol.LOWEST_COMPAT_PROTOCOL_VERSION``.
LOWEST_COMPAT_PROTOCOL_VERSION = 0

ADD_ENTRY = 1
READ_ENTRY = 2
AUTH = 3
#: Opcodes 4-6 exist only as constants: the v2 codec has no encoding for them.
READ_LAC = 4
WRITE_LAC = 5
GET_BOOKIE_INFO = 6
#: Since BookKeeper 4.17.0; older bookies close the connection on it.
BATCH_READ_ENTRY = 7

FLAG_NONE = 0x0000
FLAG_DO_FENCING = 0x0001
FLAG_RECOVERY_ADD = 0x0002
FLAG_HIGH_PRIORITY = 0x0004

MASTER_KEY_LENGTH = 20
#: header + rc + ledgerId + entryId, the prefix of ADD/READ/BATCH responses.
RESPONSE_HEADER_SIZE = 24
#: The batch response prefix adds the requestId.
BATCH_RESPONSE_HEADER_SIZE = 32
#: Frame bytes of an ADDENTRY request besides its entry: length prefix, header, master key.
ADD_REQUEST_OVERHEAD = 4 + 4 + MASTER_KEY_LENGTH
#: What a batch response costs before its first item, as the Java bookie's
#: ``BatchedReadEntryProcessor`` counts it against ``maxSize``: the prefix plus the frame length.
BATCH_RESPONSE_OVERHEAD = BATCH_RESPONSE_HEADER_SIZE + 4

# v2 return codes (docs/protocol.md §6); bkspark.errors maps them to exceptions.
EOK = 0
ENOLEDGER = 1
ENOENTRY = 2
EBADREQ = 100
EIO = 101
EUA = 102
EBADVERSION = 103
EFENCED = 104
EREADONLY = 105
ETOOMANYREQUESTS = 106
EUNKNOWNLEDGERSTATE = 107

#: The plugin name a bookie with authentication disabled answers AUTH with.
AUTH_DISABLED_PLUGIN_NAME = "AuthDisabledPlugin"

_UINT32 = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_INT64_PAIR = struct.Struct(">qq")
# Whole frames, length prefix first.
_ADD_REQUEST_PREFIX = struct.Struct(">II20s")
_READ_REQUEST = struct.Struct(">IIqq")
_READ_REQUEST_KEYED = struct.Struct(">IIqq20s")
_BATCH_READ_REQUEST = struct.Struct(">IIqqqiq")
_BATCH_READ_REQUEST_KEYED = struct.Struct(">IIqqqiq20s")
_RESPONSE_PREFIX = struct.Struct(">IIiqq")
_BATCH_RESPONSE_PREFIX = struct.Struct(">IIiqqq")
_FRAME_AND_HEADER = struct.Struct(">II")
# Frame bodies.
_BODY_HEADER = struct.Struct(">I")
_BODY_READ_REQUEST = struct.Struct(">Iqq")
_BODY_BATCH_READ_REQUEST = struct.Struct(">Iqqqiq")
_BODY_RESPONSE_PREFIX = struct.Struct(">Iiqq")
_BODY_BATCH_RESPONSE_PREFIX = struct.Struct(">Iiqqq")

_READ_REQUEST_BODY_SIZE = _BODY_READ_REQUEST.size  # 20
_BATCH_READ_REQUEST_BODY_SIZE = _BODY_BATCH_READ_REQUEST.size  # 40
_ADD_REQUEST_MIN_BODY_SIZE = 4 + MASTER_KEY_LENGTH + 16  # Java reads ledger and entry ids from the entry


# --------------------------------------------------------------------------
# Packet header


def pack_header(version: int, opcode: int, flags: int) -> int:
    """The header as an unsigned 32-bit value, as Java's ``PacketHeader.toInt`` builds it.

    Version 0 is the legacy form: the opcode alone, flags dropped.  ``version``
    may be given as a signed or unsigned byte (it is echoed from requests).
    """
    if not -128 <= version <= 255:
        raise LocalProtocolError("v2 version must fit a byte", version=version)
    if not 0 <= opcode <= 0x7F:
        raise LocalProtocolError("v2 opcode must be 0..127", opcode=opcode)
    if not 0 <= flags <= 0xFFFF:
        raise LocalProtocolError("v2 flags must fit 16 bits", flags=flags)
    if version == 0:
        return opcode
    return ((version & 0xFF) << 24) | (opcode << 16) | flags


def unpack_header(header: int) -> tuple[int, int, int]:
    """``(version, opcode, flags)`` from a header int, as Java's ``PacketHeader.get*`` reads it.

    ``version`` is a signed byte (Java's ``byte``); ``opcode`` and ``flags``
    are returned unsigned.  A version of 0 means the legacy form: the opcode
    is the low byte and flags are 0.
    """
    version = (header >> 24) & 0xFF
    if version >= 0x80:
        version -= 0x100
    if version == 0:
        return 0, header & 0xFF, 0
    return version, (header >> 16) & 0xFF, header & 0xFFFF


def _header(version: int, opcode: int, flags: int) -> int:
    """Fast ``pack_header`` for the hot encoders (opcode is one of ours)."""
    if flags & ~0xFFFF or not -128 <= version <= 255:
        raise LocalProtocolError("v2 flags must fit 16 bits and version a byte", flags=flags, version=version)
    if version == 0:
        return opcode
    return ((version & 0xFF) << 24) | (opcode << 16) | flags


def add_request_header(flags: int, version: int = PROTOCOL_VERSION) -> int:
    """The header word of an ADDENTRY request (what :func:`encode_add_request` writes after the length)."""
    return _header(version, ADD_ENTRY, flags)


def _check_key(master_key: bytes | bytearray | memoryview) -> None:
    if len(master_key) != MASTER_KEY_LENGTH:
        raise LocalProtocolError("v2 master keys are exactly 20 bytes", size=len(master_key))


# --------------------------------------------------------------------------
# Messages


class AddRequest(NamedTuple):
    """ADDENTRY: the master key, then the entry exactly as the bookie will store it.

    A tuple, as :class:`AddResponse` is: a bookie decodes one per add on its event loop, and a tuple is built in
    a third of the time of a frozen dataclass (BENCHMARKS.md, "The Python bookie's adds").
    """

    flags: int
    master_key: bytes
    entry: bytes | memoryview
    version: int = PROTOCOL_VERSION
    opcode = ADD_ENTRY

    @property
    def ledger_id(self) -> int:
        """The ledger id in the entry's first 8 bytes (what the bookie uses)."""
        return self._entry_ids()[0]

    @property
    def entry_id(self) -> int:
        """The entry id in the entry's bytes 8-15."""
        return self._entry_ids()[1]

    def _entry_ids(self) -> tuple[int, int]:
        try:
            return _INT64_PAIR.unpack_from(self.entry, 0)
        except struct.error:
            raise LocalProtocolError("an ADDENTRY entry starts with ledger and entry ids (16 bytes)") from None


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """READENTRY; ``entry_id == -1`` asks for the last entry the bookie stores."""

    flags: int
    ledger_id: int
    entry_id: int
    master_key: bytes | None = None
    version: int = PROTOCOL_VERSION
    opcode: ClassVar[int] = READ_ENTRY


@dataclass(frozen=True, slots=True)
class BatchReadRequest:
    """BATCH_READ_ENTRY (4.17+): consecutive entries from ``start_entry_id``, within count and size limits."""

    flags: int
    ledger_id: int
    start_entry_id: int
    request_id: int
    max_count: int
    max_size: int
    master_key: bytes | None = None
    version: int = PROTOCOL_VERSION
    opcode: ClassVar[int] = BATCH_READ_ENTRY


@dataclass(frozen=True, slots=True)
class AuthRequest:
    """AUTH: an ``AuthMessage`` for the bookie's authentication plugin."""

    auth_plugin_name: str
    payload: bytes
    version: int = PROTOCOL_VERSION
    opcode: ClassVar[int] = AUTH


class AddResponse(NamedTuple):
    """ADDENTRY response: rc and the ids taken from the added entry.

    Immutable like the other messages, but a tuple: a client decodes one per bookie per add, and a tuple is
    built in less than half the time of a frozen dataclass (BENCHMARKS.md, "Per-entry allocations of the client").
    """

    rc: int
    ledger_id: int
    entry_id: int
    version: int = PROTOCOL_VERSION
    opcode = ADD_ENTRY


@dataclass(frozen=True, slots=True)
class ReadResponse:
    """READENTRY response: ids echoed from the request (-1 stays -1), the stored entry if rc is EOK."""

    rc: int
    ledger_id: int
    entry_id: int
    entry: bytes | memoryview = b""
    version: int = PROTOCOL_VERSION
    opcode: ClassVar[int] = READ_ENTRY


@dataclass(frozen=True, slots=True)
class BatchReadResponse:
    """BATCH_READ_ENTRY response: entries ``start_entry_id, start_entry_id + 1, ...`` (none on error)."""

    rc: int
    ledger_id: int
    start_entry_id: int
    request_id: int
    #: A list when built to be sent; a received one's :class:`BatchItems`.
    entries: Sequence[bytes | memoryview] = field(default_factory=list)
    version: int = PROTOCOL_VERSION
    opcode: ClassVar[int] = BATCH_READ_ENTRY


class BatchItems(Sequence[memoryview]):
    """The items of a received BATCH_READ_ENTRY response body, cut into views only when asked for.

    The decoder checked that they fit the body exactly and counted them (no object per item).  A reader that
    verifies and gathers the payloads straight from :attr:`body` (``Digester.verify_payloads_packed``) never
    makes one; anything else indexes, slices or iterates them as the views the reference split makes.
    """

    __slots__ = ("body", "offset", "count", "_items")

    def __init__(self, body: memoryview, offset: int, count: int) -> None:
        self.body = body
        #: Where the first item's length prefix starts.
        self.offset = offset
        self.count = count
        self._items: list[memoryview] | None = None

    def _split(self) -> list[memoryview]:
        if self._items is None:
            self._items = _split_batch_items(self.body, self.offset)
        return self._items

    def __len__(self) -> int:
        return self.count

    @overload
    def __getitem__(self, index: int) -> memoryview: ...

    @overload
    def __getitem__(self, index: slice) -> list[memoryview]: ...

    def __getitem__(self, index: int | slice) -> "memoryview | list[memoryview]":
        return self._split()[index]

    def __iter__(self) -> Iterator[memoryview]:
        return iter(self._split())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BatchItems):
            other = other._split()
        if not isinstance(other, (list, tuple)):
            return NotImplemented
        return self._split() == list(other)

    __hash__ = None  # type: ignore[assignment] - compared by value, as the list it stands for

    def __repr__(self) -> str:
        return f"BatchItems({self.count} items)"


@dataclass(frozen=True, slots=True)
class AuthResponse:
    """AUTH response: an ``AuthMessage`` and no rc."""

    auth_plugin_name: str
    payload: bytes
    version: int = PROTOCOL_VERSION
    opcode: ClassVar[int] = AUTH


Request = Union[AddRequest, ReadRequest, BatchReadRequest, AuthRequest]
Response = Union[AddResponse, ReadResponse, BatchReadResponse, AuthResponse]


# --------------------------------------------------------------------------
# AuthMessage (protobuf: 1 required string authPluginName, 2 required bytes payload)


def _auth_message_bytes(auth_plugin_name: str, payload: bytes | bytearray | memoryview) -> bytes:
    if not isinstance(auth_plugin_name, str):
        raise LocalProtocolError("auth_plugin_name must be a str", type=type(auth_plugin_name).__name__)
    return AuthMessage(authPluginName=auth_plugin_name, payload=bytes(payload)).SerializeToString()


def _parse_auth_message(data: memoryview) -> tuple[str, bytes]:
    """Parse as protobuf-java's ``mergeFrom`` + ``build()`` would: required fields must be there."""
    message = AuthMessage()
    try:
        message.ParseFromString(bytes(data))
    except Exception as exc:  # the protobuf runtime's parse errors are not one public type
        raise MalformedFrameError("AuthMessage does not parse", reason=str(exc)) from None
    if not message.IsInitialized():
        raise MalformedFrameError("AuthMessage misses a required field")
    name = message.authPluginName
    if isinstance(name, bytes):
        # proto2 does not validate UTF-8; Java decodes with replacement characters.
        name = name.decode("utf-8", "replace")
    return name, bytes(message.payload)


# --------------------------------------------------------------------------
# Fast-path encoders (whole frames)


def encode_add_request(
    flags: int,
    master_key: bytes | bytearray | memoryview,
    entry: bytes | bytearray | memoryview,
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """Fast path: the ADDENTRY frame for a packaged entry (``Digester.package_entry``)."""
    _check_key(master_key)
    entry_size = len(entry) if not isinstance(entry, memoryview) else entry.nbytes
    if entry_size < 16:
        # A Java bookie reads the ids from the entry and drops the connection if they are missing.
        raise LocalProtocolError("an ADDENTRY entry starts with ledger and entry ids (16 bytes)", size=entry_size)
    try:
        prefix = _ADD_REQUEST_PREFIX.pack(
            4 + MASTER_KEY_LENGTH + entry_size, add_request_header(flags, version), master_key
        )
    except struct.error as exc:
        raise LocalProtocolError(f"ADDENTRY field out of range: {exc}") from None
    return prefix + entry


def encode_read_request(
    ledger_id: int,
    entry_id: int,
    flags: int = FLAG_NONE,
    master_key: bytes | None = None,
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """Fast path: the READENTRY frame; the master key is appended whenever given (as Java does)."""
    try:
        if master_key is None:
            return _READ_REQUEST.pack(20, _header(version, READ_ENTRY, flags), ledger_id, entry_id)
        _check_key(master_key)
        return _READ_REQUEST_KEYED.pack(40, _header(version, READ_ENTRY, flags), ledger_id, entry_id, master_key)
    except struct.error as exc:
        raise LocalProtocolError(f"READENTRY field out of range: {exc}", ledger_id=ledger_id, entry_id=entry_id) from None


def encode_batch_read_request(
    ledger_id: int,
    start_entry_id: int,
    request_id: int,
    max_count: int,
    max_size: int,
    flags: int = FLAG_NONE,
    master_key: bytes | None = None,
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """Fast path: the BATCH_READ_ENTRY frame (bookies >= 4.17.0 only)."""
    header = _header(version, BATCH_READ_ENTRY, flags)
    try:
        if master_key is None:
            return _BATCH_READ_REQUEST.pack(
                40, header, ledger_id, start_entry_id, request_id, max_count, max_size
            )
        _check_key(master_key)
        return _BATCH_READ_REQUEST_KEYED.pack(
            60, header, ledger_id, start_entry_id, request_id, max_count, max_size, master_key
        )
    except struct.error as exc:
        raise LocalProtocolError(f"BATCH_READ_ENTRY field out of range: {exc}", ledger_id=ledger_id) from None


def encode_auth_request(
    auth_plugin_name: str, payload: bytes | bytearray | memoryview, version: int = PROTOCOL_VERSION
) -> bytes:
    """The AUTH request frame (flags are always 0)."""
    message = _auth_message_bytes(auth_plugin_name, payload)
    return _FRAME_AND_HEADER.pack(4 + len(message), _header(version, AUTH, 0)) + message


def encode_add_response(rc: int, ledger_id: int, entry_id: int, version: int = PROTOCOL_VERSION) -> bytes:
    """Fast path: the 24-byte ADDENTRY response frame (version echoes the request's)."""
    try:
        return _RESPONSE_PREFIX.pack(24, _header(version, ADD_ENTRY, 0), rc, ledger_id, entry_id)
    except struct.error as exc:
        raise LocalProtocolError(f"ADDENTRY response field out of range: {exc}") from None


def encode_read_response(
    rc: int,
    ledger_id: int,
    entry_id: int,
    entry: bytes | bytearray | memoryview = b"",
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """Fast path: the READENTRY response frame; ``entry`` is the stored entry (empty on errors)."""
    entry_size = len(entry) if not isinstance(entry, memoryview) else entry.nbytes
    try:
        prefix = _RESPONSE_PREFIX.pack(
            RESPONSE_HEADER_SIZE + entry_size, _header(version, READ_ENTRY, 0), rc, ledger_id, entry_id
        )
    except struct.error as exc:
        raise LocalProtocolError(f"READENTRY response field out of range: {exc}") from None
    return prefix + entry if entry_size else prefix


def encode_batch_read_response(
    rc: int,
    ledger_id: int,
    start_entry_id: int,
    request_id: int,
    entries: Iterable[bytes | bytearray | memoryview] = (),
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """Fast path: the BATCH_READ_ENTRY response frame, each entry as ``[len int32][entry]``.

    The compiled loop (one copy of each entry into the frame) when it is built and ``entries`` is a list of
    ``bytes`` (a bookie's batch read, docs/bookie.md, "Reads"), else, and for anything it hands back,
    :func:`encode_batch_read_response_reference`.
    """
    if _speedups is not None and type(entries) is list and 0 <= version <= 127:
        frame = _speedups.v2_batch_read_frame(
            _header(version, BATCH_READ_ENTRY, 0), rc, ledger_id, start_entry_id, request_id, entries
        )
        if frame is not None:
            return frame  # type: ignore[no-any-return]
    return encode_batch_read_response_reference(rc, ledger_id, start_entry_id, request_id, entries, version)


def encode_batch_read_response_reference(
    rc: int, ledger_id: int, start_entry_id: int, request_id: int,
    entries: Iterable[bytes | bytearray | memoryview] = (), version: int = PROTOCOL_VERSION,
) -> bytes:
    """The pure-Python :func:`encode_batch_read_response`: the tested reference of the compiled one."""
    parts: list[bytes | bytearray | memoryview] = [b""]
    body_size = BATCH_RESPONSE_HEADER_SIZE
    pack_length = _UINT32.pack
    for item in entries:
        item_size = len(item) if not isinstance(item, memoryview) else item.nbytes
        if item_size > 0x7FFFFFFF:
            raise LocalProtocolError("batch item too large", size=item_size)
        parts.append(pack_length(item_size))
        parts.append(item)
        body_size += 4 + item_size
    try:
        parts[0] = _BATCH_RESPONSE_PREFIX.pack(
            body_size, _header(version, BATCH_READ_ENTRY, 0), rc, ledger_id, start_entry_id, request_id
        )
    except struct.error as exc:
        raise LocalProtocolError(f"BATCH_READ_ENTRY response field out of range: {exc}") from None
    return b"".join(parts)


def encode_auth_response(
    auth_plugin_name: str, payload: bytes | bytearray | memoryview, version: int = PROTOCOL_VERSION
) -> bytes:
    """The AUTH response frame: header (flags 0) and the ``AuthMessage``, no rc."""
    message = _auth_message_bytes(auth_plugin_name, payload)
    return _FRAME_AND_HEADER.pack(4 + len(message), _header(version, AUTH, 0)) + message


# --------------------------------------------------------------------------
# Message encoders


def encode_request(msg: Request) -> bytes:
    """The whole frame (length prefix included) for a request message."""
    if isinstance(msg, AddRequest):
        return encode_add_request(msg.flags, msg.master_key, msg.entry, msg.version)
    if isinstance(msg, ReadRequest):
        return encode_read_request(msg.ledger_id, msg.entry_id, msg.flags, msg.master_key, msg.version)
    if isinstance(msg, BatchReadRequest):
        return encode_batch_read_request(
            msg.ledger_id,
            msg.start_entry_id,
            msg.request_id,
            msg.max_count,
            msg.max_size,
            msg.flags,
            msg.master_key,
            msg.version,
        )
    if isinstance(msg, AuthRequest):
        return encode_auth_request(msg.auth_plugin_name, msg.payload, msg.version)
    raise LocalProtocolError("not a v2 request message", type=type(msg).__name__)


def encode_response(msg: Response) -> bytes:
    """The whole frame (length prefix included) for a response message."""
    if isinstance(msg, AddResponse):
        return encode_add_response(msg.rc, msg.ledger_id, msg.entry_id, msg.version)
    if isinstance(msg, ReadResponse):
        return encode_read_response(msg.rc, msg.ledger_id, msg.entry_id, msg.entry, msg.version)
    if isinstance(msg, BatchReadResponse):
        return encode_batch_read_response(
            msg.rc, msg.ledger_id, msg.start_entry_id, msg.request_id, msg.entries, msg.version
        )
    if isinstance(msg, AuthResponse):
        return encode_auth_response(msg.auth_plugin_name, msg.payload, msg.version)
    raise LocalProtocolError("not a v2 response message", type=type(msg).__name__)


# --------------------------------------------------------------------------
# Decoders (frame bodies, length prefix already stripped)


def _body_view(body: bytes | bytearray | memoryview) -> memoryview:
    if isinstance(body, memoryview):
        return body if body.format == "B" and body.ndim == 1 else body.cast("B")
    return memoryview(body)


def _too_short(what: str, size: int, needed: int) -> MalformedFrameError:
    return MalformedFrameError(f"{what} truncated", size=size, needed=needed)


def _decode_add_request(view: memoryview, version: int, flags: int) -> AddRequest:
    if len(view) < _ADD_REQUEST_MIN_BODY_SIZE:
        raise _too_short("ADDENTRY request", len(view), _ADD_REQUEST_MIN_BODY_SIZE)
    return AddRequest(flags, bytes(view[4:24]), view[24:], version)


def _decode_read_request(view: memoryview, version: int, flags: int) -> ReadRequest:
    size = len(view)
    if size < _READ_REQUEST_BODY_SIZE:
        raise _too_short("READENTRY request", size, _READ_REQUEST_BODY_SIZE)
    _, ledger_id, entry_id = _BODY_READ_REQUEST.unpack_from(view, 0)
    if flags & FLAG_DO_FENCING and version >= 2:
        if size < _READ_REQUEST_BODY_SIZE + MASTER_KEY_LENGTH:
            raise _too_short("fencing READENTRY master key", size, _READ_REQUEST_BODY_SIZE + MASTER_KEY_LENGTH)
        return ReadRequest(flags, ledger_id, entry_id, bytes(view[20:40]), version)
    return ReadRequest(flags, ledger_id, entry_id, None, version)


def _decode_batch_read_request(view: memoryview, version: int, flags: int) -> BatchReadRequest:
    size = len(view)
    if size < _BATCH_READ_REQUEST_BODY_SIZE:
        raise _too_short("BATCH_READ_ENTRY request", size, _BATCH_READ_REQUEST_BODY_SIZE)
    _, ledger_id, start_entry_id, request_id, max_count, max_size = _BODY_BATCH_READ_REQUEST.unpack_from(view, 0)
    master_key = None
    if flags & FLAG_DO_FENCING and version >= 2:
        if size < _BATCH_READ_REQUEST_BODY_SIZE + MASTER_KEY_LENGTH:
            raise _too_short(
                "fencing BATCH_READ_ENTRY master key", size, _BATCH_READ_REQUEST_BODY_SIZE + MASTER_KEY_LENGTH
            )
        master_key = bytes(view[40:60])
    return BatchReadRequest(flags, ledger_id, start_entry_id, request_id, max_count, max_size, master_key, version)


def _decode_auth_request(view: memoryview, version: int, flags: int) -> AuthRequest:
    name, payload = _parse_auth_message(view[4:])
    return AuthRequest(name, payload, version)


_REQUEST_DECODERS: dict[int, Callable[[memoryview, int, int], Request]] = {
    ADD_ENTRY: _decode_add_request,
    READ_ENTRY: _decode_read_request,
    BATCH_READ_ENTRY: _decode_batch_read_request,
    AUTH: _decode_auth_request,
}


def decode_request(body: bytes | bytearray | memoryview) -> Request:
    """Decode a request frame body as the Java bookie does (entries stay zero-copy views)."""
    view = _body_view(body)
    if len(view) < 4:
        raise _too_short("v2 packet header", len(view), 4)
    version, opcode, flags = unpack_header(_BODY_HEADER.unpack_from(view, 0)[0])
    decoder = _REQUEST_DECODERS.get(opcode)
    if decoder is None:
        raise UnknownOpcodeError("unknown v2 request opcode", opcode=opcode, version=version)
    return decoder(view, version, flags)


def _decode_add_response(view: memoryview, version: int) -> AddResponse:
    if len(view) < RESPONSE_HEADER_SIZE:
        raise _too_short("ADDENTRY response", len(view), RESPONSE_HEADER_SIZE)
    _, rc, ledger_id, entry_id = _BODY_RESPONSE_PREFIX.unpack_from(view, 0)
    return AddResponse(rc, ledger_id, entry_id, version)


def _decode_read_response(view: memoryview, version: int) -> ReadResponse:
    if len(view) < RESPONSE_HEADER_SIZE:
        raise _too_short("READENTRY response", len(view), RESPONSE_HEADER_SIZE)
    _, rc, ledger_id, entry_id = _BODY_RESPONSE_PREFIX.unpack_from(view, 0)
    return ReadResponse(rc, ledger_id, entry_id, view[RESPONSE_HEADER_SIZE:], version)


def _split_batch_items(view: memoryview, offset: int = BATCH_RESPONSE_HEADER_SIZE) -> list[memoryview]:
    if _speedups is not None:  # the compiled loop (bkspark/protocol/speedups.py); None: malformed, checked below
        split = _speedups.split_batch_items(view, offset)
        if split is not None:
            return split
    items: list[memoryview] = []
    end = len(view)
    unpack_length = _INT32.unpack_from
    while offset < end:
        if end - offset < 4:
            raise MalformedFrameError("BATCH_READ_ENTRY item length truncated", offset=offset, size=end)
        item_size = unpack_length(view, offset)[0]
        offset += 4
        if item_size < 0 or item_size > end - offset:
            raise MalformedFrameError(
                "BATCH_READ_ENTRY item does not fit the frame", offset=offset, item_size=item_size, size=end
            )
        items.append(view[offset : offset + item_size])
        offset += item_size
    return items


def decode_batch_read_response_entries(body: bytes | bytearray | memoryview) -> list[memoryview]:
    """Fast path: just the items of a BATCH_READ_ENTRY response body, as zero-copy views.

    Checks only that the body is long enough for the 32-byte prefix and that
    the items fit exactly (the header itself is not inspected).
    """
    view = _body_view(body)
    if len(view) < BATCH_RESPONSE_HEADER_SIZE:
        raise _too_short("BATCH_READ_ENTRY response", len(view), BATCH_RESPONSE_HEADER_SIZE)
    return _split_batch_items(view)


def _decode_batch_read_response(view: memoryview, version: int) -> BatchReadResponse:
    if len(view) < BATCH_RESPONSE_HEADER_SIZE:
        raise _too_short("BATCH_READ_ENTRY response", len(view), BATCH_RESPONSE_HEADER_SIZE)
    _, rc, ledger_id, start_entry_id, request_id = _BODY_BATCH_RESPONSE_PREFIX.unpack_from(view, 0)
    return BatchReadResponse(rc, ledger_id, start_entry_id, request_id, _received_batch_items(view), version)


def _received_batch_items(view: memoryview) -> Sequence[memoryview]:
    """The items of a received batch-read response: counted by the compiled loop and cut later, only if asked
    (:class:`BatchItems`); else the reference split, which raises the precise error for items that do not fit."""
    if _speedups is not None:
        count = _speedups.count_batch_items(view, BATCH_RESPONSE_HEADER_SIZE)
        if count is not None:
            return BatchItems(view, BATCH_RESPONSE_HEADER_SIZE, count)
    return _split_batch_items(view)


def _decode_auth_response(view: memoryview, version: int) -> AuthResponse:
    name, payload = _parse_auth_message(view[4:])
    return AuthResponse(name, payload, version)


_RESPONSE_DECODERS: dict[int, Callable[[memoryview, int], Response]] = {
    ADD_ENTRY: _decode_add_response,
    READ_ENTRY: _decode_read_response,
    BATCH_READ_ENTRY: _decode_batch_read_response,
    AUTH: _decode_auth_response,
}


#: The header of every ADDENTRY response a v2 (version 2) bookie sends (flags 0): the client's hot path.
ADD_RESPONSE_HEADER_V2 = (PROTOCOL_VERSION << 24) | (ADD_ENTRY << 16)
#: The same for READENTRY responses.
READ_RESPONSE_HEADER_V2 = (PROTOCOL_VERSION << 24) | (READ_ENTRY << 16)


def decode_response(body: bytes | bytearray | memoryview) -> Response:
    """Decode a response frame body as the Java client does (entries stay zero-copy views)."""
    if type(body) is bytes and len(body) >= RESPONSE_HEADER_SIZE:
        # Fastest path: an ADDENTRY response as the frame splitter hands it over (a small ``bytes``).
        header, rc, ledger_id, entry_id = _BODY_RESPONSE_PREFIX.unpack_from(body, 0)
        if header == ADD_RESPONSE_HEADER_V2:
            return AddResponse(rc, ledger_id, entry_id, PROTOCOL_VERSION)
    view = _body_view(body)
    size = len(view)
    if size < 4:
        raise _too_short("v2 packet header", size, 4)
    header = _BODY_HEADER.unpack_from(view, 0)[0]
    if header == ADD_RESPONSE_HEADER_V2 and size >= RESPONSE_HEADER_SIZE:
        # Fast path (one per bookie per add): what _decode_add_response does, without the lookups.
        _, rc, ledger_id, entry_id = _BODY_RESPONSE_PREFIX.unpack_from(view, 0)
        return AddResponse(rc, ledger_id, entry_id, PROTOCOL_VERSION)
    if header == READ_RESPONSE_HEADER_V2 and size >= RESPONSE_HEADER_SIZE:
        # Fast path of single reads: what _decode_read_response does.
        _, rc, ledger_id, entry_id = _BODY_RESPONSE_PREFIX.unpack_from(view, 0)
        return ReadResponse(rc, ledger_id, entry_id, view[RESPONSE_HEADER_SIZE:], PROTOCOL_VERSION)
    version, opcode, _flags = unpack_header(header)
    decoder = _RESPONSE_DECODERS.get(opcode)
    if decoder is None:
        raise UnknownOpcodeError("unknown v2 response opcode", opcode=opcode, version=version)
    return decoder(view, version)
