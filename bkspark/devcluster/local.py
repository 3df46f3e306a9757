"""A local BookKeeper cluster for demos and notebooks: one ZooKeeper and N Python bookies.

Used by ``bkspark cluster start|stop`` and ``make demo``.  Everything listens
on 127.0.0.1 on free ports and lives under one directory; ``cluster.json``
there records the processes so that a later ``bkspark cluster stop`` finds
them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bkspark.devcluster.ports import free_port, port_is_open
from bkspark.devcluster.process import ManagedProcess
from bkspark.devcluster.zookeeper import ZooKeeperServer, init_new_cluster
from bkspark.errors import LocalClusterError

__all__ = ["LocalCluster", "stop_cluster", "STATE_FILE"]

STATE_FILE = "cluster.json"
DEFAULT_ROOT = "/ledgers"


class LocalCluster:
    """ZooKeeper plus ``bookies`` Python bookies (``python -m bookie_server``) under ``base_dir``.

    As a context manager it starts everything and stops it on exit.  With
    ``detached=True`` the processes outlive this Python process (for
    ``bkspark cluster start``); stop them with :func:`stop_cluster`.
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str] | None = None,
        *,
        bookies: int = 3,
        root: str = DEFAULT_ROOT,
        journal_sync_data: bool = True,
        detached: bool = False,
    ) -> None:
        if bookies < 1:
            raise LocalClusterError(f"a cluster needs at least one bookie, not {bookies}")
        self.base_dir = Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="bkspark-cluster-"))
        self.bookie_count = bookies
        self.root = root
        self.journal_sync_data = journal_sync_data
        self.detached = detached
        self.zookeeper = ZooKeeperServer(self.base_dir / "zookeeper", die_with_parent=not detached)
        self.bookie_ports: list[int] = []
        self._bookies: list[ManagedProcess] = []

    @property
    def metadata_service_uri(self) -> str:
        """``zk+hierarchical://127.0.0.1:PORT/ledgers``: what clients and Spark need."""
        return f"zk+hierarchical://{self.zookeeper.connect_string}{self.root}"

    @property
    def bookie_ids(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.bookie_ports]

    def start(self, timeout: float = 120.0) -> "LocalCluster":
        """Start ZooKeeper, format the root as ``initnewcluster`` does, start the bookies, wait for them."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.zookeeper.start(timeout=timeout)
        if self.detached and self.zookeeper.process is not None:
            self.zookeeper.process.release()
        zk = self.zookeeper.client()
        try:
            if zk.exists(self.root) is None:
                init_new_cluster(zk, self.root)
            for index in range(self.bookie_count):
                self._bookies.append(self._start_bookie(index))
            deadline = time.monotonic() + timeout
            for process, port in zip(self._bookies, self.bookie_ports):
                registered = f"{self.root}/available/127.0.0.1:{port}"
                process.wait_until(
                    lambda: port_is_open(port) and zk.exists(registered) is not None,
                    timeout=max(1.0, deadline - time.monotonic()),
                    what=f"bookie 127.0.0.1:{port} to register",
                )
        except BaseException:
            zk.stop()
            zk.close()
            self.stop()
            raise
        zk.stop()
        zk.close()
        if self.detached:
            for process in self._bookies:
                process.release()
        self._write_state()
        return self

    def _start_bookie(self, index: int) -> ManagedProcess:
        directory = self.base_dir / f"bookie-{index}"
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        conf = {
            "bookiePort": port,
            "advertisedAddress": "127.0.0.1",
            "bindAddress": "127.0.0.1",
            "metadataServiceUri": self.metadata_service_uri,
            "journalDirectories": directory / "journal",
            "ledgerDirectories": directory / "ledgers",
            "httpServerEnabled": "false",
            "journalSyncData": "true" if self.journal_sync_data else "false",
        }
        conf_file = directory / "bookie.conf"
        conf_file.write_text("".join(f"{k}={v}\n" for k, v in conf.items()), encoding="utf-8")
        process = ManagedProcess(
            f"bookie-{index}",
            [sys.executable, "-m", "bookie_server", "--conf", str(conf_file)],
            log_dir=directory / "logs",
            die_with_parent=not self.detached,
        )
        process.start()
        self.bookie_ports.append(port)
        return process

    def _write_state(self) -> None:
        state: dict[str, Any] = {
            "metadataServiceUri": self.metadata_service_uri,
            "zookeeper": {"port": self.zookeeper.port, "pid": self.zookeeper.process.pid if self.zookeeper.process else None},
            "bookies": [{"id": bid, "pid": p.pid} for bid, p in zip(self.bookie_ids, self._bookies)],
        }
        (self.base_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")

    def stop(self) -> None:
        """SIGTERM the bookies (they flush and unregister), then ZooKeeper."""
        for process in self._bookies:
            process.terminate()
        self.zookeeper.stop()
        state = self.base_dir / STATE_FILE
        if state.exists():
            state.unlink()

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _terminate_group(pid: int, timeout: float) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_cluster(base_dir: str | os.PathLike[str], timeout: float = 15.0) -> dict[str, Any]:
    """Stop a cluster that ``bkspark cluster start`` left running in ``base_dir``; returns its state."""
    path = Path(base_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LocalClusterError(f"no running cluster in {base_dir} (no {STATE_FILE}); nothing to stop") from None
    except (ValueError, OSError) as exc:
        raise LocalClusterError(f"{path} cannot be read: {exc}") from None
    for bookie in state.get("bookies", []):
        if bookie.get("pid"):
            _terminate_group(int(bookie["pid"]), timeout)
    zk_pid = state.get("zookeeper", {}).get("pid")
    if zk_pid:
        _terminate_group(int(zk_pid), timeout)
    path.unlink()
    return state
