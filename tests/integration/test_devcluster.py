"""``bkspark cluster start|stop`` and LocalCluster: real ZooKeeper and real Python bookies."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from kazoo.client import KazooClient

from bkspark.devcluster import LocalCluster

pytestmark = pytest.mark.integration


def _bkspark(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bkspark.cli", *args], capture_output=True, text=True, timeout=180)


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_local_cluster_context_manager_registers_bookies_and_stops(tmp_path) -> None:
    with LocalCluster(tmp_path, bookies=3, journal_sync_data=False) as cluster:
        zk = KazooClient(hosts=cluster.zookeeper.connect_string)
        zk.start(timeout=15)
        try:
            assert sorted(zk.get_children("/ledgers/available")) == sorted(cluster.bookie_ids + ["readonly"])
            assert zk.exists("/ledgers/LAYOUT") is not None and zk.exists("/ledgers/INSTANCEID") is not None
        finally:
            zk.stop()
            zk.close()
        # Each bookie's admin HTTP server is off and bound to the loopback address (docs/security.md).
        confs = sorted(tmp_path.glob("*/bookie.conf"))
        assert len(confs) == 3
        for conf in confs:
            lines = conf.read_text(encoding="utf-8").splitlines()
            assert "httpServerHost=127.0.0.1" in lines and "httpServerEnabled=false" in lines
    assert not cluster.zookeeper.is_alive


def _ledger_entries(uri: str, ledger_id: int) -> list[bytes]:
    from bkspark.client import BookKeeper

    bk = BookKeeper(uri)
    try:
        handle = bk.open_ledger(ledger_id, recovery=False)
        return [bytes(e.payload) for e in handle.read(0, handle.last_add_confirmed)]
    finally:
        bk.close()


def _one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_cluster_start_after_stop_brings_back_the_same_cluster_and_fresh_starts_anew(tmp_path) -> None:
    """The README's walkthrough twice: same URI, same BookieIds, same ledgers; failures are one line with a log."""
    from bkspark.client import BookKeeper
    from bkspark.errors import NoSuchLedgerError, NoSuchLedgerMetadataError

    directory = tmp_path / "cluster"
    first = _bkspark("cluster", "start", "--dir", str(directory), "--bookies", "2", "--no-journal-sync")
    assert first.returncode == 0, first.stderr
    uri = first.stdout.strip()
    try:
        bk = BookKeeper(uri)
        try:
            handle = bk.create_ledger(ensemble_size=2, write_quorum_size=2, ack_quorum_size=2)
            for i in range(20):
                handle.append(f"entry-{i}".encode())
            handle.close()
            ledger_id = handle.ledger_id
        finally:
            bk.close()
        state = json.loads(_bkspark("cluster", "status", "--dir", str(directory)).stdout)
        ids = sorted(b["id"] for b in state["bookies"])
        pids = [state["zookeeper"]["pid"]] + [b["pid"] for b in state["bookies"]]
        assert all(_alive(pid) for pid in pids)  # they outlive the `start` command
        running = _bkspark("cluster", "start", "--dir", str(directory))
        _one_line_error(running, "already runs")
        listed = _bkspark("shell", "--metadata-service-uri", uri, "listbookies", "-rw")
        assert listed.returncode == 0, listed.stderr
        assert ids == sorted(line.strip() for line in listed.stdout.splitlines() if line.startswith("127.0.0.1:"))
    finally:
        stopped = _bkspark("cluster", "stop", "--dir", str(directory))
    assert stopped.returncode == 0, stopped.stderr
    assert not any(_alive(pid) for pid in pids)
    _one_line_error(_bkspark("cluster", "stop", "--dir", str(directory)), "no running cluster")

    # A kept port taken by someone else: refused before anything starts, in one line.
    bookie_port = int(ids[0].rsplit(":", 1)[1])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", bookie_port))
        squatter.listen(1)
        refused = _bkspark("cluster", "start", "--dir", str(directory))
    _one_line_error(refused, f"port {bookie_port}", "--fresh")
    assert not (directory / "cluster.json").exists()

    # A bookie that cannot start (a damaged cookie): one line, the bookie's own words and its log; nothing left running.
    cookie = directory / "bookie-1" / "journal" / "current" / "VERSION"
    good_cookie = cookie.read_bytes()
    cookie.write_text("not a cookie\n")
    failed = _bkspark("cluster", "start", "--dir", str(directory))
    line = _one_line_error(failed, "bookie-1", "cookie", "log: ")
    log_path = line.rsplit("log: ", 1)[1].rstrip(")")
    assert os.path.isfile(log_path) and "bookie-server: error: cannot start" in open(log_path).read()
    assert not (directory / "cluster.json").exists()
    cookie.write_bytes(good_cookie)

    again = _bkspark("cluster", "start", "--dir", str(directory))
    assert again.returncode == 0, again.stderr
    try:
        assert again.stdout.strip() == uri
        state = json.loads(_bkspark("cluster", "status", "--dir", str(directory)).stdout)
        assert sorted(b["id"] for b in state["bookies"]) == ids
        assert _ledger_entries(uri, ledger_id) == [f"entry-{i}".encode() for i in range(20)]
    finally:
        assert _bkspark("cluster", "stop", "--dir", str(directory)).returncode == 0

    fresh = _bkspark("cluster", "start", "--dir", str(directory), "--fresh", "--bookies", "1", "--no-journal-sync")
    assert fresh.returncode == 0, fresh.stderr
    try:
        bk = BookKeeper(fresh.stdout.strip())
        try:
            with pytest.raises((NoSuchLedgerError, NoSuchLedgerMetadataError)):
                bk.open_ledger(ledger_id, recovery=False)
        finally:
            bk.close()
        assert len(json.loads(_bkspark("cluster", "status", "--dir", str(directory)).stdout)["bookies"]) == 1
    finally:
        assert _bkspark("cluster", "stop", "--dir", str(directory)).returncode == 0
