"""A brute-force oracle for placement feasibility, and the topologies the property tests draw.

The oracle enumerates rack sequences naively (no pruning beyond capacities),
so it is an independent check on the policies' backtracking search.  It is
also imported by tests/integration/test_placement_java.py, which runs the same
topologies through BookKeeper's Java policies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from bkspark.placement.arrange import window_ok, windows


def quorum_ok(
    racks: Sequence[str],
    write_quorum: int,
    min_racks: int,
    ack_quorum: int = 0,
    min_regions: int = 0,
    region_of: Callable[[str], str] | None = None,
) -> bool:
    """Every round-robin write quorum of a rack sequence meets the rules."""
    return all(
        window_ok([racks[i] for i in win], min_racks, ack_quorum, min_regions, region_of)
        for win in windows(len(racks), write_quorum)
    )


def min_racks_per_quorum(racks: Sequence[str], write_quorum: int) -> int:
    """The fewest distinct racks any write quorum of the sequence has."""
    return min(len({racks[i] for i in win}) for win in windows(len(racks), write_quorum))


def feasible(
    capacity: Mapping[str, int],
    ensemble_size: int,
    write_quorum: int,
    min_racks: int,
    ack_quorum: int = 0,
    min_regions: int = 0,
    region_of: Callable[[str], str] | None = None,
    quota: Mapping[str, int] | None = None,
) -> bool:
    """Whether any rack sequence within ``capacity`` (and region ``quota``) meets the rules."""
    racks = sorted(r for r, c in capacity.items() if c > 0)
    used = {r: 0 for r in racks}
    seq: list[str] = []
    m = min(min_racks, write_quorum)

    def dfs() -> bool:
        if len(seq) == ensemble_size:
            if quota is not None and region_of is not None:
                counts: dict[str, int] = {}
                for r in seq:
                    counts[region_of(r)] = counts.get(region_of(r), 0) + 1
                if any(counts.get(g, 0) != q for g, q in quota.items()):
                    return False
            return quorum_ok(seq, write_quorum, m, ack_quorum, min_regions, region_of)
        for r in racks:
            if used[r] < capacity[r]:
                used[r] += 1
                seq.append(r)
                if dfs():
                    return True
                seq.pop()
                used[r] -= 1
        return False

    return dfs()


def best_min_racks(capacity: Mapping[str, int], ensemble_size: int, write_quorum: int, min_racks: int) -> int:
    """The largest m' <= min(Qw, min_racks) a layout can reach (0 if not even one bookie per slot fits)."""
    for m in range(min(min_racks, write_quorum), 0, -1):
        if feasible(capacity, ensemble_size, write_quorum, m):
            return m
    return 0


@dataclass(frozen=True)
class Topology:
    """Bookies (``host:3181``) and their locations; host names are what the DNS mapping sees."""

    locations: Mapping[str, str]  # bookie id -> location

    @property
    def bookies(self) -> list[str]:
        return sorted(self.locations)

    @property
    def table(self) -> dict[str, str]:
        """The host -> location table a static mapping needs."""
        return {b.rsplit(":", 1)[0]: loc for b, loc in self.locations.items()}


def bookie(rack_index: int, i: int) -> str:
    return f"10.0.{rack_index}.{i + 1}:3181"


@st.composite
def rack_topologies(draw: st.DrawFn, max_racks: int = 4, max_per_rack: int = 3, default_rack: str | None = None) -> Topology:
    """1..max_racks racks with 0..max_per_rack bookies each, optionally some in the default rack."""
    sizes = draw(st.lists(st.integers(0, max_per_rack), min_size=1, max_size=max_racks))
    locs = {bookie(r, i): f"/rack-{r}" for r, n in enumerate(sizes) for i in range(n)}
    if default_rack is not None:
        for i in range(draw(st.integers(0, 2))):
            locs[bookie(9, i)] = default_rack
    return Topology(locs)


@st.composite
def region_topologies(draw: st.DrawFn, max_regions: int = 3) -> Topology:
    """1..max_regions regions of 1..2 racks with 0..3 bookies each."""
    locs: dict[str, str] = {}
    n_regions = draw(st.integers(1, max_regions))
    for g in range(n_regions):
        for k in range(draw(st.integers(1, 2))):
            rack_index = g * 2 + k
            for i in range(draw(st.integers(0, 3))):
                locs[bookie(rack_index, i)] = f"/region-{g}/rack-{rack_index}"
    return Topology(locs)


# -- the oracle's own sanity ------------------------------------------------------------------------------------


def test_oracle_knows_odd_cycles_cannot_alternate_two_racks() -> None:
    # E=3, Qw=2 on two racks: the quorum wrapping from the last to the first bookie repeats a rack.
    assert not feasible({"/a": 2, "/b": 2}, 3, 2, 2)
    assert feasible({"/a": 2, "/b": 2}, 4, 2, 2)
    assert feasible({"/a": 1, "/b": 1, "/c": 1}, 3, 2, 2)


def test_oracle_caps_a_rack_per_window() -> None:
    # Qw=3 over 3 racks needs every rack at most floor(E/3) times.
    assert not feasible({"/a": 3, "/b": 3, "/c": 1}, 7, 3, 3)
    assert feasible({"/a": 3, "/b": 3, "/c": 3}, 6, 3, 3)


def test_oracle_durability_counts_regions() -> None:
    def region(rack: str) -> str:
        return rack.split("/")[1]

    capacity = {"/x/a": 3, "/y/b": 3}
    # Qa=2 of Qw=3 on two regions: some region always holds two of a quorum.
    assert not feasible(capacity, 6, 3, 1, ack_quorum=2, min_regions=2, region_of=region)
    assert feasible(capacity, 6, 3, 1, ack_quorum=3, min_regions=2, region_of=region)
    assert min_racks_per_quorum(["/x/a", "/y/b", "/x/a"], 2) == 1
