"""Offsets of the streaming ``bookkeeper`` source, and admission control: pure functions, no I/O.

An offset names, for every ledger the query follows, the next entry id to read::

    {"ledgers": {"0:7": 120, "0:9": -1}}

Keys are ``"<scope>:<ledger>"`` strings; ``-1`` (:data:`DONE`) means the ledger
is closed and was read to its last entry (so its later deletion loses nothing).
Spark compares offsets as JSON strings, so every offset is built in one
canonical order (by scope, then ledger id) by :func:`canonical`; otherwise
"no new data" would never be detected.

``{"latest": true}`` (:data:`LATEST`) is the initial offset of
``startingOffsets=latest``: it is resolved by the first ``latestOffset`` call
into positions that batch 0 ends at (reading nothing), and it is the same
value every time Spark asks for the initial offset again (a replay of batch 0
after a crash), so a restart neither skips nor repeats rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from bkspark.errors import InvalidOptionError

__all__ = [
    "DONE",
    "LATEST",
    "LedgerPosition",
    "Admission",
    "ledger_key",
    "parse_key",
    "canonical",
    "positions_of",
    "parse_starting_offsets",
    "next_offset",
    "lag",
]

#: The value of a ledger that is closed and read to its end.
DONE = -1
#: The initial offset of ``startingOffsets=latest`` (resolved by the first ``latestOffset``).
LATEST: dict[str, Any] = {"latest": True}


def ledger_key(scope_id: int, ledger_id: int) -> str:
    """The offset key of a ledger."""
    return f"{scope_id}:{ledger_id}"


def parse_key(key: str, default_scope: int = 0) -> tuple[int, int]:
    """``"scope:ledger"`` (or a bare ``"ledger"`` in ``default_scope``) -> ``(scope, ledger)``."""
    scope, sep, ledger = str(key).partition(":")
    if not sep:
        scope, ledger = str(default_scope), scope
    if not (scope.isdigit() and ledger.isdigit()):
        raise InvalidOptionError(
            f"[BOOKKEEPER_INVALID_OPTION] offset key {key!r} is invalid: expected '<ledgerId>' or '<scopeId>:<ledgerId>'"
        )
    return int(scope), int(ledger)


def canonical(ledgers: Mapping[str, int]) -> dict[str, Any]:
    """The offset for these ledger positions, keys in (scope, ledger) order."""
    ordered = sorted(ledgers.items(), key=lambda item: parse_key(item[0]))
    return {"ledgers": {key: int(value) for key, value in ordered}}


def positions_of(offset: Mapping[str, Any]) -> dict[str, int]:
    """The ledger positions of an offset (empty for :data:`LATEST`)."""
    return dict(offset.get("ledgers") or {})


def parse_starting_offsets(text: str | None, default_scope: int) -> dict[str, Any]:
    """``earliest`` (default), ``latest`` or JSON ``{"<ledger>": nextEntryId, ...}`` -> the initial offset."""
    raw = (text or "earliest").strip()
    if raw.lower() == "earliest":
        return canonical({})
    if raw.lower() == "latest":
        return dict(LATEST)
    fix = (
        "expected 'earliest', 'latest' or JSON such as {\"7\": 0, \"0:9\": 120} "
        "(ledger id or 'scope:ledger' -> the first entry id to read)"
    )
    try:
        body = json.loads(raw)
    except ValueError:
        raise InvalidOptionError(f"[BOOKKEEPER_INVALID_OPTION] option 'startingOffsets'={raw!r} is invalid: {fix}") from None
    if isinstance(body, dict) and set(body) == {"ledgers"} and isinstance(body["ledgers"], dict):
        body = body["ledgers"]  # an offset copied from a progress report
    if not isinstance(body, dict):
        raise InvalidOptionError(f"[BOOKKEEPER_INVALID_OPTION] option 'startingOffsets'={raw!r} is invalid: {fix}")
    ledgers: dict[str, int] = {}
    for key, value in body.items():
        scope, ledger = parse_key(key, default_scope)
        if not isinstance(value, int) or isinstance(value, bool) or value < DONE:
            raise InvalidOptionError(f"[BOOKKEEPER_INVALID_OPTION] option 'startingOffsets'={raw!r} is invalid: {fix}")
        ledgers[ledger_key(scope, ledger)] = value
    return canonical(ledgers)


@dataclass(frozen=True)
class LedgerPosition:
    """What the driver knows about one followed ledger right now."""

    key: str
    #: Entries ``0..available-1`` are confirmed (LAC + 1; last entry + 1 once closed).
    available: int
    closed: bool
    #: Estimated bytes per entry (exact average for closed ledgers).
    entry_size: float = 1024.0
    #: The ledger's metadata is gone (deleted under the query).
    missing: bool = False


@dataclass(frozen=True)
class Admission:
    """How much one micro-batch may take (None: no limit)."""

    max_rows: int | None = None
    max_bytes: int | None = None


def next_offset(
    start: Mapping[str, Any],
    positions: Iterable[LedgerPosition],
    *,
    start_entry: int,
    admission: Admission = Admission(),
) -> tuple[dict[str, Any], list[str]]:
    """The end offset of the next micro-batch from ``start``, and the keys of ledgers lost under the query.

    Ledgers are filled in key order until ``admission`` is used up; at least one
    entry is admitted when any is available (so a batch always progresses).
    ``start`` may be :data:`LATEST`: every ledger then ends where it is now.
    A lost ledger (metadata gone before it was read to its end) is marked
    :data:`DONE` here; the caller decides whether that fails the query.
    """
    latest = bool(start.get("latest"))
    begin = positions_of(start)
    rows_left = admission.max_rows
    bytes_left = admission.max_bytes
    admitted = 0
    end: dict[str, int] = dict(begin)
    lost: list[str] = []
    for pos in sorted(positions, key=lambda p: parse_key(p.key)):
        first = begin.get(pos.key, start_entry)
        if first == DONE:
            end[pos.key] = DONE
            continue
        if pos.missing:
            lost.append(pos.key)
            end[pos.key] = DONE
            continue
        if latest:
            end[pos.key] = DONE if pos.closed else pos.available
            continue
        room = max(0, pos.available - first)
        grant = room
        if rows_left is not None:
            grant = min(grant, rows_left)
        if bytes_left is not None and grant > 0:
            by_size = int(bytes_left // max(pos.entry_size, 1.0))
            grant = min(grant, by_size if (by_size > 0 or admitted > 0) else 1)
        stop = first + grant
        end[pos.key] = DONE if pos.closed and stop >= pos.available else stop
        admitted += grant
        if rows_left is not None:
            rows_left -= grant
        if bytes_left is not None:
            bytes_left = max(0, bytes_left - int(grant * pos.entry_size))
    return canonical(end), lost


def lag(end: Mapping[str, Any], positions: Iterable[LedgerPosition], start_entry: int) -> tuple[int, int]:
    """``(entries, estimated bytes)`` confirmed in the ledgers but beyond ``end``."""
    done = positions_of(end)
    entries = 0
    size = 0.0
    for pos in positions:
        if pos.missing:
            continue
        at = done.get(pos.key, start_entry)
        if at == DONE:
            continue
        behind = max(0, pos.available - at)
        entries += behind
        size += behind * pos.entry_size
    return entries, int(size)
