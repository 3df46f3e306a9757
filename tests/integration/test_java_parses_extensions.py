"""Apache BookKeeper's own classes read what bkspark writes with its extensions (docs/extensions.md §4).

tools/java ``ExtensionParse`` feeds our frames to the bookie's ``RequestEnDecoderV3`` and the client's
``ResponseEnDecoderV3`` (protobuf-java in 4.16 and 4.17, LightProto in 4.18), our ledger metadata to
``LedgerMetadataSerDe`` and our BookieServiceInfo to ``ZKRegistrationClient``, for every harness version.
What it shows, and what docs/extensions.md relies on:

* a scoped v3 request or response parses; Java sees ``(scope 0, ledgerId)`` and skips field 1035 (protobuf-java
  keeps it as an unknown field and writes it back byte for byte; LightProto drops it) -- which is why a client
  never sends a scope to a bookie that does not advertise ``scope-ids``;
* a v3 ``BATCH_READ_ENTRY`` parses on 4.17+ with field 1062 skipped (no known sub-message: the bookie answers
  EBADREQ) and fails to parse on 4.16 (op 12 unknown: "missing required fields"), the two cases of the
  client's fallback;
* our metadata and service info read back with the same values.
"""

from __future__ import annotations

import json

import pytest

from bkspark.protocol import ledger_metadata as lm
from bkspark.protocol import service_info as si
from bkspark.protocol import v3
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from bkspark.protocol.service_info import EXTENSIONS_PROPERTY
from bookie_server.registration import EXTENSIONS
from tests.harness.java_bookkeeper import BK_VERSIONS, JavaTools

pytestmark = [pytest.mark.integration, pytest.mark.compat]

MAIN = "bkspark.tools.ExtensionParse"
SCOPES = (-7, 2**62 + 5)
KEY = b"k" * 20
LEDGER = 1234567


def _scoped_requests(scope: int) -> dict[str, tuple[pb.Request, str, str]]:
    """name -> (request, Java's operation name, the sub-message Java finds)."""
    return {
        f"add@{scope}": (v3.add_request(1, LEDGER, 0, KEY, b"entry", scope_id=scope), "ADD_ENTRY", "addRequest"),
        f"read@{scope}": (v3.read_request(2, LEDGER, 3, scope_id=scope), "READ_ENTRY", "readRequest"),
        f"read-lac@{scope}": (v3.read_lac_request(3, LEDGER, scope_id=scope), "READ_LAC", "readLacRequest"),
        f"write-lac@{scope}": (
            v3.write_lac_request(4, LEDGER, 7, KEY, b"blob", scope_id=scope), "WRITE_LAC", "writeLacRequest",
        ),
        f"force@{scope}": (v3.force_ledger_request(5, LEDGER, scope_id=scope), "FORCE_LEDGER", "forceLedgerRequest"),
        f"list-entries@{scope}": (
            v3.get_list_of_entries_request(6, LEDGER, scope_id=scope),
            "GET_LIST_OF_ENTRIES_OF_LEDGER",
            "getListOfEntriesOfLedgerRequest",
        ),
    }


def _scoped_responses(scope: int) -> dict[str, tuple[pb.Response, str, str]]:
    req = _scoped_requests(scope)
    return {
        f"add-response@{scope}": (v3.add_response(req[f"add@{scope}"][0]), "ADD_ENTRY", "addResponse"),
        f"read-response@{scope}": (
            v3.read_response(req[f"read@{scope}"][0], body=b"body", max_lac=2), "READ_ENTRY", "readResponse",
        ),
        f"force-response@{scope}": (
            v3.force_ledger_response(req[f"force@{scope}"][0]), "FORCE_LEDGER", "forceLedgerResponse",
        ),
    }


def _without_extensions(message: pb.Request | pb.Response) -> bytes:
    """The body a parser that drops unknown fields writes back: no ledgerScopeId, no batch read (1035, 1062)."""
    copy = type(message)()
    copy.CopyFrom(message)
    for name in ("batchReadRequest", "batchReadResponse"):
        if name in copy.DESCRIPTOR.fields_by_name:
            copy.ClearField(name)
    for _field, sub in copy.ListFields():
        if hasattr(sub, "DESCRIPTOR") and "ledgerScopeId" in sub.DESCRIPTOR.fields_by_name:  # a sub-message
            sub.ClearField("ledgerScopeId")
    return copy.SerializeToString()


def _assert_lightproto_dropped_extensions(reencoded_hex: str, message: pb.Request | pb.Response) -> None:
    """LightProto (4.18) writes back the known fields only; when the skipped field sat in a nested message, the
    length it writes is still the parsed one (cached), which counts the skipped bytes, and the tail is whatever
    the buffer held.  Harmless -- neither a Java bookie nor a Java client re-serializes a message it parsed --
    and recorded in docs/extensions.md §4."""
    reencoded = bytes.fromhex(reencoded_hex)
    known = _without_extensions(message)
    assert reencoded[: len(known)] == known
    assert len(reencoded) in (len(known), len(_body(message)))


def _body(message: pb.Request | pb.Response) -> bytes:
    return message.SerializeToString()


def _metadata() -> lm.LedgerMetadata:
    return lm.LedgerMetadata(
        ensemble_size=3, write_quorum_size=2, ack_quorum_size=2, state=lm.LedgerState.CLOSED, last_entry_id=41,
        length=4200, password=b"pw", ensembles={0: ("127.0.0.1:3181", "127.0.0.1:3182", "bookie-3"),
                                               20: ("127.0.0.1:3181", "bookie-4", "bookie-3")},
        ctime=1700000000123, store_ctime=True,
        custom_metadata={"bkspark.dataset": b"events", "bkspark.job": b"job-1", "binary": bytes(range(8))},
    )


@pytest.mark.parametrize("version", BK_VERSIONS)
def test_java_classes_parse_our_extended_frames_metadata_and_service_info(version: str, java_tools: JavaTools) -> None:
    lines: list[str] = []
    requests: dict[str, tuple[pb.Request, str, str]] = {}
    responses: dict[str, tuple[pb.Response, str, str]] = {}
    for scope in SCOPES:
        requests.update(_scoped_requests(scope))
        responses.update(_scoped_responses(scope))
    batch = v3.batch_read_request(7, LEDGER, 0, 10, 65536, scope_id=SCOPES[0])
    batch_response = v3.batch_read_response(batch, entries=[b"a", b"b"], max_lac=1)
    for name, (request, _, _) in requests.items():
        lines.append(f"request {name} {_body(request).hex()}")
    for name, (response, _, _) in responses.items():
        lines.append(f"response {name} {_body(response).hex()}")
    lines.append(f"request batch-read {_body(batch).hex()}")
    lines.append(f"response batch-read-response {_body(batch_response).hex()}")
    md = _metadata()
    lines.append(f"metadata scoped-ledger-metadata {LEDGER} {lm.serialize(md).hex()}")
    info = si.BookieServiceInfo(
        (si.Endpoint("bookie", "127.0.0.1", 3181, si.BOOKIE_RPC), si.Endpoint("httpserver", "127.0.0.1", 8000, si.HTTP)),
        {EXTENSIONS_PROPERTY: EXTENSIONS},
    )
    lines.append(f"serviceinfo our-bookie 127.0.0.1:3181 {si.serialize(info).hex()}")

    proc = java_tools.run(version, MAIN, input="\n".join(lines) + "\n", timeout=300)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    doc = json.loads(proc.stdout)
    assert doc["bookkeeper_version"] == version
    keeps_unknown = doc["protobuf_runtime"] == "protobuf-java"
    assert keeps_unknown == (version != "4.18.2")
    results = {r["name"]: r for r in doc["results"]}

    for name, (message, operation, part) in {**requests, **responses}.items():
        result = results[name]
        assert result["ok"], (name, result.get("error"))
        parsed = result["parsed"]
        assert parsed["operation"] == operation, name
        assert [p["part"] for p in parsed["parts"]] == [part], name
        # Java acts on (scope 0, LEDGER): the scope is invisible to it.
        assert parsed["parts"][0]["ledger_id"] == LEDGER, name
        if keeps_unknown:
            assert parsed["parts"][0]["unknown_fields"] == [1035], name
            assert parsed["reencoded"] == _body(message).hex(), name
        else:
            assert parsed["parts"][0]["unknown_fields"] is None, name
            _assert_lightproto_dropped_extensions(parsed["reencoded"], message)

    for name, message in (("batch-read", batch), ("batch-read-response", batch_response)):
        result = results[name]
        if version == "4.16.6":
            # BATCH_READ_ENTRY (12) is not in 4.16's OperationType: the required operation counts as missing.
            assert not result["ok"] and "missing required fields" in result["error"].lower(), result
            continue
        assert result["ok"], (name, result.get("error"))
        parsed = result["parsed"]
        assert parsed["operation"] == "BATCH_READ_ENTRY" and parsed["parts"] == [], name
        if keeps_unknown:
            assert parsed["unknown_fields"] == [1062], name
            assert parsed["reencoded"] == _body(message).hex(), name
        else:
            _assert_lightproto_dropped_extensions(parsed["reencoded"], message)

    meta = results["scoped-ledger-metadata"]
    assert meta["ok"], meta.get("error")
    java_md = meta["parsed"]
    assert (java_md["ensemble_size"], java_md["write_quorum_size"], java_md["ack_quorum_size"]) == (3, 2, 2)
    assert (java_md["state"], java_md["last_entry_id"], java_md["length"]) == ("CLOSED", 41, 4200)
    assert java_md["ctime"] == md.ctime and java_md["password"] == b"pw".hex()
    assert {int(k): v for k, v in java_md["ensembles"].items()} == {k: list(v) for k, v in md.ensembles.items()}
    assert java_md["custom_metadata"] == {k: v.hex() for k, v in md.custom_metadata.items()}

    service = results["our-bookie"]
    assert service["ok"], service.get("error")
    assert service["parsed"]["properties"] == {EXTENSIONS_PROPERTY: EXTENSIONS}
    assert [(e["id"], e["port"], e["protocol"]) for e in service["parsed"]["endpoints"]] == [
        ("bookie", 3181, si.BOOKIE_RPC), ("httpserver", 8000, si.HTTP),
    ]
