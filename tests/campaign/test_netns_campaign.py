"""The campaign on the namespace test bed (docs/reliability.md, "The campaign on namespaces"): one test per seed
over one shared cluster of hosts in network namespaces (each bookie's journal on a loop device of its own),
kernel-level network and disk faults, power cuts, the campaign's checker.

``make test`` runs ``CAMPAIGN_NETNS_SCHEDULES`` (default 5) schedules from ``CAMPAIGN_NETNS_FIRST_SEED`` (default
1); ``make campaign NETNS_SCHEDULES=200`` runs more; ``CAMPAIGN_NETNS_SEEDS=17,42`` runs exactly those seeds (a
failing schedule prints its replay line); ``CAMPAIGN_NETNS_LONG=1`` makes every fault last 30 to 45 s;
``CAMPAIGN_NETNS_STATS=path.json`` writes the run's totals.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.campaign.netns_schedule import (
    ADD_HANG_SECONDS,
    BOOKIE_FAULT_KINDS,
    CLIENT_CONF,
    FAULT_KINDS,
    LONG_FAULT_HOLD_S,
    PACKET_FAULT_KINDS,
    POWER_CUT_BATCHES,
    SLOW_FSYNC_IOPS,
    BedFaults,
    NetnsStats,
    plan_netns_schedule,
    run_netns_schedule,
)
from tests.harness import loop_disk
from tests.harness.netns import packet_faults_unavailable_reason, unavailable_reason, wait_until
from tests.harness.netns_cluster import NetnsCluster

pytestmark = [pytest.mark.campaign, pytest.mark.integration, pytest.mark.fault, pytest.mark.netns]

RACKS = 4


def _seeds() -> list[int]:
    explicit = os.environ.get("CAMPAIGN_NETNS_SEEDS", "").strip()
    if explicit:
        return [int(s) for s in explicit.replace(",", " ").split()]
    count = int(os.environ.get("CAMPAIGN_NETNS_SCHEDULES", "5"))
    first = int(os.environ.get("CAMPAIGN_NETNS_FIRST_SEED", "1"))
    return list(range(first, first + count))


def replay_command(seed: int) -> str:
    return f"CAMPAIGN_NETNS_SEEDS={seed} .venv/bin/python -m pytest tests/campaign/test_netns_campaign.py -q"


@pytest.fixture(scope="module")
def netns_stats() -> Iterator[NetnsStats]:
    totals = NetnsStats()
    yield totals
    text = json.dumps(totals.as_dict(), indent=2)
    out = os.environ.get("CAMPAIGN_NETNS_STATS")
    if out:
        Path(out).write_text(text + "\n")
    print(f"\nnamespace campaign totals: {text}")


@pytest.fixture(scope="module")
def netns_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsCluster]:
    reason = (
        unavailable_reason() or packet_faults_unavailable_reason() or loop_disk.unavailable_reason()
        or loop_disk.throttle_unavailable_reason()
    )
    if reason:
        pytest.skip(reason)
    with NetnsCluster(
        tmp_path_factory.mktemp("netns-campaign"), racks=RACKS, bookies_per_rack=1, journal_sync_data=True,
        journal_disks=True,
    ) as cluster:
        yield cluster


def test_a_seed_reproduces_its_schedule_and_the_kinds_are_all_drawn() -> None:
    """A schedule is a pure function of its seed; over 200 seeds every fault kind is drawn."""
    assert plan_netns_schedule(17, RACKS, RACKS) == plan_netns_schedule(17, RACKS, RACKS)
    assert plan_netns_schedule(17, RACKS, RACKS) != plan_netns_schedule(18, RACKS, RACKS)
    drawn = {kind for seed in range(200) for _, kind, _ in plan_netns_schedule(seed, RACKS, RACKS).faults}
    assert drawn == set(FAULT_KINDS)
    # The packet, bookie and disk faults too: each one's own parameters (a queue handler's seed, the power cut's
    # group commit, the throttled disk's writes a second) come from the seed alone, and stay in their ranges.
    for kind in PACKET_FAULT_KINDS + BOOKIE_FAULT_KINDS:
        seed = next(s for s in range(200) if kind in {k for _, k, _ in plan_netns_schedule(s, RACKS, RACKS).faults})
        assert plan_netns_schedule(seed, RACKS, RACKS) == plan_netns_schedule(seed, RACKS, RACKS)
    for seed in range(200):
        for _, kind, params in plan_netns_schedule(seed, RACKS, RACKS).faults:
            assert 0 <= params["bookie"] < RACKS
            if kind == "power_cut":
                assert POWER_CUT_BATCHES[0] <= params["at_batch"] <= POWER_CUT_BATCHES[1]
            elif kind == "slow_fsync":
                assert params["iops"] in SLOW_FSYNC_IOPS
            elif kind in PACKET_FAULT_KINDS:
                assert params["direction"] in ("in", "out") and 0 <= params["seed"] < 1 << 31
    # The plan's own numbers (how long each drawn fault is to be held), nothing measured on this machine: a long
    # plan draws every hold from the long range, and every one outlasts the client's timeouts.
    long_plan = plan_netns_schedule(17, RACKS, RACKS, long_faults=True)
    holds = sorted(params["duration"] for _, _, params in long_plan.faults)
    low, high = LONG_FAULT_HOLD_S
    assert holds and low <= holds[0] and holds[-1] <= high
    assert holds[0] > max(CLIENT_CONF["addEntryTimeoutSec"], CLIENT_CONF["readEntryTimeoutSec"])


@pytest.mark.parametrize("seed", _seeds(), ids=lambda s: f"seed-{s}")
def test_netns_schedule(seed: int, netns_cluster: NetnsCluster, netns_stats: NetnsStats, tmp_path: Path) -> None:
    try:
        problems, history, plan = run_netns_schedule(seed, netns_cluster, netns_stats)
    except Exception as exc:
        netns_stats.failures.append(f"seed {seed} crashed: {type(exc).__name__}: {exc}")
        raise AssertionError(f"schedule {seed} crashed; replay with: {replay_command(seed)}") from exc
    if problems:
        dump = tmp_path / "history.txt"
        dump.write_text("\n".join(repr(op) for op in history.ops))
        pytest.fail(
            f"schedule {seed} ({plan}) broke BookKeeper's promises:\n  " + "\n  ".join(problems[:20])
            + f"\nhistory: {dump}\nreplay with: {replay_command(seed)}"
        )


def test_a_bookie_that_cannot_start_after_its_power_cut_is_started_by_the_heal(
    netns_cluster: NetnsCluster, netns_stats: NetnsStats
) -> None:
    """Seeds 34, 83 and 916 of the first 1,000-schedule run, made certain: a bookie cut off from ZooKeeper (its
    rack was, in seed 916) cuts its power. Started again, it cannot reach ZooKeeper and exits; the heal starts it
    (the harness once left it down for the schedules after, docs/reliability.md)."""
    cluster, i = netns_cluster, RACKS - 1
    bookie = cluster.bookies[i]
    faults = BedFaults(cluster, netns_stats)
    writing_done = threading.Event()
    faults.arm_power_cut({"bookie": i, "at_batch": 1, "duration": 0.5}, writing_done)
    try:
        cluster.bed.partition([cluster.hosts[i]], ["zk"])  # it still takes adds from the client
        with cluster.client(**CLIENT_CONF) as bk:
            lh = bk.create_ledger(3, 3, 2)
            while bookie.bookie_id not in lh.metadata.last_ensemble:
                lh.close()
                lh = bk.create_ledger(3, 3, 2)
            lh.append(b"the add that cuts its power")  # acknowledged by the two others
            wait_until(lambda: i in faults.killed, ADD_HANG_SECONDS,
                       f"the bookie to cut its power, then give up starting without ZooKeeper\n{bookie.log_tail(10)}")
            assert netns_stats.disk_effects["bookies that could not start during another fault"] >= 1
    finally:
        writing_done.set()
        faults.heal()
        faults.disarm()
    assert cluster.is_serving(i)
