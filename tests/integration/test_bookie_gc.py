"""Garbage collection deletes exactly the ledgers whose metadata is gone, at Java's exact paths.

The metadata znodes are created here at literal paths (taken from the
worked examples of docs/protocol.md §8), not through bkspark.protocol.zk_paths, so a wrong path
scheme in the bookie would show up as a live ledger being deleted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bkspark.protocol import v2, v3, zk_paths
from bkspark.protocol.digest import Digester, master_key
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from tests.harness.python_bookie import PythonBookieCluster, RawBookieConnection
from tests.harness.zookeeper import init_new_cluster

pytestmark = [pytest.mark.integration]

KEY = master_key(b"gc")
DIGEST = Digester("CRC32C", b"gc")
LONG_LAYOUT = b"2\norg.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory:1"


def entry(ledger: int, eid: int, scope: int = 0) -> bytes:
    return DIGEST.package_entry(ledger, eid, eid - 1, 0, b"gc-%d-%d" % (ledger, eid), scope_id=scope)


def add_ledgers(port: int, ledgers: list[int]) -> None:
    with RawBookieConnection(port) as c:
        for ledger in ledgers:
            for eid in range(3):
                assert c.call_v2(v2.encode_add_request(0, KEY, entry(ledger, eid))).rc == v2.EOK


def present(port: int, ledger: int) -> bool:
    with RawBookieConnection(port) as c:
        rc = c.call_v2(v2.encode_read_request(ledger, 0)).rc
    assert rc in (v2.EOK, v2.ENOLEDGER)
    return rc == v2.EOK


def test_gc_hierarchical_layout_exact_paths(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root, zk = zk_root.path, zk_root.zk_client
    live = {
        5: "/00/0000/L0005",
        123456789: "/01/2345/L6789",
        2147483646: "/21/4748/L3646",
        2147483647: "/000/0000/0021/4748/L3647",  # the hybrid scheme switches to the long form here
        4294967301: "/000/0000/0042/9496/L7301",
    }
    dead = [6, 2147483648, 9223372036854775807]
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1) as cluster:
        port = cluster.bookies[0].port
        add_ledgers(port, [*live, *dead])
        # Scoped ledgers (our BP-35 extension) live under <root>/scopes.
        with RawBookieConnection(port) as c:
            for ledger in (5, 6):
                body = entry(ledger, 0, scope=3)
                resp = c.call_v3(v3.add_request(ledger, ledger, 0, KEY, body, scope_id=3))
                assert v3.response_status(resp) == pb.EOK
        for ledger, suffix in live.items():
            zk.create(root + suffix, b"metadata", makepath=True)
        zk.create(zk_paths.ledger_path(root, 5, scope_id=3), b"metadata", makepath=True)
        # A node for ledger 6 in the *long* form is not where the hierarchical manager looks.
        zk.create(root + "/000/0000/0000/0000/L0006", b"decoy", makepath=True)

        result = cluster.http(0, "PUT", "/api/v1/bookie/gc")
        deleted = sorted((d["scope"], d["ledger"]) for d in result["deleted"])
        assert deleted == sorted([(0, lg) for lg in dead] + [(3, 6)])
        for ledger in live:
            assert present(port, ledger), ledger
        for ledger in dead:
            assert not present(port, ledger), ledger
        with RawBookieConnection(port) as c:
            assert v3.response_status(c.call_v3(v3.read_request(1, 5, 0, scope_id=3))) == pb.EOK
            assert v3.response_status(c.call_v3(v3.read_request(2, 6, 0, scope_id=3))) == pb.ENOLEDGER

        # Deletion is durable: after a restart the dead ledgers stay gone, the live ones stay.
        assert cluster.stop(0) == 0
        cluster.start(0)
        assert all(present(port, lg) for lg in live)
        assert not any(present(port, lg) for lg in dead)

        # No LAYOUT (unreadable metadata): nothing is deleted, even ledgers without metadata.
        add_ledgers(port, [77])
        zk.delete(root + "/LAYOUT")
        assert cluster.http(0, "PUT", "/api/v1/bookie/gc") == {"deleted": [], "compactedEntryLogs": 0}
        assert present(port, 77)


def test_gc_long_hierarchical_layout(zookeeper, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    zk = zookeeper.client()
    root = "/bk-gc-long-layout"
    try:
        init_new_cluster(zk, root, layout=LONG_LAYOUT)
        uri = f"zk+longhierarchical://{zookeeper.connect_string}{root}"
        with PythonBookieCluster(uri, tmp_path, bookies=1) as cluster:
            port = cluster.bookies[0].port
            add_ledgers(port, [5, 6])
            zk.create(root + "/000/0000/0000/0000/L0005", b"metadata", makepath=True)
            zk.create(root + "/00/0000/L0006", b"decoy: the short form is not used by this layout", makepath=True)
            result = cluster.http(0, "PUT", "/api/v1/bookie/gc")
            assert result == {"deleted": [{"scope": 0, "ledger": 6}], "compactedEntryLogs": 0}
            assert present(port, 5) and not present(port, 6)
    finally:
        zk.delete(root, recursive=True)
        zk.stop()
        zk.close()


def test_gc_rounds_run_every_gc_wait_time_on_their_own(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """docs/bookie.md, "Cluster membership": a round runs every ``gcWaitTime`` without being asked (the other tests
    ask with ``PUT /api/v1/bookie/gc``): at 1 s the ledger without metadata goes within a few rounds, the other stays."""
    import time

    root, zk = zk_root.path, zk_root.zk_client
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides={"gcWaitTime": 1000})
    with cluster:
        port = cluster.bookies[0].port
        add_ledgers(port, [5, 6])
        zk.create(root + "/00/0000/L0005", b"metadata", makepath=True)
        deadline = time.monotonic() + 30
        while present(port, 6) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not present(port, 6), cluster.log_tail(0)
        assert present(port, 5)
        assert '"gc: deleted ledger 6 (scope 0)' in cluster.log_tail(0, 200)
