"""One schedule of the campaign on the namespace test bed: faults made by the kernel (docs/reliability.md,
"The campaign on namespaces").

The bookies, ZooKeeper and the client are hosts in network namespaces (tests/harness/netns_cluster.py), each
bookie's journal on a disk of its own (a loop device) and synced before every acknowledgement. A seed draws the
ledger's quorums, the number of entries and one to three faults from :data:`FAULT_KINDS`, each at a moment of the
write and for a duration (a power cut: armed before the writer starts, fired at a drawn group commit, down for the
duration); the writer (bkspark's client, on the client host) keeps writing through them. Then the bed is healed, another client recovers the ledger (fencing it) and reads it all; every operation
goes into the :class:`~tests.campaign.history.History` that the campaign's checker judges. Same seed, same
schedule (:func:`plan_netns_schedule` is a pure function of it); the timing against the writer's progress varies
with the machine's load, as it does for Jepsen.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.campaign.history import History, check
from tests.campaign.schedule import Stats
from tests.harness.netns import wait_until
from tests.harness.loop_disk import LoopDisk
from tests.harness.netns_cluster import NetnsCluster
from tests.harness.python_bookie import PythonBookie

__all__ = [
    "BOOKIE_FAULT_KINDS", "FAULT_KINDS", "LEDGER_DISK_FAULT_KINDS", "NETWORK_FAULT_KINDS", "PACKET_FAULT_KINDS", "BedFaults", "NetnsPlan",
    "NetnsStats", "fault_params", "plan_netns_schedule", "run_netns_schedule",
]

#: Kernel-level network faults a schedule draws from. ``loss`` is iptables' random drop (the kernel here may lack
#: netem).
NETWORK_FAULT_KINDS = ("link_down", "drop_to_bookie", "drop_from_bookie", "zk_cut", "rack_cut", "loss")
#: A bookie's process or its journal's disk: kill -9; a power cut (the journal's fault point that loses the unsynced
#: batch, then SIGKILL); a slow fsync (the kernel's block throttle on the journal's loop device); the journal's disk
#: full (ENOSPC from the kernel; the heal frees it and restarts the bookie, whose failed journal refuses writes).
BOOKIE_FAULT_KINDS = ("kill", "power_cut", "slow_fsync", "journal_full")
#: Packet faults on what a bookie sends or receives (tests/harness/netns.py ``packet_fault``: netem where the kernel
#: has it, else iptables ``TEE`` for duplicates and an NFQUEUE handler that holds or changes packets).
PACKET_FAULT_KINDS = ("delay", "reorder", "duplicate", "corrupt")
FAULT_KINDS = NETWORK_FAULT_KINDS + PACKET_FAULT_KINDS + BOOKIE_FAULT_KINDS
#: Faults :class:`BedFaults` makes that the campaign does not draw (its bookies have no ledger disks of their own):
#: a bookie's ledger disk full (ENOSPC from the kernel; the heal frees it and restarts the bookie). The soak on
#: namespaces draws it (bench/soak_netns.py).
LEDGER_DISK_FAULT_KINDS = ("ledger_full",)
#: A power cut fires at the bookie's 1st to 25th group commit after it was armed.
POWER_CUT_BATCHES = (1, 25)
#: Writes per second the throttled journal disk takes: 1 makes one fdatasync outlast ``addEntryTimeoutSec``.
SLOW_FSYNC_IOPS = (1, 3, 10, 30)
#: What a throttled bookie's journal syncs are counted against: bucket bounds (ms) of its sync-latency histogram
#: (``bookie_journal_JOURNAL_SYNC``), read before the throttle is lifted.
SLOW_SYNC_BOUNDS_MS = ((100.0, "journal syncs over 100 ms"), (1000.0, "journal syncs over 1 s"))
#: The client's settings: short per-request timeouts so that a silent bookie is given up on within a fault.
CLIENT_CONF = {"addEntryTimeoutSec": 2, "readEntryTimeoutSec": 2, "speculativeReadTimeout": 300, "zkTimeout": 60}
#: ``CAMPAIGN_NETNS_LONG=1``: faults last 30 to 45 s (longer than every client timeout), not 0.5 to 3 s.
LONG_FAULTS = os.environ.get("CAMPAIGN_NETNS_LONG", "") not in ("", "0")
#: The range a fault's hold time is drawn from (seconds), long and short: the plan's own numbers.
LONG_FAULT_HOLD_S = (30.0, 45.0)
SHORT_FAULT_HOLD_S = (0.5, 3.0)
#: Seconds every bookie has, after the last heal, to be up and registered again.
REREGISTER_SECONDS = 60.0
#: Seconds after which an add that neither completed nor failed counts as hung (every fault is lifted by then).
ADD_HANG_SECONDS = 120.0


@dataclass
class NetnsPlan:
    """What a seed decides."""

    seed: int
    write_quorum: int
    ack_quorum: int
    entries: int
    #: (seconds after the first add, kind, parameters), in time order.
    faults: list[tuple[float, str, dict[str, Any]]]


@dataclass
class NetnsStats(Stats):
    """The proxy campaign's totals that apply here (power cuts armed count as faults, ``power_cuts_fired`` those
    that cut), and the ensemble changes the faults caused."""

    ensemble_changes: int = 0
    #: What the disk faults did: journal syncs the throttle made slower than 1 s, bookies a full journal turned
    #: read-only.
    disk_effects: Counter[str] = field(default_factory=Counter)
    #: What the packet faults did, as their heal counted it ("<kind>: <counter>", e.g. "corrupt: corrupted").
    packet_effects: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        totals = super().as_dict()
        shared = ("schedules", "faults", "power_cuts_fired", "entries_acknowledged", "entries_verified", "failures")
        return {key: totals[key] for key in shared} | {
            "disk_effects": dict(sorted(self.disk_effects.items())),
            "packet_effects": dict(sorted(self.packet_effects.items())),
            "ensemble_changes": self.ensemble_changes,
        }


def plan_netns_schedule(seed: int, bookies: int, racks: int, long_faults: bool = LONG_FAULTS) -> NetnsPlan:
    """The schedule of ``seed`` on ``bookies`` bookies over ``racks`` racks (one bookie per rack: index = rack - 1)."""
    rng = random.Random(f"netns-{seed}")
    write_quorum = rng.choice((2, 3))
    ack_quorum = rng.choice([a for a in (2, 3) if a <= write_quorum])
    faults: list[tuple[float, str, dict[str, Any]]] = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(FAULT_KINDS)
        duration = rng.uniform(*(LONG_FAULT_HOLD_S if long_faults else SHORT_FAULT_HOLD_S))
        bookie = rng.randrange(bookies)
        params = {"duration": duration, "bookie": bookie, **fault_params(rng, kind, rack=bookie + 1)}
        faults.append((rng.uniform(0.0, 1.5), kind, params))
    faults.sort(key=lambda f: f[0])
    return NetnsPlan(seed, write_quorum, ack_quorum, rng.randint(40, 120), faults)


def fault_params(rng: random.Random, kind: str, rack: int) -> dict[str, Any]:
    """What one fault of ``kind`` (:data:`FAULT_KINDS`) on a bookie of ``rack`` needs beside its bookie and duration,
    drawn from ``rng`` (:meth:`BedFaults.apply` reads them); the soak on namespaces (bench/soak_netns.py) draws its
    faults' parameters here too."""
    params: dict[str, Any] = {}
    if kind == "rack_cut":
        params["rack"] = rack
    elif kind == "loss":
        params["probability"] = rng.choice((0.05, 0.2, 0.5))
    elif kind in PACKET_FAULT_KINDS:
        params["direction"] = rng.choice(("in", "out"))
        params["seed"] = rng.randrange(1 << 31)  # the queue handler's own draws
        if kind == "delay":
            params["delay_ms"] = rng.choice((20.0, 100.0, 300.0))
            params["jitter_ms"] = params["delay_ms"] / 2
        elif kind == "reorder":
            params["probability"] = rng.choice((0.25, 0.5))
            params["delay_ms"] = rng.choice((20.0, 100.0))
        else:
            params["probability"] = rng.choice((0.05, 0.2, 0.5) if kind == "duplicate" else (0.05, 0.2))
    elif kind == "power_cut":
        params["at_batch"] = rng.randint(*POWER_CUT_BATCHES)
    elif kind == "slow_fsync":
        params["iops"] = rng.choice(SLOW_FSYNC_IOPS)
    return params


class BedFaults:
    """Applies a plan's faults on the bed; each standing fault is lifted after its duration (one fault at a time
    holds the bed: the heal of one lifts every grudge, as Jepsen's does). Power cuts are armed before the writer
    starts and restarted by a watcher of their own (:meth:`arm_power_cut`)."""

    def __init__(self, cluster: NetnsCluster, stats: NetnsStats) -> None:
        self.cluster = cluster
        self.stats = stats
        self.lock = threading.Lock()
        self.killed: set[int] = set()
        self.throttled: set[int] = set()
        self.packet_faulted: set[int] = set()
        #: Bookie -> its disk a fault filled (its journal's or its ledgers').
        self.filled: dict[int, LoopDisk] = {}
        #: Bookies armed with a power cut that has not fired (the final heal restarts them unarmed).
        self.armed: set[int] = set()
        self.watchers: list[threading.Thread] = []

    def arm_power_cut(self, params: dict[str, Any], writing_done: threading.Event) -> None:
        """Restart bookie ``params["bookie"]`` armed to cut its power at its ``at_batch``-th group commit; once it
        has, it stays down for the drawn duration and starts again unarmed."""
        i = params["bookie"]
        bookie = self.cluster.bookies[i]
        assert isinstance(bookie, PythonBookie), "only Python bookies have the journal's power-cut fault point"
        with self.lock:
            if bookie.process is not None and bookie.process.is_alive:
                bookie.process.kill()
            with bookie.power_cut_armed(params["at_batch"]):
                self.cluster.start(i)
            self.armed.add(i)

        def restart_after_the_cut() -> None:
            while bookie.is_alive and not writing_done.is_set():
                time.sleep(0.02)
            with self.lock:
                if bookie.is_alive or i not in self.armed or i in self.killed:
                    return  # never reached its group commit, or a kill fault took it first: the heal restarts it
                self.armed.discard(i)
                self.stats.power_cuts_fired += 1
            time.sleep(params["duration"])
            with self.lock:
                if bookie.is_alive:
                    return
                stale = self.cluster.registration_owner(i)
                bookie.launch()
            # Another fault may still cut the bookie off ZooKeeper: then it gives up starting and exits (as Apache
            # BookKeeper's does), and is left to the heal like a killed one.
            wait_until(lambda: not bookie.is_alive or self.cluster.is_serving(i, stale), ADD_HANG_SECONDS,
                       f"bookie {i} to start again after its power cut or give up\n{bookie.log_tail(20)}")
            with self.lock:
                if not bookie.is_alive and i not in self.killed:
                    self.stats.disk_effects["bookies that could not start during another fault"] += 1
                    self.killed.add(i)

        watcher = threading.Thread(target=restart_after_the_cut, name=f"power-cut-{i}", daemon=True)
        watcher.start()
        self.watchers.append(watcher)

    def apply(self, kind: str, params: dict[str, Any]) -> None:
        bed, i = self.cluster.bed, params["bookie"]
        host = self.cluster.hosts[i]
        with self.lock:
            if kind in PACKET_FAULT_KINDS or kind == "loss":  # a packet fault of the test bed's: its heal counts it
                self.packet_faulted.add(i)
            if kind == "link_down":
                bed.link_down(host)
            elif kind == "drop_to_bookie":
                bed.drop(["client"], [host])
            elif kind == "drop_from_bookie":
                bed.drop([host], ["client"])
            elif kind == "zk_cut":
                bed.partition(["client"], ["zk"])
            elif kind == "rack_cut":
                bed.cut_rack(params["rack"])
            elif kind == "loss":
                bed.loss(host, params["probability"])
            elif kind == "delay":
                bed.delay(host, params["delay_ms"], params["jitter_ms"], params["direction"], params["seed"])
            elif kind == "reorder":
                bed.reorder(host, params["probability"], params["delay_ms"], params["direction"], params["seed"])
            elif kind == "duplicate":
                bed.duplicate(host, params["probability"], params["direction"])
            elif kind == "corrupt":
                bed.corrupt(host, params["probability"], params["direction"], params["seed"])
            elif kind == "kill":
                process = self.cluster.bookies[i].process
                if process is not None and process.is_alive:
                    process.kill()
                    self.killed.add(i)
            elif kind == "slow_fsync":
                self.cluster.journal_disks[i].throttle_writes(params["iops"])
                self.throttled.add(i)
            elif kind in ("journal_full", "ledger_full"):
                disk = (self.cluster.journal_disks if kind == "journal_full" else self.cluster.ledger_disks)[i]
                disk.fill()
                self.filled[i] = disk

    def heal(self) -> None:
        """Lift every standing fault: grudges, throttles, full disks (their bookies restarted: a failed journal
        refuses writes until then), killed bookies started again."""
        with self.lock:
            self.cluster.bed.heal()
            for i in sorted(self.packet_faulted):  # what the packet faults just lifted did (netns.py counts it)
                for kind, counters in self.cluster.bed.packet_report(self.cluster.hosts[i]).items():
                    for name, value in counters.items():
                        if name != "median_hold_ms":
                            self.stats.packet_effects[f"{kind}: {name}"] += int(value)
            self.packet_faulted.clear()
            for i in sorted(self.throttled):
                for bound_ms, label in SLOW_SYNC_BOUNDS_MS:
                    try:
                        self.stats.disk_effects[label] += self.cluster.journal_syncs_slower_than(i, bound_ms)
                    except OSError:  # not up (killed, cut its power, restarting): its counts are gone with it
                        break
                self.cluster.journal_disks[i].throttle_writes(0)
            self.throttled.clear()
            for i, disk in sorted(self.filled.items()):
                if self.cluster.bookies[i].is_alive and self.cluster.is_read_only(i):
                    which = "journal" if disk is self.cluster.journal_disks.get(i) else "ledger disk"
                    self.stats.disk_effects[f"bookies read-only from a full {which}"] += 1
                disk.unfill()
            restart = self.killed | set(self.filled)
            self.armed -= restart  # restarted unarmed below
            for i in sorted(restart):
                self.cluster.restart(i)
            self.killed.clear()
            self.filled.clear()

    def disarm(self) -> None:
        """After the writer and the last heal: every watcher has finished; a bookie whose power cut never fired is
        restarted unarmed (a kill -9 loses nothing synced), one that could not start is started."""
        for watcher in self.watchers:
            watcher.join()
        with self.lock:
            for i in sorted(self.armed | self.killed):
                self.cluster.restart(i)
            self.armed.clear()
            self.killed.clear()


def _drive(plan: NetnsPlan, faults: BedFaults, stats: NetnsStats, t0: float, stop: threading.Event) -> None:
    """Apply each fault at its moment and heal the bed when its duration ends (a heal lifts every standing fault);
    runs on a thread of its own, so that faults come and go on time whatever the writer is waiting for."""
    events: list[tuple[float, int, str, dict[str, Any]]] = []
    for at, kind, params in plan.faults:
        if kind == "power_cut":
            continue  # armed before the writer started
        events.append((at, 1, kind, params))
        events.append((at + params["duration"], 0, "heal", params))
    for due, _, kind, params in sorted(events, key=lambda e: (e[0], e[1])):
        if stop.wait(max(0.0, due - (time.monotonic() - t0))):
            return
        if kind == "heal":
            faults.heal()
        else:
            faults.apply(kind, params)
            stats.faults[kind] += 1


def run_netns_schedule(seed: int, cluster: NetnsCluster, stats: NetnsStats) -> tuple[list[str], History, NetnsPlan]:
    """Run schedule ``seed``; the checker's findings (empty when every promise held), the history and the plan."""
    plan = plan_netns_schedule(seed, len(cluster.bookies), len(cluster.bookies))
    history = History()
    faults = BedFaults(cluster, stats)
    stats.schedules += 1
    lid: int | None = None
    stop = threading.Event()
    writing_done = threading.Event()
    driver: threading.Thread | None = None
    try:
        for _, kind, params in plan.faults:
            if kind == "power_cut":
                stats.faults[kind] += 1
                faults.arm_power_cut(params, writing_done)
        with cluster.client(**CLIENT_CONF) as bk:
            lh = bk.create_ledger(3, plan.write_quorum, plan.ack_quorum)
            lid = lh.ledger_id
            window: list[tuple[str, Any]] = []

            def settle(process: str, future: Any) -> None:
                try:
                    entry = future.result(timeout=ADD_HANG_SECONDS)
                except TimeoutError:
                    hung.append(process)
                    history.log(process, "info", "add", lid)
                    return
                except Exception:  # noqa: BLE001 - failed or lost: the add's outcome is unknown
                    history.log(process, "info", "add", lid)
                    return
                stats.acknowledged += 1
                history.log(process, "ok", "add", lid, entry)

            hung: list[str] = []
            rng = random.Random(f"payload-{seed}")
            driver = threading.Thread(
                target=_drive, args=(plan, faults, stats, time.monotonic(), stop), name=f"faults-{seed}", daemon=True
            )
            driver.start()
            for i in range(plan.entries):
                payload = f"{seed}:{i}:".encode() + rng.randbytes(rng.randint(0, 200))
                process = f"add-{i}"
                history.log(process, "invoke", "add", lid, (lid, payload))
                try:
                    window.append((process, lh.append_async(payload)))
                except Exception:  # noqa: BLE001 - the handle refuses (a failed writer)
                    history.log(process, "info", "add", lid)
                    break
                while len(window) > 8:
                    settle(*window.pop(0))
                time.sleep(rng.uniform(0, 0.03))
            for process, future in window:
                settle(process, future)
            writing_done.set()
            driver.join()  # every fault has come and gone
            if hung:
                return [f"seed {seed}: adds neither completed nor failed within {ADD_HANG_SECONDS:g} s after "
                        f"every fault was lifted: {hung[:5]}"], history, plan
    finally:
        stop.set()
        writing_done.set()
        if driver is not None:
            driver.join()
        faults.heal()
        faults.disarm()
    # The bed is whole again for the next schedule: every bookie up and registered (one whose ZooKeeper session
    # expired during a long fault registers again once it reconnects, after the heal).
    deadline = time.monotonic() + REREGISTER_SECONDS
    while (down := [b.bookie_id for i, b in enumerate(cluster.bookies) if not cluster.is_serving(i)]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.5)
    if down:
        for i in range(len(cluster.bookies)):  # whole for the schedules after, whatever this one found
            if not cluster.bookies[i].is_alive:
                cluster.start(i)
        return [f"seed {seed}: bookies not serving after every fault was lifted: {down}"], history, plan
    if lid is None:
        return [f"seed {seed}: the writer never created its ledger"], history, plan
    # Another client recovers (fences) the ledger the writer left open, and reads it all.
    history.log("recover", "invoke", "recover", lid)
    with cluster.client(**CLIENT_CONF) as bk:
        rh = bk.open_ledger(lid, recovery=True)
        last = rh.last_add_confirmed
        history.log("recover", "ok", "recover", lid, last)
        entries = {e.entry_id: bytes(e.payload) for e in (rh.read(0, last) if last >= 0 else [])}
        stats.ensemble_changes += len(bk.get_ledger_metadata(lid).ensembles) - 1
    history.log("reader", "ok", "read", lid, {"entries": entries, "last": last, "after_close": True})
    stats.verified += len(entries)
    problems = check(history)
    stats.failures += [f"seed {seed}: {p}" for p in problems]
    return problems, history, plan
