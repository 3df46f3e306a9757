"""Fuzzing the v3 codec, the AvailabilityOfEntriesOfLedger codec and ProtocolDetector:
whatever bytes arrive, only our typed errors come out, and round trips are exact."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bkspark.errors import MalformedFrameError
from bkspark.protocol import v3
from bkspark.protocol.detect import ProtocolDetector
from bkspark.protocol.v3 import pb

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

int64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
uint64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
ids = st.integers(min_value=-1, max_value=(1 << 63) - 1)
small_bytes = st.binary(max_size=64)
flags = st.sampled_from([0, v3.FLAG_HIGH_PRIORITY, v3.FLAG_RECOVERY_ADD, v3.FLAG_RECOVERY_ADD | v3.FLAG_HIGH_PRIORITY])


@st.composite
def requests(draw: st.DrawFn) -> pb.Request:
    """Any request our builders make, with random field values."""
    txn, ledger, entry, scope = draw(uint64), draw(ids), draw(ids), draw(int64)
    key, body = draw(small_bytes), draw(small_bytes)
    kind = draw(st.integers(min_value=0, max_value=9))
    if kind == 0:
        return v3.add_request(txn, ledger, entry, key, body, draw(flags), scope_id=scope,
                              write_flags=draw(st.sampled_from([0, 1])))
    if kind == 1:
        fence = draw(st.booleans())
        return v3.read_request(txn, ledger, entry, v3.FLAG_DO_FENCING if fence else 0,
                               master_key=key, scope_id=scope, priority=draw(st.integers(0, 1000)))
    if kind == 2:
        return v3.read_request(txn, ledger, -1, previous_lac=draw(int64), timeout_ms=draw(int64), piggyback=True)
    if kind == 3:
        return v3.write_lac_request(txn, ledger, entry, key, body, scope_id=scope)
    if kind == 4:
        return v3.read_lac_request(txn, ledger, scope_id=scope)
    if kind == 5:
        return v3.force_ledger_request(txn, ledger, scope_id=scope)
    if kind == 6:
        return v3.get_list_of_entries_request(txn, ledger, scope_id=scope)
    if kind == 7:
        return v3.get_bookie_info_request(txn, draw(int64))
    if kind == 8:
        return v3.auth_request(txn, draw(st.text(max_size=20)), body)
    return v3.batch_read_request(txn, ledger, entry, draw(st.integers(-(1 << 31), (1 << 31) - 1)), draw(int64),
                                 master_key=key, scope_id=scope)


def decode_or_typed_error(decode, body: bytes) -> object:  # type: ignore[no-untyped-def]
    try:
        return decode(body)
    except MalformedFrameError:
        return None


@FAST
@given(st.binary(max_size=200))
def test_decode_request_random_bytes_only_typed_errors(body: bytes) -> None:
    msg = decode_or_typed_error(v3.decode_request, body)
    if msg is not None:
        assert isinstance(msg, pb.Request) and msg.IsInitialized()


@FAST
@given(st.binary(max_size=200))
def test_decode_response_random_bytes_only_typed_errors(body: bytes) -> None:
    msg = decode_or_typed_error(v3.decode_response, body)
    if msg is not None:
        assert isinstance(msg, pb.Response) and msg.IsInitialized()


@FAST
@given(requests())
def test_built_requests_round_trip(req: pb.Request) -> None:
    frame = v3.encode_request(req)
    assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
    assert v3.decode_request(frame[4:]) == req
    assert v3.decode_request(memoryview(frame)[4:]) == req


@FAST
@given(requests(), st.data())
def test_mutated_requests_only_typed_errors(req: pb.Request, data: st.DataObject) -> None:
    body = bytearray(v3.encode_request(req)[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, max(len(body) - 1, 0)))
        if op == "flip" and body:
            body[pos] ^= data.draw(st.integers(1, 255))
        elif op == "cut":
            del body[pos:]
        else:
            body[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
    decode_or_typed_error(v3.decode_request, bytes(body))
    detector = ProtocolDetector()
    assert detector.classify(bytes(body)) in ("v2", "v3")


@FAST
@given(requests(), st.sampled_from([pb.EOK, pb.ENOENTRY, pb.EIO, pb.EFENCED, pb.EUNKNOWNLEDGERSTATE]))
def test_responses_round_trip_and_status(req: pb.Request, status: int) -> None:
    op = req.header.operation
    builders = {
        pb.ADD_ENTRY: v3.add_response,
        pb.READ_ENTRY: v3.read_response,
        pb.WRITE_LAC: v3.write_lac_response,
        pb.READ_LAC: v3.read_lac_response,
        pb.FORCE_LEDGER: v3.force_ledger_response,
        pb.GET_LIST_OF_ENTRIES_OF_LEDGER: v3.get_list_of_entries_response,
        pb.GET_BOOKIE_INFO: v3.get_bookie_info_response,
        pb.BATCH_READ_ENTRY: v3.batch_read_response,
    }
    resp = builders[op](req, status) if op in builders else v3.error_response(req, status)
    frame = v3.encode_response(resp)
    decoded = v3.decode_response(frame[4:])
    assert decoded == resp
    assert v3.response_status(decoded) == status
    assert decoded.header.txnId == req.header.txnId and decoded.header.operation == op


@FAST
@given(st.integers(0, 2), st.integers(0, 255), st.integers(0, 0xFFFF), st.binary(max_size=80))
def test_any_v2_shaped_body_is_v2(version: int, opcode: int, flag_bits: int, tail: bytes) -> None:
    header = (version << 24 | opcode << 16 | flag_bits) if version else opcode
    detector = ProtocolDetector()
    assert detector.classify(struct.pack(">I", header) + tail) == "v2"


@FAST
@given(st.lists(st.one_of(st.binary(max_size=60), requests().map(lambda r: v3.encode_request(r)[4:])), max_size=8))
def test_detector_matches_the_java_rule(bodies: list[bytes]) -> None:
    detector = ProtocolDetector()
    mode = "v3"
    for body in bodies:
        if mode == "v3":
            accepted = bool(body) and body[0] >= 8 and decode_or_typed_error(v3.decode_request, body) is not None
            mode = "v3" if accepted else "v2"
        assert detector.classify(body) == mode
        assert detector.version == mode


@FAST
@given(st.lists(st.integers(0, 5000), max_size=200).map(lambda xs: sorted(set(xs))))
def test_availability_round_trip(entries: list[int]) -> None:
    data = v3.encode_availability(entries)
    assert v3.decode_availability(data) == entries
    av = v3.AvailabilityOfEntriesOfLedger.parse(data)
    assert len(av) == len(entries)
    assert all(g.period == 0 and g.last == g.first for g in av.groups)  # Java 4.17's grouping


@FAST
@given(st.binary(max_size=200))
def test_availability_random_bytes_only_typed_errors(data: bytes) -> None:
    decode_or_typed_error(v3.AvailabilityOfEntriesOfLedger.parse, data)


@FAST
@given(
    st.lists(
        st.tuples(
            st.integers(-2, 1 << 12), st.integers(-2, 1 << 12), st.integers(-1, 8), st.integers(-1, 16)
        ),
        max_size=6,
    )
)
def test_availability_structured_groups(groups: list[tuple[int, int, int, int]]) -> None:
    data = struct.pack(">ii56x", 0, len(groups)) + b"".join(struct.pack(">qqii", *g) for g in groups)
    av = decode_or_typed_error(v3.AvailabilityOfEntriesOfLedger.parse, data)
    if av is None:
        return
    assert isinstance(av, v3.AvailabilityOfEntriesOfLedger)
    entries = list(av)
    assert entries == sorted(set(entries)) and len(entries) == len(av)
    assert all(e in av for e in entries[:50])
    assert av.to_bytes() == data
