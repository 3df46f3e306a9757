"""The bulk append (``append_many``, blocking and async) against real Python and Java bookies.

Same guarantees as ``append``: entries in call order (mixed with single appends), each acknowledged by Qa
bookies, an ensemble change when a bookie dies during a bulk append (nothing acknowledged is lost), and a
too-large entry refused locally before anything of its batch is sent.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from bkspark.client import BookKeeper
from bkspark.client.aio import AsyncBookKeeper
from bkspark.errors import EntryTooLargeError, LedgerClosedError, LedgerFencedError
from bkspark.protocol.ledger_metadata import LedgerState
from tests.harness.python_bookie import PythonBookieCluster

pytestmark = pytest.mark.integration


def payload(i: int, size: int = 120) -> bytes:
    head = f"b{i:07d}:".encode()
    return (head * (size // len(head) + 1))[:size]


@pytest.fixture(scope="module")
def py_cluster(module_zk_root, tmp_path_factory):  # type: ignore[no-untyped-def]
    with PythonBookieCluster(
        module_zk_root.metadata_service_uri, tmp_path_factory.mktemp("bulk"), bookies=3, journal_sync_data=False
    ) as c:
        c.start_all()
        yield c


def test_bulk_and_single_appends_keep_call_order_on_python_bookies(py_cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """Batches of several sizes (bytes, bytearray, memoryview) mixed with append_async; read back byte for byte."""
    with BookKeeper(module_zk_root.metadata_service_uri, maxPendingAdds=300) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"pw")
        expected: list[bytes] = []
        futures = []
        for round_no, size in enumerate([1, 50, 0, 700, 3, 250]):  # 700 > maxPendingAdds: waits for room
            batch = [payload(len(expected) + k) for k in range(size)]
            if round_no == 3:
                batch = [bytearray(p) if k % 2 else memoryview(p) for k, p in enumerate(batch)]
            futures.append(("many", len(expected), size, lh.append_many(batch)))
            expected.extend(bytes(p) for p in batch)
            futures.append(("one", len(expected), 1, lh.append_async(payload(len(expected)))))
            expected.append(payload(len(expected)))
        for kind, first, size, fut in futures:
            got = fut.result(timeout=60)
            assert got == (range(first, first + size) if kind == "many" else first)
        assert lh.last_add_confirmed == len(expected) - 1
        assert lh.length == sum(map(len, expected))
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        assert rh.length == sum(map(len, expected))
        assert [e.payload for e in rh.read_batched(0, rh.last_add_confirmed)] == expected


def test_too_large_entry_refuses_the_whole_batch_locally(py_cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """Entry 2 is over the frame limit: EntryTooLargeError names its index, nothing of the batch is sent."""
    with BookKeeper(module_zk_root.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 3, 2)
        lh.append(b"before")
        big = b"x" * (lh.max_payload + 1)
        with pytest.raises(EntryTooLargeError, match="entry 2 of a bulk append") as info:
            lh.append_many([b"a", b"b", big, b"c"])
        assert info.value.context["index"] == 2 and info.value.context["max_payload"] == lh.max_payload
        with pytest.raises(TypeError, match="payload 1 of a bulk append"):
            lh.append_many([b"a", "not bytes"])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="sequence of payloads"):
            lh.append_many(b"one payload")
        assert lh.last_add_pushed == 0
        assert lh.append_many([b"after-1", b"after-2"]).result(timeout=30) == range(1, 3)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        assert [e.payload for e in rh.read(0, 2)] == [b"before", b"after-1", b"after-2"]


def test_async_bulk_append_on_the_callers_loop(py_cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """The async twin: awaits to the id range; a closed ledger fails the bulk append with LedgerClosedError."""

    async def run() -> None:
        async with AsyncBookKeeper(module_zk_root.metadata_service_uri) as bk:
            lh = await bk.create_ledger(3, 3, 2, password=b"pw")
            first = lh.append_many([payload(i) for i in range(100)])
            single = lh.append(payload(100))
            second = lh.append_many(payload(i) for i in range(101, 160))
            assert await first == range(0, 100)
            assert await single == 100
            assert await second == range(101, 160)
            assert await lh.append_many([]) == range(160, 160)
            with pytest.raises(EntryTooLargeError):
                lh.append_many([b"x" * (lh.max_payload + 1)])
            await lh.close()
            with pytest.raises(LedgerClosedError):
                await lh.append_many([b"late"])
            rh = await bk.open_ledger(lh.ledger_id, password=b"pw")
            assert [e.payload async for e in rh.read_batched(0, 159)] == [payload(i) for i in range(160)]

    asyncio.run(run())


def test_fenced_during_bulk_append_loses_nothing_acknowledged(py_cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """A recovery open fences the ledger while bulk appends run: later batches fail, acknowledged ones stay."""
    with BookKeeper(module_zk_root.metadata_service_uri, maxPendingAdds=200) as writer_bk, BookKeeper(
        module_zk_root.metadata_service_uri
    ) as reader_bk:
        lh = writer_bk.create_ledger(3, 3, 2, password=b"pw")
        futures = []
        for b in range(40):
            futures.append(lh.append_many([payload(b * 50 + k) for k in range(50)]))
            if b == 10:
                futures[0].result(timeout=30)
                rh = reader_bk.open_ledger(lh.ledger_id, password=b"pw", recovery=True)
        acked: list[int] = []
        failures = 0
        for fut in futures:
            try:
                acked.extend(fut.result(timeout=60))
            except LedgerFencedError:
                failures += 1
        assert failures > 0 and acked == list(range(len(acked)))
        md = reader_bk.get_ledger_metadata(lh.ledger_id)
        assert md.state == LedgerState.CLOSED and md.last_entry_id >= acked[-1]
        got = [e.payload for e in rh.read(0, md.last_entry_id)] if md.last_entry_id >= 0 else []
        assert got[: len(acked)] == [payload(i) for i in acked]


def _bulk_load_while_killing(
    bk: BookKeeper, kill: "callable[[str], None]", entries: int = 3000, write_quorum: int = 3  # type: ignore[valid-type]
) -> tuple[int, list[str]]:
    """Bulk appends of 100 entries; kill the ensemble's second bookie after a third of them; returns the ledger."""
    lh = bk.create_ledger(3, write_quorum, 2, password=b"pw")
    first_ensemble = list(lh.metadata.last_ensemble)
    futures = []
    for b in range(entries // 100):
        futures.append(lh.append_many([payload(b * 100 + k) for k in range(100)]))
        if b == entries // 300:
            kill(first_ensemble[1])
    acked: list[int] = []
    for fut in futures:
        acked.extend(fut.result(timeout=120))
    assert acked == list(range(entries))
    lh.close()
    return lh.ledger_id, first_ensemble


def _check_replaced_and_readable(bk: BookKeeper, ledger_id: int, first: list[str]) -> None:
    """Closed at entry 2999, the killed bookie replaced, every entry readable, the new segment's too."""
    md = bk.get_ledger_metadata(ledger_id)
    assert md.state == LedgerState.CLOSED and md.last_entry_id == 2999
    assert len(md.ensembles) >= 2 and first[1] not in md.last_ensemble
    rh = bk.open_ledger(ledger_id, password=b"pw")
    assert [e.payload for e in rh.read_batched(0, 2999)] == [payload(i) for i in range(3000)]
    seg = max(md.ensembles)
    assert [e.payload for e in rh.read(seg, 2999)] == [payload(i) for i in range(seg, 3000)]


@pytest.mark.fault
def test_python_bookie_killed_during_bulk_append(zk_root, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """4 Python bookies, E=3/W=3/A=2: one dies mid bulk append; every entry acknowledged, all readable."""
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=4, journal_sync_data=False) as cluster:
        cluster.start_all()
        with BookKeeper(zk_root.metadata_service_uri, addEntryTimeoutSec=3, maxPendingAdds=500) as bk:
            ledger_id, first = _bulk_load_while_killing(bk, lambda b: cluster.kill(cluster.bookie_ids.index(b)))
            _check_replaced_and_readable(bk, ledger_id, first)


@pytest.mark.fault
def test_python_bookie_killed_during_a_striped_bulk_append(zk_root, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """E=3/W=2/A=2 (each bookie gets its own run of a batch's entries): the same guarantees."""
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=4, journal_sync_data=False) as cluster:
        cluster.start_all()
        with BookKeeper(zk_root.metadata_service_uri, addEntryTimeoutSec=3, maxPendingAdds=500) as bk:
            kill = lambda b: cluster.kill(cluster.bookie_ids.index(b))  # noqa: E731
            ledger_id, first = _bulk_load_while_killing(bk, kill, write_quorum=2)
            _check_replaced_and_readable(bk, ledger_id, first)


@pytest.mark.fault
@pytest.mark.compat
def test_java_bookie_killed_during_bulk_append(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """4 Java 4.17.3 bookies, E=3/W=3/A=2: the same on Apache BookKeeper's own bookies."""
    cluster = java_cluster_factory("4.17.3", bookies=4)
    with BookKeeper(cluster.metadata_service_uri, addEntryTimeoutSec=3, maxPendingAdds=500) as bk:
        ledger_id, first = _bulk_load_while_killing(bk, lambda b: cluster.kill(cluster.bookie_ids.index(b)))
        _check_replaced_and_readable(bk, ledger_id, first)


@pytest.mark.compat
def test_bulk_append_on_java_bookies_reads_back_identically(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """3 Java bookies, E=3/W=2/A=2 (striped): bulk-appended entries read back as single appends' would."""
    cluster = java_cluster_factory("4.17.3", bookies=3)
    with BookKeeper(cluster.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"pw")
        done = threading.Event()
        results: list[range] = []
        fut = lh.append_many([payload(i, 1024) for i in range(500)])
        fut.add_done_callback(lambda f: (results.append(f.result()), done.set()))
        assert done.wait(60) and results == [range(0, 500)]
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        assert [e.payload for e in rh.read(0, 499)] == [payload(i, 1024) for i in range(500)]
        assert rh.length == 500 * 1024


def test_bulk_append_of_a_scoped_ledger_goes_over_v3(py_cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """A BP-35 scoped ledger (v3 adds, one entry at a time underneath) and a v3-only client keep the same contract."""
    from bkspark.protocol.ledger_name import ids_from_uuid
    import uuid

    scope_id, ledger_id = ids_from_uuid(uuid.UUID("4d0c0b7e-1111-4e22-9a3c-55aa0f00b01c"))
    for conf, scope in (({}, scope_id), ({"useV2WireProtocol": False}, 0)):
        with BookKeeper(module_zk_root.metadata_service_uri, **conf) as bk:
            lh = bk.create_ledger(3, 2, 2, password=b"pw", scope_id=scope, **({"ledger_id": ledger_id} if scope else {}))
            assert lh.append_many([payload(i) for i in range(120)]).result(timeout=60) == range(0, 120)
            assert lh.append_many([payload(i) for i in range(120, 150)]).result(timeout=60) == range(120, 150)
            lh.close()
            rh = bk.open_ledger(lh.ledger_id, scope_id=scope, password=b"pw")
            assert [e.payload for e in rh.read(0, 149)] == [payload(i) for i in range(150)]
