"""tools/java JavaClient: Apache BookKeeper's own Java client, driven from tests, against real Java bookies.

The other compat tests use JavaClient as "what the Java client does": here we check that the program itself
works (writes, reads, batch reads, recovery, metadata, deletion, write-forever) and that it reports the
absence of the batch read API on 4.16 clearly. Payloads are those of ``java_payload`` below (the program's
documented rule).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness.java_bookkeeper import JavaTools, bookkeeper_classpath
from tests.harness.java import java_executable
from tests.harness.process import kill_group

pytestmark = [pytest.mark.integration, pytest.mark.compat]

MAIN = "bkspark.tools.JavaClient"


def java_payload(i: int, size: int = -1) -> bytes:
    """JavaClient's entry i: "entry-i" repeated and cut to ``size`` bytes (-1: exactly "entry-i")."""
    unit = f"entry-{i}".encode()
    if size < 0:
        return unit
    return (unit * (size // len(unit) + 1))[:size]


def events(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The program's JSON event lines (stdout may also carry WARN log lines)."""
    out = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and "event" in obj:
                out.append(obj)
    return out


def run_client(java_tools: JavaTools, version: str, uri: str, *args: str, expect: int = 0) -> list[dict[str, Any]]:
    proc = java_tools.run(version, MAIN, *args, metadata_service_uri=uri, timeout=240)
    output = f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == expect, f"exit {proc.returncode}\n{output}"
    return events(proc)


def one(evs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [e for e in evs if e["event"] == kind]
    assert len(found) == 1, (kind, evs)
    return found[0]


def test_write_read_batch_read_metadata_delete_on_4_17(java_cluster_factory, java_tools, zk_root) -> None:
    cluster = java_cluster_factory("4.17.3", bookies=3)
    uri = cluster.metadata_service_uri
    evs = run_client(
        java_tools, "4.17.3", uri, "create-and-write", "--zk", uri, "--ensemble", "3", "--write", "3", "--ack", "2",
        "--digest", "CRC32C", "--password", "pw", "--entries", "20", "--size", "100", "--custom", "app=bkspark",
    )
    created = one(evs, "created")
    ledger_id = created["ledger_id"]
    assert created["bookkeeper_version"] == "4.17.3"
    assert sorted(created["ensemble"]) == sorted(cluster.bookie_ids)
    assert [e["entry_id"] for e in evs if e["event"] == "added"] == list(range(20))
    closed = one(evs, "closed")
    assert (closed["last_entry_id"], closed["length"]) == (19, 2000)

    # Plain reads (v3 wire protocol).
    evs = run_client(java_tools, "4.17.3", uri, "read", "--ledger", str(ledger_id), "--digest", "CRC32C",
                     "--password", "pw")
    opened = one(evs, "opened")
    assert (opened["last_add_confirmed"], opened["length"], opened["closed"]) == (19, 2000, True)
    entries = [e for e in evs if e["event"] == "entry"]
    assert [e["entry_id"] for e in entries] == list(range(20))
    assert all(bytes.fromhex(e["hex"]) == java_payload(e["entry_id"], 100) for e in entries)
    assert {e["read"] for e in entries} == {"single"}

    # Batch reads (v2, BATCH_READ_ENTRY): a 1 KiB limit makes the client ask several times.
    evs = run_client(java_tools, "4.17.3", uri, "read", "--ledger", str(ledger_id), "--digest", "CRC32C",
                     "--password", "pw", "--batch", "true", "--first", "2", "--last", "17", "--max-size", "1024")
    entries = [e for e in evs if e["event"] == "entry"]
    assert [e["entry_id"] for e in entries] == list(range(2, 18))
    assert all(bytes.fromhex(e["hex"]) == java_payload(e["entry_id"], 100) for e in entries)
    assert {e["read"] for e in entries} == {"batch"}
    batch = one(evs, "batch-read")
    assert batch["striped"] is False and batch["v2_wire_protocol"] is True
    assert batch["calls"] > 1  # 16 entries of 100 bytes do not fit one 1 KiB response

    # What the Java side sees in the metadata.
    md = one(run_client(java_tools, "4.17.3", uri, "metadata", "--ledger", str(ledger_id)), "metadata")
    assert (md["state"], md["last_entry_id"], md["length"]) == ("CLOSED", 19, 2000)
    assert (md["ensemble_size"], md["write_quorum_size"], md["ack_quorum_size"]) == (3, 3, 2)
    assert (md["digest_type"], bytes.fromhex(md["password"])) == ("CRC32C", b"pw")
    assert md["custom_metadata"] == {"app": b"bkspark".hex()}
    assert md["format_version"] == 3 and md["znode_version"] >= 1

    one(run_client(java_tools, "4.17.3", uri, "delete", "--ledger", str(ledger_id)), "deleted")
    evs = run_client(java_tools, "4.17.3", uri, "metadata", "--ledger", str(ledger_id), expect=1)
    assert "NoSuchLedger" in one(evs, "error")["error"]


def test_batch_read_is_unsupported_on_the_4_16_client(java_cluster_factory, java_tools, zk_root) -> None:
    cluster = java_cluster_factory("4.16.6", bookies=3)
    uri = cluster.metadata_service_uri
    evs = run_client(
        java_tools, "4.16.6", uri, "create-and-write", "--ensemble", "3", "--write", "3", "--ack", "3",
        "--digest", "CRC32", "--password", "", "--entries", "5",
    )
    ledger_id = one(evs, "created")["ledger_id"]
    evs = run_client(java_tools, "4.16.6", uri, "read", "--ledger", str(ledger_id), "--digest", "CRC32",
                     "--password", "", "--batch", "true", expect=3)
    unsupported = one(evs, "unsupported")
    assert unsupported["operation"] == "batch-read"
    assert unsupported["bookkeeper_version"] == "4.16.6"
    assert "4.17.0" in unsupported["message"]
    # The same 4.16 client reads the ledger entry by entry.
    evs = run_client(java_tools, "4.16.6", uri, "read", "--ledger", str(ledger_id), "--digest", "CRC32",
                     "--password", "")
    assert [bytes.fromhex(e["hex"]) for e in evs if e["event"] == "entry"] == [java_payload(i) for i in range(5)]


def test_recover_an_open_ledger_and_adv_ledger_id(java_cluster_factory, java_tools, zk_root) -> None:
    cluster = java_cluster_factory("4.17.3", bookies=3)
    uri = cluster.metadata_service_uri
    evs = run_client(
        java_tools, "4.17.3", uri, "create-and-write", "--ensemble", "3", "--write", "2", "--ack", "2",
        "--digest", "MAC", "--password", "secret", "--entries", "7", "--size", "10", "--close", "false",
        "--ledger-id", "4242",
    )
    assert one(evs, "created")["ledger_id"] == 4242
    one(evs, "left-open")
    assert one(run_client(java_tools, "4.17.3", uri, "metadata", "--ledger", "4242"), "metadata")["state"] == "OPEN"
    rec = one(run_client(java_tools, "4.17.3", uri, "recover", "--ledger", "4242", "--digest", "MAC",
                         "--password", "secret"), "recovered")
    assert (rec["last_entry_id"], rec["length"], rec["closed"]) == (6, 70, True)
    md = one(run_client(java_tools, "4.17.3", uri, "metadata", "--ledger", "4242"), "metadata")
    assert (md["state"], md["last_entry_id"], md["length"], md["digest_type"]) == ("CLOSED", 6, 70, "HMAC")


def test_write_forever_prints_each_acknowledged_entry(java_cluster_factory, java_tools, zk_root, tmp_path) -> None:
    """write-forever runs until killed; every entry it printed is readable after recovery."""
    cluster = java_cluster_factory("4.17.3", bookies=3)
    uri = cluster.metadata_service_uri
    ledger_file = tmp_path / "ledger-id"
    argv = [
        java_executable(), "-Xmx128m", "-cp", os.pathsep.join(bookkeeper_classpath("4.17.3")),
        f"-Dbkspark.metadataServiceUri={uri}", MAIN, "write-forever", "--ledger-file", str(ledger_file),
        "--ensemble", "3", "--write", "3", "--ack", "2", "--digest", "CRC32C", "--password", "p", "--size", "50",
    ]
    log = (tmp_path / "stderr.log").open("w")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    acked: list[int] = []
    try:
        deadline = time.monotonic() + 120
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if line.startswith('{"event":"added"'):
                acked.append(json.loads(line)["entry_id"])
                if len(acked) >= 30:
                    break
            assert time.monotonic() < deadline, "write-forever too slow"
    finally:
        kill_group(proc)
        log.close()
    assert acked == list(range(30))
    ledger_id = int(Path(ledger_file).read_text())
    evs = run_client(java_tools, "4.17.3", uri, "read", "--ledger", str(ledger_id), "--digest", "CRC32C",
                     "--password", "p", "--recovery", "true")
    entries = [e for e in evs if e["event"] == "entry"]
    # Recovery keeps every acknowledged entry (it may keep one more that was written but not yet acknowledged).
    assert [e["entry_id"] for e in entries][:30] == list(range(30))
    assert all(bytes.fromhex(e["hex"]) == java_payload(e["entry_id"], 50) for e in entries)
