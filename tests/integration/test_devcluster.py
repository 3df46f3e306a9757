"""``bkspark cluster start|stop`` and LocalCluster: real ZooKeeper and real Python bookies."""

from __future__ import annotations

import json
import os
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


def test_cluster_start_status_stop_leaves_nothing_running(tmp_path) -> None:
    directory = str(tmp_path / "cluster")
    started = _bkspark("cluster", "start", "--dir", directory, "--bookies", "2", "--no-journal-sync")
    assert started.returncode == 0, started.stderr
    uri = started.stdout.strip()
    assert uri.startswith("zk+hierarchical://127.0.0.1:") and uri.endswith("/ledgers")
    state = json.loads(_bkspark("cluster", "status", "--dir", directory).stdout)
    pids = [state["zookeeper"]["pid"]] + [b["pid"] for b in state["bookies"]]
    try:
        assert all(_alive(pid) for pid in pids)  # they outlive the `start` command
        again = _bkspark("cluster", "start", "--dir", directory)
        assert again.returncode == 1 and "already runs" in again.stderr
        listed = _bkspark("shell", "--metadata-service-uri", uri, "listbookies", "-rw")
        assert listed.returncode == 0, listed.stderr
        assert sorted(b["id"] for b in state["bookies"]) == sorted(
            line.strip() for line in listed.stdout.splitlines() if line.strip().startswith("127.0.0.1:")
        )
    finally:
        stopped = _bkspark("cluster", "stop", "--dir", directory)
    assert stopped.returncode == 0, stopped.stderr
    assert not any(_alive(pid) for pid in pids)
    missing = _bkspark("cluster", "stop", "--dir", directory)
    assert missing.returncode == 1 and "no running cluster" in missing.stderr


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
    assert not cluster.zookeeper.is_alive
