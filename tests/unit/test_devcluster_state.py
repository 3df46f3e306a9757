"""``bkspark cluster``'s files without servers: stale state after a reboot, --fresh deleting only its own data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bkspark.devcluster.local import LAYOUT_FILE, STATE_FILE, LocalCluster, running_state
from bkspark.errors import LocalClusterError


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    return proc.pid


def test_a_state_file_whose_processes_are_gone_is_stale(tmp_path: Path) -> None:
    state = {"zookeeper": {"pid": _dead_pid()}, "bookies": [{"id": "127.0.0.1:1", "pid": _dead_pid()}]}
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    assert running_state(tmp_path) is None and not (tmp_path / STATE_FILE).exists()
    alive = {"zookeeper": {"pid": os.getpgrp()}, "bookies": []}  # a live process group (ours)
    (tmp_path / STATE_FILE).write_text(json.dumps(alive))
    assert running_state(tmp_path) == alive


def test_fresh_deletes_the_clusters_data_and_nothing_else(tmp_path: Path) -> None:
    for name in ("zookeeper/data", "bookie-0/journal", "bookie-12/ledgers", "bookie-notes", "my-notebooks"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / LAYOUT_FILE).write_text(json.dumps({"zookeeperPort": 1, "root": "/ledgers", "bookies": [{"port": 2}]}))
    (tmp_path / "notes.txt").write_text("mine")
    cluster = LocalCluster(tmp_path, fresh=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bookie-notes", "my-notebooks", "notes.txt"]
    assert not cluster.restarted and cluster.bookie_count == 3


def test_a_restart_keeps_the_ports_and_refuses_fewer_bookies_or_another_root(tmp_path: Path) -> None:
    (tmp_path / LAYOUT_FILE).write_text(
        json.dumps({"zookeeperPort": 2181, "root": "/ledgers", "bookies": [{"port": 3181}, {"port": 3182}]})
    )
    again = LocalCluster(tmp_path)
    assert again.restarted and again.zookeeper.port == 2181 and again.bookie_ports == [3181, 3182]
    grown = LocalCluster(tmp_path, bookies=3)
    assert grown.bookie_ports[:2] == [3181, 3182] and len(grown.bookie_ports) == 3
    with pytest.raises(LocalClusterError, match="2 bookies, more than the 1 asked for"):
        LocalCluster(tmp_path, bookies=1)
    with pytest.raises(LocalClusterError, match="rooted at /ledgers"):
        LocalCluster(tmp_path, root="/other")
    (tmp_path / LAYOUT_FILE).write_text("{not json")
    with pytest.raises(LocalClusterError, match="--fresh"):
        LocalCluster(tmp_path)
