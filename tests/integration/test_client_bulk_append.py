"""The bulk append (``append_many``, blocking and async) against real Python and Java bookies, and single
appends (``append_async``) queued together, which the handle gives the writer as one run (``append_each``).

Same guarantees as ``append``: entries in call order (mixed with single appends), each acknowledged by Qa
bookies, an ensemble change when a bookie dies during a bulk append (nothing acknowledged is lost), and a
too-large entry refused locally before anything of its batch is sent.  Each holds for payloads laid end to
end in one buffer (:class:`PackedPayloads`, what the Spark writer hands over), framed without a bytes object
per entry: their ops keep no payload, so an ensemble change re-sends their frames.
"""

from __future__ import annotations

import asyncio
import threading
from array import array

import pytest

from bkspark.client import BookKeeper, PackedPayloads
from bkspark.client.aio import AsyncBookKeeper
from bkspark.client.ops import BookieOps
from bkspark.errors import EntryTooLargeError, LedgerClosedError, LedgerFencedError
from bkspark.protocol.ledger_metadata import LedgerState
from tests.harness.python_bookie import PythonBookieCluster

pytestmark = pytest.mark.integration


def payload(i: int, size: int = 120) -> bytes:
    head = f"b{i:07d}:".encode()
    return (head * (size // len(head) + 1))[:size]


def packed(payloads: list[bytes]) -> PackedPayloads:
    """The payloads end to end in one bytes object, with int64 bounds (as an Arrow binary column lays them out)."""
    bounds = array("q", [0])
    for p in payloads:
        bounds.append(bounds[-1] + len(p))
    return PackedPayloads(b"".join(payloads), bounds)


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
            futures.append(("many", len(expected), size, lh.append_many(packed(batch) if round_no in (1, 5) else batch)))
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


def test_the_byte_bound_holds_on_real_bookies_and_every_entry_reads_back(py_cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """``maxPendingAddBytes`` of 4 KiB: bulk and single appends of 1,000 B from two threads wait for room; at no
    sample are more than 4 KiB in flight, and the ledger reads back in call order (docs/client.md, "How many adds
    in flight")."""
    with BookKeeper(module_zk_root.metadata_service_uri, maxPendingAddBytes=4096) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"pw")
        order_lock = threading.Lock()
        expected: list[bytes] = []
        futures = []
        samples: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append(lh._in_flight_bytes)

        def append(k: int) -> None:
            for i in range(60):
                batch = [payload(k * 1000 + i * 10 + j, 1000) for j in range(1 + i % 4)]
                with order_lock:  # call order is entry order: keep the expectation in the same order
                    fut = lh.append_many(packed(batch) if i % 2 else batch) if len(batch) > 1 else lh.append_async(batch[0])
                    expected.extend(batch)
                    futures.append(fut)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        threads = [threading.Thread(target=append, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for fut in futures:
            fut.result(timeout=60)
        stop.set()
        sampler.join(10)
        assert samples and max(samples) <= 4096
        assert (lh._in_flight, lh._in_flight_bytes) == (0, 0)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        assert [e.payload for e in rh.read(0, rh.last_add_confirmed)] == expected


def test_appends_that_cannot_be_framed_fail_alone_and_the_ledger_goes_on(  # type: ignore[no-untyped-def]
    py_cluster, module_zk_root, monkeypatch
) -> None:
    """Framing a run on the client's loop thread can fail (MemoryError): those appends fail with the error, nothing
    of them is sent, and the appends handed over with them, before and after, still complete; the ledger stays
    writable and reads back without a gap (docs/client.md, "Bulk append")."""
    real = BookieOps.encode_v2_adds
    calls = {"n": 0}

    def encode_once_fails(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:
            raise MemoryError("no room for the frames")
        return real(*args, **kwargs)

    with BookKeeper(module_zk_root.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 3, 2, password=b"pw")
        first = [payload(i) for i in range(40)]
        lost = [payload(1000 + i) for i in range(30)]
        after = [payload(40 + i) for i in range(25)]
        monkeypatch.setattr(BookieOps, "encode_v2_adds", staticmethod(encode_once_fails))
        futures = [lh.append_many(first), lh.append_many(lost), lh.append_many(packed(after)), lh.append_async(b"last")]
        assert futures[0].result(timeout=30) == range(0, 40)
        with pytest.raises(MemoryError, match="no room for the frames"):
            futures[1].result(timeout=30)
        # The entries after the failed ones take the ids it would have had.
        assert futures[2].result(timeout=30) == range(40, 65)
        assert futures[3].result(timeout=30) == 65
        monkeypatch.undo()
        assert lh.append_many([b"x", b"y"]).result(timeout=30) == range(66, 68)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        assert [e.payload for e in rh.read(0, rh.last_add_confirmed)] == first + after + [b"last", b"x", b"y"]


def test_too_large_entry_refuses_the_whole_batch_locally(py_cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """Entry 2 is over the frame limit: EntryTooLargeError names its index, nothing of the batch is sent."""
    with BookKeeper(module_zk_root.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 3, 2)
        lh.append(b"before")
        big = b"x" * (lh.max_payload + 1)
        for given in ([b"a", b"b", big, b"c"], packed([b"a", b"b", big, b"c"])):
            with pytest.raises(EntryTooLargeError, match="entry 2 of a bulk append") as info:
                lh.append_many(given)
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


@pytest.mark.parametrize("packed_runs", [False, True], ids=["list", "packed payloads"])
def test_pending_bulk_appends_keep_their_frames_only(py_cluster, module_zk_root, packed_runs) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md, "Bulk append": on v2 the entries of a bulk append wait as their frames, with no payload kept
    (a packed run never had a bytes object per entry); the ledger reads back byte for byte."""

    async def run() -> None:
        async with AsyncBookKeeper(module_zk_root.metadata_service_uri) as bk:
            lh = await bk.create_ledger(3, 2, 2, password=b"pw")
            batch = [payload(i, 300) for i in range(200)]
            done = lh.append_many(packed(batch) if packed_runs else batch)  # queued on this loop, now
            waiting = list(lh.writer.pending)
            assert [op.entry_id for op in waiting] == list(range(200))
            assert all(op.payload == b"" and op.frame is not None for op in waiting)
            assert [op.length for op in waiting] == [300 * (i + 1) for i in range(200)]
            assert await done == range(0, 200)
            await lh.close()
            rh = await bk.open_ledger(lh.ledger_id, password=b"pw")
            assert [e.payload async for e in rh.read_batched(0, 199)] == batch

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
        _check_fenced_keeps_what_was_acknowledged(reader_bk, lh.ledger_id, rh, futures)


def _check_fenced_keeps_what_was_acknowledged(reader_bk, ledger_id: int, rh, futures) -> None:  # type: ignore[no-untyped-def]
    """Some appends failed as fenced, the acknowledged ones are entries 0..n in order, and the ledger the
    recovery closed holds each of them byte for byte."""
    acked: list[int] = []
    failures = 0
    for fut in futures:
        try:
            got = fut.result(timeout=60)
        except LedgerFencedError:
            failures += 1
            continue
        acked.extend(got if isinstance(got, range) else [got])
    assert failures > 0 and acked == list(range(len(acked)))
    md = reader_bk.get_ledger_metadata(ledger_id)
    assert md.state == LedgerState.CLOSED and md.last_entry_id >= acked[-1]
    got_payloads = [e.payload for e in rh.read(0, md.last_entry_id)] if md.last_entry_id >= 0 else []
    assert got_payloads[: len(acked)] == [payload(i) for i in acked]


def _bulk_load_while_killing(
    bk: BookKeeper, kill: "callable[[str], None]", entries: int = 3000, write_quorum: int = 3,  # type: ignore[valid-type]
    single: bool = False, packed_runs: bool = False,
) -> tuple[int, list[str]]:
    """Bulk appends of 100 entries (``packed_runs``: as :class:`PackedPayloads`; ``single``: one ``append_async``
    per entry, which the handle hands over as runs); kill the ensemble's second bookie after a third of them;
    returns the ledger and its first ensemble."""
    lh = bk.create_ledger(3, write_quorum, 2, password=b"pw")
    runs = _runs_of_single_appends(lh)
    first_ensemble = list(lh.metadata.last_ensemble)
    futures = []
    for b in range(entries // 100):
        if single:
            futures.extend(lh.append_async(payload(b * 100 + k)) for k in range(100))
        else:
            batch = [payload(b * 100 + k) for k in range(100)]
            futures.append(lh.append_many(packed(batch) if packed_runs else batch))
        if b == entries // 300:
            kill(first_ensemble[1])
    acked: list[int] = []
    for fut in futures:
        got = fut.result(timeout=120)
        acked.extend(got if isinstance(got, range) else [got])
    assert acked == list(range(entries))
    assert not single or sum(runs) > 0
    lh.close()
    return lh.ledger_id, first_ensemble


def _runs_of_single_appends(lh: "object") -> list[int]:
    """The sizes of the runs of single appends the handle gives its writer from now on (a spy on ``append_each``,
    called on the client's loop thread)."""
    writer = lh._writer  # type: ignore[attr-defined]
    runs: list[int] = []
    original = writer.append_each

    def spy(payloads, callbacks):  # type: ignore[no-untyped-def]
        runs.append(len(payloads))
        original(payloads, callbacks)

    writer.append_each = spy
    return runs


@pytest.mark.parametrize("write_quorum", [3, 2])
def test_single_appends_queued_together_go_as_runs_in_call_order(py_cluster, module_zk_root, write_quorum) -> None:  # type: ignore[no-untyped-def]
    """3,000 ``append_async`` calls in a burst, a bulk append every 500: the handle hands queued single appends
    over as runs, each future gives its own entry id, and the ledger reads back byte for byte (E=W and striped)."""
    with BookKeeper(module_zk_root.metadata_service_uri, maxPendingAdds=1000) as bk:
        lh = bk.create_ledger(3, write_quorum, 2, password=b"pw")
        runs = _runs_of_single_appends(lh)
        expected: list[bytes] = []
        futures = []
        for i in range(3000):
            if i % 500 == 250:
                batch = [payload(len(expected) + k) for k in range(100)]
                futures.append((len(expected), lh.append_many(batch)))
                expected.extend(batch)
            futures.append((len(expected), lh.append_async(payload(len(expected)))))
            expected.append(payload(len(expected)))
        for first, fut in futures:
            got = fut.result(timeout=60)
            assert got == (range(first, first + 100) if isinstance(got, range) else first)
        assert runs and max(runs) > 1 and sum(runs) <= 3000
        assert lh.last_add_confirmed == len(expected) - 1 and lh.length == sum(map(len, expected))
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        assert [e.payload for e in rh.read(0, rh.last_add_confirmed)] == expected


def test_fenced_during_runs_of_single_appends_loses_nothing_acknowledged(py_cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """A recovery open fences the ledger while single appends go as runs: later ones fail, acknowledged ones stay."""
    with BookKeeper(module_zk_root.metadata_service_uri, maxPendingAdds=200) as writer_bk, BookKeeper(
        module_zk_root.metadata_service_uri
    ) as reader_bk:
        lh = writer_bk.create_ledger(3, 3, 2, password=b"pw")
        runs = _runs_of_single_appends(lh)
        futures = []
        for i in range(2000):
            futures.append(lh.append_async(payload(i)))
            if i == 500:
                futures[0].result(timeout=30)
                rh = reader_bk.open_ledger(lh.ledger_id, password=b"pw", recovery=True)
        _check_fenced_keeps_what_was_acknowledged(reader_bk, lh.ledger_id, rh, futures)
        assert sum(runs) > 0


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
@pytest.mark.parametrize("packed_runs", [False, True], ids=["lists", "packed payloads"])
def test_python_bookie_killed_during_bulk_append(zk_root, tmp_path, packed_runs) -> None:  # type: ignore[no-untyped-def]
    """4 Python bookies, E=3/W=3/A=2: one dies mid bulk append; every entry acknowledged, all readable."""
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=4, journal_sync_data=False) as cluster:
        cluster.start_all()
        with BookKeeper(zk_root.metadata_service_uri, addEntryTimeoutSec=3, maxPendingAdds=500) as bk:
            kill = lambda b: cluster.kill(cluster.bookie_ids.index(b))  # noqa: E731
            ledger_id, first = _bulk_load_while_killing(bk, kill, packed_runs=packed_runs)
            _check_replaced_and_readable(bk, ledger_id, first)


@pytest.mark.fault
@pytest.mark.parametrize(
    "single, packed_runs", [(False, False), (False, True), (True, False)],
    ids=["bulk appends", "packed bulk appends", "single appends as runs"],
)
def test_python_bookie_killed_during_a_striped_bulk_append(zk_root, tmp_path, single, packed_runs) -> None:  # type: ignore[no-untyped-def]
    """E=3/W=2/A=2 (each bookie gets its own run of a batch's entries), bulk appends (lists or packed) or one
    ``append_async`` per entry (handed over as runs): the same guarantees."""
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=4, journal_sync_data=False) as cluster:
        cluster.start_all()
        with BookKeeper(zk_root.metadata_service_uri, addEntryTimeoutSec=3, maxPendingAdds=500) as bk:
            kill = lambda b: cluster.kill(cluster.bookie_ids.index(b))  # noqa: E731
            ledger_id, first = _bulk_load_while_killing(bk, kill, write_quorum=2, single=single, packed_runs=packed_runs)
            _check_replaced_and_readable(bk, ledger_id, first)


@pytest.mark.fault
@pytest.mark.compat
def test_java_bookie_killed_during_bulk_append(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """4 Java 4.17.3 bookies, E=3/W=3/A=2: the same on Apache BookKeeper's own bookies (packed payloads)."""
    cluster = java_cluster_factory("4.17.3", bookies=4)
    with BookKeeper(cluster.metadata_service_uri, addEntryTimeoutSec=3, maxPendingAdds=500) as bk:
        kill = lambda b: cluster.kill(cluster.bookie_ids.index(b))  # noqa: E731
        ledger_id, first = _bulk_load_while_killing(bk, kill, packed_runs=True)
        _check_replaced_and_readable(bk, ledger_id, first)


@pytest.mark.compat
@pytest.mark.parametrize("packed_runs", [False, True], ids=["list", "packed payloads"])
def test_bulk_append_on_java_bookies_reads_back_identically(java_cluster_factory, packed_runs) -> None:  # type: ignore[no-untyped-def]
    """3 Java bookies, E=3/W=2/A=2 (striped): bulk-appended entries read back as single appends' would."""
    cluster = java_cluster_factory("4.17.3", bookies=3)
    with BookKeeper(cluster.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"pw")
        done = threading.Event()
        results: list[range] = []
        batch = [payload(i, 1024) for i in range(500)]
        fut = lh.append_many(packed(batch) if packed_runs else batch)
        fut.add_done_callback(lambda f: (results.append(f.result()), done.set()))
        assert done.wait(60) and results == [range(0, 500)]
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        assert [e.payload for e in rh.read(0, 499)] == [payload(i, 1024) for i in range(500)]
        assert rh.length == 500 * 1024


@pytest.mark.compat
def test_runs_of_single_appends_on_java_bookies_read_back_identically(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """3 Java 4.17.3 bookies, E=3/W=2/A=2: 2,000 ``append_async`` calls handed over as runs; Apache BookKeeper's
    bookies take them and the ledger reads back byte for byte."""
    cluster = java_cluster_factory("4.17.3", bookies=3)
    with BookKeeper(cluster.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"pw")
        runs = _runs_of_single_appends(lh)
        futures = [lh.append_async(payload(i, 300)) for i in range(2000)]
        assert [fut.result(timeout=60) for fut in futures] == list(range(2000))
        assert runs and max(runs) > 1
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        assert [e.payload for e in rh.read(0, 1999)] == [payload(i, 300) for i in range(2000)]
        assert rh.length == 2000 * 300


def test_bulk_append_of_a_scoped_ledger_goes_over_v3(py_cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """A BP-35 scoped ledger (v3 adds, one entry at a time underneath) and a v3-only client keep the same contract."""
    from bkspark.protocol.ledger_name import ids_from_uuid
    import uuid

    scope_id, ledger_id = ids_from_uuid(uuid.UUID("4d0c0b7e-1111-4e22-9a3c-55aa0f00b01c"))
    for conf, scope in (({}, scope_id), ({"useV2WireProtocol": False}, 0)):
        with BookKeeper(module_zk_root.metadata_service_uri, **conf) as bk:
            lh = bk.create_ledger(3, 2, 2, password=b"pw", scope_id=scope, **({"ledger_id": ledger_id} if scope else {}))
            assert lh.append_many([payload(i) for i in range(120)]).result(timeout=60) == range(0, 120)
            assert lh.append_many(packed([payload(i) for i in range(120, 150)])).result(timeout=60) == range(120, 150)
            lh.close()
            rh = bk.open_ledger(lh.ledger_id, scope_id=scope, password=b"pw")
            assert [e.payload for e in rh.read(0, 149)] == [payload(i) for i in range(150)]
