"""ProtocolDetector: per-connection, sticky v3-then-v2, as BookieProtoEncoding.RequestDecoder decides.

v2 frames are built with struct from the layouts of docs/protocol.md §6.
"""

from __future__ import annotations

import struct

import pytest

from bkspark.protocol import v3
from bkspark.protocol.detect import ProtocolDetector
from bkspark.protocol.v3 import pb

MASTER_KEY = bytes.fromhex("e793cbc379107648537183605cd361d3bb789a39")
ENTRY = bytes.fromhex(
    "0000000000000001" "0000000000000000" "ffffffffffffffff" "0000000000000005" "0000000030a56872" "68656c6c6f"
)


def v2_header(opcode: int, flags: int = 0, version: int = 2) -> bytes:
    return struct.pack(">I", (version & 0xFF) << 24 | (opcode & 0xFF) << 16 | (flags & 0xFFFF))


# Frame bodies (length prefix stripped): the worked v2 examples (docs/protocol.md §6) plus the legacy/older
# header versions.
V2_BODIES = {
    "add": v2_header(1) + MASTER_KEY + ENTRY,
    "recovery_add": v2_header(1, 0x0006) + MASTER_KEY + ENTRY,
    "read": v2_header(2) + struct.pack(">qq", 1, 0),
    "fencing_read": v2_header(2, 0x0005) + struct.pack(">qq", 1, -1) + MASTER_KEY,
    "batch_read": v2_header(7) + struct.pack(">qqqiq", 1, 0, 42, 10, 1 << 20),
    "fencing_batch_read": v2_header(7, 0x0001) + struct.pack(">qqqiq", 1, 0, 42, 10, 1 << 20) + MASTER_KEY,
    "auth": v2_header(3) + bytes.fromhex("0a12") + b"AuthDisabledPlugin" + bytes.fromhex("1200"),
    "read_v1": v2_header(2, version=1) + struct.pack(">qq", 1, 0),
    "read_v0_legacy": struct.pack(">i", 2) + struct.pack(">qq", 1, 0),  # version 0: the header is the opcode
    "add_v0_legacy": struct.pack(">i", 1) + MASTER_KEY + ENTRY,
}

# Exact v2 frames (with length) of Apache BookKeeper's worked examples, laid out as docs/protocol.md §6 describes,
# to make sure the struct-built bodies are right.
SPEC_V2_FRAMES = {
    "add": "00000045 02010000 e793cbc379107648537183605cd361d3bb789a39 0000000000000001 0000000000000000"
    " ffffffffffffffff 0000000000000005 0000000030a56872 68656c6c6f",
    "read": "00000014 02020000 0000000000000001 0000000000000000",
    "fencing_read": "00000028 02020005 0000000000000001 ffffffffffffffff e793cbc379107648537183605cd361d3bb789a39",
    "batch_read": "00000028 02070000 0000000000000001 0000000000000000 000000000000002a 0000000a 0000000000100000",
    "auth": "0000001a 02030000 0a12 4175746844697361626c6564506c7567696e 1200",
}

V3_REQUESTS = {
    "add": v3.add_request(1, 1, 0, MASTER_KEY, ENTRY),
    "read": v3.read_request(2, 1, 0),
    "fencing_read": v3.read_request(3, 1, -1, v3.FLAG_DO_FENCING, master_key=MASTER_KEY),
    "start_tls": v3.start_tls_request(4),
    "auth": v3.auth_request(5, "AuthDisabledPlugin", b""),
    "write_lac": v3.write_lac_request(6, 1, 7, MASTER_KEY, b"\0" * 24),
    "read_lac": v3.read_lac_request(7, 1),
    "bookie_info": v3.get_bookie_info_request(8),
    "force": v3.force_ledger_request(9, 1),
    "list": v3.get_list_of_entries_request(10, 1),
    "batch_read_ext": v3.batch_read_request(11, 1, 0, 10, 1 << 20, scope_id=3),
    "scoped_add": v3.add_request(12, 1, 0, MASTER_KEY, ENTRY, scope_id=-1),
    "unsupported_op": pb.Request(header=v3.new_header(pb.RANGE_ADD_ENTRY, 13)),
    "bad_version": pb.Request(header=pb.BKPacketHeader(version=pb.VERSION_ONE, operation=pb.READ_LAC, txnId=14)),
}


@pytest.mark.parametrize("name", sorted(SPEC_V2_FRAMES))
def test_struct_built_v2_bodies_equal_the_spec_hex(name: str) -> None:
    assert V2_BODIES[name] == bytes.fromhex("".join(SPEC_V2_FRAMES[name].split()))[4:]


@pytest.mark.parametrize("name", sorted(V2_BODIES))
def test_every_v2_frame_classifies_as_v2(name: str) -> None:
    detector = ProtocolDetector()
    assert detector.version == "v3"
    assert detector.classify(V2_BODIES[name]) == "v2"
    assert detector.version == "v2"


@pytest.mark.parametrize("name", sorted(V3_REQUESTS))
def test_every_v3_request_classifies_as_v3(name: str) -> None:
    detector = ProtocolDetector()
    body = v3.encode_request(V3_REQUESTS[name])[4:]
    assert body[0] == 0x0A  # field 1, header, length-delimited
    for _ in range(3):
        assert detector.classify(body) == "v3"
    assert detector.version == "v3"


def test_parse_returns_the_request_once() -> None:
    detector = ProtocolDetector()
    req = V3_REQUESTS["fencing_read"]
    parsed = detector.parse(memoryview(v3.encode_request(req))[4:])
    assert parsed == req
    assert detector.parse(V2_BODIES["read"]) is None


def test_switch_to_v2_is_sticky() -> None:
    detector = ProtocolDetector()
    v3_body = v3.encode_request(V3_REQUESTS["read"])[4:]
    assert detector.classify(v3_body) == "v3"
    assert detector.classify(V2_BODIES["add"]) == "v2"
    # Once v2, a valid v3 frame is decoded as v2 too (the Java bookie then fails it and closes).
    assert detector.classify(v3_body) == "v2"
    assert detector.parse(v3_body) is None
    assert detector.version == "v2"


def test_start_tls_then_v2_is_the_allowed_mix() -> None:
    detector = ProtocolDetector()
    assert detector.classify(v3.encode_request(v3.start_tls_request(1))[4:]) == "v3"
    assert detector.classify(V2_BODIES["read"]) == "v2"
    assert detector.classify(V2_BODIES["add"]) == "v2"


def test_connections_are_independent() -> None:
    first, second = ProtocolDetector(), ProtocolDetector()
    assert first.classify(V2_BODIES["read"]) == "v2"
    assert second.classify(v3.encode_request(V3_REQUESTS["read"])[4:]) == "v3"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"", "an empty body lacks the required header"),
        (bytes.fromhex("0a02 0803"), "header without operation and txnId"),
        (bytes.fromhex("0a06 0803 1063 1801"), "operation 99 is unknown, so the required field is missing"),
        (bytes.fromhex("0a06 0803 1002 1801 aa0602 0801"), "addRequest lacks required fields"),
        (bytes.fromhex("0a06 0803 1002"), "truncated"),
        (bytes.fromhex("07"), "field number 0"),
    ],
)
def test_frames_protobuf_java_rejects_switch_to_v2(body: bytes, why: str) -> None:
    detector = ProtocolDetector()
    assert detector.classify(body) == "v2", why


def test_broken_extension_stays_v3_as_in_java() -> None:
    # protobuf-java with BookKeeper's schema skips field 1062 entirely, so the
    # Request parses and the connection stays v3 (the bookie then answers EBADREQ).
    detector = ProtocolDetector()
    parsed = detector.parse(bytes.fromhex("0a06 0803 100c 1801 b24202 0801"))
    assert parsed is not None and not parsed.HasField("batchReadRequest")
    assert detector.version == "v3"
