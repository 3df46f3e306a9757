"""BP-44 context next to Apache BookKeeper's Java client and shell (4.17.3 bookies).

The context lives in customMetadata, which Java's metadata updates copy as they find it; these tests check
that Java still reads, recovers and closes ledgers that carry it, and that the context survives when Java
(not bkspark) writes the ledger's final metadata.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from bkspark import cli
from bkspark.client import BookKeeper
from bkspark.context import (
    CLOSE_KEY,
    CREATE_KEY,
    SEAL_TIME_KEY,
    CloseReason,
    LedgerCloseContext,
    LedgerCreateContext,
    close_with_context,
    create_ledger_with_context,
    read_context,
    record_close_context,
)
from bkspark.metadata.store import ZkMetadataStore
from tests.harness.java_bookkeeper import JavaTools

pytestmark = [pytest.mark.integration, pytest.mark.compat]

VERSION = "4.17.3"

CREATE = (
    LedgerCreateContext.builder()
    .created_by("Company X", "System y", "service.z", "host1.z.companyx.com")
    .created_on_behalf_of("Tenant ü", "sys", "svc", "inst")
    .part_of_data_set("persistent://public/default/test_topic")
    .expected_max_open_duration(timedelta(hours=4))
    .expected_max_entries(50000)
    .expected_max_length(262144000)
    .expected_average_entry_size(120, 3.5)
    .follows_ledger(3)
    .build()
)
OWNER = {
    "createdBy": {"enterprise": "Company X", "system": "System y", "service": "service.z", "instance": "host1.z.companyx.com"},
    "onBehalfOf": {"enterprise": "Tenant ü", "system": "sys", "service": "svc", "instance": "inst"},
    "dataSet": "persistent://public/default/test_topic",
}


JAVA_CLIENT = "bkspark.tools.JavaClient"  # tools/java: Apache BookKeeper's own client, one JSON event per line


def java_payload(i: int) -> bytes:
    """JavaClient's entry i with the default size: exactly "entry-i"."""
    return f"entry-{i}".encode()


def run_client(java_tools: JavaTools, version: str, uri: str, *args: str) -> list[dict[str, Any]]:
    """Run JavaClient; its JSON event lines (stdout may also carry WARN log lines)."""
    proc: subprocess.CompletedProcess[str] = java_tools.run(version, JAVA_CLIENT, *args, metadata_service_uri=uri, timeout=240)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    out = []
    for line in proc.stdout.splitlines():
        if line.strip().startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and "event" in obj:
                out.append(obj)
    return out


def one(evs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [e for e in evs if e["event"] == kind]
    assert len(found) == 1, (kind, evs)
    return found[0]


def shell_json(capsys: pytest.CaptureFixture[str], uri: str, *argv: str) -> Any:
    code = cli.main(["shell", "--metadata-service-uri", uri, "--json", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def java_metadata(java_tools, uri: str, ledger_id: int) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return one(run_client(java_tools, VERSION, uri, "metadata", "--ledger", str(ledger_id)), "metadata")


@pytest.mark.parametrize("metadata_format", [3, 2], ids=["v3-binary", "v2-text"])
def test_java_reads_a_ledger_closed_with_context(java_cluster_factory, java_tools, capsys, metadata_format) -> None:
    cluster = java_cluster_factory(VERSION, bookies=3)
    uri = cluster.metadata_service_uri
    close = (
        LedgerCloseContext.builder()
        .because_no_more_data()
        .expect_reads_until(datetime.now(timezone.utc) + timedelta(hours=1))
        .expect_delete_after(datetime.now(timezone.utc) + timedelta(days=1))
        .build()
    )
    with BookKeeper(uri, ledgerMetadataVersion=metadata_format) as bk:
        lh = create_ledger_with_context(bk, CREATE, custom_metadata={"app": b"demo"}, ensemble_size=3,
                                        write_quorum_size=2, ack_quorum_size=2)
        for i in range(5):
            lh.append(java_payload(i))
        before = int(datetime.now(timezone.utc).timestamp() * 1000)
        md = close_with_context(bk, lh, close)
        lid = lh.ledger_id
    assert md.format_version == metadata_format
    ctx = read_context(md)
    assert ctx.create == CREATE and ctx.close == close and md.custom_metadata["app"] == b"demo"
    assert ctx.seal_time_ms is not None and ctx.seal_time_ms >= before

    jmd = java_metadata(java_tools, uri, lid)
    assert (jmd["state"], jmd["last_entry_id"]) == ("CLOSED", 4)
    read = run_client(java_tools, VERSION, uri, "read", "--ledger", str(lid), "--first", "0", "--last", "4")
    assert [bytes.fromhex(e["hex"]) for e in read if e["event"] == "entry"] == [java_payload(i) for i in range(5)]
    shell = java_tools.shell(VERSION, uri, "ledgermetadata", "-l", str(lid))
    assert shell.returncode == 0 and CREATE_KEY in shell.stdout + shell.stderr

    assert shell_json(capsys, uri, "showowner", str(lid)) == OWNER
    span = shell_json(capsys, uri, "predictlifespan", str(lid))
    assert span["actualSealTime"] == ctx.seal_time_ms // 1000
    assert span["expectedDeleteTime"] == int(close.expect_delete_after.timestamp())
    assert span["expectedSealTime"] == span["createTime"] + 4 * 3600


def test_context_survives_java_recovery_of_an_abandoned_ledger(java_cluster_factory, java_tools, capsys) -> None:
    cluster = java_cluster_factory(VERSION, bookies=3)
    uri = cluster.metadata_service_uri
    with BookKeeper(uri) as bk:
        lh = create_ledger_with_context(bk, CREATE, custom_metadata={"app": b"demo"})
        for i in range(7):
            lh.append(java_payload(i))
        lid = lh.ledger_id
        # The writer "dies": the client goes away without closing the ledger.
    assert java_metadata(java_tools, uri, lid)["state"] == "OPEN"

    rec = one(run_client(java_tools, VERSION, uri, "recover", "--ledger", str(lid), "--digest", "CRC32C",
                         "--password", ""), "recovered")
    assert (rec["last_entry_id"], rec["closed"]) == (6, True)

    with ZkMetadataStore(uri) as store:
        md = store.read_ledger_metadata(lid).metadata
        assert md.is_closed and md.last_entry_id == 6
        assert read_context(md).create == CREATE and md.custom_metadata["app"] == b"demo"
        assert CLOSE_KEY not in md.custom_metadata and SEAL_TIME_KEY not in md.custom_metadata
        # An operator records why it was closed after the fact; Java still reads the ledger afterwards.
        record_close_context(store, lid, LedgerCloseContext.builder().because_client_shutdown().closing_abnormally(
            "writer lost").build())
    assert shell_json(capsys, uri, "showowner", str(lid)) == OWNER
    meta = shell_json(capsys, uri, "ledgermetadata", "-l", str(lid))
    assert meta["context"]["close"]["reason"] == CloseReason.CLIENT_SHUTDOWN.value
    assert meta["context"]["close"]["errorMessage"] == "writer lost"
    read = run_client(java_tools, VERSION, uri, "read", "--ledger", str(lid), "--first", "0", "--last", "6")
    assert [bytes.fromhex(e["hex"]) for e in read if e["event"] == "entry"] == [java_payload(i) for i in range(7)]


def test_java_shell_force_recovery_keeps_the_context(java_cluster_factory, java_tools, capsys) -> None:
    cluster = java_cluster_factory(VERSION, bookies=3)
    uri = cluster.metadata_service_uri
    with BookKeeper(uri) as bk:
        lh = create_ledger_with_context(bk, CREATE)
        for i in range(3):
            lh.append(java_payload(i))
        lid = lh.ledger_id
    out = java_tools.shell(VERSION, uri, "readledger", "-l", str(lid), "-fe", "0", "-le", "2", "-r")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    meta = shell_json(capsys, uri, "ledgermetadata", str(lid))
    assert meta["state"] == "CLOSED" and meta["lastEntryId"] == 2
    assert meta["context"]["create"] == CREATE.to_json()
    assert shell_json(capsys, uri, "showowner", str(lid)) == OWNER


def test_ledger_created_and_closed_by_java_with_a_context(java_cluster_factory, java_tools, capsys) -> None:
    cluster = java_cluster_factory(VERSION, bookies=3)
    uri = cluster.metadata_service_uri
    create_json = CREATE.to_bytes().decode("utf-8")
    evs = run_client(
        java_tools, VERSION, uri, "create-and-write", "--ensemble", "3", "--write", "2", "--ack", "2",
        "--digest", "CRC32C", "--password", "", "--entries", "4", "--close", "true",
        "--custom", f"{CREATE_KEY}={create_json}", "--custom", "app=java",
    )
    lid = one(evs, "created")["ledger_id"]
    assert shell_json(capsys, uri, "showowner", str(lid)) == OWNER
    span = shell_json(capsys, uri, "predictlifespan", str(lid))
    assert span["actualSealTime"] is None and span["expectedDeleteTime"] is None
    assert span["expectedSealTime"] == span["createTime"] + 4 * 3600
