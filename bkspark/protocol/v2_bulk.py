"""v2 frames in bulk: one call for a whole received chunk's bodies, or for a run of frames sent in one buffer.

:mod:`bkspark.protocol.v2` codes one message at a time; the connections' hot loops hand it many at once, and
these passes take the common case of each (a successful acknowledgement, a plain read, a well-formed add) with no
message object, leaving everything else for :func:`~bkspark.protocol.v2.decode_request` /
:func:`~bkspark.protocol.v2.decode_response` in its turn, which then raises what it must.  They never raise
themselves (the encoders excepted, for ids out of range).  The layouts are :mod:`~bkspark.protocol.v2`'s own.

* The client's: :func:`encode_read_requests` (a range read's run of requests to one bookie),
  :func:`add_ack_ids` and :func:`read_answer` (the pure-Python steps of ``correlation.v2_ok_answers``).
* The bookie's: :func:`decode_add_requests` and :func:`decode_plain_reads` (two passes over a received chunk of
  a v2 connection), :func:`encode_add_responses` and :func:`encode_read_responses` (a group's answers in one
  buffer); docs/bookie.md, "Adds" and "Runs of single reads".

Three of them have compiled twins (``bkspark/protocol/_speedups.c``), read from this module's ``_speedups`` at
call time so that tests and benchmarks can turn them off; each ``*_reference`` beside them is the pure-Python
loop they are tested against (docs/architecture.md, "Compiled fast path").
"""

from __future__ import annotations

import struct
from typing import Iterable

from bkspark.errors import LocalProtocolError
from bkspark.protocol.speedups import speedups as _speedups
from bkspark.protocol.v2 import (
    _ADD_REQUEST_MIN_BODY_SIZE,
    _BODY_HEADER,
    _BODY_READ_REQUEST,
    _BODY_RESPONSE_PREFIX,
    _READ_REQUEST,
    _READ_REQUEST_BODY_SIZE,
    _RESPONSE_PREFIX,
    ADD_ENTRY,
    ADD_RESPONSE_HEADER_V2,
    EOK,
    FLAG_DO_FENCING,
    FLAG_NONE,
    PROTOCOL_VERSION,
    READ_ENTRY,
    READ_RESPONSE_HEADER_V2,
    RESPONSE_HEADER_SIZE,
    AddRequest,
    _body_view,
    _decode_add_request,
    _header,
    encode_add_response,
    unpack_header,
)

__all__ = [
    "encode_read_requests",
    "add_ack_ids",
    "read_answer",
    "decode_add_requests",
    "decode_add_requests_reference",
    "decode_plain_reads",
    "decode_plain_reads_reference",
    "encode_add_responses",
    "encode_add_responses_reference",
    "encode_read_responses",
]


# --------------------------------------------------------------------------
# The client's: a run of read requests, a chunk of answers


def encode_read_requests(ledger_id: int, entry_ids: "Iterable[int]") -> bytes:
    """The plain READENTRY frames (no flags, no master key, this protocol version) of ``entry_ids``, joined: a
    range read's run of requests to one bookie, the bytes :func:`v2.encode_read_request` makes of each."""
    pack, header = _READ_REQUEST.pack, _header(PROTOCOL_VERSION, READ_ENTRY, FLAG_NONE)
    try:
        return b"".join([pack(20, header, ledger_id, entry_id) for entry_id in entry_ids])
    except struct.error as exc:
        raise LocalProtocolError(f"READENTRY field out of range: {exc}", ledger_id=ledger_id) from None


def add_ack_ids(body: object) -> tuple[int, int] | None:
    """``(ledger id, entry id)`` of a successful ADDENTRY response body as the frame splitter hands a small one
    over (``bytes``): what :func:`v2.decode_response` makes of it, without the response.  None for any other body
    (one that is not ``bytes`` included); never raises."""
    if type(body) is bytes and len(body) >= RESPONSE_HEADER_SIZE:
        header, rc, ledger_id, entry_id = _BODY_RESPONSE_PREFIX.unpack_from(body, 0)
        if header == ADD_RESPONSE_HEADER_V2 and rc == EOK:
            return ledger_id, entry_id
    return None


def read_answer(body: object) -> tuple[int, int, memoryview] | None:
    """``(ledger id, entry id, the stored entry)`` of a successful READENTRY response body (``bytes``, or a flat
    memoryview of unsigned bytes as the frame splitter hands a large one over): what :func:`v2.decode_response` makes
    of it, without the response.  None for any other body; never raises."""
    if type(body) is memoryview:
        if not (body.ndim == 1 and body.itemsize == 1 and body.format == "B" and body.c_contiguous):
            return None
    elif type(body) is not bytes:
        return None
    if len(body) >= RESPONSE_HEADER_SIZE:  # type: ignore[arg-type]
        header, rc, ledger_id, entry_id = _BODY_RESPONSE_PREFIX.unpack_from(body, 0)  # type: ignore[arg-type]
        if header == READ_RESPONSE_HEADER_V2 and rc == EOK:
            return ledger_id, entry_id, memoryview(body)[RESPONSE_HEADER_SIZE:]  # type: ignore[arg-type]
    return None


# --------------------------------------------------------------------------
# The bookie's: a chunk of requests, a group's answers


def decode_add_requests(bodies: list[bytes | memoryview]) -> list[object]:
    """``bodies`` with each well-formed ADDENTRY body decoded into its :class:`v2.AddRequest` (what
    :func:`v2.decode_request` makes of it), every other body left as it is: a bookie's pass over a received chunk
    of a v2 connection, so a run of adds costs one call (docs/bookie.md, "Adds").  Never raises: a body this
    leaves alone meets :func:`v2.decode_request` in its turn, which raises what it must then.

    The compiled loop when it is built, else :func:`decode_add_requests_reference`.
    """
    if _speedups is not None:
        return _speedups.decode_add_requests(bodies, AddRequest, _ADD_REQUEST_MIN_BODY_SIZE)  # type: ignore[no-any-return]
    return decode_add_requests_reference(bodies)


def decode_add_requests_reference(bodies: list[bytes | memoryview]) -> list[object]:
    """The pure-Python :func:`decode_add_requests`: the tested reference of the compiled one."""
    out: list[object] = []
    for body in bodies:
        if len(body) >= _ADD_REQUEST_MIN_BODY_SIZE and (type(body) is not memoryview or body.c_contiguous):
            view = _body_view(body)
            version, opcode, flags = unpack_header(_BODY_HEADER.unpack_from(view, 0)[0])
            if opcode == ADD_ENTRY:
                out.append(_decode_add_request(view, version, flags))
                continue
        out.append(body)
    return out


#: A READENTRY header of version 2 without the fencing flag (what :func:`decode_plain_reads` checks first).
_PLAIN_READ_MASK = 0xFFFF0000 | FLAG_DO_FENCING
_PLAIN_READ_V2 = (PROTOCOL_VERSION << 24) | (READ_ENTRY << 16)


def decode_plain_reads(items: list[object]) -> list[object]:
    """``items`` (frame bodies, or what :func:`decode_add_requests` made of them) with each READENTRY body that
    does not ask for fencing as its ``(ledger_id, entry_id, version)`` -- what :func:`v2.decode_request` reads from
    it -- and every other item left as it is: a bookie's pass over a received chunk of a v2 connection, so a run
    of single reads is handled at once (docs/bookie.md, "Runs of single reads").  Only ``bytes`` bodies are
    decoded (the frame splitter's small bodies: every read request is one).  Never raises: a body this leaves alone meets
    :func:`v2.decode_request` in its turn.

    The compiled loop when it is built, else :func:`decode_plain_reads_reference`.
    """
    if _speedups is not None:
        return _speedups.decode_plain_reads(  # type: ignore[no-any-return]
            items, READ_ENTRY, FLAG_DO_FENCING, _READ_REQUEST_BODY_SIZE
        )
    return decode_plain_reads_reference(items)


def decode_plain_reads_reference(items: list[object]) -> list[object]:
    """The pure-Python :func:`decode_plain_reads`: the tested reference of the compiled one."""
    out: list[object] = []
    append = out.append
    unpack = _BODY_READ_REQUEST.unpack_from
    for item in items:
        if type(item) is bytes and len(item) >= _READ_REQUEST_BODY_SIZE:
            header, ledger_id, entry_id = unpack(item, 0)
            if header & _PLAIN_READ_MASK == _PLAIN_READ_V2:
                append((ledger_id, entry_id, PROTOCOL_VERSION))
                continue
            version, opcode, flags = unpack_header(header)
            if opcode == READ_ENTRY and not flags & FLAG_DO_FENCING:
                append((ledger_id, entry_id, version))
                continue
        append(item)
    return out


def encode_add_responses(rc: int, ids: list[tuple[int, int, int]]) -> bytes:
    """:func:`v2.encode_add_response` of each ``(ledger_id, entry_id, version)``, joined: a bookie's answer to a
    group of adds in one buffer (docs/bookie.md, "Adds").

    The compiled loop when it is built, else (and for anything it hands back) :func:`encode_add_responses_reference`.
    """
    if _speedups is not None:
        frames = _speedups.v2_add_responses(rc, ids, ADD_ENTRY)
        if frames is not None:
            return frames  # type: ignore[no-any-return]
    return encode_add_responses_reference(rc, ids)


def encode_add_responses_reference(rc: int, ids: list[tuple[int, int, int]]) -> bytes:
    """The pure-Python :func:`encode_add_responses`: the tested reference of the compiled one."""
    return b"".join([encode_add_response(rc, ledger_id, entry_id, version) for ledger_id, entry_id, version in ids])


def encode_read_responses(ids: list[tuple[int, int, int]], entries: list[bytes]) -> bytes:
    """:func:`v2.encode_read_response` of each successful read, ``ids[i]`` its ``(ledger_id, entry_id, version)``
    and ``entries[i]`` its entry, joined: a bookie's answer to a run of single reads that memory held, in one
    buffer (docs/bookie.md, "Runs of single reads")."""
    pack = _RESPONSE_PREFIX.pack
    try:
        frames = [
            part
            for (ledger_id, entry_id, version), entry in zip(ids, entries)
            for part in (
                pack(RESPONSE_HEADER_SIZE + len(entry), _header(version, READ_ENTRY, 0), EOK, ledger_id, entry_id),
                entry,
            )
        ]
    except struct.error as exc:
        raise LocalProtocolError(f"READENTRY response field out of range: {exc}") from None
    return b"".join(frames)
