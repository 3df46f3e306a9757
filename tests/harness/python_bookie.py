"""N Python bookies (``python -m bookie_server``) as real subprocesses, for integration tests.

Each bookie runs in its own process group through :class:`ManagedProcess`, so
``kill(i)`` is a real SIGKILL.  Bookie i keeps its directories, port, HTTP
port and BookieId across ``stop(i)``/``kill(i)`` and ``start(i)``.

Usage (with the ``zk_root`` fixture)::

    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=3) as cluster:
        cluster.bookie_ids          # e.g. ["127.0.0.1:40123", ...] or the custom ids given
        cluster.kill(0); cluster.start(0)
        cluster.http_get(0, "/api/v1/bookie/state")

Options: ``bookie_ids`` (custom BP-41 ids; None entries keep ``host:port``),
``journal_sync_data`` (default True), ``conf_overrides`` (any bk_server.conf key).
"""

from __future__ import annotations

import json
import os
import random
import resource
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bkspark.protocol import v2
from bkspark.protocol.digest import Digester, master_key
from bookie_server.journal import JournalFaults
from tests.harness.java_bookkeeper import parse_metadata_service_uri
from tests.harness.ports import free_port, port_is_open
from tests.harness.process import HarnessError, ManagedProcess, tail

__all__ = [
    "LedgerEntries", "PythonBookie", "PythonBookieCluster", "RawBookieConnection", "REPO_ROOT", "histogram_count_above"
]

REPO_ROOT = Path(__file__).resolve().parents[2]


class PythonBookie:
    """One Python bookie process and its fixed identity (dirs, ports, id)."""

    def __init__(
        self,
        name: str,
        base_dir: Path,
        metadata_service_uri: str,
        *,
        bookie_id: str | None = None,
        port: int | None = None,
        journal_sync_data: bool = True,
        conf_overrides: Mapping[str, object] | None = None,
        tree: Path | None = None,
    ) -> None:
        self.name = name
        #: The checkout whose ``bookie_server`` runs (``python -m`` imports from its working directory); another
        #: tree than this one only for benchmarks of an older commit's bookie.
        self.tree = tree or REPO_ROOT
        self.dir = base_dir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.http_port = free_port()
        self.metadata_service_uri = metadata_service_uri
        self.custom_id = bookie_id
        self.conf_file = self.dir / "bookie.conf"
        values: dict[str, object] = {
            "bookiePort": self.port,
            "advertisedAddress": "127.0.0.1",
            "bindAddress": "127.0.0.1",
            "metadataServiceUri": metadata_service_uri,
            "journalDirectories": str(self.dir / "journal"),
            "ledgerDirectories": str(self.dir / "ledgers"),
            "httpServerEnabled": "true",
            "httpServerHost": "127.0.0.1",
            "httpServerPort": self.http_port,
            "journalSyncData": "true" if journal_sync_data else "false",
            "zkTimeout": 6000,
            "flushInterval": 5000,
        }
        if bookie_id:
            values["bookieId"] = bookie_id
        values.update(conf_overrides or {})
        self.values = values
        self.write_conf()
        self.process: ManagedProcess | None = None
        #: Test-only fault switches (``bookie_server.journal``'s environment variables) of the next launch.
        self.fault_env: dict[str, str] = {}

    def write_conf(self) -> None:
        """(Re)write the conf file from :attr:`values`."""
        text = "".join(f"{k}={v}\n" for k, v in self.values.items())
        self.conf_file.write_text(text, encoding="utf-8")

    @property
    def bookie_id(self) -> str:
        """The BookieId this bookie registers with."""
        return self.custom_id or f"127.0.0.1:{self.port}"

    def set_port(self, port: int) -> None:
        """Move the bookie to another port (takes effect at the next start)."""
        self.port = port
        self.values["bookiePort"] = port
        self.write_conf()

    def launch(self) -> None:
        """Start the process (does not wait)."""
        argv = [sys.executable, "-m", "bookie_server", "--conf", str(self.conf_file)]
        if self.process is None:
            self.process = ManagedProcess(f"pybookie-{self.name}", argv, cwd=self.tree, log_dir=self.dir / "logs")
        self.process.argv = argv
        self.process.env = dict(os.environ, **self.fault_env) if self.fault_env else None
        self.process.start()

    @contextmanager
    def power_cut_armed(self, at_batch: int) -> Iterator[None]:
        """Launches inside the block arm the journal's power-cut fault point (``bookie_server.journal.JournalFaults``):
        the bookie's ``at_batch``-th group commit is written to memory only and the process SIGKILLs itself before
        the sync, so what it wrote after its last fsync is really lost. Every launch after the block is unarmed."""
        self.fault_env = {JournalFaults.POWER_CUT_ENV: str(at_batch)}
        try:
            yield
        finally:
            self.fault_env = {}  # read at launch only

    def wait_ready(self, zk: KazooClient, root: str, timeout: float = 60.0, readonly: bool = False) -> None:
        """Wait until the port answers and the registration znode exists."""
        assert self.process is not None
        sub = "available/readonly" if readonly else "available"
        reg = f"{root}/{sub}/{self.bookie_id}"
        self.process.wait_until(
            lambda: port_is_open(self.port) and zk.exists(reg) is not None,
            timeout=timeout,
            what=f"Python bookie {self.bookie_id} to listen and register at {reg}",
            interval=0.1,
        )

    def limit_file_size(self, max_bytes: int | None) -> None:
        """Fault tool: from now on the running bookie's writes past ``max_bytes`` of any file fail with EFBIG, as on
        a disk that is full or refuses writes (RLIMIT_FSIZE, set from outside with prlimit(2); Python ignores
        SIGXFSZ, so the write returns the error).  ``None`` lifts it; a restarted bookie starts without it."""
        assert self.process is not None and self.process.pid is not None
        soft = resource.RLIM_INFINITY if max_bytes is None else max_bytes
        resource.prlimit(self.process.pid, resource.RLIMIT_FSIZE, (soft, resource.RLIM_INFINITY))

    def entry_logs(self) -> list[Path]:
        """The entry log files of the bookie's (first) ledger directory, oldest first."""
        ledgers = Path(str(self.values["ledgerDirectories"]).split(",")[0])
        return sorted((ledgers / "current" / "entrylogs").glob("*.log"))

    def entry_log_bytes(self) -> int:
        """Bytes in :meth:`entry_logs`: what the bookie's checkpoints have written there."""
        return sum(path.stat().st_size for path in self.entry_logs())

    @property
    def is_alive(self) -> bool:
        """True while the process runs."""
        return self.process is not None and self.process.is_alive

    def log_tail(self, lines: int = 80) -> str:
        """Last lines of the bookie's stderr (JSON logs)."""
        if self.process is None:
            return ""
        return tail(self.process.stderr_path, lines)


def sample_value(metrics_text: str, name: str, **labels: str) -> float | None:
    """The value of sample ``name`` with exactly these labels in a bookie's ``/metrics`` text (parsed by
    prometheus_client); None when it has no such sample."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def histogram_count_above(metrics_text: str, histogram: str, bound: float, **labels: str) -> int:
    """How many observations of ``histogram`` (with ``labels``) in a bookie's ``/metrics`` text exceeded ``bound``,
    one of its bucket bounds (e.g. the journal syncs slower than 1000 ms: ``bookie_journal_JOURNAL_SYNC``)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = within = 0.0
    for family in text_string_to_metric_families(metrics_text):
        if family.name != histogram:
            continue
        for sample in family.samples:
            own = {k: v for k, v in sample.labels.items() if k != "le"}
            if own != labels:
                continue
            if sample.name == f"{histogram}_count":
                total = sample.value
            elif sample.name == f"{histogram}_bucket" and float(sample.labels["le"]) == bound:
                within = sample.value
    return int(total - within)


class PythonBookieCluster:
    """N Python bookies registered under one metadata service URI."""

    def __init__(
        self,
        metadata_service_uri: str,
        base_dir: str | Path,
        bookies: int = 3,
        *,
        bookie_ids: Sequence[str | None] | None = None,
        journal_sync_data: bool = True,
        conf_overrides: Mapping[str, object] | None = None,
        start_timeout: float = 60.0,
        tree: Path | None = None,
    ) -> None:
        self.metadata_service_uri = metadata_service_uri
        self.tree = tree
        self.connect_string, self.root = parse_metadata_service_uri(metadata_service_uri)
        self.base_dir = Path(base_dir)
        self.start_timeout = start_timeout
        self.journal_sync_data = journal_sync_data
        self.conf_overrides = dict(conf_overrides or {})
        self.bookies: list[PythonBookie] = []
        ids = list(bookie_ids or [])
        for i in range(bookies):
            self.add_bookie(ids[i] if i < len(ids) else None, start=False)
        self._zk: KazooClient | None = None

    @property
    def zk(self) -> KazooClient:
        """A kazoo client on the cluster's ZooKeeper (opened on first use)."""
        if self._zk is None:
            self._zk = KazooClient(hosts=self.connect_string, timeout=15.0)
            self._zk.start(timeout=30)
        return self._zk

    @property
    def bookie_ids(self) -> list[str]:
        """BookieIds, in bookie order."""
        return [b.bookie_id for b in self.bookies]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every bookie."""
        return [("127.0.0.1", b.port) for b in self.bookies]

    def add_bookie(self, bookie_id: str | None = None, start: bool = True) -> int:
        """Add one bookie (started and registered unless ``start=False``); return its index."""
        index = len(self.bookies)
        self.bookies.append(
            PythonBookie(
                f"bookie{index}",
                self.base_dir,
                self.metadata_service_uri,
                bookie_id=bookie_id,
                journal_sync_data=self.journal_sync_data,
                conf_overrides=self.conf_overrides,
                tree=self.tree,
            )
        )
        if start:
            self.start(index)
        return index

    def start_all(self) -> "PythonBookieCluster":
        """Start every stopped bookie and wait until all are registered."""
        pending = [b for b in self.bookies if not b.is_alive]
        for bookie in pending:
            bookie.launch()
        try:
            for bookie in pending:
                bookie.wait_ready(self.zk, self.root, self.start_timeout)
        except HarnessError:
            self.close()
            raise
        return self

    def start(self, i: int, timeout: float | None = None) -> None:
        """(Re)start bookie i with its directories, port and id; wait until it is registered."""
        bookie = self.bookies[i]
        bookie.launch()
        bookie.wait_ready(self.zk, self.root, timeout or self.start_timeout)

    def stop(self, i: int, timeout: float = 20.0) -> int | None:
        """SIGTERM bookie i (it flushes and unregisters); SIGKILL after ``timeout``; the exit status."""
        process = self.bookies[i].process
        return process.terminate(timeout) if process is not None else None

    def kill(self, i: int) -> None:
        """SIGKILL bookie i (a crash)."""
        process = self.bookies[i].process
        if process is not None:
            process.kill()

    def crash(self, i: int) -> None:
        """SIGKILL bookie i and drop its registration at once (a restart need not wait for the session to expire)."""
        self.kill(i)
        path = f"{self.root}/available/{self.bookies[i].bookie_id}"
        if self.zk.exists(path):
            self.zk.delete(path)

    def wait_unregistered(self, i: int, timeout: float = 60.0) -> None:
        """Wait until bookie i's writable registration is gone (e.g. session expiry after kill)."""
        path = f"{self.root}/available/{self.bookies[i].bookie_id}"
        deadline = time.monotonic() + timeout
        while self.zk.exists(path) is not None:
            if time.monotonic() > deadline:
                raise HarnessError(f"{path} still exists after {timeout}s")
            time.sleep(0.2)

    def registered(self, readonly: bool = False) -> list[str]:
        """BookieIds registered now under ``available`` (or ``available/readonly``)."""
        path = f"{self.root}/available/readonly" if readonly else f"{self.root}/available"
        children = self.zk.get_children(path) if self.zk.exists(path) else []
        return sorted(c for c in children if c != "readonly")

    def http(self, i: int, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        """Call bookie i's HTTP endpoint; JSON answers are decoded, others returned as text."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.bookies[i].http_port}{path}", data=data, method=method)
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            if resp.headers.get("Content-Type", "").startswith("application/json"):
                return json.loads(raw)
            return raw.decode()

    def http_get(self, i: int, path: str) -> Any:
        """``GET`` on bookie i's HTTP endpoint."""
        return self.http(i, "GET", path)

    def metric(self, i: int, name: str, *, http_timeout: float = 10.0, **labels: str) -> float | None:
        """The value of sample ``name`` (e.g. ``bookie_flush_count``) with exactly these labels in bookie i's
        ``/metrics``, parsed by prometheus_client; None when it has no such sample."""
        return sample_value(self.http(i, "GET", "/metrics", timeout=http_timeout), name, **labels)

    def log_tail(self, i: int, lines: int = 80) -> str:
        """Last lines of bookie i's log."""
        return self.bookies[i].log_tail(lines)

    def close(self) -> None:
        """Stop every bookie (SIGTERM, then SIGKILL) and close the kazoo client."""
        for i, bookie in enumerate(self.bookies):
            if bookie.is_alive:
                self.stop(i, timeout=15.0)
        if self._zk is not None:
            try:
                self._zk.stop()
            finally:
                self._zk.close()
                self._zk = None

    def __enter__(self) -> "PythonBookieCluster":
        return self.start_all()

    def __exit__(self, *exc: object) -> None:
        self.close()


class RawBookieConnection:
    """A blocking bookie connection speaking raw v2 or v3 frames (tests talk to one bookie directly).

    ``send(frame)`` writes a whole frame; ``recv()`` returns the next response
    body (length stripped); ``call_v2``/``call_v3`` do both and decode.
    """

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        import socket

        from bkspark.protocol.framing import FrameSplitter

        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.splitter = FrameSplitter()
        self.pending: list[memoryview] = []

    def send(self, frame: bytes) -> None:
        """Write one or more whole frames."""
        self.sock.sendall(frame)

    def recv(self) -> memoryview:
        """The next response frame body; ConnectionError when the bookie closed the connection."""
        while not self.pending:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("connection closed by the bookie")
            self.pending.extend(self.splitter.feed(data))
        return self.pending.pop(0)

    def call_v2(self, frame: bytes) -> Any:
        """Send a v2 request frame and decode the response."""
        from bkspark.protocol import v2

        self.send(frame)
        return v2.decode_response(self.recv())

    def call_v3(self, request: Any) -> Any:
        """Send a v3 ``pb.Request`` and decode the response."""
        from bkspark.protocol import v3

        self.send(v3.encode_request(request))
        return v3.decode_response(self.recv())

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def __enter__(self) -> "RawBookieConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LedgerEntries:
    """A test's entries: the same bytes for a ``(ledger, entry id)`` every time (a checker recomputes what it
    expects), packaged with the digest of one password, whose master key the adds carry."""

    def __init__(self, password: bytes, max_payload: int = 2000) -> None:
        self.master_key = master_key(password)
        self.digest = Digester("CRC32C", password)
        self.max_payload = max_payload

    def entry(self, ledger: int, entry_id: int) -> bytes:
        """Entry ``entry_id`` of ``ledger``, its LAC the entry before it."""
        rng = random.Random(ledger * 1_000_003 + entry_id)
        payload = rng.randbytes(rng.randint(1, self.max_payload))
        return self.digest.package_entry(ledger, entry_id, entry_id - 1, 0, payload)

    def add_request(self, ledger: int, entry_id: int, flags: int = 0) -> bytes:
        """A v2 add request of that entry."""
        return v2.encode_add_request(flags, self.master_key, self.entry(ledger, entry_id))
