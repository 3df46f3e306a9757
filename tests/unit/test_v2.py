"""v2 codec: byte-exact frames (docs/protocol.md §6), Java's decoder rules, round trips."""

from __future__ import annotations

import pytest

from bkspark.errors import BKError, LocalProtocolError, MalformedFrameError, UnknownOpcodeError
from bkspark.protocol import v2, v2_bulk
from bkspark.protocol.digest import Digester, master_key
from bkspark.protocol.framing import FrameSplitter
from bkspark.protocol.v2 import (
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    BatchReadRequest,
    BatchReadResponse,
    ReadRequest,
    ReadResponse,
)

KEY = bytes.fromhex("e793cbc379107648537183605cd361d3bb789a39")
ENTRY = bytes.fromhex(
    "0000000000000001" "0000000000000000" "ffffffffffffffff" "0000000000000005" "0000000030a56872" "68656c6c6f"
)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


ADD_REQUEST = h("00000045 02010000 e793cbc379107648537183605cd361d3bb789a39" + ENTRY.hex())
ADD_RESPONSE = h("00000018 02010000 00000000 0000000000000001 0000000000000000")
READ_REQUEST = h("00000014 02020000 0000000000000001 0000000000000000")
FENCING_READ_REQUEST = h(
    "00000028 02020005 0000000000000001 ffffffffffffffff e793cbc379107648537183605cd361d3bb789a39"
)
READ_RESPONSE = h("00000045 02020000 00000000 0000000000000001 0000000000000000" + ENTRY.hex())
READ_ERROR_RESPONSE = h("00000018 02020000 00000002 0000000000000001 0000000000000005")
BATCH_READ_REQUEST = h("00000028 02070000 0000000000000001 0000000000000000 000000000000002a 0000000a 0000000000100000")
BATCH_READ_RESPONSE = h(
    "00000051 02070000 00000000 0000000000000001 0000000000000000 000000000000002a 0000002d" + ENTRY.hex()
)
AUTH_REQUEST = h("0000001a 02030000 0a12 4175746844697361626c6564506c7567696e 1200")


def body(frame: bytes) -> bytes:
    return frame[4:]


# -- worked examples (docs/protocol.md §6): encoding -----------------------------------------------


def test_master_key_vector_is_the_one_in_frames() -> None:
    assert master_key(b"secret") == KEY
    assert Digester("CRC32", b"secret").package_entry(1, 0, -1, 5, b"hello") == ENTRY


def test_add_request_vector() -> None:
    assert v2.encode_add_request(0, KEY, ENTRY) == ADD_REQUEST
    assert v2.encode_request(AddRequest(0, KEY, ENTRY)) == ADD_REQUEST
    assert v2.encode_add_request(0, KEY, memoryview(ENTRY)) == ADD_REQUEST


def test_add_response_vector() -> None:
    assert v2.encode_add_response(v2.EOK, 1, 0) == ADD_RESPONSE
    assert v2.encode_response(AddResponse(0, 1, 0)) == ADD_RESPONSE


def test_read_request_vectors() -> None:
    assert v2.encode_read_request(1, 0) == READ_REQUEST
    assert v2.encode_request(ReadRequest(0, 1, 0)) == READ_REQUEST
    flags = v2.FLAG_HIGH_PRIORITY | v2.FLAG_DO_FENCING
    assert flags == 5
    assert v2.encode_read_request(1, -1, flags, KEY) == FENCING_READ_REQUEST
    assert v2.encode_request(ReadRequest(flags, 1, -1, KEY)) == FENCING_READ_REQUEST


def test_a_run_of_read_requests_is_the_frames_of_each_joined() -> None:
    """encode_read_requests (a range read's run to one bookie) is encode_read_request of each entry id, joined;
    an id past int64 is the same typed error."""
    ids = [0, 1, -1, 5, 2**40, 2**63 - 1, 7]
    for ledger in (1, 0, 2**63 - 1):
        assert v2_bulk.encode_read_requests(ledger, ids) == b"".join(v2.encode_read_request(ledger, e) for e in ids)
    assert v2_bulk.encode_read_requests(1, []) == b""
    assert v2_bulk.encode_read_requests(1, [0]) == READ_REQUEST
    for bad_ledger, bad_ids in ((2**63, [0]), (1, [3, 2**63])):
        with pytest.raises(LocalProtocolError):
            v2.encode_read_request(bad_ledger, bad_ids[-1])
        with pytest.raises(LocalProtocolError):
            v2_bulk.encode_read_requests(bad_ledger, bad_ids)


def test_read_response_vectors() -> None:
    assert v2.encode_read_response(0, 1, 0, ENTRY) == READ_RESPONSE
    assert v2.encode_response(ReadResponse(0, 1, 0, ENTRY)) == READ_RESPONSE
    assert v2.encode_read_response(v2.ENOENTRY, 1, 5) == READ_ERROR_RESPONSE


def test_batch_read_vectors() -> None:
    assert v2.encode_batch_read_request(1, 0, 42, 10, 1 << 20) == BATCH_READ_REQUEST
    assert v2.encode_request(BatchReadRequest(0, 1, 0, 42, 10, 1 << 20)) == BATCH_READ_REQUEST
    assert v2.encode_batch_read_response(0, 1, 0, 42, [ENTRY]) == BATCH_READ_RESPONSE
    assert v2.encode_response(BatchReadResponse(0, 1, 0, 42, [ENTRY])) == BATCH_READ_RESPONSE


def test_auth_request_vector() -> None:
    assert v2.encode_auth_request(v2.AUTH_DISABLED_PLUGIN_NAME, b"") == AUTH_REQUEST
    assert v2.encode_request(AuthRequest("AuthDisabledPlugin", b"")) == AUTH_REQUEST


def test_auth_response_layout_has_no_rc() -> None:
    frame = v2.encode_auth_response("AuthDisabledPlugin", b"")
    assert frame == h("0000001a 02030000") + AUTH_REQUEST[8:]


# -- worked examples (docs/protocol.md §6): decoding ---------------------------------------------


def test_decode_vectors_requests() -> None:
    add = v2.decode_request(body(ADD_REQUEST))
    assert add == AddRequest(0, KEY, ENTRY)
    assert (add.ledger_id, add.entry_id) == (1, 0)
    assert isinstance(add.entry, memoryview)
    assert v2.decode_request(body(READ_REQUEST)) == ReadRequest(0, 1, 0, None)
    assert v2.decode_request(body(FENCING_READ_REQUEST)) == ReadRequest(5, 1, -1, KEY)
    assert v2.decode_request(body(BATCH_READ_REQUEST)) == BatchReadRequest(0, 1, 0, 42, 10, 1 << 20)
    assert v2.decode_request(body(AUTH_REQUEST)) == AuthRequest("AuthDisabledPlugin", b"")


def test_decode_vectors_responses() -> None:
    assert v2.decode_response(body(ADD_RESPONSE)) == AddResponse(0, 1, 0)
    read = v2.decode_response(body(READ_RESPONSE))
    assert read == ReadResponse(0, 1, 0, ENTRY)
    assert isinstance(read, ReadResponse) and isinstance(read.entry, memoryview)
    assert v2.decode_response(body(READ_ERROR_RESPONSE)) == ReadResponse(v2.ENOENTRY, 1, 5, b"")
    batch = v2.decode_response(body(BATCH_READ_RESPONSE))
    assert batch == BatchReadResponse(0, 1, 0, 42, [ENTRY])
    assert v2.decode_batch_read_response_entries(body(BATCH_READ_RESPONSE)) == [ENTRY]
    auth = v2.decode_response(body(v2.encode_auth_response("AuthDisabledPlugin", b"")))
    assert auth == AuthResponse("AuthDisabledPlugin", b"")


def test_frames_through_splitter() -> None:
    stream = ADD_REQUEST + READ_REQUEST + FENCING_READ_REQUEST + BATCH_READ_REQUEST + AUTH_REQUEST
    splitter = FrameSplitter()
    decoded = []
    for i in range(0, len(stream), 7):
        decoded.extend(v2.decode_request(b) for b in splitter.feed(stream[i : i + 7]))
    assert [type(m) for m in decoded] == [AddRequest, ReadRequest, ReadRequest, BatchReadRequest, AuthRequest]


# -- header ------------------------------------------------------------------------------


def test_header_packing() -> None:
    assert v2.pack_header(2, 1, 0) == 0x02010000
    assert v2.pack_header(2, 2, 5) == 0x02020005
    assert v2.pack_header(0, 2, 5) == 2  # legacy: flags dropped
    assert v2.pack_header(-1, 1, 0) == 0xFF010000
    assert v2.unpack_header(0x02020005) == (2, 2, 5)
    assert v2.unpack_header(0x00000002) == (0, 2, 0)
    assert v2.unpack_header(0x00010000) == (0, 0, 0)  # Java reads the low byte as opcode
    assert v2.unpack_header(0xFF07FFFF) == (-1, 7, 0xFFFF)
    for bad in [(256, 1, 0), (2, 128, 0), (2, 1, 0x10000), (2, 1, -1)]:
        with pytest.raises(LocalProtocolError):
            v2.pack_header(*bad)


def test_legacy_version_0_requests_decode() -> None:
    # Version 0: the header is just the opcode; no flags, so no master key is read.
    legacy_read = h("00000002 0000000000000003 0000000000000004") + KEY
    assert v2.decode_request(legacy_read) == ReadRequest(0, 3, 4, None, version=0)
    legacy_add = h("00000001") + KEY + ENTRY
    assert v2.decode_request(legacy_add) == AddRequest(0, KEY, ENTRY, version=0)
    assert v2.encode_read_request(3, 4, version=0) == h("00000014 00000002 0000000000000003 0000000000000004")


def test_response_version_echoes_request_version() -> None:
    assert v2.encode_add_response(0, 1, 0, version=1)[4:8] == h("01010000")
    assert v2.encode_read_response(v2.EBADVERSION, 1, 0, version=3)[4:12] == h("03020000 00000067")
    assert v2.decode_response(v2.encode_add_response(0, 1, 0, version=-3)[4:]).version == -3
    assert v2.encode_add_response(0, 1, 0, version=0)[4:8] == h("00000001")


# -- Java's decoder rules ----------------------------------------------------------------


def test_read_request_trailing_bytes_ignored_unless_fencing() -> None:
    # Master key present but no fencing flag: Java does not read it.
    assert v2.decode_request(body(v2.encode_read_request(1, 0, 0, KEY))) == ReadRequest(0, 1, 0, None)
    assert v2.decode_request(body(READ_REQUEST) + b"garbage") == ReadRequest(0, 1, 0, None)
    # Fencing with version 1: the key is not read either.
    v1_fence = h("01020001 0000000000000001 0000000000000000") + KEY
    assert v2.decode_request(v1_fence) == ReadRequest(1, 1, 0, None, version=1)
    # Fencing with version 2 but no key: Java's readMasterKey runs off the buffer.
    with pytest.raises(MalformedFrameError):
        v2.decode_request(h("02020001 0000000000000001 0000000000000000") + KEY[:19])
    assert v2.decode_request(body(FENCING_READ_REQUEST) + b"xx").master_key == KEY


def test_batch_read_request_fencing_and_truncation() -> None:
    fenced = v2.encode_batch_read_request(7, 3, 9, 0, -1, v2.FLAG_DO_FENCING, KEY)
    assert len(fenced) == 64
    assert v2.decode_request(body(fenced)) == BatchReadRequest(1, 7, 3, 9, 0, -1, KEY)
    with pytest.raises(MalformedFrameError):
        v2.decode_request(body(fenced)[:-1])
    with pytest.raises(MalformedFrameError):
        v2.decode_request(body(BATCH_READ_REQUEST)[:-1])


def test_add_request_needs_key_and_entry_ids() -> None:
    assert v2.decode_request(h("02010002") + KEY + bytes(16)).flags == v2.FLAG_RECOVERY_ADD
    with pytest.raises(MalformedFrameError):
        v2.decode_request(h("02010000") + KEY + bytes(15))


def test_unknown_opcodes() -> None:
    for opcode in (0, v2.READ_LAC, v2.WRITE_LAC, v2.GET_BOOKIE_INFO, 8, 0x7F, 0xFF):
        with pytest.raises(UnknownOpcodeError):
            v2.decode_request(bytes([2, opcode, 0, 0]) + bytes(60))
        with pytest.raises(UnknownOpcodeError):
            v2.decode_response(bytes([2, opcode, 0, 0]) + bytes(60))


@pytest.mark.parametrize("size", [0, 1, 3])
def test_bodies_shorter_than_a_header(size: int) -> None:
    with pytest.raises(MalformedFrameError):
        v2.decode_request(body(READ_REQUEST)[:size])
    with pytest.raises(MalformedFrameError):
        v2.decode_response(body(READ_RESPONSE)[:size])


def test_truncated_responses() -> None:
    for frame in (ADD_RESPONSE, READ_ERROR_RESPONSE):
        with pytest.raises(MalformedFrameError):
            v2.decode_response(body(frame)[:23])
    with pytest.raises(MalformedFrameError):
        v2.decode_response(body(BATCH_READ_RESPONSE)[:31])
    # An item length that runs past the end, a dangling partial length, a negative length.
    with pytest.raises(MalformedFrameError):
        v2.decode_response(body(BATCH_READ_RESPONSE)[:-1])
    with pytest.raises(MalformedFrameError):
        v2.decode_response(body(BATCH_READ_RESPONSE) + b"\x00\x00")
    with pytest.raises(MalformedFrameError):
        v2.decode_response(body(BATCH_READ_RESPONSE) + b"\xff\xff\xff\xff")
    with pytest.raises(MalformedFrameError):
        v2.decode_batch_read_response_entries(body(BATCH_READ_RESPONSE)[:10])


def test_add_response_ignores_trailing_bytes_read_response_keeps_them() -> None:
    assert v2.decode_response(body(ADD_RESPONSE) + b"zz") == AddResponse(0, 1, 0)
    assert v2.decode_response(body(READ_ERROR_RESPONSE) + b"zz") == ReadResponse(2, 1, 5, b"zz")


def test_batch_response_items() -> None:
    entries = [b"", b"a", bytes(300)]
    frame = v2.encode_batch_read_response(0, 4, 10, 99, entries)
    decoded = v2.decode_response(body(frame))
    assert decoded == BatchReadResponse(0, 4, 10, 99, entries)
    assert all(isinstance(item, memoryview) for item in v2.decode_batch_read_response_entries(body(frame)))
    error = v2.encode_batch_read_response(v2.ENOLEDGER, 4, 10, 99)
    assert len(error) == 36
    assert v2.decode_response(body(error)) == BatchReadResponse(1, 4, 10, 99, [])


def test_auth_message_must_parse_with_required_fields() -> None:
    with pytest.raises(MalformedFrameError):
        v2.decode_request(h("02030000"))  # empty AuthMessage: required fields missing
    with pytest.raises(MalformedFrameError):
        v2.decode_request(h("02030000 0a05 4175"))  # truncated string
    with pytest.raises(MalformedFrameError):
        v2.decode_response(h("02030000 0a01 41"))  # payload missing
    with pytest.raises(MalformedFrameError):
        v2.decode_response(h("02030000 00"))  # field number 0
    # proto2 strings are not UTF-8 checked; Java decodes with replacement characters.
    assert v2.decode_response(h("02030000 0a02 fffe 1201 07")) == AuthResponse("\ufffd\ufffd", b"\x07")


def test_auth_round_trip_with_payload() -> None:
    frame = v2.encode_request(AuthRequest("SASL", b"\x00\x01token"))
    assert v2.decode_request(body(frame)) == AuthRequest("SASL", b"\x00\x01token")


# -- encoder argument checks -------------------------------------------------------------


def test_encoders_reject_what_the_protocol_cannot_express() -> None:
    with pytest.raises(LocalProtocolError):
        v2.encode_add_request(0, KEY[:19], ENTRY)
    with pytest.raises(LocalProtocolError):
        v2.encode_add_request(0, KEY, ENTRY[:15])
    with pytest.raises(LocalProtocolError):
        _ = AddRequest(0, KEY, b"short").ledger_id
    with pytest.raises(LocalProtocolError):
        v2.encode_read_request(1, 0, v2.FLAG_DO_FENCING, KEY + b"x")
    with pytest.raises(LocalProtocolError):
        v2.encode_read_request(2**63, 0)
    with pytest.raises(LocalProtocolError):
        v2.encode_read_request(1, 0, flags=0x10000)
    with pytest.raises(LocalProtocolError):
        v2.encode_batch_read_request(1, 0, 1, 2**31, 0)
    with pytest.raises(LocalProtocolError):
        v2.encode_add_response(2**31, 1, 0)
    with pytest.raises(LocalProtocolError):
        v2.encode_auth_request(b"name", b"")  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        v2.encode_request(AddResponse(0, 1, 0))  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        v2.encode_response(ReadRequest(0, 1, 0))  # type: ignore[arg-type]


def test_fencing_read_without_key_is_expressible() -> None:
    """Java's encoder allows it (the bookie then answers EUA or drops the connection)."""
    assert v2.encode_read_request(1, 0, v2.FLAG_DO_FENCING) == h("00000014 02020001 0000000000000001 0000000000000000")


def test_round_trips() -> None:
    requests = [
        AddRequest(v2.FLAG_RECOVERY_ADD | v2.FLAG_HIGH_PRIORITY, KEY, ENTRY),
        ReadRequest(v2.FLAG_HIGH_PRIORITY, 2**63 - 1, -1),
        ReadRequest(v2.FLAG_DO_FENCING, 0, 0, KEY),
        BatchReadRequest(v2.FLAG_DO_FENCING | v2.FLAG_HIGH_PRIORITY, 5, 6, -7, -1, 2**63 - 1, KEY),
        AuthRequest("x" * 300, bytes(range(256))),
    ]
    for request in requests:
        assert v2.decode_request(body(v2.encode_request(request))) == request
    responses = [
        AddResponse(v2.EFENCED, 3, 4),
        ReadResponse(v2.EOK, 3, -1, ENTRY),
        ReadResponse(-5, 3, 4),
        BatchReadResponse(0, 1, 2, 3, [ENTRY, ENTRY]),
        AuthResponse("AuthDisabledPlugin", b""),
    ]
    for response in responses:
        assert v2.decode_response(body(v2.encode_response(response))) == response


def test_decode_errors_are_protocol_errors() -> None:
    assert issubclass(MalformedFrameError, BKError) and issubclass(UnknownOpcodeError, BKError)
