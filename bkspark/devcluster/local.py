"""A local BookKeeper cluster for demos and notebooks: one ZooKeeper and N Python bookies.

Used by ``bkspark cluster start|stop`` and ``make demo``.  Everything listens
on 127.0.0.1 and lives under one directory.  ``layout.json`` there keeps the
ports chosen at the first start: a bookie's default BookieId is its
``127.0.0.1:port``, named in its cookies and in every ledger's ensemble, so
a restart must give each bookie the same port to bring back the same cluster
with its data (``fresh=True`` deletes the data and starts anew).
``cluster.json`` records the running processes so that a later ``bkspark
cluster stop`` finds them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bkspark.devcluster.pids import pid_alive
from bkspark.devcluster.ports import free_port, port_is_free, port_is_open
from bkspark.devcluster.process import ManagedProcess
from bkspark.devcluster.zookeeper import ZooKeeperServer, init_new_cluster
from bkspark.errors import LocalClusterError
from bkspark.protocol.zk_paths import bookie_registration_path

__all__ = ["LocalCluster", "stop_cluster", "running_state", "STATE_FILE", "LAYOUT_FILE"]

STATE_FILE = "cluster.json"
#: Kept across stops: the ZooKeeper port, the ledgers root and each bookie's port (its BookieId).
LAYOUT_FILE = "layout.json"
DEFAULT_ROOT = "/ledgers"
DEFAULT_BOOKIES = 3
ZOOKEEPER_DIR = "zookeeper"
BOOKIE_DIR_PREFIX = "bookie-"


class LocalCluster:
    """ZooKeeper plus ``bookies`` Python bookies (``python -m bookie_server``) under ``base_dir``.

    As a context manager it starts everything and stops it on exit.  With
    ``detached=True`` the processes outlive this Python process (for
    ``bkspark cluster start``); stop them with :func:`stop_cluster`.

    A ``base_dir`` that held a cluster before brings it back: the same ports,
    BookieIds, ledgers and data (``bookies=None`` starts as many bookies as it
    had; more adds new ones).  ``fresh=True`` deletes what an earlier cluster
    left there (its ``zookeeper/``, ``bookie-N/`` and layout, nothing else).
    Errors are one-line :class:`LocalClusterError` messages that name the log.
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str] | None = None,
        *,
        bookies: int | None = None,
        root: str = DEFAULT_ROOT,
        journal_sync_data: bool = True,
        detached: bool = False,
        fresh: bool = False,
    ) -> None:
        if bookies is not None and bookies < 1:
            raise LocalClusterError(f"a cluster needs at least one bookie, not {bookies}")
        self.base_dir = Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="bkspark-cluster-"))
        if fresh:
            _delete_cluster_data(self.base_dir)
        layout = _read_layout(self.base_dir)
        kept_ports: list[int] = [int(b["port"]) for b in layout.get("bookies", [])] if layout else []
        if layout and layout.get("root", root) != root:
            raise LocalClusterError(
                f"{self.base_dir} holds a cluster rooted at {layout.get('root')}, not {root}; "
                "use that root, or start afresh with --fresh (deletes its data)"
            )
        if bookies is not None and bookies < len(kept_ports):
            raise LocalClusterError(
                f"{self.base_dir} holds a cluster of {len(kept_ports)} bookies, more than the {bookies} asked for "
                "(their ledgers need them all): start them all, or start afresh with --fresh (deletes its data)"
            )
        self.bookie_count = bookies if bookies is not None else (len(kept_ports) or DEFAULT_BOOKIES)
        self.root = root
        self.journal_sync_data = journal_sync_data
        self.detached = detached
        self.restarted = bool(layout)
        zk_port = int(layout["zookeeperPort"]) if layout else None
        self.zookeeper = ZooKeeperServer(self.base_dir / ZOOKEEPER_DIR, port=zk_port, die_with_parent=not detached)
        self.bookie_ports: list[int] = kept_ports + [free_port() for _ in range(self.bookie_count - len(kept_ports))]
        self._bookies: list[ManagedProcess] = []

    @property
    def metadata_service_uri(self) -> str:
        """``zk+hierarchical://127.0.0.1:PORT/ledgers``: what clients and Spark need."""
        return f"zk+hierarchical://{self.zookeeper.connect_string}{self.root}"

    @property
    def bookie_ids(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.bookie_ports]

    def _check_ports_free(self) -> None:
        """Refuse, before starting anything, when a kept port is taken: the bookie's id depends on it."""
        if not self.restarted:
            return
        wanted = [(ZOOKEEPER_DIR, self.zookeeper.port)] + [
            (f"{BOOKIE_DIR_PREFIX}{i}", port) for i, port in enumerate(self.bookie_ports)
        ]
        for name, port in wanted:
            if not port_is_free(port):
                raise LocalClusterError(
                    f"port {port} of {name} in {self.base_dir} is in use by another process; the cluster keeps its "
                    "ports across restarts (they are its metadataServiceUri and BookieIds): free the port, or "
                    "start afresh with --fresh (deletes the cluster's data)"
                )

    def _write_layout(self) -> None:
        layout = {
            "zookeeperPort": self.zookeeper.port,
            "root": self.root,
            "bookies": [{"port": port} for port in self.bookie_ports],
        }
        (self.base_dir / LAYOUT_FILE).write_text(json.dumps(layout, indent=2) + "\n", encoding="utf-8")

    def start(self, timeout: float = 120.0) -> "LocalCluster":
        """Start ZooKeeper, format the root as ``initnewcluster`` does (first start only), start the bookies.

        The layout is written before anything starts, so a start that fails
        half-way is retried on the same ports (ZooKeeper may hold cookies by then).
        """
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._check_ports_free()
        self._write_layout()
        try:
            self.zookeeper.start(timeout=timeout)
        except LocalClusterError as exc:
            self.stop()
            raise self._brief(self.zookeeper.process, exc) from None
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
                registered = bookie_registration_path(self.root, f"127.0.0.1:{port}")
                try:
                    process.wait_until(
                        lambda: port_is_open(port) and zk.exists(registered) is not None,
                        timeout=max(1.0, deadline - time.monotonic()),
                        what=f"bookie 127.0.0.1:{port} to register",
                    )
                except LocalClusterError as exc:
                    raise self._brief(process, exc) from None
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

    @staticmethod
    def _brief(process: ManagedProcess | None, exc: LocalClusterError) -> LocalClusterError:
        """One line: what failed, the process's last word on it, and where its log is."""
        if process is None:
            return exc
        return process.brief_failure(str(exc).splitlines()[0])

    def _start_bookie(self, index: int) -> ManagedProcess:
        directory = self.base_dir / f"{BOOKIE_DIR_PREFIX}{index}"
        directory.mkdir(parents=True, exist_ok=True)
        port = self.bookie_ports[index]
        conf = {
            "bookiePort": port,
            "advertisedAddress": "127.0.0.1",
            "bindAddress": "127.0.0.1",
            "metadataServiceUri": self.metadata_service_uri,
            "journalDirectories": directory / "journal",
            "ledgerDirectories": directory / "ledgers",
            "httpServerEnabled": "false",
            "httpServerHost": "127.0.0.1",  # enabled in this file, the admin server stays on the machine
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


def _read_layout(base_dir: Path) -> dict[str, Any]:
    """What an earlier start kept in ``base_dir`` ({} when none)."""
    path = base_dir / LAYOUT_FILE
    try:
        layout = json.loads(path.read_text(encoding="utf-8"))
        int(layout["zookeeperPort"])
        [int(b["port"]) for b in layout["bookies"]]
    except FileNotFoundError:
        return {}
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise LocalClusterError(
            f"{path} cannot be read ({exc}); repair it, or start afresh with --fresh (deletes the cluster's data)"
        ) from None
    return layout  # type: ignore[no-any-return]


def _delete_cluster_data(base_dir: Path) -> None:
    """Delete what a cluster keeps in ``base_dir``, and only that (the directory may hold other things)."""
    if (base_dir / STATE_FILE).exists() and running_state(base_dir) is not None:
        raise LocalClusterError(f"a cluster runs in {base_dir}: `bkspark cluster stop --dir {base_dir}` first")
    if not base_dir.is_dir():
        return
    for child in base_dir.iterdir():
        if child.name == ZOOKEEPER_DIR or (
            child.name.startswith(BOOKIE_DIR_PREFIX) and child.name[len(BOOKIE_DIR_PREFIX):].isdigit()
        ):
            shutil.rmtree(child)
        elif child.name in (LAYOUT_FILE, STATE_FILE):
            child.unlink()


def running_state(base_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The state of the cluster running in ``base_dir``, or None.

    A ``cluster.json`` whose processes are all gone (a reboot, a kill -9) is
    stale: it is removed, so that ``start`` can bring the cluster back.
    """
    path = Path(base_dir) / STATE_FILE
    try:
        state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as exc:
        raise LocalClusterError(f"{path} cannot be read: {exc}") from None
    pids = [state.get("zookeeper", {}).get("pid")] + [b.get("pid") for b in state.get("bookies", [])]
    if any(pid and pid_alive(int(pid), group=True) for pid in pids):
        return state
    path.unlink(missing_ok=True)
    return None


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
