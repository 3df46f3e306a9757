"""Hosts in Linux network namespaces: a test bed whose faults are made by the kernel (docs/reliability.md).

The fault proxy (tests/harness/proxy.py) breaks TCP streams in user space. Real networks fail below that: a cable
is pulled, a switch drops one direction, a rack goes dark. :class:`Testbed` builds such a network on one machine:

* every host (ZooKeeper, each bookie, the client) is a network namespace of its own with one interface ``eth0``
  and one address from 198.18.0.0/15, the range RFC 2544 sets aside for benchmarking: never a private nor a
  public one. Hosts have a route to 198.18.0.0/15 only, so nothing they send can leave for another network;
* a ``router`` namespace holds one bridge per rack (rack ``r`` is 198.18.r.0/24, its gateway 198.18.r.1) and
  forwards between them. Nothing is added to the machine's own namespace: no interface, no route, no rule;
* servers run inside their host with ``ip netns exec``; code of the test process enters a namespace on one
  thread (setns(2) moves only the calling thread, and threads it starts inherit it): :meth:`Testbed.call_in`;
* faults are Jepsen's "grudges": one call applies one (a link down, packets from some hosts dropped at a
  host's input by iptables, a rack cut off, packet loss), :meth:`Testbed.heal` lifts every one.

:meth:`Testbed.close` deletes every namespace (with it its interfaces, rules and processes' network) even after a
failure, and :func:`clean_stale` deletes those a crashed earlier run left, recognised by their prefix and the
pid of the run that made them. :func:`unavailable_reason` says in one line why the bed cannot be built here (not
root, no ``ip``/``iptables``), for ``pytest.skip``.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from bkspark.devcluster.process import ManagedProcess

__all__ = [
    "PREFIX",
    "Host",
    "NetnsProcess",
    "Testbed",
    "clean_stale",
    "netem_unavailable_reason",
    "unavailable_reason",
]

T = TypeVar("T")

#: Every namespace this harness makes is named ``PREFIX-<pid of the run>-<bed>-<host>``.
PREFIX = "bkn"
#: RFC 2544's benchmarking range: 198.18.0.0/15. Rack r is 198.18.r.0/24.
NETWORK = "198.18.0.0/15"
_NAME = re.compile(rf"^{PREFIX}-(\d+)-")
_CLONE_NEWNET = 0x40000000
_GRUDGE_CHAIN = "BKSPARK-GRUDGE"
_beds = iter(range(1, 1 << 30))
_beds_lock = threading.Lock()


class NetnsError(RuntimeError):
    """A command that builds or changes the test bed failed."""


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: exit {result.returncode}: {result.stderr.strip()}")
    return result


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be used here (one line), or None when they can."""
    if os.geteuid() != 0:
        return "network-namespace tests need root (ip netns, iptables); this process is not root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"network-namespace tests need `{tool}` (make setup installs iproute2 and iptables)"
    probe = f"{PREFIX}-{os.getpid()}-probe"
    made = _run(["ip", "netns", "add", probe], check=False)
    _run(["ip", "netns", "del", probe], check=False)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    return None


@functools.lru_cache(maxsize=1)
def netem_unavailable_reason() -> str | None:
    """Why ``tc netem`` cannot be used (the kernel lacks sch_netem, as some VM kernels do), or None."""
    probe = f"{PREFIX}-{os.getpid()}-netem"
    _run(["ip", "netns", "add", probe], check=False)
    try:
        result = _run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"], check=False)
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    if result.returncode != 0:
        return f"tc netem is not available in this kernel ({result.stderr.strip() or 'exit ' + str(result.returncode)})"
    return None


def _namespaces() -> list[str]:
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _delete_namespace(name: str) -> None:
    """Kill what runs in namespace ``name``, then delete it (its interfaces go with it)."""
    for pid in _run(["ip", "netns", "pids", name], check=False).stdout.split():
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            pass
    _run(["ip", "netns", "del", name], check=False)


def clean_stale() -> list[str]:
    """Delete the namespaces of earlier runs whose process is gone (a crash skipped their tear-down)."""
    stale = [n for n in _namespaces() if (m := _NAME.match(n)) and not _pid_alive(int(m.group(1)))]
    for name in stale:
        _delete_namespace(name)
    return stale


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def _call_in_namespace(name: str, fn: Callable[[], T], timeout: float) -> T:
    """Run ``fn`` on a new thread that first enters network namespace ``name``; its result or its error."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"netns-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"a call in namespace {name} still runs after {timeout:g} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]


class NetnsProcess(ManagedProcess):
    """A :class:`ManagedProcess` run inside a network namespace with ``ip netns exec`` (which execs the command:
    the pid, its process group and its signals are the command's own)."""

    def __init__(self, namespace: str, name: str, argv: Sequence[str], **kwargs: object) -> None:
        super().__init__(name, argv, **kwargs)  # type: ignore[arg-type]
        self.namespace = namespace

    def start(self) -> "NetnsProcess":
        argv = self.argv
        self.argv = ["ip", "netns", "exec", self.namespace, *argv]
        try:
            super().start()
        finally:
            self.argv = argv
        return self


@dataclass
class Host:
    """One host: a namespace with ``eth0`` on its rack's bridge."""

    name: str
    namespace: str
    rack: int
    index: int
    address: str
    #: The veth end in the router namespace (``v<n>``): setting it down is pulling the host's cable.
    port: str
    grudges: list[list[str]] = field(default_factory=list)

    @property
    def rack_name(self) -> str:
        """The host's network location as placement sees it (``/rack-<r>``)."""
        return f"/rack-{self.rack}"


class Testbed:
    """A router with one bridge per rack and hosts in namespaces; faults applied and healed in the kernel.

    Use as a context manager: the namespaces go away on exit, whatever happened.
    """

    __test__ = False  # not a test class, though its name starts with "Test"

    def __init__(self) -> None:
        clean_stale()
        with _beds_lock:
            self.id = next(_beds)
        self._base = f"{PREFIX}-{os.getpid()}-{self.id}"
        self.router = f"{self._base}-router"
        self.hosts: dict[str, Host] = {}
        self._racks: set[int] = set()
        self._ports = iter(range(1, 1 << 20))
        self._namespaces: list[str] = []
        try:
            self._make_namespace(self.router)
            self._ns(self.router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        except BaseException:
            self.close()
            raise

    # -- building -------------------------------------------------------------------------------------------------

    def _make_namespace(self, name: str) -> None:
        _run(["ip", "netns", "add", name])
        self._namespaces.append(name)
        self._ns(name, "ip", "link", "set", "lo", "up")

    def _ns(self, namespace: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run(["ip", "netns", "exec", namespace, *argv], check=check)

    def _rack(self, rack: int) -> None:
        if rack in self._racks:
            return
        if not 0 <= rack <= 255:
            raise ValueError(f"rack {rack} outside 0..255")
        bridge = f"br{rack}"
        self._ns(self.router, "ip", "link", "add", bridge, "type", "bridge")
        self._ns(self.router, "ip", "addr", "add", f"198.18.{rack}.1/24", "dev", bridge)
        self._ns(self.router, "ip", "link", "set", bridge, "up")
        self._racks.add(rack)

    def add_host(self, name: str, rack: int = 0) -> Host:
        """A new host on ``rack`` (its bridge made when first used), with the rack's next address."""
        if name in self.hosts:
            raise ValueError(f"host {name} exists")
        self._rack(rack)
        index = sum(1 for h in self.hosts.values() if h.rack == rack)
        host = Host(name, f"{self._base}-{name}", rack, index, f"198.18.{rack}.{10 + index}", f"v{next(self._ports)}")
        self._make_namespace(host.namespace)
        self._ns(self.router, "ip", "link", "add", host.port, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        self._ns(self.router, "ip", "link", "set", host.port, "master", f"br{rack}", "up")
        self._ns(host.namespace, "ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
        self._ns(host.namespace, "ip", "link", "set", "eth0", "up")
        self._ns(host.namespace, "ip", "route", "add", NETWORK, "via", f"198.18.{rack}.1")
        self._ns(host.namespace, "iptables", "-N", _GRUDGE_CHAIN)
        self._ns(host.namespace, "iptables", "-A", "INPUT", "-j", _GRUDGE_CHAIN)
        self.hosts[name] = host
        return host

    def close(self) -> None:
        """Delete every namespace of the bed (what runs in them is killed first)."""
        for name in reversed(self._namespaces):
            _delete_namespace(name)
        self._namespaces.clear()

    def __enter__(self) -> "Testbed":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- running ----------------------------------------------------------------------------------------------------

    def process(self, host: str, name: str, argv: Sequence[str], **kwargs: object) -> NetnsProcess:
        """A :class:`NetnsProcess` that runs ``argv`` on ``host`` (not started)."""
        return NetnsProcess(self.hosts[host].namespace, name, argv, **kwargs)

    def call_in(self, host: str | None, fn: Callable[[], T], timeout: float = 600.0) -> T:
        """``fn()`` on a thread inside ``host``'s namespace (None: the router, which reaches every host). Sockets,
        threads and processes it creates stay there: a client built here talks from that host."""
        return _call_in_namespace(self.router if host is None else self.hosts[host].namespace, fn, timeout)

    def reachable(self, address: str, port: int, timeout: float = 1.0) -> bool:
        """Whether ``address:port`` accepts a TCP connection, seen from the router."""

        def probe() -> bool:
            try:
                socket.create_connection((address, port), timeout=timeout).close()
                return True
            except OSError:
                return False

        return self.call_in(None, probe, timeout + 10)

    def address_of(self, host: str) -> str:
        return self.hosts[host].address

    def racks(self) -> dict[str, str]:
        """Every host's address -> its rack's location, as a topology script answers it."""
        return {h.address: h.rack_name for h in self.hosts.values()}

    # -- faults (grudges) -------------------------------------------------------------------------------------------

    def _grudge(self, host: Host, rule: list[str]) -> None:
        self._ns(host.namespace, "iptables", "-A", _GRUDGE_CHAIN, *rule)
        host.grudges.append(rule)

    def link_down(self, host: str) -> None:
        """Pull ``host``'s cable: its port on the rack's bridge goes down (the host's own routes stay)."""
        self._ns(self.router, "ip", "link", "set", self.hosts[host].port, "down")

    def drop(self, src: Iterable[str], dst: Iterable[str]) -> None:
        """One-way partition: packets from every host of ``src`` are dropped at the input of every host of ``dst``
        (the other direction still flows)."""
        for d in dst:
            for s in src:
                self._grudge(self.hosts[d], ["-s", self.hosts[s].address, "-j", "DROP"])

    def partition(self, a: Iterable[str], b: Iterable[str]) -> None:
        """Both ways: ``a`` and ``b`` cannot reach each other."""
        a, b = list(a), list(b)
        self.drop(a, b)
        self.drop(b, a)

    def cut_rack(self, rack: int) -> None:
        """Cut ``rack`` off: its hosts reach each other only, no host of another rack reaches them."""
        subnet = f"198.18.{rack}.0/24"
        for host in self.hosts.values():
            if host.rack == rack:
                self._grudge(host, ["!", "-s", subnet, "-j", "DROP"])
            else:
                self._grudge(host, ["-s", subnet, "-j", "DROP"])

    def loss(self, host: str, probability: float) -> None:
        """Drop each packet arriving at ``host`` with ``probability`` (iptables' statistic match: the kernel's own
        random drop, which needs no netem)."""
        if not 0 < probability < 1:
            raise ValueError("probability must be in (0, 1)")
        self._grudge(self.hosts[host], ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.4f}", "-j", "DROP"])

    def netem(self, host: str, *spec: str) -> None:
        """``tc qdisc add dev eth0 root netem <spec>`` on ``host`` (e.g. ``"delay", "200ms", "50ms", "loss", "5%"``);
        see :func:`netem_unavailable_reason`."""
        self._ns(self.hosts[host].namespace, "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", *spec)

    def move(self, host: str, address: str) -> None:
        """Give ``host`` another address on its rack (BP-41: a bookie that comes back elsewhere under its id)."""
        h = self.hosts[host]
        if not address.startswith(f"198.18.{h.rack}."):
            raise ValueError(f"{address} is not on rack {h.rack}'s 198.18.{h.rack}.0/24")
        self._ns(h.namespace, "ip", "addr", "del", f"{h.address}/24", "dev", "eth0")
        self._ns(h.namespace, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
        self._ns(h.namespace, "ip", "route", "replace", NETWORK, "via", f"198.18.{h.rack}.1")
        h.address = address

    def heal(self) -> None:
        """Lift every fault: links up, grudges flushed, netem removed."""
        for h in self.hosts.values():
            self._ns(self.router, "ip", "link", "set", h.port, "up")
            if h.grudges:
                self._ns(h.namespace, "iptables", "-F", _GRUDGE_CHAIN)
                h.grudges.clear()
            self._ns(h.namespace, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
            self._ns(h.namespace, "ip", "neigh", "flush", "all", check=False)  # no "no route to host" left over
        self._ns(self.router, "ip", "neigh", "flush", "all", check=False)


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``condition`` until it holds; :class:`TimeoutError` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(interval)
