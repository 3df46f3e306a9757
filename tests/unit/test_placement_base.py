"""The shared read order, the random policy and policy selection by configuration."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkspark.errors import InvalidOptionError, NotEnoughBookiesError
from bkspark.placement import RandomEnsemblePlacementPolicy, policy_class, policy_from_conf
from bkspark.placement.base import (
    EnsemblePlacementPolicy,
    EnsembleRequest,
    ReadCategory,
    Replacement,
    order_for_read,
    order_for_read_lac,
    read_category,
)
from bkspark.placement.rackaware import RackawareEnsemblePlacementPolicy
from bkspark.placement.regionaware import RegionAwareEnsemblePlacementPolicy

BOOKIES = [f"10.0.0.{i}:3181" for i in range(1, 9)]


@settings(max_examples=200, deadline=None)
@given(
    ensemble=st.permutations(BOOKIES).map(lambda p: p[:6]),
    write_set=st.permutations(range(6)).flatmap(lambda p: st.integers(1, 6).map(lambda n: list(p[:n]))),
    writable=st.sets(st.sampled_from(BOOKIES)),
    readonly=st.sets(st.sampled_from(BOOKIES)),
    failures=st.dictionaries(st.sampled_from(BOOKIES), st.integers(-1, 50)),
)
def test_read_order_is_writable_then_failed_then_readonly_then_gone(
    ensemble: list[str],
    write_set: list[int],
    writable: set[str],
    readonly: set[str],
    failures: dict[str, int],
) -> None:
    readonly = readonly - writable
    order = order_for_read(ensemble, write_set, failures, writable, readonly)
    assert sorted(order) == sorted(write_set)
    cats = [read_category(ensemble[i], writable, readonly, failures) for i in order]
    assert cats == sorted(cats)
    for a, b in zip(order, order[1:]):
        ca = read_category(ensemble[a], writable, readonly, failures)
        cb = read_category(ensemble[b], writable, readonly, failures)
        if ca == cb == ReadCategory.LOCAL_FAIL:
            assert failures[ensemble[a]] <= failures[ensemble[b]]
            if failures[ensemble[a]] == failures[ensemble[b]]:
                assert write_set.index(a) < write_set.index(b)
        elif ca == cb:
            assert write_set.index(a) < write_set.index(b)
    lac = order_for_read_lac(len(ensemble), order)
    assert lac[: len(order)] == order and sorted(lac) == list(range(len(ensemble)))


def test_read_order_example() -> None:
    ensemble = ["w1", "w2", "ro", "gone", "w3"]
    order = order_for_read(ensemble, [3, 2, 1, 0, 4], {"w2": 9, "w3": 4}, {"w1", "w2", "w3"}, {"ro"})
    assert order == [0, 4, 1, 2, 3]


@settings(max_examples=100, deadline=None)
@given(
    writable=st.sets(st.sampled_from(BOOKIES)),
    e=st.integers(1, 8),
    exclude=st.sets(st.sampled_from(BOOKIES)),
    seed=st.integers(0, 100),
)
def test_random_policy_picks_distinct_writable_unexcluded_bookies(
    writable: set[str], e: int, exclude: set[str], seed: int
) -> None:
    policy = RandomEnsemblePlacementPolicy().initialize({}, rng=random.Random(seed))
    policy.on_cluster_changed(writable, set())
    pool = writable - exclude
    if len(pool) < e:
        with pytest.raises(NotEnoughBookiesError):
            policy.new_ensemble(e, 1, 1, exclude=exclude)
        return
    ensemble = policy.new_ensemble(e, 1, 1, exclude=exclude)
    assert len(set(ensemble)) == e and set(ensemble) <= pool
    rest = pool - set(ensemble)
    victim = ensemble[0]
    if not rest:
        with pytest.raises(NotEnoughBookiesError):
            policy.replace_bookie(e, 1, 1, None, ensemble, victim, exclude)
    else:
        assert policy.replace_bookie(e, 1, 1, None, ensemble, victim, exclude) in rest


class _FirstWritable(EnsemblePlacementPolicy):
    """A user's policy: the first writable bookies in sorted order; it records the requests it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[EnsembleRequest] = []

    def _choose_ensemble(self, request: EnsembleRequest) -> list[str]:
        self.requests.append(request)
        return self._candidates(request.exclude)[: request.ensemble_size]

    def _choose_replacement(self, request: Replacement) -> str:
        self.requests.append(request)
        return self._candidates(request.taken)[0]


def test_a_users_policy_implements_two_hooks_and_gets_the_argument_checks_and_one_request() -> None:
    """docs/placement.md: a policy of one's own implements ``_choose_ensemble`` and ``_choose_replacement``;
    ``new_ensemble`` and ``replace_bookie`` check the arguments for it and hand them over as one request."""
    policy = _FirstWritable().initialize({})
    policy.on_cluster_changed({"a:1", "b:1", "c:1", "d:1"}, set())
    with pytest.raises(TypeError, match="custom_metadata"):
        policy.new_ensemble(2, 2, 2, {"a:1"})  # type: ignore[arg-type]  # a set taken for custom metadata
    with pytest.raises(InvalidOptionError):
        policy.new_ensemble(2, 3, 2)  # Qw > E
    with pytest.raises(TypeError, match="exclude"):
        policy.new_ensemble(2, 2, 2, None, "a:1")  # type: ignore[arg-type]
    assert policy.requests == []  # nothing reached the policy
    assert policy.new_ensemble(2, 2, 1, {"app": b"x"}, exclude=["a:1"]) == ["b:1", "c:1"]
    assert policy.replace_bookie(2, 2, 1, None, ["b:1", "c:1"], "b:1", {"d:1"}) == "a:1"
    ensemble_request, replacement = policy.requests
    assert ensemble_request == EnsembleRequest(2, 2, 1, {"app": b"x"}, frozenset({"a:1"}))
    assert replacement.current_ensemble == ("b:1", "c:1") and replacement.bookie_to_replace == "b:1"
    assert replacement.taken == {"b:1", "c:1", "d:1"}


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        (None, RandomEnsemblePlacementPolicy),
        ("random", RandomEnsemblePlacementPolicy),
        ("org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy", RandomEnsemblePlacementPolicy),
        ("rackaware", RackawareEnsemblePlacementPolicy),
        ("org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy", RackawareEnsemblePlacementPolicy),
        ("org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicyImpl", RackawareEnsemblePlacementPolicy),
        ("regionaware", RegionAwareEnsemblePlacementPolicy),
        ("org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy", RegionAwareEnsemblePlacementPolicy),
        ("bkspark.placement.rackaware:RackawareEnsemblePlacementPolicy", RackawareEnsemblePlacementPolicy),
        ("bkspark.placement.regionaware.RegionAwareEnsemblePlacementPolicy", RegionAwareEnsemblePlacementPolicy),
    ],
)
def test_policy_from_conf_accepts_java_short_and_python_names(name: str | None, cls: type) -> None:
    conf = {"ignoreLocalNodeInPlacementPolicy": "true"}
    if name is not None:
        conf["ensemblePlacementPolicy"] = name
    policy = policy_from_conf(conf)
    assert type(policy) is cls and policy.initialized


def test_unknown_policy_names_the_key_and_the_choices() -> None:
    with pytest.raises(InvalidOptionError) as info:
        policy_class("org.example.NoSuchPolicy")
    text = str(info.value)
    assert "ensemblePlacementPolicy" in text and "rackaware" in text and "RegionAwareEnsemblePlacementPolicy" in text
    with pytest.raises(InvalidOptionError):
        policy_from_conf({"ensemblePlacementPolicy": "bkspark.errors:BKError"})


def test_options_arrive_as_strings_from_spark() -> None:
    policy = policy_from_conf(
        {
            "ensemblePlacementPolicy": "rackaware",
            "minNumRacksPerWriteQuorum": "3",
            "enforceMinNumRacksPerWriteQuorum": "true",
            "ignoreLocalNodeInPlacementPolicy": "true",
        }
    )
    assert isinstance(policy, RackawareEnsemblePlacementPolicy)
    assert policy.min_racks_per_write_quorum == 3 and policy.enforce_min_racks
    with pytest.raises(InvalidOptionError):
        policy_from_conf({"ensemblePlacementPolicy": "rackaware", "minNumRacksPerWriteQuorum": "many"})


def test_keys_take_the_bkc_prefix_and_any_case_when_the_exact_spelling_is_absent(tmp_path: Path) -> None:
    """docs/placement.md, "Policies": a ``bkc.`` prefix is accepted, and keys match case-insensitively (as Spark
    lower-cases them) when the exact spelling is absent; the exact spelling wins."""
    spark_keys = {"ensembleplacementpolicy": "rackaware", "ignorelocalnodeinplacementpolicy": "true"}
    policy = policy_from_conf({**spark_keys, "bkc.minNumRacksPerWriteQuorum": "3", "ENFORCEMINNUMRACKSPERWRITEQUORUM": "1"})
    assert isinstance(policy, RackawareEnsemblePlacementPolicy)
    assert policy.min_racks_per_write_quorum == 3 and policy.enforce_min_racks
    exact = policy_from_conf(
        {"ensemblePlacementPolicy": "rackaware", "minNumRacksPerWriteQuorum": 1, "minnumracksperwritequorum": 3,
         "bkc.minNumRacksPerWriteQuorum": 4, "ignoreLocalNodeInPlacementPolicy": True}
    )
    assert exact.min_racks_per_write_quorum == 1  # type: ignore[attr-defined]
    # The doc's example: bookkeeper.networkTopologyScriptFileName reaches the policy lower-cased.
    script = tmp_path / "topology.sh"
    script.write_text('#!/bin/sh\nfor h in "$@"; do echo /rack-x; done\n')
    script.chmod(0o755)
    spark_style = policy_from_conf({**spark_keys, "networktopologyscriptfilename": str(script)})
    spark_style.on_cluster_changed({"10.0.0.1:3181"}, set())
    assert spark_style.locations() == {"10.0.0.1:3181": "/rack-x"}
