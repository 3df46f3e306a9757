"""Request/response correlation and "return code -> error", for v2 and v3, in one place.

Sans-IO.  A connection keeps its requests in a table keyed the way the Java
client keys them (``PerChannelBookieClient``):

* v2 ADDENTRY / READENTRY: ``(ledger id, entry id as sent, opcode)``; several
  requests may share a key and any response with it completes one of them.
  The key is that triple packed into one ``int`` (:func:`add_key`, :func:`read_key`):
  an ``int`` is never tracked by Python's cyclic garbage collector and hashes at
  once, where a tuple per request was one more object for the collector to walk
  while the request waits, and three hashes per lookup (BENCHMARKS.md,
  "Acknowledgements cut across reads; keys as integers");
* v2 BATCH_READ_ENTRY: ``(request id, opcode 7)``;
* v3: the header's ``txnId`` (unique per connection).

:func:`response_error` turns a response's non-OK return code into the class
:mod:`bkspark.errors` registers for it (v2 ``rc`` or v3 status, the status
being the one a Java client acts on: :func:`v3.response_status`).  The bookie
client calls it once per response, so every operation above the connection
sees either a successful response or a typed error.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable

from bkspark.errors import BKError, error_for_rc, error_for_status
from bkspark.protocol import v2, v2_bulk, v3
from bkspark.protocol.speedups import speedups as _speedups

__all__ = [
    "add_key",
    "add_keys",
    "v2_ok_answers",
    "v2_ok_answers_reference",
    "v2_read_response",
    "v2_add_response",
    "read_key",
    "read_keys",
    "key_ids",
    "batch_read_key",
    "v2_response_key",
    "v2_error",
    "v3_error",
    "response_error",
    "read_body",
    "is_batch_read_key",
]

_BATCH = v2.BATCH_READ_ENTRY


#: The layout of an ADDENTRY or READENTRY key: the ledger id and the entry id as unsigned 64-bit fields above one
#: bit that tells a read (1) from an add (0): ``ledger << 65 | entry << 1 | kind``.  The compiled
#: :func:`v2_ok_answers` builds the same integers.
_U64 = (1 << 64) - 1
_ADD_KIND = 0
_READ_KIND = 1


def _key(ledger_id: int, entry_id: int, kind: int) -> int:
    return ((ledger_id & _U64) << 65) | ((entry_id & _U64) << 1) | kind


def _keys(ledger_id: int, entry_ids: "Iterable[int]", kind: int) -> list[int]:
    base = ((ledger_id & _U64) << 65) | kind
    if type(entry_ids) is range and entry_ids.step == 1 and 0 <= entry_ids.start and entry_ids.stop <= _U64:
        # consecutive entries: keys two apart, made by range itself (no Python step per entry)
        return list(range(base | (entry_ids.start << 1), base | (max(entry_ids.start, entry_ids.stop) << 1), 2))
    return [base | ((entry_id & _U64) << 1) for entry_id in entry_ids]


def key_ids(key: int) -> tuple[int, int]:
    """``(ledger id, entry id)`` of an ADDENTRY or READENTRY key, as signed 64-bit values (-1 stays -1)."""
    ledger_id, entry_id = key >> 65, (key >> 1) & _U64
    if ledger_id >= 1 << 63:
        ledger_id -= 1 << 64
    if entry_id >= 1 << 63:
        entry_id -= 1 << 64
    return ledger_id, entry_id


def add_key(ledger_id: int, entry_id: int) -> int:
    """The table key of a v2 ADDENTRY request (and of its response)."""
    return _key(ledger_id, entry_id, _ADD_KIND)


def add_keys(ledger_id: int, entry_ids: "Iterable[int]") -> list[int]:
    """:func:`add_key` of each of ``entry_ids`` (a bulk append's: a ``range`` of them costs no Python step per
    entry)."""
    return _keys(ledger_id, entry_ids, _ADD_KIND)


def read_key(ledger_id: int, entry_id: int) -> int:
    """The table key of a v2 READENTRY request; ``entry_id`` as sent (-1 stays -1)."""
    return _key(ledger_id, entry_id, _READ_KIND)


def read_keys(ledger_id: int, entry_ids: "Iterable[int]") -> list[int]:
    """:func:`read_key` of each of ``entry_ids``."""
    return _keys(ledger_id, entry_ids, _READ_KIND)


def batch_read_key(request_id: int) -> tuple[int, int]:
    """The table key of a v2 BATCH_READ_ENTRY request (its request id is unique per connection)."""
    return (request_id, _BATCH)


def is_batch_read_key(key: Hashable) -> bool:
    """Whether a v2 table key belongs to a batch read (a pre-4.17 bookie hangs up on those)."""
    return type(key) is tuple and len(key) == 2 and key[1] == _BATCH


def v2_response_key(response: Any) -> Hashable | None:
    """The table key a v2 response answers; None for responses nothing waits for (AUTH)."""
    kind = type(response)
    if kind is v2.AddResponse:
        return _key(response.ledger_id, response.entry_id, _ADD_KIND)
    if kind is v2.ReadResponse:
        return _key(response.ledger_id, response.entry_id, _READ_KIND)
    if kind is v2.BatchReadResponse:
        return (response.request_id, _BATCH)
    return None


def v2_ok_answers(bodies: list[Any]) -> list[Any]:
    """``bodies`` (a chunk's v2 response frame bodies) with each successful ADDENTRY response's body replaced by the
    key it answers (:func:`add_key`), each successful READENTRY response's by ``(its key (:func:`read_key`), the
    stored entry)``, every other body left as it is: a client's pass over a chunk of acknowledgements and single
    reads' answers, without a response object each.  Never raises (what it leaves meets :func:`v2.decode_response`
    in its turn).

    The compiled loop when it is built (docs/architecture.md, "Compiled fast path"), else
    :func:`v2_ok_answers_reference`.
    """
    if _speedups is not None:
        return _speedups.v2_ok_answers(  # type: ignore[no-any-return]
            bodies, v2.ADD_RESPONSE_HEADER_V2, v2.READ_RESPONSE_HEADER_V2, v2.EOK, _ADD_KIND, _READ_KIND
        )
    return v2_ok_answers_reference(bodies)


def v2_ok_answers_reference(bodies: list[Any]) -> list[Any]:
    """The pure-Python :func:`v2_ok_answers`: the tested reference of the compiled one."""
    out: list[Any] = []
    ids_of, read_of = v2_bulk.add_ack_ids, v2_bulk.read_answer
    for body in bodies:
        ids = ids_of(body)
        if ids is not None:
            out.append(add_key(*ids))
            continue
        found = read_of(body)
        out.append(body if found is None else (read_key(found[0], found[1]), found[2]))
    return out


def v2_add_response(key: int) -> "v2.AddResponse":
    """The successful ADDENTRY response a key of :func:`v2_ok_answers` stands for."""
    return v2.AddResponse(v2.EOK, *key_ids(key))


def v2_read_response(key: int, entry: Any) -> "v2.ReadResponse":
    """The successful READENTRY response a pair of :func:`v2_ok_answers` stands for."""
    return v2.ReadResponse(v2.EOK, *key_ids(key), entry)


def v2_error(rc: int, bookie_id: str, **context: Any) -> BKError:
    """The registered error for a v2 ``rc`` from ``bookie_id``."""
    return error_for_rc(rc)(f"bookie answered rc={rc}", bookie_id=bookie_id, **context)


def v3_error(status: int, bookie_id: str, **context: Any) -> BKError:
    """The registered error for a v3 ``StatusCode`` from ``bookie_id``."""
    return error_for_status(status)(f"bookie answered status={status}", bookie_id=bookie_id, **context)


def response_error(response: Any, bookie_id: str) -> BKError | None:
    """None for a successful response; else the typed error its return code stands for.

    v2: the ``rc`` (AUTH responses carry none and count as successful).  v3:
    :func:`v3.response_status`, which raises :class:`MalformedFrameError` for an
    EOK response without its sub-response (returned here as the error).
    """
    if type(response) is v3.pb.Response:
        try:
            status = v3.response_status(response)
        except BKError as exc:
            return exc
        if status == v3.pb.EOK:
            return None
        return v3_error(status, bookie_id, operation=response.header.operation)
    rc = getattr(response, "rc", v2.EOK)
    if rc == v2.EOK:
        return None
    if type(response) is v2.BatchReadResponse:
        return v2_error(rc, bookie_id, ledger_id=response.ledger_id, entry_id=response.start_entry_id)
    return v2_error(rc, bookie_id, ledger_id=response.ledger_id, entry_id=response.entry_id)


def read_body(response: Any) -> bytes | memoryview:
    """The stored entry of a successful READENTRY response, v2 or v3."""
    if type(response) is v2.ReadResponse:
        return response.entry
    return response.readResponse.body  # type: ignore[no-any-return]
