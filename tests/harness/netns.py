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
  host's input by iptables, a rack cut off), :meth:`Testbed.heal` lifts every one;
* packet faults (:meth:`Testbed.packet_fault`: delay with jitter, reordering, duplication, corruption, loss) are
  ``tc netem`` where the kernel has it and, where it has not, iptables' ``statistic``, ``TEE`` and ``NFQUEUE``
  targets, the last with a queue handler in user space (tests/harness/packet_queue.py) that holds and changes
  packets; what each did is counted (:meth:`Testbed.packet_report`).

:meth:`Testbed.close` deletes every namespace (with it its interfaces, rules and processes' network) even after a
failure, and :func:`clean_stale` deletes those a crashed earlier run left, recognised by their prefix and the
pid of the run that made them. :func:`unavailable_reason` says in one line why the bed cannot be built here (not
root, no ``ip``/``iptables``), for ``pytest.skip``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import re
import select
import shutil
import socket
import subprocess
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from bkspark.devcluster.pids import pid_alive
from bkspark.devcluster.process import ManagedProcess
from tests.harness.python_bookie import REPO_ROOT

__all__ = [
    "PREFIX",
    "Host",
    "NetnsProcess",
    "PACKET_FAULT_KINDS",
    "Testbed",
    "clean_stale",
    "netem_unavailable_reason",
    "packet_faults_unavailable_reason",
    "parse_rule_counters",
    "parse_tcp_counters",
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
#: The packet faults :meth:`Testbed.packet_fault` makes, each also a method of its own.
PACKET_FAULT_KINDS = ("delay", "reorder", "duplicate", "corrupt", "loss")
#: Which of a host's packets a packet fault hits: those it sends, those it receives, or both.
DIRECTIONS = ("out", "in", "both")
#: Per direction: the iptables chain of a host's packet faults, the built-in chain that jumps to it, the interface flag.
_PACKET_CHAINS = {"out": ("BKSPARK-PACKET-OUT", "OUTPUT", "-o"), "in": ("BKSPARK-PACKET-IN", "INPUT", "-i")}
#: How long a queue handler may take to start (a Python interpreter on a loaded machine) or to stop.
_HANDLER_WAIT_S = 60.0
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


@functools.lru_cache(maxsize=1)
def packet_faults_unavailable_reason() -> str | None:
    """Why the packet faults cannot be made without netem here (iptables lacks ``NFQUEUE``, ``TEE`` or
    ``statistic``, or the kernel lacks nfnetlink_queue), or None."""
    probe = f"{PREFIX}-{os.getpid()}-packet"
    _run(["ip", "netns", "add", probe], check=False)
    try:
        for rule in (
            ["-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass"],
            ["-m", "statistic", "--mode", "random", "--probability", "0.5", "-j", "TEE", "--gateway", "198.18.0.1"],
        ):
            result = _run(["ip", "netns", "exec", probe, "iptables", "-A", "OUTPUT", *rule], check=False)
            if result.returncode != 0:
                return f"iptables cannot add `{' '.join(rule)}` here ({result.stderr.strip()})"
        result = _run(["ip", "netns", "exec", probe, sys.executable, "-c", _BIND_PROBE % str(REPO_ROOT)], check=False)
        if result.returncode != 0:
            return f"no nfnetlink_queue in this kernel ({result.stderr.strip().splitlines()[-1:] or result.returncode})"
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    return None


_BIND_PROBE = """
import socket, sys
sys.path.insert(0, %r)
from tests.harness.nfqueue import NETLINK_NETFILTER, NetlinkAck, decode, encode_bind
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
s.bind((0, 0))
s.send(encode_bind(0, sequence=1))
ack = next(m for m in decode(s.recv(65536)) if isinstance(m, NetlinkAck))
raise SystemExit(f"binding a queue: error {ack.error}" if ack.error else 0)
"""


def parse_rule_counters(listing: str) -> list[int]:
    """The packet counts of a chain's rules, in order, from ``iptables -L <chain> -n -v -x``."""
    counts = []
    for line in listing.splitlines()[2:]:
        fields = line.split()
        if len(fields) >= 2 and fields[0].isdigit() and fields[1].isdigit():
            counts.append(int(fields[0]))
    return counts


def parse_tcp_counters(text: str) -> dict[str, int]:
    """The ``Tcp:`` and ``TcpExt:`` counters of /proc/net/snmp and /proc/net/netstat (a header line of names, then
    a line of values, per group) as ``{"Tcp.RetransSegs": n, "TcpExt.TCPOFOQueue": n, ...}``."""
    counters: dict[str, int] = {}
    lines = text.splitlines()
    for names, values in zip(lines, lines[1:]):
        group, _, names_rest = names.partition(":")
        group2, _, values_rest = values.partition(":")
        if group != group2 or group not in ("Tcp", "TcpExt"):
            continue
        if not all(v.lstrip("-").isdigit() for v in values_rest.split()):
            continue  # two header lines in a row
        counters.update({f"{group}.{n}": int(v) for n, v in zip(names_rest.split(), values_rest.split())})
    return counters


def _namespaces() -> list[str]:
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


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
    stale = [n for n in _namespaces() if (m := _NAME.match(n)) and not pid_alive(int(m.group(1)))]
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
    #: The packet faults on now: per chain, the kind of each rule in order (their counters say what each did).
    packet_rules: dict[str, list[str]] = field(default_factory=dict)
    #: Queue handlers on now (tests/harness/packet_queue.py), by kind.
    packet_handlers: list[tuple[str, subprocess.Popen[str]]] = field(default_factory=list)
    #: The netem fault on now, if any (its kind).
    netem_kind: str | None = None
    #: What the packet faults lifted by the last heal did, by kind (:meth:`Testbed.packet_report`).
    packet_report: dict[str, dict[str, float]] = field(default_factory=dict)

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
        for host in self.hosts.values():
            for _, handler in host.packet_handlers:
                handler.kill()
                handler.wait()
            host.packet_handlers.clear()
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

    @contextlib.contextmanager
    def entered(self, host: str) -> Iterator[None]:
        """Move the calling thread into ``host``'s namespace for the block, then back to the one it was in. Threads
        and processes the thread starts meanwhile are born on ``host`` and stay there (a long-running program, the
        soak, runs its client and Spark so). The thread must leave before :meth:`close`: the namespace's processes
        are killed then, and a process counts as in the namespace its main thread is in."""
        with open("/proc/thread-self/ns/net", "rb") as home:
            fd = os.open(f"/run/netns/{self.hosts[host].namespace}", os.O_RDONLY)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            try:
                yield
            finally:
                _setns(home.fileno())

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

    # -- packet faults ----------------------------------------------------------------------------------------------

    def delay(
        self, host: str, delay_ms: float, jitter_ms: float = 0.0, direction: str = "out", seed: int | None = None
    ) -> str:
        """Hold each of ``host``'s packets ``delay_ms`` ± ``jitter_ms`` (uniform); jitter larger than the gap between
        packets reorders them. Netem's ``delay D J`` (:meth:`packet_fault`)."""
        return self.packet_fault(host, "delay", delay_ms=delay_ms, jitter_ms=jitter_ms, direction=direction, seed=seed)

    def reorder(
        self, host: str, probability: float, delay_ms: float, direction: str = "out", seed: int | None = None
    ) -> str:
        """Hold a share ``probability`` of ``host``'s packets ``delay_ms`` and pass the others at once, so later
        packets overtake the held ones (:meth:`packet_fault`)."""
        return self.packet_fault(
            host, "reorder", probability=probability, delay_ms=delay_ms, direction=direction, seed=seed
        )

    def duplicate(self, host: str, probability: float, direction: str = "out") -> str:
        """Send a share ``probability`` of ``host``'s packets twice (:meth:`packet_fault`)."""
        return self.packet_fault(host, "duplicate", probability=probability, direction=direction)

    def corrupt(self, host: str, probability: float, direction: str = "out", seed: int | None = None) -> str:
        """Change one byte after the IP header of a share ``probability`` of ``host``'s packets: the receiving TCP's
        checksum rejects them and the sender retransmits (:meth:`packet_fault`)."""
        return self.packet_fault(host, "corrupt", probability=probability, direction=direction, seed=seed)

    def loss(self, host: str, probability: float, direction: str = "in") -> str:
        """Drop a share ``probability`` of ``host``'s packets, by default those arriving (:meth:`packet_fault`)."""
        return self.packet_fault(host, "loss", probability=probability, direction=direction)

    def packet_fault(
        self,
        host: str,
        kind: str,
        *,
        probability: float = 0.0,
        delay_ms: float = 0.0,
        jitter_ms: float = 0.0,
        direction: str = "out",
        seed: int | None = None,
    ) -> str:
        """Put packet fault ``kind`` (:data:`PACKET_FAULT_KINDS`) on ``host``'s packets of ``direction``
        (:data:`DIRECTIONS`) until :meth:`heal`; the mechanism that makes it, ``"netem"`` or ``"iptables"``.

        ``tc netem`` on ``eth0`` where the kernel has it and the fault is on what the host sends (netem is an egress
        qdisc); otherwise iptables in the host's namespace: ``statistic`` + ``DROP`` (loss), ``statistic`` + ``TEE``
        to the rack's gateway (duplicate: the clone goes the original's way), ``NFQUEUE`` to a queue handler that
        holds or changes packets (delay, reorder, corrupt; ``seed`` seeds its draws). ``--queue-bypass`` and the
        queue's fail-open flag let packets pass when no handler is bound or the queue is full.
        """
        h = self.hosts[host]
        self._check_packet_fault(kind, probability, delay_ms, jitter_ms, direction)
        if not (h.packet_rules or h.packet_handlers or h.netem_kind):
            h.packet_report = {}  # the first fault since the last heal: a new report
        if direction == "out" and netem_unavailable_reason() is None:
            self._ns(h.namespace, "tc", "qdisc", "replace", "dev", "eth0", "root", "netem",
                     *_netem_spec(kind, probability, delay_ms, jitter_ms))
            h.netem_kind = kind
            return "netem"
        directions = ("out", "in") if direction == "both" else (direction,)
        share = ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.4f}"]
        if kind == "loss":
            target = [*share, "-j", "DROP"]
        elif kind == "duplicate":
            target = [*share, "-j", "TEE", "--gateway", f"198.18.{h.rack}.1"]
        else:
            queue = len(h.packet_handlers)
            handler = self._start_queue_handler(h, queue, kind, probability, delay_ms, jitter_ms, seed)
            h.packet_handlers.append((kind, handler))
            target = ["-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass"]
        for d in directions:
            self._packet_rule(h, d, kind, target)
        return "iptables"

    @staticmethod
    def _check_packet_fault(kind: str, probability: float, delay_ms: float, jitter_ms: float, direction: str) -> None:
        if kind not in PACKET_FAULT_KINDS:
            raise ValueError(f"packet fault {kind!r} is not one of {PACKET_FAULT_KINDS}")
        if direction not in DIRECTIONS:
            raise ValueError(f"direction {direction!r} is not one of {DIRECTIONS}")
        if kind in ("reorder", "duplicate", "corrupt", "loss") and not 0 < probability < 1:
            raise ValueError(f"{kind}: probability must be in (0, 1)")
        if kind in ("delay", "reorder") and not (delay_ms > 0 and 0 <= jitter_ms <= delay_ms):
            raise ValueError(f"{kind}: need delay_ms > 0 and 0 <= jitter_ms <= delay_ms")

    def _packet_rule(self, h: Host, direction: str, kind: str, target: list[str]) -> None:
        chain, parent, flag = _PACKET_CHAINS[direction]
        if chain not in h.packet_rules:
            if self._ns(h.namespace, "iptables", "-L", chain, "-n", check=False).returncode != 0:
                self._ns(h.namespace, "iptables", "-N", chain)
                self._ns(h.namespace, "iptables", "-A", parent, flag, "eth0", "-j", chain)
            h.packet_rules[chain] = []
        self._ns(h.namespace, "iptables", "-A", chain, *target)
        h.packet_rules[chain].append(kind)

    def _start_queue_handler(
        self, h: Host, queue: int, kind: str, probability: float, delay_ms: float, jitter_ms: float, seed: int | None
    ) -> subprocess.Popen[str]:
        """tests/harness/packet_queue.py in ``h``'s namespace, bound to ``queue`` once this returns."""
        argv = [
            "ip", "netns", "exec", h.namespace, sys.executable, "-m", "tests.harness.packet_queue",
            "--queue", str(queue), "--kind", kind, "--delay-ms", str(delay_ms), "--jitter-ms", str(jitter_ms),
            "--share", str(probability),
            "--seed", str(seed if seed is not None else int.from_bytes(os.urandom(4), "big")),
        ]  # fmt: skip
        handler = subprocess.Popen(
            argv, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        ready = _read_line(handler, _HANDLER_WAIT_S)
        if ready != "ready":
            handler.kill()
            _, err = handler.communicate()
            raise NetnsError(f"queue handler on {h.name} did not start ({ready!r}): {err.strip()[-2000:]}")
        return handler

    def packet_report(self, host: str) -> dict[str, dict[str, float]]:
        """What each packet fault of ``host`` lifted by the last :meth:`heal` did (empty while one is on), by kind:
        ``lost``, ``duplicated`` (iptables' rule counters), the queue handler's ``queued``/``held``/``reordered``/
        ``corrupted``/``median_hold_ms``, or netem's ``sent``/``dropped`` (``tc -s qdisc``)."""
        return self.hosts[host].packet_report

    def tcp_counters(self, host: str) -> dict[str, int]:
        """``host``'s TCP counters (its namespace's /proc/net/snmp and /proc/net/netstat): retransmissions
        (``Tcp.RetransSegs``), checksum failures (``Tcp.InCsumErrors``), out-of-order segments
        (``TcpExt.TCPOFOQueue``), duplicate segments (``TcpExt.TCPDSACKOldSent``)..."""
        out = self._ns(self.hosts[host].namespace, "cat", "/proc/net/snmp", "/proc/net/netstat").stdout
        return parse_tcp_counters(out)

    def netem(self, host: str, *spec: str) -> None:
        """``tc qdisc add dev eth0 root netem <spec>`` on ``host`` (e.g. ``"delay", "200ms", "50ms", "loss", "5%"``);
        see :func:`netem_unavailable_reason`."""
        self._ns(self.hosts[host].namespace, "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", *spec)
        self.hosts[host].netem_kind = "netem"

    def _lift_packet_faults(self, h: Host) -> list[str]:
        """Count, flush and stop ``h``'s packet faults into ``h.packet_report``; what went wrong (after lifting all)."""
        report: dict[str, dict[str, float]] = {}
        problems: list[str] = []

        def add(kind: str, counters: dict[str, float]) -> None:
            into = report.setdefault(kind, {})
            for name, value in counters.items():
                into[name] = value if name == "median_hold_ms" else into.get(name, 0) + value

        for chain, kinds in h.packet_rules.items():
            listing = self._ns(h.namespace, "iptables", "-L", chain, "-n", "-v", "-x", check=False).stdout
            for kind, count in zip(kinds, parse_rule_counters(listing)):
                if kind in ("loss", "duplicate"):
                    add(kind, {"lost" if kind == "loss" else "duplicated": count})
            self._ns(h.namespace, "iptables", "-F", chain)
        h.packet_rules.clear()
        for kind, handler in h.packet_handlers:  # after the flush: nothing new reaches the queues
            handler.send_signal(signal.SIGTERM)
            try:
                out, err = handler.communicate(timeout=_HANDLER_WAIT_S)
            except subprocess.TimeoutExpired:
                handler.kill()
                out, err = handler.communicate()
            last = out.strip().splitlines()[-1:] if out else []
            if handler.returncode == 0 and last and last[0].startswith("{"):
                add(kind, json.loads(last[0]))
            else:
                ended = f"queue handler ({kind}) on {h.name} ended with {handler.returncode}"
                problems.append(f"{ended}: {err.strip()[-2000:]}")
        h.packet_handlers.clear()
        if h.netem_kind is not None:
            stats = self._ns(h.namespace, "tc", "-s", "qdisc", "show", "dev", "eth0", check=False).stdout
            if m := re.search(r"Sent \d+ bytes (\d+) pkt \(dropped (\d+)", stats):
                add(h.netem_kind, {"sent": int(m.group(1)), "dropped": int(m.group(2))})
            h.netem_kind = None
        if report:
            h.packet_report = report
        return problems

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
        """Lift every fault: links up, grudges flushed, packet faults counted (:meth:`packet_report`) and removed
        (queue handlers stopped, their held packets let go). Raises :class:`NetnsError` after lifting everything if a
        queue handler had died."""
        problems: list[str] = []
        for h in self.hosts.values():
            problems += self._lift_packet_faults(h)
            self._ns(self.router, "ip", "link", "set", h.port, "up")
            if h.grudges:
                self._ns(h.namespace, "iptables", "-F", _GRUDGE_CHAIN)
                h.grudges.clear()
            self._ns(h.namespace, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
            self._ns(h.namespace, "ip", "neigh", "flush", "all", check=False)  # no "no route to host" left over
        self._ns(self.router, "ip", "neigh", "flush", "all", check=False)
        if problems:
            raise NetnsError("; ".join(problems))


def _netem_spec(kind: str, probability: float, delay_ms: float, jitter_ms: float) -> list[str]:
    """The ``tc netem`` arguments of a packet fault (netem's reorder sends its share at once and delays the rest:
    the held share is the complement)."""
    percent = f"{probability * 100:g}%"
    if kind == "delay":
        return ["delay", f"{delay_ms:g}ms", f"{jitter_ms:g}ms"]
    if kind == "reorder":
        return ["delay", f"{delay_ms:g}ms", "reorder", f"{(1 - probability) * 100:g}%"]
    return [kind, percent]


def _read_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The first line ``process`` prints within ``timeout`` seconds ('' if none)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    return process.stdout.readline().strip() if ready else ""


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``condition`` until it holds; :class:`TimeoutError` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(interval)
