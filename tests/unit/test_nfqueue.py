"""The nfnetlink_queue codec (tests/harness/nfqueue.py) against exact bytes, and the queue handler's decisions
(tests/harness/packet_queue.py) with a seeded random source and a hand-driven clock."""

from __future__ import annotations

import random
import struct
import sys

import pytest

from tests.harness.netns import parse_rule_counters, parse_tcp_counters
from tests.harness.nfqueue import (
    NF_ACCEPT,
    NF_DROP,
    NetlinkAck,
    NfqueueError,
    QueuedPacket,
    decode,
    encode_bind,
    encode_unbind,
    encode_verdict,
)
from tests.harness.packet_queue import FaultPlan, PacketFaults, corrupt_one_byte, flow_of

pytestmark = pytest.mark.skipif(sys.byteorder != "little", reason="the byte vectors are a little-endian host's")

# (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_CONFIG = 0x0302; flags NLM_F_REQUEST | NLM_F_ACK = 5.
BIND_QUEUE_7 = bytes.fromhex(
    "40000000" "0203" "0500" "01000000" "00000000"  # nlmsghdr: length 64, type, flags, sequence 1, port 0
    "00" "00" "0007"  # nfgenmsg: AF_UNSPEC, NFNETLINK_V0, queue 7 (network order)
    "0800" "0100" "01" "00" "0000"  # NFQA_CFG_CMD: BIND, pad, pf 0
    "0900" "0200" "0000ffff" "02" "000000"  # NFQA_CFG_PARAMS: copy range 65535, NFQNL_COPY_PACKET, padding
    "0800" "0300" "00001000"  # NFQA_CFG_QUEUE_MAXLEN 4096
    "0800" "0400" "00000001"  # NFQA_CFG_MASK: FAIL_OPEN
    "0800" "0500" "00000001"  # NFQA_CFG_FLAGS: FAIL_OPEN
)


def _ipv4_tcp(src: bytes, dst: bytes, sport: int, dport: int, data: bytes) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, 0x18, 65535, 0, 0) + data
    return bytes([0x45, 0]) + struct.pack("!H", 20 + len(tcp)) + bytes(5) + b"\x06\x00\x00" + src + dst + tcp


PACKET = _ipv4_tcp(bytes([198, 18, 1, 10]), bytes([198, 18, 0, 11]), 3181, 40000, b"entry")


def _packet_message(queue: int, packet_id: int, payload: bytes, hook: int = 3) -> bytes:
    """A NFQNL_MSG_PACKET as the kernel sends it (with an attribute the decoder does not need: NFQA_MARK)."""
    attrs = struct.pack("=HH", 11, 1) + struct.pack("!IHB", packet_id, 0x0800, hook) + b"\0"
    attrs += struct.pack("=HH", 8, 3) + struct.pack("!I", 0)
    attrs += struct.pack("=HH", 4 + len(payload), 10) + payload + b"\0" * (-len(payload) % 4)
    body = struct.pack("!BBH", 2, 0, queue) + attrs
    return struct.pack("=IHHII", 16 + len(body), 0x0300, 0, 0, 1234) + body


def test_bind_asks_whole_packets_fail_open_and_an_acknowledgement() -> None:
    assert encode_bind(7, sequence=1) == BIND_QUEUE_7


def test_unbind_and_verdicts_are_exact() -> None:
    assert encode_unbind(7) == bytes.fromhex("1c000000020305000000000000000000" "00000007" "0800010002000000")
    assert encode_verdict(7, 0x01020304, NF_ACCEPT) == bytes.fromhex(
        "20000000" "0103" "0100" "00000000" "00000000" "00000007" "0c00" "0200" "00000001" "01020304"
    )
    dropped = encode_verdict(0, 9, NF_DROP)
    assert dropped[-8:] == bytes.fromhex("00000000" "00000009")


def test_a_verdict_carries_the_changed_packet_padded() -> None:
    message = encode_verdict(3, 5, NF_ACCEPT, PACKET)
    length = struct.unpack_from("=I", message)[0]
    assert length == len(message) == 16 + 4 + 12 + 4 + len(PACKET) + (-len(PACKET) % 4)
    assert message[32:36] == struct.pack("=HH", 4 + len(PACKET), 10) and message[36 : 36 + len(PACKET)] == PACKET


def test_decode_yields_packets_and_acknowledgements_of_one_datagram() -> None:
    ack = struct.pack("=IHHII", 36, 2, 0, 1, 0) + struct.pack("=i", -16) + struct.pack("=IHHII", 76, 0x0302, 5, 1, 0)
    datagram = _packet_message(7, 42, PACKET) + _packet_message(7, 43, PACKET[:21]) + ack
    assert list(decode(datagram)) == [
        QueuedPacket(7, 42, 3, PACKET),
        QueuedPacket(7, 43, 3, PACKET[:21]),
        NetlinkAck(1, -16),
    ]


@pytest.mark.parametrize(
    "broken",
    [
        _packet_message(7, 42, PACKET)[:-3],  # the message says it is longer than the datagram
        struct.pack("=IHHII", 20, 0x0300, 0, 0, 0) + b"\0\0\0\0",  # no NFQA_PACKET_HDR
        struct.pack("=IHHII", 24, 0x0300, 0, 0, 0) + b"\0\0\0\0" + struct.pack("=HH", 40, 1),  # attribute overruns
        struct.pack("=IHHII", 8, 0x0300, 0, 0, 0),  # shorter than its own header
    ],
)
def test_decode_rejects_malformed_messages(broken: bytes) -> None:
    with pytest.raises(NfqueueError):
        list(decode(broken))


def test_encoders_refuse_what_the_protocol_cannot_carry() -> None:
    with pytest.raises(NfqueueError):
        encode_bind(70000)
    with pytest.raises(NfqueueError):
        encode_verdict(0, 1, 4)  # NF_REPEAT: not a verdict this handler gives
    with pytest.raises(NfqueueError):
        encode_verdict(0, 1, NF_ACCEPT, b"short")


def _admit(faults: PacketFaults, n: int, now: float, payload: bytes = PACKET) -> None:
    for i in range(n):
        faults.admit(QueuedPacket(0, i, 3, payload), now)


def test_delay_holds_each_packet_within_its_jitter_and_counts_the_overtaken() -> None:
    faults = PacketFaults(FaultPlan("delay", 0.2, 0.1), random.Random(1))
    _admit(faults, 100, now=10.0)
    assert faults.due(10.099) == [] and faults.next_due() >= 10.1
    released = faults.due(10.3)
    assert len(released) == 100 and faults.next_due() is None
    # all arrived at once, so every packet released after a later one was overtaken
    order = [r.packet_id for r in released]
    assert faults.counters["reordered"] == sum(1 for i, p in enumerate(order) if p < max(order[: i + 1]))
    assert faults.counters["reordered"] > 0
    assert 100 <= faults.report()["median_hold_ms"] <= 300


def test_reorder_holds_the_share_and_passes_the_rest_at_once() -> None:
    faults = PacketFaults(FaultPlan("reorder", 0.05, 0.0, 0.25), random.Random(2))
    _admit(faults, 400, now=0.0)
    at_once = faults.due(0.0)
    held = faults.due(0.05)
    assert len(at_once) + len(held) == 400 and 60 < len(held) < 140
    assert faults.counters["held"] == len(held)
    # a held packet is overtaken when any later packet of its flow went at once
    assert faults.counters["reordered"] == sum(1 for r in held if r.packet_id < max(a.packet_id for a in at_once))


class _Scripted(random.Random):
    """A random source whose ``uniform`` draws are given in advance."""

    def __init__(self, draws: list[float]) -> None:
        super().__init__(0)
        self.draws = draws

    def uniform(self, a: float, b: float) -> float:
        return self.draws.pop(0)


def test_reordering_is_counted_within_a_flow_only() -> None:
    other_flow = _ipv4_tcp(bytes([198, 18, 1, 10]), bytes([198, 18, 0, 11]), 3181, 40001, b"x")
    assert flow_of(PACKET) != flow_of(other_flow)
    faults = PacketFaults(FaultPlan("delay", 0.1, 0.1), _Scripted([0.05, -0.05, 0.05, -0.05]))
    faults.admit(QueuedPacket(0, 1, 3, PACKET), 0.0)  # due 0.15
    faults.admit(QueuedPacket(0, 2, 3, other_flow), 0.0)  # due 0.05: goes first, but in another flow
    assert [r.packet_id for r in faults.drain()] == [2, 1] and faults.counters["reordered"] == 0
    faults.admit(QueuedPacket(0, 3, 3, PACKET), 1.0)  # due 1.15
    faults.admit(QueuedPacket(0, 4, 3, PACKET), 1.0)  # due 1.05: overtakes 3 in its flow
    assert [r.packet_id for r in faults.drain()] == [4, 3] and faults.counters["reordered"] == 1


def test_corruption_changes_one_byte_after_the_ip_header_and_passes_at_once() -> None:
    faults = PacketFaults(FaultPlan("corrupt", share=0.5), random.Random(4))
    _admit(faults, 200, now=0.0)
    released = faults.due(0.0)
    assert len(released) == 200 and faults.counters["held"] == 0
    changed = [r.payload for r in released if r.payload is not None]
    assert len(changed) == faults.counters["corrupted"] and 60 < len(changed) < 140
    for payload in changed:
        diff = [i for i in range(len(PACKET)) if payload[i] != PACKET[i]]
        assert len(diff) == 1 and diff[0] >= 20
    assert corrupt_one_byte(PACKET[:20], random.Random(0)) == PACKET[:20]  # nothing after the header: unchanged


def test_the_plan_refuses_impossible_faults() -> None:
    with pytest.raises(ValueError):
        FaultPlan("duplicate")
    with pytest.raises(ValueError):
        FaultPlan("delay", 0.01, 0.02)
    with pytest.raises(ValueError):
        FaultPlan("corrupt", share=2)


def test_rule_counters_and_tcp_counters_parse_the_kernels_listings() -> None:
    listing = (
        "Chain BKSPARK-PACKET-OUT (1 references)\n"
        "    pkts      bytes target     prot opt in     out     source               destination\n"
        "      12     1234 TEE        0    --  *      *       0.0.0.0/0            0.0.0.0/0            "
        "statistic mode random probability 0.10000000009 TEE gw:198.18.1.1\n"
        "       3      180 DROP       0    --  *      *       0.0.0.0/0            0.0.0.0/0            "
        "statistic mode random probability 0.10000000009\n"
    )
    assert parse_rule_counters(listing) == [12, 3]
    snmp = (
        "Ip: Forwarding DefaultTTL\nIp: 1 64\n"
        "Tcp: RtoAlgorithm RetransSegs InCsumErrors\nTcp: 1 17 4\n"
        "TcpExt: SyncookiesSent TCPOFOQueue\nTcpExt: 0 9\n"
    )
    assert parse_tcp_counters(snmp) == {
        "Tcp.RtoAlgorithm": 1,
        "Tcp.RetransSegs": 17,
        "Tcp.InCsumErrors": 4,
        "TcpExt.SyncookiesSent": 0,
        "TcpExt.TCPOFOQueue": 9,
    }
