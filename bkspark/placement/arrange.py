"""Find an ensemble layout whose every write quorum meets the placement rules.

BookKeeper's Java policies pick bookies greedily, position by position, and
give up (or fall back to random) when the greedy walk gets stuck, even if a
valid ensemble exists.  Here the same position-by-position walk backtracks, so
"not enough bookies" is raised only when no valid ensemble exists.

The search works on racks, not bookies: which bookie of a rack sits at a
position does not change any rule, so bookies are drawn (at random) from the
chosen racks afterwards.  A write quorum is the window of ``write_quorum``
consecutive positions starting at each index, wrapping around the ensemble
(``RoundRobinDistributionSchedule``).

Rules checked on every window:

* at least ``min_racks`` distinct racks;
* durability (region-aware): no ``min_regions - 1`` regions together hold
  ``ack_quorum`` or more of the window's bookies, so losing those regions
  never takes a whole ack quorum with it (``RackOrRegionDurabilityCoverageSet``);
* optionally, an exact number of bookies per region (region shares).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "Layout",
    "LayoutProblem",
    "find_layout",
    "windows",
    "window_ok",
    "max_per_rack",
    "max_per_region",
    "coverage_bound",
]

#: Search nodes visited before the search gives up and reports "no layout".
DEFAULT_BUDGET = 50_000


def windows(ensemble_size: int, write_quorum: int) -> list[list[int]]:
    """The distinct write quorums (as position lists) of a round-robin ensemble."""
    if write_quorum >= ensemble_size:
        return [list(range(ensemble_size))]
    return [[(s + j) % ensemble_size for j in range(write_quorum)] for s in range(ensemble_size)]


def window_ok(
    racks: list[str],
    min_racks: int,
    ack_quorum: int = 0,
    min_regions: int = 0,
    region_of: Callable[[str], str] | None = None,
) -> bool:
    """Whether one complete write quorum (its racks) meets the rack and durability rules."""
    if len(set(racks)) < min_racks:
        return False
    if min_regions > 1 and region_of is not None:
        counts: dict[str, int] = {}
        for r in racks:
            g = region_of(r)
            counts[g] = counts.get(g, 0) + 1
        top = sorted(counts.values(), reverse=True)[: min_regions - 1]
        if sum(top) >= ack_quorum:
            return False
    return True


def max_per_rack(ensemble_size: int, write_quorum: int, min_racks: int) -> int:
    """How often one rack may appear at most.

    Each window holds it at most ``W - m + 1`` times; summed over the E windows
    (each position lies in W of them) that caps it at ``E (W - m + 1) / W``, and a
    window misses only ``E - W`` positions, which caps it at ``W - m + 1 + E - W``.
    """
    per_window = write_quorum - min_racks + 1
    if write_quorum >= ensemble_size:
        return ensemble_size - min_racks + 1
    return min(ensemble_size * per_window // write_quorum, per_window + ensemble_size - write_quorum)


def max_per_region(ensemble_size: int, write_quorum: int, ack_quorum: int) -> int:
    """How many bookies one region may hold when no region may hold an ack quorum of any window."""
    per_window = ack_quorum - 1
    if write_quorum >= ensemble_size:
        return per_window
    return min(ensemble_size * per_window // write_quorum, per_window + ensemble_size - write_quorum)


def coverage_bound(capacity: Mapping[str, int], ensemble_size: int, write_quorum: int, limit: int) -> int:
    """The most (window, rack) incidences any choice of rack counts can give.

    A rack with k bookies appears in at most ``min(E, k * W)`` windows; the sum
    over racks must reach ``m * E`` for every window to see m racks.  The gain
    of one more bookie only shrinks, so a greedy choice finds the maximum.
    """
    windows_count = ensemble_size if write_quorum < ensemble_size else 1
    width = write_quorum if write_quorum < ensemble_size else 1
    counts = {r: 0 for r in capacity}
    total = 0
    for _ in range(ensemble_size):
        best, gain = None, -1
        for r, c in capacity.items():
            k = counts[r]
            if k >= min(c, limit):
                continue
            g = min(windows_count, (k + 1) * width) - min(windows_count, k * width)
            if g > gain:
                best, gain = r, g
        if best is None:
            return -1
        counts[best] += 1
        total += gain
    return total


@dataclass
class LayoutProblem:
    """What to place: capacities per rack, sizes, and the rules."""

    capacity: Mapping[str, int]
    ensemble_size: int
    write_quorum: int
    min_racks: int
    ack_quorum: int = 0
    min_regions: int = 0
    region_of: Callable[[str], str] | None = None
    region_quota: Mapping[str, int] | None = None
    #: Rack to prefer for position 0 (the client's own rack), if it can be used.
    first_rack: str | None = None


@dataclass
class Layout:
    """A rack per position, and whether the search ran out of budget."""

    racks: list[str] | None
    exhausted: bool = False
    nodes: int = field(default=0)


def find_layout(problem: LayoutProblem, rng: random.Random, budget: int = DEFAULT_BUDGET) -> Layout:
    """Search for a rack sequence meeting every rule; ``racks`` is None when none exists."""
    p = problem
    E, W = p.ensemble_size, p.write_quorum
    m = max(1, min(p.min_racks, W))
    cap = {r: c for r, c in p.capacity.items() if c > 0}
    region_of = p.region_of or (lambda r: r)
    durability = p.min_regions > 1 and p.region_of is not None

    # Cheap necessary conditions first, so hopeless requests fail fast.
    limit = max_per_rack(E, W, m)
    if sum(min(c, limit) for c in cap.values()) < E or len(cap) < m:
        return Layout(None)
    if coverage_bound(cap, E, W, limit) < m * (E if W < E else 1):
        return Layout(None)
    if durability:
        region_cap: dict[str, int] = {}
        for r, c in cap.items():
            region_cap[region_of(r)] = region_cap.get(region_of(r), 0) + min(c, limit)
        region_limit = max_per_region(E, W, p.ack_quorum)
        if sum(min(c, region_limit) for c in region_cap.values()) < E:
            return Layout(None)
    quota = dict(p.region_quota) if p.region_quota is not None else None
    if quota is not None:
        if sum(quota.values()) != E:
            return Layout(None)
        for g, q in quota.items():
            if sum(min(c, limit) for r, c in cap.items() if region_of(r) == g) < q:
                return Layout(None)

    wins = windows(E, W)
    wins_at: list[list[int]] = [[] for _ in range(E)]
    for wi, win in enumerate(wins):
        for pos in win:
            wins_at[pos].append(wi)
    seq: list[str] = []
    used: dict[str, int] = {r: 0 for r in cap}
    tiebreak = {r: rng.random() for r in cap}
    nodes = 0
    exhausted = False

    def prefix_ok(pos: int) -> bool:
        """Every window through ``pos`` can still meet the rules given positions 0..pos."""
        for wi in wins_at[pos]:
            filled = [seq[q] for q in wins[wi] if q <= pos]
            unfilled = len(wins[wi]) - len(filled)
            if len(set(filled)) + unfilled < m:
                return False
            if durability:
                counts: dict[str, int] = {}
                for r in filled:
                    g = region_of(r)
                    counts[g] = counts.get(g, 0) + 1
                if sum(sorted(counts.values(), reverse=True)[: p.min_regions - 1]) >= p.ack_quorum:
                    return False
        return True

    def order(pos: int) -> list[str]:
        recent = seq[max(0, pos - W + 1) :]
        wrap = seq[: max(0, pos + W - E)] if pos + W > E else []
        near = set(recent) | set(wrap)
        recent_regions: dict[str, int] = {}
        for r in recent:
            g = region_of(r)
            recent_regions[g] = recent_regions.get(g, 0) + 1
        options = []
        seen_fresh: set[tuple[str, int, int]] = set()
        for r, c in cap.items():
            if used[r] >= c or used[r] >= limit:
                continue
            g = region_of(r)
            if quota is not None and quota.get(g, 0) <= 0:
                continue
            if used[r] == 0:
                # Unused racks with the same region state and capacity are interchangeable.
                key = (g, c, quota.get(g, 0) if quota is not None else 0)
                if key in seen_fresh and not (pos == 0 and r == p.first_rack):
                    continue
                seen_fresh.add(key)
            first = 0 if (pos == 0 and r == p.first_rack) else 1
            q_left = -(quota.get(g, 0)) if quota is not None else 0
            options.append((first, r in near, recent_regions.get(g, 0), q_left, used[r], -(c - used[r]), tiebreak[r], r))
        options.sort()
        return [o[-1] for o in options]

    def search(pos: int) -> bool:
        nonlocal nodes, exhausted
        if pos == E:
            return True
        for r in order(pos):
            nodes += 1
            if nodes > budget:
                exhausted = True
                return False
            seq.append(r)
            used[r] += 1
            g = region_of(r)
            if quota is not None:
                quota[g] -= 1
            if prefix_ok(pos) and search(pos + 1):
                return True
            seq.pop()
            used[r] -= 1
            if quota is not None:
                quota[g] += 1
            if exhausted:
                return False
        return False

    found = search(0)
    return Layout(list(seq) if found else None, exhausted=exhausted, nodes=nodes)
