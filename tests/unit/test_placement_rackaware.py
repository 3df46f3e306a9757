"""Property tests for the rack-aware policy over random topologies, sizes and exclusions."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkspark.errors import NotEnoughBookiesError
from bkspark.placement import PlacementResult
from bkspark.placement.arrange import LayoutProblem, find_layout
from bkspark.placement.dns import StaticMapping
from bkspark.placement.rackaware import RackawareEnsemblePlacementPolicy
from bkspark.placement.topology import DEFAULT_RACK, region_of
from tests.unit.test_placement_oracle import (
    Topology,
    best_min_racks,
    feasible,
    min_racks_per_quorum,
    quorum_ok,
    rack_topologies,
)


def make_policy(topo: Topology, seed: int = 0, **conf: object) -> RackawareEnsemblePlacementPolicy:
    policy = RackawareEnsemblePlacementPolicy().initialize(
        {"ignoreLocalNodeInPlacementPolicy": True, **conf},
        dns_resolver=StaticMapping(table=topo.table),
        rng=random.Random(seed),
    )
    policy.on_cluster_changed(set(topo.bookies), set())
    return policy


@st.composite
def requests(draw: st.DrawFn, topo: Topology) -> tuple[int, int, int, frozenset[str]]:
    e = draw(st.integers(1, 6))
    w = draw(st.integers(1, e))
    a = draw(st.integers(1, w))
    exclude = frozenset(draw(st.lists(st.sampled_from(topo.bookies), max_size=3))) if topo.bookies else frozenset()
    return e, w, a, exclude


def pool_capacity(topo: Topology, exclude: frozenset[str], drop_default: bool) -> dict[str, int]:
    cap: dict[str, int] = {}
    for b, loc in topo.locations.items():
        if b in exclude or (drop_default and loc == DEFAULT_RACK):
            continue
        cap[loc] = cap.get(loc, 0) + 1
    return cap


@settings(max_examples=150, deadline=None)
@given(data=st.data(), enforce=st.booleans(), min_racks=st.integers(1, 3))
def test_new_ensemble_meets_the_rack_rule_whenever_it_can(data: st.DataObject, enforce: bool, min_racks: int) -> None:
    topo = data.draw(rack_topologies(default_rack=DEFAULT_RACK))
    e, w, a, exclude = data.draw(requests(topo))
    policy = make_policy(
        topo,
        seed=data.draw(st.integers(0, 1000)),
        minNumRacksPerWriteQuorum=min_racks,
        enforceMinNumRacksPerWriteQuorum=enforce,
    )
    cap = pool_capacity(topo, exclude, drop_default=enforce)
    m = min(w, min_racks)
    if sum(cap.values()) < e or (enforce and not feasible(cap, e, w, m)):
        with pytest.raises(NotEnoughBookiesError):
            policy.new_ensemble(e, w, a, exclude=exclude)
        return
    ensemble = policy.new_ensemble(e, w, a, exclude=exclude)
    assert len(ensemble) == e == len(set(ensemble))
    assert not set(ensemble) & exclude
    assert set(ensemble) <= set(topo.bookies)
    racks = [topo.locations[b] for b in ensemble]
    if enforce:
        assert DEFAULT_RACK not in racks
    # Best effort without enforcement: as many racks per quorum as any layout could reach.
    assert min_racks_per_quorum(racks, w) >= best_min_racks(cap, e, w, m)
    if feasible(cap, e, w, m):
        assert min_racks_per_quorum(racks, w) >= m
        assert policy.is_ensemble_adhering(ensemble, w, a) is PlacementResult.MEETS_STRICT


@settings(max_examples=150, deadline=None)
@given(data=st.data(), enforce=st.booleans())
def test_replace_bookie_keeps_the_rule_and_never_picks_excluded(data: st.DataObject, enforce: bool) -> None:
    topo = data.draw(rack_topologies(max_racks=4, max_per_rack=3))
    if len(topo.bookies) < 2:
        return
    e = data.draw(st.integers(1, min(5, len(topo.bookies) - 1)))
    w = data.draw(st.integers(1, e))
    policy = make_policy(topo, seed=data.draw(st.integers(0, 1000)), enforceMinNumRacksPerWriteQuorum=enforce)
    ensemble = data.draw(st.permutations(topo.bookies)).copy()[:e]
    victim = data.draw(st.sampled_from(ensemble))
    exclude = frozenset(data.draw(st.lists(st.sampled_from(topo.bookies), max_size=2)))
    candidates = [b for b in topo.bookies if b not in set(ensemble) | exclude]
    m = min(w, 2)
    index = ensemble.index(victim)

    def keeps_rule(b: str) -> bool:
        trial = list(ensemble)
        trial[index] = b
        racks = [topo.locations[x] for x in trial]
        return all(
            len({racks[(s + j) % e] for j in range(w)}) >= m for s in range(e) if index in {(s + j) % e for j in range(w)}
        )

    good = [b for b in candidates if keeps_rule(b)]
    if not candidates or (enforce and m > 1 and not good):
        with pytest.raises(NotEnoughBookiesError):
            policy.replace_bookie(e, w, w, None, ensemble, victim, exclude)
        return
    chosen = policy.replace_bookie(e, w, w, None, ensemble, victim, exclude)
    assert chosen in candidates
    if good:
        assert keeps_rule(chosen)
        # Among the rule-keeping candidates, a rack the rest of the ensemble does not use wins.
        others = {topo.locations[b] for b in ensemble if b != victim}
        if any(topo.locations[b] not in others for b in good):
            assert topo.locations[chosen] not in others


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sets(st.sampled_from([f"10.0.0.{i}:3181" for i in range(1, 8)])),
            st.sets(st.sampled_from([f"10.0.0.{i}:3181" for i in range(1, 8)])),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_on_cluster_changed_returns_the_writable_bookies_that_vanished(steps: list[tuple[set[str], set[str]]]) -> None:
    topo = Topology({f"10.0.0.{i}:3181": f"/rack-{i % 3}" for i in range(1, 8)})
    policy = RackawareEnsemblePlacementPolicy().initialize(
        {"ignoreLocalNodeInPlacementPolicy": True}, dns_resolver=StaticMapping(table=topo.table)
    )
    writable: set[str] = set()
    for new_writable, new_readonly in steps:
        dead = policy.on_cluster_changed(new_writable, new_readonly)
        assert dead == (writable - new_writable) - new_readonly
        writable = set(new_writable)
        assert policy.topology.bookies() == writable


def test_enforcement_refuses_a_single_rack_and_best_effort_accepts_it() -> None:
    topo = Topology({f"10.0.0.{i}:3181": "/rack-a" for i in range(1, 5)})
    with pytest.raises(NotEnoughBookiesError):
        make_policy(topo, enforceMinNumRacksPerWriteQuorum=True).new_ensemble(3, 2, 2)
    ensemble = make_policy(topo).new_ensemble(3, 2, 2)
    assert len(set(ensemble)) == 3


def test_enforcement_never_uses_the_default_rack() -> None:
    locs = {"10.0.1.1:3181": "/r1", "10.0.2.1:3181": "/r2", "10.0.3.1:3181": DEFAULT_RACK}
    policy = make_policy(Topology(locs), enforceMinNumRacksPerWriteQuorum=True)
    with pytest.raises(NotEnoughBookiesError):
        policy.new_ensemble(3, 2, 2)
    assert set(policy.new_ensemble(2, 2, 2)) == {"10.0.1.1:3181", "10.0.2.1:3181"}


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.dictionaries(
        st.sampled_from(["/g0/a", "/g0/b", "/g1/c", "/g1/d", "/g2/e"]), st.integers(0, 3), min_size=1, max_size=5
    ),
    e=st.integers(1, 6),
    data=st.data(),
)
def test_layout_search_is_exact(capacity: dict[str, int], e: int, data: st.DataObject) -> None:
    """The backtracking search finds a layout exactly when brute force does (racks, durability, region quotas)."""
    w = data.draw(st.integers(1, e))
    m = data.draw(st.integers(1, 3))
    a = data.draw(st.integers(1, w))
    min_regions = data.draw(st.sampled_from([0, 2]))
    quota = None
    if data.draw(st.booleans()):
        regions = sorted({region_of(r) for r in capacity})
        cuts = sorted(data.draw(st.lists(st.integers(0, e), min_size=len(regions) - 1, max_size=len(regions) - 1)))
        bounds = [0, *cuts, e]
        quota = {g: bounds[i + 1] - bounds[i] for i, g in enumerate(regions)}
    problem = LayoutProblem(
        capacity, e, w, m, ack_quorum=a, min_regions=min_regions, region_of=region_of, region_quota=quota
    )
    layout = find_layout(problem, random.Random(data.draw(st.integers(0, 99))))
    assert not layout.exhausted
    expected = feasible(capacity, e, w, min(m, w), a, min_regions, region_of, quota)
    assert (layout.racks is not None) == expected
    if layout.racks is not None:
        assert quorum_ok(layout.racks, w, min(m, w), a, min_regions, region_of)
        for rack in set(layout.racks):
            assert layout.racks.count(rack) <= capacity[rack]
        if quota is not None:
            for g, q in quota.items():
                assert sum(1 for r in layout.racks if region_of(r) == g) == q


def test_a_search_that_hits_its_step_cap_is_logged_and_counts_as_no_layout(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/placement.md, "Write quorums and the rack rule": the search is capped at 50,000 steps; hitting the
    cap is logged and treated as "no layout" (enforced: NotEnoughBookiesError, not a layout that breaks the rule)."""
    import functools
    import inspect

    import bkspark.placement.rackaware as rackaware_module
    from bkspark.placement import arrange

    assert inspect.signature(arrange.find_layout).parameters["budget"].default == 50_000
    problem = LayoutProblem({"/r1": 3, "/r2": 3, "/r3": 3}, 6, 3, 3)
    assert find_layout(problem, random.Random(0)).racks is not None  # a layout exists ...
    capped = find_layout(problem, random.Random(0), budget=4)  # ... but not within 4 steps
    assert capped.racks is None and capped.exhausted
    topo = Topology({f"10.0.{r}.{i}:3181": f"/r{r}" for r in range(1, 4) for i in range(1, 4)})
    policy = make_policy(topo, enforceMinNumRacksPerWriteQuorum=True, minNumRacksPerWriteQuorum=3)
    assert len(policy.new_ensemble(6, 3, 2)) == 6
    monkeypatch.setattr(rackaware_module, "find_layout", functools.partial(arrange.find_layout, budget=4))
    with caplog.at_level("WARNING", logger=rackaware_module.__name__), pytest.raises(NotEnoughBookiesError):
        policy.new_ensemble(6, 3, 2)
    assert "placement search gave up after" in caplog.text


def test_replace_bookie_prefers_an_unused_rack_then_the_replaced_bookies_rack_else_the_most_racks() -> None:
    """docs/placement.md, "Write quorums and the rack rule": among the candidates that keep the rule, a rack the
    rest of the ensemble does not use first, then (among those) the replaced bookie's rack; if none keeps it (not
    enforced), the candidate with the most racks in its worst quorum."""
    locs = {f"10.0.{r}.{i}:3181": f"/r{r}" for r in range(1, 4) for i in range(1, 4)} | {"10.0.4.1:3181": "/r4"}
    small = ["10.0.1.1:3181", "10.0.2.1:3181", "10.0.3.1:3181"]  # E=3, Qw=2
    shared = ["10.0.1.1:3181", "10.0.2.1:3181", "10.0.1.2:3181", "10.0.3.1:3181"]  # E=4, Qw=2: r1 twice
    wide = ["10.0.1.1:3181", "10.0.2.1:3181", "10.0.3.1:3181", "10.0.3.2:3181"]  # E=4, Qw=3
    no_r1_r4 = {"10.0.1.2:3181", "10.0.1.3:3181", "10.0.4.1:3181"}
    for seed in range(20):
        policy = make_policy(Topology(locs), seed=seed)
        # r1 and r4 are both unused by the rest of `small` and keep the rule: the replaced bookie's rack r1 wins.
        assert locs[policy.replace_bookie(3, 2, 2, None, small, "10.0.1.1:3181")] == "/r1"
        # In `shared` the rest of the ensemble uses r1 still: the unused r4 wins over the replaced bookie's rack.
        assert policy.replace_bookie(4, 2, 2, None, shared, "10.0.1.1:3181") == "10.0.4.1:3181"
        # Three racks per quorum through position 0 of `wide` without r1 and r4: nobody keeps the rule. An r2
        # bookie leaves every such quorum on 2 racks, an r3 bookie leaves (r3, r3, r3): the r2 bookie it is.
        strict = make_policy(Topology(locs), seed=seed, minNumRacksPerWriteQuorum=3)
        assert locs[strict.replace_bookie(4, 3, 2, None, wide, "10.0.1.1:3181", no_r1_r4)] == "/r2"
