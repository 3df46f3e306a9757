"""Turning options, pushed filters and ledger metadata into Spark partitions.

Pure functions: no client, no Spark session.  Entry ids are dense (0..last),
so every split is exact, and every filter we accept on ``scope_id``,
``ledger_id`` or ``entry_id`` becomes an exact bound: Spark drops accepted
filters from its plan, so what we accept we must apply completely.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

from pyspark.sql.datasource import InputPartition

from bkspark.config.typed import is_int
from bkspark.protocol.values import INT64_MAX, INT64_MIN

__all__ = [
    "LedgerSlice",
    "SliceGroup",
    "Bounds",
    "push_filters",
    "split_ledger",
    "mean_entry_bytes",
    "plan_partitions",
    "partition_slices",
    "PUSHABLE_COLUMNS",
    "ctime_admitted",
    "timestamp_micros",
    "SLICE_OPEN_COST_ENTRIES",
]

PUSHABLE_COLUMNS = ("scope_id", "ledger_id", "entry_id", "ledger_ctime")
#: The smallest value of each pushable column: scope ids are signed 64-bit, ledger and entry ids never negative;
#: ``ledger_ctime`` is held as microseconds since the epoch (Spark's own timestamp unit), any sign.
_LOWEST = {"scope_id": INT64_MIN, "ledger_id": 0, "entry_id": 0, "ledger_ctime": INT64_MIN}


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
    #: The ledger's mean entry size in bytes (a closed ledger's length over its entries), for planning only;
    #: None when unknown (an open ledger's metadata has no length yet).
    entry_bytes: float | None = None

    @property
    def entry_count(self) -> int:
        return self.last_entry - self.first_entry + 1

    @property
    def byte_count(self) -> int:
        """The slice's estimated payload bytes (0 when its ledger's entry size is unknown)."""
        return int(self.entry_count * self.entry_bytes) if self.entry_bytes else 0


@dataclass(frozen=True)
class SliceGroup(InputPartition):
    """One Spark partition made of several small slices, read one after the other by one task.

    Small ledgers are packed together (:func:`plan_partitions`) so that a dataset of thousands of one-entry
    ledgers runs a few dozen tasks, not thousands (docs/connector.md, "Partitions").
    """

    slices: tuple[LedgerSlice, ...]

    @property
    def entry_count(self) -> int:
        return sum(s.entry_count for s in self.slices)


def partition_slices(partition: Any) -> tuple[LedgerSlice, ...]:
    """The slices a partition reads: one for a :class:`LedgerSlice`, several for a group, none otherwise
    (Spark turns an empty plan into one ``InputPartition(None)``)."""
    if isinstance(partition, LedgerSlice):
        return (partition,)
    if isinstance(partition, SliceGroup):
        return partition.slices
    return ()


@dataclass
class Bounds:
    """Inclusive bounds (and optional value sets) for the pushable columns."""

    low: dict[str, int] = field(default_factory=lambda: dict(_LOWEST))
    high: dict[str, int] = field(default_factory=lambda: {c: INT64_MAX for c in PUSHABLE_COLUMNS})
    values: dict[str, frozenset[int]] = field(default_factory=dict)

    def admits(self, column: str, value: int | None) -> bool:
        """Whether ``value`` passes the bounds; a null (a ledger without a creation time) passes no filter on
        its column, as in SQL."""
        if value is None:
            return self.low[column] == _LOWEST[column] and self.high[column] == INT64_MAX and column not in self.values
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


def timestamp_micros(value: Any) -> int | None:
    """A pushed timestamp literal (PySpark hands a time-zone-aware ``datetime``) as microseconds since the
    epoch, exactly; None for anything else (the filter is then left to Spark)."""
    from datetime import datetime, timedelta, timezone

    if not isinstance(value, datetime) or value.tzinfo is None:
        return None
    return (value - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)


def _literal(column: str, value: Any) -> Any:
    """The filter's value in the unit :class:`Bounds` keeps for ``column`` (None: not one we apply)."""
    if column == "ledger_ctime":
        if isinstance(value, (list, tuple)):
            converted = [timestamp_micros(v) for v in value]
            return None if any(v is None for v in converted) else converted
        return timestamp_micros(value)
    return value


def ctime_admitted(ctime_ms: int | None, starting_ms: int | None, ending_ms: int | None) -> bool:
    """Whether a ledger created at ``ctime_ms`` is within ``startingTimestamp`` (inclusive) and
    ``endingTimestamp`` (exclusive), as Kafka's bounds are; a ledger with no creation time is within no bound."""
    if starting_ms is None and ending_ms is None:
        return True
    if ctime_ms is None:
        return False
    return (starting_ms is None or ctime_ms >= starting_ms) and (ending_ms is None or ctime_ms < ending_ms)


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
        value = _literal(column, getattr(f, "value", None)) if column else None
        if column is None:
            rejected.append(f)
        elif isinstance(f, EqualTo) and is_int(value):
            bounds.low[column] = max(bounds.low[column], value)
            bounds.high[column] = min(bounds.high[column], value)
        elif isinstance(f, GreaterThan) and is_int(value):
            bounds.low[column] = max(bounds.low[column], value + 1)
        elif isinstance(f, GreaterThanOrEqual) and is_int(value):
            bounds.low[column] = max(bounds.low[column], value)
        elif isinstance(f, LessThan) and is_int(value):
            bounds.high[column] = min(bounds.high[column], value - 1)
        elif isinstance(f, LessThanOrEqual) and is_int(value):
            bounds.high[column] = min(bounds.high[column], value)
        elif isinstance(f, In) and isinstance(value, (list, tuple)) and all(is_int(v) for v in value):
            chosen = frozenset(value)
            previous = bounds.values.get(column)
            bounds.values[column] = chosen if previous is None else previous & chosen
        else:
            rejected.append(f)
    return rejected


def mean_entry_bytes(md: Any) -> float | None:
    """A closed ledger's mean entry size in bytes (its metadata's length counts the payloads); None for an open
    ledger, whose length is not known yet, or one without entries."""
    if md.state.name != "CLOSED" or md.last_entry_id is None or md.last_entry_id < 0:
        return None
    return md.length / (md.last_entry_id + 1)


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
    entry_bytes: float | None = None,
    max_bytes_per_partition: int | None = None,
) -> list[LedgerSlice]:
    """Cut ``first_entry..last_entry`` into slices of at most ``max_entries_per_partition`` entries and, when the
    ledger's mean entry size ``entry_bytes`` is known, of at most ``max_bytes_per_partition`` estimated bytes
    (never less than one entry)."""
    step = max_entries_per_partition
    if max_bytes_per_partition is not None and entry_bytes:
        step = max(1, min(step, int(max_bytes_per_partition // entry_bytes)))
    slices = []
    start = first_entry
    while start <= last_entry:
        end = min(last_entry, start + step - 1)
        slices.append(
            LedgerSlice(
                scope_id=scope_id,
                ledger_id=ledger_id,
                first_entry=start,
                last_entry=end,
                ctime_ms=ctime_ms,
                custom_metadata=tuple(custom_metadata),
                ledger_open=ledger_open,
                entry_bytes=entry_bytes,
            )
        )
        start = end + 1
    return slices


#: What opening one more ledger costs a task, counted in entries, when slices are packed into partitions: a
#: ZooKeeper read of the ledger's metadata and the first request to its bookies take about as long as reading
#: this many 100-byte entries with batched reads (Spark's ``openCostInBytes`` plays this part for files).
SLICE_OPEN_COST_ENTRIES = 1_000


def plan_partitions(
    slices: Sequence[LedgerSlice],
    max_entries_per_partition: int,
    *,
    min_partitions: int | None = None,
    max_partitions: int | None = None,
    max_bytes_per_partition: int | None = None,
) -> list[InputPartition]:
    """Turn slices (each at most ``max_entries_per_partition`` entries, in planning order) into Spark partitions.

    1. With ``min_partitions``, the largest slices are halved until there are at least that many (or every slice
       holds one entry), as Kafka's source splits offset ranges for its ``minPartitions``.
    2. Neighbouring slices are packed into one partition while it stays within ``max_entries_per_partition``
       entries, within ``max_bytes_per_partition`` estimated bytes (:attr:`LedgerSlice.byte_count`) and within
       ``max_entries_per_partition + SLICE_OPEN_COST_ENTRIES`` of cost (each slice costs its entries plus
       :data:`SLICE_OPEN_COST_ENTRIES`), never leaving fewer than ``min_partitions`` partitions.
    3. With ``max_partitions``, if there are still more partitions than that, the slices are spread over exactly
       that many partitions of about equal cost (such a partition may then exceed ``max_entries_per_partition``;
       no single slice does).

    Order is kept: a partition holds consecutive slices, so the rows of a partition come ledger by ledger.
    A partition of one slice is the :class:`LedgerSlice` itself; of several, a :class:`SliceGroup`.
    """
    if max_entries_per_partition < 1:
        raise ValueError(f"max_entries_per_partition must be >= 1, not {max_entries_per_partition}")
    if min_partitions is not None and max_partitions is not None and min_partitions > max_partitions:
        raise ValueError(f"min_partitions ({min_partitions}) must not exceed max_partitions ({max_partitions})")
    pieces = list(slices)
    least = min_partitions or 1
    if len(pieces) < least:
        pieces = _split_until(pieces, least)
    groups = _pack(pieces, max_entries_per_partition, least, max_bytes_per_partition)
    if max_partitions is not None and len(groups) > max_partitions:
        groups = _spread(pieces, max_partitions)
    return [group[0] if len(group) == 1 else SliceGroup(tuple(group)) for group in groups]


def _halves(piece: LedgerSlice) -> tuple[LedgerSlice, LedgerSlice]:
    middle = piece.first_entry + piece.entry_count // 2
    return replace(piece, last_entry=middle - 1), replace(piece, first_entry=middle)


def _split_until(pieces: list[LedgerSlice], wanted: int) -> list[LedgerSlice]:
    """Halve the largest slice until there are ``wanted`` slices or none has two entries; order kept."""
    heap = [(-p.entry_count, position, p.first_entry, p) for position, p in enumerate(pieces)]
    heapq.heapify(heap)
    while len(heap) < wanted and heap and -heap[0][0] > 1:
        _, position, _, piece = heapq.heappop(heap)
        for half in _halves(piece):
            heapq.heappush(heap, (-half.entry_count, position, half.first_entry, half))
    return [item[3] for item in sorted(heap, key=lambda item: (item[1], item[2]))]


def _cost(piece: LedgerSlice) -> int:
    return piece.entry_count + SLICE_OPEN_COST_ENTRIES


def _pack(
    pieces: list[LedgerSlice], max_entries: int, least: int, max_bytes: int | None
) -> list[list[LedgerSlice]]:
    """Next-fit packing of consecutive slices (step 2 of :func:`plan_partitions`)."""
    target = max_entries + SLICE_OPEN_COST_ENTRIES
    if least > 1:
        target = min(target, max(1, sum(_cost(p) for p in pieces) // least))
    groups: list[list[LedgerSlice]] = []
    current: list[LedgerSlice] = []
    cost = entries = nbytes = 0
    for index, piece in enumerate(pieces):
        left_after = len(pieces) - index - 1
        fits = (
            current
            and cost + _cost(piece) <= target
            and entries + piece.entry_count <= max_entries
            and (max_bytes is None or nbytes + piece.byte_count <= max_bytes)
            and len(groups) + 1 + left_after >= least
        )
        if fits:
            current.append(piece)
            cost += _cost(piece)
            entries += piece.entry_count
            nbytes += piece.byte_count
            continue
        if current:
            groups.append(current)
        current, cost, entries, nbytes = [piece], _cost(piece), piece.entry_count, piece.byte_count
    if current:
        groups.append(current)
    return groups


def _spread(pieces: list[LedgerSlice], count: int) -> list[list[LedgerSlice]]:
    """Consecutive slices over ``count`` partitions of about equal cost (step 3 of :func:`plan_partitions`)."""
    total = sum(_cost(p) for p in pieces)
    groups: list[list[LedgerSlice]] = []
    before = 0
    for index, piece in enumerate(pieces):
        share = min(count - 1, before * count // total)  # the equal-cost share the piece starts in
        left = len(pieces) - index  # this piece and those after it
        # a new partition where the piece's share begins one, and wherever the pieces left are just enough to
        # give every partition still empty one: a slice costlier than a share spans several shares, and
        # leaving them empty would give fewer partitions than asked
        if not groups or (len(groups) < count and (share >= len(groups) or count - len(groups) >= left)):
            groups.append([])
        groups[-1].append(piece)
        before += _cost(piece)
    return groups
