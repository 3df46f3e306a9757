"""Packing ledger slices into Spark partitions (``plan_partitions``): no Spark session, no servers.

The rules are docs/connector.md's "Partitions": slices of at most ``maxEntriesPerPartition`` entries, small
neighbours packed together (each slice costing its entries plus ``SLICE_OPEN_COST_ENTRIES``), ``minPartitions``
splitting, ``maxPartitions`` spreading.
"""

from __future__ import annotations

import pickle
import random

import pytest

from bkspark.datasource.options import parse_read_options
from bkspark.datasource.planning import (
    SLICE_OPEN_COST_ENTRIES,
    LedgerSlice,
    SliceGroup,
    partition_slices,
    plan_partitions,
    split_ledger,
)

URI = "zk+hierarchical://127.0.0.1:2181/ledgers"


def ledgers(*lengths: int, max_entries: int = 100_000) -> list[LedgerSlice]:
    """Slices of ledgers 1, 2, ... with the given entry counts, as the planner cuts them."""
    slices: list[LedgerSlice] = []
    for index, length in enumerate(lengths):
        slices.extend(split_ledger(0, index + 1, 0, length - 1, max_entries))
    return slices


def entries_read(parts: list) -> list[tuple[int, int]]:
    """Every (ledger, entry) the partitions read, in the order they read them."""
    return [
        (piece.ledger_id, entry)
        for part in parts
        for piece in partition_slices(part)
        for entry in range(piece.first_entry, piece.last_entry + 1)
    ]


def runs_read(parts: list) -> list[tuple[int, int, int]]:
    """The (ledger, first, last) runs the partitions read, in order, neighbouring pieces of a ledger merged:
    equal for two plans exactly when they read the same entries in the same order (cheap for big ledgers)."""
    runs: list[tuple[int, int, int]] = []
    for part in parts:
        for piece in partition_slices(part):
            if runs and runs[-1][0] == piece.ledger_id and runs[-1][2] + 1 == piece.first_entry:
                runs[-1] = (piece.ledger_id, runs[-1][1], piece.last_entry)
            else:
                runs.append((piece.ledger_id, piece.first_entry, piece.last_entry))
    return runs


def test_thousands_of_one_entry_ledgers_become_a_few_dozen_partitions() -> None:
    slices = ledgers(*[1] * 2000)
    parts = plan_partitions(slices, 100_000)
    per_group = (100_000 + SLICE_OPEN_COST_ENTRIES) // (1 + SLICE_OPEN_COST_ENTRIES)
    assert per_group == 100 and len(parts) == 2000 // per_group == 20
    assert all(isinstance(p, SliceGroup) for p in parts)
    assert entries_read(parts) == entries_read(slices)


def test_full_slices_stay_alone_and_one_slice_is_not_wrapped() -> None:
    slices = ledgers(250_000, 1)
    parts = plan_partitions(slices, 100_000)
    # 100,000 + 100,000 + 50,000 (+ the one-entry ledger packed beside the 50,000 piece)
    assert [type(p).__name__ for p in parts] == ["LedgerSlice", "LedgerSlice", "SliceGroup"]
    assert [partition_slices(p)[-1].ledger_id for p in parts] == [1, 1, 2]
    assert entries_read(parts) == entries_read(slices)


def test_ledgers_of_40000_entries_go_two_to_a_partition() -> None:
    """docs/connector.md's example: 2 x 41,000 of cost fits 101,000, 3 x 41,000 does not."""
    parts = plan_partitions(ledgers(40_000, 40_000, 40_000), 100_000)
    assert [len(partition_slices(p)) for p in parts] == [2, 1]


def test_no_partition_holds_more_than_max_entries_without_max_partitions() -> None:
    rng = random.Random(7)
    lengths = [rng.choice([1, 3, 40, 900, 5_000, 12_000]) for _ in range(500)]
    slices = ledgers(*lengths, max_entries=10_000)
    parts = plan_partitions(slices, 10_000)
    assert all(sum(s.entry_count for s in partition_slices(p)) <= 10_000 for p in parts)
    assert entries_read(parts) == entries_read(slices)
    assert len(parts) < len(slices)


def test_min_partitions_splits_large_slices_like_kafkas_min_partitions() -> None:
    slices = ledgers(1000, 10)
    parts = plan_partitions(slices, 100_000, min_partitions=8)
    assert len(parts) >= 8
    assert all(isinstance(p, LedgerSlice) for p in parts)
    assert entries_read(parts) == entries_read(slices)
    # the split stops at one entry per slice
    assert len(plan_partitions(ledgers(2, 1), 100_000, min_partitions=50)) == 3


def test_min_partitions_halves_the_largest_slices_first_and_keeps_their_order() -> None:
    """docs/connector.md, "Partitions" step 1: the largest slices are halved until there are minPartitions, as
    Kafka's source splits the largest offset ranges: small slices stay whole while a larger one can be halved."""
    slices = ledgers(10, 1000, 300)
    sizes = [[s.entry_count for s in partition_slices(p)] for p in plan_partitions(slices, 100_000, min_partitions=4)]
    assert sizes == [[10], [500], [500], [300]]
    sizes = [[s.entry_count for s in partition_slices(p)] for p in plan_partitions(slices, 100_000, min_partitions=6)]
    assert sizes == [[10], [250], [250], [250], [250], [300]]


def test_min_partitions_stops_packing_below_it() -> None:
    slices = ledgers(*[1] * 100)
    assert len(plan_partitions(slices, 100_000)) == 1
    parts = plan_partitions(slices, 100_000, min_partitions=10)
    assert len(parts) >= 10
    assert entries_read(parts) == entries_read(slices)
    # minPartitions = the number of slices: one partition per slice, as before packing existed (docs/connector.md)
    assert plan_partitions(slices, 100_000, min_partitions=100) == slices


def test_max_partitions_spreads_over_exactly_that_many() -> None:
    slices = ledgers(*[50_000] * 10)
    assert len(plan_partitions(slices, 100_000)) == 10  # 2 do not fit one partition's cost
    parts = plan_partitions(slices, 100_000, max_partitions=3)
    assert len(parts) == 3
    assert entries_read(parts) == entries_read(slices)
    sizes = [sum(s.entry_count for s in partition_slices(p)) for p in parts]
    assert max(sizes) - min(sizes) <= 50_000  # about equal: never more than one slice apart


def test_max_partitions_gives_exactly_that_many_when_a_slice_costs_more_than_a_share() -> None:
    """docs/connector.md, "Partitions" step 3: "exactly that many partitions". A full slice costs more than a
    third of these four ledgers, and an equal-cost spread that left its shares empty gave 2 partitions, not 3."""
    slices = ledgers(1, 100_000, 1, 100_000)
    assert len(plan_partitions(slices, 100_000)) == 4
    parts = plan_partitions(slices, 100_000, max_partitions=3)
    assert len(parts) == 3
    assert entries_read(parts) == entries_read(slices)
    rng = random.Random(3)
    for _ in range(300):
        lengths = [rng.choice([1, 2, 5_000, 2_501, rng.randint(1, 5_000)]) for _ in range(rng.randint(2, 12))]
        slices = ledgers(*lengths, max_entries=5_000)
        packed = len(plan_partitions(slices, 5_000))
        for count in range(1, packed):
            parts = plan_partitions(slices, 5_000, max_partitions=count)
            assert len(parts) == count, (lengths, count)
            assert runs_read(parts) == runs_read(slices)


def test_every_rule_together_reads_every_entry_once_in_order() -> None:
    rng = random.Random(11)
    for _ in range(100):
        max_entries = rng.choice([3, 100, 5_000])
        lengths = [rng.randint(1, 20_000) if rng.random() < 0.2 else rng.randint(1, 30) for _ in range(rng.randint(1, 60))]
        slices = ledgers(*lengths, max_entries=max_entries)
        low = rng.choice([None, 1, 5, 200])
        high = rng.choice([None, 1, 3, 400])
        if low and high and low > high:
            low, high = high, low
        parts = plan_partitions(slices, max_entries, min_partitions=low, max_partitions=high)
        assert runs_read(parts) == runs_read(slices)
        if high is not None:
            assert len(parts) <= high
        if low is not None and sum(lengths) >= low and (high is None or high >= low):
            assert len(parts) >= low
        assert all(piece.entry_count <= max_entries for p in parts for piece in partition_slices(p))


def test_groups_pickle_and_the_options_reach_the_plan() -> None:
    group = plan_partitions(ledgers(1, 1, 1), 100_000)[0]
    assert isinstance(group, SliceGroup) and pickle.loads(pickle.dumps(group)) == group
    assert group.entry_count == 3
    opts = parse_read_options({"metadataserviceuri": URI, "ledgers": "1", "minpartitions": "4", "maxpartitions": "9"})
    assert (opts.min_partitions, opts.max_partitions) == (4, 9)
    assert parse_read_options({"metadataserviceuri": URI, "ledgers": "1"}).min_partitions is None
    assert partition_slices(None) == ()


def sized(lengths_and_sizes: list[tuple[int, float | None]], max_entries: int = 100_000,
          max_bytes: int | None = None) -> list[LedgerSlice]:
    """Slices of ledgers 1, 2, ... of (entries, mean entry bytes), cut by entries and by estimated bytes."""
    slices: list[LedgerSlice] = []
    for index, (length, entry_bytes) in enumerate(lengths_and_sizes):
        slices.extend(split_ledger(0, index + 1, 0, length - 1, max_entries, entry_bytes=entry_bytes,
                                   max_bytes_per_partition=max_bytes))
    return slices


def test_large_entries_are_cut_and_packed_by_bytes_too() -> None:
    """Ledgers of packed rows (16 KiB entries) are few entries but many bytes: a 128 MiB bound cuts and packs
    them as Spark cuts files, where counting entries alone put 1.6 GB into one task."""
    mib = 1024 * 1024
    # one ledger of 100,000 entries of 16 KiB: 13 slices of at most 8,192 entries (128 MiB) instead of one
    big = sized([(100_000, 16384.0)], max_bytes=128 * mib)
    assert [s.entry_count for s in big] == [8192] * 12 + [100_000 - 12 * 8192]
    assert max(s.byte_count for s in big) <= 128 * mib
    assert len(plan_partitions(big, 100_000, max_bytes_per_partition=128 * mib)) == 13
    # two ledgers of 3,400 such entries (53 MiB each): packed together under 128 MiB, apart under 64 MiB
    two = sized([(3_400, 16384.0), (3_400, 16384.0)], max_bytes=128 * mib)
    assert len(plan_partitions(two, 500_000, max_bytes_per_partition=128 * mib)) == 1
    assert len(plan_partitions(two, 500_000, max_bytes_per_partition=64 * mib)) == 2
    assert len(plan_partitions(two, 500_000)) == 1  # without a byte bound: entries only, as before
    # small entries are untouched: 40,000 entries of 100 B still go two to a partition
    small = sized([(40_000, 100.0), (40_000, 100.0)], max_bytes=128 * mib)
    assert len(plan_partitions(small, 100_000, max_bytes_per_partition=128 * mib)) == 1
    # an open ledger's size is unknown (None): cut and packed by entries alone
    opened = sized([(200_000, None)], max_bytes=1024)
    assert [s.entry_count for s in opened] == [100_000, 100_000] and opened[0].byte_count == 0
    # an entry larger than the bound is a slice of its own, never an empty one
    huge = sized([(3, 10 * mib)], max_bytes=mib)
    assert [s.entry_count for s in huge] == [1, 1, 1]


def test_byte_bounds_keep_every_entry_once_in_order() -> None:
    rng = random.Random(5)
    for _ in range(100):
        max_entries = rng.choice([3, 100, 5_000])
        max_bytes = rng.choice([1, 1000, 50_000, 10**9])
        spec = [(rng.randint(1, 3_000), rng.choice([None, 0.0, 10.0, 700.0, 16384.0])) for _ in range(rng.randint(1, 40))]
        slices = sized(spec, max_entries=max_entries, max_bytes=max_bytes)
        parts = plan_partitions(slices, max_entries, min_partitions=rng.choice([None, 4]),
                                max_bytes_per_partition=max_bytes)
        assert runs_read(parts) == runs_read(ledgers(*[n for n, _ in spec], max_entries=max_entries))
        for part in parts:
            pieces = partition_slices(part)
            # a packed partition stays within the byte bound; only a lone slice of one entry may pass it
            assert len(pieces) == 1 or sum(p.byte_count for p in pieces) <= max_bytes
            assert all(p.byte_count <= max_bytes or p.entry_count == 1 for p in pieces)


def test_mean_entry_bytes_of_closed_open_and_empty_ledgers() -> None:
    from types import SimpleNamespace

    from bkspark.datasource.planning import mean_entry_bytes

    closed = SimpleNamespace(name="CLOSED")
    opened = SimpleNamespace(name="OPEN")
    assert mean_entry_bytes(SimpleNamespace(state=closed, last_entry_id=9, length=1000)) == 100.0
    assert mean_entry_bytes(SimpleNamespace(state=closed, last_entry_id=-1, length=0)) is None
    assert mean_entry_bytes(SimpleNamespace(state=opened, last_entry_id=-1, length=0)) is None
    opts = parse_read_options({"metadataserviceuri": URI, "ledgers": "1"})
    assert opts.max_bytes_per_partition == 128 * 1024 * 1024  # Spark's maxPartitionBytes default
    assert parse_read_options({"metadataserviceuri": URI, "ledgers": "1", "maxbytesperpartition": "4096"}).max_bytes_per_partition == 4096
    with pytest.raises(Exception, match="maxBytesPerPartition"):
        parse_read_options({"metadataserviceuri": URI, "ledgers": "1", "maxbytesperpartition": "0"})


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="max_entries_per_partition"):
        plan_partitions([], 0)
    with pytest.raises(ValueError, match="min_partitions"):
        plan_partitions([], 10, min_partitions=5, max_partitions=2)
    assert plan_partitions([], 10) == []
    # a slice costs its entries plus the open cost: with a small maxEntriesPerPartition nothing is packed
    assert len(plan_partitions(ledgers(1, 1, 1), 100)) == 3
