"""The namespace test bed itself (tests/harness/netns.py): skipped with a reason where it cannot run, no route out
of 198.18.0.0/15, grudges applied and healed, every namespace gone after a failure, stale ones of a dead run
cleaned."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import threading

import pytest

from tests.harness import netns
from tests.harness.netns import PREFIX, Testbed, clean_stale, unavailable_reason

pytestmark = [pytest.mark.integration, pytest.mark.netns]


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.fixture
def root_only() -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)


def test_the_reason_to_skip_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert unavailable_reason() == "network-namespace tests need root (ip netns, iptables); this process is not root"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "iptables" else "/usr/sbin/" + tool)
    assert unavailable_reason() == "network-namespace tests need `iptables` (make setup installs iproute2 and iptables)"


def _listen(bed: Testbed, host: str, port: int) -> socket.socket:
    def bind() -> socket.socket:
        s = socket.socket()
        s.bind((bed.address_of(host), port))
        s.listen(16)
        return s

    return bed.call_in(host, bind)


def _connect(bed: Testbed, host: str, address: str, port: int, timeout: float = 2.0) -> str:
    def attempt() -> str:
        try:
            socket.create_connection((address, port), timeout=timeout).close()
            return "ok"
        except socket.timeout:
            return "timeout"
        except OSError as exc:
            return errno.errorcode.get(exc.errno or 0, str(exc))

    return bed.call_in(host, attempt)


def test_hosts_reach_each_other_across_racks_and_nothing_outside_198_18(root_only: None) -> None:
    with Testbed() as bed:
        bed.add_host("a", 1)
        bed.add_host("b", 2)
        bed.add_host("c", 1)
        server = _listen(bed, "b", 4000)
        try:
            assert _connect(bed, "a", bed.address_of("b"), 4000) == "ok"  # routed between racks
            assert _connect(bed, "c", bed.address_of("b"), 4000) == "ok"
            # No route but 198.18.0.0/15: an address of any other network is unreachable at once.
            assert _connect(bed, "a", "192.0.2.1", 80) == "ENETUNREACH"
            bed.drop(["a"], ["b"])  # one way: a's packets never reach b
            assert _connect(bed, "a", bed.address_of("b"), 4000, timeout=1.0) == "timeout"
            assert _connect(bed, "c", bed.address_of("b"), 4000) == "ok"
            bed.heal()
            assert _connect(bed, "a", bed.address_of("b"), 4000) == "ok"
            bed.cut_rack(2)
            assert _connect(bed, "c", bed.address_of("b"), 4000, timeout=1.0) == "timeout"
            bed.heal()
            bed.link_down("b")
            assert _connect(bed, "a", bed.address_of("b"), 4000, timeout=1.0) == "timeout"
            bed.heal()
            assert _connect(bed, "a", bed.address_of("b"), 4000) == "ok"
        finally:
            bed.call_in("b", server.close)


def test_every_namespace_goes_even_when_building_fails(root_only: None) -> None:
    mine: list[str] = []
    with pytest.raises(ValueError, match="outside 0..255"):
        with Testbed() as bed:
            bed.add_host("a", 1)
            mine = [n for n in _namespaces() if n.startswith(f"{PREFIX}-{os.getpid()}-{bed.id}-")]
            assert len(mine) == 2  # the router and the host
            bed.add_host("b", 300)
    assert set(mine) & _namespaces() == set()


def test_namespaces_of_a_run_that_died_are_cleaned_and_a_live_runs_kept(root_only: None) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"{PREFIX}-{dead.pid}-1-router"
    live = f"{PREFIX}-{os.getpid()}-999-router"
    for name in (stale, live):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert stale in clean_stale()
        assert stale not in _namespaces() and live in _namespaces()
    finally:
        for name in (stale, live):
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def test_a_call_in_a_namespace_leaves_the_calling_thread_where_it_was(root_only: None) -> None:
    own = os.readlink("/proc/thread-self/ns/net")
    with Testbed() as bed:
        bed.add_host("a", 1)
        inside = bed.call_in("a", lambda: os.readlink("/proc/thread-self/ns/net"))
        assert inside != own and os.readlink("/proc/thread-self/ns/net") == own
        started_inside: list[str] = []

        def spawn() -> None:
            t = threading.Thread(target=lambda: started_inside.append(os.readlink("/proc/thread-self/ns/net")))
            t.start()
            t.join()

        bed.call_in("a", spawn)
        assert started_inside == [inside]  # threads started there stay there
    assert netns.PREFIX == "bkn"
