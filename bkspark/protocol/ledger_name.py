"""BP-35 128-bit ledger names: ``(scope id, ledger id)`` <-> 32 hex digits, and ids from UUIDs.

The qualified name is the scope id (the 64 most significant bits) then the
ledger id (the 64 least significant bits), each printed as 16 lower-case hex
digits of its unsigned 64-bit value.  Scope ids are Java ``long``s (int64, as
on the wire and in entry headers): a negative scope prints as its two's
complement, and parsing gives the signed value back.  Ledger ids are
non-negative int64s, as everywhere in BookKeeper, so a name whose low half has
its top bit set names no ledger and is rejected.

:func:`ids_from_uuid` splits a UUID into a scope id (its high 64 bits, read as
a signed int64) and a ledger id (its low 64 bits with the top bit cleared).
For RFC 4122 UUIDs that bit is part of the fixed variant field (``10``), so
clearing it throws away no randomness (docs/scoped-ledger-paths.md).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from bkspark.config.typed import is_int
from bkspark.protocol.values import INT64_MAX, INT64_MIN
from bkspark.errors import InvalidOptionError

__all__ = ["LedgerRef", "qualified_name", "parse_qualified_name", "ids_from_uuid"]

_UINT64 = 2**64
_LEDGER_MASK = INT64_MAX
_HEX32 = re.compile(r"[0-9a-fA-F]{32}")
_UUID_FORM = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _check_int(value: object, what: str, lo: int, hi: int) -> int:
    if not is_int(value) or not lo <= value <= hi:  # type: ignore[operator]
        raise InvalidOptionError(f"{what} {value!r} out of range [{lo}, {hi}]")
    return value


@dataclass(frozen=True)
class LedgerRef:
    """A ledger's 128-bit name (BP-35): its ledger id and scope id (0: the classic namespace)."""

    ledger_id: int
    scope_id: int = 0


def qualified_name(scope_id: int, ledger_id: int) -> str:
    """The 32 lower-case hex digit name of ledger ``ledger_id`` in scope ``scope_id``."""
    _check_int(scope_id, "scope id", INT64_MIN, INT64_MAX)
    _check_int(ledger_id, "ledger id", 0, INT64_MAX)
    return f"{scope_id % _UINT64:016x}{ledger_id:016x}"


def parse_qualified_name(text: str) -> tuple[int, int]:
    """``(scope_id, ledger_id)`` from a qualified name.

    Accepts 32 hex digits (any case), optionally prefixed by ``0x`` and/or in
    the dashed 8-4-4-4-12 UUID layout.  Raises :class:`InvalidOptionError`
    naming the input for anything else, including a ledger half >= 2^63.
    """
    if not isinstance(text, str):
        raise InvalidOptionError("a ledger qualified name must be a string", name=text)
    body = text[2:] if text[:2].lower() == "0x" else text
    if _UUID_FORM.fullmatch(body):
        body = body.replace("-", "")
    if not _HEX32.fullmatch(body):
        raise InvalidOptionError(
            f"bad ledger qualified name {text!r}: expected 32 hex digits (optionally 0x-prefixed or UUID-dashed)"
        )
    high, low = int(body[:16], 16), int(body[16:], 16)
    if low > INT64_MAX:
        raise InvalidOptionError(
            f"bad ledger qualified name {text!r}: the ledger half has its top bit set, and ledger ids are "
            "non-negative int64s (for a UUID use ids_from_uuid)"
        )
    scope_id = high - _UINT64 if high > INT64_MAX else high
    return scope_id, low


def ids_from_uuid(value: uuid.UUID) -> tuple[int, int]:
    """``(scope_id, ledger_id)`` for a decentrally generated ledger (BP-35's UUID scheme).

    The scope is the UUID's high 64 bits as a signed int64; the ledger id its
    low 64 bits with the sign bit cleared (the RFC 4122 variant bit).  A UUID
    whose high half is zero is refused: scope 0 ids come from ZooKeeper.  Any
    version-4 UUID has a non-zero high half (its version nibble).
    """
    if not isinstance(value, uuid.UUID):
        raise InvalidOptionError("ids_from_uuid needs a uuid.UUID", value=value)
    high, low = value.int >> 64, value.int & (_UINT64 - 1)
    if high == 0:
        # Scope 0 is BookKeeper's own id space, allocated centrally by ZooKeeper.
        raise InvalidOptionError(f"UUID {value} has zero high bits: it would land in scope 0")
    scope_id = high - _UINT64 if high > INT64_MAX else high
    return scope_id, low & _LEDGER_MASK
