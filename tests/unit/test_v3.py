"""v3 codec: byte vectors laid out as docs/protocol.md §3 and §7 describe, every builder, status rules, our
extensions, and the AvailabilityOfEntriesOfLedger codec (vectors produced by BookKeeper 4.17.3's Java class)."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from bkspark.errors import LocalProtocolError, MalformedFrameError
from bkspark.protocol import v3
from bkspark.protocol.v3 import pb


def h(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


# docs/protocol.md §7 inputs: CRC32 ledger 1, password "secret".
MASTER_KEY = h("e793cbc379107648537183605cd361d3bb789a39")
ENTRY = h("0000000000000001 0000000000000000 ffffffffffffffff 0000000000000005 0000000030a56872 68656c6c6f")
LAC_BLOB = h("0000000000000001 0000000000000007 0000000065a4cab5")

# --------------------------------------------------------------------------
# Worked examples (docs/protocol.md §3, §7), byte for byte, both directions

ADD_REQUEST_FRAME = h(
    "00000054 0a06 0803 1002 1801 aa0649 0801 1000 1a14 e793cbc379107648537183605cd361d3bb789a39"
    "222d 0000000000000001 0000000000000000 ffffffffffffffff 0000000000000005 0000000030a56872 68656c6c6f"
)
ADD_RESPONSE_BODY = h("0a06 0803 1002 1801  1000  aa0606 0800 1001 1800")
FENCING_READ_BODY = h(
    "0a06 0803 1001 1802 a20626 0801 10ffffffffffffffffff01 1a14 e793cbc379107648537183605cd361d3bb789a39 a00601"
)
READ_RESPONSE_BODY = h("0a06 0803 1001 1803 1000 a20640 0800 1001 1800 222d") + ENTRY + h("28ffffffffffffffffff01")
PIGGYBACK_READ_FRAME = h("00000022 0a08 0803 1001 1808 2064  a20615 0801 10ffffffffffffffffff01 2004 28e807 a00602")
START_TLS_FRAME = h("0000000b 0a06 0803 1009 1801 d20600")
WRITE_LAC_FRAME = h("0000003f 0a06 0803 1006 1805 ba0634 0801 1007 1a14") + MASTER_KEY + h("2218") + LAC_BLOB
READ_LAC_FRAME = h("0000000d 0a06 0803 1007 1806 c20602 0801")
GET_BOOKIE_INFO_FRAME = h("0000000d 0a06 0803 1008 1807 ca0602 0803")


def test_add_request_matches_spec_bytes() -> None:
    assert v3.encode_request(v3.add_request(1, 1, 0, MASTER_KEY, ENTRY)) == ADD_REQUEST_FRAME
    req = v3.decode_request(ADD_REQUEST_FRAME[4:])
    assert (req.header.operation, req.header.txnId, req.header.HasField("priority")) == (pb.ADD_ENTRY, 1, False)
    assert (req.addRequest.ledgerId, req.addRequest.entryId) == (1, 0)
    assert req.addRequest.masterKey == MASTER_KEY and req.addRequest.body == ENTRY
    assert not req.addRequest.HasField("flag") and not req.addRequest.HasField("writeFlags")


def test_add_response_matches_spec_bytes() -> None:
    resp = v3.add_response(v3.add_request(1, 1, 0, MASTER_KEY, ENTRY))
    assert v3.encode_response(resp) == len(ADD_RESPONSE_BODY).to_bytes(4, "big") + ADD_RESPONSE_BODY
    decoded = v3.decode_response(ADD_RESPONSE_BODY)
    assert decoded == resp
    assert v3.response_status(decoded) == pb.EOK


def test_fencing_read_request_matches_spec_bytes() -> None:
    req = v3.read_request(2, 1, -1, v3.FLAG_DO_FENCING, master_key=MASTER_KEY)
    assert v3.encode_request(req)[4:] == FENCING_READ_BODY
    decoded = v3.decode_request(FENCING_READ_BODY)
    assert decoded.readRequest.flag == pb.ReadRequest.FENCE_LEDGER
    assert decoded.readRequest.entryId == -1 and decoded.readRequest.masterKey == MASTER_KEY


def test_read_response_matches_spec_bytes() -> None:
    resp = v3.read_response(v3.read_request(3, 1, 0), body=ENTRY, max_lac=-1)
    assert v3.encode_response(resp)[4:] == READ_RESPONSE_BODY
    decoded = v3.decode_response(READ_RESPONSE_BODY)
    assert decoded.readResponse.body == ENTRY and decoded.readResponse.maxLAC == -1
    assert not decoded.header.HasField("priority")


def test_piggyback_long_poll_read_matches_spec_bytes() -> None:
    req = v3.read_request(8, 1, -1, v3.FLAG_HIGH_PRIORITY, previous_lac=4, timeout_ms=1000, piggyback=True)
    assert v3.encode_request(req) == PIGGYBACK_READ_FRAME
    decoded = v3.decode_request(PIGGYBACK_READ_FRAME[4:])
    assert decoded.header.priority == v3.HIGH_PRIORITY == 100
    assert decoded.readRequest.flag == pb.ReadRequest.ENTRY_PIGGYBACK
    assert (decoded.readRequest.previousLAC, decoded.readRequest.timeOut) == (4, 1000)


@pytest.mark.parametrize(
    ("request_", "frame"),
    [
        (v3.start_tls_request(1), START_TLS_FRAME),
        (v3.write_lac_request(5, 1, 7, MASTER_KEY, LAC_BLOB), WRITE_LAC_FRAME),
        (v3.read_lac_request(6, 1), READ_LAC_FRAME),
        (v3.get_bookie_info_request(7, v3.TOTAL_DISK_CAPACITY | v3.FREE_DISK_SPACE), GET_BOOKIE_INFO_FRAME),
    ],
    ids=["start_tls", "write_lac", "read_lac", "get_bookie_info"],
)
def test_other_requests_match_spec_bytes(request_: pb.Request, frame: bytes) -> None:
    assert v3.encode_request(request_) == frame
    assert v3.decode_request(frame[4:]) == request_


def test_decode_accepts_memoryview_and_bytearray() -> None:
    assert v3.decode_request(memoryview(START_TLS_FRAME)[4:]) == v3.start_tls_request(1)
    assert v3.decode_request(bytearray(START_TLS_FRAME[4:])) == v3.start_tls_request(1)


# --------------------------------------------------------------------------
# Builders: every operation, the fields Java sets, round trips


def roundtrip_request(req: pb.Request) -> pb.Request:
    frame = v3.encode_request(req)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    decoded = v3.decode_request(frame[4:])
    assert decoded == req
    return decoded


def roundtrip_response(resp: pb.Response) -> pb.Response:
    frame = v3.encode_response(resp)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    decoded = v3.decode_response(frame[4:])
    assert decoded == resp
    return decoded


def test_recovery_add_sets_flag_and_high_priority() -> None:
    req = roundtrip_request(
        v3.add_request(9, 4, 2, MASTER_KEY, ENTRY, v3.FLAG_RECOVERY_ADD | v3.FLAG_HIGH_PRIORITY, write_flags=1)
    )
    assert req.header.priority == 100
    assert req.addRequest.flag == pb.AddRequest.RECOVERY_ADD
    assert req.addRequest.writeFlags == v3.WRITE_FLAG_DEFERRED_SYNC


def test_rereplication_add_has_flag_but_no_priority() -> None:
    req = roundtrip_request(v3.add_request(9, 4, 2, MASTER_KEY, ENTRY, v3.FLAG_RECOVERY_ADD))
    assert not req.header.HasField("priority")
    assert req.addRequest.flag == pb.AddRequest.RECOVERY_ADD


def test_explicit_priority_wins() -> None:
    assert roundtrip_request(v3.add_request(1, 1, 0, MASTER_KEY, ENTRY, priority=7)).header.priority == 7


def test_plain_read_sets_only_ids() -> None:
    req = roundtrip_request(v3.read_request(11, 4, 3))
    assert req.readRequest.ListFields()[0][1] == 4
    assert [f.name for f, _ in req.readRequest.ListFields()] == ["ledgerId", "entryId"]


def test_recovery_read_is_fencing_and_high_priority() -> None:
    req = roundtrip_request(
        v3.read_request(12, 4, -1, v3.FLAG_DO_FENCING | v3.FLAG_HIGH_PRIORITY, master_key=MASTER_KEY)
    )
    assert req.header.priority == 100
    assert req.readRequest.flag == pb.ReadRequest.FENCE_LEDGER and req.readRequest.masterKey == MASTER_KEY


def test_master_key_only_sent_when_fencing() -> None:
    req = v3.read_request(13, 4, 0, master_key=MASTER_KEY)
    assert not req.readRequest.HasField("masterKey")


def test_long_poll_without_piggyback() -> None:
    req = roundtrip_request(v3.read_request(14, 4, 6, previous_lac=5, timeout_ms=250))
    assert not req.readRequest.HasField("flag")
    assert (req.readRequest.previousLAC, req.readRequest.timeOut) == (5, 250)


def test_lac_and_info_builders() -> None:
    assert roundtrip_request(v3.force_ledger_request(15, 4)).forceLedgerRequest.ledgerId == 4
    assert roundtrip_request(v3.get_list_of_entries_request(16, 4)).getListOfEntriesOfLedgerRequest.ledgerId == 4
    assert roundtrip_request(v3.get_bookie_info_request(17)).getBookieInfoRequest.requested == 3
    auth = roundtrip_request(v3.auth_request(18, "AuthDisabledPlugin", b""))
    assert auth.authRequest.authPluginName == "AuthDisabledPlugin" and auth.authRequest.payload == b""
    wlac = roundtrip_request(v3.write_lac_request(19, 4, 7, MASTER_KEY, LAC_BLOB))
    assert (wlac.writeLacRequest.lac, wlac.writeLacRequest.body) == (7, LAC_BLOB)


def test_batch_read_request_builder() -> None:
    req = roundtrip_request(v3.batch_read_request(20, 4, 10, 50, 1 << 20))
    assert req.header.operation == pb.BATCH_READ_ENTRY == 12
    sub = req.batchReadRequest
    assert (sub.ledgerId, sub.startEntryId, sub.maxCount, sub.maxSize) == (4, 10, 50, 1 << 20)
    assert not sub.HasField("flag") and not sub.HasField("masterKey") and not sub.HasField("ledgerScopeId")
    fenced = roundtrip_request(
        v3.batch_read_request(21, 4, 0, 0, 0, v3.FLAG_DO_FENCING | v3.FLAG_HIGH_PRIORITY, master_key=MASTER_KEY)
    )
    assert fenced.batchReadRequest.flag == pb.BatchReadRequest.FENCE_LEDGER
    assert fenced.header.priority == 100


def test_every_operation_has_a_builder_with_its_sub_request() -> None:
    built = [
        v3.add_request(1, 1, 0, MASTER_KEY, ENTRY),
        v3.read_request(1, 1, 0),
        v3.auth_request(1, "p", b"x"),
        v3.write_lac_request(1, 1, 0, MASTER_KEY, LAC_BLOB),
        v3.read_lac_request(1, 1),
        v3.get_bookie_info_request(1),
        v3.start_tls_request(1),
        v3.force_ledger_request(1, 1),
        v3.get_list_of_entries_request(1, 1),
        v3.batch_read_request(1, 1, 0, 1, 1),
    ]
    implemented = set(pb.OperationType.values()) - {pb.RANGE_READ_ENTRY, pb.RANGE_ADD_ENTRY}
    assert {r.header.operation for r in built} == implemented
    for req in built:
        sub = v3.sub_request(req)
        assert sub is not None
        fields = req.ListFields()
        assert len(fields) == 2 and fields[0][0].name == "header" and fields[1][1] == sub


@pytest.mark.parametrize(
    "build",
    [
        lambda: v3.read_request(1, 1, -1, v3.FLAG_DO_FENCING),
        lambda: v3.read_request(1, 1, -1, v3.FLAG_DO_FENCING, master_key=MASTER_KEY, previous_lac=1, piggyback=True),
        lambda: v3.read_request(1, 1, 3, previous_lac=1, piggyback=True),
        lambda: v3.read_request(1, 1, -1, piggyback=True),
        lambda: v3.read_request(1, 1, 0, timeout_ms=5),
        lambda: v3.batch_read_request(1, 1, 0, 1, 1, v3.FLAG_DO_FENCING),
        lambda: v3.add_request(-1, 1, 0, MASTER_KEY, ENTRY),
        lambda: v3.add_request(1, 1 << 63, 0, MASTER_KEY, ENTRY),
        lambda: v3.add_request(1, 1, 0, "not bytes", ENTRY),  # type: ignore[arg-type]
        lambda: v3.read_lac_request(1, 1, scope_id=1 << 64),
        lambda: v3.get_bookie_info_request(1, requested=1 << 70),
        lambda: v3.batch_read_request(1, 1, 0, 1 << 31, 1),
        lambda: v3.new_header(99, 1),
        lambda: v3.auth_request(1, b"\xff", b""),  # type: ignore[arg-type]
    ],
)
def test_bad_builder_arguments_raise_local_protocol_error(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(LocalProtocolError):
        build()


def test_encode_refuses_incomplete_messages_and_wrong_types() -> None:
    with pytest.raises(LocalProtocolError):
        v3.encode_request(pb.Request())
    with pytest.raises(LocalProtocolError):
        v3.encode_response(pb.Response(header=v3.new_header(pb.READ_ENTRY, 1)))
    with pytest.raises(LocalProtocolError):
        v3.encode_request(pb.Response())  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        v3.encode_response(pb.Request())  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        v3.decode_request("0a06")  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# Schema: BookKeeper's part of ours is exactly BookKeeper 4.17's

# Dumped from bookkeeper-proto-4.17.3.jar!/BookkeeperProtocol.proto (compiled with protoc).
BOOKKEEPER_4_17_SCHEMA = """
BKPacketHeader.version 1 req ProtocolVersion
BKPacketHeader.operation 2 req OperationType
BKPacketHeader.txnId 3 req uint64
BKPacketHeader.priority 4 opt uint32=0
ContextPair.key 1 req string
ContextPair.value 2 req string
Request.header 1 req BKPacketHeader
Request.readRequest 100 opt ReadRequest
Request.addRequest 101 opt AddRequest
Request.authRequest 102 opt AuthMessage
Request.writeLacRequest 103 opt WriteLacRequest
Request.readLacRequest 104 opt ReadLacRequest
Request.getBookieInfoRequest 105 opt GetBookieInfoRequest
Request.startTLSRequest 106 opt StartTLSRequest
Request.forceLedgerRequest 107 opt ForceLedgerRequest
Request.getListOfEntriesOfLedgerRequest 108 opt GetListOfEntriesOfLedgerRequest
Request.requestContext 200 rep ContextPair
ReadRequest.flag 100 opt Flag
ReadRequest.ledgerId 1 req int64
ReadRequest.entryId 2 req int64
ReadRequest.masterKey 3 opt bytes
ReadRequest.previousLAC 4 opt int64
ReadRequest.timeOut 5 opt int64
AddRequest.flag 100 opt Flag
AddRequest.ledgerId 1 req int64
AddRequest.entryId 2 req int64
AddRequest.masterKey 3 req bytes
AddRequest.body 4 req bytes
AddRequest.writeFlags 5 opt int32
WriteLacRequest.ledgerId 1 req int64
WriteLacRequest.lac 2 req int64
WriteLacRequest.masterKey 3 req bytes
WriteLacRequest.body 4 req bytes
ForceLedgerRequest.ledgerId 1 req int64
ReadLacRequest.ledgerId 1 req int64
GetBookieInfoRequest.requested 1 opt int64
GetListOfEntriesOfLedgerRequest.ledgerId 1 req int64
Response.header 1 req BKPacketHeader
Response.status 2 req StatusCode
Response.readResponse 100 opt ReadResponse
Response.addResponse 101 opt AddResponse
Response.authResponse 102 opt AuthMessage
Response.writeLacResponse 103 opt WriteLacResponse
Response.readLacResponse 104 opt ReadLacResponse
Response.getBookieInfoResponse 105 opt GetBookieInfoResponse
Response.startTLSResponse 106 opt StartTLSResponse
Response.forceLedgerResponse 107 opt ForceLedgerResponse
Response.getListOfEntriesOfLedgerResponse 108 opt GetListOfEntriesOfLedgerResponse
ReadResponse.status 1 req StatusCode
ReadResponse.ledgerId 2 req int64
ReadResponse.entryId 3 req int64
ReadResponse.body 4 opt bytes
ReadResponse.maxLAC 5 opt int64
ReadResponse.lacUpdateTimestamp 6 opt int64
AddResponse.status 1 req StatusCode
AddResponse.ledgerId 2 req int64
AddResponse.entryId 3 req int64
AuthMessage.authPluginName 1 req string
AuthMessage.payload 2 req bytes
WriteLacResponse.status 1 req StatusCode
WriteLacResponse.ledgerId 2 req int64
ForceLedgerResponse.status 1 req StatusCode
ForceLedgerResponse.ledgerId 2 req int64
ReadLacResponse.status 1 req StatusCode
ReadLacResponse.ledgerId 2 req int64
ReadLacResponse.lacBody 3 opt bytes
ReadLacResponse.lastEntryBody 4 opt bytes
GetBookieInfoResponse.status 1 req StatusCode
GetBookieInfoResponse.totalDiskCapacity 2 opt int64
GetBookieInfoResponse.freeDiskSpace 3 opt int64
GetListOfEntriesOfLedgerResponse.status 1 req StatusCode
GetListOfEntriesOfLedgerResponse.ledgerId 2 req int64
GetListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger 3 opt bytes
enum ProtocolVersion VERSION_ONE=1,VERSION_TWO=2,VERSION_THREE=3
enum StatusCode EOK=0,ENOLEDGER=402,ENOENTRY=403,EBADREQ=404,EIO=501,EUA=502,EBADVERSION=503,EFENCED=504,EREADONLY=505,ETOOMANYREQUESTS=506,EUNKNOWNLEDGERSTATE=507
enum OperationType READ_ENTRY=1,ADD_ENTRY=2,RANGE_READ_ENTRY=3,RANGE_ADD_ENTRY=4,AUTH=5,WRITE_LAC=6,READ_LAC=7,GET_BOOKIE_INFO=8,START_TLS=9,FORCE_LEDGER=10,GET_LIST_OF_ENTRIES_OF_LEDGER=11,BATCH_READ_ENTRY=12
enum ReadRequest.Flag FENCE_LEDGER=1,ENTRY_PIGGYBACK=2
enum AddRequest.Flag RECOVERY_ADD=1
enum GetBookieInfoRequest.Flags TOTAL_DISK_CAPACITY=1,FREE_DISK_SPACE=2
messages BKPacketHeader,ContextPair,Request,ReadRequest,AddRequest,StartTLSRequest,WriteLacRequest,ForceLedgerRequest,ReadLacRequest,GetBookieInfoRequest,GetListOfEntriesOfLedgerRequest,Response,ReadResponse,AddResponse,AuthMessage,WriteLacResponse,ForceLedgerResponse,ReadLacResponse,GetBookieInfoResponse,GetListOfEntriesOfLedgerResponse,StartTLSResponse
"""


def dump_schema(fdp: descriptor_pb2.FileDescriptorProto) -> str:
    labels = {1: "opt", 2: "req", 3: "rep"}
    types = {v: k[5:].lower() for k, v in descriptor_pb2.FieldDescriptorProto.Type.items()}
    ours = [m for m in fdp.message_type if m.name not in ("BatchReadRequest", "BatchReadResponse")]
    out: list[str] = []
    for m in ours:
        for f in m.field:
            if f.number >= 1000:
                continue
            t = f.type_name.split(".")[-1] if f.type_name else types[f.type]
            d = f"={f.default_value}" if f.HasField("default_value") else ""
            out.append(f"{m.name}.{f.name} {f.number} {labels[f.label]} {t}{d}")
    for e in fdp.enum_type:
        out.append(f"enum {e.name} " + ",".join(f"{v.name}={v.number}" for v in e.value))
    for m in ours:
        for e in m.enum_type:
            out.append(f"enum {m.name}.{e.name} " + ",".join(f"{v.name}={v.number}" for v in e.value))
    out.append("messages " + ",".join(m.name for m in ours))
    return "\n".join(out)


def test_schema_equals_bookkeeper_4_17_apart_from_extensions() -> None:
    fdp = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(fdp)
    assert fdp.syntax in ("", "proto2")
    assert dump_schema(fdp) == BOOKKEEPER_4_17_SCHEMA.strip()


# --------------------------------------------------------------------------
# Response builders (docs/protocol.md §3): headers and both statuses


def test_normal_responses_get_a_fresh_header_and_both_statuses() -> None:
    req = v3.read_request(42, 4, 3, v3.FLAG_HIGH_PRIORITY)
    resp = roundtrip_response(v3.read_response(req, pb.ENOENTRY))
    assert resp.header.version == pb.VERSION_THREE and resp.header.txnId == 42
    assert not resp.header.HasField("priority")
    assert resp.status == resp.readResponse.status == pb.ENOENTRY
    assert (resp.readResponse.ledgerId, resp.readResponse.entryId) == (4, 3)
    assert not resp.readResponse.HasField("body") and not resp.readResponse.HasField("maxLAC")


def test_piggyback_response_overrides_entry_id() -> None:
    req = v3.read_request(1, 4, -1, previous_lac=4, timeout_ms=10, piggyback=True)
    resp = roundtrip_response(v3.read_response(req, body=ENTRY, entry_id=5, max_lac=9, lac_update_timestamp=123))
    sub = resp.readResponse
    assert (sub.entryId, sub.maxLAC, sub.lacUpdateTimestamp) == (5, 9, 123)


def test_error_and_auth_responses_copy_the_header_verbatim() -> None:
    req = pb.Request(header=v3.new_header(pb.RANGE_READ_ENTRY, 77, priority=100))
    resp = roundtrip_response(v3.error_response(req, pb.EBADREQ))
    assert resp.header == req.header and resp.status == pb.EBADREQ
    assert v3.response_status(resp) == pb.EBADREQ
    auth = v3.auth_request(78, "AuthDisabledPlugin", b"")
    auth.header.priority = 3
    aresp = roundtrip_response(v3.auth_response(auth, "AuthDisabledPlugin", b""))
    assert aresp.header == auth.header and aresp.status == pb.EOK
    assert aresp.authResponse.authPluginName == "AuthDisabledPlugin"
    assert v3.response_status(aresp) == pb.EOK


def test_each_response_builder() -> None:
    wl = roundtrip_response(v3.write_lac_response(v3.write_lac_request(1, 4, 7, MASTER_KEY, LAC_BLOB), pb.EREADONLY))
    assert (wl.status, wl.writeLacResponse.status, wl.writeLacResponse.ledgerId) == (pb.EREADONLY,) * 2 + (4,)
    rl = roundtrip_response(v3.read_lac_response(v3.read_lac_request(2, 4), lac_body=LAC_BLOB, last_entry_body=ENTRY))
    assert (rl.readLacResponse.lacBody, rl.readLacResponse.lastEntryBody) == (LAC_BLOB, ENTRY)
    fl = roundtrip_response(v3.force_ledger_response(v3.force_ledger_request(3, 4)))
    assert fl.forceLedgerResponse.ledgerId == 4 and v3.response_status(fl) == pb.EOK
    bi = roundtrip_response(v3.get_bookie_info_response(v3.get_bookie_info_request(4), free_disk_space=10))
    assert bi.getBookieInfoResponse.freeDiskSpace == 10 and not bi.getBookieInfoResponse.HasField("totalDiskCapacity")
    avail = v3.encode_availability([0, 1, 2])
    gl = roundtrip_response(v3.get_list_of_entries_response(v3.get_list_of_entries_request(5, 4), availability=avail))
    assert v3.decode_availability(gl.getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger) == [0, 1, 2]
    tls = roundtrip_response(v3.start_tls_response(v3.start_tls_request(6)))
    assert tls.HasField("startTLSResponse") and v3.encode_response(tls)[-3:] == h("d20600")
    no_tls = roundtrip_response(v3.start_tls_response(v3.start_tls_request(7), pb.EBADREQ))
    assert not no_tls.HasField("startTLSResponse") and v3.response_status(no_tls) == pb.EBADREQ
    br = roundtrip_response(v3.batch_read_response(v3.batch_read_request(8, 4, 10, 0, 0), entries=[ENTRY, ENTRY], max_lac=11))
    assert (br.batchReadResponse.startEntryId, list(br.batchReadResponse.entries), br.batchReadResponse.maxLAC) == (10, [ENTRY, ENTRY], 11)


# --------------------------------------------------------------------------
# response_status


def test_response_status_prefers_top_level_unless_eok() -> None:
    req = v3.add_request(1, 1, 0, MASTER_KEY, ENTRY)
    resp = v3.add_response(req, pb.EFENCED)
    assert v3.response_status(resp) == pb.EFENCED
    resp.status = pb.EOK
    assert v3.response_status(resp) == pb.EFENCED  # inner status counts when the top level is EOK
    resp.status = pb.EIO
    resp.addResponse.status = pb.EOK
    assert v3.response_status(resp) == pb.EIO


def test_response_status_refuses_eok_without_sub_response() -> None:
    resp = pb.Response(header=v3.new_header(pb.READ_ENTRY, 1), status=pb.EOK)
    with pytest.raises(MalformedFrameError):
        v3.response_status(resp)
    assert v3.sub_response(resp) is None


def test_sub_request_and_response_follow_the_operation() -> None:
    req = v3.read_lac_request(1, 4)
    assert v3.sub_request(req) == req.readLacRequest
    req.header.operation = pb.READ_ENTRY  # op and sub-message disagree
    assert v3.sub_request(req) is None
    assert v3.sub_request(pb.Request(header=v3.new_header(pb.RANGE_ADD_ENTRY, 1))) is None


# --------------------------------------------------------------------------
# Decoding errors


@pytest.mark.parametrize(
    "body",
    [
        h("02020000 0000000000000001 0000000000000000"),  # a v2 READENTRY body
        ADD_REQUEST_FRAME[4:-11],  # truncated inside the entry body
        h("0a02 0803"),  # header lacks operation and txnId
        h("0a06 0803 1063 1801"),  # operation 99 is unknown: the required field counts as missing
        h("0a06 0803 1002 1801 aa0602 0801"),  # addRequest without its required fields
        b"",  # no header
        h("0a06 0803 1005 1801 c20c02 0a00"),  # requestContext without key/value
    ],
)
def test_decode_request_rejects_what_protobuf_java_rejects(body: bytes) -> None:
    with pytest.raises(MalformedFrameError):
        v3.decode_request(body)


def test_decode_response_rejects_missing_status() -> None:
    with pytest.raises(MalformedFrameError):
        v3.decode_response(h("0a06 0803 1002 1801"))
    with pytest.raises(MalformedFrameError):
        v3.decode_response(h("0a06 0803 1002 1801 1000 aa0602 0800"))


def test_broken_extension_is_dropped_as_java_would_skip_it() -> None:
    # batchReadRequest (field 1062) holding only ledgerId: protobuf-java with
    # BookKeeper's schema skips field 1062 and accepts the Request.
    req = v3.decode_request(h("0a06 0803 100c 1801 b24202 0801"))
    assert req.header.operation == pb.BATCH_READ_ENTRY
    assert not req.HasField("batchReadRequest") and v3.sub_request(req) is None
    resp = v3.decode_response(h("0a06 0803 100c 1801 1000 b24202 0800"))
    assert not resp.HasField("batchReadResponse")


# --------------------------------------------------------------------------
# Extensions: scope ids and batch read, invisible to BookKeeper's own schema


SCOPED_REQUESTS = {
    "readRequest": lambda s: v3.read_request(1, 4, 2, scope_id=s),
    "addRequest": lambda s: v3.add_request(1, 4, 2, MASTER_KEY, ENTRY, scope_id=s),
    "writeLacRequest": lambda s: v3.write_lac_request(1, 4, 2, MASTER_KEY, LAC_BLOB, scope_id=s),
    "readLacRequest": lambda s: v3.read_lac_request(1, 4, scope_id=s),
    "forceLedgerRequest": lambda s: v3.force_ledger_request(1, 4, scope_id=s),
    "getListOfEntriesOfLedgerRequest": lambda s: v3.get_list_of_entries_request(1, 4, scope_id=s),
    "batchReadRequest": lambda s: v3.batch_read_request(1, 4, 2, 0, 0, scope_id=s),
}
RESPONDERS = {
    "readRequest": v3.read_response,
    "addRequest": v3.add_response,
    "writeLacRequest": v3.write_lac_response,
    "readLacRequest": v3.read_lac_response,
    "forceLedgerRequest": v3.force_ledger_response,
    "getListOfEntriesOfLedgerRequest": v3.get_list_of_entries_response,
    "batchReadRequest": v3.batch_read_response,
}


@pytest.mark.parametrize("name", sorted(SCOPED_REQUESTS))
@pytest.mark.parametrize("scope", [1, 0x7FFFFFFFFFFFFFFF, -(1 << 63)])
def test_scope_id_round_trips_and_is_echoed(name: str, scope: int) -> None:
    req = roundtrip_request(SCOPED_REQUESTS[name](scope))
    sub = v3.sub_request(req)
    assert sub is not None and v3.scope_id_of(sub) == scope
    resp = roundtrip_response(RESPONDERS[name](req))
    inner = v3.sub_response(resp)
    assert inner is not None and v3.scope_id_of(inner) == scope


@pytest.mark.parametrize("name", sorted(SCOPED_REQUESTS))
def test_scope_zero_is_absent_so_bytes_equal_javas(name: str) -> None:
    req = SCOPED_REQUESTS[name](0)
    sub = v3.sub_request(req)
    assert sub is not None and not sub.HasField("ledgerScopeId") and v3.scope_id_of(sub) == 0
    assert h("d840") not in v3.encode_request(req)  # the tag of field 1035, varint
    inner = v3.sub_response(RESPONDERS[name](req))
    assert inner is not None and not inner.HasField("ledgerScopeId")
    assert v3.scope_id_of(v3.get_bookie_info_request(1).getBookieInfoRequest) == 0


def test_extension_field_numbers_and_tags() -> None:
    assert pb.Request.DESCRIPTOR.fields_by_name["batchReadRequest"].number == 1062
    assert pb.Response.DESCRIPTOR.fields_by_name["batchReadResponse"].number == 1062
    for message in ("ReadRequest", "AddRequest", "WriteLacRequest", "ForceLedgerRequest", "ReadLacRequest",
                    "GetListOfEntriesOfLedgerRequest", "BatchReadRequest", "ReadResponse", "AddResponse",
                    "WriteLacResponse", "ForceLedgerResponse", "ReadLacResponse",
                    "GetListOfEntriesOfLedgerResponse", "BatchReadResponse"):
        field = pb.DESCRIPTOR.message_types_by_name[message].fields_by_name["ledgerScopeId"]
        assert (field.number, field.type, field.is_required, field.is_repeated) == (1035, field.TYPE_INT64, False, False)
    frame = v3.encode_request(v3.read_lac_request(6, 1, scope_id=5))
    assert frame == h("00000010 0a06 0803 1007 1806 c20605 0801 d84005")
    assert v3.encode_request(v3.batch_read_request(3, 1, 0, 10, 1 << 20, scope_id=7)) == h(
        "00000018 0a06 0803 100c 1803 b2420d 0801 1000 180a 2080 8040 d84007"
    )


def bookkeeper_schema() -> descriptor_pool.DescriptorPool:
    """BookKeeper's original schema: ours minus every field >= 1000 and our BatchRead messages."""
    fdp = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(fdp)
    fdp.name = "bk_original.proto"
    fdp.package = "bk_original"
    messages = [m for m in fdp.message_type if m.name not in ("BatchReadRequest", "BatchReadResponse")]
    del fdp.message_type[:]
    for original in messages:
        m = fdp.message_type.add()
        m.CopyFrom(original)
        del m.field[:]
        for f in original.field:
            if f.number < 1000:
                copy = m.field.add()
                copy.CopyFrom(f)
                if copy.HasField("type_name"):
                    copy.type_name = copy.type_name.replace(".bookkeeper.proto.", ".bk_original.")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return pool


def test_bookkeeper_schema_skips_our_extensions_as_unknown_fields() -> None:
    pool = bookkeeper_schema()
    BKRequest = message_factory.GetMessageClass(pool.FindMessageTypeByName("bk_original.Request"))
    BKResponse = message_factory.GetMessageClass(pool.FindMessageTypeByName("bk_original.Response"))
    for name, build in SCOPED_REQUESTS.items():
        req = build(0x1234)
        body = v3.encode_request(req)[4:]
        parsed = BKRequest.FromString(body)
        assert parsed.IsInitialized()
        assert parsed.header.txnId == req.header.txnId
        assert parsed.SerializeToString() == body  # unknown fields are kept verbatim
        if name != "batchReadRequest":
            assert getattr(parsed, name).ledgerId == 4
        resp_body = v3.encode_response(RESPONDERS[name](req))[4:]
        presp = BKResponse.FromString(resp_body)
        assert presp.IsInitialized() and presp.status == pb.EOK
        # Without the extensions the bytes are the same as for scope 0.
        assert BKRequest.FromString(v3.encode_request(build(0))[4:]).SerializeToString() == v3.encode_request(build(0))[4:]


# --------------------------------------------------------------------------
# AvailabilityOfEntriesOfLedger (docs/protocol.md §3)

# Produced by org.apache.bookkeeper.util.AvailabilityOfEntriesOfLedger(long[])
# .serializeStateOfEntriesOfLedger() from bookkeeper-server 4.17.3.
ZERO_56 = "00" * 56
JAVA_AVAILABILITY = {
    (): "00000000 00000000" + ZERO_56,
    (0, 1, 2, 5, 6, 7, 10, 11, 12): "00000000 00000003" + ZERO_56
    + "0000000000000000 0000000000000000 00000003 00000000"
    + "0000000000000005 0000000000000005 00000003 00000000"
    + "000000000000000a 000000000000000a 00000003 00000000",
    (3,): "00000000 00000001" + ZERO_56 + "0000000000000003 0000000000000003 00000001 00000000",
    (0, 2, 4, 6): "00000000 00000004" + ZERO_56
    + "".join(f"{e:016x}{e:016x}0000000100000000" for e in (0, 2, 4, 6)),
    (7, 8, 9, 100, 1000, 1001): "00000000 00000003" + ZERO_56
    + "0000000000000007 0000000000000007 00000003 00000000"
    + "0000000000000064 0000000000000064 00000001 00000000"
    + "00000000000003e8 00000000000003e8 00000002 00000000",
}


@pytest.mark.parametrize("entries", sorted(JAVA_AVAILABILITY), ids=str)
def test_availability_matches_java_bytes(entries: tuple[int, ...]) -> None:
    java = h(JAVA_AVAILABILITY[entries])
    assert v3.encode_availability(entries) == java
    assert v3.decode_availability(java) == list(entries)
    assert list(v3.iter_availability(memoryview(java))) == list(entries)
    parsed = v3.AvailabilityOfEntriesOfLedger.parse(java)
    assert len(parsed) == len(entries)
    assert all(e in parsed for e in entries)
    assert -1 not in parsed and (4 in parsed) == (4 in entries)


def test_availability_accepts_general_groups() -> None:
    # One group: runs of 2 starting at 0, 3, 6 -> {0,1,3,4,6,7}; then a single run 20..21.
    data = h("00000000 00000002" + ZERO_56 + "0000000000000000 0000000000000006 00000002 00000003"
             + "0000000000000014 0000000000000014 00000002 00000000")
    av = v3.AvailabilityOfEntriesOfLedger.parse(data)
    assert list(av) == [0, 1, 3, 4, 6, 7, 20, 21] and len(av) == 8
    assert 5 not in av and 7 in av and 8 not in av and "x" not in av
    assert av.groups[0] == v3.SequenceGroup(0, 6, 2, 3) and av.to_bytes() == data


def test_availability_splits_runs_longer_than_int32(monkeypatch: pytest.MonkeyPatch) -> None:
    # sequenceSize is an int32: a longer run continues in a new group.  Shrink the
    # limit instead of iterating over 2**31 ids.
    monkeypatch.setattr(v3, "_MAX_INT32", 3)
    av = v3.AvailabilityOfEntriesOfLedger.from_entry_ids(range(10, 18))
    assert [(g.first, g.size) for g in av.groups] == [(10, 3), (13, 3), (16, 2)]
    assert list(av) == list(range(10, 18))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        bytes(63),
        h("00000001 00000000" + ZERO_56),  # version 1
        h("00000000 00000001" + ZERO_56),  # one group announced, none present
        h("00000000 ffffffff" + ZERO_56),  # negative count
        h("00000000 00000000" + ZERO_56 + "00"),  # trailing byte
        h("00000000 00000001" + ZERO_56 + "0000000000000000 0000000000000000 00000000 00000000"),  # size 0
        h("00000000 00000001" + ZERO_56 + "ffffffffffffffff ffffffffffffffff 00000001 00000000"),  # negative
        h("00000000 00000001" + ZERO_56 + "0000000000000005 0000000000000004 00000001 00000000"),  # last < first
        h("00000000 00000001" + ZERO_56 + "0000000000000000 0000000000000004 00000001 00000000"),  # period 0
        h("00000000 00000001" + ZERO_56 + "0000000000000000 0000000000000004 00000002 00000003"),  # not a multiple
        h("00000000 00000001" + ZERO_56 + "0000000000000000 0000000000000004 00000003 00000002"),  # overlap
        h("00000000 00000002" + ZERO_56 + "0000000000000005 0000000000000005 00000003 00000000"
          + "0000000000000006 0000000000000006 00000001 00000000"),  # groups overlap
        h("00000000 00000001" + ZERO_56 + "7fffffffffffffff 7fffffffffffffff 00000002 00000000"),  # overflow
    ],
)
def test_availability_rejects_malformed_data(data: bytes) -> None:
    with pytest.raises(MalformedFrameError):
        v3.decode_availability(data)


@pytest.mark.parametrize("entries", [[2, 1], [1, 1], [-1], [True], [1 << 63], ["1"]], ids=str)
def test_availability_encode_rejects_bad_ids(entries: list[object]) -> None:
    with pytest.raises(LocalProtocolError):
        v3.encode_availability(entries)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        v3.decode_availability("text")  # type: ignore[arg-type]


@pytest.mark.parametrize("sizes", [[], [0], [127, 128], [16383, 16384, 1], [2097151, 2097152]], ids=str)
def test_batch_read_size_accounting_bounds_the_whole_frame(sizes: list[int]) -> None:
    # Worst case for every fixed field: 10-byte varints everywhere, scope set, maxLAC set.
    req = v3.batch_read_request((1 << 64) - 1, (1 << 63) - 1, -1, 0, 0, scope_id=-1)
    entries = [bytes(n) for n in sizes]
    resp = v3.batch_read_response(req, pb.EUNKNOWNLEDGERSTATE, entries=entries, max_lac=-1)
    frame = v3.encode_response(resp)
    budget = v3.BATCH_READ_BASE_SIZE + sum(n + v3.BATCH_READ_ENTRY_OVERHEAD for n in sizes)
    assert len(frame) <= budget
