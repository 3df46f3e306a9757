"""Offsets of the streaming ``bookkeeper`` source, and admission control: pure functions, no I/O.

An offset names, for every ledger the query follows, the next entry id to read::

    {"ledgers": {"0:7": 120, "0:9": "done"}}

Keys are ``"<scope>:<ledger>"`` strings; ``"done"`` (:data:`DONE`) means the ledger is closed and was read to
its last entry (so its later deletion loses nothing).  Checkpoints written before the marker was renamed hold
``-1`` (:data:`LEGACY_DONE`) there: :func:`positions_of` reads it as ``"done"``, so such a query restarts where
it stopped.  (A Kafka user reads ``-1`` as "latest": in ``startingOffsets`` it now means exactly that, and
``-2`` means earliest, docs/streaming.md.)  Spark compares offsets as JSON strings, so every offset is built in
one canonical order (by scope, then ledger id) by :func:`canonical`; otherwise "no new data" would never be
detected.

``{"latest": true}`` (:data:`LATEST`) is the initial offset of
``startingOffsets=latest``: it is resolved by the first ``latestOffset`` call
into positions that batch 0 ends at (reading nothing), and it is the same
value every time Spark asks for the initial offset again (a replay of batch 0
after a crash), so a restart neither skips nor repeats rows.  A single ledger
given ``-1`` in JSON ``startingOffsets`` starts the same way: its initial
position is ``"latest"`` (:data:`LATEST_ENTRY`), which batch 0 resolves to its
end without reading it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Union

from bkspark.config.typed import is_int
from bkspark.errors import InvalidOptionError

__all__ = [
    "DONE",
    "LEGACY_DONE",
    "LATEST",
    "LATEST_ENTRY",
    "KAFKA_LATEST",
    "KAFKA_EARLIEST",
    "LedgerPosition",
    "Admission",
    "ledger_key",
    "parse_key",
    "canonical",
    "positions_of",
    "parse_offsets_json",
    "parse_starting_offsets",
    "next_offset",
    "lag",
    "lag_per_ledger",
]

#: The position of a ledger that is closed and read to its end.
DONE = "done"
#: What checkpoints written before the rename hold for :data:`DONE` (still read).
LEGACY_DONE = -1
#: The initial position of one ledger given ``-1`` (latest) in JSON ``startingOffsets``.
LATEST_ENTRY = "latest"
#: Kafka's markers in JSON offsets: ``-1`` latest, ``-2`` earliest.
KAFKA_LATEST = -1
KAFKA_EARLIEST = -2
#: The initial offset of ``startingOffsets=latest`` (resolved by the first ``latestOffset``).
LATEST: dict[str, Any] = {"latest": True}

#: A ledger's position in an offset: the next entry id, :data:`DONE` or :data:`LATEST_ENTRY`.
Position = Union[int, str]


def ledger_key(scope_id: int, ledger_id: int) -> str:
    """The offset key of a ledger."""
    return f"{scope_id}:{ledger_id}"


def parse_key(key: str, default_scope: int = 0, option: str = "startingOffsets") -> tuple[int, int]:
    """``"scope:ledger"`` (or a bare ``"ledger"`` in ``default_scope``) -> ``(scope, ledger)``."""
    scope, sep, ledger = str(key).partition(":")
    if not sep:
        scope, ledger = str(default_scope), scope
    if not (scope.lstrip("-").isdigit() and ledger.isdigit()):
        raise InvalidOptionError(
            f"[BOOKKEEPER_INVALID_OPTION] offset key {key!r} of option '{option}' is invalid: expected '<ledgerId>' "
            "or '<scopeId>:<ledgerId>'"
        )
    return int(scope), int(ledger)


def canonical(ledgers: Mapping[str, Position]) -> dict[str, Any]:
    """The offset for these ledger positions, keys in (scope, ledger) order."""
    ordered = sorted(ledgers.items(), key=lambda item: parse_key(item[0]))
    return {"ledgers": {key: value if isinstance(value, str) else int(value) for key, value in ordered}}


def positions_of(offset: Mapping[str, Any]) -> dict[str, Position]:
    """The ledger positions of an offset (empty for :data:`LATEST`); an old checkpoint's ``-1`` is :data:`DONE`."""
    return {key: DONE if value == LEGACY_DONE else value for key, value in (offset.get("ledgers") or {}).items()}


def parse_offsets_json(
    raw: str, option: str, default_scope: int, *, markers: Mapping[int, str], fix: str
) -> dict[tuple[int, int], int]:
    """JSON ``{"<ledger>" or "<scope>:<ledger>": value}`` (or an offset copied from a progress report, whose
    ``"done"`` is kept as :data:`KAFKA_LATEST`) -> ``{(scope, ledger): value}``; a value is an entry id >= 0 or
    one of ``markers`` (Kafka's ``-1``/``-2``, each allowed where the option gives it a meaning)."""
    def bad() -> InvalidOptionError:
        return InvalidOptionError(f"[BOOKKEEPER_INVALID_OPTION] option '{option}'={raw!r} is invalid: {fix}")

    try:
        body = json.loads(raw)
    except ValueError:
        raise bad() from None
    if isinstance(body, dict) and set(body) == {"ledgers"} and isinstance(body["ledgers"], dict):
        body = body["ledgers"]  # an offset copied from a progress report
    if not isinstance(body, dict):
        raise bad()
    out: dict[tuple[int, int], int] = {}
    for key, value in body.items():
        ref = parse_key(key, default_scope, option)
        if value == DONE:
            value = KAFKA_LATEST  # a closed ledger read to its end: its latest position
        if not is_int(value) or (value < 0 and value not in markers):
            raise bad()
        out[ref] = value
    return out


def parse_starting_offsets(text: str | None, default_scope: int) -> dict[str, Any]:
    """``earliest`` (default), ``latest`` or JSON ``{"<ledger>": nextEntryId, ...}`` -> the initial offset of a
    stream; in JSON, ``-2`` is the ledger's earliest entry (0) and ``-1`` its latest (:data:`LATEST_ENTRY`)."""
    raw = (text or "earliest").strip()
    if raw.lower() == "earliest":
        return canonical({})
    if raw.lower() == "latest":
        return dict(LATEST)
    fix = (
        "expected 'earliest', 'latest' or JSON such as {\"7\": 0, \"0:9\": 120} "
        "(ledger id or 'scope:ledger' -> the first entry id to read; -2 earliest, -1 latest)"
    )
    parsed = parse_offsets_json(
        raw, "startingOffsets", default_scope, markers={KAFKA_LATEST: "latest", KAFKA_EARLIEST: "earliest"}, fix=fix
    )
    ledgers: dict[str, Position] = {}
    for (scope, ledger), value in parsed.items():
        ledgers[ledger_key(scope, ledger)] = (
            LATEST_ENTRY if value == KAFKA_LATEST else 0 if value == KAFKA_EARLIEST else value
        )
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

    With a limit, the entries available are admitted in proportion to what each ledger has waiting, as Kafka's
    source splits ``maxOffsetsPerTrigger`` across partitions (:func:`_shares`); at least one entry is admitted
    when any is available (so a batch always progresses).  ``start`` may be :data:`LATEST`: every ledger then
    ends where it is now; so does a ledger whose start is :data:`LATEST_ENTRY`.  A lost ledger (metadata gone
    before it was read to its end) is marked :data:`DONE` here; the caller decides whether that fails the query.
    """
    latest = bool(start.get("latest"))
    begin = positions_of(start)
    end: dict[str, Position] = dict(begin)
    lost: list[str] = []
    waiting: list[tuple[LedgerPosition, int, int]] = []  # (position, first entry, entries available)
    for pos in sorted(positions, key=lambda p: parse_key(p.key)):
        first = begin.get(pos.key, start_entry)
        if first == DONE:
            end[pos.key] = DONE
            continue
        if pos.missing:
            lost.append(pos.key)
            end[pos.key] = DONE
            continue
        if latest or first == LATEST_ENTRY:
            end[pos.key] = DONE if pos.closed else pos.available
            continue
        assert isinstance(first, int)
        waiting.append((pos, first, max(0, pos.available - first)))
    for (pos, first, _room), grant in zip(waiting, _shares(waiting, admission)):
        stop = first + grant
        end[pos.key] = DONE if pos.closed and stop >= pos.available else stop
    return canonical(end), lost


def _shares(waiting: list[tuple[LedgerPosition, int, int]], admission: Admission) -> list[int]:
    """Entries admitted from each ledger: everything within the limits; else each ledger's share of the rows
    limit in proportion to its entries waiting, then of the bytes limit in proportion to its bytes waiting
    (rounded down, the remainder given one entry each to the largest fractions, ties in key order, so the
    total is exactly the limit), and never less than one entry in all when any is waiting."""
    grants = [room for _pos, _first, room in waiting]
    if admission.max_rows is not None:
        grants = _prorate(grants, [float(g) for g in grants], admission.max_rows)
    if admission.max_bytes is not None:
        sizes = [max(pos.entry_size, 1.0) for pos, _first, _room in waiting]
        weights = [g * size for g, size in zip(grants, sizes)]
        if sum(weights) > admission.max_bytes:
            budget = [admission.max_bytes * w / sum(weights) for w in weights]
            grants = [min(g, int(b // size)) for g, b, size in zip(grants, budget, sizes)]
    if grants and sum(grants) == 0:
        for index, (_pos, _first, room) in enumerate(waiting):
            if room > 0:
                grants[index] = 1
                break
    return grants


def _prorate(rooms: list[int], weights: list[float], limit: int) -> list[int]:
    """``limit`` entries split over ``rooms`` in proportion to ``weights`` (largest remainders), each at most its room."""
    total = sum(weights)
    if sum(rooms) <= limit or total <= 0:
        return list(rooms)
    exact = [limit * w / total for w in weights]
    grants = [min(room, math.floor(x)) for room, x in zip(rooms, exact)]
    left = limit - sum(grants)
    order = sorted(range(len(rooms)), key=lambda i: (-(exact[i] - math.floor(exact[i])), i))
    for i in order:
        if left <= 0:
            break
        if grants[i] < rooms[i]:
            grants[i] += 1
            left -= 1
    return grants


def _behind(end: Mapping[str, Any], positions: Iterable[LedgerPosition], start_entry: int) -> list[tuple[int, float]]:
    """``(entries, entry size)`` of every followed ledger still being read: how far ``end`` is behind it."""
    done = positions_of(end)
    out: list[tuple[int, float]] = []
    for pos in positions:
        if pos.missing:
            continue
        at = done.get(pos.key, start_entry)
        if at == DONE:
            continue
        if at == LATEST_ENTRY:
            at = pos.available
        out.append((max(0, pos.available - int(at)), pos.entry_size))
    return out


def lag(end: Mapping[str, Any], positions: Iterable[LedgerPosition], start_entry: int) -> tuple[int, int]:
    """``(entries, estimated bytes)`` confirmed in the ledgers but beyond ``end``."""
    behind = _behind(end, positions, start_entry)
    return sum(n for n, _ in behind), int(sum(n * size for n, size in behind))


def lag_per_ledger(end: Mapping[str, Any], positions: Iterable[LedgerPosition], start_entry: int) -> dict[str, Any]:
    """Kafka's per-partition lag figures over the ledgers still being read: ``minOffsetsBehindLatest``,
    ``maxOffsetsBehindLatest`` and ``avgOffsetsBehindLatest`` (entries; 0 when no ledger is being read)."""
    counts = [n for n, _ in _behind(end, positions, start_entry)]
    return {
        "minOffsetsBehindLatest": min(counts, default=0),
        "maxOffsetsBehindLatest": max(counts, default=0),
        "avgOffsetsBehindLatest": round(sum(counts) / len(counts), 1) if counts else 0.0,
    }
