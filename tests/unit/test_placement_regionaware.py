"""Property tests for the region-aware policy: shares, durability, racks, read order."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkspark.errors import InvalidOptionError, NotEnoughBookiesError
from bkspark.placement.dns import StaticMapping
from bkspark.placement.regionaware import RegionAwareEnsemblePlacementPolicy, water_fill
from bkspark.placement.topology import region_of
from tests.unit.test_placement_oracle import Topology, feasible, quorum_ok, region_topologies


def make_policy(topo: Topology, seed: int = 0, **conf: object) -> RegionAwareEnsemblePlacementPolicy:
    policy = RegionAwareEnsemblePlacementPolicy().initialize(
        {"ignoreLocalNodeInPlacementPolicy": True, **conf},
        dns_resolver=StaticMapping(table=topo.table),
        rng=random.Random(seed),
    )
    policy.on_cluster_changed(set(topo.bookies), set())
    return policy


def capacity_of(topo: Topology, exclude: frozenset[str]) -> dict[str, int]:
    cap: dict[str, int] = {}
    for b, loc in topo.locations.items():
        if b not in exclude:
            cap[loc] = cap.get(loc, 0) + 1
    return cap


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_new_ensemble_takes_equal_region_shares_and_spans_racks(data: st.DataObject) -> None:
    topo = data.draw(region_topologies())
    e = data.draw(st.integers(1, 6))
    w = data.draw(st.integers(1, e))
    exclude = frozenset(data.draw(st.lists(st.sampled_from(topo.bookies), max_size=2))) if topo.bookies else frozenset()
    policy = make_policy(topo, seed=data.draw(st.integers(0, 1000)))
    cap = capacity_of(topo, exclude)
    if sum(cap.values()) < e:
        with pytest.raises(NotEnoughBookiesError):
            policy.new_ensemble(e, w, 1, exclude=exclude)
        return
    ensemble = policy.new_ensemble(e, w, 1, exclude=exclude)
    assert len(set(ensemble)) == e and not set(ensemble) & exclude
    racks = [topo.locations[b] for b in ensemble]
    counts: dict[str, int] = {}
    for r in racks:
        counts[region_of(r)] = counts.get(region_of(r), 0) + 1
    region_cap: dict[str, int] = {}
    for r, n in cap.items():
        region_cap[region_of(r)] = region_cap.get(region_of(r), 0) + n
    # Equal shares as far as each region's bookies allow: a region below the top share is full.
    top = max(counts.values())
    for g, n in region_cap.items():
        got = counts.get(g, 0)
        assert got >= top - 1 or got == n, (counts, region_cap)
    m = min(w, 2)
    if feasible(cap, e, w, m):
        assert quorum_ok(racks, w, m)


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_durability_holds_whenever_it_can_and_raises_when_it_cannot(data: st.DataObject) -> None:
    topo = data.draw(region_topologies(max_regions=3))
    e = data.draw(st.integers(2, 6))
    w = data.draw(st.integers(2, e))
    a = data.draw(st.integers(w - w // 2 + 1, w)) if w - w // 2 + 1 <= w else w
    regions = sorted({region_of(loc) for loc in topo.locations.values()} | {"region-0", "region-1"})
    policy = make_policy(topo, seed=data.draw(st.integers(0, 1000)), reppRegionsToWrite=";".join(regions))
    cap = capacity_of(topo, frozenset())
    can = sum(cap.values()) >= e and feasible(cap, e, w, 1, ack_quorum=a, min_regions=2, region_of=region_of)
    if not can:
        with pytest.raises(NotEnoughBookiesError):
            policy.new_ensemble(e, w, a)
        return
    ensemble = policy.new_ensemble(e, w, a)
    racks = [topo.locations[b] for b in ensemble]
    # No single region holds an ack quorum of any write quorum: losing a region loses no acked entry.
    assert quorum_ok(racks, w, 1, ack_quorum=a, min_regions=2, region_of=region_of)


def test_durability_configuration_is_checked_like_java() -> None:
    topo = Topology({f"10.0.{g}.1:3181": f"/r{g}/k" for g in range(2)})
    policy = make_policy(topo, reppRegionsToWrite="r0;r1")
    with pytest.raises(InvalidOptionError):
        policy.new_ensemble(3, 3, 2)  # Qa must exceed Qw - Qw/2
    with pytest.raises(InvalidOptionError):
        make_policy(topo, reppRegionsToWrite="r0", reppMinimumRegionsForDurability=2)


def test_water_fill_spreads_and_spills_over() -> None:
    assert water_fill(6, {"a": 5, "b": 5, "c": 5}, ["a", "b", "c"]) == {"a": 2, "b": 2, "c": 2}
    assert water_fill(7, {"a": 5, "b": 1, "c": 5}, ["c", "a", "b"]) == {"c": 3, "a": 3, "b": 1}
    assert water_fill(5, {"a": 2, "b": 2}, ["a", "b"]) is None


def test_replace_prefers_the_same_region() -> None:
    locs = {
        "10.0.0.1:3181": "/east/r1",
        "10.0.0.2:3181": "/east/r2",
        "10.0.0.3:3181": "/east/r3",
        "10.0.1.1:3181": "/west/r4",
        "10.0.1.2:3181": "/west/r5",
        "10.0.1.3:3181": "/west/r6",
    }
    policy = make_policy(Topology(locs), reppRegionsToWrite="east;west")
    ensemble = ["10.0.0.1:3181", "10.0.1.1:3181", "10.0.0.2:3181", "10.0.1.2:3181"]
    for seed in range(10):
        policy.rng = random.Random(seed)
        assert policy.replace_bookie(4, 2, 2, None, ensemble, "10.0.0.1:3181") == "10.0.0.3:3181"


def reorder_policy() -> tuple[RegionAwareEnsemblePlacementPolicy, list[str]]:
    locs = {f"10.0.0.{i}:3181": "/local/r1" for i in range(1, 5)}
    locs.update({f"10.0.1.{i}:3181": "/remote/r2" for i in range(1, 5)})
    policy = make_policy(Topology(locs), reppLocalRegion="local")
    ensemble = [f"10.0.0.{i}:3181" for i in range(1, 5)] + [f"10.0.1.{i}:3181" for i in range(1, 5)]
    return policy, ensemble


def test_read_order_puts_a_remote_bookie_after_two_local_ones() -> None:
    policy, ensemble = reorder_policy()
    # Local bookies are indexes 0-3, remote ones 4-7.
    assert policy.reorder_read_sequence(ensemble, [4, 5, 0, 1, 2], {}) == [0, 1, 4, 2, 5]
    assert policy.reorder_read_sequence(ensemble, [4, 0], {}) == [0, 4]
    assert policy.reorder_read_sequence(ensemble, [4, 5], {}) == [4, 5]
    # A failed local bookie still counts as local for the remote insertion.
    assert policy.reorder_read_sequence(ensemble, [4, 0, 1], {ensemble[0]: 3}) == [1, 0, 4]


def test_read_order_without_a_local_region_is_rack_aware() -> None:
    locs = {"10.0.0.1:3181": "/a/r1", "10.0.1.1:3181": "/b/r2"}
    policy = make_policy(Topology(locs))
    ensemble = sorted(locs) + ["10.0.9.9:3181"]
    assert policy.reorder_read_sequence(ensemble, [2, 1, 0], {ensemble[1]: 5}) == [0, 1, 2]


def test_an_ack_quorum_smaller_than_the_durable_regions_is_refused_like_java() -> None:
    """docs/placement.md, "Regions": Java's check Qa >= minRegions raises InvalidOptionError."""
    topo = Topology({f"10.0.{g}.{i}:3181": f"/r{g}/k{i}" for g in range(3) for i in range(2)})
    policy = make_policy(topo, reppRegionsToWrite="r0;r1;r2", reppMinimumRegionsForDurability=3)
    with pytest.raises(InvalidOptionError, match="ack quorum is insufficient"):
        policy.new_ensemble(3, 3, 2)


def three_regions(**conf: object) -> tuple[RegionAwareEnsemblePlacementPolicy, Topology]:
    topo = Topology({f"10.0.{g}.{i}:3181": f"/{name}/k{i % 2}" for g, name in enumerate(["east", "north", "west"])
                     for i in range(4)})
    return make_policy(topo, **conf), topo


def region_counts(ensemble: list[str], topo: Topology) -> dict[str, int]:
    counts: dict[str, int] = {}
    for b in ensemble:
        counts[region_of(topo.locations[b])] = counts.get(region_of(topo.locations[b]), 0) + 1
    return counts


def test_the_local_region_then_the_others_in_turn_get_the_odd_bookies() -> None:
    """docs/placement.md, "Regions": equal shares; the local region, then the others in turn, get the odd bookies."""
    policy, topo = three_regions(reppLocalRegion="north")
    assert region_counts(policy.new_ensemble(4, 2, 1), topo) == {"north": 2, "east": 1, "west": 1}
    seconds = []
    for _ in range(4):
        counts = region_counts(policy.new_ensemble(5, 2, 1), topo)
        assert counts["north"] == 2 and sorted(counts.values()) == [1, 2, 2]
        seconds.append(next(g for g, n in counts.items() if n == 2 and g != "north"))
    assert set(seconds) == {"east", "west"} and seconds[0] != seconds[1]  # in turn


def test_the_local_location_names_the_local_region_and_the_first_rack() -> None:
    """docs/placement.md, keys: reppLocalRegion defaults to the region of the local location; the client's location
    (reppLocalNetworkLocation, else resolved unless ignoreLocalNodeInPlacementPolicy) is the first bookie's rack."""
    import socket

    from bkspark.placement.rackaware import RackawareEnsemblePlacementPolicy
    from tests.unit.test_placement_rackaware import make_policy as rack_policy

    locs = {f"10.0.0.{i}:3181": "/local/r1" for i in range(1, 5)} | {f"10.0.1.{i}:3181": "/remote/r2" for i in range(1, 5)}
    policy = make_policy(Topology(locs), reppLocalNetworkLocation="/local/r1")
    ensemble = sorted(locs)
    assert policy.local_region == "local"
    assert policy.reorder_read_sequence(ensemble, [4, 5, 0, 1, 2], {}) == [0, 1, 4, 2, 5]  # as with reppLocalRegion
    racks = {f"10.0.{r}.{i}:3181": f"/rack-{r}" for r in range(3) for i in range(3)}
    me = socket.gethostbyname(socket.gethostname())
    mapping = StaticMapping(table={"10.0.0.1": "/rack-0", "10.0.0.2": "/rack-1", me: "/rack-1"})
    assert RackawareEnsemblePlacementPolicy().initialize({"ignoreLocalNodeInPlacementPolicy": "true"},
                                                         dns_resolver=mapping).local_location is None
    for seed in range(10):
        explicit = rack_policy(Topology(racks), seed=seed, reppLocalNetworkLocation="/rack-2")
        assert racks[explicit.new_ensemble(3, 2, 2)[0]] == "/rack-2"
        resolved = RackawareEnsemblePlacementPolicy().initialize({}, dns_resolver=mapping, rng=random.Random(seed))
        resolved.on_cluster_changed({"10.0.0.1:3181", "10.0.0.2:3181"}, set())
        assert resolved.local_location == "/rack-1" and resolved.new_ensemble(2, 2, 2)[0] == "10.0.0.2:3181"


@pytest.mark.parametrize(
    "conf",
    [{}, {"reppEnableDurabilityEnforcementInReplace": "false"}, {"reppDisableDurabilityEnforcementFeature": "true"}],
    ids=["default", "not-in-replace", "feature-off"],
)
def test_durability_in_replace_is_on_by_default_and_each_switch_turns_it_off(conf: dict[str, str]) -> None:
    """docs/placement.md: reppEnableDurabilityEnforcementInReplace (default true) applies durability to
    replace_bookie; it, or reppDisableDurabilityEnforcementFeature, turns that off."""
    locs = {f"10.0.0.{i}:3181": f"/east/r{i}" for i in range(1, 4)} | {f"10.0.1.{i}:3181": f"/west/r{i}" for i in range(1, 4)}
    policy = make_policy(Topology(locs), reppRegionsToWrite="east;west", **conf)
    ensemble = ["10.0.0.1:3181", "10.0.1.1:3181", "10.0.0.2:3181", "10.0.1.2:3181"]  # E=4, Qw=2, Qa=2
    west_left = {"10.0.1.3:3181"}
    if not conf:
        with pytest.raises(NotEnoughBookiesError):
            policy.replace_bookie(4, 2, 2, None, ensemble, "10.0.1.1:3181", west_left)
    else:
        assert policy.replace_bookie(4, 2, 2, None, ensemble, "10.0.1.1:3181", west_left) == "10.0.0.3:3181"


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_write_quorums_span_two_regions_whenever_a_layout_allows(data: st.DataObject) -> None:
    """docs/placement.md, "Regions": the regions are interleaved so write quorums span them, without
    reppRegionsToWrite too: whenever a layout with the same rack level and region counts keeps every write quorum
    out of a single region, ours does."""
    topo = data.draw(region_topologies())
    e = data.draw(st.integers(2, 6))
    w = data.draw(st.integers(2, e))
    cap = capacity_of(topo, frozenset())
    if sum(cap.values()) < e:
        return
    policy = make_policy(topo, seed=data.draw(st.integers(0, 1000)))
    racks = [topo.locations[b] for b in policy.new_ensemble(e, w, 1)]
    counts: dict[str, int] = {}
    for r in racks:
        counts[region_of(r)] = counts.get(region_of(r), 0) + 1
    level = min(w, 2, min(len({racks[(s + j) % e] for j in range(w)}) for s in range(e)))
    if feasible(cap, e, w, level, ack_quorum=w, min_regions=2, region_of=region_of, quota=counts):
        assert quorum_ok(racks, w, level, ack_quorum=w, min_regions=2, region_of=region_of), racks


def test_three_regions_interleave_round_robin_like_java() -> None:
    """Three equal regions, E=6, Qw=2: every write quorum spans two regions, whatever the seed (the search used to
    leave the quorum that wraps from the last bookie to the first in one region for about a third of seeds)."""
    locs = {f"10.{g}.{r}.{i}:3181": f"/g{g}/r{r}" for g in range(3) for r in range(3) for i in range(2)}
    for seed in range(30):
        regions = [region_of(locs[b]) for b in make_policy(Topology(locs), seed=seed).new_ensemble(6, 2, 1)]
        assert all(regions[s] != regions[(s + 1) % 6] for s in range(6)), (seed, regions)
