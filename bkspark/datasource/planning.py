"""Turning options, pushed filters and ledger metadata into Spark partitions.

Pure functions: no client, no Spark session.  Entry ids are dense (0..last),
so every split is exact, and every filter we accept on ``scope_id``,
``ledger_id`` or ``entry_id`` becomes an exact bound: Spark drops accepted
filters from its plan, so what we accept we must apply completely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from pyspark.sql.datasource import InputPartition

from bkspark.protocol.values import INT64_MAX, INT64_MIN

__all__ = ["LedgerSlice", "Bounds", "push_filters", "split_ledger", "PUSHABLE_COLUMNS"]

PUSHABLE_COLUMNS = ("scope_id", "ledger_id", "entry_id")
#: The smallest value of each pushable column: scope ids are signed 64-bit, ledger and entry ids never negative.
_LOWEST = {"scope_id": INT64_MIN, "ledger_id": 0, "entry_id": 0}


@dataclass(frozen=True)
class LedgerSlice(InputPartition):
    """One Spark partition: entries ``first_entry..last_entry`` of one ledger.

    Carries everything ``read()`` needs, including the ledger-level columns, so
    the executor never re-plans.  ``recovery`` is never used by reads: closed
    ledgers are read as they are, open ledgers up to the LAC seen at planning.
    """

    scope_id: int
    ledger_id: int
    first_entry: int
    last_entry: int
    ctime_ms: int | None = None
    custom_metadata: tuple[tuple[str, bytes], ...] = ()
    ledger_open: bool = False

    @property
    def entry_count(self) -> int:
        return self.last_entry - self.first_entry + 1


@dataclass
class Bounds:
    """Inclusive bounds (and optional value sets) for the pushable columns."""

    low: dict[str, int] = field(default_factory=lambda: dict(_LOWEST))
    high: dict[str, int] = field(default_factory=lambda: {c: INT64_MAX for c in PUSHABLE_COLUMNS})
    values: dict[str, frozenset[int]] = field(default_factory=dict)

    def admits(self, column: str, value: int) -> bool:
        if not self.low[column] <= value <= self.high[column]:
            return False
        allowed = self.values.get(column)
        return allowed is None or value in allowed

    def entry_range(self, first: int, last: int) -> tuple[int, int] | None:
        """Clamp an entry range to the entry_id bounds; None when nothing is left."""
        allowed = self.values.get("entry_id")
        lo = max(first, self.low["entry_id"])
        hi = min(last, self.high["entry_id"])
        if allowed is not None:
            inside = sorted(v for v in allowed if lo <= v <= hi)
            if not inside:
                return None
            lo, hi = inside[0], inside[-1]
        return (lo, hi) if lo <= hi else None

    def entry_runs(self, first: int, last: int) -> list[tuple[int, int]]:
        """The contiguous entry-id runs inside ``first..last`` that the bounds admit."""
        clamped = self.entry_range(first, last)
        if clamped is None:
            return []
        lo, hi = clamped
        allowed = self.values.get("entry_id")
        if allowed is None:
            return [(lo, hi)]
        runs: list[tuple[int, int]] = []
        for value in sorted(v for v in allowed if lo <= v <= hi):
            if runs and value == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], value)
            else:
                runs.append((value, value))
        return runs


def _column(filter_: Any) -> str | None:
    attribute = getattr(filter_, "attribute", None)
    if isinstance(attribute, tuple) and len(attribute) == 1 and attribute[0] in PUSHABLE_COLUMNS:
        return attribute[0]
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def push_filters(filters: Iterable[Any], bounds: Bounds) -> list[Any]:
    """Fold the filters we can apply exactly into ``bounds``; return the others (by identity)."""
    from pyspark.sql.datasource import (
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
    )

    rejected: list[Any] = []
    for f in filters:
        column = _column(f)
        value = getattr(f, "value", None)
        if column is None:
            rejected.append(f)
        elif isinstance(f, EqualTo) and _is_int(value):
            bounds.low[column] = max(bounds.low[column], value)
            bounds.high[column] = min(bounds.high[column], value)
        elif isinstance(f, GreaterThan) and _is_int(value):
            bounds.low[column] = max(bounds.low[column], value + 1)
        elif isinstance(f, GreaterThanOrEqual) and _is_int(value):
            bounds.low[column] = max(bounds.low[column], value)
        elif isinstance(f, LessThan) and _is_int(value):
            bounds.high[column] = min(bounds.high[column], value - 1)
        elif isinstance(f, LessThanOrEqual) and _is_int(value):
            bounds.high[column] = min(bounds.high[column], value)
        elif isinstance(f, In) and isinstance(value, (list, tuple)) and all(_is_int(v) for v in value):
            chosen = frozenset(value)
            previous = bounds.values.get(column)
            bounds.values[column] = chosen if previous is None else previous & chosen
        else:
            rejected.append(f)
    return rejected


def split_ledger(
    scope_id: int,
    ledger_id: int,
    first_entry: int,
    last_entry: int,
    max_entries_per_partition: int,
    *,
    ctime_ms: int | None = None,
    custom_metadata: Sequence[tuple[str, bytes]] = (),
    ledger_open: bool = False,
) -> list[LedgerSlice]:
    """Cut ``first_entry..last_entry`` into slices of at most ``max_entries_per_partition`` entries."""
    slices = []
    start = first_entry
    while start <= last_entry:
        end = min(last_entry, start + max_entries_per_partition - 1)
        slices.append(
            LedgerSlice(
                scope_id=scope_id,
                ledger_id=ledger_id,
                first_entry=start,
                last_entry=end,
                ctime_ms=ctime_ms,
                custom_metadata=tuple(custom_metadata),
                ledger_open=ledger_open,
            )
        )
        start = end + 1
    return slices
