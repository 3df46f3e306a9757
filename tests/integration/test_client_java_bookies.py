"""The bkspark client against real Apache BookKeeper 4.17.3 bookies: write, read, batch, close, errors."""

from __future__ import annotations

import pytest

from bkspark.client import BookKeeper
from bkspark.errors import (
    DigestMismatchError,
    InvalidOptionError,
    LedgerClosedError,
    LedgerExistsError,
    NoSuchLedgerMetadataError,
    NotEnoughBookiesError,
    UnauthorizedAccessError,
)
from bkspark.protocol.ledger_metadata import LedgerState

pytestmark = [pytest.mark.integration, pytest.mark.compat]

VERSION = "4.17.3"


@pytest.fixture
def cluster(java_cluster_factory):  # type: ignore[no-untyped-def]
    return java_cluster_factory(VERSION, bookies=3)


@pytest.fixture
def bk(cluster):  # type: ignore[no-untyped-def]
    with BookKeeper(cluster.metadata_service_uri, addEntryTimeoutSec=5, readEntryTimeoutSec=5) as client:
        yield client


def payload(i: int, size: int = 100) -> bytes:
    head = f"entry-{i:06d}-".encode()
    return (head * (size // len(head) + 1))[:size]


@pytest.mark.parametrize("use_v2", [True, False], ids=["v2", "v3"])
def test_write_close_read_single_and_batched(cluster, use_v2: bool) -> None:  # type: ignore[no-untyped-def]
    with BookKeeper(cluster.metadata_service_uri, useV2WireProtocol=use_v2) as bk:
        lh = bk.create_ledger(3, 3, 2, digest_type="CRC32C", password=b"secret", custom_metadata={"k": b"v"})
        futures = [lh.append_async(payload(i)) for i in range(200)]
        assert [f.result(timeout=30) for f in futures] == list(range(200))
        assert lh.last_add_confirmed == 199
        lh.close()
        md = bk.get_ledger_metadata(lh.ledger_id)
        assert md.state == LedgerState.CLOSED
        assert (md.last_entry_id, md.length) == (199, 200 * 100)
        assert md.custom_metadata == {"k": b"v"}
        with pytest.raises(LedgerClosedError):
            lh.append(b"late")

        rh = bk.open_ledger(lh.ledger_id, password=b"secret")
        assert rh.last_add_confirmed == 199
        entries = rh.read(0, 199)
        assert [e.payload for e in entries] == [payload(i) for i in range(200)]
        batch = rh.batch_read(10, 50, 0)
        assert 1 <= len(batch) <= 50
        assert [e.entry_id for e in batch] == list(range(10, 10 + len(batch)))
        assert [e.payload for e in batch] == [payload(i) for i in range(10, 10 + len(batch))]
        assert [e.payload for e in rh] == [payload(i) for i in range(200)]
        assert lh.ledger_id in bk.list_ledgers()


def test_batch_read_limits_and_max_count_zero(bk) -> None:  # type: ignore[no-untyped-def]
    lh = bk.create_ledger(3, 3, 3)
    for i in range(30):
        lh.append_async(payload(i, 1000))
    lh.close()
    rh = bk.open_ledger(lh.ledger_id)
    small = rh.batch_read(0, 100, 2500)  # the size limit allows two entries (and always the first)
    assert 1 <= len(small) <= 2
    assert [e.payload for e in small] == [payload(i, 1000) for i in range(len(small))]
    everything = rh.batch_read(0, 0, 0)  # max_count <= 0: no count limit, bounded by the LAC
    assert [e.entry_id for e in everything] == list(range(30))
    tail = rh.batch_read(25, 100, 0)  # clamped to the LAC
    assert [e.entry_id for e in tail] == list(range(25, 30))
    with pytest.raises(InvalidOptionError):
        rh.batch_read(30, 10, 0)


def test_batching_disabled_and_max_count_zero_terminates(cluster) -> None:  # type: ignore[no-untyped-def]
    """BookKeeper #4641: batching off with max_count 0 looped forever in Java."""
    with BookKeeper(cluster.metadata_service_uri, batch_read_enabled=False) as bk:
        lh = bk.create_ledger(3, 3, 2)
        for i in range(10):
            lh.append(payload(i))
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        got = rh.batch_read(0, 0, 0)
        assert [e.payload for e in got] == [payload(i) for i in range(10)]


def test_striped_ledger_reads_correctly(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = java_cluster_factory(VERSION, bookies=5)
    with BookKeeper(cluster.metadata_service_uri) as bk:
        lh = bk.create_ledger(5, 2, 2)
        for i in range(100):
            lh.append_async(payload(i))
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        assert [e.payload for e in rh.read(0, 99)] == [payload(i) for i in range(100)]
        got = list(rh.read_batched(0, 99, batch_size=30))  # E > W: falls back to single reads
        assert [e.payload for e in got] == [payload(i) for i in range(100)]


def test_open_without_recovery_reads_up_to_lac_and_does_not_fence(bk) -> None:  # type: ignore[no-untyped-def]
    lh = bk.create_ledger(3, 2, 2)
    for i in range(20):
        lh.append(payload(i))
    rh = bk.open_ledger(lh.ledger_id, recovery=False)
    # The last entry carries LAC 18 (piggy-backed at send time).
    assert rh.last_add_confirmed == 18
    assert [e.payload for e in rh.read(0, 18)] == [payload(i) for i in range(19)]
    assert rh.read_unconfirmed(19, 19)[0].payload == payload(19)
    lh.append(payload(20))  # not fenced: the writer goes on
    assert rh.read_last_add_confirmed() >= 19
    assert bk.get_ledger_metadata(lh.ledger_id).state == LedgerState.OPEN
    lh.close()


def test_recovery_fences_the_writer(bk) -> None:  # type: ignore[no-untyped-def]
    lh = bk.create_ledger(3, 3, 2, password=b"pw")
    for i in range(10):
        lh.append(payload(i))
    rh = bk.open_ledger(lh.ledger_id, password=b"pw")  # recovery: fences and closes
    assert rh.last_add_confirmed == 9
    md = bk.get_ledger_metadata(lh.ledger_id)
    assert md.state == LedgerState.CLOSED and md.last_entry_id == 9 and md.length == 1000
    from bkspark.errors import LedgerFencedError

    with pytest.raises(LedgerFencedError):
        lh.append(payload(10))
    with pytest.raises(LedgerFencedError):
        lh.append(payload(11))  # sticky: never acknowledges a later entry
    lh.close()  # the recovery closed it; the fenced writer leaves the metadata alone
    assert bk.get_ledger_metadata(lh.ledger_id).last_entry_id == 9


def test_wrong_password_is_unauthorized(bk) -> None:  # type: ignore[no-untyped-def]
    lh = bk.create_ledger(3, 2, 2, password=b"right")
    lh.append(b"x")
    lh.close()
    with pytest.raises(UnauthorizedAccessError):
        bk.open_ledger(lh.ledger_id, password=b"wrong")


def test_wrong_password_writer_gets_eua_from_bookies(cluster, bk) -> None:  # type: ignore[no-untyped-def]
    """A bookie binds the master key on first write: another key gets EUA (not an ensemble change)."""
    lh = bk.create_ledger(3, 3, 3, password=b"one")
    lh.append(b"x")
    other = bk.create_ledger_adv(lh.ledger_id + 1_000_000, password=b"two")
    # Reuse the first ledger's id with another key by writing straight through the ops layer.
    from bkspark.client.ops import BookieOps

    ops: BookieOps = bk.aio.services.ops
    import concurrent.futures

    from bkspark.protocol.digest import Digester, master_key

    entry = Digester("CRC32C", b"two").package_entry(lh.ledger_id, 1, 0, 2, b"y")
    done: concurrent.futures.Future = concurrent.futures.Future()
    bookie = lh.metadata.last_ensemble[0]
    bk.loop.call_soon_threadsafe(
        lambda: ops.add(bookie, lh.ledger_id, 1, master_key(b"two"), entry, 0, 0, lambda _r, e, _a: done.set_result(e))
    )
    assert isinstance(done.result(10), UnauthorizedAccessError)
    other.close()
    lh.close()


def test_tampered_copy_is_detected_and_next_replica_used(cluster, bk) -> None:  # type: ignore[no-untyped-def]
    """Write a bad copy of entry 3 to one bookie directly with the v2 codec; reads skip it."""
    import concurrent.futures

    from bkspark.protocol.correlation import read_body
    from bkspark.protocol.digest import Digester, master_key

    lh = bk.create_ledger(3, 3, 3, password=b"pw")
    for i in range(6):
        lh.append(payload(i))
    lh.close()
    first = lh.metadata.last_ensemble[3 % 3]  # the first bookie of entry 3's write set
    good = Digester("CRC32C", b"pw").package_entry(lh.ledger_id, 3, 2, 400, payload(3))
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # flip a payload byte: the digest no longer matches
    done: concurrent.futures.Future = concurrent.futures.Future()
    ops = bk.aio.services.ops
    # RECOVERY_ADD overwrites the stored copy on a closed (fenced-free) ledger.
    bk.loop.call_soon_threadsafe(
        lambda: ops.add(first, lh.ledger_id, 3, master_key(b"pw"), bytes(bad), 0x0002, 0, lambda _r, e, _a: done.set_result(e))
    )
    assert done.result(10) is None
    rh = bk.open_ledger(lh.ledger_id, password=b"pw")
    # Reorder off so the tampered bookie is asked first.
    bk.conf.reorderReadSequenceEnabled = False
    entries = rh.read(0, 5)
    assert [e.payload for e in entries] == [payload(i) for i in range(6)]
    batch = list(rh.read_batched(0, 5, batch_size=6))
    assert [e.payload for e in batch] == [payload(i) for i in range(6)]
    # The tampered copy itself fails verification.
    raw = concurrent.futures.Future()
    bk.loop.call_soon_threadsafe(
        lambda: ops.read(first, lh.ledger_id, 3, 0, lambda r, e, _a: raw.set_result(e or bytes(read_body(r))))
    )
    with pytest.raises(DigestMismatchError):
        Digester("CRC32C", b"pw").verify_entry(raw.result(10), lh.ledger_id, 3)


def test_adv_ids_and_scope_requires_capable_bookies(bk) -> None:  # type: ignore[no-untyped-def]
    lid = 123456789012
    lh = bk.create_ledger_adv(lid, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
    assert lh.ledger_id == lid
    lh.append(b"adv")
    lh.close()
    with pytest.raises(LedgerExistsError):
        bk.create_ledger_adv(lid)
    with pytest.raises(NotEnoughBookiesError, match="scope-ids"):
        bk.create_ledger_adv(5, scope_id=77)  # Java bookies do not advertise scope ids
    bk.delete_ledger(lid)
    with pytest.raises(NoSuchLedgerMetadataError):
        bk.open_ledger(lid)
    assert lid not in bk.list_ledgers()


def test_not_enough_bookies(bk) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(NotEnoughBookiesError):
        bk.create_ledger(4, 2, 2)


def test_pipelined_throughput_sanity(bk) -> None:  # type: ignore[no-untyped-def]
    lh = bk.create_ledger(3, 3, 2)
    futures = [lh.append_async(payload(i, 1024)) for i in range(3000)]
    assert futures[-1].result(timeout=60) == 2999
    lh.close()
    rh = bk.open_ledger(lh.ledger_id)
    assert sum(1 for _ in rh) == 3000


def test_entry_over_the_frame_limit_is_refused_locally(cluster) -> None:  # type: ignore[no-untyped-def]
    """A 6 MB entry fails before anything is sent; the largest entry that fits is taken by Java bookies (v2 and v3)."""
    from bkspark.errors import EntryTooLargeError

    for use_v2 in (True, False):
        with BookKeeper(cluster.metadata_service_uri, useV2WireProtocol=use_v2) as client:
            lh = client.create_ledger(3, 3, 2)
            with pytest.raises(EntryTooLargeError, match="nettyMaxFrameSizeBytes"):
                lh.append(b"x" * 6_000_000)
            assert lh.append(b"ok") == 0  # still writable, and the refused entry took no id
            assert lh.append(b"y" * lh.max_payload) == 1  # exactly at the limit: Java's frame decoder accepts it
            lh.close()
            assert len(lh.metadata.ensembles) == 1 and client.aio.pool.failure_history == {}
            rh = client.open_ledger(lh.ledger_id)
            assert [len(e.payload) for e in rh.read(0, 1)] == [2, lh.max_payload]
