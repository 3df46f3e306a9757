"""Reads of entries only the disk holds run on the bookie's read threads, not on its event loop
(docs/bookie.md, "Reads"): same bytes and errors as before, and the loop keeps serving other clients meanwhile."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from bkspark.protocol import v2, v2_bulk, v3
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from bookie_server.bookie import Bookie
from bookie_server.server import BookieServer
from bookie_server.entry_logs import cache_key, key_address, key_ledger
from bookie_server.storage_reads import CachedRange
from tests.unit.test_bookie_server import KEY, Conn, make_entry, with_bookie


def to_disk(bookie: Bookie) -> None:
    """Checkpoint (entries to entry logs and the index) and empty the read cache: every read is now cold."""
    assert bookie.journal is not None
    bookie.storage.checkpoint(bookie.journal.written_position)
    bookie.storage._read_cache.clear()
    bookie.storage._read_cache_bytes = 0


def one_read_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """No runs: every read of a v2 connection is parsed and handled in its turn, as on a connection's first chunk
    (the per-read path, its read-ahead and its waits; a run's cold reads go to a read thread as one job
    instead: docs/bookie.md, "Runs of single reads")."""
    monkeypatch.setattr(v2_bulk, "decode_plain_reads", lambda items: items)


class GatedColdReads:
    """Wraps ``LedgerStorage.read_cold`` / ``range_cold`` / ``read_run_cold``: each call waits for the gate, and says on which thread
    it ran."""

    def __init__(self, bookie: Bookie, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gate = threading.Event()
        self.threads: list[str] = []
        self.started = threading.Event()
        storage = bookie.storage
        for name in ("read_cold", "range_cold", "read_run_cold"):
            original = getattr(storage, name)

            def gated(*args: Any, _original: Any = original) -> Any:
                self.threads.append(threading.current_thread().name)
                self.started.set()
                assert self.gate.wait(10), "the test never opened the gate"
                return _original(*args)

            monkeypatch.setattr(storage, name, gated)


async def read(c: Conn, ledger: int, entry: int) -> Any:
    return await c.v2(v2.encode_read_request(ledger, entry))


def test_a_cold_read_does_not_stop_the_loop(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        a, b = await Conn.open(server.port), await Conn.open(server.port)
        old = [make_entry(1, i, b"old-%d" % i) for i in range(3)]
        for e in old:
            assert (await a.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
        to_disk(bookie)
        gated = GatedColdReads(bookie, monkeypatch)
        a.send(v2.encode_read_request(1, 1))  # cold: waits at the gate on a read thread
        assert await asyncio.get_running_loop().run_in_executor(None, gated.started.wait, 10)
        # Meanwhile the loop serves another client: an add and a hot read of it.
        new = make_entry(2, 0, b"new")
        assert (await b.v2(v2.encode_add_request(0, KEY, new))).rc == v2.EOK
        hot = await read(b, 2, 0)
        assert (hot.rc, bytes(hot.entry)) == (v2.EOK, new)
        assert not a.bodies  # the cold read has not answered yet
        gated.gate.set()
        cold = v2.decode_response(await a.body())
        assert (cold.rc, bytes(cold.entry)) == (v2.EOK, old[1])
        assert gated.threads == ["bookie-read_0"]
        assert cache_key(0, 1, 1) in bookie.storage._read_cache  # the loop cached what the read thread found
        a.close()
        b.close()

    body(tmp_path)


def test_cold_reads_give_the_bytes_and_errors_of_hot_reads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c = await Conn.open(server.port)
        entries = [make_entry(3, i, bytes([i]) * 100) for i in range(10)]
        for e in entries[:6] + entries[7:]:  # a gap at 6
            assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK

        async def everything() -> list[Any]:
            out = []
            for entry in (0, 5, 6, 9, 10, -1):
                r = await read(c, 3, entry)
                out.append((r.rc, bytes(r.entry) if r.rc == v2.EOK else b""))
            for start, count, size in ((0, 3, 1 << 20), (0, 0, 1 << 20), (0, 100, 600), (7, 100, 1 << 20), (6, 5, 1 << 20)):
                r = await c.v2(v2.encode_batch_read_request(3, start, 1, count, size))
                out.append((r.rc, [bytes(e) for e in r.entries]))
            c3 = await Conn.open(server.port)  # a connection speaks one protocol: v3 on its own
            r3 = await c3.v3(v3.read_request(5, 3, 4))
            out.append((r3.status, r3.readResponse.body, r3.readResponse.maxLAC))
            b3 = await c3.v3(v3.batch_read_request(6, 3, 2, 10, 1 << 20))
            out.append((b3.status, list(b3.batchReadResponse.entries), b3.batchReadResponse.maxLAC))
            c3.close()
            return out

        hot = await everything()
        to_disk(bookie)
        cold = await everything()
        assert cold == hot
        assert hot[0] == (v2.EOK, entries[0]) and hot[2][0] == v2.ENOENTRY and hot[5] == (v2.EOK, entries[9])
        c.close()

    body(tmp_path)


def test_a_batch_read_that_reaches_the_write_cache_ends_there_then_continues(tmp_path) -> None:  # type: ignore[no-untyped-def]
    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c = await Conn.open(server.port)
        entries = [make_entry(4, i, b"e%d" % i) for i in range(8)]
        for e in entries[:4]:
            assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
        to_disk(bookie)
        for e in entries[4:]:  # these stay in the write cache
            assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
        got: list[bytes] = []
        while len(got) < 8:
            r = await c.v2(v2.encode_batch_read_request(4, len(got), 1, 100, 1 << 20))
            assert r.rc == v2.EOK and r.entries
            got.extend(bytes(e) for e in r.entries)
        assert got == entries
        c.close()

    body(tmp_path)


def test_a_cold_batch_read_is_cached_as_one_range(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A batch read's entries from disk go into the read cache as one item (docs/bookie.md, "Reads"): the same
    batch read again is answered from memory with the same bytes, and so is a shorter one from the same entry
    or one whose budget or count stops it inside the range; ranges that follow each other chain; a batch read
    that starts inside a range goes to the disk.  What single reads put there stays, and the bytes are counted
    once per item."""

    @with_bookie(dbStorage_readAheadCacheBatchSize=3)
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c = await Conn.open(server.port)
        entries = [make_entry(9, i, bytes([i]) * 300) for i in range(30)]
        for e in entries:
            assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
        to_disk(bookie)
        one_read_at_a_time(monkeypatch)
        r = await read(c, 9, 10)  # a cold single read: 10 and its read-ahead (11, 12) go into the read cache
        assert (r.rc, bytes(r.entry)) == (v2.EOK, entries[10])
        assert cached_entries(bookie, 9) == [10, 11, 12]
        gated = GatedColdReads(bookie, monkeypatch)
        gated.gate.set()

        async def batch(first: int, count: int, size: int = 1 << 20) -> list[bytes]:
            r = await c.v2(v2.encode_batch_read_request(9, first, 1, count, size))
            assert r.rc == v2.EOK
            return [bytes(e) for e in r.entries]

        assert await batch(0, 10) == entries[:10]
        assert len(gated.threads) == 1 and cached_ranges(bookie, 9) == {0: 10}
        assert await batch(0, 10) == entries[:10]  # from memory
        assert await batch(0, 4) == entries[:4]
        assert await batch(0, 10, 36 + 3 * (len(entries[0]) + 4)) == entries[:3]  # the budget ends it
        assert len(gated.threads) == 1
        assert await batch(10, 10) == entries[10:20]  # 10..12 from the single reads' entries, then the disk
        assert len(gated.threads) == 2 and cached_ranges(bookie, 9) == {0: 10, 13: 7}
        assert await batch(0, 25) == entries[:25]  # 0..9 and 13..19 as ranges, 10..12 as entries, then disk
        assert len(gated.threads) == 3 and cached_ranges(bookie, 9) == {0: 10, 13: 7, 20: 5}
        assert await batch(0, 25) == entries[:25]
        assert await batch(5, 3) == entries[5:8]  # inside a range, not at its start: the disk
        assert len(gated.threads) == 4 and cached_ranges(bookie, 9) == {0: 10, 5: 3, 13: 7, 20: 5}
        assert cached_entries(bookie, 9) == [10, 11, 12]
        storage = bookie.storage
        assert storage._read_cache_bytes == sum(len(e) for e in entries[:25]) + sum(len(e) for e in entries[5:8])
        assert storage.get_range(0, 9, 0, 30, 1 << 20) == entries  # the loop thread's own path alike
        c.close()

    body(tmp_path)


def test_cached_ranges_are_bounded_and_leave_with_their_ledger(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Ranges count against the read cache's bytes (dbStorage_readAheadCacheMaxSizeMb) with the entries single
    reads bring, least recently used out first; one larger than a quarter of it is not kept, nor one of a ledger
    too large for the cache; a deleted ledger's ranges go with it, as do those a read thread brings back after
    the ledger was deleted."""

    @with_bookie(dbStorage_readAheadCacheBatchSize=1)
    async def body(bookie: Bookie, server: BookieServer) -> None:
        storage = bookie.storage
        c = await Conn.open(server.port)
        counts = {5: 4, 6: 4, 7: 4, 8: 12}
        entries = {ledger: [make_entry(ledger, i, bytes([i]) * 200) for i in range(n)] for ledger, n in counts.items()}
        for ledger, written in entries.items():
            for e in written:
                assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
        to_disk(bookie)
        size = len(entries[5][0])
        storage.read_cache_max_bytes = 9 * size - 1  # four ranges of two entries fit, not five, nor four and one

        async def batch(ledger: int, first: int, count: int) -> None:
            r = await c.v2(v2.encode_batch_read_request(ledger, first, 1, count, 1 << 20))
            assert r.rc == v2.EOK and [bytes(e) for e in r.entries] == entries[ledger][first : first + count]

        for ledger, first in ((5, 0), (5, 2), (6, 0), (6, 2), (7, 0)):
            await batch(ledger, first, 2)
        assert cached_ranges(bookie, 5) == {2: 2} and cached_ranges(bookie, 6) == {0: 2, 2: 2}  # (5, 0) went out
        assert cached_ranges(bookie, 7) == {0: 2} and storage._read_cache_bytes == size * 8
        await batch(7, 1, 3)  # 3 entries: over a quarter of the cache
        await batch(8, 0, 2)  # 12 entries of this size would not fit the cache
        assert cached_ranges(bookie, 7) == {0: 2} and cached_ranges(bookie, 8) == {}
        await batch(5, 2, 2)  # a hit: (5, 2) is now the most recently used
        one_read_at_a_time(monkeypatch)  # the per-read path caches what it reads whatever the ledger's size
        r = await read(c, 8, 0)  # a single read's entry: the least recently used range, (6, 0), makes room
        assert r.rc == v2.EOK and cached_entries(bookie, 8) == [0]
        assert cached_ranges(bookie, 6) == {2: 2} and cached_ranges(bookie, 5) == {2: 2}
        assert storage._read_cache_bytes == size * 7
        storage.delete_ledger(0, 5)
        assert cached_ranges(bookie, 5) == {} and storage._read_cache_bytes == size * 5
        storage.remember_range(0, 5, 0, entries[5][:2])  # a read thread's answer after the deletion
        assert cached_ranges(bookie, 5) == {} and storage._read_cache_bytes == size * 5
        c.close()

    body(tmp_path)


@pytest.mark.parametrize(
    "step, error",
    [
        (("read_cold", "range_cold", "read_run_cold"), OSError(5, "Input/output error")),  # on a read thread
        # caching what the read thread brought, on the loop, before the answer goes out
        (("remember", "remember_range", "remember_run"), MemoryError("no room to cache")),
    ],
    ids=["disk", "cache"],
)
def test_a_failing_cold_read_answers_eio_and_the_bookie_goes_on(tmp_path, monkeypatch, step, error) -> None:  # type: ignore[no-untyped-def]
    """Whichever step of a cold read fails, the request is answered (EIO, which a client takes to another
    replica), never left waiting, and the next read succeeds."""

    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c = await Conn.open(server.port)
        e = make_entry(5, 0, b"x")
        assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
        to_disk(bookie)

        def broken(*_args: Any) -> Any:
            raise error

        for name in step:
            monkeypatch.setattr(bookie.storage, name, broken)
        assert (await asyncio.wait_for(read(c, 5, 0), 10)).rc == v2.EIO
        batch = c.v2(v2.encode_batch_read_request(5, 0, 1, 10, 1 << 20))
        assert (await asyncio.wait_for(batch, 10)).rc == v2.EIO
        c3 = await Conn.open(server.port)
        assert (await asyncio.wait_for(c3.v3(v3.read_request(9, 5, 0)), 10)).status == pb.EIO
        c3.close()
        monkeypatch.undo()
        r = await read(c, 5, 0)
        assert (r.rc, bytes(r.entry)) == (v2.EOK, e)
        c.close()

    body(tmp_path)


def test_a_client_that_leaves_during_a_cold_read_harms_no_one(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        a = await Conn.open(server.port)
        e = make_entry(6, 0, b"y")
        assert (await a.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
        to_disk(bookie)
        gated = GatedColdReads(bookie, monkeypatch)
        a.send(v2.encode_batch_read_request(6, 0, 1, 10, 1 << 20))
        assert await asyncio.get_running_loop().run_in_executor(None, gated.started.wait, 10)
        a.close()
        await asyncio.sleep(0.1)
        gated.gate.set()
        await asyncio.sleep(0.1)
        b = await Conn.open(server.port)
        r = await read(b, 6, 0)
        assert (r.rc, bytes(r.entry)) == (v2.EOK, e)
        # The same with a run of single reads on a read thread as one job (docs/bookie.md, "Runs of single reads").
        bookie.storage._read_cache.clear()
        bookie.storage._read_cache_bytes = 0
        gated.gate.clear()
        gated.started.clear()
        b.send(b"".join(v2.encode_read_request(6, 0) for _ in range(3)))
        assert await asyncio.get_running_loop().run_in_executor(None, gated.started.wait, 10)
        b.close()
        await asyncio.sleep(0.1)
        gated.gate.set()
        await asyncio.sleep(0.1)
        assert server.reads_gate.count == 0
        c = await Conn.open(server.port)
        r = await read(c, 6, 0)
        assert (r.rc, bytes(r.entry)) == (v2.EOK, e)
        c.close()

    body(tmp_path)


def test_a_connection_waits_with_four_cold_reads_out(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """COLD_READS_PER_CONNECTION: the fifth and sixth reads are not dispatched until one of the four is answered
    (without read-ahead: with it, they would wait for the first read's instead)."""
    from bookie_server.admission import COLD_READS_PER_CONNECTION

    @with_bookie(dbStorage_readAheadCacheBatchSize=1)
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c = await Conn.open(server.port)
        entries = [make_entry(7, i, b"z%d" % i) for i in range(6)]
        for e in entries:
            assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
        to_disk(bookie)
        gated = GatedColdReads(bookie, monkeypatch)
        dispatched: list[int] = []
        original = bookie.reads.read_entry_soon

        def counting(scope: int, ledger: int, entry: int) -> Any:
            dispatched.append(entry)
            return original(scope, ledger, entry)

        monkeypatch.setattr(bookie.reads, "read_entry_soon", counting)
        one_read_at_a_time(monkeypatch)  # (a run's cold reads are one job: test_bookie_read_runs.py)
        c.send(b"".join(v2.encode_read_request(7, i) for i in range(6)))
        await asyncio.sleep(0.3)
        assert COLD_READS_PER_CONNECTION == 4 and dispatched == [0, 1, 2, 3]
        gated.gate.set()
        answers = [v2.decode_response(await c.body()) for _ in range(6)]
        assert sorted((a.entry_id, bytes(a.entry)) for a in answers) == list(enumerate(entries))
        assert dispatched == [0, 1, 2, 3, 4, 5]
        c.close()

    body(tmp_path)


def cached_entries(bookie: Bookie, ledger: int) -> list[int]:
    """The ids of the ledger's single entries in the read cache."""
    ledger_key = key_ledger(cache_key(0, ledger, 0))
    return sorted(
        key_address(key)[2]
        for key, item in bookie.storage._read_cache.items()
        if key_ledger(key) == ledger_key and not isinstance(item, CachedRange)
    )


def cached_ranges(bookie: Bookie, ledger: int) -> dict[int, int]:
    """The ledger's ranges in the read cache: first entry id -> entries."""
    ledger_key = key_ledger(cache_key(0, ledger, 0))
    return {
        item.first: len(item.entries)
        for key, item in bookie.storage._read_cache.items()
        if key_ledger(key) == ledger_key and isinstance(item, CachedRange)
    }


def test_a_cold_single_read_brings_the_next_entries_of_its_ledger(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """BookKeeper's read-ahead (dbStorage_readAheadCacheBatchSize): the entries after a cold one in its entry log,
    of the same ledger only, up to the batch size, with gaps (a striped ledger's bookie holds some ids only);
    the next pipelined reads are answered from memory, with the same bytes."""

    @with_bookie(dbStorage_readAheadCacheBatchSize=5)
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c = await Conn.open(server.port)
        stored = {7: [0, 1, 3, 4, 6, 7, 9], 8: [0, 1, 2]}  # ledger 7 as one bookie of E=3, W=2 holds it
        entries = {(ledger, i): make_entry(ledger, i, b"%d-%d" % (ledger, i) * 50) for ledger, ids in stored.items() for i in ids}
        for i in range(10):  # the two ledgers' adds interleaved: the checkpoint sorts them per ledger
            for ledger in (7, 8):
                if (ledger, i) in entries:
                    assert (await c.v2(v2.encode_add_request(0, KEY, entries[(ledger, i)]))).rc == v2.EOK
        to_disk(bookie)
        one_read_at_a_time(monkeypatch)
        r = await read(c, 7, 1)
        assert (r.rc, bytes(r.entry)) == (v2.EOK, entries[(7, 1)])
        assert cached_entries(bookie, 7) == [1, 3, 4, 6, 7]  # five in all, from the one asked for
        assert cached_entries(bookie, 8) == []  # the next ledger's records are not read ahead
        gated = GatedColdReads(bookie, monkeypatch)  # a read thread now would wait for ever
        for i in (3, 4, 6, 7):
            r = await read(c, 7, i)
            assert (r.rc, bytes(r.entry)) == (v2.EOK, entries[(7, i)])
        assert gated.threads == []
        gated.gate.set()
        r = await read(c, 7, 9)  # past the read-ahead: a read thread again, which then brings no more
        assert (r.rc, bytes(r.entry)) == (v2.EOK, entries[(7, 9)]) and len(gated.threads) == 1
        r = await read(c, 8, 2)
        assert (r.rc, bytes(r.entry)) == (v2.EOK, entries[(8, 2)]) and cached_entries(bookie, 8) == [2]
        c.close()

    body(tmp_path)


def test_a_scans_cold_reads_read_ahead_twice_as_far_each_time_up_to_a_bound(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A ledger's cold single reads that follow on from its last one (a scan) read twice as many entries ahead
    each time, up to READ_AHEAD_GROWTH times dbStorage_readAheadCacheBatchSize (docs/bookie.md, "Reads"); a cold
    read that does not follow on (another place in the ledger) reads the setting's number again. The same bytes
    either way."""
    from bookie_server.reads import READ_AHEAD_GROWTH

    @with_bookie(dbStorage_readAheadCacheBatchSize=4)
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c = await Conn.open(server.port)
        entries = {i: make_entry(5, i, b"%d" % i * 20) for i in range(400)}
        for i in range(400):
            assert (await c.v2(v2.encode_add_request(0, KEY, entries[i]))).rc == v2.EOK
        to_disk(bookie)
        one_read_at_a_time(monkeypatch)
        brought = []
        first = 0
        while first < 400:  # read the first entry the cache lacks, as a scan's next cold read is
            before = len(cached_entries(bookie, 5))
            r = await read(c, 5, first)
            assert (r.rc, bytes(r.entry)) == (v2.EOK, entries[first])
            now = cached_entries(bookie, 5)
            brought.append(len(now) - before)
            first = next((i for i in range(first, 400) if i not in set(now)), 400)
        cap = READ_AHEAD_GROWTH * 4
        assert brought[:6] == [4, 8, 16, 32, 64, cap] and set(brought[5:-1]) == {cap}
        assert sum(brought) == 400 and cached_entries(bookie, 5) == list(range(400))
        bookie.storage._read_cache.clear()
        bookie.storage._read_cache_bytes = 0
        r = await read(c, 5, 100)  # the last cold read was near the end: not a scan's next one
        assert (r.rc, bytes(r.entry)) == (v2.EOK, entries[100]) and cached_entries(bookie, 5) == [100, 101, 102, 103]
        r = await read(c, 5, 10)  # back before the last one: the setting again
        assert (r.rc, bytes(r.entry)) == (v2.EOK, entries[10]) and cached_entries(bookie, 5) == [10, 11, 12, 13, 100, 101, 102, 103]
        # The last cold read is remembered for SEQUENTIAL_LEDGERS ledgers; the least recently read goes first.
        from bookie_server.reads import SEQUENTIAL_LEDGERS

        for ledger in range(1000, 1000 + SEQUENTIAL_LEDGERS):
            assert bookie.reads._read_ahead_size((0, ledger, 0)) == 4
        assert len(bookie.reads._last_read_ahead) == SEQUENTIAL_LEDGERS and (0, 5) not in bookie.reads._last_read_ahead
        c.close()

    body(tmp_path)


def test_a_read_ahead_of_one_reads_only_the_entry(tmp_path) -> None:  # type: ignore[no-untyped-def]
    @with_bookie(dbStorage_readAheadCacheBatchSize=1)
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c = await Conn.open(server.port)
        for i in range(4):
            assert (await c.v2(v2.encode_add_request(0, KEY, make_entry(3, i, b"e")))).rc == v2.EOK
        to_disk(bookie)
        assert (await read(c, 3, 0)).rc == v2.EOK
        assert cached_entries(bookie, 3) == [0]
        c.close()

    body(tmp_path)


def test_entries_read_again_are_counted_once_in_the_read_cache(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Overlapping read-aheads bring the same entries again: the cache's byte count must not grow with them
    (it did, and the cache then evicted what it held: a second pass over a ledger ran 8x slower)."""

    @with_bookie(dbStorage_readAheadCacheBatchSize=100)
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c = await Conn.open(server.port)
        for i in range(20):
            assert (await c.v2(v2.encode_add_request(0, KEY, make_entry(4, i, b"p" * 100)))).rc == v2.EOK
        to_disk(bookie)
        for first in (0, 5, 10, 0):  # each brings the rest of the ledger again
            found = bookie.storage.read_cold((0, 4, first), 100)
            assert [key_address(key)[2] for key, _ in found] == list(range(first, 20))
            bookie.storage.remember(found)
        storage = bookie.storage
        assert cached_entries(bookie, 4) == list(range(20))
        assert storage._read_cache_bytes == sum(len(d) for d in storage._read_cache.values())
        c.close()

    body(tmp_path)


def test_a_cold_batch_read_walks_the_entry_log_instead_of_the_index(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A checkpoint writes a ledger's entries in order, so a cold batch read takes each next entry from the record
    that follows the last one in the chunk it read (the key in the record's header says it is the one wanted),
    not from an index read each (docs/bookie.md, "Reads").  The bytes are the same; a gap (a striped ledger's),
    another ledger's record or the end of the chunk sends it back to the index."""
    storage_path = tmp_path / "l"
    from bookie_server import storage as storage_module
    from bookie_server.journal import JournalPosition

    storage = storage_module.LedgerStorage([storage_path])
    storage.open()
    written = {}
    for ledger, ids in ((1, range(0, 400)), (2, range(0, 400, 2)), (3, range(0, 50))):
        for i in ids:
            written[(ledger, i)] = make_entry(ledger, i, bytes([i % 251]) * (700 + i % 300))
            storage.put_entry(0, ledger, i, i - 1, written[(ledger, i)])
    storage.checkpoint(JournalPosition(1, 1))
    index_reads = []
    from bookie_server.entry_logs import LedgerDirectory

    original = LedgerDirectory.read_record

    def counted(*args: Any) -> bytes:
        index_reads.append(args[2])
        return original(*args)

    monkeypatch.setattr(LedgerDirectory, "read_record", counted)
    got = storage.range_cold(0, 1, 0, 400, 1 << 30, [], 0)
    assert got == [written[(1, i)] for i in range(400)]
    # One index read at the start and one per 256 KiB chunk the walk ran out of (about 400 KB here), not 400.
    assert 2 <= len(index_reads) <= 4, index_reads
    index_reads.clear()
    got = storage.range_cold(0, 1, 390, 420, 1 << 30, [], 0)  # runs into ledger 2's records, then the end
    assert got == [written[(1, i)] for i in range(390, 400)]
    assert len(index_reads) == 1
    got = storage.range_cold(0, 2, 0, 10, 1 << 30, [], 0)  # a gap after entry 0: the range ends there
    assert got == [written[(2, 0)]]
    got = storage.range_cold(0, 3, 10, 50, 1 << 30, [], 0)
    assert got == [written[(3, i)] for i in range(10, 50)]
    got = storage.range_cold(0, 3, 10, 50, 1 << 30, [b"before"], 4 + 6)  # what memory gave comes first
    assert got == [b"before"] + [written[(3, i)] for i in range(10, 50)]
    storage.close()
