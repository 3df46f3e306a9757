"""The v3 (protobuf) bookie protocol: frame codec, request and response builders.

Sans-IO: everything here turns ``bytes`` into protobuf messages and back.  The
schema is ``proto/BookkeeperProtocol.proto`` (BookKeeper 4.17's field numbers
plus our extensions, docs/extensions.md).  Builders set exactly the fields the
Java client (requests) and the Java bookie (responses) set, so that for scope 0
our bytes are identical to theirs (docs/protocol.md §3).

Errors say whose fault it was: bytes from a peer that protobuf rejects raise
:class:`~bkspark.errors.MalformedFrameError`; arguments the protocol cannot
express raise :class:`~bkspark.errors.LocalProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Final, TypeVar, Union

from google.protobuf.message import DecodeError, EncodeError, Message

from bkspark.config.typed import is_int
from bkspark.protocol.values import INT64_MAX
from bkspark.errors import LocalProtocolError, MalformedFrameError
from bkspark.protocol.framing import encode_frame
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from bkspark.protocol.v2 import FLAG_DO_FENCING, FLAG_HIGH_PRIORITY, FLAG_RECOVERY_ADD

__all__ = [
    "add_request_overhead",
    "pb",
    "Buffer",
    "Request",
    "Response",
    "BKPacketHeader",
    "HIGH_PRIORITY",
    "FLAG_DO_FENCING",
    "FLAG_RECOVERY_ADD",
    "FLAG_HIGH_PRIORITY",
    "WRITE_FLAG_DEFERRED_SYNC",
    "BATCH_READ_BASE_SIZE",
    "BATCH_READ_ENTRY_OVERHEAD",
    "TOTAL_DISK_CAPACITY",
    "FREE_DISK_SPACE",
    "encode_request",
    "encode_response",
    "decode_request",
    "decode_response",
    "new_header",
    "add_request",
    "read_request",
    "read_lac_request",
    "write_lac_request",
    "force_ledger_request",
    "get_bookie_info_request",
    "get_list_of_entries_request",
    "start_tls_request",
    "auth_request",
    "batch_read_request",
    "response_header",
    "error_response",
    "add_response",
    "read_response",
    "write_lac_response",
    "read_lac_response",
    "force_ledger_response",
    "get_bookie_info_response",
    "get_list_of_entries_response",
    "start_tls_response",
    "auth_response",
    "batch_read_response",
    "sub_request",
    "sub_response",
    "response_status",
    "scope_id_of",
    "AvailabilityOfEntriesOfLedger",
    "SequenceGroup",
    "encode_availability",
    "decode_availability",
    "iter_availability",
]

Request = pb.Request
Response = pb.Response
BKPacketHeader = pb.BKPacketHeader

Buffer = Union[bytes, bytearray, memoryview]
"""A frame body or payload: anything bytes-like the codecs read without copying first."""
#: A request or a response being built.
_M = TypeVar("_M", pb.Request, pb.Response)

#: ``PerChannelBookieClient.DEFAULT_HIGH_PRIORITY_VALUE``: the header priority of high-priority ops.
HIGH_PRIORITY: Final = 100

# FLAG_DO_FENCING / FLAG_RECOVERY_ADD / FLAG_HIGH_PRIORITY are BookieProtocol (v2)
# flag bits, re-exported: the Java client passes these "options" to its v3 request
# builders too, which turn them into the priority and flag fields.

#: ``WriteFlag.DEFERRED_SYNC``: the only bit of ``AddRequest.writeFlags``.
WRITE_FLAG_DEFERRED_SYNC: Final = 0x1

#: v3 batch-read size accounting (docs/extensions.md §3.1): the running size starts at
#: BATCH_READ_BASE_SIZE (a bound on the length prefix and every fixed field of the
#: response) and adds ``len(entry) + BATCH_READ_ENTRY_OVERHEAD`` per entry (tag byte plus
#: at most 5 length-varint bytes), so the frame never exceeds the size limit.
BATCH_READ_BASE_SIZE: Final = 80
BATCH_READ_ENTRY_OVERHEAD: Final = 6

TOTAL_DISK_CAPACITY: Final = pb.GetBookieInfoRequest.TOTAL_DISK_CAPACITY
FREE_DISK_SPACE: Final = pb.GetBookieInfoRequest.FREE_DISK_SPACE


# The sub-message of each operation, by header.operation.
_REQUEST_FIELD: Final[dict[int, str]] = {
    pb.READ_ENTRY: "readRequest",
    pb.ADD_ENTRY: "addRequest",
    pb.AUTH: "authRequest",
    pb.WRITE_LAC: "writeLacRequest",
    pb.READ_LAC: "readLacRequest",
    pb.GET_BOOKIE_INFO: "getBookieInfoRequest",
    pb.START_TLS: "startTLSRequest",
    pb.FORCE_LEDGER: "forceLedgerRequest",
    pb.GET_LIST_OF_ENTRIES_OF_LEDGER: "getListOfEntriesOfLedgerRequest",
    pb.BATCH_READ_ENTRY: "batchReadRequest",
}
_RESPONSE_FIELD: Final[dict[int, str]] = {
    pb.READ_ENTRY: "readResponse",
    pb.ADD_ENTRY: "addResponse",
    pb.AUTH: "authResponse",
    pb.WRITE_LAC: "writeLacResponse",
    pb.READ_LAC: "readLacResponse",
    pb.GET_BOOKIE_INFO: "getBookieInfoResponse",
    pb.START_TLS: "startTLSResponse",
    pb.FORCE_LEDGER: "forceLedgerResponse",
    pb.GET_LIST_OF_ENTRIES_OF_LEDGER: "getListOfEntriesOfLedgerResponse",
    pb.BATCH_READ_ENTRY: "batchReadResponse",
}
# Sub-responses without an inner status (the top-level status is the only one).
_NO_INNER_STATUS: Final = frozenset({pb.AUTH, pb.START_TLS})

# Our extension sub-messages.  BookKeeper's schema does not know them, so a Java
# peer skips them as unknown fields; decoding treats a broken one the same way.
_REQUEST_EXTENSION: Final = "batchReadRequest"
_RESPONSE_EXTENSION: Final = "batchReadResponse"


# --------------------------------------------------------------------------
# Frames


def _frame(msg: Message) -> bytes:
    try:
        body = msg.SerializeToString()
    except EncodeError as e:
        raise LocalProtocolError("message lacks required fields", error=str(e)) from None
    return encode_frame(body)


def encode_request(request: pb.Request) -> bytes:
    """The whole frame (4-byte big-endian length, then the serialized Request)."""
    if not isinstance(request, pb.Request):
        raise LocalProtocolError("not a v3 Request", type=type(request).__name__)
    return _frame(request)


def encode_response(response: pb.Response) -> bytes:
    """The whole frame (4-byte big-endian length, then the serialized Response)."""
    if not isinstance(response, pb.Response):
        raise LocalProtocolError("not a v3 Response", type=type(response).__name__)
    return _frame(response)


def _parse(cls: type[pb.Request] | type[pb.Response], body: Buffer, extension: str) -> pb.Request | pb.Response:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise LocalProtocolError("a frame body must be bytes-like", type=type(body).__name__)
    try:
        msg = cls.FromString(body)
    except DecodeError as e:
        raise MalformedFrameError(f"not a v3 {cls.__name__}", error=str(e)) from None
    if not msg.IsInitialized():
        missing = msg.FindInitializationErrors()
        prefix = extension + "."
        if all(path.startswith(prefix) for path in missing):
            # BookKeeper's own schema would skip the whole extension field as
            # unknown and accept the message: do the same, so that we accept
            # exactly what a Java peer accepts (and detect.py agrees with Java).
            msg.ClearField(extension)
        else:
            raise MalformedFrameError(f"v3 {cls.__name__} lacks required fields", missing=missing)
    return msg


def decode_request(body: Buffer) -> pb.Request:
    """Parse a frame body (length stripped) as a v3 Request, as protobuf-java would."""
    return _parse(pb.Request, body, _REQUEST_EXTENSION)  # type: ignore[return-value]


def decode_response(body: Buffer) -> pb.Response:
    """Parse a frame body (length stripped) as a v3 Response, as protobuf-java would."""
    return _parse(pb.Response, body, _RESPONSE_EXTENSION)  # type: ignore[return-value]


# --------------------------------------------------------------------------
# Request builders (what PerChannelBookieClient sends, docs/protocol.md §3)


def new_header(operation: int, txn_id: int, priority: int = 0) -> pb.BKPacketHeader:
    """A VERSION_THREE header; ``priority`` is only written when > 0 (as Java does)."""
    try:
        header = pb.BKPacketHeader(version=pb.VERSION_THREE, operation=operation, txnId=txn_id)
        if priority:
            header.priority = priority
    except (ValueError, TypeError) as e:
        raise LocalProtocolError("bad header field", operation=operation, txn_id=txn_id, error=str(e)) from None
    return header


def _request(operation: int, txn_id: int, priority: int = 0) -> pb.Request:
    return pb.Request(header=new_header(operation, txn_id, priority))


def _priority(flags: int, priority: int) -> int:
    if priority:
        return priority
    return HIGH_PRIORITY if flags & FLAG_HIGH_PRIORITY else 0


def _set_scope(sub: Message, scope_id: int) -> None:
    # Scope 0 stays absent so that our bytes equal the Java client's.
    if scope_id:
        sub.ledgerScopeId = scope_id  # type: ignore[attr-defined]


def _bad_argument(what: str, e: Exception) -> LocalProtocolError:
    return LocalProtocolError(f"cannot build {what}", error=str(e))


def _given(**fields: object) -> dict[str, object]:
    """The optional fields a caller gave (not None)."""
    return {name: value for name, value in fields.items() if value is not None}


def _filled(what: str, message: _M, sub: Message, scope_id: int = 0, **fields: object) -> _M:
    """``message`` once every one of ``fields`` is set on ``sub`` (its request or response part; a list extends a
    repeated field) and the scope too (left absent when 0, as Java does); a value protobuf refuses is
    :func:`_bad_argument` naming ``what``.

    The builders off the hot path use it; the per-entry ones (add, read, batch read) set their fields inline.
    """
    try:
        for name, value in fields.items():
            if isinstance(value, list):
                getattr(sub, name).extend(value)  # a repeated field
            else:
                setattr(sub, name, value)
        _set_scope(sub, scope_id)
    except (ValueError, TypeError) as e:
        raise _bad_argument(what, e) from None
    return message


def add_request(
    txn_id: int,
    ledger_id: int,
    entry_id: int,
    master_key: bytes,
    body: bytes,
    flags: int = 0,
    *,
    scope_id: int = 0,
    priority: int = 0,
    write_flags: int = 0,
) -> pb.Request:
    """ADD_ENTRY.  ``flags`` are BookieProtocol bits: RECOVERY_ADD sets the flag,
    HIGH_PRIORITY sets priority 100; ``write_flags`` (DEFERRED_SYNC) only when non-zero."""
    try:
        req = _request(pb.ADD_ENTRY, txn_id, _priority(flags, priority))
        add = req.addRequest
        add.ledgerId = ledger_id
        add.entryId = entry_id
        add.masterKey = master_key
        add.body = body
        if flags & FLAG_RECOVERY_ADD:
            add.flag = pb.AddRequest.RECOVERY_ADD
        if write_flags:
            add.writeFlags = write_flags
        _set_scope(add, scope_id)
    except (ValueError, TypeError) as e:
        raise _bad_argument("ADD_ENTRY request", e) from None
    return req


def add_request_overhead(scope_id: int = 0) -> int:
    """The most frame bytes an ADD_ENTRY request takes besides its entry (length prefix included).

    Every id at its widest varint, a recovery add at high priority, the scope
    field when ``scope_id`` is not 0, plus 5 bytes for the body's length varint.
    """
    widest = add_request(
        2**64 - 1, 2**63 - 1, 2**63 - 1, bytes(20), b"", FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY,
        scope_id=scope_id, write_flags=2**31 - 1,
    )
    return len(encode_request(widest)) + 5


def read_request(
    txn_id: int,
    ledger_id: int,
    entry_id: int,
    flags: int = 0,
    *,
    master_key: bytes | None = None,
    previous_lac: int | None = None,
    timeout_ms: int | None = None,
    piggyback: bool = False,
    scope_id: int = 0,
    priority: int = 0,
) -> pb.Request:
    """READ_ENTRY.  DO_FENCING sends FENCE_LEDGER with ``master_key`` (required then;
    without fencing the key is not sent, as in Java);
    ``previous_lac``/``timeout_ms`` make a long poll, ``piggyback`` adds ENTRY_PIGGYBACK.
    Only one flag fits the message, so fencing and piggyback exclude each other."""
    fencing = bool(flags & FLAG_DO_FENCING)
    if fencing and master_key is None:
        raise LocalProtocolError("a fencing read needs the master key", ledger_id=ledger_id)
    if fencing and piggyback:
        raise LocalProtocolError("a read cannot both fence and piggyback", ledger_id=ledger_id)
    if piggyback and (previous_lac is None or entry_id != -1):
        raise LocalProtocolError("a piggyback read needs previous_lac and entry id -1", entry_id=entry_id)
    if timeout_ms is not None and previous_lac is None:
        raise LocalProtocolError("a long-poll timeout needs previous_lac", ledger_id=ledger_id)
    try:
        req = _request(pb.READ_ENTRY, txn_id, _priority(flags, priority))
        read = req.readRequest
        read.ledgerId = ledger_id
        read.entryId = entry_id
        if previous_lac is not None:
            read.previousLAC = previous_lac
        if timeout_ms is not None:
            read.timeOut = timeout_ms
        if piggyback:
            read.flag = pb.ReadRequest.ENTRY_PIGGYBACK
        if fencing:
            read.flag = pb.ReadRequest.FENCE_LEDGER
            read.masterKey = master_key  # type: ignore[assignment]
        _set_scope(read, scope_id)
    except (ValueError, TypeError) as e:
        raise _bad_argument("READ_ENTRY request", e) from None
    return req


def read_lac_request(txn_id: int, ledger_id: int, *, scope_id: int = 0) -> pb.Request:
    """READ_LAC: asks for the explicit-LAC blob and the last stored entry."""
    req = _request(pb.READ_LAC, txn_id)
    return _filled("READ_LAC request", req, req.readLacRequest, scope_id, ledgerId=ledger_id)


def write_lac_request(
    txn_id: int, ledger_id: int, lac: int, master_key: bytes, body: bytes, *, scope_id: int = 0
) -> pb.Request:
    """WRITE_LAC: ``body`` is the digested explicit-LAC blob (the bookie reads the ids from it)."""
    req = _request(pb.WRITE_LAC, txn_id)
    return _filled(
        "WRITE_LAC request", req, req.writeLacRequest, scope_id, ledgerId=ledger_id, lac=lac, masterKey=master_key,
        body=body,
    )


def force_ledger_request(txn_id: int, ledger_id: int, *, scope_id: int = 0) -> pb.Request:
    """FORCE_LEDGER: fsync what was written with DEFERRED_SYNC."""
    req = _request(pb.FORCE_LEDGER, txn_id)
    return _filled("FORCE_LEDGER request", req, req.forceLedgerRequest, scope_id, ledgerId=ledger_id)


def get_bookie_info_request(txn_id: int, requested: int = TOTAL_DISK_CAPACITY | FREE_DISK_SPACE) -> pb.Request:
    """GET_BOOKIE_INFO; ``requested`` is a bit mask of TOTAL_DISK_CAPACITY / FREE_DISK_SPACE."""
    req = _request(pb.GET_BOOKIE_INFO, txn_id)
    return _filled("GET_BOOKIE_INFO request", req, req.getBookieInfoRequest, requested=requested)


def get_list_of_entries_request(txn_id: int, ledger_id: int, *, scope_id: int = 0) -> pb.Request:
    """GET_LIST_OF_ENTRIES_OF_LEDGER: which entries the bookie stores."""
    req = _request(pb.GET_LIST_OF_ENTRIES_OF_LEDGER, txn_id)
    return _filled(
        "GET_LIST_OF_ENTRIES_OF_LEDGER request", req, req.getListOfEntriesOfLedgerRequest, scope_id, ledgerId=ledger_id
    )


def start_tls_request(txn_id: int) -> pb.Request:
    """START_TLS with the empty sub-message present (Java writes ``d2 06 00``)."""
    req = _request(pb.START_TLS, txn_id)
    req.startTLSRequest.SetInParent()
    return req


def auth_request(txn_id: int, auth_plugin_name: str, payload: bytes) -> pb.Request:
    """AUTH: one step of the auth plugin's handshake."""
    req = _request(pb.AUTH, txn_id)
    return _filled("AUTH request", req, req.authRequest, authPluginName=auth_plugin_name, payload=payload)


def batch_read_request(
    txn_id: int,
    ledger_id: int,
    start_entry_id: int,
    max_count: int,
    max_size: int,
    flags: int = 0,
    *,
    master_key: bytes | None = None,
    scope_id: int = 0,
    priority: int = 0,
) -> pb.Request:
    """BATCH_READ_ENTRY over v3 (our extension, Request field 1062).  Only for bookies
    that advertise ``batch-read-v3``; DO_FENCING needs ``master_key`` as for reads."""
    fencing = bool(flags & FLAG_DO_FENCING)
    if fencing and master_key is None:
        raise LocalProtocolError("a fencing batch read needs the master key", ledger_id=ledger_id)
    req = _request(pb.BATCH_READ_ENTRY, txn_id, _priority(flags, priority))
    fence = {"flag": pb.BatchReadRequest.FENCE_LEDGER, "masterKey": master_key} if fencing else {}
    return _filled(
        "BATCH_READ_ENTRY request", req, req.batchReadRequest, scope_id, ledgerId=ledger_id,
        startEntryId=start_entry_id, maxCount=max_count, maxSize=max_size, **fence,
    )


# --------------------------------------------------------------------------
# Response builders (what the Java bookie sends, docs/protocol.md §3)


def response_header(request: pb.Request) -> pb.BKPacketHeader:
    """A fresh header for a normal response: VERSION_THREE, the request's op and txnId, no priority."""
    h = request.header
    return pb.BKPacketHeader(version=pb.VERSION_THREE, operation=h.operation, txnId=h.txnId)


def _response(request: pb.Request, status: int) -> pb.Response:
    try:
        return pb.Response(header=response_header(request), status=status)
    except ValueError as e:
        raise _bad_argument("response", e) from None


def _echo_scope(sub: Message, request_sub: Message) -> None:
    scope = request_sub.ledgerScopeId  # type: ignore[attr-defined]
    if scope:
        sub.ledgerScopeId = scope  # type: ignore[attr-defined]


def error_response(request: pb.Request, status: int) -> pb.Response:
    """Unknown operation (EBADREQ) or unauthenticated (EUA): the request header copied verbatim."""
    try:
        return pb.Response(header=request.header, status=status)
    except ValueError as e:
        raise _bad_argument("error response", e) from None


def add_response(request: pb.Request, status: int = pb.EOK) -> pb.Response:
    """ADD_ENTRY response echoing ``addRequest``'s ledgerId, entryId (and scope)."""
    resp = _response(request, status)
    add, sub = request.addRequest, resp.addResponse
    sub.status = status
    sub.ledgerId = add.ledgerId
    sub.entryId = add.entryId
    _echo_scope(sub, add)
    return resp


def read_response(
    request: pb.Request,
    status: int = pb.EOK,
    *,
    body: bytes | None = None,
    entry_id: int | None = None,
    max_lac: int | None = None,
    lac_update_timestamp: int | None = None,
) -> pb.Response:
    """READ_ENTRY response; ``entry_id`` overrides the echoed id (piggyback answers previousLAC + 1)."""
    resp = _response(request, status)
    read, sub = request.readRequest, resp.readResponse
    try:
        sub.status = status
        sub.ledgerId = read.ledgerId
        sub.entryId = read.entryId if entry_id is None else entry_id
        if body is not None:
            sub.body = body
        if max_lac is not None:
            sub.maxLAC = max_lac
        if lac_update_timestamp is not None:
            sub.lacUpdateTimestamp = lac_update_timestamp
    except (ValueError, TypeError) as e:
        raise _bad_argument("READ_ENTRY response", e) from None
    _echo_scope(sub, read)
    return resp


def _ledger_response(
    what: str, request: pb.Request, status: int, response: str, request_field: str, **fields: object
) -> pb.Response:
    """A response of ``status``, the request's ledger, its scope echoed and ``fields``: READ_LAC, WRITE_LAC,
    FORCE_LEDGER, GET_LIST_OF_ENTRIES_OF_LEDGER, BATCH_READ_ENTRY."""
    resp = _response(request, status)
    asked = getattr(request, request_field)
    return _filled(
        what, resp, getattr(resp, response), scope_id_of(asked), status=status, ledgerId=asked.ledgerId, **fields
    )


def write_lac_response(request: pb.Request, status: int = pb.EOK) -> pb.Response:
    """WRITE_LAC response."""
    return _ledger_response("WRITE_LAC response", request, status, "writeLacResponse", "writeLacRequest")


def read_lac_response(
    request: pb.Request,
    status: int = pb.EOK,
    *,
    lac_body: bytes | None = None,
    last_entry_body: bytes | None = None,
) -> pb.Response:
    """READ_LAC response with the explicit-LAC blob and/or the last stored entry."""
    return _ledger_response(
        "READ_LAC response", request, status, "readLacResponse", "readLacRequest",
        **_given(lacBody=lac_body, lastEntryBody=last_entry_body),
    )


def force_ledger_response(request: pb.Request, status: int = pb.EOK) -> pb.Response:
    """FORCE_LEDGER response."""
    return _ledger_response("FORCE_LEDGER response", request, status, "forceLedgerResponse", "forceLedgerRequest")


def get_bookie_info_response(
    request: pb.Request,
    status: int = pb.EOK,
    *,
    total_disk_capacity: int | None = None,
    free_disk_space: int | None = None,
) -> pb.Response:
    """GET_BOOKIE_INFO response; pass only the values the request asked for."""
    resp = _response(request, status)
    return _filled(
        "GET_BOOKIE_INFO response", resp, resp.getBookieInfoResponse, status=status,
        **_given(totalDiskCapacity=total_disk_capacity, freeDiskSpace=free_disk_space),
    )


def get_list_of_entries_response(
    request: pb.Request, status: int = pb.EOK, *, availability: bytes | None = None
) -> pb.Response:
    """GET_LIST_OF_ENTRIES_OF_LEDGER response; ``availability`` from :func:`encode_availability`."""
    return _ledger_response(
        "GET_LIST_OF_ENTRIES_OF_LEDGER response", request, status, "getListOfEntriesOfLedgerResponse",
        "getListOfEntriesOfLedgerRequest", **_given(availabilityOfEntriesOfLedger=availability),
    )


def start_tls_response(request: pb.Request, status: int = pb.EOK) -> pb.Response:
    """START_TLS response: the empty sub-message on EOK, status only otherwise
    (EBADREQ when TLS is not configured)."""
    resp = _response(request, status)
    if status == pb.EOK:
        resp.startTLSResponse.SetInParent()
    return resp


def auth_response(request: pb.Request, auth_plugin_name: str, payload: bytes) -> pb.Response:
    """AUTH response (EOK): the request header copied verbatim, as AuthHandler does."""
    resp = error_response(request, pb.EOK)
    return _filled("AUTH response", resp, resp.authResponse, authPluginName=auth_plugin_name, payload=payload)


def batch_read_response(
    request: pb.Request,
    status: int = pb.EOK,
    *,
    entries: Iterable[bytes] = (),
    max_lac: int | None = None,
) -> pb.Response:
    """BATCH_READ_ENTRY response (our v3 extension): stored entries from startEntryId on."""
    return _ledger_response(
        "BATCH_READ_ENTRY response", request, status, "batchReadResponse", "batchReadRequest",
        startEntryId=request.batchReadRequest.startEntryId, entries=list(entries), **_given(maxLAC=max_lac),
    )


# --------------------------------------------------------------------------
# Reading messages


def sub_request(request: pb.Request) -> Message | None:
    """The sub-request that ``header.operation`` names, or None if it is absent or unknown."""
    name = _REQUEST_FIELD.get(request.header.operation)
    if name is None or not request.HasField(name):
        return None
    return getattr(request, name)  # type: ignore[no-any-return]


def sub_response(response: pb.Response) -> Message | None:
    """The sub-response that ``header.operation`` names, or None if it is absent or unknown."""
    name = _RESPONSE_FIELD.get(response.header.operation)
    if name is None or not response.HasField(name):
        return None
    return getattr(response, name)  # type: ignore[no-any-return]


def response_status(response: pb.Response) -> int:
    """The status a Java client acts on: the top-level one unless EOK, then the inner one.

    Java reads a missing inner response as a default instance (EOK, ledger 0);
    we refuse that with MalformedFrameError instead, since acting on it would
    mean accepting an empty answer as a success.
    """
    status = response.status
    if status != pb.EOK or response.header.operation in _NO_INNER_STATUS:
        return status
    sub = sub_response(response)
    if sub is None:
        raise MalformedFrameError(
            "EOK response without its sub-response", operation=response.header.operation
        )
    return sub.status  # type: ignore[attr-defined,no-any-return]


def scope_id_of(sub: Message) -> int:
    """The BP-35 scope id of a sub-request or sub-response (0 when absent or not carried)."""
    return getattr(sub, "ledgerScopeId", 0)


# --------------------------------------------------------------------------
# AvailabilityOfEntriesOfLedger (GET_LIST_OF_ENTRIES_OF_LEDGER payload, docs/protocol.md §3)

_AV_HEADER = struct.Struct(">ii56x")
_AV_GROUP = struct.Struct(">qqii")
_AV_HEADER_SIZE: Final = 64
_AV_VERSION: Final = 0
_MAX_INT32: Final = 0x7FFFFFFF


class SequenceGroup:
    """Runs of ``size`` consecutive entry ids starting at ``first``, ``first + period``, ... ``last``."""

    __slots__ = ("first", "last", "size", "period")

    def __init__(self, first: int, last: int, size: int, period: int) -> None:
        self.first, self.last, self.size, self.period = first, last, size, period

    def __repr__(self) -> str:
        return f"SequenceGroup(first={self.first}, last={self.last}, size={self.size}, period={self.period})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SequenceGroup):
            return NotImplemented
        return (self.first, self.last, self.size, self.period) == (other.first, other.last, other.size, other.period)

    def __hash__(self) -> int:
        return hash((self.first, self.last, self.size, self.period))

    @property
    def end(self) -> int:
        """One past the last entry id of the group."""
        return self.last + self.size

    def __len__(self) -> int:
        if self.last == self.first:
            return self.size
        return ((self.last - self.first) // self.period + 1) * self.size

    def __contains__(self, entry_id: object) -> bool:
        if not isinstance(entry_id, int) or not self.first <= entry_id < self.end:
            return False
        offset = entry_id - self.first
        return (offset % self.period if self.period else offset) < self.size

    def __iter__(self) -> Iterator[int]:
        step = self.period or 1
        for start in range(self.first, self.last + 1, step):
            yield from range(start, start + self.size)


class AvailabilityOfEntriesOfLedger:
    """Which entries of a ledger a bookie stores, in BookKeeper's condensed encoding."""

    __slots__ = ("groups",)

    def __init__(self, groups: Iterable[SequenceGroup] = ()) -> None:
        self.groups: tuple[SequenceGroup, ...] = tuple(groups)

    @classmethod
    def from_entry_ids(cls, entry_ids: Iterable[int]) -> "AvailabilityOfEntriesOfLedger":
        """Group strictly increasing, non-negative ids the way Java 4.17 does: one
        group (period 0) per maximal run of consecutive ids."""
        groups: list[SequenceGroup] = []
        start = prev = -1
        for e in entry_ids:
            if not is_int(e):
                raise LocalProtocolError("entry ids must be ints", entry_id=e)
            if e <= prev or e > INT64_MAX:
                raise LocalProtocolError("entry ids must be strictly increasing int64 >= 0", entry_id=e, previous=prev)
            if prev < 0 or e != prev + 1 or e - start >= _MAX_INT32:
                if prev >= 0:
                    groups.append(SequenceGroup(start, start, prev - start + 1, 0))
                start = e
            prev = e
        if prev >= 0:
            groups.append(SequenceGroup(start, start, prev - start + 1, 0))
        return cls(groups)

    @classmethod
    def parse(cls, data: Buffer) -> "AvailabilityOfEntriesOfLedger":
        """Decode and validate; raises MalformedFrameError on anything Java would not produce sensibly."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise LocalProtocolError("availability data must be bytes-like", type=type(data).__name__)
        view = memoryview(data)
        if len(view) < _AV_HEADER_SIZE:
            raise MalformedFrameError("availability data shorter than its 64-byte header", length=len(view))
        version, count = _AV_HEADER.unpack_from(view, 0)
        if version != _AV_VERSION:
            raise MalformedFrameError("unknown availability header version", version=version)
        if count < 0 or len(view) != _AV_HEADER_SIZE + count * _AV_GROUP.size:
            raise MalformedFrameError("availability group count does not match its length", groups=count, length=len(view))
        groups = []
        next_free = 0
        for first, last, size, period in _AV_GROUP.iter_unpack(view[_AV_HEADER_SIZE:]):
            group = SequenceGroup(first, last, size, period)
            if first < next_free or size <= 0 or last < first or period < 0:
                raise MalformedFrameError("bad availability sequence group", group=group)
            if last != first and (period < size or (last - first) % period):
                raise MalformedFrameError("bad availability sequence period", group=group)
            if group.end - 1 > INT64_MAX:
                raise MalformedFrameError("availability sequence group overflows int64", group=group)
            next_free = group.end
            groups.append(group)
        return cls(groups)

    def to_bytes(self) -> bytes:
        """The encoding Java's ``serializeStateOfEntriesOfLedger`` writes."""
        parts = [_AV_HEADER.pack(_AV_VERSION, len(self.groups))]
        try:
            parts.extend(_AV_GROUP.pack(g.first, g.last, g.size, g.period) for g in self.groups)
        except struct.error as e:
            raise LocalProtocolError("sequence group out of range", error=str(e)) from None
        return b"".join(parts)

    def __len__(self) -> int:
        return sum(len(g) for g in self.groups)

    def __iter__(self) -> Iterator[int]:
        for g in self.groups:
            yield from g

    def __contains__(self, entry_id: object) -> bool:
        return any(entry_id in g for g in self.groups)

    def __repr__(self) -> str:
        return f"AvailabilityOfEntriesOfLedger({list(self.groups)!r})"


def encode_availability(entry_ids: Iterable[int]) -> bytes:
    """Encode strictly increasing entry ids as the bookie's GET_LIST_OF_ENTRIES_OF_LEDGER payload."""
    return AvailabilityOfEntriesOfLedger.from_entry_ids(entry_ids).to_bytes()


def iter_availability(data: Buffer) -> Iterator[int]:
    """The entry ids in ``data``, ascending; validates everything before yielding the first."""
    return iter(AvailabilityOfEntriesOfLedger.parse(data))


def decode_availability(data: Buffer) -> list[int]:
    """The entry ids in ``data`` as a list (use :func:`iter_availability` for huge ledgers)."""
    return list(AvailabilityOfEntriesOfLedger.parse(data))
