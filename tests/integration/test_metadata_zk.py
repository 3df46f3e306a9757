"""bkspark.metadata against a real ZooKeeper: LAYOUT, ids, ledger znodes, CAS, listing, registry."""

from __future__ import annotations

import threading
import time

import pytest
from kazoo.exceptions import ConnectionLoss

from bkspark.errors import (
    BadMetadataError,
    BookieUnavailableError,
    LedgerExistsError,
    MetadataVersionError,
    NoSuchLedgerMetadataError,
)
from bkspark.metadata import BookieRegistry, ZkMetadataStore
from bkspark.protocol import ledger_metadata as md_codec
from bkspark.protocol import service_info as si
from bkspark.protocol.digest import DigestType
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState

pytestmark = pytest.mark.integration

BOOKIES = ("10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181")


def _md(**kw: object) -> LedgerMetadata:
    base = dict(
        ensemble_size=3,
        write_quorum_size=2,
        ack_quorum_size=2,
        digest_type=DigestType.CRC32C,
        password=b"pw",
        ensembles={0: BOOKIES},
        custom_metadata={"app": b"demo"},
    )
    base.update(kw)
    return LedgerMetadata(**base)  # type: ignore[arg-type]


@pytest.fixture
def store(zk_root):  # type: ignore[no-untyped-def]
    s = ZkMetadataStore(zk_root.metadata_service_uri, zk=zk_root.zk_client)
    yield s
    s.close()


def test_layout_scheme_and_refusal_of_other_manager(zk_root, store) -> None:  # type: ignore[no-untyped-def]
    assert store.scheme == "hierarchical"
    data, _ = zk_root.zk_client.get(f"{zk_root.path}/LAYOUT")
    assert data == b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
    uri = zk_root.metadata_service_uri.replace("zk+hierarchical", "zk+longhierarchical")
    with pytest.raises(BadMetadataError):
        ZkMetadataStore(uri, zk=zk_root.zk_client)


def _zookeeper_sessions_running() -> int:
    """kazoo clients of this process with a running connection thread."""
    return sum(1 for t in threading.enumerate() if t.name.endswith("(zk_loop)") and t.is_alive())


def test_a_refused_root_leaves_no_zookeeper_session_running(zk_root) -> None:  # type: ignore[no-untyped-def]
    """A store (or a client) that opens its own session and then refuses the root, because it is no cluster or its
    LAYOUT disagrees with the URI, stops that session before it raises.  Before, every refused construction left a
    connected kazoo client behind (a Spark task retried on a mistyped root leaked one per attempt)."""
    from bkspark.client import BookKeeper

    before = _zookeeper_sessions_running()
    not_a_cluster = zk_root.metadata_service_uri.rsplit("/", 1)[0] + "/no-such-cluster-root"
    other_scheme = zk_root.metadata_service_uri.replace("zk+hierarchical", "zk+longhierarchical")
    for _ in range(3):
        with pytest.raises(BadMetadataError, match="not a BookKeeper cluster root"):
            ZkMetadataStore(not_a_cluster, create_layout=False)
        with pytest.raises(BadMetadataError):
            ZkMetadataStore(other_scheme)
        with pytest.raises(BadMetadataError):
            BookKeeper(other_scheme)
    deadline = time.monotonic() + 10
    while _zookeeper_sessions_running() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _zookeeper_sessions_running() == before


def test_missing_layout_is_created_like_java(zookeeper) -> None:  # type: ignore[no-untyped-def]
    client = zookeeper.client()
    try:
        root = f"/bk-fresh-layout-{time.monotonic_ns()}"
        s = ZkMetadataStore(f"zk+longhierarchical://{zookeeper.connect_string}{root}", zk=client)
        assert s.scheme == "longhierarchical"
        data, _ = client.get(f"{root}/LAYOUT")
        assert data == b"2\norg.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory:1"
        lid = s.generate_ledger_id()
        s.create_ledger_metadata(lid, _md())
        assert client.exists(f"{root}/000/0000/0000/0000/L{lid:04d}") is not None
    finally:
        client.stop()
        client.close()


def test_ledger_ids_from_idgen_are_unique_and_leave_no_znodes(zk_root, store) -> None:  # type: ignore[no-untyped-def]
    ids = [store.generate_ledger_id() for _ in range(20)]
    assert len(set(ids)) == 20
    assert ids == sorted(ids)
    time.sleep(0.2)
    assert zk_root.zk_client.get_children(f"{zk_root.path}/idgen") == []


def test_long_ids_once_idgen_long_exists(zk_root, store) -> None:  # type: ignore[no-untyped-def]
    zk_root.zk_client.create(f"{zk_root.path}/idgen-long")
    fresh = ZkMetadataStore(zk_root.metadata_service_uri, zk=zk_root.zk_client)
    lid = fresh.generate_ledger_id()
    assert lid >> 32 == 1  # HOB-0000000001 is created first
    assert zk_root.zk_client.exists(f"{zk_root.path}/idgen-long/HOB-0000000001") is not None
    fresh.create_ledger_metadata(lid, _md())
    digits = f"{lid:019d}"
    path = f"{zk_root.path}/{digits[:3]}/{digits[3:7]}/{digits[7:11]}/{digits[11:15]}/L{digits[15:]}"
    assert zk_root.zk_client.exists(path) is not None
    assert list(fresh.list_ledgers()) == [lid]


def test_create_read_cas_close_delete(zk_root, store) -> None:  # type: ignore[no-untyped-def]
    lid = store.generate_ledger_id()
    created = store.create_ledger_metadata(lid, _md())
    assert created.version == 0
    assert created.metadata.ctoken > 0
    raw, _ = zk_root.zk_client.get(store.ledger_path(lid))
    assert raw.startswith(b"BookieMetadataFormatVersion\t3\n")
    assert md_codec.parse(raw).ctoken == created.metadata.ctoken

    with pytest.raises(LedgerExistsError):
        store.create_ledger_metadata(lid, _md())

    read = store.read_ledger_metadata(lid)
    assert read.version == 0 and read.metadata.ensembles == {0: BOOKIES}
    assert read.metadata.ctime > 0  # from the znode's stat.ctime (Java's fallback)

    closed = store.write_ledger_metadata(lid, read.metadata.close(9, 1234), read.version)
    assert closed.version == 1
    with pytest.raises(MetadataVersionError):
        store.write_ledger_metadata(lid, read.metadata.in_recovery(), read.version)
    after = store.read_ledger_metadata(lid)
    assert after.metadata.state == LedgerState.CLOSED
    assert (after.metadata.last_entry_id, after.metadata.length) == (9, 1234)
    assert after.metadata.ctoken == 0  # Java's updates drop the cToken

    store.delete_ledger_metadata(lid)
    with pytest.raises(NoSuchLedgerMetadataError):
        store.read_ledger_metadata(lid)
    # Empty parents are removed as Java's asyncDeleteFullPathOptimistic does.
    assert zk_root.zk_client.exists(store.ledger_path(lid).rsplit("/", 1)[0]) is None
    store.delete_ledger_metadata(lid)  # absent: fine
    with pytest.raises(NoSuchLedgerMetadataError):
        store.write_ledger_metadata(lid, read.metadata, 0)


def test_create_lost_to_connection_loss_is_not_duplicated(zk_root, store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The create reached ZooKeeper but the answer was lost: we recognise our own znode by cToken."""
    lid = store.generate_ledger_id()
    real_create = store.zk.create
    calls = []

    def create_then_lose(path, value=b"", *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(path)
        real_create(path, value, *args, **kwargs)
        raise ConnectionLoss()

    monkeypatch.setattr(store.zk, "create", create_then_lose)
    result = store.create_ledger_metadata(lid, _md())
    assert len(calls) == 1  # not retried blindly
    assert result.version == 0
    monkeypatch.undo()

    # Someone else's znode at the same id is not mistaken for ours.
    other = store.generate_ledger_id()
    store.create_ledger_metadata(other, _md())
    monkeypatch.setattr(store.zk, "create", lambda *a, **k: (_ for _ in ()).throw(ConnectionLoss()))
    with pytest.raises(LedgerExistsError):
        store.create_ledger_metadata(other, _md())


def test_conditional_set_after_connection_loss_checks_what_was_applied(zk_root, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A set lost to a connection loss: ours if applied; retried within the policy's bounds otherwise."""
    from bkspark.errors import MetadataError
    from bkspark.metadata.retry import ZkRetry

    store = ZkMetadataStore(zk_root.metadata_service_uri, zk=zk_root.zk_client, retry=ZkRetry(max_tries=3, delay=0.01))
    lid = store.generate_ledger_id()
    created = store.create_ledger_metadata(lid, _md())
    real_set = store.zk.set
    calls: list[int] = []

    def set_then_lose(path, value, version=-1):  # type: ignore[no-untyped-def]
        calls.append(version)
        real_set(path, value, version=version)
        raise ConnectionLoss()

    monkeypatch.setattr(store.zk, "set", set_then_lose)
    written = store.write_ledger_metadata(lid, created.metadata.in_recovery(), created.version)
    assert written.version == 1 and calls == [0]  # applied once, recognised as ours, not repeated
    lost: list[int] = []

    def always_lose(path, value, version=-1):  # type: ignore[no-untyped-def]
        lost.append(version)
        raise ConnectionLoss()

    monkeypatch.setattr(store.zk, "set", always_lose)
    with pytest.raises(MetadataError, match="kept losing the connection"):
        store.write_ledger_metadata(lid, written.metadata, written.version)
    assert lost == [written.version] * 3  # bounded by the policy (max_tries=3), not tried for ever
    monkeypatch.undo()
    assert store.read_ledger_metadata(lid).version == 1  # nothing half-written


def test_adv_ids_scopes_and_listing(zk_root, store) -> None:  # type: ignore[no-untyped-def]
    small = [3, 17, 2147483646]
    big = [2147483647, 9223372036854775807]
    for lid in small + big:
        store.create_ledger_metadata(lid, _md())
    assert zk_root.zk_client.exists(f"{zk_root.path}/21/4748/L3646") is not None
    assert zk_root.zk_client.exists(f"{zk_root.path}/000/0000/0021/4748/L3647") is not None
    store.create_ledger_metadata(5, _md(), scope_id=42)
    store.create_ledger_metadata(6, _md(), scope_id=42)
    store.create_ledger_metadata(5, _md(), scope_id=-7)
    assert list(store.list_ledgers()) == sorted(small + big)
    assert list(store.list_ledgers(scope_id=42)) == [5, 6]
    assert list(store.list_ledgers(scope_id=-7)) == [5]
    assert store.read_ledger_metadata(5, scope_id=42).version == 0
    with pytest.raises(NoSuchLedgerMetadataError):
        store.read_ledger_metadata(5)
    store.delete_ledger_metadata(6, scope_id=42)
    assert list(store.list_ledgers(scope_id=42)) == [5]


def test_concurrent_cas_exactly_one_wins(zk_root, store) -> None:  # type: ignore[no-untyped-def]
    lid = store.generate_ledger_id()
    v0 = store.create_ledger_metadata(lid, _md())
    results: list[str] = []

    def attempt(i: int) -> None:
        try:
            store.write_ledger_metadata(lid, v0.metadata.close(i, i), v0.version)
            results.append("won")
        except MetadataVersionError:
            results.append("lost")

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["lost"] * 5 + ["won"]


def test_registry_lists_watches_and_resolves(zk_root) -> None:  # type: ignore[no-untyped-def]
    zk = zk_root.zk_client
    avail = f"{zk_root.path}/available"
    reg = BookieRegistry(zk, zk_root.path)
    changes: list[tuple[frozenset[str], frozenset[str]]] = []
    reg.add_listener(lambda w, r: changes.append((w, r)))
    assert reg.writable_bookies() == frozenset()

    info = si.BookieServiceInfo.for_bookie("127.0.0.1", 4001, properties={"bkspark.extensions": "scope-ids,batch-read-v3"})
    zk.create(f"{avail}/bookie-a", si.serialize(info), ephemeral=True)
    zk.create(f"{avail}/10.1.1.1:3181", b"", ephemeral=True)  # a <= 4.10 bookie: empty data
    zk.create(f"{avail}/readonly/bookie-ro", si.serialize(si.BookieServiceInfo.for_bookie("127.0.0.2", 4002)), ephemeral=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (len(reg.writable_bookies()) < 2 or not reg.readonly_bookies()):
        time.sleep(0.05)
    assert reg.writable_bookies() == {"bookie-a", "10.1.1.1:3181"}
    assert reg.readonly_bookies() == {"bookie-ro"}
    assert changes[-1] == (reg.writable_bookies(), reg.readonly_bookies())

    assert reg.resolve("bookie-a") == ("127.0.0.1", 4001)
    assert reg.resolve("10.1.1.1:3181") == ("10.1.1.1", 3181)
    assert reg.resolve("bookie-ro") == ("127.0.0.2", 4002)
    assert reg.extensions("bookie-a") == {"scope-ids", "batch-read-v3"}
    with pytest.raises(BookieUnavailableError):
        reg.resolve("bookie-unknown")  # not registered: counts as down
    assert reg.resolve("somehost:0") == ("somehost", 0)  # dummy local ids are legacy

    # The bookie comes back on a new address: the data watch drops the cached one.
    zk.delete(f"{avail}/bookie-a")
    moved = si.BookieServiceInfo.for_bookie("127.0.0.9", 4009)
    zk.create(f"{avail}/bookie-a", si.serialize(moved), ephemeral=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and reg.resolve("bookie-a") != ("127.0.0.9", 4009):
        time.sleep(0.05)
    assert reg.resolve("bookie-a") == ("127.0.0.9", 4009)
    reg.close()

    disabled = BookieRegistry(zk, zk_root.path, address_resolver_enabled=False)
    assert disabled.resolve("10.9.9.9:3181") == ("10.9.9.9", 3181)
    with pytest.raises(BookieUnavailableError):
        disabled.resolve("bookie-a")  # ids are addresses in this mode


@pytest.mark.parametrize("tracking", [True, False], ids=["tracking", "no-tracking"])
def test_bookie_address_tracking_caches_and_watches_registrations(zk_root, monkeypatch, tracking: bool) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md, "Configuration": ``enableBookieAddressTracking`` (on by default) caches each bookie's
    registration and watches it, so a resolve costs no ZooKeeper read until the registration changes; off, every
    resolve reads the registration again (and so always finds the current address too)."""
    zk = zk_root.zk_client
    path = f"{zk_root.path}/available/bookie-t"
    zk.create(path, si.serialize(si.BookieServiceInfo.for_bookie("127.0.0.1", 4001)), ephemeral=True)
    reads: list[str] = []
    get = zk.get

    def counting_get(znode: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        reads.append(znode)
        return get(znode, *args, **kwargs)

    monkeypatch.setattr(zk, "get", counting_get)
    reg = BookieRegistry(zk, zk_root.path, address_tracking=tracking)
    try:
        assert [reg.resolve("bookie-t") for _ in range(3)] == [("127.0.0.1", 4001)] * 3
        assert reads.count(path) == (1 if tracking else 3)
        zk.set(path, si.serialize(si.BookieServiceInfo.for_bookie("127.0.0.7", 4007)))  # re-registered elsewhere
        deadline = time.monotonic() + 5
        while reg.resolve("bookie-t") != ("127.0.0.7", 4007) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reg.resolve("bookie-t") == ("127.0.0.7", 4007)  # the watch dropped the cached address
    finally:
        reg.close()


def test_multi_reads_answer_as_one_get_data_per_znode_would(zk_root) -> None:  # type: ignore[no-untyped-def]
    # ZooKeeper's multiRead (bkspark.metadata.multiread): several requests of many getData each, a missing
    # znode and one the client may not read among them, and a chrooted client.
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError, NoNodeError
    from kazoo.security import make_digest_acl

    from bkspark.metadata.multiread import get_many

    zk = zk_root.zk_client
    base = f"{zk_root.path}/multiread"
    paths = [f"{base}/n{i:04d}" for i in range(600)]
    tx = zk.transaction()
    tx.create(base, b"")
    for i, path in enumerate(paths):
        if i % 97 != 5:
            tx.create(path, b"data-%d" % i + bytes(i % 300))
    assert all(r is not None and not isinstance(r, Exception) for r in tx.commit())
    secret = f"{base}/secret"
    zk.create(secret, b"hidden", acl=[make_digest_acl("someone", "else", all=True)])
    asked = paths + [secret, f"{base}/never"]
    got = list(get_many(zk, asked, per_request=256))
    assert [p for p, _ in got] == asked
    for i, (path, result) in enumerate(got[:600]):
        if i % 97 == 5:
            assert isinstance(result, NoNodeError)
        else:
            assert result == zk.get(path)  # data and stat
    assert isinstance(got[600][1], NoAuthError) and isinstance(got[601][1], NoNodeError)

    chrooted = KazooClient(hosts=zk_root.connect_string + zk_root.path, timeout=10.0)
    chrooted.start(15)
    try:
        short = [p.removeprefix(zk_root.path) for p in paths[:10]]
        assert [r for _, r in get_many(chrooted, short)][:5] == [zk.get(p) for p in paths[:5]]
    finally:
        chrooted.stop()
        chrooted.close()


def test_multi_reads_size_their_requests_so_answers_stay_near_the_byte_bound(zk_root, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Znodes of 200 KB (metadata of a ledger with thousands of ensemble segments is that large): after the first
    # answer, a request asks for no more znodes than fit ANSWER_BYTES; every znode is still read as getData reads it.
    from bkspark.metadata import multiread

    zk = zk_root.zk_client
    base = f"{zk_root.path}/bigreads"
    zk.create(base, b"")
    paths = [f"{base}/n{i:02d}" for i in range(40)]
    for i, path in enumerate(paths):
        zk.create(path, bytes([i]) * 200_000)
    asked: list[int] = []
    real_send = multiread._send
    monkeypatch.setattr(multiread, "_send", lambda client, window: asked.append(len(window)) or real_send(client, window))
    got = list(multiread.get_many(zk, paths))
    assert [p for p, _ in got] == paths and [r for _, r in got] == [zk.get(p) for p in paths]
    fits = multiread.ANSWER_BYTES // (200_000 + multiread._RESULT_OVERHEAD)
    # A fresh client has one request in flight until the first answer, so the second is already sized by it.
    assert asked[0] == multiread.FIRST_REQUEST and set(asked[1:-1]) == {fits} and asked[-1] <= fits
    assert sum(asked) == len(paths)


@pytest.mark.fault
def test_a_multi_read_lost_with_the_connection_is_read_again(zk_root) -> None:  # type: ignore[no-untyped-def]
    # Planning reads 600 ledgers' metadata through a proxy; the connection is reset while a multiRead's answer
    # is being swallowed. The store's retry policy sends it again once kazoo has reconnected: every ledger is read.
    from tests.harness.proxy import Direction, FaultProxy

    host, port = zk_root.connect_string.split(",")[0].rsplit(":", 1)
    with FaultProxy((host, int(port)), name="zk") as proxy:
        uri = zk_root.metadata_service_uri.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}")
        proxied = ZkMetadataStore(uri)
        try:
            refs = [(0, 5_000 + i) for i in range(600)]
            for _, ledger_id in refs:
                proxied.create_ledger_metadata(ledger_id, _md(custom_metadata={"n": str(ledger_id).encode()}))
            accepted = proxy.connections_accepted
            reads = proxied.read_many_ledger_metadata(refs)
            first = [next(reads) for _ in range(32)]  # the first request's answer, nothing left in flight
            proxy.blackhole(Direction.DOWN)  # the next requests' answers are swallowed ...
            cut = threading.Timer(0.5, lambda: (proxy.reset(), proxy.restore()))  # ... until the connection dies
            cut.start()
            rest = list(reads)
            cut.join()
            assert proxy.connections_accepted > accepted  # kazoo reconnected: the read did cross a lost connection
            got = first + rest
            assert [(s, lid) for s, lid, _ in got] == refs
            assert all(v is not None and v.metadata.custom_metadata == {"n": str(lid).encode()} for _, lid, v in got)
        finally:
            proxied.close()


def test_a_multi_read_failure_no_retry_fixes_is_a_metadata_error(zk_root, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # An expired session is not sent again; connection loss past the policy's tries gives up; both are typed.
    from kazoo.exceptions import SessionExpiredError

    from bkspark.errors import MetadataError
    from bkspark.metadata import multiread
    from bkspark.metadata.retry import ZkRetry

    store = ZkMetadataStore(zk_root.metadata_service_uri, zk=zk_root.zk_client, retry=ZkRetry(max_tries=3, delay=0.01))
    store.create_ledger_metadata(7, _md())
    sent: list[tuple[str, ...]] = []

    def failing(error: BaseException):  # type: ignore[no-untyped-def]
        def send(client, window):  # type: ignore[no-untyped-def]
            sent.append(tuple(window))
            result = client.handler.async_result()
            result.set_exception(error)
            return result
        return send

    monkeypatch.setattr(multiread, "_send", failing(SessionExpiredError()))
    with pytest.raises(MetadataError, match="session expired"):
        list(store.read_many_ledger_metadata([(0, 7)]))
    assert len(sent) == 1
    sent.clear()
    monkeypatch.setattr(multiread, "_send", failing(ConnectionLoss()))
    with pytest.raises(MetadataError, match="retries exhausted"):
        list(store.read_many_ledger_metadata([(0, 7)]))
    assert len(sent) == 3  # max_tries, the first send included
    monkeypatch.undo()
    assert [v.metadata for _, _, v in store.read_many_ledger_metadata([(0, 7)])] == [store.read_ledger_metadata(7).metadata]
