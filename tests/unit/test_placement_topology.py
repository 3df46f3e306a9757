"""Network topology, DNS-to-switch mappings (a real script), stabilization and last-known locations."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from bkspark.errors import InvalidOptionError, InvalidTopologyError
from bkspark.placement.dns import (
    DNSToSwitchMapping,
    ScriptBasedMapping,
    StaticMapping,
    dns_resolver_from_conf,
    host_of,
)
from bkspark.placement.rackaware import RackawareEnsemblePlacementPolicy
from bkspark.placement.regionaware import RegionAwareEnsemblePlacementPolicy
from bkspark.placement.topology import (
    DEFAULT_RACK,
    DEFAULT_REGION_AND_RACK,
    UNKNOWN_REGION,
    NetworkTopology,
    StabilizeNetworkTopology,
    normalize_location,
    region_of,
)
from tests.harness.deadline import GENEROUS, finishes_within


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_locations_normalize_like_nodebase() -> None:
    assert normalize_location("/r1/") == "/r1"
    assert normalize_location("") == ""
    with pytest.raises(InvalidTopologyError):
        normalize_location("r1")
    assert region_of("/east/r1") == "east"
    assert region_of(DEFAULT_REGION_AND_RACK) == UNKNOWN_REGION
    assert region_of("/r1") == UNKNOWN_REGION
    assert host_of("10.0.0.1:3181") == "10.0.0.1" and host_of("bookie-a") == "bookie-a"


def test_topology_scopes_racks_and_depth() -> None:
    t = NetworkTopology()
    t.add("a", "/east/r1")
    t.add("b", "/east/r2")
    t.add("c", "/west/r3")
    assert t.num_racks() == 3
    assert t.leaves("/east") == {"a", "b"}
    assert t.leaves("~/east") == {"c"}
    assert t.leaves("", exclude=["/east/r1", "/west"]) == {"b"}
    assert t.count_available("/east", ["a"]) == 1
    with pytest.raises(InvalidTopologyError):
        t.add("d", "/flat-rack")
    assert t.remove("a") == "/east/r1" and t.leaves("/east/r1") == set()
    t.add("b", "/west/r3")  # a move
    assert t.racks() == {"/west/r3"}


def test_stabilized_topology_delays_removals() -> None:
    clock = FakeClock()
    t = StabilizeNetworkTopology(10, clock)
    t.add("a", "/r1")
    t.add("b", "/r2")
    t.remove("b")
    assert t.num_racks() == 2 and t.pending_removals() == {"b"}
    clock.now += 5
    t.add("b", "/r2")  # came back in time: nothing happens
    clock.now += 20
    assert t.num_racks() == 2 and t.pending_removals() == set()
    t.remove("b")
    clock.now += 10
    assert t.num_racks() == 1 and "b" not in t


def test_policy_with_stabilize_period_keeps_a_flapping_bookies_rack() -> None:
    clock = FakeClock()
    mapping = StaticMapping(table={"10.0.0.1": "/r1", "10.0.0.2": "/r2"})
    policy = RackawareEnsemblePlacementPolicy().initialize(
        {"networkTopologyStabilizePeriodSeconds": 30, "ignoreLocalNodeInPlacementPolicy": True},
        dns_resolver=mapping,
        clock=clock,
    )
    policy.on_cluster_changed({"10.0.0.1:3181", "10.0.0.2:3181"}, set())
    assert policy.on_cluster_changed({"10.0.0.1:3181"}, set()) == {"10.0.0.2:3181"}
    assert policy.topology.num_racks() == 2
    # Gone bookies are never chosen, stabilized or not.
    assert policy.new_ensemble(1, 1, 1) == ["10.0.0.1:3181"]
    clock.now += 31
    assert policy.topology.num_racks() == 1


def write_script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "topology.sh"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_script_mapping_batches_names_and_caches(tmp_path: Path) -> None:
    calls = tmp_path / "calls.log"
    script = write_script(
        tmp_path,
        f'echo "$#" >> {calls}\nfor h in "$@"; do case "$h" in 10.0.1.*) echo /rack-1;; *) echo /rack-2;; esac; done\n',
    )
    mapping = ScriptBasedMapping({"networkTopologyScriptFileName": str(script), "networkTopologyScriptNumberArgs": 2})
    names = ["10.0.1.1", "10.0.2.1", "10.0.1.2", "10.0.2.2", "10.0.1.3"]
    assert mapping.resolve(names) == ["/rack-1", "/rack-2", "/rack-1", "/rack-2", "/rack-1"]
    assert calls.read_text().split() == ["2", "2", "1"]
    assert mapping.resolve(["10.0.1.1"]) == ["/rack-1"]
    assert calls.read_text().split() == ["2", "2", "1"]  # cached
    mapping.reload_cached_mappings()
    mapping.resolve(["10.0.1.1"])
    assert calls.read_text().split() == ["2", "2", "1", "1"]


@pytest.mark.parametrize(
    "body",
    ["exit 3\n", "echo /only-one\n", 'for h in "$@"; do echo /r; echo /extra; done\n'],
    ids=["fails", "too-few", "too-many"],
)
def test_script_failures_land_in_the_default_rack(tmp_path: Path, body: str) -> None:
    script = write_script(tmp_path, body)
    policy = RackawareEnsemblePlacementPolicy().initialize(
        {"networkTopologyScriptFileName": str(script), "ignoreLocalNodeInPlacementPolicy": True}
    )
    policy.on_cluster_changed({"10.0.0.1:3181", "10.0.0.2:3181"}, set())
    assert set(policy.locations().values()) == {DEFAULT_RACK}


def test_no_script_means_one_default_rack_and_region_default_differs() -> None:
    rack = RackawareEnsemblePlacementPolicy().initialize({"ignoreLocalNodeInPlacementPolicy": True})
    rack.on_cluster_changed({"10.0.0.1:3181"}, set())
    assert rack.locations() == {"10.0.0.1:3181": DEFAULT_RACK}
    region = RegionAwareEnsemblePlacementPolicy().initialize({"ignoreLocalNodeInPlacementPolicy": True})
    region.on_cluster_changed({"10.0.0.1:3181"}, set())
    assert region.locations() == {"10.0.0.1:3181": DEFAULT_REGION_AND_RACK}


def test_a_known_bookie_keeps_its_last_location_when_it_can_no_longer_be_resolved() -> None:
    """BookKeeper #2642 / #4439: a returning bookie must not drop into the default rack."""
    mapping = StaticMapping(table={"10.0.0.1": "/r1", "10.0.0.2": "/r2"})
    policy = RackawareEnsemblePlacementPolicy().initialize(
        {"ignoreLocalNodeInPlacementPolicy": True}, dns_resolver=mapping
    )
    policy.on_cluster_changed({"10.0.0.1:3181", "10.0.0.2:3181"}, set())
    policy.on_cluster_changed({"10.0.0.1:3181"}, set())
    del mapping.table["10.0.0.2"]
    policy.on_cluster_changed({"10.0.0.1:3181", "10.0.0.2:3181"}, set())
    assert policy.location_of("10.0.0.2:3181") == "/r2"
    assert policy.topology.num_racks() == 2

    def unresolvable(bookie: str) -> str:
        raise LookupError(bookie)

    policy.set_bookie_address_resolver(unresolvable)
    policy.on_cluster_changed({"10.0.0.1:3181"}, set())
    policy.on_cluster_changed({"10.0.0.1:3181", "10.0.0.2:3181"}, set())
    assert policy.location_of("10.0.0.2:3181") == "/r2"


def test_rack_change_moves_a_bookie() -> None:
    mapping = StaticMapping(table={"10.0.0.1": "/r1", "10.0.0.2": "/r2"})
    policy = RackawareEnsemblePlacementPolicy().initialize(
        {"ignoreLocalNodeInPlacementPolicy": True}, dns_resolver=mapping
    )
    policy.on_cluster_changed({"10.0.0.1:3181", "10.0.0.2:3181"}, set())
    mapping.add("10.0.0.2", "/r1")
    policy.on_bookie_rack_change(["10.0.0.2:3181"])
    assert policy.topology.racks() == {"/r1"}


class UpperMapping(DNSToSwitchMapping):
    """A custom mapping loaded by import path."""

    def __init__(self, conf: object) -> None:
        self.conf = conf

    def resolve(self, names: list[str]) -> list[str | None]:
        return ["/" + n.replace(".", "-") for n in names]


def test_dns_resolver_class_is_pluggable_by_import_path() -> None:
    mapping = dns_resolver_from_conf({"reppDnsResolverClass": f"{__name__}:UpperMapping"})
    assert isinstance(mapping, UpperMapping)
    assert isinstance(dns_resolver_from_conf({}), ScriptBasedMapping)
    assert isinstance(
        dns_resolver_from_conf({"reppDnsResolverClass": "org.apache.bookkeeper.net.ScriptBasedMapping"}),
        ScriptBasedMapping,
    )
    static = dns_resolver_from_conf(
        {"reppDnsResolverClass": "static", "networkTopologyStaticMapping": "h1=/r1, h2=/r2"}
    )
    assert static.resolve(["h2", "h3"]) == ["/r2", None]
    with pytest.raises(InvalidOptionError) as info:
        dns_resolver_from_conf({"reppDnsResolverClass": "no.such.Mapping"})
    assert "reppDnsResolverClass" in str(info.value)


def test_script_is_run_from_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = write_script(tmp_path, 'for h in "$@"; do echo "/$(basename "$PWD")"; done\n')
    monkeypatch.chdir(tmp_path)
    mapping = ScriptBasedMapping({"networkTopologyScriptFileName": str(script)})
    assert mapping.resolve(["x"]) == ["/" + os.path.basename(tmp_path)]


def test_bookies_on_one_host_can_sit_in_different_racks(tmp_path: Path) -> None:
    script = write_script(tmp_path, 'for b in "$@"; do echo "/rack-${b##*:}"; done\n')
    policy = RackawareEnsemblePlacementPolicy().initialize(
        {
            "networkTopologyScriptFileName": str(script),
            "networkTopologyResolveByBookieId": "true",
            "enforceMinNumRacksPerWriteQuorum": "true",
            "ignoreLocalNodeInPlacementPolicy": True,
        }
    )
    bookies = {f"127.0.0.1:{port}" for port in (3181, 3182, 3183)}
    policy.on_cluster_changed(bookies, set())
    assert policy.locations() == {b: "/rack-" + b.rsplit(":", 1)[1] for b in bookies}
    assert len({policy.location_of(b) for b in policy.new_ensemble(3, 2, 2)}) == 3


def test_a_hanging_script_is_killed_after_its_timeout_and_lands_in_the_default_rack(tmp_path: Path) -> None:
    """docs/placement.md, keys: networkTopologyScriptTimeoutSeconds (default 30) kills a hanging script; a timeout
    resolves the whole batch to "unknown", i.e. the default rack."""
    script = write_script(tmp_path, "exec sleep 600\n")
    assert ScriptBasedMapping({"networkTopologyScriptFileName": str(script)}).raw.timeout == 30  # type: ignore[attr-defined]
    policy = RackawareEnsemblePlacementPolicy().initialize(
        {"networkTopologyScriptFileName": str(script), "networkTopologyScriptTimeoutSeconds": "0.5",
         "ignoreLocalNodeInPlacementPolicy": True}
    )
    finishes_within(GENEROUS, lambda: policy.on_cluster_changed({"10.0.0.1:3181", "10.0.0.2:3181"}, set()))
    assert set(policy.locations().values()) == {DEFAULT_RACK}


def test_a_timed_out_script_is_killed_with_the_children_it_left_running(tmp_path: Path) -> None:
    """A script that runs a child without ``exec`` (its ``sleep`` keeps the output pipe open): the timeout still
    bounds the resolution, and the child is killed with the script (its process group), not left running."""
    marker = f"bkspark-topology-child-{os.getpid()}-{time.monotonic_ns()}"
    script = write_script(tmp_path, f'bash -c "exec -a {marker} sleep 600"\necho /never\n')
    mapping = ScriptBasedMapping({"networkTopologyScriptFileName": str(script), "networkTopologyScriptTimeoutSeconds": "0.5"})
    assert finishes_within(GENEROUS, lambda: mapping.resolve(["10.0.0.1"])) == [None]
    deadline = time.monotonic() + 5
    while _processes_named(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _processes_named(marker)


def _processes_named(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                continue
    return found


def test_the_script_gets_at_most_100_names_a_run_by_default(tmp_path: Path) -> None:
    """docs/placement.md: networkTopologyScriptNumberArgs (default 100) names per script run."""
    calls = tmp_path / "calls.log"
    script = write_script(tmp_path, f'echo "$#" >> {calls}\nfor h in "$@"; do echo /r; done\n')
    names = [f"10.0.{i // 200}.{i % 200}" for i in range(250)]
    assert ScriptBasedMapping({"networkTopologyScriptFileName": str(script)}).resolve(names) == ["/r"] * 250
    assert calls.read_text().split() == ["100", "100", "50"]


def test_script_answers_are_cached_until_on_bookie_rack_change_reloads_them(tmp_path: Path) -> None:
    """docs/placement.md, "Network locations": answers are cached until on_bookie_rack_change reloads them."""
    racks = tmp_path / "racks"
    racks.write_text("/rack-a\n")
    script = write_script(tmp_path, f'for h in "$@"; do cat {racks}; done\n')
    policy = RackawareEnsemblePlacementPolicy().initialize(
        {"networkTopologyScriptFileName": str(script), "ignoreLocalNodeInPlacementPolicy": True}
    )
    policy.on_cluster_changed({"10.0.0.1:3181", "10.0.0.2:3181"}, set())
    racks.write_text("/rack-b\n")
    policy.on_cluster_changed({"10.0.0.1:3181"}, set())
    policy.on_cluster_changed({"10.0.0.1:3181", "10.0.0.2:3181"}, set())  # 10.0.0.2 comes back: cached answer
    assert policy.locations() == {"10.0.0.1:3181": "/rack-a", "10.0.0.2:3181": "/rack-a"}
    policy.on_bookie_rack_change(["10.0.0.2:3181"])
    assert policy.locations() == {"10.0.0.1:3181": "/rack-a", "10.0.0.2:3181": "/rack-b"}


def test_bp41_names_resolve_through_the_bookie_address_resolver() -> None:
    """docs/placement.md: the mapping is given the host part of host:port BookieIds; set_bookie_address_resolver
    resolves BP-41 names (here through a registry-like table) instead."""
    mapping = StaticMapping(table={"10.0.0.1": "/r1", "10.0.0.2": "/r2", "bookie-a": "/wrong"})
    policy = RackawareEnsemblePlacementPolicy().initialize({"ignoreLocalNodeInPlacementPolicy": True}, dns_resolver=mapping)
    registry = {"bookie-a": "10.0.0.1", "bookie-b": "10.0.0.2"}
    policy.set_bookie_address_resolver(lambda bookie_id: registry[bookie_id])
    policy.on_cluster_changed({"bookie-a", "bookie-b"}, set())
    assert policy.locations() == {"bookie-a": "/r1", "bookie-b": "/r2"}
