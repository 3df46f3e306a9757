"""The nfnetlink_queue protocol as pure functions over bytes (sans-IO): what the kernel's ``NFQUEUE`` target and a
user-space handler say to each other over an ``AF_NETLINK``/``NETLINK_NETFILTER`` socket (docs/reliability.md,
"Packet faults without netem").

An iptables rule ``-j NFQUEUE --queue-num N`` hands each matching packet to the handler bound to queue ``N``; the
kernel holds it until the handler sends a verdict (accept, with the packet as it was or replaced by other bytes, or
drop). Three messages are enough for that:

* ``NFQNL_MSG_CONFIG`` (handler -> kernel): bind queue ``N``, copy whole packets, accept packets when the queue is
  full instead of dropping them (:func:`encode_bind`, :func:`encode_unbind`);
* ``NFQNL_MSG_PACKET`` (kernel -> handler): the packet's id, its hook and its bytes from the IP header on
  (:func:`decode` yields :class:`QueuedPacket`);
* ``NFQNL_MSG_VERDICT`` (handler -> kernel): the id and the verdict, and the packet's new bytes if it changed
  (:func:`encode_verdict`).

Every message is a netlink header (native byte order), a ``nfgenmsg`` (family, version, the queue number in network
order) and attributes (``nlattr``: length and type in native order, padded to 4 bytes); the structures inside the
attributes are in network order. The constants are those of ``<linux/netfilter/nfnetlink_queue.h>``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "NF_ACCEPT",
    "NF_DROP",
    "NETLINK_NETFILTER",
    "NfqueueError",
    "NetlinkAck",
    "QueuedPacket",
    "decode",
    "encode_bind",
    "encode_unbind",
    "encode_verdict",
]

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5

# <linux/netlink.h>
_NLMSG_HDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_NLM_F_REQUEST = 0x1
_NLM_F_ACK = 0x4
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_NLA_HDR = struct.Struct("=HH")  # length, type
_NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER

# <linux/netfilter/nfnetlink.h>
_NFGENMSG = struct.Struct("!BBH")  # family, version, resource id (the queue number)
_NFNETLINK_V0 = 0
_NFNL_SUBSYS_QUEUE = 3

# <linux/netfilter/nfnetlink_queue.h>
_NFQNL_MSG_PACKET = 0
_NFQNL_MSG_VERDICT = 1
_NFQNL_MSG_CONFIG = 2
_NFQA_PACKET_HDR = 1
_NFQA_VERDICT_HDR = 2
_NFQA_PAYLOAD = 10
_NFQA_CFG_CMD = 1
_NFQA_CFG_PARAMS = 2
_NFQA_CFG_QUEUE_MAXLEN = 3
_NFQA_CFG_MASK = 4
_NFQA_CFG_FLAGS = 5
_NFQNL_CFG_CMD_BIND = 1
_NFQNL_CFG_CMD_UNBIND = 2
_NFQNL_COPY_PACKET = 2
_NFQA_CFG_F_FAIL_OPEN = 1
_PACKET_HDR = struct.Struct("!IHB")  # packet id, hardware protocol, hook
_VERDICT_HDR = struct.Struct("!II")  # verdict, packet id
_CFG_CMD = struct.Struct("!BxH")  # command, pad, protocol family
_CFG_PARAMS = struct.Struct("!IB")  # copy range, copy mode
_BE32 = struct.Struct("!I")

# <linux/netfilter.h>
NF_DROP = 0
NF_ACCEPT = 1

#: The most a packet's copy may hold (an IPv4 packet's largest size).
COPY_RANGE = 0xFFFF


class NfqueueError(ValueError):
    """Bytes that are not a well-formed nfnetlink_queue message, or a value the protocol cannot carry."""


@dataclass(frozen=True)
class QueuedPacket:
    """A packet the kernel holds in queue ``queue`` until a verdict names ``packet_id``."""

    queue: int
    packet_id: int
    hook: int
    payload: bytes


@dataclass(frozen=True)
class NetlinkAck:
    """The kernel's answer to a request sent with an acknowledgement asked for: ``error`` 0 (done) or ``-errno``."""

    sequence: int
    error: int


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attr(kind: int, value: bytes) -> bytes:
    length = _NLA_HDR.size + len(value)
    return _NLA_HDR.pack(length, kind) + value + b"\0" * (_align(length) - length)


def _message(msg_type: int, flags: int, sequence: int, queue: int, attrs: bytes) -> bytes:
    if not 0 <= queue <= 0xFFFF:
        raise NfqueueError(f"queue number {queue} outside 0..65535")
    body = _NFGENMSG.pack(0, _NFNETLINK_V0, queue) + attrs  # family AF_UNSPEC: the queue is bound for every family
    kind = (_NFNL_SUBSYS_QUEUE << 8) | msg_type
    return _NLMSG_HDR.pack(_NLMSG_HDR.size + len(body), kind, flags, sequence & 0xFFFFFFFF, 0) + body


def encode_bind(queue: int, sequence: int = 0, max_length: int = 4096) -> bytes:
    """Bind ``queue`` to the sending socket: whole packets copied, at most ``max_length`` held, and packets that
    find the queue full accepted rather than dropped (fail open). The kernel acknowledges it (:class:`NetlinkAck`)."""
    attrs = (
        _attr(_NFQA_CFG_CMD, _CFG_CMD.pack(_NFQNL_CFG_CMD_BIND, 0))
        + _attr(_NFQA_CFG_PARAMS, _CFG_PARAMS.pack(COPY_RANGE, _NFQNL_COPY_PACKET))
        + _attr(_NFQA_CFG_QUEUE_MAXLEN, _BE32.pack(max_length))
        + _attr(_NFQA_CFG_MASK, _BE32.pack(_NFQA_CFG_F_FAIL_OPEN))
        + _attr(_NFQA_CFG_FLAGS, _BE32.pack(_NFQA_CFG_F_FAIL_OPEN))
    )
    return _message(_NFQNL_MSG_CONFIG, _NLM_F_REQUEST | _NLM_F_ACK, sequence, queue, attrs)


def encode_unbind(queue: int, sequence: int = 0) -> bytes:
    """Unbind ``queue``: the kernel drops what it still holds, later packets pass (``--queue-bypass``)."""
    attrs = _attr(_NFQA_CFG_CMD, _CFG_CMD.pack(_NFQNL_CFG_CMD_UNBIND, 0))
    return _message(_NFQNL_MSG_CONFIG, _NLM_F_REQUEST | _NLM_F_ACK, sequence, queue, attrs)


def encode_verdict(queue: int, packet_id: int, verdict: int, payload: bytes | None = None, sequence: int = 0) -> bytes:
    """The verdict on packet ``packet_id`` of ``queue``; with ``payload`` the kernel sends those bytes instead."""
    if verdict not in (NF_ACCEPT, NF_DROP):
        raise NfqueueError(f"verdict {verdict} is neither NF_ACCEPT nor NF_DROP")
    if payload is not None and not 20 <= len(payload) <= COPY_RANGE:
        raise NfqueueError(f"a replacement packet of {len(payload)} bytes is not an IPv4 packet")
    attrs = _attr(_NFQA_VERDICT_HDR, _VERDICT_HDR.pack(verdict, packet_id & 0xFFFFFFFF))
    if payload is not None:
        attrs += _attr(_NFQA_PAYLOAD, bytes(payload))
    return _message(_NFQNL_MSG_VERDICT, _NLM_F_REQUEST, sequence, queue, attrs)


def _attrs(data: memoryview) -> dict[int, memoryview]:
    found: dict[int, memoryview] = {}
    offset = 0
    while offset + _NLA_HDR.size <= len(data):
        length, kind = _NLA_HDR.unpack_from(data, offset)
        if length < _NLA_HDR.size or offset + length > len(data):
            raise NfqueueError(f"attribute of length {length} at offset {offset} overruns its message")
        found[kind & _NLA_TYPE_MASK] = data[offset + _NLA_HDR.size : offset + length]
        offset += _align(length)
    return found


def decode(datagram: bytes) -> Iterator[QueuedPacket | NetlinkAck]:
    """The messages of one datagram read from the socket: queued packets and acknowledgements (others skipped)."""
    data = memoryview(datagram)
    offset = 0
    while offset + _NLMSG_HDR.size <= len(data):
        length, msg_type, _flags, sequence, _port = _NLMSG_HDR.unpack_from(data, offset)
        if length < _NLMSG_HDR.size or offset + length > len(data):
            raise NfqueueError(f"netlink message of length {length} at offset {offset} overruns the datagram")
        body = data[offset + _NLMSG_HDR.size : offset + length]
        offset += _align(length)
        if msg_type == _NLMSG_ERROR:
            if len(body) < 4:
                raise NfqueueError("an error message without its error code")
            yield NetlinkAck(sequence, struct.unpack_from("=i", body)[0])
        elif msg_type == (_NFNL_SUBSYS_QUEUE << 8) | _NFQNL_MSG_PACKET:
            if len(body) < _NFGENMSG.size:
                raise NfqueueError("a packet message without its nfgenmsg")
            queue = _NFGENMSG.unpack_from(body)[2]
            attrs = _attrs(body[_NFGENMSG.size :])
            header = attrs.get(_NFQA_PACKET_HDR)
            if header is None or len(header) < _PACKET_HDR.size:
                raise NfqueueError("a packet message without NFQA_PACKET_HDR")
            packet_id, _protocol, hook = _PACKET_HDR.unpack_from(header)
            yield QueuedPacket(queue, packet_id, hook, bytes(attrs.get(_NFQA_PAYLOAD, b"")))
        elif msg_type == _NLMSG_DONE:
            return
