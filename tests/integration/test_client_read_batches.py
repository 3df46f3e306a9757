"""``ReadHandle.read_batches``: Arrow batches from pipelined batch reads (issue 14), against real bookies.

Every test compares the bytes with the old path (``read``, one request per entry) and checks that several
requests were in flight over several bookies where the ledger allows it.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest

from bkspark.client import BookKeeper
from bkspark.errors import DigestMismatchError, InvalidOptionError
from tests.harness.python_bookie import PythonBookieCluster

pytestmark = pytest.mark.integration


def payload(i: int) -> bytes:
    return (b"entry-%06d-" % i) * (1 + i % 7)


def write_ledger(bk: BookKeeper, count: int, ensemble: int = 3, write: int = 3, ack: int = 2) -> int:
    lh = bk.create_ledger(ensemble, write, ack, password=b"pw")
    futures = [lh.append_async(payload(i)) for i in range(count)]
    for f in futures:
        f.result(timeout=60)
    lh.close()
    return lh.ledger_id


def record_batch_reads(bk: BookKeeper) -> list[str]:
    """Wrap the ops layer's batch read so the test sees which bookie each batch request went to."""
    seen: list[str] = []
    ops = bk.aio.services.ops
    original = ops.batch_read_async

    def recording(bookie: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(bookie)
        return original(bookie, *args, **kwargs)

    ops.batch_read_async = recording  # type: ignore[method-assign]
    return seen


def check_same_as_read(rh: Any, first: int, last: int, **options: Any) -> list[Any]:
    batches = list(rh.read_batches(first, last, **options))
    ids = [i for b in batches for i in b.column("entry_id").to_pylist()]
    data = [p for b in batches for p in b.column("payload").to_pylist()]
    assert ids == list(range(first, last + 1))
    assert data == [e.payload for e in rh.read(first, last)]
    assert batches[0].schema.names == ["entry_id", "payload"]
    return batches


_READ_ALL = """
import hashlib, json, sys
from bkspark.client import BookKeeper, PackedPayloads
from bkspark.client import bookkeeper as handles
from bkspark.protocol import speedups
uri, ledger = sys.argv[1], int(sys.argv[2])
build, pieces = handles.payload_runs_batch, []

def recording(first, group):
    pieces.extend(type(piece) is PackedPayloads for piece in group)
    return build(first, group)

handles.payload_runs_batch = recording
with BookKeeper(uri, readEntryTimeoutSec=10) as bk:
    rh = bk.open_ledger(ledger, password=b"pw", recovery=False)
    digest, count = hashlib.sha256(), 0
    for batch in rh.read_batches(0, rh.last_add_confirmed, batch_size=50):
        for value in batch.column("payload").to_pylist():
            digest.update(len(value).to_bytes(4, "big") + value)
            count += 1
print(json.dumps({"sha256": digest.hexdigest(), "count": count, "compiled": speedups.speedups is not None,
                  "packed_pieces": sum(pieces), "pieces": len(pieces)}))
"""


def read_in_process_of_its_own(uri: str, ledger: int, no_extensions: bool) -> dict[str, Any]:
    """read_batches of the whole ledger in a new Python process, the compiled path on or off
    (``BKSPARK_NO_EXTENSIONS``): a hash of the payloads, their count, which path ran."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "BKSPARK_NO_EXTENSIONS": "1" if no_extensions else "0"}
    proc = subprocess.run([sys.executable, "-c", _READ_ALL, uri, str(ledger)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_both_paths_read_the_same(uri: str, ledger: int) -> None:
    compiled = read_in_process_of_its_own(uri, ledger, no_extensions=False)
    reference = read_in_process_of_its_own(uri, ledger, no_extensions=True)
    assert compiled["compiled"] and not reference["compiled"]
    assert (compiled["sha256"], compiled["count"]) == (reference["sha256"], reference["count"])
    # Compiled: the answers' payloads were checked and gathered in one pass (packed runs), all but the pieces a
    # bad copy sent down the list path; the reference never packs.
    assert compiled["packed_pieces"] >= compiled["pieces"] - 2 and compiled["packed_pieces"] > 0
    assert reference["packed_pieces"] == 0 and reference["pieces"] > 0


@pytest.fixture
def python_cluster(zk_root, tmp_path):  # type: ignore[no-untyped-def]
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=3, journal_sync_data=False) as c:
        c.start_all()
        yield c


def test_large_entries_make_chunks_of_one_request_each_spread_over_the_ensemble(python_cluster) -> None:  # type: ignore[no-untyped-def]
    """batch_size counts entries; with 16 KiB entries, 1,000 of them were one chunk of sequential requests to one
    bookie. Once entry sizes are known a chunk is at most one request's bytes, so several are in flight."""
    with BookKeeper(python_cluster.metadata_service_uri, readEntryTimeoutSec=10) as bk:
        lh = bk.create_ledger(3, 3, 2, password=b"pw")
        for f in [lh.append_async(bytes([i % 251]) * 16384) for i in range(600)]:
            f.result(timeout=60)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        seen = record_batch_reads(bk)
        check_same_as_read(rh, 0, 599, batch_size=1000, max_size=256 * 1024, bytes_in_flight=2 * 1024 * 1024)
        assert len(set(seen)) == 3


def test_python_bookies_arrow_batches_spread_over_the_ensemble(python_cluster) -> None:  # type: ignore[no-untyped-def]
    with BookKeeper(python_cluster.metadata_service_uri, readEntryTimeoutSec=10) as bk:
        ledger = write_ledger(bk, 1000)
        rh = bk.open_ledger(ledger, password=b"pw")
        seen = record_batch_reads(bk)
        batches = check_same_as_read(rh, 0, 999, batch_size=30, rows_per_group=256)
        assert [b.num_rows for b in batches] == [256, 256, 256, 232]
        assert len(set(seen)) == 3  # E = W: every bookie served batch requests
        # a sub-range, the byte bounds at their smallest, and the LAC clamp
        check_same_as_read(rh, 17, 411, batch_size=7, bytes_in_flight=1, bytes_per_group=1)
        assert [b.num_rows for b in rh.read_batches(990, 5000)] == [10]
        # single reads instead of batches give the same bytes
        check_same_as_read(rh, 0, 999, batch=False, batch_size=64)
        with pytest.raises(InvalidOptionError):
            list(rh.read_batches(0, 10, rows_per_group=0))
        # a reader that stops early: the requests still in flight are cancelled and the handle reads on
        stream = rh.read_batches(0, 999, batch_size=10, rows_per_group=10)
        assert next(stream).num_rows == 10
        stream.close()
        pending = asyncio_run_on(bk, _tasks_of_stream())
        assert pending == []
        check_same_as_read(rh, 0, 99, batch_size=10)
        # a closed handle refuses, typed
        other = bk.open_ledger(ledger, password=b"pw")
        other.close()
        with pytest.raises(Exception) as info:
            list(other.read_batches(0, 10))
        assert type(info.value).__module__ == "bkspark.errors"
        # the async API yields the same batches on the client's loop
        async def collect() -> list[Any]:
            return [b async for b in rh.aio.read_batches(0, 999, batch_size=100)]

        got = asyncio_run_on(bk, collect())
        assert [p for b in got for p in b.column("payload").to_pylist()] == [payload(i) for i in range(1000)]


async def _tasks_of_stream() -> list[Any]:
    """The chunk reads still running on the client's loop (a cancelled one is gone after a loop turn)."""
    import asyncio

    for _ in range(100):
        left = [t for t in asyncio.all_tasks() if "read_chunk" in repr(t.get_coro()) and not t.done()]
        if not left:
            return []
        await asyncio.sleep(0.01)
    return left


def asyncio_run_on(bk: BookKeeper, coro: Any) -> Any:
    import asyncio

    return asyncio.run_coroutine_threadsafe(coro, bk.loop).result(60)


@pytest.mark.compat
def test_an_iteration_the_client_closed_under_ends_with_client_closed_error(python_cluster) -> None:  # type: ignore[no-untyped-def]
    """Another thread closes the client while a reader holds unfinished iterators: the next step of a
    ``read_batches`` or ``read_batched`` that needs the loop raises ClientClosedError, and closing a ``read_payload_groups`` (what a Spark task stopped
    early does) raises nothing (it raised ClientClosedError from its clean-up before)."""
    from bkspark.errors import ClientClosedError

    with BookKeeper(python_cluster.metadata_service_uri) as writer:
        lid = write_ledger(writer, 3_000)
    bk = BookKeeper(python_cluster.metadata_service_uri)
    rh = bk.open_ledger(lid, password=b"pw")
    batches = rh.read_batches(0, 2_999, rows_per_group=100)
    first = next(batches)
    assert first.column("entry_id").to_pylist()[0] == 0
    open_again = rh.read_payload_groups(0, 2_999, rows_per_group=100)
    next(open_again)
    entries = rh.read_batched(0, 2_999)
    next(entries)
    # docs/client.md, "Closing the client": each kind, stepped on or closed, answers the same way.
    groups = rh.read_payload_groups(0, 2_999, rows_per_group=100)
    next(groups)
    closed_unstepped = [rh.read_batches(0, 2_999, rows_per_group=100), rh.read_batched(0, 2_999)]
    for iterator in closed_unstepped:
        next(iterator)
    bk.close()
    for iterator in (batches, entries, groups):
        with pytest.raises(ClientClosedError):
            for _ in iterator:
                pass
    open_again.close()  # the generator's clean-up meets the closed client: no error
    for iterator in closed_unstepped:
        iterator.close()  # type: ignore[attr-defined]


def test_java_417_bookies_batches_striped_and_digest_errors(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    from bkspark.protocol.digest import Digester, master_key

    cluster = java_cluster_factory("4.17.3", bookies=3)
    with BookKeeper(cluster.metadata_service_uri, readEntryTimeoutSec=10, reorderReadSequenceEnabled=False) as bk:
        ledger = write_ledger(bk, 600)
        rh = bk.open_ledger(ledger, password=b"pw")
        seen = record_batch_reads(bk)
        check_same_as_read(rh, 0, 599, batch_size=50)
        assert len(set(seen)) == 3
        # a striped ledger (E > W): pipelined single reads over every write set
        striped = write_ledger(bk, 300, ensemble=3, write=2, ack=2)
        seen.clear()
        check_same_as_read(bk.open_ledger(striped, password=b"pw"), 0, 299, batch_size=40)
        assert seen == []  # no batch request for a striped ledger

        # a bad copy of entry 3 on the bookie asked first: the batch keeps the verified prefix, asks the next
        lh_md = rh.metadata
        ops = bk.aio.services.ops

        def overwrite(bookie: str, entry_id: int, data: bytes, target: int = ledger) -> None:
            done: concurrent.futures.Future = concurrent.futures.Future()
            bk.loop.call_soon_threadsafe(
                lambda: ops.add(bookie, target, entry_id, master_key(b"pw"), data, 0x0002, 0,
                                lambda _r, e, _a: done.set_result(e))
            )
            assert done.result(10) is None

        def bad_copy(target: int, entry_id: int) -> bytes:
            good = Digester("CRC32C", b"pw").package_entry(target, entry_id, entry_id - 1, 0, payload(entry_id))
            return bytes(good[:-1]) + bytes([good[-1] ^ 0xFF])

        bad = bad_copy(ledger, 3)
        overwrite(lh_md.last_ensemble[0], 3, bad)
        rh2 = bk.open_ledger(ledger, password=b"pw")
        check_same_as_read(rh2, 0, 599, batch_size=50)
        # every copy bad: the error reaches the caller, typed
        for bookie in lh_md.last_ensemble:
            overwrite(bookie, 3, bad)
        with pytest.raises(DigestMismatchError):
            list(bk.open_ledger(ledger, password=b"pw").read_batches(0, 599, batch_size=50))

        # the striped ledger's range reads: a bad copy of entry 5 on the bookie asked first is read again from
        # the other replica once the range is in; both copies bad, the error reaches the caller, typed
        striped_ensemble = bk.open_ledger(striped, password=b"pw").metadata.last_ensemble
        overwrite(striped_ensemble[5 % 3], 5, bad_copy(striped, 5), striped)
        assert [p for b in check_same_as_read(bk.open_ledger(striped, password=b"pw"), 0, 299, batch_size=40)
                for p in b.column("payload").to_pylist()][5] == payload(5)
        overwrite(striped_ensemble[6 % 3], 5, bad_copy(striped, 5), striped)
        with pytest.raises(DigestMismatchError):
            list(bk.open_ledger(striped, password=b"pw").read_batches(0, 299, batch_size=40))

        # The compiled path (bkspark/protocol/_speedups.c) and the pure-Python reference read the same bytes, in
        # processes of their own, from a ledger of their own: clean, then with a bad copy on one bookie.
        other = write_ledger(bk, 600)
        assert_both_paths_read_the_same(cluster.metadata_service_uri, other)
        overwrite(bk.open_ledger(other, password=b"pw").metadata.last_ensemble[0], 7, bad_copy(other, 7), other)
        assert_both_paths_read_the_same(cluster.metadata_service_uri, other)


@pytest.mark.compat
def test_java_416_bookies_without_batch_read(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = java_cluster_factory("4.16.6", bookies=3)
    with BookKeeper(cluster.metadata_service_uri, readEntryTimeoutSec=10) as bk:
        ledger = write_ledger(bk, 400)
        rh = bk.open_ledger(ledger, password=b"pw")
        check_same_as_read(rh, 0, 399, batch_size=50)
        check_same_as_read(rh, 0, 399, batch=False)
