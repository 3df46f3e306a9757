"""The campaign's cluster, shared by every schedule of a module: ZooKeeper behind a fault proxy, and Python and
Java bookies each behind its own fault proxy (docs/reliability.md, "The campaign").

Bookies register the proxy's address as their BookieId and every campaign client runs with
``bookieAddressResolverEnabled=false``, so all bookie traffic of bkspark's and Java's clients crosses a proxy.
Bookies reach ZooKeeper directly: ZooKeeper faults are aimed at clients.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.harness.java_bookkeeper import JavaBookieCluster, JavaClusterFactory
from tests.harness.process import HarnessError
from tests.harness.proxy import FaultProxy, proxied_bookie_id
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZkRoot, expire_session

__all__ = ["CampaignCluster", "BookieRef", "CLIENT_CONF", "JAVA_CLIENT_CONF", "JAVA_VERSION"]

JAVA_VERSION = "4.17.3"
#: Bookie session timeout: short, so that a bookie killed with -9 can register again within seconds.
BOOKIE_ZK_TIMEOUT_MS = 2000
#: The journal is synced before an add is acknowledged, as in production: the power-cut fault (the journal's
#: test-only fault point, ``arm_power_cut``) really loses what was written and not yet synced (docs/reliability.md).
JOURNAL_SYNC_DATA = True
#: Settings of every campaign client (bkspark's): through the proxies, short timeouts so that faults cost seconds.
CLIENT_CONF = {
    "bookieAddressResolverEnabled": False,
    "addEntryTimeoutSec": 2,
    "readEntryTimeoutSec": 2,
    "speculativeReadTimeout": 300,
    "zkTimeout": 10,
}
#: The same for Apache BookKeeper's Java client (tools/java JavaClient reads it as its client configuration).
JAVA_CLIENT_CONF = {"bookieAddressResolverEnabled": False, "zkTimeout": 10000}


@dataclass(frozen=True)
class BookieRef:
    """One bookie of the campaign: which cluster, which index, its proxy."""

    kind: str  # "python" | "java"
    index: int
    proxy: FaultProxy

    @property
    def bookie_id(self) -> str:
        return proxied_bookie_id(self.proxy)


class CampaignCluster:
    """``python_bookies`` Python and ``java_bookies`` Java bookies on ``root``, ZooKeeper and bookies proxied."""

    def __init__(
        self,
        root: ZkRoot,
        base_dir: Path,
        java_factory: JavaClusterFactory,
        python_bookies: int = 3,
        java_bookies: int = 2,
    ) -> None:
        self.root = root
        self.zk_proxy = FaultProxy(("127.0.0.1", root.server.port), name="zookeeper")
        self.uri = f"zk+hierarchical://127.0.0.1:{self.zk_proxy.port}{root.path}"
        self.direct_uri = root.metadata_service_uri
        py_proxies = [FaultProxy(name=f"py{i}") for i in range(python_bookies)]
        java_proxies = [FaultProxy(name=f"java{i}") for i in range(java_bookies)]
        self.bookies = [BookieRef("python", i, p) for i, p in enumerate(py_proxies)]
        self.bookies += [BookieRef("java", i, p) for i, p in enumerate(java_proxies)]
        self.python = PythonBookieCluster(
            root.metadata_service_uri,
            base_dir / "python-bookies",
            bookies=python_bookies,
            bookie_ids=[proxied_bookie_id(p) for p in py_proxies],
            conf_overrides={"zkTimeout": BOOKIE_ZK_TIMEOUT_MS},
            journal_sync_data=JOURNAL_SYNC_DATA,
        )
        for proxy, address in zip(py_proxies, self.python.addresses):
            proxy.target = address
        self.java: JavaBookieCluster | None = None
        #: Python bookies running with the journal's power-cut fault point armed (disarmed by ``heal``).
        self.armed: set[int] = set()
        #: One start at a time: a fault's restart thread and a power cut's may both find a bookie dead.
        self._starting = threading.Lock()
        try:
            self.python.start_all()
            if java_bookies:
                self.java = java_factory(
                    JAVA_VERSION,
                    bookies=java_bookies,
                    root=root,
                    bookie_ids=[proxied_bookie_id(p) for p in java_proxies],
                    conf_overrides={"zkTimeout": BOOKIE_ZK_TIMEOUT_MS * 2},
                    journal_sync_data=JOURNAL_SYNC_DATA,
                    start=False,
                )
                for proxy, address in zip(java_proxies, self.java.addresses):
                    proxy.target = address
                self.java.start_all()
        except BaseException:
            self.close()
            raise

    # -- bookies ------------------------------------------------------------------------------------------------

    def is_alive(self, ref: BookieRef) -> bool:
        if ref.kind == "python":
            return self.python.bookies[ref.index].is_alive
        assert self.java is not None
        return self.java.is_alive(ref.index)

    def kill(self, ref: BookieRef) -> None:
        """kill -9 one bookie."""
        if ref.kind == "python":
            self.python.kill(ref.index)
        else:
            assert self.java is not None
            self.java.kill(ref.index)

    def start(self, ref: BookieRef) -> None:
        """Start a killed bookie again (same directories, port and id) and wait until it is registered; nothing if
        it runs."""
        with self._starting:
            if not self.is_alive(ref):
                self._start(ref)

    def _start(self, ref: BookieRef) -> None:
        if ref.kind == "python":
            self.python.start(ref.index, timeout=60)
        else:
            assert self.java is not None
            self.java.start(ref.index)

    def arm_power_cut(self, ref: BookieRef, at_batch: int) -> None:
        """Restart Python bookie ``ref`` with the journal's power-cut fault point armed
        (``bookie_server.journal.JournalFaults``): its ``at_batch``-th group commit is written to memory only and
        the process SIGKILLs itself before the sync, so what it wrote after its last fsync is really lost."""
        assert ref.kind == "python", "only Python bookies have the journal's fault point"
        self.python.crash(ref.index)
        with self.python.bookies[ref.index].power_cut_armed(at_batch):
            self.python.start(ref.index, timeout=60)
        self.armed.add(ref.index)

    def heal(self) -> None:
        """Lift every proxy fault, disarm armed power cuts and start every dead bookie: the state each schedule
        starts from."""
        for index in sorted(self.armed):
            self.python.crash(index)  # a kill -9 loses nothing synced; its restart below is unarmed
        self.armed.clear()
        self.zk_proxy.restore()
        for ref in self.bookies:
            ref.proxy.restore()
        for ref in self.bookies:
            if not self.is_alive(ref):
                self.start(ref)
        self.wait_all_registered()

    def wait_all_registered(self, timeout: float = 60.0) -> None:
        wanted = {ref.bookie_id for ref in self.bookies}
        deadline = time.monotonic() + timeout
        while True:
            children = set(self.root.zk_client.get_children(f"{self.root.path}/available"))
            if wanted <= children:
                return
            if time.monotonic() > deadline:
                raise HarnessError(f"bookies {sorted(wanted - children)} not registered after {timeout}s")
            time.sleep(0.1)

    # -- ZooKeeper ----------------------------------------------------------------------------------------------

    def expire_session(self, client_id: tuple[int, bytes]) -> None:
        """Expire a client's ZooKeeper session on this cluster's ZooKeeper (harness ``expire_session``)."""
        expire_session(self.root.connect_string, client_id)

    def close(self) -> None:
        try:
            self.python.close()
        finally:
            if self.java is not None:
                self.java.close()
            for ref in self.bookies:
                ref.proxy.close()
            self.zk_proxy.close()
