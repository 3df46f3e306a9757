"""Fuzzing the sans-IO core: hostile bytes only ever raise our typed errors, and never hang.

Feeds random bytes, truncations, mutations and oversized lengths into
FrameSplitter, v2.decode_request / decode_response, Digester.verify_entry /
verify_lac and entry_header.  Anything but a BKError subclass is a bug.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bkspark.errors import BKError, DigestMismatchError, FrameTooLargeError, MalformedFrameError
from bkspark.protocol import v2
from bkspark.protocol.digest import Digester, DigestType, entry_header, lac_header
from bkspark.protocol.framing import FrameSplitter, encode_frame

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEY = bytes(range(20))
DIGESTERS = [Digester(t, b"pw") for t in DigestType]

VALID_REQUEST_BODIES = [
    v2.encode_add_request(0, KEY, Digester("CRC32C").package_entry(1, 0, -1, 3, b"abc"))[4:],
    v2.encode_read_request(1, 0)[4:],
    v2.encode_read_request(1, -1, v2.FLAG_DO_FENCING, KEY)[4:],
    v2.encode_batch_read_request(1, 0, 42, 10, 1 << 20, v2.FLAG_DO_FENCING, KEY)[4:],
    v2.encode_auth_request("AuthDisabledPlugin", b"x")[4:],
]
VALID_RESPONSE_BODIES = [
    v2.encode_add_response(0, 1, 0)[4:],
    v2.encode_read_response(0, 1, 0, b"e" * 40)[4:],
    v2.encode_batch_read_response(0, 1, 0, 42, [b"a" * 33, b"", b"b" * 5])[4:],
    v2.encode_auth_response("AuthDisabledPlugin", b"")[4:],
]


def _decode_or_typed_error(decoder, data: bytes) -> None:  # type: ignore[no-untyped-def]
    try:
        decoder(data)
    except BKError:
        pass


def _mutations() -> st.SearchStrategy[tuple[bytes, int, int]]:
    return st.tuples(st.integers(0, 10**6), st.integers(0, 255), st.integers(0, 10**6))


def _mutate(base: bytes, where: int, value: int, cut: int) -> bytes:
    data = bytearray(base)
    if data:
        data[where % len(data)] = value
    return bytes(data[: cut % (len(data) + 1)])


# -- v2 decoders -------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=200))
def test_decode_request_random_bytes(data: bytes) -> None:
    _decode_or_typed_error(v2.decode_request, data)


@FUZZ
@given(st.binary(max_size=200))
def test_decode_response_random_bytes(data: bytes) -> None:
    _decode_or_typed_error(v2.decode_response, data)
    _decode_or_typed_error(v2.decode_batch_read_response_entries, data)


@FUZZ
@given(st.sampled_from(VALID_REQUEST_BODIES), _mutations(), st.binary(max_size=30))
def test_decode_request_mutated_and_truncated(base: bytes, mutation: tuple[int, int, int], tail: bytes) -> None:
    mutated = _mutate(base, *mutation)
    _decode_or_typed_error(v2.decode_request, mutated)
    _decode_or_typed_error(v2.decode_request, mutated + tail)
    _decode_or_typed_error(v2.decode_request, memoryview(base + tail)[: mutation[2] % (len(base) + 1)])


@FUZZ
@given(st.sampled_from(VALID_RESPONSE_BODIES), _mutations(), st.binary(max_size=30))
def test_decode_response_mutated_and_truncated(base: bytes, mutation: tuple[int, int, int], tail: bytes) -> None:
    mutated = _mutate(base, *mutation)
    _decode_or_typed_error(v2.decode_response, mutated)
    _decode_or_typed_error(v2.decode_response, mutated + tail)


@FUZZ
@given(st.sampled_from([v2.ADD_ENTRY, v2.READ_ENTRY, v2.AUTH, v2.BATCH_READ_ENTRY]), st.integers(0, 0xFFFF),
       st.integers(-128, 127), st.binary(max_size=80))
def test_every_known_opcode_with_random_rest(opcode: int, flags: int, version: int, rest: bytes) -> None:
    header = struct.pack(">I", ((version & 0xFF) << 24) | (opcode << 16) | flags)
    _decode_or_typed_error(v2.decode_request, header + rest)
    _decode_or_typed_error(v2.decode_response, header + rest)


@FUZZ
@given(st.lists(st.binary(max_size=50), max_size=8), st.integers(-(2**31), 2**31 - 1))
def test_batch_items_round_trip(entries: list[bytes], rc: int) -> None:
    frame = v2.encode_batch_read_response(rc, 1, 2, 3, entries)
    decoded = v2.decode_response(frame[4:])
    assert isinstance(decoded, v2.BatchReadResponse)
    assert [bytes(item) for item in decoded.entries] == entries and decoded.rc == rc


@FUZZ
@given(st.integers(0, 0xFFFF), st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1),
       st.booleans(), st.sampled_from([1, 2]))
def test_read_request_round_trip(flags: int, ledger_id: int, entry_id: int, keyed: bool, version: int) -> None:
    key = KEY if keyed else None
    frame = v2.encode_read_request(ledger_id, entry_id, flags, key, version)
    reads_key = bool(flags & v2.FLAG_DO_FENCING) and version >= 2
    if reads_key and key is None:
        # Java's decoder runs off the end looking for the fencing master key.
        try:
            v2.decode_request(frame[4:])
        except MalformedFrameError:
            return
        raise AssertionError("a fencing read without a master key must not decode")
    decoded = v2.decode_request(frame[4:])
    assert decoded == v2.ReadRequest(flags, ledger_id, entry_id, key if reads_key else None, version)


# -- framing ----------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=300), st.lists(st.integers(1, 64), min_size=1, max_size=20),
       st.integers(4, 200))
def test_splitter_random_stream_in_random_chunks(stream: bytes, chunk_sizes: list[int], limit: int) -> None:
    splitter = FrameSplitter(max_frame_size=limit)
    offset = 0
    index = 0
    try:
        while offset < len(stream):
            size = chunk_sizes[index % len(chunk_sizes)]
            for body in splitter.feed(stream[offset : offset + size]):
                assert len(body) + 4 <= limit
            offset += size
            index += 1
    except FrameTooLargeError:
        pass
    assert splitter.buffered < max(limit, 4) + 64


@FUZZ
@given(st.lists(st.binary(max_size=100), max_size=10), st.lists(st.integers(1, 50), min_size=1, max_size=10))
def test_splitter_recovers_exact_bodies(bodies: list[bytes], chunk_sizes: list[int]) -> None:
    stream = b"".join(encode_frame(b) for b in bodies)
    splitter = FrameSplitter(max_frame_size=104)
    got: list[bytes] = []
    offset = 0
    index = 0
    while offset < len(stream):
        size = chunk_sizes[index % len(chunk_sizes)]
        got.extend(bytes(b) for b in splitter.feed(stream[offset : offset + size]))
        offset += size
        index += 1
    assert got == bodies and splitter.buffered == 0


@FUZZ
@given(st.integers(0, 2**32 - 1), st.integers(4, 10**7))
def test_splitter_oversized_lengths(length: int, limit: int) -> None:
    splitter = FrameSplitter(max_frame_size=limit)
    try:
        assert splitter.feed(struct.pack(">I", length)) == ([] if length > 0 else [b""])
        assert length + 4 <= limit
    except FrameTooLargeError:
        assert length + 4 > limit


# -- entries and LAC blobs ---------------------------------------------------------------------


@FUZZ
@given(st.sampled_from(DIGESTERS), st.binary(max_size=120), st.one_of(st.none(), st.integers(-1, 3)),
       st.integers(-2, 2))
def test_verify_entry_random_bytes(digester: Digester, data: bytes, entry_id: int | None, scope: int) -> None:
    try:
        digester.verify_entry(data, 1, entry_id, scope_id=scope)
    except DigestMismatchError:
        pass
    try:
        digester.verify_lac(data, 1, scope_id=scope)
    except DigestMismatchError:
        pass
    try:
        entry_header(data)
        lac_header(data)
    except MalformedFrameError:
        pass


@FUZZ
@given(st.sampled_from(DIGESTERS), st.binary(max_size=64), st.integers(0, 3), _mutations())
def test_verify_entry_mutations(digester: Digester, payload: bytes, scope: int, mutation: tuple[int, int, int]) -> None:
    entry = digester.package_entry(1, 0, -1, len(payload), payload, scope_id=scope)
    mutated = _mutate(entry, *mutation)
    try:
        verified = digester.verify_entry(mutated, 1, 0, scope_id=scope)
    except DigestMismatchError:
        return
    # Only a mutation that changed nothing may pass (DUMMY also cannot see payload changes).
    if digester.digest_type is not DigestType.DUMMY:
        assert mutated == entry
    assert verified.ledger_id == 1 and verified.entry_id == 0


@FUZZ
@given(st.sampled_from(DIGESTERS), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1),
       st.integers(-1, 2**63 - 1), st.binary(max_size=64), st.integers(-(2**63), 2**63 - 1))
def test_entry_round_trip(digester: Digester, ledger_id: int, entry_id: int, lac: int, payload: bytes,
                          scope: int) -> None:
    entry = digester.package_entry(ledger_id, entry_id, lac, len(payload), payload, scope_id=scope)
    verified = digester.verify_entry(entry, ledger_id, entry_id, scope_id=scope)
    assert (verified.ledger_id, verified.entry_id, verified.last_add_confirmed, verified.scope_id) == (
        ledger_id, entry_id, lac, scope)
    assert bytes(verified.payload) == payload
    assert entry_header(entry) == (scope, ledger_id, entry_id, lac)
    blob = digester.package_lac(ledger_id, lac, scope_id=scope)
    assert digester.verify_lac(blob, ledger_id, scope_id=scope) == lac
    assert lac_header(blob) == (scope, ledger_id, lac)
