"""A user-space queue handler that delays, reorders and corrupts a host's packets where the kernel has no netem
(docs/reliability.md, "Packet faults without netem").

The test bed's iptables rule ``-j NFQUEUE --queue-num N --queue-bypass`` hands each packet a host sends (or
receives) to queue ``N``; this program, run inside that host's namespace (``ip netns exec``, see
:meth:`tests.harness.netns.Testbed.packet_fault`), binds the queue and gives every packet its verdict when the
fault says so:

* ``delay``: each packet held ``delay ± jitter`` (uniform, as netem's default), released at its own time, so that
  jitter larger than the gap between packets reorders them, as netem's does;
* ``reorder``: a share of the packets held ``delay``, the others passed at once: later packets overtake the held
  ones;
* ``corrupt``: a share of the packets get one byte after the IP header changed (in the TCP header or payload) and
  go on at once; the receiver's TCP checksum rejects them (``InCsumErrors``) and the sender retransmits.

:class:`PacketFaults` is the decision, a pure state machine over packets and a clock (unit-tested with a seeded
random source); :func:`serve` is the I/O around it. The program prints ``ready`` once the queue is bound, and on
SIGTERM lets every held packet go, unbinds and prints its counters as one JSON line.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import select
import signal
import socket
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.harness.nfqueue import (
    NETLINK_NETFILTER,
    NETLINK_NO_ENOBUFS,
    NF_ACCEPT,
    SOL_NETLINK,
    NetlinkAck,
    QueuedPacket,
    decode,
    encode_bind,
    encode_unbind,
    encode_verdict,
)

__all__ = ["KINDS", "FaultPlan", "PacketFaults", "Release", "flow_of", "serve"]

#: The faults this handler makes (loss and duplication are made by iptables itself: tests/harness/netns.py).
KINDS = ("delay", "reorder", "corrupt")


@dataclass(frozen=True)
class FaultPlan:
    """One fault: ``kind`` with its hold (``delay_s`` ± ``jitter_s``) or the ``share`` of packets it hits."""

    kind: str
    delay_s: float = 0.0
    jitter_s: float = 0.0
    share: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind {self.kind!r} is not one of {KINDS}")
        if self.delay_s < 0 or not 0 <= self.jitter_s <= self.delay_s:
            raise ValueError(f"delay {self.delay_s} s with jitter {self.jitter_s} s: need 0 <= jitter <= delay")
        if not 0 <= self.share <= 1:
            raise ValueError(f"share {self.share} outside 0..1")


@dataclass(frozen=True)
class Release:
    """A verdict due: accept packet ``packet_id`` of ``queue``, as it came or as ``payload``."""

    queue: int
    packet_id: int
    payload: bytes | None


def flow_of(packet: bytes) -> tuple[int, ...]:
    """The flow an IPv4 packet belongs to (protocol, addresses and, for TCP and UDP, ports): reordering is counted
    within a flow, as the receiving TCP sees it."""
    if len(packet) < 20 or packet[0] >> 4 != 4:
        return (-1,)
    protocol = packet[9]
    header = (packet[0] & 0x0F) * 4
    key: tuple[int, ...] = (protocol, *packet[12:20])
    if protocol in (6, 17) and len(packet) >= header + 4:
        key += tuple(int.from_bytes(packet[at : at + 2], "big") for at in (header, header + 2))
    return key


def corrupt_one_byte(packet: bytes, rng: random.Random) -> bytes:
    """``packet`` with one byte after its IPv4 header XORed with a non-zero value (the IP header, which routers
    check, kept; every byte of a TCP segment is under its checksum, and a one-byte change always breaks it)."""
    header = (packet[0] & 0x0F) * 4 if packet and packet[0] >> 4 == 4 else 0
    if len(packet) <= header:
        return packet
    changed = bytearray(packet)
    changed[rng.randrange(header, len(packet))] ^= rng.randrange(1, 256)
    return bytes(changed)


@dataclass
class PacketFaults:
    """What happens to each queued packet under ``plan`` (no I/O: the caller feeds packets and the clock)."""

    plan: FaultPlan
    rng: random.Random
    counters: dict[str, int] = field(
        default_factory=lambda: {"queued": 0, "held": 0, "corrupted": 0, "released": 0, "reordered": 0}
    )
    holds_s: list[float] = field(default_factory=list)
    _held: list[tuple[float, int, Release, tuple[int, ...]]] = field(default_factory=list)
    _arrivals = 0
    _released_up_to: dict[tuple[int, ...], int] = field(default_factory=dict)

    def admit(self, packet: QueuedPacket, now: float) -> None:
        """Take ``packet`` in at time ``now`` and decide when it goes, and as what."""
        self.counters["queued"] += 1
        plan, payload, hold = self.plan, None, 0.0
        if plan.kind == "delay":
            hold = max(0.0, plan.delay_s + self.rng.uniform(-plan.jitter_s, plan.jitter_s))
        elif plan.kind == "reorder":
            hold = plan.delay_s if self.rng.random() < plan.share else 0.0
        elif self.rng.random() < plan.share:  # corrupt
            payload = corrupt_one_byte(packet.payload, self.rng)
            self.counters["corrupted"] += payload != packet.payload
        if hold > 0:
            self.counters["held"] += 1
            self.holds_s.append(hold)
        self._arrivals += 1
        release = Release(packet.queue, packet.packet_id, payload)
        heapq.heappush(self._held, (now + hold, self._arrivals, release, flow_of(packet.payload)))

    def next_due(self) -> float | None:
        """When the earliest held packet is due (None: nothing held)."""
        return self._held[0][0] if self._held else None

    def due(self, now: float) -> list[Release]:
        """The packets whose time has come, in the order they go; a packet that a later one of its flow went ahead
        of is counted ``reordered``."""
        out = []
        while self._held and self._held[0][0] <= now:
            _, arrival, release, flow = heapq.heappop(self._held)
            latest = self._released_up_to.get(flow, 0)
            if arrival < latest:
                self.counters["reordered"] += 1
            else:
                self._released_up_to[flow] = arrival
            self.counters["released"] += 1
            out.append(release)
        return out

    def drain(self) -> list[Release]:
        """Every packet still held, to let go at once (the fault is lifted)."""
        return self.due(float("inf"))

    def report(self) -> dict[str, float]:
        """The counters, with the median hold of held packets in milliseconds."""
        median = statistics.median(self.holds_s) * 1000 if self.holds_s else 0.0
        return {**self.counters, "median_hold_ms": round(median, 1)}


def _open(queue: int) -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.bind((0, 0))
    sock.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE (root): room for a burst of copied packets
    sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
    sock.send(encode_bind(queue, sequence=1))
    while True:
        for message in decode(sock.recv(1 << 16)):
            if isinstance(message, NetlinkAck) and message.sequence == 1:
                if message.error:
                    raise OSError(-message.error, f"binding nfqueue {queue}: {os.strerror(-message.error)}")
                return sock


def serve(queue: int, plan: FaultPlan, seed: int) -> dict[str, float]:
    """Bind ``queue`` and act on its packets under ``plan`` until SIGTERM; the counters."""
    now = time.monotonic
    faults = PacketFaults(plan, random.Random(seed))
    stop_reader, stop_writer = socket.socketpair()
    stop_writer.setblocking(False)
    signal.set_wakeup_fd(stop_writer.fileno())
    signal.signal(signal.SIGTERM, lambda *_: None)
    sock = _open(queue)
    print("ready", flush=True)

    def send(releases: Sequence[Release]) -> None:
        for r in releases:
            sock.send(encode_verdict(r.queue, r.packet_id, NF_ACCEPT, r.payload))

    try:
        while True:
            due = faults.next_due()
            timeout = None if due is None else max(0.0, due - now())
            readable, _, _ = select.select([sock, stop_reader], [], [], timeout)
            if stop_reader in readable:
                break
            if sock in readable:
                for message in decode(sock.recv(1 << 17)):
                    if isinstance(message, QueuedPacket):
                        faults.admit(message, now())
            send(faults.due(now()))
    finally:
        send(faults.drain())
        sock.send(encode_unbind(queue))
        sock.close()
    return faults.report()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--share", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    plan = FaultPlan(args.kind, args.delay_ms / 1000, args.jitter_ms / 1000, args.share)
    try:
        report = serve(args.queue, plan, args.seed)
    except OSError as exc:  # the queue cannot be bound (another socket holds it, no nfnetlink_queue): say so
        print(f"packet_queue: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
