"""Cluster membership of the Python bookie: BP-41 ids, cookies, read-only mode, HTTP, clean shutdown."""

from __future__ import annotations

import time
import urllib.error
from pathlib import Path

import pytest
from kazoo.exceptions import KazooException

from bkspark.protocol import service_info as si
from bkspark.protocol import v2
from bkspark.protocol.cookie import Cookie
from bkspark.protocol.digest import Digester, master_key
from tests.harness.deadline import GENEROUS, finishes_within
from tests.harness.java_bookkeeper import DEFAULT_BK_VERSION
from tests.harness.ports import free_port
from tests.harness.python_bookie import PythonBookie, PythonBookieCluster, RawBookieConnection

pytestmark = [pytest.mark.integration]

KEY = master_key(b"reg")
DIGEST = Digester("CRC32", b"reg")


def entry(ledger: int, eid: int, payload: bytes) -> bytes:
    return DIGEST.package_entry(ledger, eid, eid - 1, 0, payload)


def registration(cluster: PythonBookieCluster, bookie_id: str, readonly: bool = False) -> si.BookieServiceInfo:
    sub = "available/readonly" if readonly else "available"
    data, _ = cluster.zk.get(f"{cluster.root}/{sub}/{bookie_id}")
    return si.parse(data, bookie_id)


def exits_refusing(bookie: PythonBookie) -> str:
    """Launch ``bookie``, which must refuse to start: wait for it to exit with status 1; its log's tail."""
    bookie.launch()
    assert bookie.process is not None
    deadline = time.monotonic() + 60
    while bookie.is_alive and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not bookie.is_alive and bookie.process.returncode == 1
    return bookie.log_tail(50)


@pytest.mark.compat
def test_custom_bookie_id_survives_a_port_change(zk_root, java_tools, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, bookie_ids=["py-bookie-A"])
    with cluster:
        bookie = cluster.bookies[0]
        info = registration(cluster, "py-bookie-A")
        assert si.endpoint_for(info) == ("127.0.0.1", bookie.port)
        assert info.properties["bkspark.extensions"] == "scope-ids,batch-read-v3"
        assert any(e.protocol == "http" and e.port == bookie.http_port for e in info.endpoints)
        cookie_data, _ = cluster.zk.get(f"{cluster.root}/cookies/py-bookie-A")
        cookie = Cookie.parse(cookie_data)
        assert cookie.bookie_host == "py-bookie-A" and cookie.instance_id == zk_root.instance_id
        assert (bookie.dir / "journal" / "current" / "VERSION").read_bytes() == cookie_data
        with RawBookieConnection(bookie.port) as c:
            assert c.call_v2(v2.encode_add_request(0, KEY, entry(3, 0, b"before the move"))).rc == v2.EOK

        assert cluster.stop(0) == 0
        old_port = bookie.port
        bookie.set_port(free_port())
        cluster.start(0)
        assert bookie.port != old_port
        assert si.endpoint_for(registration(cluster, "py-bookie-A")) == ("127.0.0.1", bookie.port)
        with RawBookieConnection(bookie.port) as c:
            assert bytes(c.call_v2(v2.encode_read_request(3, 0)).entry) == entry(3, 0, b"before the move")
        # The Java client resolves the BookieId to the new address.
        result = java_tools.shell(
            DEFAULT_BK_VERSION, zk_root.metadata_service_uri, "simpletest", "-e", "1", "-w", "1", "-a", "1", "-n", "50"
        )
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]


def test_cookie_mismatch_refuses_to_start(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, bookie_ids=["py-cookie"])
    with cluster:
        bookie = cluster.bookies[0]
        assert cluster.stop(0) == 0
        # Another ledger directory than the cookie names: refuse, with a message saying why.
        bookie.values["ledgerDirectories"] = str(bookie.dir / "other-ledgers")
        bookie.write_conf()
        log = exits_refusing(bookie)
        assert "cookie" in log and "ledgerDirs" in log and "Refusing to start" in log
        assert not cluster.registered()
        # Back to the right directories: it starts again.
        bookie.values["ledgerDirectories"] = str(bookie.dir / "ledgers")
        bookie.write_conf()
        cluster.start(0)
        # Someone else's directories (a different BookieId on the same data): refused too.
        assert cluster.stop(0) == 0
        bookie.values["bookieId"] = "py-cookie-impostor"
        bookie.custom_id = "py-cookie-impostor"
        bookie.write_conf()
        assert "bookieHost" in exits_refusing(bookie)


def test_readonly_mode_http_and_clean_shutdown(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1)
    with cluster:
        bookie_id = cluster.bookie_ids[0]
        port = cluster.bookies[0].port
        assert cluster.http_get(0, "/heartbeat") == "OK\n"
        state = cluster.http_get(0, "/api/v1/bookie/state")
        assert state == {"running": True, "readOnly": False, "shuttingDown": False, "availableForHighPriorityWrites": True}
        info = cluster.http_get(0, "/api/v1/bookie/info")
        assert info["totalSpace"] >= info["freeSpace"] > 0
        assert "bookkeeper_server_BATCH_READ_ENTRY_RESPONSE_SIZE_bucket" in cluster.http_get(0, "/metrics")
        with pytest.raises(urllib.error.HTTPError):
            cluster.http_get(0, "/no/such/page")

        assert cluster.http(0, "PUT", "/api/v1/bookie/state/readonly", {"readOnly": True}) == {"readOnly": True}
        deadline = time.monotonic() + 10
        while (cluster.registered(readonly=True) != [bookie_id] or bookie_id in cluster.registered()) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert cluster.registered(readonly=True) == [bookie_id]
        assert bookie_id not in cluster.registered()
        with RawBookieConnection(port) as c:
            assert c.call_v2(v2.encode_add_request(0, KEY, entry(1, 0, b"x"))).rc == v2.EREADONLY
        cluster.http(0, "PUT", "/api/v1/bookie/state/readonly", {"readOnly": False})
        deadline = time.monotonic() + 10
        # The writable node is created first, then the read-only one removed (as Java does).
        while (bookie_id not in cluster.registered() or cluster.registered(readonly=True)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bookie_id in cluster.registered() and not cluster.registered(readonly=True)
        with RawBookieConnection(port) as c:
            assert c.call_v2(v2.encode_add_request(0, KEY, entry(1, 0, b"x"))).rc == v2.EOK

        # SIGTERM: exit 0 and the registration is gone at once (no session-expiry wait).
        assert cluster.stop(0) == 0
        assert bookie_id not in cluster.registered()


def test_registration_comes_back_after_session_expiry(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kazoo.client import KazooClient

    from bkspark.config.bookie import BookieConfig
    from bookie_server.registration import Registration

    conf = BookieConfig.from_mapping(
        {
            "metadataServiceUri": zk_root.metadata_service_uri,
            "bookieId": "py-expiry",
            "bookiePort": 4181,
            "advertisedAddress": "127.0.0.1",
            "journalDirectories": str(tmp_path / "j"),
            "ledgerDirectories": str(tmp_path / "l"),
            "zkTimeout": 4000,
        }
    )
    reg = Registration(conf)
    reg.start()
    try:
        reg.check_cookies()
        reg.register(4181, None, readonly=False)
        # zkTimeout is the session's timeout (docs/bookie.md's configuration table): ZooKeeper's `cons` lists
        # the bookie's session with the timeout it negotiated.
        from tests.harness.zookeeper import four_letter_word

        session = f"sid=0x{reg.zk.client_id[0]:x}"
        [line] = [ln for ln in four_letter_word(zk_root.server.port, "cons").splitlines() if session in ln]
        assert ",to=4000," in line, line
        path = f"{zk_root.path}/available/py-expiry"
        first_owner = zk_root.zk_client.exists(path).ephemeralOwner
        # Expire the bookie's session from outside: a second client on the same session closes it.
        session_id, password = reg.zk.client_id
        thief = KazooClient(hosts=zk_root.connect_string, client_id=(session_id, password))
        thief.start(timeout=15)
        thief.stop()
        thief.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            stat = zk_root.zk_client.exists(path)
            if stat is not None and stat.ephemeralOwner != first_owner:
                break
            time.sleep(0.1)
        stat = zk_root.zk_client.exists(path)
        assert stat is not None and stat.ephemeralOwner != first_owner
        data, _ = zk_root.zk_client.get(path)
        assert si.endpoint_for(si.parse(data, "py-expiry")) == ("127.0.0.1", 4181)
    finally:
        reg.close()
    assert zk_root.zk_client.exists(f"{zk_root.path}/available/py-expiry") is None


@pytest.mark.fault
def test_bookie_survives_a_zookeeper_outage(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A zkTimeout of 3 s (the harness's default is 6 s): the outage only has to outlast it.
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides={"zkTimeout": 3000})
    with cluster:
        port = cluster.bookies[0].port
        with RawBookieConnection(port) as c:
            assert c.call_v2(v2.encode_add_request(0, KEY, entry(5, 0, b"before"))).rc == v2.EOK
        server = zk_root.server
        server.kill()
        try:
            time.sleep(4.5)  # longer than the bookie's zkTimeout (3 s)
            # The bookie keeps serving data while ZooKeeper is away.
            with RawBookieConnection(port) as c:
                assert c.call_v2(v2.encode_add_request(0, KEY, entry(5, 1, b"during"))).rc == v2.EOK
        finally:
            server.start()
        deadline = time.monotonic() + 60
        registered: list[str] = []
        while cluster.bookie_ids[0] not in registered and time.monotonic() < deadline:
            try:
                registered = cluster.registered()  # the harness's kazoo client reconnects by itself
            except KazooException:
                registered = []
            time.sleep(0.2)
        assert cluster.bookie_ids[0] in registered
        assert cluster.bookies[0].is_alive


def test_an_uninitialised_cluster_refuses_the_start_and_says_to_run_initnewcluster(zookeeper, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """docs/bookie.md, "Cluster membership": without ``<root>/INSTANCEID`` the bookie refuses to start (exit 1, one
    plain line naming ``initnewcluster``) and leaves nothing under the root: no cookie, no registration."""
    import subprocess
    import sys

    zk = zookeeper.client()
    root = "/bk-not-initialised"
    try:
        zk.ensure_path(f"{root}/available")  # a root someone began, but with no INSTANCEID
        uri = f"zk+hierarchical://{zookeeper.connect_string}{root}"
        argv = [
            sys.executable, "-m", "bookie_server", "--metadataServiceUri", uri, "--bookiePort", "0",
            "--journalDirectories", str(tmp_path / "j"), "--ledgerDirectories", str(tmp_path / "l"),
            "--advertisedAddress", "127.0.0.1", "-D", "bindAddress=127.0.0.1", "-D", "journalSyncData=false",
        ]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, input="")
        assert result.returncode == 1, result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("bookie-server: error: cannot start: "), result.stderr
        assert "not initialised" in last and "INSTANCEID" in last and "initnewcluster" in last, last
        assert "Traceback" not in result.stderr
        assert zk.get_children(root) == ["available"] and zk.get_children(f"{root}/available") == []
        assert not (tmp_path / "j" / "current" / "VERSION").exists()
    finally:
        zk.delete(root, recursive=True)
        zk.stop()
        zk.close()


def test_a_registration_left_by_another_session_is_waited_out_for_up_to_twice_zk_timeout(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """docs/bookie.md, "Cluster membership": a registration node left by a previous run (another ZooKeeper session)
    is waited out, up to 2 × zkTimeout: registering succeeds once that session ends within the bound; past it,
    the bookie gives up with an error saying the node is held (it may be the same bookie running twice)."""
    import threading

    from kazoo.client import KazooClient

    from bkspark.errors import MetadataError
    from bkspark.config.bookie import BookieConfig
    from bookie_server.registration import Registration

    conf = BookieConfig.from_mapping(
        {
            "metadataServiceUri": zk_root.metadata_service_uri,
            "bookieId": "py-left-behind",
            "advertisedAddress": "127.0.0.1",
            "journalDirectories": str(tmp_path / "j"),
            "ledgerDirectories": str(tmp_path / "l"),
            "zkTimeout": 2000,
        }
    )
    path = f"{zk_root.path}/available/py-left-behind"

    def previous_run() -> KazooClient:  # a session holding the node, as a killed bookie's does until it expires
        holder = zk_root.server.client()
        holder.create(path, b"previous run", ephemeral=True)
        return holder

    reg = Registration(conf)
    reg.start()
    try:
        reg.check_cookies()
        # The previous run's session ends 1.5 s in (its expiry): the registration waits, then takes the node.
        holder = previous_run()
        ends = threading.Timer(1.5, lambda: (holder.stop(), holder.close()))
        started = time.monotonic()
        ends.start()
        try:
            reg.register(4182, None, readonly=False)
        finally:
            ends.join()
        assert time.monotonic() - started >= 1.4
        stat = zk_root.zk_client.exists(path)
        assert stat is not None and stat.ephemeralOwner == reg.zk.client_id[0]
        reg.unregister()
        # A session that outlives 2 × zkTimeout (4 s): the registration gives up, and says why.
        holder = previous_run()
        try:
            started = time.monotonic()
            with pytest.raises(MetadataError, match="held by another ZooKeeper session.*already running"):
                finishes_within(GENEROUS, lambda: reg.register(4182, None, readonly=False))
            assert time.monotonic() - started >= 3.9  # it did wait 2 × zkTimeout (a slow machine only adds)
            assert zk_root.zk_client.get(path)[0] == b"previous run"
        finally:
            holder.stop()
            holder.close()
    finally:
        reg.close()


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_bookie_cleanly_with_a_final_checkpoint(zk_root, tmp_path: Path, signame: str) -> None:  # type: ignore[no-untyped-def]
    """docs/bookie.md, "Operations": SIGTERM and SIGINT both unregister, close the connections, sync the journal,
    checkpoint and close the ZooKeeper session, exit status 0: the next start replays no journal record (the
    checkpoint covered them all) and serves every acknowledged entry."""
    import json
    import os
    import signal

    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides={"flushInterval": 600000})
    with cluster:
        bookie = cluster.bookies[0]
        bookie_id = cluster.bookie_ids[0]
        with RawBookieConnection(bookie.port) as c:
            for eid in range(20):
                assert c.call_v2(v2.encode_add_request(0, KEY, entry(9, eid, b"stop %d" % eid))).rc == v2.EOK
        assert bookie.process is not None and bookie.process.pid is not None
        os.kill(bookie.process.pid, getattr(signal, signame))
        deadline = time.monotonic() + 30
        while bookie.process.returncode is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bookie.process.returncode == 0, bookie.log_tail()
        assert bookie_id not in cluster.registered()
        assert zk_root.zk_client.exists(f"{zk_root.path}/available/{bookie_id}") is None
        cluster.start(0)
        ready = [
            json.loads(line) for line in bookie.log_tail(400).splitlines()
            if line.startswith("{") and '"bookie storage ready"' in line
        ]
        assert ready[-1]["replayed_records"] == 0 and ready[-1]["ledgers"] == 1, ready
        with RawBookieConnection(bookie.port) as c:
            for eid in range(20):
                assert bytes(c.call_v2(v2.encode_read_request(9, eid)).entry) == entry(9, eid, b"stop %d" % eid)


def test_a_legacy_host_port_id_on_a_new_port_is_a_new_identity(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """docs/bookie.md, "Cluster membership", BP-41: with the legacy ``host:port`` BookieId a new port is a new
    identity, as in Java: the directories' cookie names the old one, so the bookie refuses to start on them (and
    registers nothing); a custom id may move (test_custom_bookie_id_survives_a_port_change).  Without HTTP, its
    registration has no ``httpserver`` endpoint."""
    cluster = PythonBookieCluster(
        zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides={"httpServerEnabled": "false"}
    )
    with cluster:
        bookie = cluster.bookies[0]
        old_id = bookie.bookie_id
        info = registration(cluster, old_id)
        assert [e.id for e in info.endpoints] == ["bookie"]
        assert cluster.stop(0) == 0
        bookie.set_port(free_port())
        last = exits_refusing(bookie).strip().splitlines()[-1]
        assert last.startswith("bookie-server: error: cannot start: ") and "bookieHost" in last, last
        assert cluster.registered() == []


def test_a_registration_moves_by_creating_the_new_node_before_removing_the_old(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """docs/bookie.md, "Cluster membership": read-only mode creates ``available/readonly/<bookieId>`` then removes the
    writable node, and back (so the bookie is never missing from both): ZooKeeper's watch events, delivered to one
    session in the order the changes were made, show the new node before the old one goes, both ways."""
    import threading

    from kazoo.recipe.watchers import ChildrenWatch

    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1)
    with cluster:
        bookie_id = cluster.bookie_ids[0]
        zk = zk_root.zk_client
        zk.ensure_path(f"{zk_root.path}/available/readonly")
        events: list[tuple[str, bool]] = []
        lock = threading.Lock()

        def watcher(where: str):  # type: ignore[no-untyped-def]
            def seen(children: list[str]) -> None:
                with lock:
                    present = bookie_id in children
                    if not any(w == where for w, _ in events) or [p for w, p in events if w == where][-1] != present:
                        events.append((where, present))
            return seen

        ChildrenWatch(zk, f"{zk_root.path}/available", watcher("writable"))
        ChildrenWatch(zk, f"{zk_root.path}/available/readonly", watcher("readonly"))

        def wait_for(n: int) -> None:
            deadline = time.monotonic() + 10
            while len(events) < n and time.monotonic() < deadline:
                time.sleep(0.02)

        wait_for(2)
        assert sorted(events) == [("readonly", False), ("writable", True)]
        events.clear()
        cluster.http(0, "PUT", "/api/v1/bookie/state/readonly", {"readOnly": True})
        wait_for(2)
        assert events == [("readonly", True), ("writable", False)]
        events.clear()
        cluster.http(0, "PUT", "/api/v1/bookie/state/readonly", {"readOnly": False})
        wait_for(2)
        assert events == [("writable", True), ("readonly", False)]


def test_bookie_port_zero_picks_a_free_port_and_registers_it(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """docs/bookie.md, configuration table: ``bookiePort`` 0 picks a free port, and the legacy BookieId and the
    registration carry the port picked (a client could not reach ``host:0``)."""
    import signal
    import subprocess
    import sys

    from tests.harness.ports import port_is_open

    argv = [
        sys.executable, "-m", "bookie_server", "--metadataServiceUri", zk_root.metadata_service_uri,
        "--bookiePort", "0", "--advertisedAddress", "127.0.0.1", "-D", "bindAddress=127.0.0.1",
        "--journalDirectories", str(tmp_path / "j"), "--ledgerDirectories", str(tmp_path / "l"),
        "-D", "journalSyncData=false",
    ]
    log = tmp_path / "bookie.log"
    with open(log, "w") as stderr:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 60
        ids: list[str] = []
        while not ids and process.poll() is None and time.monotonic() < deadline:
            ids = [c for c in zk_root.zk_client.get_children(f"{zk_root.path}/available") if c != "readonly"]
            time.sleep(0.1)
        [bookie_id] = ids
        host, port = bookie_id.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0 and port_is_open(int(port))
        data, _ = zk_root.zk_client.get(f"{zk_root.path}/available/{bookie_id}")
        assert si.endpoint_for(si.parse(data, bookie_id)) == ("127.0.0.1", int(port))
        with RawBookieConnection(int(port)) as c:
            assert c.call_v2(v2.encode_add_request(0, KEY, entry(1, 0, b"port 0"))).rc == v2.EOK
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
    assert process.returncode == 0, log.read_text()[-3000:]
