"""The client against bkspark's Python bookies: BP-35 scope ids over v3 and v3 batch reads."""

from __future__ import annotations

import uuid

import pytest

from bkspark.client import BookKeeper
from bkspark.errors import LedgerExistsError, NoSuchEntryError, NoSuchLedgerError, NoSuchLedgerMetadataError
from bkspark.protocol.ledger_metadata import LedgerState
from bkspark.protocol.ledger_name import ids_from_uuid
from tests.harness.python_bookie import PythonBookieCluster

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(zk_root, tmp_path):  # type: ignore[no-untyped-def]
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=3, journal_sync_data=False) as c:
        c.start_all()
        yield c


def test_scoped_ledger_roundtrip_over_v3(cluster, zk_root) -> None:  # type: ignore[no-untyped-def]
    scope_id, ledger_id = ids_from_uuid(uuid.UUID("8c1f5a4e-2b7d-4e11-9a3c-55aa0f00beef"))
    data = [b"scoped-%d" % i * 10 for i in range(60)]
    with BookKeeper(zk_root.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 3, 2, password=b"pw", scope_id=scope_id, ledger_id=ledger_id)
        assert (lh.scope_id, lh.ledger_id) == (scope_id, ledger_id)
        for d in data:
            lh.append_async(d)
        lh.close()
        assert bk.list_ledgers(scope_id=scope_id) == [ledger_id]
        assert ledger_id not in bk.list_ledgers()  # scope 0 does not see it
        with pytest.raises(NoSuchLedgerMetadataError):
            bk.open_ledger(ledger_id, password=b"pw")
        with pytest.raises(LedgerExistsError):
            bk.create_ledger(3, 3, 2, scope_id=scope_id, ledger_id=ledger_id)

        rh = bk.open_ledger(ledger_id, scope_id=scope_id, password=b"pw")
        assert rh.metadata.state == LedgerState.CLOSED and rh.last_add_confirmed == 59
        assert [e.payload for e in rh.read(0, 59)] == data
        assert all(e.scope_id == scope_id for e in rh.read(0, 3))
        batch = rh.batch_read(0, 100, 0)  # v3 BatchReadRequest (bookies advertise batch-read-v3)
        assert [e.payload for e in batch] == data[: len(batch)] and len(batch) >= 1
        assert [e.payload for e in rh] == data

        # Recovery of an open scoped ledger over v3 (fencing reads carry the scope id).
        lh2 = bk.create_ledger(3, 3, 2, password=b"pw", scope_id=scope_id, ledger_id=ledger_id + 1)
        for d in data[:10]:
            lh2.append(d)
        rh2 = bk.open_ledger(ledger_id + 1, scope_id=scope_id, password=b"pw")
        assert rh2.last_add_confirmed == 9
        assert [e.payload for e in rh2.read(0, 9)] == data[:10]
        bk.delete_ledger(ledger_id + 1, scope_id=scope_id)
        assert bk.list_ledgers(scope_id=scope_id) == [ledger_id]

        # No id given in a scope != 0: a random 63-bit id, no ZooKeeper counter (BP-35).
        auto = bk.create_ledger(3, 2, 2, scope_id=scope_id)
        assert 0 <= auto.ledger_id < 2**63 and auto.scope_id == scope_id
        auto.append(b"auto")
        auto.close()
        assert sorted(bk.list_ledgers(scope_id=scope_id)) == sorted([ledger_id, auto.ledger_id])
        assert bk.open_ledger(auto.ledger_id, scope_id=scope_id).read(0, 0)[0].payload == b"auto"


def test_scoped_request_goes_over_v3_even_with_v2_configured(cluster, zk_root) -> None:  # type: ignore[no-untyped-def]
    """The v2 codec cannot carry a scope id: a scoped read takes the v3 connection, never the v2 one."""
    import concurrent.futures

    with BookKeeper(zk_root.metadata_service_uri, useV2WireProtocol=True) as bk:
        ops = bk.aio.services.ops
        bookie = sorted(bk.writable_bookies())[0]
        done: concurrent.futures.Future = concurrent.futures.Future()
        bk.loop.call_soon_threadsafe(lambda: ops.read(bookie, 1, 0, 5, lambda _r, e, _a: done.set_result(e)))
        assert isinstance(done.result(10), (NoSuchLedgerError, NoSuchEntryError))  # the bookie answered
        assert bk.aio.pool.ready(bookie, "v3") is not None
        assert bk.aio.pool.ready(bookie, "v2") is None


def test_plain_ledgers_on_python_bookies(cluster, zk_root) -> None:  # type: ignore[no-untyped-def]
    with BookKeeper(zk_root.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 2, 2)
        for i in range(100):
            lh.append_async(b"p%d" % i)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        assert [e.payload for e in rh.read(0, 99)] == [b"p%d" % i for i in range(100)]
        assert [e.payload for e in rh] == [b"p%d" % i for i in range(100)]
        # GET_LIST_OF_ENTRIES_OF_LEDGER over v3: E=3/W=2, bookie 0 holds entries with index 0 in the write set.
        b0 = lh.metadata.last_ensemble[0]
        assert bk.list_entries_on_bookie(b0, lh.ledger_id) == [e for e in range(100) if e % 3 in (0, 2)]


def test_bookie_back_on_a_new_address_is_found_again(zk_root, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """BP-41: custom BookieIds resolve through BookieServiceInfo; a bookie that moves port is found again."""
    from tests.harness.ports import free_port

    ids = ["bookie-alpha", "bookie-beta", "bookie-gamma"]
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=3, bookie_ids=ids, journal_sync_data=False) as c:
        c.start_all()
        with BookKeeper(zk_root.metadata_service_uri, readEntryTimeoutSec=3, addEntryTimeoutSec=3) as bk:
            lh = bk.create_ledger(3, 3, 3)
            assert set(lh.metadata.last_ensemble) == set(ids)
            for i in range(20):
                lh.append(b"m%d" % i)
            lh.close()
            rh = bk.open_ledger(lh.ledger_id)
            bk.conf.reorderReadSequenceEnabled = False
            assert rh.read(0, 0)[0].payload == b"m0"  # connected to bookie-alpha at its first address
            moved = c.bookies[0]
            c.stop(0)
            c.wait_unregistered(0)
            old_port = moved.port
            moved.set_port(free_port())
            c.start(0)
            assert moved.port != old_port
            # Only bookie-alpha may answer entry 0 reads first; take the others away to be sure it is used.
            c.stop(1)
            c.stop(2)
            assert [e.payload for e in rh.read(0, 19)] == [b"m%d" % i for i in range(20)]
            assert bk.registry.resolve("bookie-alpha") == ("127.0.0.1", moved.port)


def test_address_resolver_disabled_uses_ids_as_addresses(cluster, zk_root) -> None:  # type: ignore[no-untyped-def]
    with BookKeeper(zk_root.metadata_service_uri, enableBookieAddressResolver="false") as bk:
        assert bk.conf.bookieAddressResolverEnabled is False
        lh = bk.create_ledger(3, 2, 2)
        lh.append(b"direct")
        lh.close()
        assert bk.open_ledger(lh.ledger_id).read(0, 0)[0].payload == b"direct"


def test_range_reads_sent_together_move_past_a_killed_bookie(zk_root, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A range read's first reads go as one run of requests per bookie (docs/client.md, "Read path"): with one
    bookie of a striped ledger killed, both its lost connection and a new client's failed connect send each
    of its reads on to the entry's other replica; every entry reads back, through read() and read_batches()."""
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=3, journal_sync_data=False) as c:
        c.start_all()
        payloads = [b"s%d" % i for i in range(600)]
        with BookKeeper(zk_root.metadata_service_uri, readEntryTimeoutSec=3, reorderReadSequenceEnabled=False) as bk:
            lh = bk.create_ledger(3, 2, 2)
            for f in [lh.append_many(payloads[i : i + 100]) for i in range(0, 600, 100)]:
                f.result()
            lh.close()
            rh = bk.open_ledger(lh.ledger_id)
            assert [e.payload for e in rh.read(0, 599)] == payloads  # every connection open
            c.kill(c.bookie_ids.index(lh.metadata.last_ensemble[0]))
            assert [e.payload for e in rh.read(0, 599)] == payloads  # the open connection is lost
        with BookKeeper(zk_root.metadata_service_uri, readEntryTimeoutSec=3, reorderReadSequenceEnabled=False) as bk:
            rh = bk.open_ledger(lh.ledger_id)
            got = [p for batch in rh.read_batches(0, 599) for p in batch.column("payload").to_pylist()]
            assert got == payloads  # the killed bookie's connect fails


def _read_cache_size(cluster: PythonBookieCluster, at_least: int, timeout: float = 20.0) -> float:
    """The bookie's ``bookie_read_cache_size`` gauge (refreshed every 5 s) once it reaches ``at_least``."""
    import re
    import time

    deadline = time.monotonic() + timeout
    while True:
        found = re.search(r"^bookie_read_cache_size (\S+)", cluster.http_get(0, "/metrics"), re.M)
        size = float(found.group(1)) if found else -1.0
        if size >= at_least or time.monotonic() > deadline:
            return size
        time.sleep(0.5)


def test_batch_reads_of_entries_on_disk_are_read_again_from_the_read_cache(zk_root, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A real bookie process whose entries are all on disk (restarted): a batch read puts what it brought into the
    read cache as one range (docs/bookie.md, "Reads"), so the cache holds the ledger after one pass of batch
    reads and no single read; the next passes, over v2 and v3, give the same bytes."""
    data = [b"%05d" % i + bytes([i % 251]) * 1000 for i in range(600)]
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, journal_sync_data=False) as cluster:
        cluster.start_all()
        with BookKeeper(zk_root.metadata_service_uri) as bk:
            lh = bk.create_ledger(1, 1, 1, password=b"pw")
            lh.append_many(data)
            lh.close()
        cluster.stop(0)
        cluster.start(0)  # the start-up checkpoint puts every entry on disk; the read cache starts empty
        assert _read_cache_size(cluster, 0, timeout=0) == 0
        for v2_wire in (True, True, False):
            with BookKeeper(zk_root.metadata_service_uri, useV2WireProtocol=v2_wire) as bk:
                rh = bk.open_ledger(lh.ledger_id, password=b"pw")
                got: list[bytes] = []
                while len(got) < len(data):
                    batch = rh.batch_read(len(got), 100, 1 << 20)
                    assert batch and batch[0].entry_id == len(got)
                    got += [e.payload for e in batch]
                assert got == data
            stored = sum(map(len, data))  # the entries as stored carry a digest header on top
            assert _read_cache_size(cluster, stored) >= stored
        # Every index read transaction those disk reads began has ended: the process holds at most the loop
        # thread's reused one and one py-lmdb keeps for reuse (docs/bookie.md, "The entry index's reader slots").
        slots = [cluster.metric(0, "bookie_index_reader_slots", state=state) for state in ("active", "idle")]
        assert None not in slots and sum(slots) <= 2, slots  # type: ignore[arg-type]


def test_ledgers_opened_from_metadata_read_many_at_once(cluster, zk_root, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``store.read_many_ledger_metadata`` (ZooKeeper multi reads) and ``open_ledger(metadata=...)``: opened as if
    read there, with no metadata read of their own; the password is still checked."""
    from bkspark.errors import UnauthorizedAccessError

    with BookKeeper(zk_root.metadata_service_uri) as bk:
        ids = []
        for n in range(3):
            lh = bk.create_ledger(2, 2, 2, password=b"pw")
            lh.append_many([b"l%d-e%d" % (n, e) for e in range(n + 1)]).result(timeout=30)
            lh.close()
            ids.append(lh.ledger_id)
        open_one = bk.create_ledger(2, 2, 2, password=b"pw")
        open_one.append(b"unclosed")
        bk.delete_ledger(ids[1])
        refs = [(0, ids[0]), (0, ids[1]), (0, ids[2]), (0, open_one.ledger_id), (0, 1 << 62)]
        got = list(bk.store.read_many_ledger_metadata(refs))
        assert [(s, lid) for s, lid, _ in got] == refs
        assert got[1][2] is None and got[4][2] is None  # deleted; never existed
        for scope_id, ledger_id, versioned in (got[0], got[2], got[3]):
            assert versioned == bk.store.read_ledger_metadata(ledger_id, scope_id)

        def no_reads(*args, **kwargs):  # type: ignore[no-untyped-def]
            raise AssertionError("open_ledger(metadata=...) read the metadata again")

        monkeypatch.setattr(bk.store, "read_ledger_metadata", no_reads)
        rh = bk.open_ledger(ids[2], recovery=False, password=b"pw", metadata=got[2][2])
        assert [e.payload for e in rh.read(0, 2)] == [b"l2-e0", b"l2-e1", b"l2-e2"]
        with pytest.raises(UnauthorizedAccessError):
            bk.open_ledger(ids[0], recovery=False, password=b"other", metadata=got[0][2])
        with pytest.raises(TypeError):
            bk.open_ledger(ids[0], recovery=False, password=b"pw", metadata=got[0][2].metadata)  # type: ignore[arg-type]
        monkeypatch.undo()
        # An open ledger opened from its metadata reads its LAC from the bookies, as any non-recovery open does.
        rh = bk.open_ledger(open_one.ledger_id, recovery=False, password=b"pw", metadata=got[3][2])
        assert rh.metadata.state == LedgerState.OPEN and rh.last_add_confirmed in (-1, 0)
        # Recovery from given metadata fences and closes the ledger as from metadata read there.
        recovered = bk.open_ledger(open_one.ledger_id, recovery=True, password=b"pw", metadata=got[3][2])
        assert recovered.metadata.state == LedgerState.CLOSED and recovered.last_add_confirmed == 0
        assert [e.payload for e in recovered.read(0, 0)] == [b"unclosed"]
        assert bk.store.read_ledger_metadata(open_one.ledger_id).metadata.state == LedgerState.CLOSED


def test_adds_and_reads_take_v2_and_the_rest_v3_unless_v2_is_off(cluster, zk_root) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md, "Wire protocol choice": adds and reads use v2 by default, READ_LAC a separate v3 connection
    per bookie; ``useV2WireProtocol=false`` puts adds and reads on v3 too (no v2 connection is ever opened)."""
    payloads = [b"w%d" % i for i in range(30)]
    with BookKeeper(zk_root.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 3, 2)
        lh.append_many(payloads[:20]).result(timeout=30)
        for p in payloads[20:]:
            lh.append(p)
        ensemble = lh.metadata.last_ensemble
        assert all(bk.aio.pool.ready(b, "v2") is not None for b in ensemble)
        assert all(bk.aio.pool.ready(b, "v3") is None for b in ensemble)  # adds needed no v3 connection
        rh = bk.open_ledger(lh.ledger_id, recovery=False)  # READ_LAC: v3 only
        assert rh.last_add_confirmed == 28
        assert all(bk.aio.pool.ready(b, "v3") is not None for b in ensemble)
        assert all(bk.aio.pool.ready(b, "v3") is not bk.aio.pool.ready(b, "v2") for b in ensemble)
        lh.close()
    with BookKeeper(zk_root.metadata_service_uri, useV2WireProtocol=False) as bk:
        lh = bk.create_ledger(3, 3, 2)
        lh.append_many(payloads[:20]).result(timeout=30)
        for p in payloads[20:]:
            lh.append(p)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)  # recovery: fencing and recovery reads
        assert [e.payload for e in rh.read(0, 29)] == payloads
        batch = rh.batch_read(0, 30, 0)
        assert batch and [e.payload for e in batch] == payloads[: len(batch)]
        assert [e.payload for e in rh] == payloads
        ensemble = lh.metadata.last_ensemble
        assert all(bk.aio.pool.ready(b, "v3") is not None for b in ensemble)
        assert all(bk.aio.pool.ready(b, "v2") is None for b in bk.writable_bookies())


def test_ledger_metadata_version_2_writes_the_text_format_without_a_ctoken(cluster, zk_root) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md, "Configuration": ``ledgerMetadataVersion`` 3 (the default) writes the binary format, its create
    with a cToken; 2 the text format with no cToken, for the create and the close; the ledger reads back as usual."""
    from bkspark.protocol import ledger_metadata as md_codec

    for version in (None, 2):
        conf = {} if version is None else {"ledgerMetadataVersion": version}
        with BookKeeper(zk_root.metadata_service_uri, **conf) as bk:
            lh = bk.create_ledger(3, 2, 2, password=b"pw")
            path = bk.store.ledger_path(lh.ledger_id)
            created, _ = bk.zk.get(path)
            lh.append(b"v%d" % (version or 3))
            lh.close()
            closed, _ = bk.zk.get(path)
            for data in (created, closed):
                if version == 2:
                    assert data.startswith(b"BookieMetadataFormatVersion\t2\n")
                    assert b"cToken" not in data and md_codec.parse(data).ctoken == 0
                    data.decode("utf-8")  # text through and through
                else:
                    assert data.startswith(b"BookieMetadataFormatVersion\t3\n")
            if version is None:
                assert md_codec.parse(created).ctoken != 0  # updates write 0, as Java's LedgerMetadataBuilder.from()
            assert md_codec.parse(closed).state == LedgerState.CLOSED and md_codec.parse(closed).last_entry_id == 0
            assert bk.open_ledger(lh.ledger_id, password=b"pw").read(0, 0)[0].payload == b"v%d" % (version or 3)


def test_scoped_ledgers_go_only_to_bookies_advertising_scope_ids(cluster, zk_root) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md, "Wire protocol choice": a scope id != 0 goes only to bookies advertising ``scope-ids`` in
    ``bkspark.extensions``; without enough of them the create raises NotEnoughBookiesError naming the property.
    A fourth bookie registered as Apache BookKeeper's do (no extensions) is never chosen for one."""
    from bkspark.errors import NotEnoughBookiesError

    plain = "10.255.255.1:3181"  # never dialled: a scope-0 ledger is not created here
    zk_root.zk_client.create(f"{zk_root.path}/available/{plain}", b"", ephemeral=True)
    with BookKeeper(zk_root.metadata_service_uri) as bk:
        assert plain in bk.writable_bookies() and len(bk.writable_bookies()) == 4
        with pytest.raises(NotEnoughBookiesError, match="bkspark.extensions") as info:
            bk.create_ledger(4, 2, 2, scope_id=77)
        assert "scope-ids" in str(info.value)
        chosen = set()
        for _ in range(12):  # a random placement over all four would take the plain one in 3 of 4 creates
            lh = bk.create_ledger(3, 2, 2, scope_id=77)
            chosen |= set(lh.metadata.last_ensemble)
            bk.delete_ledger(lh.ledger_id, scope_id=77)
        assert chosen == set(cluster.bookie_ids)


def test_scoped_ledgers_batch_over_v3_only_with_bookies_advertising_batch_read_v3(cluster, zk_root) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md, "Read path": scope != 0 ledgers batch over v3 (op 12) only with bookies advertising
    ``batch-read-v3``; with the others a batch read is single reads, with the same answer."""
    from bkspark.protocol.service_info import BATCH_READ_V3_EXTENSION, SCOPE_IDS_EXTENSION

    data = [b"b%d" % i for i in range(40)]
    with BookKeeper(zk_root.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 3, 2, password=b"pw", scope_id=5)
        lh.append_many(data).result(timeout=30)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, scope_id=5, password=b"pw")
        ops = bk.aio.services.ops
        sent: list[int] = []
        batch_read_async = ops.batch_read_async

        async def counting(bookie_id, ledger_id, start, max_count, max_size, scope_id):  # type: ignore[no-untyped-def]
            sent.append(start)
            return await batch_read_async(bookie_id, ledger_id, start, max_count, max_size, scope_id)

        ops.batch_read_async = counting  # type: ignore[method-assign]
        advertised = bk.registry.extensions
        bk.registry.extensions = lambda bookie_id: frozenset({SCOPE_IDS_EXTENSION})  # type: ignore[method-assign]
        assert [e.payload for e in rh.batch_read(0, 40, 0)] == data and sent == []
        assert [e.payload for e in rh] == data and sent == []
        bk.registry.extensions = advertised  # type: ignore[method-assign]
        assert BATCH_READ_V3_EXTENSION in bk.registry.extensions(lh.metadata.last_ensemble[0])
        batch = rh.batch_read(0, 40, 0)
        assert batch and [e.payload for e in batch] == data[: len(batch)] and sent == [0]


def test_larger_entries_once_the_frame_size_is_raised_on_the_client_and_every_bookie(zk_root, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md: "To write larger entries, raise ``nettyMaxFrameSizeBytes`` on the client and on every
    bookie": a 6 MB entry, refused under the 5 MiB default, is written and read back (single and batch reads)."""
    from bkspark.errors import EntryTooLargeError

    big = bytes(range(256)) * (6_000_000 // 256)
    frame = 8 * 1024 * 1024
    with PythonBookieCluster(
        zk_root.metadata_service_uri, tmp_path, bookies=3, journal_sync_data=False,
        conf_overrides={"nettyMaxFrameSizeBytes": frame},
    ) as c:
        c.start_all()
        with BookKeeper(zk_root.metadata_service_uri) as bk:
            with pytest.raises(EntryTooLargeError, match="nettyMaxFrameSizeBytes"):
                bk.create_ledger(3, 3, 2).append(big)
        with BookKeeper(zk_root.metadata_service_uri, nettyMaxFrameSizeBytes=frame, addEntryTimeoutSec=30,
                        readEntryTimeoutSec=30) as bk:
            lh = bk.create_ledger(3, 3, 2, password=b"pw")
            assert len(big) < lh.max_payload < frame
            assert lh.append(big) == 0 and lh.append(b"small") == 1
            lh.close()
            assert len(lh.metadata.ensembles) == 1  # no bookie refused it
            rh = bk.open_ledger(lh.ledger_id, password=b"pw")
            assert [e.payload for e in rh.read(0, 1)] == [big, b"small"]
            assert [e.payload for e in rh.batch_read(0, 2, 0)][0] == big
