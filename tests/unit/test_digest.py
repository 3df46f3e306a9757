"""Entry format, digests and keys: byte-exact vectors (docs/protocol.md §7) plus our V2 format."""

from __future__ import annotations

import struct
import zlib

import crc32c
import pytest

from bkspark.errors import (
    BKError,
    DigestMismatchError,
    InvalidOptionError,
    LocalProtocolError,
    MalformedFrameError,
)
from bkspark.protocol.digest import (
    EMPTY_PASSWORD_MASTER_KEY,
    ENTRY_HEADER_SIZE,
    ENTRY_V2_HEADER_SIZE,
    Digester,
    DigestType,
    VerifiedEntry,
    entry_header,
    is_v2_format,
    lac_header,
    mac_key,
    master_key,
)

PASSWORD = b"secret"
HEADER = bytes.fromhex("0000000000000001" "0000000000000000" "ffffffffffffffff" "0000000000000005")
DIGESTS = {
    DigestType.CRC32: bytes.fromhex("0000000030a56872"),
    DigestType.CRC32C: bytes.fromhex("e3a5f74d"),
    DigestType.HMAC: bytes.fromhex("985ff33d73766e6ab95e91f14097a562ffc64ae8"),
    DigestType.DUMMY: b"",
}
LAC_HEADER = bytes.fromhex("00000000000000010000000000000007")
LAC_DIGESTS = {
    DigestType.CRC32: bytes.fromhex("0000000065a4cab5"),
    DigestType.CRC32C: bytes.fromhex("62842849"),
    DigestType.HMAC: bytes.fromhex("a7f43b266c2c66018c0253f35a4b84b1e1a27fdf"),
    DigestType.DUMMY: b"",
}


# -- keys and names -----------------------------------------------------------


def test_master_and_mac_keys() -> None:
    assert master_key(PASSWORD).hex() == "e793cbc379107648537183605cd361d3bb789a39"
    assert master_key(b"").hex() == "850bf1071c5e3d8c24235676f8816ae0cbe2f14f"
    assert EMPTY_PASSWORD_MASTER_KEY == master_key(b"")
    assert mac_key(PASSWORD).hex() == "190c685bae851574f5ab47c960a00c0466f96603"
    with pytest.raises(TypeError):
        master_key("secret")  # type: ignore[arg-type]


def test_digest_type_values_and_sizes() -> None:
    assert [int(t) for t in DigestType] == [1, 2, 3, 4]
    assert [t.digest_size for t in DigestType] == [8, 20, 4, 0]
    assert DigestType.HMAC.api_name == "MAC"
    assert DigestType.CRC32C.api_name == "CRC32C"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("crc32", DigestType.CRC32),
        ("CRC32C", DigestType.CRC32C),
        ("MAC", DigestType.HMAC),
        ("hmac", DigestType.HMAC),
        (" dummy ", DigestType.DUMMY),
        (3, DigestType.CRC32C),
        ("2", DigestType.HMAC),
        (DigestType.CRC32, DigestType.CRC32),
    ],
)
def test_digest_type_parse(given: object, expected: DigestType) -> None:
    assert DigestType.parse(given) is expected  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["sha256", "", 0, 5, -1, True, None, 1.0, b"CRC32"])
def test_digest_type_parse_rejects(bad: object) -> None:
    with pytest.raises(InvalidOptionError):
        DigestType.parse(bad)  # type: ignore[arg-type]


# -- scope 0: BookKeeper's V1 entry, byte-identical to Java ----------------------


@pytest.mark.parametrize("digest_type", list(DigestType))
def test_package_entry_matches_java_vectors(digest_type: DigestType) -> None:
    digester = Digester(digest_type, PASSWORD)
    assert digester.size == len(DIGESTS[digest_type])
    entry = digester.package_entry(1, 0, -1, 5, b"hello")
    assert entry == HEADER + DIGESTS[digest_type] + b"hello"


def test_full_crc32_entry_vector() -> None:
    entry = Digester("CRC32", PASSWORD).package_entry(1, 0, -1, 5, b"hello")
    assert entry.hex() == (
        "0000000000000001" "0000000000000000" "ffffffffffffffff" "0000000000000005" "0000000030a56872" "68656c6c6f"
    )
    assert len(entry) == 45


@pytest.mark.parametrize("digest_type", list(DigestType))
def test_verify_java_entry(digest_type: DigestType) -> None:
    java_entry = HEADER + DIGESTS[digest_type] + b"hello"
    verified = Digester(digest_type, PASSWORD).verify_entry(java_entry, 1, 0)
    assert verified == VerifiedEntry(1, 0, -1, 5, verified.payload, 0)
    assert isinstance(verified.payload, memoryview)
    assert bytes(verified.payload) == b"hello"


def test_verify_accepts_memoryview_and_bytearray_slices() -> None:
    digester = Digester("CRC32C", PASSWORD)
    entry = digester.package_entry(7, 3, 2, 100, b"payload")
    framed = b"junk" + entry + b""
    assert bytes(digester.verify_entry(memoryview(framed)[4:], 7, 3).payload) == b"payload"
    assert bytes(digester.verify_entry(bytearray(entry), 7, 3).payload) == b"payload"


@pytest.mark.parametrize("digest_type", [DigestType.CRC32, DigestType.CRC32C, DigestType.HMAC])
def test_corrupted_byte_anywhere_is_a_mismatch(digest_type: DigestType) -> None:
    digester = Digester(digest_type, PASSWORD)
    entry = bytearray(digester.package_entry(1, 0, -1, 5, b"hello"))
    for index in range(len(entry)):
        corrupted = bytearray(entry)
        corrupted[index] ^= 0x01
        with pytest.raises(DigestMismatchError):
            digester.verify_entry(bytes(corrupted), 1, 0)


def test_dummy_checks_only_size_and_ids() -> None:
    digester = Digester("DUMMY")
    entry = digester.package_entry(1, 0, -1, 5, b"hello")
    assert digester.verify_entry(entry, 1, 0).length == 5
    with pytest.raises(DigestMismatchError, match="ledger id"):
        digester.verify_entry(entry, 2, 0)
    with pytest.raises(DigestMismatchError, match="shorter"):
        digester.verify_entry(entry[:31], 1, 0)


def test_mismatch_reasons_and_context() -> None:
    digester = Digester("CRC32", PASSWORD)
    entry = digester.package_entry(1, 0, -1, 5, b"hello")
    with pytest.raises(DigestMismatchError, match="ledger id mismatch") as info:
        digester.verify_entry(entry, 2, 0)
    assert info.value.context["actual_ledger_id"] == 1
    with pytest.raises(DigestMismatchError, match="entry id mismatch") as info:
        digester.verify_entry(entry, 1, 1)
    assert info.value.context == {"ledger_id": 1, "entry_id": 1, "actual_entry_id": 0}
    with pytest.raises(DigestMismatchError, match="shorter"):
        digester.verify_entry(entry[: ENTRY_HEADER_SIZE + 7], 1, 0)
    with pytest.raises(DigestMismatchError, match="digest"):
        Digester("CRC32C", PASSWORD).verify_entry(entry, 1, 0)
    assert DigestMismatchError.retriable and DigestMismatchError.code == -5


def test_entry_id_none_skips_entry_check_like_recovery_reads() -> None:
    digester = Digester("CRC32C", PASSWORD)
    entry = digester.package_entry(1, 41, 40, 999, b"last")
    verified = digester.verify_entry(entry, 1, None)
    assert (verified.entry_id, verified.last_add_confirmed, verified.length) == (41, 40, 999)


def test_hmac_needs_the_right_password() -> None:
    entry = Digester("HMAC", PASSWORD).package_entry(1, 0, -1, 5, b"hello")
    with pytest.raises(DigestMismatchError):
        Digester("HMAC", b"wrong").verify_entry(entry, 1, 0)
    # CRC types ignore the password, as in Java.
    crc_entry = Digester("CRC32", PASSWORD).package_entry(1, 0, -1, 5, b"hello")
    assert Digester("CRC32", b"other").verify_entry(crc_entry, 1, 0).entry_id == 0


def test_empty_payload_and_large_payload() -> None:
    digester = Digester("CRC32C")
    assert bytes(digester.verify_entry(digester.package_entry(3, 0, -1, 0, b""), 3, 0).payload) == b""
    big = bytes(range(256)) * 4096
    assert digester.verify_entry(digester.package_entry(3, 1, 0, len(big), big), 3, 1).payload == big


def test_package_entry_rejects_out_of_range_fields() -> None:
    digester = Digester("CRC32")
    with pytest.raises(LocalProtocolError):
        digester.package_entry(1, 2**63, 0, 0, b"")
    with pytest.raises(LocalProtocolError):
        digester.package_entry(-1, 0, 0, 0, b"")
    with pytest.raises(LocalProtocolError):
        digester.package_entry(1, 0, 0, 0, b"", scope_id=2**64)


# -- scope != 0: entry format V2 -------------------------------------------------


@pytest.mark.parametrize("digest_type", list(DigestType))
def test_v2_entry_layout(digest_type: DigestType) -> None:
    digester = Digester(digest_type, PASSWORD)
    entry = digester.package_entry(1, 0, -1, 5, b"hello", scope_id=77)
    header = struct.pack(">Bqqqqq", 0xA0 | int(digest_type), 77, 1, 0, -1, 5)
    assert len(header) == ENTRY_V2_HEADER_SIZE
    assert entry[:ENTRY_V2_HEADER_SIZE] == header
    assert entry[ENTRY_V2_HEADER_SIZE + digester.size :] == b"hello"
    assert entry[0] == 0xA0 | int(digest_type)
    assert is_v2_format(entry) and not is_v2_format(HEADER)
    verified = digester.verify_entry(entry, 1, 0, scope_id=77)
    assert verified[:4] == (1, 0, -1, 5) and verified.scope_id == 77
    assert bytes(verified.payload) == b"hello"


def test_v2_entry_digest_covers_41_byte_header_and_payload() -> None:
    entry = Digester("CRC32C").package_entry(5, 6, 4, 12, b"data", scope_id=-3)
    header = struct.pack(">Bqqqqq", 0xA3, -3, 5, 6, 4, 12)
    assert entry == header + struct.pack(">I", crc32c.crc32c(header + b"data")) + b"data"
    crc_entry = Digester("CRC32").package_entry(5, 6, 4, 12, b"data", scope_id=9)
    crc_header = struct.pack(">Bqqqqq", 0xA1, 9, 5, 6, 4, 12)
    assert crc_entry == crc_header + struct.pack(">Q", zlib.crc32(crc_header + b"data")) + b"data"


def test_v2_scope_and_digest_type_are_checked() -> None:
    digester = Digester("CRC32C", PASSWORD)
    entry = digester.package_entry(1, 0, -1, 5, b"hello", scope_id=77)
    with pytest.raises(DigestMismatchError, match="scope"):
        digester.verify_entry(entry, 1, 0, scope_id=78)
    with pytest.raises(DigestMismatchError, match="scope"):
        digester.verify_entry(entry, 1, 0)  # a scope-0 reader gets a V2 entry
    with pytest.raises(DigestMismatchError, match="scope"):
        digester.verify_entry(digester.package_entry(1, 0, -1, 5, b"hello"), 1, 0, scope_id=77)
    with pytest.raises(DigestMismatchError, match="digest type"):
        Digester("CRC32", PASSWORD).verify_entry(entry, 1, 0, scope_id=77)
    bad_version = bytes([0x90 | 3]) + entry[1:]
    with pytest.raises(DigestMismatchError, match="format"):
        digester.verify_entry(bad_version, 1, 0, scope_id=77)
    with pytest.raises(DigestMismatchError, match="shorter"):
        digester.verify_entry(entry[:44], 1, 0, scope_id=77)


# -- entry_header (what a bookie reads) ------------------------------------------


def test_entry_header_both_formats() -> None:
    digester = Digester("HMAC", PASSWORD)
    assert entry_header(digester.package_entry(9, 8, 7, 6, b"x")) == (0, 9, 8, 7)
    assert entry_header(memoryview(digester.package_entry(9, 8, 7, 6, b"x", scope_id=5))) == (5, 9, 8, 7)
    assert entry_header(HEADER) == (0, 1, 0, -1)


@pytest.mark.parametrize("bad", [b"", b"\x00" * 31, b"\xa3" + b"\x00" * 39, b"\xc3" + b"\x00" * 50])
def test_entry_header_rejects_short_or_unknown(bad: bytes) -> None:
    with pytest.raises(MalformedFrameError):
        entry_header(bad)


# -- explicit LAC --------------------------------------------------------------------


@pytest.mark.parametrize("digest_type", list(DigestType))
def test_lac_blob_matches_java_vectors(digest_type: DigestType) -> None:
    digester = Digester(digest_type, PASSWORD)
    blob = digester.package_lac(1, 7)
    assert blob == LAC_HEADER + LAC_DIGESTS[digest_type]
    assert digester.verify_lac(blob, 1) == 7
    assert lac_header(blob) == (0, 1, 7)


@pytest.mark.parametrize("digest_type", list(DigestType))
def test_lac_blob_v2(digest_type: DigestType) -> None:
    digester = Digester(digest_type, PASSWORD)
    blob = digester.package_lac(1, 7, scope_id=12)
    header = struct.pack(">Bqqq", 0xA0 | int(digest_type), 12, 1, 7)
    assert blob[:25] == header and len(blob) == 25 + digester.size
    assert digester.verify_lac(blob, 1, scope_id=12) == 7
    assert lac_header(blob) == (12, 1, 7)
    with pytest.raises(DigestMismatchError):
        digester.verify_lac(blob, 1)


def test_lac_mismatches() -> None:
    digester = Digester("CRC32", PASSWORD)
    blob = digester.package_lac(1, 7)
    with pytest.raises(DigestMismatchError, match="ledger"):
        digester.verify_lac(blob, 2)
    with pytest.raises(DigestMismatchError, match="shorter"):
        digester.verify_lac(blob[:23], 1)
    tampered = blob[:15] + b"\x08" + blob[16:]
    with pytest.raises(DigestMismatchError, match="digest"):
        digester.verify_lac(tampered, 1)
    with pytest.raises(DigestMismatchError):
        Digester("HMAC", PASSWORD).verify_lac(digester.package_lac(1, 7, scope_id=3), 1, scope_id=3)
    with pytest.raises(MalformedFrameError):
        lac_header(b"\x00" * 15)


def test_errors_are_bkerrors() -> None:
    assert issubclass(DigestMismatchError, BKError)
    assert issubclass(MalformedFrameError, BKError)


# -- verify_payloads: the batch-read path must decide exactly as verify_entry does -----------------


@pytest.mark.parametrize("digest_type", list(DigestType))
@pytest.mark.parametrize("scope_id", [0, 9])
def test_verify_payloads_agrees_with_verify_entry(digest_type: DigestType, scope_id: int) -> None:
    digester = Digester(digest_type, b"pw")
    payloads = [b"", b"a", b"x" * 1000, bytes(range(256))]
    items = [
        digester.package_entry(5, 10 + i, 9 + i, 100 + i, p, scope_id=scope_id) for i, p in enumerate(payloads)
    ]
    got, error = digester.verify_payloads([memoryview(i) for i in items], 5, 10, scope_id=scope_id)
    assert error is None
    assert got == payloads and all(type(p) is bytes for p in got)


@pytest.mark.parametrize("digest_type", [DigestType.CRC32, DigestType.CRC32C, DigestType.HMAC])
def test_verify_payloads_stops_at_the_first_bad_entry_with_verify_entrys_error(digest_type: DigestType) -> None:
    digester = Digester(digest_type, b"pw")
    items = [bytearray(digester.package_entry(5, 10 + i, -1, 10, b"payload-%d" % i)) for i in range(4)]
    items[2][-1] ^= 0xFF  # tamper with the third entry's payload
    got, error = digester.verify_payloads(items, 5, 10)
    assert got == [b"payload-0", b"payload-1"]
    assert isinstance(error, DigestMismatchError)
    with pytest.raises(DigestMismatchError) as expected:
        digester.verify_entry(bytes(items[2]), 5, 12)
    assert str(error) == str(expected.value)


def test_verify_payloads_rejects_a_wrong_ledger_or_a_gap_in_entry_ids() -> None:
    digester = Digester(DigestType.CRC32C, b"")
    first = digester.package_entry(5, 0, -1, 1, b"a")
    other_ledger = digester.package_entry(6, 1, -1, 2, b"b")
    got, error = digester.verify_payloads([first, other_ledger], 5, 0)
    assert got == [b"a"] and isinstance(error, DigestMismatchError)
    skipped = digester.package_entry(5, 2, -1, 2, b"c")
    got, error = digester.verify_payloads([first, skipped], 5, 0)
    assert got == [b"a"] and isinstance(error, DigestMismatchError)
