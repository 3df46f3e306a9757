"""The soak on the namespace test bed (docs/reliability.md, "The soak on namespaces"): ``python -m bench.soak --netns``
or ``make soak-netns MINUTES=N`` (root).

The same writer, stream, batch jobs, sampling, growth rule, picture and exactly-once check as the loopback soak
(bench/soak.py, :func:`bench.soak.soak`), on hosts in network namespaces instead of loopback and fault proxies
(tests/harness/netns_cluster.py): ZooKeeper and the client on rack 0, four Python bookies in two racks (two each),
each bookie's journal and ledger directory on disks of their own (loop devices), the journal synced before every
acknowledgement. Placement is
rack-aware (the operator's topology script), so a ledger of ensemble 3 spans both racks.

This process builds the bed from the machine's own namespace, then moves its main thread into the client host's
(:meth:`tests.harness.netns.Testbed.entered`): the writer's thread, Spark's JVM (py4j's driver and JVM must share a
loopback) and its Python workers are all born there. The faults are the kernel's (:data:`NETNS_FAULT_KINDS`), made by
the campaign's :class:`~tests.campaign.netns_schedule.BedFaults` with parameters drawn by its
:func:`~tests.campaign.netns_schedule.fault_params`, one at a time, seeded; some network outages last 30 to 40 s,
longer than every client timeout (5 s). What each fault did is recorded beside it (``fault_log``) and summed per
kind (``fault_outcomes``).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.soak import HOLD_S, Bed, FaultSchedule, Writer, _log, conclude, soak
from tests.campaign.netns_schedule import BedFaults, NetnsStats, fault_params
from tests.harness import loop_disk, netns
from tests.harness.netns_cluster import ZK_PORT, NetnsCluster

__all__ = ["LONG_HOLD_KINDS", "NETNS_FAULT_KINDS", "NetnsFault", "NetnsFaults", "draw_netns_fault", "run_netns"]

#: The namespace soak's fault kinds, each drawn as often: a bookie host's link down; one direction between the client
#: and a bookie dropped (client -> bookie, bookie -> client); the client cut off ZooKeeper (both ways); a whole rack
#: of bookies cut off; packet faults on one bookie's packets (delay with jitter, loss, reordering, duplication,
#: corruption); a bookie killed with -9; a power cut (the journal's fault point drops the unsynced batch); a slow
#: fsync (the kernel's block throttle on its journal's loop device); its journal's disk full; its ledger disk full.
NETNS_FAULT_KINDS = (
    "link-down", "drop-to-bookie", "drop-from-bookie", "zk-cut", "rack-cut",
    "delay", "loss", "reorder", "duplicate", "corrupt",
    "kill", "power-cut", "slow-fsync", "journal-full", "ledger-full",
)  # fmt: skip
#: Network faults of which a share (:data:`LONG_HOLD_SHARE`) lasts :data:`LONG_HOLD_S`: outages longer than the
#: client's timeouts, not only a few seconds.
LONG_HOLD_KINDS = ("link-down", "drop-to-bookie", "drop-from-bookie", "zk-cut", "rack-cut")
LONG_HOLD_S = (30.0, 40.0)
LONG_HOLD_SHARE = 0.4
RACKS = 2
BOOKIES_PER_RACK = 2
#: The client settings of the loopback soak (bench/soak.py ``CLIENT_CONF``) beside the bed's placement settings; the
#: bookies' BookieIds are their addresses, so no resolver setting is needed.
CLIENT_CONF = {"addEntryTimeoutSec": 5, "readEntryTimeoutSec": 5, "explicitLacInterval": 500}
#: How long a power-cut bookie is given to reach its armed group commit before it is cut the plain way (kill -9).
POWER_CUT_WAIT_S = 60.0
_COLOURS = {
    **dict.fromkeys(("link-down", "drop-to-bookie", "drop-from-bookie", "rack-cut"), "tab:blue"),
    **dict.fromkeys(("delay", "loss", "reorder", "duplicate", "corrupt"), "tab:purple"),
    "zk-cut": "tab:red",
    **dict.fromkeys(("slow-fsync", "journal-full", "ledger-full"), "tab:green"),
}
_CAPTION = ("faults: blue a link down, one-way drop or rack cut; purple packet faults at one bookie;\n"
            "red the client cut off ZooKeeper; green a slow or full journal disk, a full ledger disk; grey a bookie killed or power-cut")


@dataclass(frozen=True)
class NetnsFault:
    """One drawn fault: its kind, its bookie (None: the client and ZooKeeper), how long it holds (s), and what
    :class:`~tests.campaign.netns_schedule.BedFaults` needs beside (the rack of a rack cut, a packet fault's share and
    times, a throttle's writes a second, a power cut's group commit)."""

    kind: str
    bookie: int | None
    hold: float
    params: dict[str, Any]


def draw_netns_fault(rng: random.Random, racks: list[int]) -> NetnsFault:
    """The next fault of the schedule from ``rng``, on bookies whose racks are ``racks`` (bookie i on ``racks[i]``):
    a pure function of the generator's state."""
    kind = rng.choice(NETNS_FAULT_KINDS)
    bookie = rng.randrange(len(racks))
    long = kind in LONG_HOLD_KINDS and rng.random() < LONG_HOLD_SHARE
    hold = rng.uniform(*(LONG_HOLD_S if long else HOLD_S))
    params = fault_params(rng, kind.replace("-", "_"), rack=racks[bookie])
    return NetnsFault(kind, None if kind == "zk-cut" else bookie, hold, params)


class NetnsFaults(FaultSchedule):
    """The namespace soak's schedule: every ``every`` seconds one fault of :func:`draw_netns_fault`, made on the bed
    by the campaign's :class:`BedFaults` and healed after its hold (a heal lifts every grudge and packet fault,
    throttle and full disk, and starts a killed bookie again); a bookie a fault left dead (one that lost ZooKeeper
    for good) is started again after the heal. A power cut restarts the bookie armed, waits for it to cut its own
    power, holds it down, starts it unarmed."""

    def __init__(self, cluster: NetnsCluster, writer: Writer, every: float, seed: int) -> None:
        super().__init__(every, seed)
        self.cluster = cluster
        self.writer = writer
        self.stats = NetnsStats()
        self.bed_faults = BedFaults(cluster, self.stats)
        self.racks = [cluster.bed.hosts[host].rack for host in cluster.hosts]
        #: Per kind: what its faults did, summed (the writer's failures and acknowledged rows while each held, ...).
        self.outcomes: dict[str, Counter[str]] = {}
        self._next: NetnsFault | None = None

    def draw(self) -> tuple[str, int | None, float]:
        self._next = draw_netns_fault(self.rng, self.racks)
        return self._next.kind, self._next.bookie, self._next.hold

    def make(self, kind: str, target: int | None, hold: float) -> dict[str, Any]:
        fault = self._next
        assert fault is not None and fault.kind == kind
        writer = self.writer
        failures, acked, reopened = writer.failures, len(writer.acked), writer.clients_reopened
        effects = Counter(self.stats.disk_effects) + Counter(self.stats.packet_effects)
        outcome: dict[str, Any] = {k: v for k, v in fault.params.items() if k != "seed"}
        if kind == "power-cut":
            outcome["power_cut_fired"] = self._power_cut(fault)
        else:
            self.bed_faults.apply(kind.replace("-", "_"), {"bookie": fault.bookie or 0, "duration": hold, **fault.params})
            self.stop.wait(hold)
            self.bed_faults.heal()
        outcome["bookies_started_after_the_heal"] = self.start_dead_bookies()
        outcome["writer_failures"] = writer.failures - failures
        outcome["rows_acknowledged_meanwhile"] = len(writer.acked) - acked
        outcome["writer_clients_reopened"] = writer.clients_reopened - reopened
        done = Counter(self.stats.disk_effects) + Counter(self.stats.packet_effects)
        done.subtract(effects)
        outcome["effects"] = {k: v for k, v in done.items() if v}
        summed = self.outcomes.setdefault(kind, Counter())
        for key in ("writer_failures", "rows_acknowledged_meanwhile", "writer_clients_reopened",
                    "bookies_started_after_the_heal"):
            summed[key] += outcome[key]
        summed["power cuts fired"] += int(bool(outcome.get("power_cut_fired")))
        summed.update(outcome["effects"])
        _log(f"fault: {kind} lifted: {outcome}")
        return outcome

    def _power_cut(self, fault: NetnsFault) -> bool:
        """Bookie ``fault.bookie`` restarted armed at its ``at_batch``-th group commit; whether the cut fired within
        :data:`POWER_CUT_WAIT_S` (else it is killed -9, a plain crash). Down for the hold, then started unarmed."""
        assert fault.bookie is not None
        i = fault.bookie
        bookie = self.cluster.bookies[i]
        with self.bed_faults.lock:
            with bookie.power_cut_armed(fault.params["at_batch"]):
                self.cluster.restart(i)
        deadline = time.monotonic() + POWER_CUT_WAIT_S
        while bookie.is_alive and time.monotonic() < deadline and not self.stop.is_set():
            time.sleep(0.1)
        fired = not bookie.is_alive
        if not fired:
            assert bookie.process is not None
            bookie.process.kill()
        self.stop.wait(fault.hold)
        self.cluster.start(i, timeout=120)
        return fired

    def start_dead_bookies(self) -> int:
        """Start every bookie not running (after a heal: one that gave up on ZooKeeper); how many."""
        started = 0
        for i, bookie in enumerate(self.cluster.bookies):
            if not bookie.is_alive:
                self.cluster.start(i, timeout=120)
                started += 1
        return started

    def lift_all(self) -> None:
        """After the run: every fault lifted, every bookie running."""
        self.bed_faults.heal()
        self.start_dead_bookies()

    def report(self) -> dict[str, Any]:
        """The run's JSON beside the common figures: what the faults did, per kind and in total."""
        return {
            "fault_outcomes": {kind: dict(counts) for kind, counts in sorted(self.outcomes.items())},
            "fault_effects": {"disk": dict(self.stats.disk_effects), "packet": dict(self.stats.packet_effects)},
        }


def unavailable_reason() -> str | None:
    """Why the namespace soak cannot run here (one line), or None."""
    return (netns.unavailable_reason() or netns.packet_faults_unavailable_reason() or loop_disk.unavailable_reason()
            or loop_disk.throttle_unavailable_reason())


def run_netns(args: argparse.Namespace) -> int:
    """The soak on the namespace test bed; 1 on a failure (as :func:`bench.soak.run`), 2 when it cannot run here."""
    if (reason := unavailable_reason()) is not None:
        print(f"soak --netns cannot run here: {reason}", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="bkspark-soak-netns-"))
    try:
        with NetnsCluster(base, racks=RACKS, bookies_per_rack=BOOKIES_PER_RACK, journal_sync_data=True,
                          journal_disks=True, ledger_disks=True) as cluster:
            made: list[NetnsFaults] = []

            def make_faults(writer: Writer) -> NetnsFaults:
                made.append(NetnsFaults(cluster, writer, args.fault_every, args.seed))
                return made[0]

            def report() -> dict[str, Any]:
                hosts = {name: {"address": h.address, "rack": h.rack_name} for name, h in cluster.bed.hosts.items()}
                return {"bed": {"hosts": hosts, "client_conf": bed.client_conf}, **made[0].report()}

            bed = Bed(cluster.metadata_service_uri, cluster.client_conf(**CLIENT_CONF), cluster, ZK_PORT, base,
                      make_faults, lambda: made[0].lift_all(), extra=report, fault_caption=_CAPTION,
                      fault_colours=_COLOURS)
            _log(f"bed: {len(cluster.bookies)} bookies on {RACKS} racks; ZooKeeper {cluster.zookeeper.connect_string}")
            with cluster.bed.entered("client"):
                result = soak(args, bed)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return conclude(result, Path(args.out))
