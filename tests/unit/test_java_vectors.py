"""Byte vectors made by Apache BookKeeper's own Java code, against bkspark.protocol.

The vectors in tests/vectors/java-<version>.json are printed by tools/java/.../VectorGen.java running on the
real BookKeeper jars (DigestManager, BookieProtoEncoding, the protobuf classes, LedgerMetadataSerDe, Cookie,
LedgerLayout, BookieId, StringUtils, ZKRegistrationManager ...). Regenerate them with

    make jars && for v in 4.16.6 4.17.3 4.18.2; do
      java -cp ".cache/bookkeeper/$v/classes:.cache/bookkeeper/$v/lib/*" bkspark.tools.VectorGen \
           --out tests/vectors/java-$v.json; done

and tests/integration/test_java_vectors_fresh.py checks that the committed files still equal what the program
prints. Every test here runs on every committed file: our decoders must read each vector into the fields
Java used, and our encoders must reproduce each byte.

One difference between versions is expected and checked as such: 4.18 moved BookkeeperProtocol to LightProto,
which writes the ``flag`` field (number 100, declared first in the .proto) before the other fields, where
protobuf-java (4.16, 4.17) and our encoder write fields in number order. Both orders decode to the same message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from bkspark.errors import BadMetadataError, DigestMismatchError, InvalidBookieIdError
from bkspark.protocol import bookie_id, cookie, digest, layout, ledger_metadata, service_info, v2, v3, zk_paths
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb

VECTOR_DIR = Path(__file__).resolve().parents[1] / "vectors"
VECTOR_FILES = sorted(VECTOR_DIR.glob("java-*.json"))
REFERENCE_VERSION = "4.17.3"


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module", params=VECTOR_FILES, ids=[p.stem for p in VECTOR_FILES])
def vectors(request: pytest.FixtureRequest) -> dict[str, Any]:
    return _load(request.param)


def h(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)


def body_of(frame: bytes) -> bytes:
    """The frame body (length prefix checked and stripped)."""
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    return frame[4:]


def test_vector_files_present() -> None:
    versions = {p.stem.removeprefix("java-") for p in VECTOR_FILES}
    assert REFERENCE_VERSION in versions
    for path in VECTOR_FILES:
        doc = _load(path)
        assert doc["generator"] == "bkspark.tools.VectorGen"
        assert path.stem == f"java-{doc['bookkeeper_version']}"


# -- keys, entries, explicit LAC ----------------------------------------------------------------------------------


def test_master_and_mac_keys(vectors: dict[str, Any]) -> None:
    assert vectors["keys"]
    for k in vectors["keys"]:
        password = h(k["password"])
        assert digest.master_key(password) == h(k["master_key"])
        assert digest.mac_key(password) == h(k["mac_key"])


def test_entries_are_packaged_byte_for_byte(vectors: dict[str, Any]) -> None:
    seen = set()
    for e in vectors["entries"]:
        dt = digest.DigestType.parse(e["digest_type"])
        seen.add(dt)
        d = digest.Digester(dt, h(e["password"]))
        packaged = d.package_entry(e["ledger_id"], e["entry_id"], e["last_add_confirmed"], e["length"], h(e["payload"]))
        assert packaged == h(e["entry"]), e["name"]
        assert len(packaged) == 32 + dt.digest_size + len(h(e["payload"]))


def test_entries_decode_into_java_fields(vectors: dict[str, Any]) -> None:
    for e in vectors["entries"]:
        entry = h(e["entry"])
        assert e["verified_payload_equal"] is True  # Java's own verifier accepted its entry
        d = digest.Digester(e["digest_type"], h(e["password"]))
        got = d.verify_entry(entry, e["ledger_id"], e["entry_id"])
        assert (got.ledger_id, got.entry_id, got.last_add_confirmed, got.length) == (
            e["ledger_id"],
            e["entry_id"],
            e["last_add_confirmed"],
            e["length"],
        ), e["name"]
        assert bytes(got.payload) == h(e["payload"])
        assert digest.entry_header(entry) == (0, e["ledger_id"], e["entry_id"], e["last_add_confirmed"])
        assert digest.is_v2_format(entry) is False


def test_entries_with_a_flipped_byte_do_not_verify(vectors: dict[str, Any]) -> None:
    """The digest covers header and payload: any change is caught (except with DUMMY, which checks nothing)."""
    for e in vectors["entries"]:
        if e["digest_type"] == "DUMMY" or not e["payload"]:
            continue
        entry = bytearray(h(e["entry"]))
        entry[-1] ^= 0x01
        d = digest.Digester(e["digest_type"], h(e["password"]))
        with pytest.raises(DigestMismatchError):
            d.verify_entry(bytes(entry), e["ledger_id"], e["entry_id"])


def test_v2_add_frames_from_digest_manager(vectors: dict[str, Any]) -> None:
    """DigestManager's v2 packaging is the whole ADDENTRY frame, length prefix included."""
    for e in vectors["entries"]:
        for f in e["v2_add_frames"]:
            frame = h(f["frame"])
            msg = v2.AddRequest(flags=f["flags"], master_key=h(e["master_key"]), entry=h(e["entry"]))
            assert v2.encode_request(msg) == frame, (e["name"], f["flags"])
            assert v2.encode_add_request(f["flags"], h(e["master_key"]), h(e["entry"])) == frame
            got = v2.decode_request(body_of(frame))
            assert isinstance(got, v2.AddRequest)
            assert (got.flags, bytes(got.master_key), bytes(got.entry), got.version) == (
                f["flags"],
                h(e["master_key"]),
                h(e["entry"]),
                2,
            )
            assert (got.ledger_id, got.entry_id) == (e["ledger_id"], e["entry_id"])


def test_explicit_lac_blobs(vectors: dict[str, Any]) -> None:
    for b in vectors["lac_blobs"]:
        d = digest.Digester(b["digest_type"], h(b["password"]))
        assert d.package_lac(b["ledger_id"], b["lac"]) == h(b["blob"])
        assert b["verified_lac"] == b["lac"]
        assert d.verify_lac(h(b["blob"]), b["ledger_id"]) == b["lac"]


# -- v2 frames ---------------------------------------------------------------------------------------------------


def _v2_request(kind: str, f: dict[str, Any]) -> v2.Request:
    if kind == "add":
        return v2.AddRequest(flags=f["flags"], master_key=h(f["master_key"]), entry=h(f["entry"]))
    if kind == "read":
        return v2.ReadRequest(f["flags"], f["ledger_id"], f["entry_id"], h(f["master_key"]))
    if kind == "batch_read":
        return v2.BatchReadRequest(
            f["flags"], f["ledger_id"], f["start_entry_id"], f["request_id"], f["max_count"], f["max_size"],
            h(f["master_key"]),
        )
    if kind == "auth":
        return v2.AuthRequest(f["auth_plugin_name"], h(f["payload"]))
    raise AssertionError(kind)


def _v2_response(kind: str, f: dict[str, Any]) -> v2.Response:
    if kind == "add":
        return v2.AddResponse(f["rc"], f["ledger_id"], f["entry_id"])
    if kind == "read":
        return v2.ReadResponse(f["rc"], f["ledger_id"], f["entry_id"], h(f["entry"]))
    if kind == "batch_read":
        return v2.BatchReadResponse(
            f["rc"], f["ledger_id"], f["start_entry_id"], f["request_id"], [h(x) for x in f["entries"]]
        )
    if kind == "auth":
        return v2.AuthResponse(f["auth_plugin_name"], h(f["payload"]))
    raise AssertionError(kind)


def _plain(msg: object) -> dict[str, Any]:
    """A message's fields with buffers as bytes, for comparison."""
    out: dict[str, Any] = {}
    names = getattr(msg, "_fields", None) or msg.__dataclass_fields__  # type: ignore[attr-defined]
    for name in names:
        value = getattr(msg, name)
        if isinstance(value, memoryview | bytearray):
            value = bytes(value)
        elif isinstance(value, list):
            value = [bytes(x) for x in value]
        out[name] = value
    return out


def test_v2_requests(vectors: dict[str, Any]) -> None:
    kinds = set()
    for r in vectors["v2"]["requests"]:
        kinds.add(r["kind"])
        frame = h(r["frame"])
        msg = _v2_request(r["kind"], r["fields"])
        assert v2.encode_request(msg) == frame, r["name"]
        got = v2.decode_request(body_of(frame))
        assert type(got) is type(msg)
        assert _plain(got) == _plain(msg), r["name"]
        assert got.version == r["version"] == 2
    expected = {"add", "read", "auth"} | ({"batch_read"} if vectors["v2"]["batch_read_supported"] else set())
    assert kinds == expected


def test_v2_fast_path_encoders(vectors: dict[str, Any]) -> None:
    for r in vectors["v2"]["requests"]:
        f, frame = r["fields"], h(r["frame"])
        if r["kind"] == "read":
            assert v2.encode_read_request(f["ledger_id"], f["entry_id"], f["flags"], h(f["master_key"])) == frame
        elif r["kind"] == "batch_read":
            got = v2.encode_batch_read_request(
                f["ledger_id"], f["start_entry_id"], f["request_id"], f["max_count"], f["max_size"], f["flags"],
                h(f["master_key"]),
            )
            assert got == frame
        elif r["kind"] == "auth":
            assert v2.encode_auth_request(f["auth_plugin_name"], h(f["payload"])) == frame
    for r in vectors["v2"]["responses"]:
        f, frame = r["fields"], h(r["frame"])
        if r["kind"] == "add":
            assert v2.encode_add_response(f["rc"], f["ledger_id"], f["entry_id"]) == frame
        elif r["kind"] == "read":
            assert v2.encode_read_response(f["rc"], f["ledger_id"], f["entry_id"], h(f["entry"])) == frame
        elif r["kind"] == "batch_read":
            entries = [h(x) for x in f["entries"]]
            got = v2.encode_batch_read_response(f["rc"], f["ledger_id"], f["start_entry_id"], f["request_id"], entries)
            assert got == frame
        elif r["kind"] == "auth":
            assert v2.encode_auth_response(f["auth_plugin_name"], h(f["payload"])) == frame


def test_v2_responses(vectors: dict[str, Any]) -> None:
    for r in vectors["v2"]["responses"]:
        frame = h(r["frame"])
        msg = _v2_response(r["kind"], r["fields"])
        assert v2.encode_response(msg) == frame, r["name"]
        got = v2.decode_response(body_of(frame))
        assert type(got) is type(msg)
        assert _plain(got) == _plain(msg), r["name"]


def test_v2_batch_read_exists_from_4_17(vectors: dict[str, Any]) -> None:
    major_minor = tuple(int(x) for x in vectors["bookkeeper_version"].split(".")[:2])
    assert vectors["v2"]["batch_read_supported"] is (major_minor >= (4, 17))
    if not vectors["v2"]["batch_read_supported"]:
        assert "4.17.0" in vectors["v2"]["batch_read_unsupported_reason"]


# -- v3 frames ---------------------------------------------------------------------------------------------------


def _is_repeated(fd: FieldDescriptor) -> bool:
    is_repeated = getattr(fd, "is_repeated", None)  # protobuf >= 6 dropped `label` from upb descriptors
    if is_repeated is not None:
        return bool(is_repeated)
    return fd.label == FieldDescriptor.LABEL_REPEATED


def _fill(msg: Message, desc: dict[str, Any]) -> None:
    """Set ``msg``'s fields from VectorGen's description (.proto names, enums by name, bytes as hex)."""
    msg.SetInParent()
    for name, value in desc.items():
        fd = msg.DESCRIPTOR.fields_by_name[name]
        if _is_repeated(fd):
            container = getattr(msg, name)
            for item in value:
                if fd.message_type is not None:
                    _fill(container.add(), item)
                else:
                    container.append(item)
        elif fd.message_type is not None:
            _fill(getattr(msg, name), value)
        elif fd.enum_type is not None:
            setattr(msg, name, fd.enum_type.values_by_name[value].number)
        elif fd.type == FieldDescriptor.TYPE_BYTES:
            setattr(msg, name, bytes.fromhex(value["hex"]))
        else:
            setattr(msg, name, value)


def _message(cls: type[Message], desc: dict[str, Any]) -> Message:
    msg = cls()
    _fill(msg, desc)
    return msg


def test_v3_requests(vectors: dict[str, Any]) -> None:
    protobuf_java = vectors["protobuf_runtime"] == "protobuf-java"
    reference = {r["name"]: r["frame"] for r in _load(VECTOR_DIR / f"java-{REFERENCE_VERSION}.json")["v3"]["requests"]}
    for r in vectors["v3"]["requests"]:
        frame = h(r["frame"])
        msg = _message(pb.Request, r["message"])
        assert v3.decode_request(body_of(frame)) == msg, r["name"]
        if protobuf_java or r["frame"] == reference.get(r["name"]):
            assert v3.encode_request(msg) == frame, r["name"]
        else:
            # LightProto (4.18) wrote `flag` first; protobuf-java wrote the same message in field-number order.
            assert "flag" in json.dumps(r["message"]), r["name"]
            assert v3.encode_request(msg) == h(reference[r["name"]])
            assert len(frame) == len(h(reference[r["name"]]))


def test_v3_responses(vectors: dict[str, Any]) -> None:
    for r in vectors["v3"]["responses"]:
        frame = h(r["frame"])
        msg = _message(pb.Response, r["message"])
        assert v3.decode_response(body_of(frame)) == msg, r["name"]
        assert v3.encode_response(msg) == frame, r["name"]
        status = msg.status
        assert v3.response_status(msg) == status or status == pb.EOK


def _request_builders(mk: bytes) -> dict[str, Callable[[dict[str, Any]], pb.Request]]:
    """Our builders, called as PerChannelBookieClient would be for each named vector."""

    def sub(d: dict[str, Any], field: str) -> dict[str, Any]:
        return d[field]

    return {
        "add": lambda d: v3.add_request(
            d["header"]["txnId"], sub(d, "addRequest")["ledgerId"], sub(d, "addRequest")["entryId"], mk,
            h(sub(d, "addRequest")["body"]["hex"]),
        ),
        "add-recovery-high-priority": lambda d: v3.add_request(
            d["header"]["txnId"], 1, 0, mk, h(sub(d, "addRequest")["body"]["hex"]),
            v2.FLAG_RECOVERY_ADD | v2.FLAG_HIGH_PRIORITY,
        ),
        "add-deferred-sync": lambda d: v3.add_request(
            d["header"]["txnId"], 1, 0, mk, h(sub(d, "addRequest")["body"]["hex"]), write_flags=1
        ),
        "read": lambda d: v3.read_request(d["header"]["txnId"], 1, 0),
        "read-fencing-recovery": lambda d: v3.read_request(
            d["header"]["txnId"], 1, -1, v2.FLAG_DO_FENCING | v2.FLAG_HIGH_PRIORITY, master_key=mk
        ),
        "read-long-poll": lambda d: v3.read_request(d["header"]["txnId"], 1, 5, previous_lac=4, timeout_ms=1000),
        "read-long-poll-piggyback": lambda d: v3.read_request(
            d["header"]["txnId"], 1, -1, v2.FLAG_HIGH_PRIORITY, previous_lac=4, timeout_ms=1000, piggyback=True
        ),
        "read-lac": lambda d: v3.read_lac_request(d["header"]["txnId"], 1),
        "write-lac": lambda d: v3.write_lac_request(
            d["header"]["txnId"], 1, 7, mk, h(sub(d, "writeLacRequest")["body"]["hex"])
        ),
        "force-ledger": lambda d: v3.force_ledger_request(d["header"]["txnId"], 1),
        "get-bookie-info": lambda d: v3.get_bookie_info_request(d["header"]["txnId"], 3),
        "get-list-of-entries": lambda d: v3.get_list_of_entries_request(d["header"]["txnId"], 123456789),
        "start-tls": lambda d: v3.start_tls_request(d["header"]["txnId"]),
        "auth": lambda d: v3.auth_request(d["header"]["txnId"], "AuthDisabledPlugin", b""),
        "big-txn-id": lambda d: v3.read_request(d["header"]["txnId"], 2**63 - 1, 0),
    }


def test_v3_request_builders_match_the_java_client(vectors: dict[str, Any]) -> None:
    mk = digest.master_key(b"secret")
    builders = _request_builders(mk)
    covered = set()
    for r in vectors["v3"]["requests"]:
        build = builders.get(r["name"])
        if build is None:
            assert r["name"] == "read-with-request-context"  # requestContext is Java-only logging context
            continue
        covered.add(r["name"])
        assert build(r["message"]) == _message(pb.Request, r["message"]), r["name"]
    assert covered == set(builders)


def test_v3_response_builders_match_the_java_bookie(vectors: dict[str, Any]) -> None:
    requests = {r["name"]: _message(pb.Request, r["message"]) for r in vectors["v3"]["requests"]}
    entry = requests["add"].addRequest.body
    lac_blob = requests["write-lac"].writeLacRequest.body
    responses = {r["name"]: _message(pb.Response, r["message"]) for r in vectors["v3"]["responses"]}
    avail = responses["get-list-of-entries-ok"].getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger
    built = {
        "add-ok": v3.add_response(requests["add"]),
        "add-fenced": v3.add_response(requests["add-recovery-high-priority"], pb.EFENCED),
        "read-ok": v3.read_response(requests["read"], body=entry, max_lac=-1),
        "read-fence-ok": v3.read_response(requests["read-fencing-recovery"], body=entry),
        "read-no-entry": v3.read_response(requests["read"], pb.ENOENTRY),
        "read-unknown-ledger-state": v3.read_response(requests["read"], pb.EUNKNOWNLEDGERSTATE),
        "read-long-poll-piggyback": v3.read_response(
            requests["read-long-poll-piggyback"], body=entry, entry_id=0, max_lac=5,
            lac_update_timestamp=1700000000123,
        ),
        "read-lac-ok": v3.read_lac_response(requests["read-lac"], lac_body=lac_blob, last_entry_body=entry),
        "write-lac-ok": v3.write_lac_response(requests["write-lac"]),
        "force-ledger-ok": v3.force_ledger_response(requests["force-ledger"]),
        "get-bookie-info-ok": v3.get_bookie_info_response(
            requests["get-bookie-info"], total_disk_capacity=4398046511104, free_disk_space=1099511627776
        ),
        "get-list-of-entries-ok": v3.get_list_of_entries_response(requests["get-list-of-entries"], availability=avail),
        "start-tls-ok": v3.start_tls_response(requests["start-tls"]),
        "start-tls-unsupported": v3.start_tls_response(requests["start-tls"], pb.EBADREQ),
        "auth-disabled": v3.auth_response(requests["auth"], "AuthDisabledPlugin", b""),
    }
    # The add-fenced vector echoes header txnId 2 without priority: PacketProcessorBaseV3.getHeader drops it.
    for name, msg in built.items():
        assert msg == responses[name], name
        assert v3.encode_response(msg) == v3.encode_response(responses[name])
    if "batch-read-over-v3-rejected" in responses:
        rejected = responses["batch-read-over-v3-rejected"]
        req = pb.Request()
        req.header.CopyFrom(rejected.header)
        assert v3.error_response(req, pb.EBADREQ) == rejected
        assert v3.response_status(rejected) == pb.EBADREQ


def test_availability_of_entries(vectors: dict[str, Any]) -> None:
    for a in vectors["availability_of_entries"]:
        data = h(a["bytes"])
        ours = v3.AvailabilityOfEntriesOfLedger.from_entry_ids(a["entries"])
        assert ours.to_bytes() == data, a["entries"]
        parsed = v3.AvailabilityOfEntriesOfLedger.parse(data)
        assert list(parsed) == a["entries"]
        assert len(parsed) == a["total"]


# -- metadata formats --------------------------------------------------------------------------------------------


def _metadata_fields(md: ledger_metadata.LedgerMetadata) -> dict[str, Any]:
    return {
        "ensemble_size": md.ensemble_size,
        "write_quorum_size": md.write_quorum_size,
        "ack_quorum_size": md.ack_quorum_size,
        "state": md.state.name,
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "has_password": md.password is not None,
        "password": None if md.password is None else md.password.hex(),
        "digest_type": None if md.password is None else md.digest_type.name,
        "ensembles": {str(k): list(v) for k, v in md.ensembles.items()},
        "ctime": md.ctime,
        "custom_metadata": {k: bytes(v).hex() for k, v in md.custom_metadata.items()},
        "ctoken": md.ctoken,
        "format_version": md.format_version,
    }


def test_ledger_metadata_parse(vectors: dict[str, Any]) -> None:
    for m in vectors["ledger_metadata"]:
        md = ledger_metadata.parse(h(m["bytes"]))
        assert _metadata_fields(md) == m["parsed"], m["name"]
        assert md.store_ctime is m["stores_ctime"], m["name"]


def test_ledger_metadata_serialize(vectors: dict[str, Any]) -> None:
    versions = set()
    for m in vectors["ledger_metadata"]:
        w = m["written"]
        versions.add(m["format_version"])
        md = ledger_metadata.LedgerMetadata(
            ensemble_size=w["ensemble_size"],
            write_quorum_size=w["write_quorum_size"],
            ack_quorum_size=w["ack_quorum_size"],
            state=ledger_metadata.LedgerState[w["state"]],
            last_entry_id=w["last_entry_id"],
            length=w["length"],
            digest_type=digest.DigestType.parse(w["digest_type"]),
            password=h(w["password"]),
            ensembles={int(k): tuple(v) for k, v in w["ensembles"].items()},
            ctime=w["ctime"],
            custom_metadata={k: h(v) for k, v in w["custom_metadata"].items()},
            ctoken=w["ctoken"],
            format_version=m["format_version"],
            store_ctime=m["stores_ctime"],
        )
        assert ledger_metadata.serialize(md) == h(m["bytes"]), m["name"]
    assert versions == {1, 2, 3}


def test_service_info(vectors: dict[str, Any]) -> None:
    for s in vectors["service_info"]:
        info = service_info.BookieServiceInfo(
            endpoints=tuple(
                service_info.Endpoint(
                    e["id"], e["host"], e["port"], e["protocol"], tuple(e["auth"]), tuple(e["extensions"])
                )
                for e in s["info"]["endpoints"]
            ),
            properties=dict(s["info"]["properties"]),
        )
        assert service_info.serialize(info) == h(s["bytes"]), s["name"]
        parsed = service_info.parse(h(s["bytes"]), "unused-for-non-empty-data")
        assert parsed.endpoints == info.endpoints
        assert dict(parsed.properties) == s["info"]["properties"]


def test_legacy_service_info(vectors: dict[str, Any]) -> None:
    for s in vectors["legacy_service_info"]:
        ours = service_info.parse(b"", s["bookie_id"])
        assert [
            {
                "id": e.id,
                "host": e.host,
                "port": e.port,
                "protocol": e.protocol,
                "auth": list(e.auth),
                "extensions": list(e.extensions),
            }
            for e in ours.endpoints
        ] == s["info"]["endpoints"], s["bookie_id"]
        assert dict(ours.properties) == s["info"]["properties"]


def _cookie_fields(c: cookie.Cookie) -> dict[str, Any]:
    return {
        "layout_version": c.layout_version,
        "bookie_host": c.bookie_host,
        "journal_dir": c.journal_dirs,
        "ledger_dirs": c.ledger_dirs,
        "instance_id": c.instance_id,
        "index_dirs": c.index_dirs,
    }


def _check_cookie_parse(data: bytes, java: dict[str, Any]) -> None:
    """Our Cookie.parse reads what Java's Cookie.parseFromBytes reads, and refuses what it refuses.

    Java parses a layout < 3 cookie into an empty cookie that its verify() then rejects as "too old";
    ours refuses it at once (BadMetadataError).
    """
    if "error" in java or java["layout_version"] < 3:
        with pytest.raises(BadMetadataError):
            cookie.Cookie.parse(data)
    else:
        assert _cookie_fields(cookie.Cookie.parse(data)) == java


def test_cookies(vectors: dict[str, Any]) -> None:
    for c in vectors["cookies"]:
        data = h(c["bytes"])
        assert data.decode("utf-8") == c["text"]
        ours = cookie.Cookie(
            bookie_host=c["bookie_host"],
            journal_dirs=c["journal_dir"],
            ledger_dirs=c["ledger_dirs"],
            instance_id=c["instance_id"],
            index_dirs=c["index_dirs"],
            layout_version=c["layout_version"],
        )
        assert ours.serialize() == data, c["name"]
        _check_cookie_parse(data, c["java_parsed"])


def test_cookie_texts_read_as_java_reads_them(vectors: dict[str, Any]) -> None:
    for c in vectors["cookie_texts"]:
        _check_cookie_parse(c["text"].encode("utf-8"), c["java_parsed"])


def test_layouts(vectors: dict[str, Any]) -> None:
    for lay in vectors["layouts"]:
        ours = layout.LedgerLayout(lay["factory"], lay["manager_version"], lay["layout_format_version"])
        assert ours.serialize() == h(lay["bytes"])
        assert layout.LedgerLayout.parse(h(lay["bytes"])) == ours
    schemes = {
        layout.LedgerLayout.parse(h(lay["bytes"])).scheme
        for lay in vectors["layouts"]
        if lay["factory"].startswith("org.apache.bookkeeper.")
    }
    assert schemes == {"hierarchical", "longhierarchical", "legacyhierarchical", "flat"}
    for scheme in ("hierarchical", "longhierarchical", "legacyhierarchical", "flat"):
        java = next(lay for lay in vectors["layouts"] if lay["factory"] == layout.FACTORY_CLASSES[scheme])
        assert layout.LedgerLayout.for_scheme(scheme).serialize() == h(java["bytes"])


def test_bookie_ids(vectors: dict[str, Any]) -> None:
    for b in vectors["bookie_ids"]:
        if b["valid"]:
            assert str(bookie_id.BookieId.parse(b["text"])) == b["id"]
        else:
            with pytest.raises(InvalidBookieIdError):
                bookie_id.BookieId.parse(b["text"])


def test_ledger_paths(vectors: dict[str, Any]) -> None:
    for root in ("", "/ledgers", "/a/b"):
        for p in vectors["ledger_paths"]:
            lid = p["ledger_id"]
            for scheme, key in (
                ("hierarchical", "hierarchical"),
                ("longhierarchical", "longhierarchical"),
                ("legacyhierarchical", "legacyhierarchical"),
            ):
                if key not in p:
                    continue
                path = zk_paths.ledger_path(root, lid, scheme)
                assert path == root + p[key], (scheme, lid)
                assert zk_paths.ledger_id_from_path(root, path, scheme) == lid
            assert zk_paths.ledger_path(root, lid, "flat") == f"{root}/{p['flat']}"
            assert p["hierarchical_parsed_back"] == lid == p["longhierarchical_parsed_back"]


def test_vector_names_are_unique(vectors: dict[str, Any]) -> None:
    """Failures name one vector: names are unique within each section."""
    sections = [vectors["entries"], vectors["ledger_metadata"], vectors["cookies"], vectors["service_info"]]
    sections += [vectors[p][d] for p in ("v2", "v3") for d in ("requests", "responses")]
    for section in sections:
        names = [v["name"] for v in section]
        assert len(set(names)) == len(names)
