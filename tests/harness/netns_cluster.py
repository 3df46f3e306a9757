"""A BookKeeper cluster on the namespace test bed (tests/harness/netns.py, docs/reliability.md).

ZooKeeper and the client live on rack 0, the bookies on racks 1..R (``bookies_per_rack`` each), every one a host
of its own; the last ``java_bookies`` of them are Apache BookKeeper's bookies (a JVM each), the others Python ones. Bookies register by their address (``198.18.r.(10+i):3181``) unless given a BP-41 name; the client's
placement learns each bookie's rack from a topology script (``networkTopologyScriptFileName``), as an operator's
client would. Clients are built inside the client's namespace (:meth:`NetnsCluster.client`); everything the
harness itself checks (ZooKeeper, registrations) it checks from the router, which reaches every host.

With ``journal_disks=True`` each Python bookie's journal lives on a disk of its own (ext4 on a loop device,
tests/harness/loop_disk.py), so that the kernel can slow its ``fdatasync`` or fill it up for that bookie alone; with
``ledger_disks=True`` its ledger directory too (a full ledger disk).
"""

from __future__ import annotations

import shlex
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kazoo.client import KazooClient

from bkspark.client import BookKeeper
from bkspark.devcluster.zookeeper import ZooKeeperServer, four_letter_word
from bkspark.shell.admin import init_new_cluster
from tests.harness.java_bookkeeper import DEFAULT_BK_VERSION, JavaBookie, ensure_jars
from tests.harness.loop_disk import LoopDisk
from tests.harness.netns import Testbed, wait_until
from tests.harness.python_bookie import REPO_ROOT, PythonBookie, histogram_count_above, sample_value

__all__ = ["BOOKIE_PORT", "ZK_PORT", "NetnsCluster"]

T = TypeVar("T")

BOOKIE_PORT = 3181
ZK_PORT = 2181
ROOT = "/ledgers"
#: A ledger disk's size (``ledger_disks=True``): room for a 30-minute soak's entry logs and index (a sparse file).
LEDGER_DISK_SIZE = 256 << 20


class _NamespacedZooKeeper(ZooKeeperServer):
    """ZooKeeper on its host's address (a later ``clientPortAddress`` line wins over the loopback default)."""

    def __init__(self, bed: Testbed, base_dir: Path) -> None:
        self.bed = bed
        self.address = bed.address_of("zk")
        super().__init__(base_dir, port=ZK_PORT, extra_config=[f"clientPortAddress={self.address}"])
        self._process = bed.process("zk", "zookeeper", [], cwd=base_dir, log_dir=base_dir)

    @property
    def connect_string(self) -> str:
        return f"{self.address}:{self.port}"

    def is_serving(self) -> bool:
        def ask() -> bool:
            return four_letter_word(self.port, "ruok", host=self.address) == "imok" and "Zookeeper version" in four_letter_word(
                self.port, "srvr", host=self.address
            )

        return self.bed.call_in(None, ask)


class NetnsCluster:
    """ZooKeeper, ``racks`` × ``bookies_per_rack`` Python bookies and a client host on a :class:`Testbed`.

    A context manager: processes and namespaces go away on exit, whatever happened.
    """

    def __init__(
        self,
        base_dir: Path,
        *,
        racks: int = 3,
        bookies_per_rack: int = 1,
        bookie_names: Mapping[int, str] | None = None,
        conf_overrides: Mapping[str, object] | None = None,
        journal_sync_data: bool = False,
        java_bookies: int = 0,
        journal_disks: bool = False,
        ledger_disks: bool = False,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.bed = Testbed()
        self.bookies: list[PythonBookie | JavaBookie] = []
        self.hosts: list[str] = []
        #: Python bookie index -> the disk its journal lives on (``journal_disks=True``).
        self.journal_disks: dict[int, LoopDisk] = {}
        #: Python bookie index -> the disk its ledger directory (entry logs and index) lives on (``ledger_disks=True``).
        self.ledger_disks: dict[int, LoopDisk] = {}
        self._control: KazooClient | None = None
        try:
            self.bed.add_host("zk", 0)
            self.bed.add_host("client", 0)
            self.zookeeper = _NamespacedZooKeeper(self.bed, self.base_dir / "zk")
            self.zookeeper.start()
            self.metadata_service_uri = f"zk+hierarchical://{self.zookeeper.connect_string}{ROOT}"
            self.call_in_router(lambda: init_new_cluster(self.control, ROOT))
            names = dict(bookie_names or {})
            total = racks * bookies_per_rack
            if java_bookies:
                ensure_jars(DEFAULT_BK_VERSION, need_tools=False)
            for rack in range(1, racks + 1):
                for _ in range(bookies_per_rack):
                    n = len(self.bookies)
                    host = f"bookie{n}"
                    address = self.bed.add_host(host, rack).address
                    if n >= total - java_bookies:
                        self._add_java_bookie(host, address, names.get(n, f"{address}:{BOOKIE_PORT}"), journal_sync_data)
                        continue
                    overrides = {
                        "advertisedAddress": address,
                        "bindAddress": address,
                        "httpServerHost": address,
                        "httpServerPort": 8080,
                        **(conf_overrides or {}),
                    }
                    bookie = PythonBookie(
                        host,
                        self.base_dir,
                        self.metadata_service_uri,
                        bookie_id=names.get(n, f"{address}:{BOOKIE_PORT}"),
                        port=BOOKIE_PORT,
                        journal_sync_data=journal_sync_data,
                        conf_overrides=overrides,
                    )
                    for wanted, kind, disks, key in (
                        (journal_disks, "journal", self.journal_disks, "journalDirectories"),
                        (ledger_disks, "ledgers", self.ledger_disks, "ledgerDirectories"),
                    ):
                        if wanted:
                            disk = LoopDisk(self.base_dir / f"{host}-{kind}.img", self.base_dir / f"{host}-{kind}",
                                            size=LEDGER_DISK_SIZE if kind == "ledgers" else 64 << 20)
                            disks[n] = disk
                            bookie.values[key] = str(disk.mount_point / kind)
                            bookie.write_conf()
                    bookie.process = self.bed.process(
                        host, f"pybookie-{host}", [], cwd=REPO_ROOT, log_dir=bookie.dir / "logs"
                    )
                    self.bookies.append(bookie)
                    self.hosts.append(host)
            self.topology_script = self._write_topology_script()
            for i in range(len(self.bookies)):
                self.bookies[i].launch()
            for i in range(len(self.bookies)):
                self.wait_registered(i)
        except BaseException:
            self.close()
            raise

    def _add_java_bookie(self, host: str, address: str, bookie_id: str, journal_sync_data: bool) -> None:
        """Apache BookKeeper's bookie on ``host`` (it listens on every interface of its namespace: only ``eth0``)."""
        bookie = JavaBookie(
            version=DEFAULT_BK_VERSION,
            base_dir=self.base_dir / host,
            metadata_service_uri=self.metadata_service_uri,
            port=BOOKIE_PORT,
            bookie_id=bookie_id,
            journal_sync_data=journal_sync_data,
            conf_overrides={"advertisedAddress": address, "allowLoopback": False},
        )
        bookie.base_dir.mkdir(parents=True, exist_ok=True)
        bookie.process = self.bed.process(
            host, f"bookie-{host}", [], cwd=bookie.base_dir, log_dir=bookie.base_dir, extra_logs=[bookie.log_file]
        )
        self.bookies.append(bookie)
        self.hosts.append(host)

    # -- the harness's own view (from the router) -----------------------------------------------------------------

    def call_in_router(self, fn: Callable[[], T]) -> T:
        return self.bed.call_in(None, fn)

    @property
    def control(self) -> KazooClient:
        """A kazoo client of the harness, in the router namespace (opened on first use)."""
        if self._control is None:

            def connect() -> KazooClient:
                zk = KazooClient(hosts=self.zookeeper.connect_string, timeout=15.0)
                zk.start(timeout=60)
                return zk

            self._control = self.call_in_router(connect)
        return self._control

    def registered(self) -> list[str]:
        """The writable bookies' ids registered in ZooKeeper."""
        return sorted(
            c for c in self.call_in_router(lambda: self.control.get_children(f"{ROOT}/available")) if c != "readonly"
        )

    def registration_owner(self, i: int) -> int | None:
        """The ZooKeeper session that holds bookie ``i``'s writable registration, or None when there is none."""
        path = f"{ROOT}/available/{self.bookies[i].bookie_id}"
        stat = self.call_in_router(lambda: self.control.exists(path))
        return None if stat is None else stat.ephemeralOwner

    def is_serving(self, i: int, stale_owner: int | None = None) -> bool:
        """Whether bookie ``i`` listens on its address and is registered (writable) by a session other than
        ``stale_owner`` (the one a killed incarnation left, which lingers until that session expires), seen from the
        router."""
        owner = self.registration_owner(i)
        return (
            owner is not None
            and owner != stale_owner
            and self.bed.reachable(self.bed.address_of(self.hosts[i]), BOOKIE_PORT)
        )

    def wait_registered(self, i: int, timeout: float = 120.0, stale_owner: int | None = None) -> None:
        bookie = self.bookies[i]
        wait_until(
            lambda: self.is_serving(i, stale_owner),
            timeout,
            f"bookie {bookie.bookie_id} on {self.bed.address_of(self.hosts[i])} to listen and register\n"
            f"{bookie.log_tail(30)}",
        )

    def start(self, i: int, timeout: float = 120.0) -> int:
        """Start bookie ``i`` (not running) and wait until it serves under a registration of its own; started again
        whenever it exits first (a bookie gives up starting when it cannot reach ZooKeeper in time), as an
        operator's supervisor would. How many starts it took."""
        bookie = self.bookies[i]
        stale = self.registration_owner(i)
        bookie.launch()
        starts = 1
        deadline = time.monotonic() + timeout
        while not self.is_serving(i, stale):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"bookie {bookie.bookie_id} to start and register: not within {timeout:g} s ({starts} starts)\n"
                    f"{bookie.log_tail(30)}"
                )
            if not bookie.is_alive:
                bookie.launch()
                starts += 1
            time.sleep(0.1)
        return starts

    def _write_topology_script(self) -> Path:
        """The operator's DNS-to-switch script: a bookie's address (or BP-41 name) in, its rack out."""
        cases = []
        for bookie, host in zip(self.bookies, self.hosts):
            h = self.bed.hosts[host]
            cases.append(f"    {shlex.quote(h.address)}|{shlex.quote(bookie.bookie_id.rsplit(':', 1)[0])}) echo {h.rack_name} ;;")
        text = "#!/bin/sh\nfor host in \"$@\"; do\n  case \"$host\" in\n" + "\n".join(cases) + "\n    *) echo /default-rack ;;\n  esac\ndone\n"
        path = self.base_dir / "topology.sh"
        path.write_text(text)
        path.chmod(0o755)
        return path

    def rewrite_topology_script(self) -> None:
        """After a host moved (BP-41): the script maps its new address too."""
        self._write_topology_script()

    # -- the client -------------------------------------------------------------------------------------------------

    def client_conf(self, **overrides: Any) -> dict[str, Any]:
        return {
            "ensemblePlacementPolicy": "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy",
            "networkTopologyScriptFileName": str(self.topology_script),
            "zkTimeout": 60,
            **overrides,
        }

    def client(self, **conf: Any) -> BookKeeper:
        """A client built in the client host's namespace (its connections and threads stay there)."""
        merged = self.client_conf(**conf)
        return self.bed.call_in("client", lambda: BookKeeper(self.metadata_service_uri, conf=merged))

    # -- bookies ----------------------------------------------------------------------------------------------------

    def index_of(self, bookie_id: str) -> int:
        return [b.bookie_id for b in self.bookies].index(bookie_id)

    def host_of(self, bookie_id: str) -> str:
        return self.hosts[self.index_of(bookie_id)]

    def racks_of_write_quorums(self, ensemble: Sequence[str], write_quorum: int) -> list[set[str]]:
        """The racks each write quorum of ``ensemble`` covers (quorum ``i``: positions ``i .. i+Qw-1``, round)."""
        racks = {b.bookie_id: self.bed.hosts[h].rack_name for b, h in zip(self.bookies, self.hosts)}
        return [
            {racks[ensemble[(i + k) % len(ensemble)]] for k in range(write_quorum)} for i in range(len(ensemble))
        ]

    def metrics_text(self, i: int, http_timeout: float = 10.0) -> str:
        """Python bookie ``i``'s ``/metrics`` over HTTP, fetched from the router (which reaches every host)."""
        url = f"http://{self.bed.address_of(self.hosts[i])}:{self.bookies[i].values['httpServerPort']}/metrics"
        return self.call_in_router(lambda: urllib.request.urlopen(url, timeout=http_timeout).read().decode())

    def metric(self, i: int, name: str, *, http_timeout: float = 10.0, **labels: str) -> float | None:
        """The value of sample ``name`` with exactly these labels in Python bookie ``i``'s ``/metrics`` (as
        :meth:`PythonBookieCluster.metric`); None when it has no such sample."""
        return sample_value(self.metrics_text(i, http_timeout), name, **labels)

    def journal_syncs_slower_than(self, i: int, milliseconds: float) -> int:
        """How many of Python bookie ``i``'s journal syncs since its start took longer than ``milliseconds`` (one of
        its ``bookie_journal_JOURNAL_SYNC`` histogram's bucket bounds), read from its ``/metrics`` over HTTP."""
        return histogram_count_above(self.metrics_text(i), "bookie_journal_JOURNAL_SYNC", milliseconds)

    def is_read_only(self, i: int) -> bool:
        """Whether bookie ``i`` is registered read-only (``available/readonly``)."""
        path = f"{ROOT}/available/readonly/{self.bookies[i].bookie_id}"
        return self.call_in_router(lambda: self.control.exists(path)) is not None

    def restart(self, i: int) -> int:
        """Kill bookie ``i`` with -9 (if it runs) and :meth:`start` it again."""
        bookie = self.bookies[i]
        if bookie.process is not None and bookie.process.is_alive:
            bookie.process.kill()
        return self.start(i)

    def move_bookie(self, i: int, address: str) -> None:
        """Stop Python bookie ``i``, give its host ``address``, start it there under the same BookieId (BP-41)."""
        bookie = self.bookies[i]
        assert isinstance(bookie, PythonBookie), "only Python bookies move"
        assert bookie.process is not None
        bookie.process.terminate(30)
        self.bed.move(self.hosts[i], address)
        for key in ("advertisedAddress", "bindAddress", "httpServerHost"):
            bookie.values[key] = address
        bookie.write_conf()
        self.rewrite_topology_script()
        bookie.launch()
        self.wait_registered(i)

    def close(self) -> None:
        if self._control is not None:
            try:
                self._control.stop()
                self._control.close()
            except Exception:  # noqa: BLE001 - tear-down goes on
                pass
        for bookie in self.bookies:
            if bookie.process is not None:
                bookie.process.kill()
        if getattr(self, "zookeeper", None) is not None:
            self.zookeeper.kill()
        self.bed.close()
        for disk in [*self.journal_disks.values(), *self.ledger_disks.values()]:
            disk.close()

    def __enter__(self) -> "NetnsCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def log_tails(self, lines: int = 20) -> str:
        return "\n".join(f"--- {b.bookie_id}\n{b.log_tail(lines)}" for b in self.bookies)


def ids(cluster: NetnsCluster, indexes: Sequence[int]) -> list[str]:
    return [cluster.bookies[i].bookie_id for i in indexes]
