"""Kernel-level faults on hosts in network namespaces (tests/harness/netns.py, docs/reliability.md, "The namespace
test bed").

ZooKeeper, the client and four Python bookies (one per rack) are hosts of their own on 198.18.0.0/15. Each test
writes a ledger (E=3, Qw=2, Qa=2, rack-aware placement from the topology script) while a fault made by the kernel
is on, heals it, closes the ledger and reads it back from a new client; every operation goes into a Jepsen-style
history that tests/campaign/history.py judges: nothing acknowledged is lost, nothing unacknowledged appears.
``NETNS_FAULT_SECONDS`` (default 6) says how long each fault lasts while the writer keeps writing; 30 and more
runs the outages past every client timeout.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bkspark.client import BookKeeper
from tests.campaign.history import History, check
from tests.harness.deadline import GENEROUS
from tests.harness.netns import packet_faults_unavailable_reason, unavailable_reason
from tests.harness.netns_cluster import NetnsCluster

pytestmark = [pytest.mark.integration, pytest.mark.fault, pytest.mark.netns]

FAULT_SECONDS = float(os.environ.get("NETNS_FAULT_SECONDS", "6"))
#: Short per-request timeouts, so that a silent peer is given up on within a fault's seconds.
CLIENT_CONF = {"addEntryTimeoutSec": 2, "readEntryTimeoutSec": 2}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NetnsCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with NetnsCluster(tmp_path, racks=4, bookies_per_rack=1) as c:
        yield c


class Writer:
    """Appends to one ledger with up to 8 adds in flight, logging each as invoke then ok / info in a history."""

    def __init__(self, bk: BookKeeper, history: History, ensemble_size: int = 3, qw: int = 2, qa: int = 2) -> None:
        self.bk = bk
        self.history = history
        self.lh = bk.create_ledger(ensemble_size, qw, qa)
        self.ledger_id = self.lh.ledger_id
        self.count = 0
        self.acked = 0
        #: Each acknowledged add's latency (append to acknowledgement), by its number.
        self.latency_s: dict[int, float] = {}
        #: The numbers of the adds started while the fault was on (set by :func:`run_under_fault`).
        self.fault_span = range(0)
        self._window: list[tuple[str, Any]] = []

    def _settle(self, process: str, future: Any) -> None:
        try:
            entry = future.result(timeout=120)
        except Exception:  # noqa: BLE001 - a failed or lost add: its outcome is unknown
            self.history.log(process, "info", "add", self.ledger_id)
            return
        self.acked += 1
        self.history.log(process, "ok", "add", self.ledger_id, entry)

    def _timed(self, number: int, started: float, future: Any) -> None:
        if not future.cancelled() and future.exception() is None:
            self.latency_s[number] = time.monotonic() - started

    def median_latency_ms(self, numbers: range) -> float:
        """The median latency of the acknowledged adds among ``numbers``, in milliseconds."""
        return round(statistics.median(self.latency_s[n] for n in numbers if n in self.latency_s) * 1000, 1)

    def write(self, n: int) -> None:
        for _ in range(n):
            self.write_one()

    def write_one(self) -> None:
        payload = b"%d:%d:" % (self.ledger_id, self.count) + os.urandom(16)
        process = f"add-{self.count}"
        self.count += 1
        self.history.log(process, "invoke", "add", self.ledger_id, (self.ledger_id, payload))
        number, started = self.count - 1, time.monotonic()
        try:
            future = self.lh.append_async(payload)
            future.add_done_callback(lambda f: self._timed(number, started, f))
            self._window.append((process, future))
        except Exception:  # noqa: BLE001 - the handle refuses (failed writer)
            self.history.log(process, "info", "add", self.ledger_id)
            return
        while len(self._window) > 8:
            self._settle(*self._window.pop(0))

    def write_for(self, seconds: float) -> int:
        """Keep writing for ``seconds``; the number of adds started."""
        started, before = time.monotonic(), self.count
        while time.monotonic() - started < seconds:
            self.write_one()
            time.sleep(0.01)
        return self.count - before

    def drain(self) -> None:
        while self._window:
            self._settle(*self._window.pop(0))

    def close(self) -> None:
        self.drain()
        self.lh.close()


def read_back(cluster: NetnsCluster, history: History, ledger_id: int, process: str) -> dict[int, bytes]:
    """Open the closed ledger from a new client on the client host and read it all; logged as a final read."""
    with cluster.client(**CLIENT_CONF) as bk:
        rh = bk.open_ledger(ledger_id)
        last = rh.last_add_confirmed
        entries = {e.entry_id: bytes(e.payload) for e in (rh.read(0, last) if last >= 0 else [])}
    history.log(process, "ok", "read", ledger_id, {"entries": entries, "last": last, "after_close": True})
    return entries


def run_under_fault(
    cluster: NetnsCluster,
    fault: Callable[[list[str]], None],
    *,
    before: int = 20,
    history: History | None = None,
    keep: Callable[[list[str]], bool] = lambda ensemble: True,
    before_heal: Callable[[], None] = lambda: None,
) -> tuple[History, Writer, list[str]]:
    """Write ``before`` entries (on new ledgers until ``keep(ensemble)`` holds), apply ``fault(ensemble)`` and keep
    writing for FAULT_SECONDS, ``before_heal()``, heal, write 20 more, close, read back; the history, the writer (its
    ledger's metadata tells the ensemble changes) and the ensemble the fault hit."""
    history = history or History()
    with cluster.client(**CLIENT_CONF) as bk:
        while True:
            writer = Writer(bk, history)
            writer.write(before)
            writer.drain()
            ensemble = list(writer.lh.metadata.last_ensemble)
            if keep(ensemble):
                break
            writer.close()
            read_back(cluster, history, writer.ledger_id, f"reader-{writer.ledger_id}")
        fault(ensemble)
        first = writer.count
        try:
            writer.write_for(FAULT_SECONDS)
            writer.drain()
        finally:
            writer.fault_span = range(first, writer.count)
            try:
                before_heal()
            finally:
                cluster.bed.heal()
        writer.write(20)
        writer.close()
    read_back(cluster, history, writer.ledger_id, "reader")
    return history, writer, ensemble


def test_a_bookies_link_down_changes_ensemble_and_loses_nothing(cluster: NetnsCluster) -> None:
    """A pulled cable (the bookie's port on its rack's bridge down): its TCP connections go silent, adds time out,
    the writer replaces it; after the heal a read of the closed ledger has every acknowledged entry."""
    victim: list[str] = []

    def fault(ensemble: list[str]) -> None:
        victim.append(ensemble[0])
        cluster.bed.link_down(cluster.host_of(ensemble[0]))

    history, writer, ensemble = run_under_fault(cluster, fault)
    assert check(history) == []
    with cluster.client() as bk:
        md = bk.get_ledger_metadata(writer.ledger_id)
    assert len(md.ensembles) >= 2 and victim[0] not in md.last_ensemble, md.ensembles
    assert writer.acked == writer.count  # every add went through, on the new ensemble


def test_reads_of_a_closed_ledger_heal_from_another_replica_while_a_bookie_is_cut_off(cluster: NetnsCluster) -> None:
    """The link of one bookie of a closed ledger is down: every entry (two replicas each) is still read, from the
    other replica, after a read timeout on the silent one."""
    history = History()
    with cluster.client(**CLIENT_CONF) as bk:
        writer = Writer(bk, history)
        writer.write(30)
        writer.close()
        ensemble = list(writer.lh.metadata.last_ensemble)
    cluster.bed.link_down(cluster.host_of(ensemble[1]))
    try:
        entries = read_back(cluster, history, writer.ledger_id, "reader-during-link-down")
    finally:
        cluster.bed.heal()
    assert len(entries) == 30
    assert check(history) == []


@pytest.mark.parametrize("direction", ["client-to-bookie", "bookie-to-client"])
def test_a_one_way_partition_between_client_and_bookie_changes_ensemble_and_loses_nothing(
    cluster: NetnsCluster, direction: str
) -> None:
    """Packets one way dropped by iptables at the receiver (the other way still flows): the connection is as good as
    dead, adds to that bookie time out, the writer replaces it, nothing acknowledged is lost."""
    victim: list[str] = []

    def fault(ensemble: list[str]) -> None:
        victim.append(ensemble[1])
        bookie_host = cluster.host_of(ensemble[1])
        if direction == "client-to-bookie":
            cluster.bed.drop(["client"], [bookie_host])
        else:
            cluster.bed.drop([bookie_host], ["client"])

    history, writer, _ = run_under_fault(cluster, fault)
    assert check(history) == []
    with cluster.client() as bk:
        md = bk.get_ledger_metadata(writer.ledger_id)
    assert len(md.ensembles) >= 2 and victim[0] not in md.last_ensemble, md.ensembles
    assert writer.acked == writer.count


def test_appends_go_on_while_the_client_is_cut_from_zookeeper_only(cluster: NetnsCluster) -> None:
    """Client and ZooKeeper cannot reach each other (both ways), the bookies are fine: adds to an open ledger need
    no metadata, so they all complete during the cut; the close, which writes metadata, completes after the heal."""

    def fault(ensemble: list[str]) -> None:
        cluster.bed.partition(["client"], ["zk"])

    history, writer, ensemble = run_under_fault(cluster, fault)
    assert check(history) == []
    assert writer.acked == writer.count
    with cluster.client() as bk:
        md = bk.get_ledger_metadata(writer.ledger_id)
    assert list(md.ensembles.values()) == [tuple(ensemble)]  # no ensemble change was needed


def test_a_rack_cut_off_moves_the_writes_to_the_other_racks_with_quorums_spanning_racks(cluster: NetnsCluster) -> None:
    """A whole rack cut off (its hosts reach only each other): its bookie is replaced by the spare rack's, and every
    write quorum of every ensemble still spans two racks (minNumRacksPerWriteQuorum's default)."""
    cut: list[int] = []

    def fault(ensemble: list[str]) -> None:
        host = cluster.bed.hosts[cluster.host_of(ensemble[2])]
        cut.append(host.rack)
        cluster.bed.cut_rack(host.rack)

    history, writer, _ = run_under_fault(cluster, fault)
    assert check(history) == []
    with cluster.client() as bk:
        md = bk.get_ledger_metadata(writer.ledger_id)
    assert len(md.ensembles) >= 2, md.ensembles
    assert all(cluster.bed.hosts[cluster.host_of(b)].rack != cut[0] for b in md.last_ensemble)
    for ens in md.ensembles.values():
        assert all(len(racks) == 2 for racks in cluster.racks_of_write_quorums(list(ens), 2)), ens
    assert writer.acked == writer.count


def test_packet_loss_at_a_bookie_slows_but_loses_nothing(cluster: NetnsCluster) -> None:
    """20 % of the packets arriving at one bookie of the ensemble dropped by the kernel (TCP retransmits them): the
    adds complete or the bookie is replaced; nothing acknowledged is lost."""

    struck: list[str] = []

    def fault(ensemble: list[str]) -> None:
        struck.append(cluster.host_of(ensemble[0]))
        cluster.bed.loss(struck[0], 0.2)

    history, writer, _ = run_under_fault(cluster, fault)
    assert cluster.bed.packet_report(struck[0])["loss"]["lost"] > 0
    assert check(history) == []
    assert writer.acked == writer.count


@pytest.fixture(scope="module")
def packet_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsCluster]:
    """One cluster for the five packet faults (each writes its own ledger, and heal leaves the bed as it was)."""
    reason = unavailable_reason() or packet_faults_unavailable_reason()
    if reason:
        pytest.skip(reason)
    with NetnsCluster(tmp_path_factory.mktemp("packet"), racks=4, bookies_per_rack=1) as c:
        yield c


#: The packet faults at a bookie (docs/reliability.md, "Packet faults without netem"): the arguments of
#: ``Testbed.packet_fault``, the fault's own counter that shows it acted, and the TCP counter (client and bookie
#: summed) that must move with it.
PACKET_FAULTS: dict[str, tuple[dict[str, Any], str, str]] = {
    "delay-jitter": ({"kind": "delay", "delay_ms": 200, "jitter_ms": 100}, "held", "TcpExt.TCPOFOQueue"),
    "loss": ({"kind": "loss", "probability": 0.1}, "lost", "Tcp.RetransSegs"),
    "reorder": ({"kind": "reorder", "probability": 0.25, "delay_ms": 20}, "reordered", "TcpExt.TCPOFOQueue"),
    "duplicate": ({"kind": "duplicate", "probability": 0.1}, "duplicated", "TcpExt.TCPDSACKOldSent"),
    "corrupt": ({"kind": "corrupt", "probability": 0.05}, "corrupted", "Tcp.InCsumErrors"),
}


@pytest.mark.parametrize("name", list(PACKET_FAULTS))
def test_packet_faults_at_a_bookie_lose_nothing(packet_cluster: NetnsCluster, name: str) -> None:
    """Delay with jitter, loss, reordering, duplication or corruption of every packet a bookie of the ensemble sends
    and receives, made by the kernel (netem where the kernel has it and the fault is on what the host sends; here
    iptables and a queue handler): the fault acted (its counter and the TCP counter it moves), TCP hides it from
    the client (retransmits, reorders, drops duplicates and corrupted segments), every add completes and nothing
    acknowledged is lost."""
    cluster = packet_cluster
    args, own, tcp_counter = PACKET_FAULTS[name]
    struck: list[str] = []
    hosts = ["client"]

    def counters() -> dict[str, int]:
        per_host = [cluster.bed.tcp_counters(h) for h in hosts]
        return {k: sum(c[k] for c in per_host) for k in per_host[0]}

    def fault(ensemble: list[str]) -> None:
        struck.append(cluster.host_of(ensemble[0]))
        hosts.append(struck[0])
        before.update(counters())
        cluster.bed.packet_fault(struck[0], **args, direction="both", seed=46)

    before: dict[str, int] = {}
    after: dict[str, int] = {}  # read before the heal: what the fault made TCP do
    history, writer, _ = run_under_fault(cluster, fault, before_heal=lambda: after.update(counters()))
    report = cluster.bed.packet_report(struck[0])[args["kind"]]
    shown = ("Tcp.RetransSegs", "Tcp.InCsumErrors", "TcpExt.TCPOFOQueue", "TcpExt.TCPDSACKOldSent")
    grew = {k: after[k] - before[k] for k in shown}
    print(f"{name}: {report} tcp {grew} adds {len(writer.fault_span)} during the fault, median latency "
          f"{writer.median_latency_ms(writer.fault_span)} ms (after the heal "
          f"{writer.median_latency_ms(range(writer.fault_span.stop, writer.count))} ms), "
          f"{len(writer.lh.metadata.ensembles)} ensemble(s)")
    assert report[own] > 0, report
    assert after[tcp_counter] > before[tcp_counter], grew
    assert check(history) == []
    assert writer.acked == writer.count


@pytest.fixture
def named_cluster(tmp_path: Path) -> Iterator[NetnsCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    names = {i: f"bookie-{i}.rack-{i + 1}" for i in range(3)}  # BP-41 BookieIds: names, not addresses
    with NetnsCluster(tmp_path, racks=3, bookies_per_rack=1, bookie_names=names) as c:
        yield c


def test_a_bookie_that_comes_back_on_another_address_is_found_by_its_bookie_id(named_cluster: NetnsCluster) -> None:
    """BP-41: a bookie registered under a name restarts on another address; the ledger's metadata still names it,
    and clients (one that knew the old address, one new) find it through its registration's service info: with the
    two other replicas cut off, every entry is read from it at its new address; new writes reach it too."""
    cluster = named_cluster
    history = History()
    moved = cluster.bookies[0].bookie_id
    old_address = cluster.bed.address_of(cluster.hosts[0])
    with cluster.client(**CLIENT_CONF) as bk:
        writer = Writer(bk, history, 3, 3, 3)
        writer.write(20)
        writer.close()
        assert moved in writer.lh.metadata.last_ensemble
        cluster.move_bookie(0, "198.18.1.99")
        assert cluster.bed.address_of(cluster.hosts[0]) != old_address
        cluster.bed.partition(["client"], cluster.hosts[1:])
        try:
            rh = bk.open_ledger(writer.ledger_id)
            old_client_read = {e.entry_id: bytes(e.payload) for e in rh.read(0, rh.last_add_confirmed)}
            history.log("old-client", "ok", "read", writer.ledger_id,
                        {"entries": old_client_read, "last": rh.last_add_confirmed, "after_close": True})
            read_back(cluster, history, writer.ledger_id, "new-client")
        finally:
            cluster.bed.heal()
        assert len(old_client_read) == 20
        after = Writer(bk, history, 3, 3, 3)
        after.write(10)
        after.close()
        assert moved in after.lh.metadata.last_ensemble and after.acked == 10
    read_back(cluster, history, after.ledger_id, "reader-after")
    assert check(history) == []


@pytest.fixture
def mixed_cluster(tmp_path: Path) -> Iterator[NetnsCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with NetnsCluster(tmp_path, racks=4, bookies_per_rack=1, java_bookies=1) as c:
        yield c


@pytest.mark.compat
def test_an_apache_bookkeeper_bookie_whose_link_goes_down_is_replaced_and_loses_nothing(mixed_cluster: NetnsCluster) -> None:
    """The same pulled cable on Apache BookKeeper's bookie (a JVM in its own namespace, beside three Python ones):
    the writer replaces it, every acknowledged entry reads back."""
    cluster = mixed_cluster
    java = cluster.bookies[-1].bookie_id
    # Placement is random, and a JVM's first adds may be slow enough to get it replaced: a ledger it is still in.
    history, writer, before = run_under_fault(
        cluster, lambda ensemble: cluster.bed.link_down(cluster.host_of(java)), keep=lambda ensemble: java in ensemble
    )
    with cluster.client() as bk:
        md = bk.get_ledger_metadata(writer.ledger_id)
    assert check(history) == []
    assert java in before and java not in md.last_ensemble, md.ensembles
    assert writer.acked == writer.count


def test_an_add_no_ensemble_can_take_fails_after_add_entry_quorum_timeout(cluster: NetnsCluster) -> None:
    """Two of the four bookies cut off for good (one each way), ack quorum 3: no ensemble of three reachable bookies
    exists. With ``addEntryQuorumTimeoutSec=10`` the add must fail with a typed error, not stay open."""
    from bkspark.errors import AddEntryQuorumTimeoutError

    with cluster.client(**CLIENT_CONF, addEntryQuorumTimeoutSec=10) as bk:
        lh = bk.create_ledger(3, 3, 3)
        for i in range(5):
            lh.append(b"before-%d" % i)
        ensemble = list(lh.metadata.last_ensemble)
        spare = next(b.bookie_id for b in cluster.bookies if b.bookie_id not in ensemble)
        cluster.bed.drop([cluster.host_of(ensemble[0])], ["client"])
        cluster.bed.drop(["client"], [cluster.host_of(spare)])
        try:
            future = lh.append_async(b"during")
            with pytest.raises(AddEntryQuorumTimeoutError):
                future.result(timeout=GENEROUS)
        finally:
            cluster.bed.heal()
