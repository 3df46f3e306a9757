"""The interop matrix with Apache BookKeeper's Java client and shell (4.17.3 bookies).

* bkspark writes -> the Java client reads (single and batched) and the shell's ``readledger`` prints them;
* the Java client writes -> bkspark reads (single and batched, every digest type);
* a Java writer killed mid-write -> bkspark recovers; the Java client then agrees on end and bytes;
* a bkspark writer killed mid-write -> the Java client recovers; bkspark then agrees on end and bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from bkspark.client import BookKeeper
from bkspark.protocol.ledger_metadata import LedgerState
from tests.harness.java_bookkeeper import _jvm_argv
from tests.harness.process import kill_group

pytestmark = [pytest.mark.integration, pytest.mark.compat]

VERSION = "4.17.3"
JAVA_CLIENT = "bkspark.tools.JavaClient"


def java_payload(i: int, size: int = -1) -> bytes:
    """JavaClient's deterministic payload: "entry-i" repeated and cut to ``size`` bytes."""
    unit = f"entry-{i}".encode()
    if size < 0:
        return unit
    return (unit * (size // len(unit) + 1))[:size]


def events(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    out = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and "event" in obj:
                out.append(obj)
    assert proc.returncode == 0, f"JavaClient failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out


def java(java_tools, uri: str, *args: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    return events(java_tools.run(VERSION, JAVA_CLIENT, *args, metadata_service_uri=uri, timeout=180))


def entries_of(evs: list[dict[str, Any]]) -> dict[int, bytes]:
    return {e["entry_id"]: bytes.fromhex(e["hex"]) for e in evs if e["event"] == "entry"}


@pytest.fixture
def cluster(java_cluster_factory):  # type: ignore[no-untyped-def]
    return java_cluster_factory(VERSION, bookies=3)


def test_bkspark_writes_java_client_and_shell_read(cluster, java_tools) -> None:  # type: ignore[no-untyped-def]
    uri = cluster.metadata_service_uri
    data = [java_payload(i, 300) for i in range(50)]
    with BookKeeper(uri) as bk:
        lh = bk.create_ledger(3, 3, 2, digest_type="CRC32C", password=b"pw", custom_metadata={"app": b"bkspark"})
        for d in data:
            lh.append_async(d)
        lh.close()
        lid = lh.ledger_id
    single = java(java_tools, uri, "read", "--ledger", str(lid), "--digest", "CRC32C", "--password", "pw")
    opened = next(e for e in single if e["event"] == "opened")
    assert opened["last_add_confirmed"] == 49 and opened["closed"] is True and opened["length"] == 50 * 300
    assert entries_of(single) == dict(enumerate(data))
    batched = java(java_tools, uri, "read", "--ledger", str(lid), "--digest", "CRC32C", "--password", "pw", "--batch", "true")
    assert entries_of(batched) == dict(enumerate(data))
    md = next(e for e in java(java_tools, uri, "metadata", "--ledger", str(lid)) if e["event"] == "metadata")
    assert md["ledger_id"] == lid

    shell = java_tools.shell(VERSION, uri, "readledger", "-ledgerid", str(lid), "-msg")
    assert shell.returncode == 0, shell.stdout + shell.stderr
    text = shell.stdout + shell.stderr
    for i in (0, 25, 49):
        assert data[i].decode() in text


@pytest.mark.parametrize("digest", ["CRC32", "CRC32C", "MAC", "DUMMY"])
def test_java_writes_bkspark_reads(cluster, java_tools, digest: str) -> None:  # type: ignore[no-untyped-def]
    uri = cluster.metadata_service_uri
    evs = java(
        java_tools, uri, "create-and-write", "--ensemble", "3", "--write", "3", "--ack", "2", "--digest", digest,
        "--password", "javapw", "--entries", "40", "--size", "500", "--custom", "who=java",
    )
    lid = next(e for e in evs if e["event"] == "created")["ledger_id"]
    with BookKeeper(uri) as bk:
        rh = bk.open_ledger(lid, password=b"javapw")
        assert rh.last_add_confirmed == 39 and rh.metadata.custom_metadata == {"who": b"java"}
        assert [e.payload for e in rh.read(0, 39)] == [java_payload(i, 500) for i in range(40)]
        batch = rh.batch_read(0, 100, 0)
        assert [e.payload for e in batch] == [java_payload(i, 500) for i in range(len(batch))] and len(batch) == 40
        assert [e.payload for e in rh] == [java_payload(i, 500) for i in range(40)]


def _spawn_java(java_tools, uri: str, workdir: Path, *args: str) -> subprocess.Popen[bytes]:  # type: ignore[no-untyped-def]
    """Start JavaClient in the background (java_tools.run waits for the end; write-forever never ends)."""
    dirs = java_tools._dirs("JavaClient-bg", (), java_tools._client_conf(uri, None))
    argv = [
        *_jvm_argv(VERSION, JAVA_CLIENT, dirs.log4j, [f"-Dbkspark.clientConf={dirs.conf}"], with_tools=True),
        *args,
    ]
    out = open(workdir / "java-writer.out", "wb")
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=dirs.conf.parent, start_new_session=True)


def test_java_writer_killed_bkspark_recovers(cluster, java_tools, tmp_path) -> None:  # type: ignore[no-untyped-def]
    uri = cluster.metadata_service_uri
    ledger_file = tmp_path / "ledger-id"
    proc = _spawn_java(
        java_tools, uri, tmp_path, "write-forever", "--zk", uri, "--ledger-file", str(ledger_file), "--ensemble", "3",
        "--write", "3", "--ack", "2", "--digest", "CRC32C", "--password", "pw", "--size", "200",
    )
    try:
        deadline = time.monotonic() + 120
        acked = -1
        while time.monotonic() < deadline:
            text = (tmp_path / "java-writer.out").read_text(errors="replace")
            added = [json.loads(line)["entry_id"] for line in text.splitlines() if '"event":"added"' in line.replace(" ", "")]
            acked = max(added, default=-1)
            if acked >= 150:
                break
            assert proc.poll() is None, text[-3000:]
            time.sleep(0.2)
    finally:
        kill_group(proc)
    assert acked >= 150
    lid = int(ledger_file.read_text())
    with BookKeeper(uri) as bk:
        assert bk.get_ledger_metadata(lid).state == LedgerState.OPEN
        rh = bk.open_ledger(lid, password=b"pw")
        md = rh.metadata
        assert md.state == LedgerState.CLOSED and md.last_entry_id >= acked
        ours = [e.payload for e in rh.read(0, md.last_entry_id)]
        assert ours == [java_payload(i, 200) for i in range(md.last_entry_id + 1)]
        assert md.length == 200 * (md.last_entry_id + 1)
    theirs = java(java_tools, uri, "read", "--ledger", str(lid), "--password", "pw")
    opened = next(e for e in theirs if e["event"] == "opened")
    assert opened["closed"] is True and opened["last_add_confirmed"] == md.last_entry_id
    assert opened["length"] == md.length
    assert entries_of(theirs) == dict(enumerate(ours))


BKSPARK_WRITER = textwrap.dedent(
    """
    import sys
    from bkspark.client import BookKeeper
    uri, out = sys.argv[1], sys.argv[2]
    bk = BookKeeper(uri)
    lh = bk.create_ledger(3, 3, 2, digest_type="CRC32C", password=b"pw")
    with open(out, "w") as f:
        f.write(f"{lh.ledger_id}\\n"); f.flush()
        i = 0
        while True:
            unit = f"entry-{i}".encode()
            lh.append((unit * (300 // len(unit) + 1))[:300])
            f.write(f"{i}\\n"); f.flush()
            i += 1
    """
)


def test_bkspark_writer_killed_java_recovers(cluster, java_tools, tmp_path) -> None:  # type: ignore[no-untyped-def]
    uri = cluster.metadata_service_uri
    script = tmp_path / "writer.py"
    script.write_text(BKSPARK_WRITER)
    out = tmp_path / "acked.txt"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen([sys.executable, str(script), uri, str(out)], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lines = out.read_text().split() if out.exists() else []
            if len(lines) > 150:
                break
            assert proc.poll() is None
            time.sleep(0.1)
    finally:
        kill_group(proc)
    lines = out.read_text().split()
    lid, acked = int(lines[0]), max(int(x) for x in lines[1:])
    rec = next(e for e in java(java_tools, uri, "recover", "--ledger", str(lid), "--password", "pw") if e["event"] == "recovered")
    assert rec["closed"] is True and rec["last_entry_id"] >= acked
    with BookKeeper(uri) as bk:
        md = bk.get_ledger_metadata(lid)
        assert md.state == LedgerState.CLOSED and md.last_entry_id == rec["last_entry_id"]
        assert md.length == rec["length"] == 300 * (md.last_entry_id + 1)
        rh = bk.open_ledger(lid, password=b"pw")
        ours = rh.read(0, md.last_entry_id)
        assert [e.payload for e in ours] == [java_payload(i, 300) for i in range(md.last_entry_id + 1)]
    theirs = java(java_tools, uri, "read", "--ledger", str(lid), "--password", "pw")
    assert entries_of(theirs) == {e.entry_id: e.payload for e in ours}
