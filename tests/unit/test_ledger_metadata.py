"""Ledger metadata serde: byte-exact against Apache BookKeeper 4.17.3's LedgerMetadataSerDe.

The JAVA_V* vectors were produced by ``LedgerMetadataSerDe.serialize`` (4.17.3
jars) for the ledger built in :func:`_java_ledger`: closed at entry 9 with
length 1234, two segments, a password holding every byte Java's text escaper
treats specially, a non-ASCII custom metadata key, ctime stored, cToken 12345.
The reader cases mirror what Java's ``parseConfig`` accepted or rejected on
the same bytes (checked against the 4.17.3 jars).
"""

from __future__ import annotations

import dataclasses

import pytest

from bkspark.errors import BadMetadataError, LocalProtocolError
from bkspark.protocol.digest import DigestType
from bkspark.protocol.ledger_metadata import (
    HEADER_KEY,
    LedgerMetadata,
    LedgerState,
    header_version,
    parse,
    serialize,
)
from bkspark.protocol.proto import DataFormats_pb2 as pb
from bkspark.protocol.values import encode_varint

JAVA_V1 = bytes.fromhex(
    "426f6f6b69654d65746164617461466f726d617456657273696f6e09310a320a330a313233340a300931302e302e302e"
    "313a333138310931302e302e302e323a3331383109625f78405b5d5e3b0a370931302e302e302e313a33313831093130"
    "2e302e302e343a3331383109780a3909434c4f534544"
)
JAVA_V2 = bytes.fromhex(
    "426f6f6b69654d65746164617461466f726d617456657273696f6e09320a71756f72756d53697a653a20320a656e7365"
    "6d626c6553697a653a20330a6c656e6774683a20313233340a6c617374456e74727949643a20390a73746174653a2043"
    "4c4f5345440a7365676d656e74207b0a2020656e73656d626c654d656d6265723a202231302e302e302e313a33313831"
    "220a2020656e73656d626c654d656d6265723a202231302e302e302e323a33313831220a2020656e73656d626c654d65"
    "6d6265723a2022625f78405b5d5e3b220a20206669727374456e74727949643a20300a7d0a7365676d656e74207b0a20"
    "20656e73656d626c654d656d6265723a202231302e302e302e313a33313831220a2020656e73656d626c654d656d6265"
    "723a202231302e302e302e343a33313831220a2020656e73656d626c654d656d6265723a202278220a20206669727374"
    "456e74727949643a20370a7d0a646967657374547970653a204352433332430a70617373776f72643a202270775c615c"
    "625c665c765c3030305c3337375c225c275c5c220a61636b51756f72756d53697a653a20320a6374696d653a20313730"
    "303030303030303030300a637573746f6d4d65746164617461207b0a20206b65793a20226b5c3330335c32353179220a"
    "202076616c75653a20225c3030315c32303041220a7d0a"
)
JAVA_V3 = bytes.fromhex(
    "426f6f6b69654d65746164617461466f726d617456657273696f6e09330a84010802100318d20920092803322a0a0d31"
    "302e302e302e313a333138310a0d31302e302e302e323a333138310a08625f78405b5d5e3b100032230a0d31302e302e"
    "302e313a333138310a0d31302e302e302e343a333138310a017810073803420b707707080c0b00ff22275c48025080d0"
    "95ffbc315a0b0a046bc3a979120301804160b960"
)

SPEC_V3_EXAMPLE = bytes.fromhex(  # docs/protocol.md §8
    "426f6f6b69654d65746164617461466f726d617456657273696f6e09330a"
    "5c"
    "0802100318002" "0ffffffffffffffffff01" "2801"
    "322f0a0d31302e302e302e313a333138310a0d31302e302e302e323a333138310a0d31302e302e302e333a333138311000"
    "3803420270774802" "5a0b0a03617070120464656d6f" "60b960"
)

SPEC_V2_EXAMPLE = (  # docs/protocol.md §8
    b"BookieMetadataFormatVersion\t2\n"
    b"quorumSize: 2\n"
    b"ensembleSize: 3\n"
    b"length: 0\n"
    b"lastEntryId: -1\n"
    b"state: OPEN\n"
    b"segment {\n"
    b'  ensembleMember: "10.0.0.1:3181"\n'
    b'  ensembleMember: "10.0.0.2:3181"\n'
    b'  ensembleMember: "10.0.0.3:3181"\n'
    b"  firstEntryId: 0\n"
    b"}\n"
    b"digestType: CRC32C\n"
    b'password: "pw"\n'
    b"ackQuorumSize: 2\n"
    b"customMetadata {\n"
    b'  key: "app"\n'
    b'  value: "demo"\n'
    b"}\n"
)

BOOKIES = ("10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181")


def _spec_ledger(**changes: object) -> LedgerMetadata:
    md = LedgerMetadata(
        ensemble_size=3,
        write_quorum_size=2,
        ack_quorum_size=2,
        digest_type=DigestType.CRC32C,
        password=b"pw",
        ensembles={0: BOOKIES},
        custom_metadata={"app": b"demo"},
        ctoken=12345,
    )
    return dataclasses.replace(md, **changes)  # type: ignore[arg-type]


def _java_ledger(version: int) -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=3,
        write_quorum_size=2,
        ack_quorum_size=2,
        state=LedgerState.CLOSED,
        last_entry_id=9,
        length=1234,
        digest_type=DigestType.CRC32C,
        password=bytes([112, 119, 7, 8, 12, 11, 0, 0xFF, 34, 39, 92]),
        ensembles={0: ("10.0.0.1:3181", "10.0.0.2:3181", "b_x@[]^;"), 7: ("10.0.0.1:3181", "10.0.0.4:3181", "x")},
        custom_metadata={"k\u00e9y": b"\x01\x80A"},
        ctoken=12345,
        ctime=1700000000000,
        store_ctime=True,
        format_version=version,
    )


def _v3(fmt: pb.LedgerMetadataFormat, header: bytes = b"3", extra: bytes = b"") -> bytes:
    body = fmt.SerializePartialToString()
    return HEADER_KEY + header + b"\n" + encode_varint(len(body)) + body + extra


def _fmt(**fields: object) -> pb.LedgerMetadataFormat:
    fmt = pb.LedgerMetadataFormat(
        quorumSize=2, ensembleSize=3, length=0, lastEntryId=-1, state=1, digestType=3, password=b"", ackQuorumSize=2
    )
    fmt.segment.add(firstEntryId=0, ensembleMember=["a:1", "b:1", "c:1"])
    for name, value in fields.items():
        setattr(fmt, name, value)
    return fmt


# --- writer: byte-exact ------------------------------------------------------


@pytest.mark.parametrize("version, expected", [(1, JAVA_V1), (2, JAVA_V2), (3, JAVA_V3)])
def test_serialize_equals_java_bytes(version: int, expected: bytes) -> None:
    assert serialize(_java_ledger(version)) == expected


def test_serialize_spec_v3_example() -> None:
    assert serialize(_spec_ledger()) == SPEC_V3_EXAMPLE


def test_serialize_spec_v2_example_has_no_ctoken() -> None:
    assert serialize(_spec_ledger(), version=2) == SPEC_V2_EXAMPLE
    assert b"cToken" not in serialize(_spec_ledger(), version=2)


def test_v1_writer_layout() -> None:
    md = _spec_ledger(format_version=1)
    assert serialize(md) == HEADER_KEY + b"1\n2\n3\n0\n0\t" + b"\t".join(b.encode() for b in BOOKIES) + b"\n"
    assert serialize(md.in_recovery()).endswith(b"\n-102\tCLOSED")
    assert serialize(md.close(41, 4096)).endswith(b"\n4096\n0\t" + b"\t".join(b.encode() for b in BOOKIES) + b"\n41\tCLOSED")


def test_ctime_written_only_when_stored() -> None:
    stored = parse(serialize(_spec_ledger(ctime=5, store_ctime=True)))
    assert (stored.ctime, stored.store_ctime) == (5, True)
    not_stored = parse(serialize(_spec_ledger(ctime=5, store_ctime=False)))
    assert (not_stored.ctime, not_stored.store_ctime) == (-1, False)


def test_serialize_is_deterministic_and_keeps_custom_order() -> None:
    md = _spec_ledger(custom_metadata={"z": b"1", "a": b"2"})
    assert serialize(md) == serialize(md)
    assert list(parse(serialize(md)).custom_metadata) == ["z", "a"]


def test_v2_v3_need_a_password() -> None:
    md = parse(serialize(_spec_ledger(format_version=1)))
    assert md.password is None and md.digest_type is None
    with pytest.raises(LocalProtocolError):
        serialize(md, version=3)
    with pytest.raises(LocalProtocolError):
        serialize(md, version=4)


# --- reader ----------------------------------------------------------------------


@pytest.mark.parametrize("version, data", [(1, JAVA_V1), (2, JAVA_V2), (3, JAVA_V3)])
def test_parse_java_bytes(version: int, data: bytes) -> None:
    md = parse(data)
    assert md.format_version == version
    assert md.state is LedgerState.CLOSED and (md.last_entry_id, md.length) == (9, 1234)
    assert md.ensembles == {0: ("10.0.0.1:3181", "10.0.0.2:3181", "b_x@[]^;"), 7: ("10.0.0.1:3181", "10.0.0.4:3181", "x")}
    if version == 1:  # no password, digest, ctime or custom metadata in V1
        assert (md.password, md.digest_type, md.custom_metadata, md.ctime) == (None, None, {}, -1)
    else:
        assert md.password == bytes([112, 119, 7, 8, 12, 11, 0, 0xFF, 34, 39, 92])
        assert md.digest_type is DigestType.CRC32C
        assert md.custom_metadata == {"k\u00e9y": b"\x01\x80A"}
        assert (md.ctime, md.store_ctime) == (1700000000000, True)
        assert md.ctoken == (12345 if version == 3 else 0)
    assert serialize(md) == data


def test_spec_examples_round_trip() -> None:
    assert parse(SPEC_V3_EXAMPLE) == _spec_ledger()
    assert parse(SPEC_V2_EXAMPLE) == _spec_ledger(ctoken=0, format_version=2)


def test_reader_defaults_like_java() -> None:
    fmt = _fmt()
    fmt.ClearField("ackQuorumSize")
    assert parse(_v3(fmt)).ack_quorum_size == 2  # Qa defaults to Qw
    fmt = _fmt()
    fmt.ClearField("digestType")
    assert parse(_v3(fmt)).digest_type is DigestType.CRC32  # proto2 default
    fmt = _fmt()
    fmt.ClearField("password")
    assert (parse(_v3(fmt)).password, parse(_v3(fmt)).digest_type) == (None, None)
    # Not closed: lastEntryId/length in the blob are ignored.
    md = parse(_v3(_fmt(state=2, lastEntryId=7, length=99)))
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.IN_RECOVERY, -1, 0)
    # Trailing bytes after the delimited message are ignored; "+3" is a version Java's parseInt takes.
    assert parse(_v3(_fmt(), extra=b"\x00junk")) == parse(_v3(_fmt()))
    assert parse(_v3(_fmt(), header=b"+3")).format_version == 3


def test_znode_ctime_used_when_blob_has_none() -> None:
    md = parse(_v3(_fmt()), znode_ctime=1234)
    assert (md.ctime, md.store_ctime) == (1234, False)
    assert b"ctime" not in serialize(dataclasses.replace(md, format_version=2))


def test_v2_reader_accepts_any_order_and_overwrites() -> None:
    data = HEADER_KEY + (
        b"2\nstate: CLOSED\nensembleSize: 3\nquorumSize: 2\nquorumSize: 1\nlength: 5\nlastEntryId: 4\n"
        b'segment { firstEntryId: 0 ensembleMember: "a:1" ensembleMember: "b:1" ensembleMember: "c:1" }\n'
        b'password: ""\ncToken: 77\n'
    )
    md = parse(data)
    assert (md.write_quorum_size, md.ack_quorum_size, md.last_entry_id, md.length, md.ctoken) == (1, 1, 4, 5, 77)
    assert md.digest_type is DigestType.CRC32


def test_v1_reader() -> None:
    md = parse(HEADER_KEY + b"1\n2\n3\n0\n0\ta:1\tb:1\tc:1\n-102\tCLOSED")
    assert md.state is LedgerState.IN_RECOVERY and md.ack_quorum_size == 2
    # The header must end in LF (Java parses "1\r" as the version and fails); the body may use CRLF.
    with pytest.raises(BadMetadataError, match="Unable to parse version number"):
        parse(HEADER_KEY + b"1\r\n2\r\n3\r\n10\r\n0\ta:1\tb:1\tc:1\r\n5\tCLOSED")
    assert header_version(HEADER_KEY + b"1\nrest") == (1, len(HEADER_KEY) + 2)
    md = parse(HEADER_KEY + b"1\n2\r\n3\r\n10\r\n0\ta:1\tb:1\tc:1\r\n5\tCLOSED\r\nignored")
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, 5, 10)
    md = parse(HEADER_KEY + b"1\n2\n3\n10\n0\ta:1\tb:1\tc:1\r\n5\tb:1\tc:1\td:1\n9\tCLOSED\nignored")
    assert md.state is LedgerState.CLOSED and (md.last_entry_id, md.length) == (9, 10)
    assert md.ensembles == {0: ("a:1", "b:1", "c:1"), 5: ("b:1", "c:1", "d:1")}


def _dup_key() -> pb.LedgerMetadataFormat:
    fmt = _fmt()
    fmt.customMetadata.add(key="k", value=b"1")
    fmt.customMetadata.add(key="k", value=b"2")
    return fmt


def _segments(*segments: tuple[int, list[str]]) -> pb.LedgerMetadataFormat:
    fmt = _fmt()
    fmt.ClearField("segment")
    for first, members in segments:
        fmt.segment.add(firstEntryId=first, ensembleMember=members)
    return fmt


def _cleared(name: str) -> pb.LedgerMetadataFormat:
    fmt = _fmt()
    fmt.ClearField(name)
    return fmt


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "header corrupt at index 0"),
        (b"BookieMetadataFormatVersion 3\n", "header corrupt at index 27"),
        (HEADER_KEY + b"12345678901\n", "Unable to find end of version number"),
        (HEADER_KEY + b"x\n", "Unable to parse version number"),
        (_v3(_fmt(), header=b"4"), "Metadata version not compatible"),
        (_v3(_cleared("state")), "misses required fields: state"),
        (_v3(_segments()), "at least one ensemble"),
        (_v3(_segments((0, ["a:1", "b:1", "c:1"]), (5, ["a:1", "b:1"]))), "must match the ensembleSize"),
        (_v3(_segments((0, ["a:1", "b:1", "c:1"]), (0, ["a:1", "b:1", "d:1"]))), "greater than any existing"),
        (_v3(_segments((0, ["a:1", "readonly", "c:1"]))), "reserved"),
        (_v3(_segments((0, ["a:1", "b 1", "c:1"]))), "not valid"),
        (_v3(_dup_key()), "duplicate custom metadata key"),
        (_v3(_fmt(quorumSize=4)), "less or equal to ensemble size"),
        (_v3(_fmt(ackQuorumSize=3)), "greater or equal to ack quorum"),
        (_v3(_fmt(state=3, lastEntryId=7, length=99))[:-3], "truncated"),
        (HEADER_KEY + b"3\n\x80", "truncated inside the length varint"),
        (HEADER_KEY + b"3\n" + b"\xff" * 10, "malformed length varint"),
        (HEADER_KEY + b"3\n\xff\xff\xff\xff\x0f", "negative length"),
        (HEADER_KEY + b"2\nstate: OPEN\nensembleSize: 3\nquorumSize: 2\nlength: 0\nfoo: 1\n", "no field named"),
        (HEADER_KEY + b"2\nstate: OPEN\nensembleSize: 3\n", "missing required fields"),
        (HEADER_KEY + b"1\n2\n3\n0\n0\n", "fewer than 2 fields"),
        (HEADER_KEY + b"1\n2\n3\n0\n", "at least one ensemble"),
        (HEADER_KEY + b"1\n2\n3\n", "needs quorum size, ensemble size and length"),
        (HEADER_KEY + b"1\n2\nthree\n0\n", "bad size line"),
        (HEADER_KEY + b"1\n2\n3\n0\nx\ta:1\tb:1\tc:1\n", "bad first entry id"),
    ],
)
def test_reader_rejects_what_java_rejects(data: bytes, message: str) -> None:
    with pytest.raises(BadMetadataError, match=message):
        parse(data)


def test_zero_ack_quorum_is_refused_though_java_reads_it() -> None:
    # Java 4.17.3 builds such metadata (it checks only E >= Qw >= Qa); no Java
    # writer produces it and a client could not use it, so we refuse it.
    with pytest.raises(BadMetadataError, match="positive int32"):
        parse(_v3(_fmt(ackQuorumSize=0)))


def test_invalid_utf8_member_is_bad_metadata() -> None:
    seg = b"\x0a\x02\xff\xfe" * 3 + b"\x10\x00"
    body = b"\x08\x01\x10\x03\x18\x00\x28\x01\x32" + bytes([len(seg)]) + seg
    with pytest.raises(BadMetadataError, match="not valid"):
        parse(HEADER_KEY + b"3\n" + encode_varint(len(body)) + body)


# --- the model and its helpers ---------------------------------------------------


def test_ensemble_at_and_segments() -> None:
    md = _spec_ledger().with_ensemble(10, ("a:1", "b:1", "c:1")).with_ensemble(20, ("d:1", "b:1", "c:1"))
    assert md.ensemble_at(0) == BOOKIES and md.ensemble_at(9) == BOOKIES
    assert md.ensemble_at(10) == ("a:1", "b:1", "c:1") and md.ensemble_at(10**12) == ("d:1", "b:1", "c:1")
    assert md.last_ensemble == ("d:1", "b:1", "c:1")
    assert (md.next_segment_start(0), md.next_segment_start(12), md.next_segment_start(20)) == (10, 20, None)
    assert md.segment(15) == (10, ("a:1", "b:1", "c:1")) and md.segment(25)[0] == 20
    assert [md.write_set(e) for e in range(3)] == [[0, 1], [1, 2], [2, 0]]  # E = 3, Qw = 2
    with pytest.raises(LocalProtocolError):
        md.ensemble_at(-1)


def test_derivations_drop_ctoken_like_java() -> None:
    md = _spec_ledger()
    closed = md.close(41, 4096)
    assert (closed.state, closed.last_entry_id, closed.length, closed.ctoken) == (LedgerState.CLOSED, 41, 4096, 0)
    assert closed.is_closed and not md.is_closed
    assert md.in_recovery().state is LedgerState.IN_RECOVERY and md.in_recovery().ctoken == 0
    replaced = md.replace_ensemble(0, ("x:1", "b:1", "c:1"))
    assert replaced.ensembles == {0: ("x:1", "b:1", "c:1")} and replaced.ctoken == 0
    assert md.with_custom_metadata({"a": b"b"}).custom_metadata == {"a": b"b"}
    with pytest.raises(LocalProtocolError, match="greater than any existing"):
        md.with_ensemble(0, BOOKIES)
    with pytest.raises(LocalProtocolError, match="replace an existing"):
        md.replace_ensemble(5, BOOKIES)
    with pytest.raises(LocalProtocolError, match="must match the ensembleSize"):
        md.with_ensemble(5, ("a:1",))


def test_ensemble_change_and_ctoken_rules() -> None:
    """An ensemble change is a new segment past the current one's start, a replacement at it, refused before it;
    the cToken rule has one home (``as_update``), which every derivation applies."""
    md = _spec_ledger().with_ctoken(77)
    assert md.ctoken == 77 and md.last_segment_start == 0
    moved = md.with_last_ensemble(10, ("x:1", "b:1", "c:1"))
    assert moved.ensembles == {0: BOOKIES, 10: ("x:1", "b:1", "c:1")} and moved.last_segment_start == 10
    again = moved.with_last_ensemble(10, ("y:1", "b:1", "c:1"))  # a second change before any ack
    assert again.ensembles == {0: BOOKIES, 10: ("y:1", "b:1", "c:1")} and again.last_ensemble[0] == "y:1"
    with pytest.raises(LocalProtocolError, match="greater than any existing"):
        moved.with_last_ensemble(5, BOOKIES)
    assert (moved.ctoken, again.ctoken, md.as_update().ctoken, md.ctoken) == (0, 0, 0, 77)
    untouched = md.as_update()
    assert untouched.as_update() is untouched
    closed = moved.close(12, 300)
    assert closed.is_closed and closed.ensembles == moved.ensembles and closed.last_segment_start == 10


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"write_quorum_size": 4}, "less or equal to ensemble size"),
        ({"ack_quorum_size": 3}, "greater or equal to ack quorum"),
        ({"ensembles": {}}, "at least one ensemble"),
        ({"last_entry_id": 5}, "not closed"),
        ({"password": None}, "Either both password and digest type"),
        ({"ensembles": {0: ("a:1", "b:1", "readonly")}}, "reserved"),
        ({"format_version": 4}, "format version"),
        ({"custom_metadata": {"k": "not bytes"}}, "bytes values"),
        ({"ctoken": 2**63}, "int64"),
        ({"state": 9}, "unknown state"),
    ],
)
def test_model_validates_like_the_builder(changes: dict[str, object], message: str) -> None:
    with pytest.raises(LocalProtocolError, match=message):
        _spec_ledger(**changes)


def test_ensembles_are_kept_sorted() -> None:
    md = _spec_ledger(ensembles={10: ("d:1", "b:1", "c:1"), 0: BOOKIES})
    assert list(md.ensembles) == [0, 10]
    assert parse(serialize(md)).ensembles == md.ensembles


def test_v3_shorter_than_its_length_prefix_is_refused() -> None:
    # Java 4.17.3 (protobuf-java mergeDelimitedFrom) accepts JAVA_V3 minus its
    # last field (cToken) because the cut falls on a field boundary; we refuse
    # any blob shorter than its length prefix, as Java 4.18's reader does.
    with pytest.raises(BadMetadataError, match="truncated"):
        parse(JAVA_V3[:-3])
