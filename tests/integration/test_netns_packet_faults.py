"""Packet faults of the namespace test bed without netem (tests/harness/netns.py, tests/harness/packet_queue.py,
docs/reliability.md "Packet faults without netem"): each kind acts on a TCP echo between two hosts, as its counters
and the kernel's TCP counters show, and the echoed bytes are still exact; the queue handler is stopped by heal even
when it died, a dead one blackholes nothing, and one that cannot start leaves nothing behind."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.harness.deadline import GENEROUS
from tests.harness.netns import NetnsError, Testbed, packet_faults_unavailable_reason, unavailable_reason
from tests.harness.nfqueue import NETLINK_NETFILTER, NetlinkAck, decode, encode_bind

pytestmark = [pytest.mark.integration, pytest.mark.netns]

PORT = 4100


@pytest.fixture(scope="module")
def bed() -> Iterator[Testbed]:
    reason = unavailable_reason() or packet_faults_unavailable_reason()
    if reason:
        pytest.skip(reason)
    with Testbed() as bed:
        bed.add_host("a", 1)
        bed.add_host("b", 2)
        server = bed.call_in("b", lambda: _echo_server(bed.address_of("b")))
        yield bed
        bed.call_in("b", server.close)


def _echo_server(address: str) -> socket.socket:
    """A TCP echo on ``address``:PORT, a thread per connection (threads started here stay in this namespace)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, PORT))
    listener.listen(16)

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1 << 16):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


def _echo(bed: Testbed, rounds: int = 200, size: int = 600) -> None:
    """From host a: ``rounds`` messages of ``size`` bytes, up to 8 in flight, each echoed back exactly."""

    def talk() -> None:
        with socket.create_connection((bed.address_of("b"), PORT), timeout=GENEROUS) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sent = b""
            received = bytearray()
            for i in range(rounds):
                message = os.urandom(size)
                conn.sendall(message)
                sent += message
                while len(received) < len(sent) - 8 * size:
                    received += conn.recv(1 << 16)
            while len(received) < len(sent):
                received += conn.recv(1 << 16)
            assert bytes(received) == sent  # whatever the fault did, TCP delivered the bytes exactly

    bed.call_in("a", talk, timeout=GENEROUS)


def _counters(bed: Testbed) -> dict[str, int]:
    a, b = bed.tcp_counters("a"), bed.tcp_counters("b")
    return {name: a[name] + b[name] for name in a}


def _acted(bed: Testbed, apply) -> tuple[dict[str, float], dict[str, int]]:  # type: ignore[no-untyped-def]
    """Apply a fault on b (both directions), echo through it, heal; its report and the TCP counters' growth."""
    before = _counters(bed)
    mechanism = apply()
    try:
        _echo(bed)
    finally:
        bed.heal()
    after = _counters(bed)
    assert mechanism == "iptables"  # both directions: never netem, which acts on what a host sends only
    (report,) = bed.packet_report("b").values()
    return report, {name: after[name] - before[name] for name in after}


def test_delay_with_jitter_holds_every_packet_and_reorders_some(bed: Testbed) -> None:
    report, tcp = _acted(bed, lambda: bed.delay("b", 30, 20, direction="both", seed=1))
    assert report["held"] == report["queued"] > 0 and 10 <= report["median_hold_ms"] <= 50
    assert report["reordered"] > 0


def test_reorder_lets_later_packets_overtake_the_held_share(bed: Testbed) -> None:
    report, tcp = _acted(bed, lambda: bed.reorder("b", 0.25, 20, direction="both", seed=2))
    assert 0 < report["held"] < report["queued"] and report["reordered"] > 0
    assert tcp["TcpExt.TCPOFOQueue"] > 0  # the receivers queued segments that came out of order


def test_corrupted_packets_are_rejected_by_the_receivers_checksum(bed: Testbed) -> None:
    report, tcp = _acted(bed, lambda: bed.corrupt("b", 0.05, direction="both", seed=3))
    assert report["corrupted"] > 0
    assert tcp["Tcp.InCsumErrors"] > 0 and tcp["Tcp.RetransSegs"] > 0


def test_duplicated_packets_arrive_twice(bed: Testbed) -> None:
    report, tcp = _acted(bed, lambda: bed.duplicate("b", 0.1, direction="both"))
    assert report["duplicated"] > 0
    assert tcp["TcpExt.TCPDSACKOldSent"] > 0  # the receivers saw data segments they had already (D-SACKed)


def test_lost_packets_are_retransmitted(bed: Testbed) -> None:
    report, tcp = _acted(bed, lambda: bed.loss("b", 0.1, direction="both"))
    assert report["lost"] > 0 and tcp["Tcp.RetransSegs"] > 0


def test_a_dead_queue_handler_blackholes_nothing_and_heal_says_it_died(bed: Testbed) -> None:
    """The handler killed mid-fault: the kernel drops what it held (TCP resends it), later packets bypass the
    unbound queue; heal removes the rules and reports the death."""
    bed.delay("b", 20, 0, direction="both", seed=4)
    _echo(bed, rounds=20)
    (_, handler), = bed.hosts["b"].packet_handlers
    handler.kill()
    handler.wait()
    _echo(bed, rounds=50)  # the rule still queues to no one: --queue-bypass lets the packets through
    with pytest.raises(NetnsError, match="queue handler \\(delay\\) on b ended with -9"):
        bed.heal()
    assert bed.hosts["b"].packet_handlers == [] and bed.hosts["b"].packet_rules == {}
    _echo(bed, rounds=20)


def test_a_handler_that_cannot_bind_its_queue_leaves_no_fault_behind(bed: Testbed) -> None:
    """Queue 0 of host b already bound by another socket: the handler exits before it is ready, packet_fault raises,
    and no rule nor process is left (traffic flows, heal has nothing to lift)."""

    def bind_queue_0() -> socket.socket:
        holder = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        holder.bind((0, 0))
        holder.send(encode_bind(0, sequence=1))
        acks = [m for m in decode(holder.recv(1 << 16)) if isinstance(m, NetlinkAck)]
        assert acks == [NetlinkAck(1, 0)]
        return holder

    holder = bed.call_in("b", bind_queue_0)
    try:
        busy = r"queue handler on b did not start \(''\): packet_queue: .*binding nfqueue 0: Operation not permitted"
        with pytest.raises(NetnsError, match=busy):
            bed.delay("b", 20, 0)
        assert bed.hosts["b"].packet_handlers == [] and bed.hosts["b"].packet_rules == {}
        _echo(bed, rounds=20)
        bed.heal()
    finally:
        holder.close()


def test_packet_faults_refuse_what_they_cannot_make(bed: Testbed) -> None:
    with pytest.raises(ValueError, match="is not one of"):
        bed.packet_fault("b", "flood")
    with pytest.raises(ValueError, match="direction"):
        bed.duplicate("b", 0.1, direction="sideways")
    with pytest.raises(ValueError, match="probability"):
        bed.corrupt("b", 1.5)
    with pytest.raises(ValueError, match="jitter"):
        bed.delay("b", 10, 20)
