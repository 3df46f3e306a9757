"""``bkspark shell`` against real Apache BookKeeper 4.17.3 bookies, next to Java's own shell."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bkspark import cli
from bkspark.audit import Auditor
from bkspark.client import BookKeeper
from bkspark.context import LedgerCreateContext, create_ledger_with_context

pytestmark = [pytest.mark.integration, pytest.mark.compat]

VERSION = "4.17.3"
REPO = Path(__file__).resolve().parents[2]


def shell(capsys: pytest.CaptureFixture[str], uri: str, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["shell", "--metadata-service-uri", uri, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def shell_json(capsys: pytest.CaptureFixture[str], uri: str, *argv: str) -> Any:
    code, out, err = shell(capsys, uri, "--json", *argv)
    assert code == 0, err
    return json.loads(out)


def test_everyday_commands_on_a_java_cluster(java_cluster_factory, java_tools, capsys) -> None:
    cluster = java_cluster_factory(VERSION, bookies=3)
    uri = cluster.metadata_service_uri
    with BookKeeper(uri) as bk:
        lh = create_ledger_with_context(bk, LedgerCreateContext.builder().part_of_data_set("ds").build())
        payloads = [f"entry-{i}".encode() for i in range(12)]
        for p in payloads:
            lh.append(p)
        lh.close()
        lid = lh.ledger_id
        open_lh = bk.create_ledger()
        open_lh.append(b"only")
        open_id = open_lh.ledger_id
        # left open on purpose: readledger -r recovers it below

    # listbookies: the three Java bookies, writable, with addresses.
    doc = shell_json(capsys, uri, "listbookies", "-rw", "-h")
    assert sorted(b["bookieId"] for b in doc["readwrite"]) == sorted(cluster.bookie_ids)
    assert all(b["address"] for b in doc["readwrite"]) and "readonly" not in doc
    code, out, _ = shell(capsys, uri, "listbookies")
    assert out.splitlines()[0] == "ReadWrite Bookies :" and "Readonly Bookies :" in out

    # An audit pass leaves <root>/bkspark/audit/...; Java's listledgers walks past it and agrees with ours.
    with Auditor(uri, grace_period=0) as auditor:
        auditor.audit_once()
    assert shell_json(capsys, uri, "auditstatus")["lastPass"]["ledgersScanned"] == 2
    assert [r["ledgerId"] for r in shell_json(capsys, uri, "listledgers")] == sorted([lid, open_id])
    java = java_tools.shell(VERSION, uri, "listledgers")
    assert java.returncode == 0
    assert sorted(int(x) for x in re.findall(r"ledgerID: (\d+)", java.stdout)) == sorted([lid, open_id])
    assert "Error extracting ledgerId" not in java.stdout + java.stderr
    code, out, _ = shell(capsys, uri, "listledgers", "-m", "--no-progress")
    assert f"ledgerID: {lid}" in out and "state=CLOSED" in out and "bkspark.ctx.create=" in out
    on_bookie = shell_json(capsys, uri, "listledgers", "-bookieid", cluster.bookie_ids[0])
    assert {r["ledgerId"] for r in on_bookie} <= {lid, open_id}

    # readledger, in our spelling and in Java's.
    doc = shell_json(capsys, uri, "readledger", str(lid), "2", "4", "-m")
    assert [base64.b64decode(e["payload"]) for e in doc["entries"]] == payloads[2:5]
    doc = shell_json(capsys, uri, "readledger", "-l", str(lid), "-fe", "10", "-le", "-1")
    assert [e["entryId"] for e in doc["entries"]] == [10, 11] and doc["lastAddConfirmed"] == 11
    code, out, _ = shell(capsys, uri, "readledger", "-l", str(lid), "-fe", "0", "-le", "0", "-m")
    assert out.splitlines() == [f"--------- Lid={lid}, Eid=0, EntryLength=7 ---------", "Data: entry-0"]
    code, out, err = shell(capsys, uri, "readledger", str(lid), "20")
    assert code == 1 and "beyond the last add confirmed" in err and len(err.strip().splitlines()) == 1
    doc = shell_json(capsys, uri, "readledger", str(open_id), "-r", "-m")
    assert [base64.b64decode(e["payload"]) for e in doc["entries"]] == [b"only"]
    assert shell_json(capsys, uri, "ledgermetadata", "-l", str(open_id))["state"] == "CLOSED"

    # bookieinfo: every bookie answers GET_BOOKIE_INFO.
    doc = shell_json(capsys, uri, "bookieinfo")
    assert len(doc["bookies"]) == 3 and all(r["total"] >= r["free"] > 0 for r in doc["bookies"])
    # ... and the sums (docs/shell.md): in --json, and as the text output's last two lines.
    assert doc["totalFree"] == sum(r["free"] for r in doc["bookies"])
    assert doc["totalCapacity"] == sum(r["total"] for r in doc["bookies"])
    code, out, _ = shell(capsys, uri, "bookieinfo")
    assert code == 0 and len(out.splitlines()) == 1 + 3 + 2
    assert out.splitlines()[-2].startswith("Total free disk space in the cluster:\t")
    assert out.splitlines()[-1].startswith("Total capacity in the cluster:\t")

    # simpletest through the console entry point, as a user runs it.
    proc = subprocess.run(
        [sys.executable, "-m", "bkspark.cli", "shell", "simpletest", "-e", "3", "-w", "2", "-a", "2", "-n", "50",
         "--metadata-service-uri", uri, "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["entriesWritten"] == result["entriesRead"] == 50
    assert result["ledgerId"] not in [r["ledgerId"] for r in shell_json(capsys, uri, "listledgers")]

    # deleteledger: refused without -f when not on a terminal, done with it; Java no longer sees the ledger.
    code, _, err = shell(capsys, uri, "deleteledger", "-l", str(lid))
    assert code == 2 and "--force" in err
    code, out, _ = shell(capsys, uri, "deleteledger", "-l", str(lid), "-f")
    assert code == 0 and out.strip() == f"Deleted ledger {lid}"
    java = java_tools.shell(VERSION, uri, "ledgermetadata", "-l", str(lid))
    assert f"ledgerID: {lid}" not in java.stdout

    # Unknown ledgers: one line, exit 1, for every ledger command.
    for argv in (["showowner", str(lid)], ["predictlifespan", str(lid)], ["ledgermetadata", "-l", str(lid)],
                 ["readledger", str(lid)], ["deleteledger", "-l", str(lid), "-f"]):
        code, out, err = shell(capsys, uri, *argv)
        assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, (argv, err)
        assert "no such ledger" in err and "Traceback" not in err
