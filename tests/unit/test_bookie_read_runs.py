"""Runs of plain v2 single reads (docs/bookie.md, "Reads"): a chunk's consecutive READENTRY requests without the
fencing flag are admitted with one gate call and those memory holds are answered with one frame buffer, the others
take the per-read path; and cold reads that a read-ahead on a read thread will answer wait for it."""

from __future__ import annotations

import asyncio
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from bkspark.protocol import v2
from bookie_server import admission as admission_module
from bookie_server import v2_handlers as v2_handlers_module
from bookie_server.connection import Connection
from bookie_server.bookie import Bookie
from bookie_server.server import BookieServer
from tests.unit.test_bookie_backpressure import track_max
from tests.unit.test_bookie_cold_reads import GatedColdReads, cached_entries, one_read_at_a_time, to_disk
from tests.unit.test_bookie_server import KEY, Conn, make_entry, with_bookie


def server_side(server: BookieServer) -> list[Any]:
    """The server's connection objects."""
    return list(server.connections)


def count_run_jobs(bookie: Bookie, monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[int, int]]]:
    """The reads of each run's job on the read threads (``LedgerStorage.read_run_cold``), as they are called."""
    jobs: list[list[tuple[int, int]]] = []
    original = bookie.storage.read_run_cold

    def counted(scope_id: int, reads: list[tuple[int, int]], budget: int) -> Any:
        jobs.append(list(reads))
        return original(scope_id, reads, budget)

    monkeypatch.setattr(bookie.storage, "read_run_cold", counted)
    return jobs


def count_single_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Entry ids of the reads that took the per-read path (``Connection._v2_read``)."""
    seen: list[int] = []
    original = Connection._v2_read

    def counted(self: Any, ledger_id: int, entry_id: int, *args: Any) -> None:
        seen.append(entry_id)
        original(self, ledger_id, entry_id, *args)

    monkeypatch.setattr(Connection, "_v2_read", counted)
    return seen


#: (ledger, entry, flags, master key, version) of the mixed chunk of reads, and which of them take the per-read path
#: in a run: entry -1, a fencing read, an unknown ledger, a bad version (the misses go to the read threads as jobs).
MIXED = [
    (1, 20, 0, None, 2), (1, 21, 0, None, 2), (1, 22, 0, None, 2),  # the write cache
    (1, 10, 0, None, 2), (1, 11, 0, None, 2),  # the read cache
    (1, 3, 0, None, 2),  # the disk
    (1, 23, 0, None, 2),
    (1, -1, 0, None, 2),  # the LAC read: the last entry
    (2, 1, v2.FLAG_DO_FENCING, KEY, 2),  # fencing, in the middle of the run
    (2, 2, 0, None, 2),
    (99, 0, 0, None, 2),  # an unknown ledger
    (1, 24, 0, None, 3),  # a bad version
    (1, 25, 0, None, 0),  # the legacy header
    (1, 26, v2.FLAG_HIGH_PRIORITY, None, 2),
    (1, 100, 0, None, 2),  # no such entry
    (1, 12, 0, None, 2),
    (1, 5, 0, None, 2),  # the disk again
    (1, 27, 0, None, 1),
]
NOT_AT_ONCE = [-1, 1, 0, 24]
#: The plain misses of the mixed chunk, as the run's jobs on the read threads asked for them (``read_run_cold``).
RUN_JOBS = [[(1, 3)], [(1, 100), (1, 5)]]


def mixed_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: bool) -> dict[str, Any]:
    """The answers (raw frame bodies), metrics and per-read-path reads of the mixed chunk, with or without runs."""
    out: dict[str, Any] = {}

    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c = await Conn.open(server.port)
        entries = [make_entry(1, i, bytes([i]) * (50 + i)) for i in range(30)]
        for e in entries[:20]:
            assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
        to_disk(bookie)
        for e in entries[20:] + [make_entry(2, i, b"two") for i in range(4)]:
            assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
        bookie.storage.remember(bookie.storage.read_cold((0, 1, 10), 5))  # the read cache: 10..14
        single = count_single_reads(monkeypatch)
        jobs = count_run_jobs(bookie, monkeypatch)
        if not runs:
            one_read_at_a_time(monkeypatch)
        c.send(b"".join(v2.encode_read_request(ledger, entry, flags, key, version)
                        for ledger, entry, flags, key, version in MIXED))
        out["answers"] = [bytes(await c.body()) for _ in MIXED]
        await asyncio.sleep(0.05)
        assert not c.bodies  # each read answered once
        out["single"] = single
        out["jobs"] = jobs
        metrics = server.metrics
        out["metrics"] = (
            {(op, ok): sum(hist.counts)  # the buckets depend on the latencies
             for op in ("READ_ENTRY", "READ_ENTRY_FENCE_REQUEST") for ok, hist in metrics.requests[op].items()},
            metrics.read_bytes.value,
        )
        assert server.reads_gate.count == 0 and all(conn._permits_held == 0 for conn in server_side(server))
        c.close()

    body(tmp_path)
    monkeypatch.undo()
    return out


def test_a_run_answers_byte_for_byte_what_single_reads_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hits of the write cache and the read cache, misses, the LAC read, a fencing read in the middle, an unknown
    ledger, bad and legacy versions, a missing entry: the same frames, the same metrics (requests per success,
    bytes read), every permit back; the run sent its plain misses to the read threads as two jobs and only the
    others down the per-read path, and the answers memory gave leave in the order of their requests, before the
    others."""
    run = mixed_answers(tmp_path / "runs", monkeypatch, runs=True)
    single = mixed_answers(tmp_path / "single", monkeypatch, runs=False)
    assert sorted(run["answers"]) == sorted(single["answers"])
    assert run["metrics"] == single["metrics"]
    assert run["metrics"][0][("READ_ENTRY", True)] == 14 and run["metrics"][0][("READ_ENTRY", False)] == 3
    assert sorted(run["single"]) == sorted(NOT_AT_ONCE) and run["jobs"] == RUN_JOBS
    assert len(single["single"]) == len(MIXED) and single["jobs"] == []
    decoded = [v2.decode_response(a) for a in run["answers"]]
    rcs = {(r.ledger_id, r.entry_id): r.rc for r in decoded}
    assert rcs[(99, 0)] == v2.ENOLEDGER and rcs[(1, 24)] == v2.EBADVERSION and rcs[(1, 100)] == v2.ENOENTRY
    assert all(rc == v2.EOK for key, rc in rcs.items() if key not in {(99, 0), (1, 24), (1, 100)})
    hits = [(r.ledger_id, r.entry_id) for r in decoded if r.entry_id in (20, 21, 22, 10, 11)]
    assert hits == [(1, 20), (1, 21), (1, 22), (1, 10), (1, 11)]  # in order, first: nothing before them waited


@with_bookie(maxReadsInProgressLimit=3, dbStorage_readAheadCacheBatchSize=1)
async def test_runs_cut_by_the_reads_gate_park_and_resume(bookie: Bookie, server: BookieServer) -> None:
    """Two connections send 300 reads each, one in five of an entry only the disk holds (it keeps its permit until a
    read thread brings it), against a bound of 3 reads in progress: each run is admitted a prefix at a time, the
    connections park and resume, the bound is never passed, every read is answered once with its entry, every
    permit comes back."""
    writer = await Conn.open(server.port)
    entries = {(ledger, i): make_entry(ledger, i, b"%d" % i * 20) for ledger in (1, 2) for i in range(100)}
    writer.send(b"".join(v2.encode_add_request(0, KEY, e) for (ledger, i), e in entries.items() if i < 50))
    for _ in range(100):
        assert v2.decode_response(await writer.body()).rc == v2.EOK
    to_disk(bookie)  # 0..49 on disk, 50..99 in the write cache
    writer.send(b"".join(v2.encode_add_request(0, KEY, e) for (ledger, i), e in entries.items() if i >= 50))
    for _ in range(100):
        assert v2.decode_response(await writer.body()).rc == v2.EOK
    conns = [await Conn.open(server.port) for _ in range(2)]
    for ledger, c in zip((1, 2), conns):
        assert (await c.v2(v2.encode_read_request(ledger, 50))).rc == v2.EOK  # the connection speaks v2 now
    peak = track_max(server.reads_gate)
    wanted = [i if i % 5 == 0 else 50 + i % 50 for i in range(300)]
    for ledger, c in zip((1, 2), conns):
        c.send(b"".join(v2.encode_read_request(ledger, i % 100) for i in wanted))
    for ledger, c in zip((1, 2), conns):
        answers = [v2.decode_response(await c.body()) for _ in range(300)]
        assert sorted((a.ledger_id, a.entry_id, bytes(a.entry)) for a in answers) == sorted(
            (ledger, i % 100, entries[(ledger, i % 100)]) for i in wanted)
    assert peak[0] == 3
    assert server.limit_log.hits.get("maxReadsInProgressLimit", 0) > 0
    assert server.reads_gate.count == 0 and not server.reads_gate.waiting
    assert all(conn._permits_held == 0 for conn in server_side(server))
    assert sum(server.metrics.requests["READ_ENTRY"][True].counts) == 602
    for c in conns + [writer]:
        c.close()


def test_adds_before_reads_in_one_chunk_go_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Adds and reads of a new ledger interleaved in one chunk: every add is acknowledged, a read after an add sees
    its entry, a read before it does not."""

    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c = await Conn.open(server.port)
        assert (await c.v2(v2.encode_read_request(4, 0))).rc == v2.ENOLEDGER  # the connection speaks v2 now
        e = [make_entry(5, i, b"e%d" % i) for i in range(3)]
        single = count_single_reads(monkeypatch)
        c.send(b"".join([
            v2.encode_add_request(0, KEY, e[0]), v2.encode_add_request(0, KEY, e[1]),
            v2.encode_read_request(5, 0), v2.encode_read_request(5, 1), v2.encode_read_request(5, 2),
            v2.encode_add_request(0, KEY, e[2]), v2.encode_read_request(5, 2),
        ]))
        answers = [v2.decode_response(await c.body()) for _ in range(7)]
        adds = sorted((a.entry_id, a.rc) for a in answers if isinstance(a, v2.AddResponse))
        reads = sorted((a.entry_id, a.rc, bytes(a.entry)) for a in answers if isinstance(a, v2.ReadResponse))
        assert adds == [(0, v2.EOK), (1, v2.EOK), (2, v2.EOK)]
        assert reads == [(0, v2.EOK, e[0]), (1, v2.EOK, e[1]), (2, v2.EOK, e[2]), (2, v2.ENOENTRY, b"")]
        assert single == []  # runs: from the write cache, and the disk's answer (ENOENTRY) to entry 2 before its add
        assert server.reads_gate.count == 0 and server.adds_gate.count == 0
        c.close()

    body(tmp_path)


# -- cold reads waiting for a read-ahead ----------------------------------------------------------------------------


async def on_disk(
    bookie: Bookie, server: BookieServer, monkeypatch: pytest.MonkeyPatch, ledger: int, count: int, size: int = 100
) -> tuple[Conn, list[bytes], GatedColdReads]:
    """A connection that stored ``count`` entries of ``size`` bytes in ``ledger``, now only on disk, and the gate
    of the read threads' disk reads."""
    c = await Conn.open(server.port)
    entries = [make_entry(ledger, i, bytes([i % 251]) * size) for i in range(count)]
    for e in entries:
        assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
    to_disk(bookie)
    return c, entries, GatedColdReads(bookie, monkeypatch)


async def started(gated: GatedColdReads) -> None:
    assert await asyncio.get_running_loop().run_in_executor(None, gated.started.wait, 10)


def test_a_runs_cold_reads_are_one_job_and_the_connection_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six pipelined cold reads of consecutive entries in a run: one job on a read thread asks for all six, the
    connection dispatches nothing meanwhile (the rest of its backlog waits), then the six are answered in order
    and none took the per-read path.  The ledger fits the read cache, so what the job brought is cached: read
    again, the six are answered from memory, with no job."""

    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c, entries, gated = await on_disk(bookie, server, monkeypatch, 7, 40)
        single = count_single_reads(monkeypatch)
        jobs = count_run_jobs(bookie, monkeypatch)
        c.send(b"".join(v2.encode_read_request(7, i) for i in range(6)))
        await started(gated)
        c.send(v2.encode_read_request(7, 30))
        await asyncio.sleep(0.1)
        [conn] = server_side(server)
        assert conn._cold_run and conn._cold_reads == 0 and jobs == [[(7, i) for i in range(6)]]
        assert conn._backlog == deque([((7, 30, 2),)])  # the next run waits for the job
        assert gated.threads == ["bookie-read_0"]
        gated.gate.set()
        answers = [v2.decode_response(await c.body()) for _ in range(7)]
        assert [(a.entry_id, bytes(a.entry)) for a in answers] == [*enumerate(entries[:6]), (30, entries[30])]
        assert single == [] and len(jobs) == 2 and not conn._cold_run
        assert cached_entries(bookie, 7) == [0, 1, 2, 3, 4, 5, 30]
        c.send(b"".join(v2.encode_read_request(7, i) for i in range(6)))
        again = [v2.decode_response(await c.body()) for _ in range(6)]
        assert [(a.entry_id, bytes(a.entry)) for a in again] == list(enumerate(entries[:6])) and len(jobs) == 2
        assert server.reads_gate.count == 0 and conn._permits_held == 0
        c.close()

    body(tmp_path)


def test_a_runs_job_stops_at_the_write_buffers_mark_and_the_rest_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty cold reads of 100 KB entries in one run, against a write buffer mark of 256 KiB: each job brings
    what fits (the read that reaches the mark included), the rest goes back to the head of the backlog, ahead of
    a run sent after it, and is read by the next job; every read is answered once, in order, every permit back."""

    @with_bookie(serverWriteBufferHighWaterMark=256 * 1024, serverWriteBufferLowWaterMark=128 * 1024)
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c, entries, gated = await on_disk(bookie, server, monkeypatch, 7, 22, size=100_000)
        gated.gate.set()
        jobs = count_run_jobs(bookie, monkeypatch)
        single = count_single_reads(monkeypatch)
        c.send(b"".join(v2.encode_read_request(7, i) for i in range(20)))
        c.send(b"".join(v2.encode_read_request(7, i) for i in (20, 21)))
        answers = [v2.decode_response(await c.body()) for _ in range(22)]
        assert [(a.rc, a.entry_id, bytes(a.entry)) for a in answers] == [(v2.EOK, i, entries[i]) for i in range(22)]
        assert len(jobs) >= 8 and [read for job in jobs for read in job][:22] == [(7, i) for i in range(22)]
        assert all(1 <= len(job) for job in jobs) and single == []
        [conn] = server_side(server)
        assert server.reads_gate.count == 0 and conn._permits_held == 0 and not conn._backlog
        c.close()

    body(tmp_path)


def test_what_memory_holds_counts_against_a_stretchs_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold read, then 100 KB entries the write cache holds, against a write buffer mark of 256 KiB: the stretch
    ends where the hits reach the mark (not at 1,024 reads), the rest follows, everything answered once, in
    order."""

    @with_bookie(serverWriteBufferHighWaterMark=256 * 1024, serverWriteBufferLowWaterMark=128 * 1024)
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c, cold, gated = await on_disk(bookie, server, monkeypatch, 7, 1)
        gated.gate.set()
        hot = [make_entry(7, i, bytes([i]) * 100_000) for i in range(1, 11)]
        for e in hot:
            assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
        lengths: list[int] = []
        original = Connection._v2_read_cold_run

        def counted(self: Any, *args: Any) -> int:
            lengths.append(original(self, *args))
            return lengths[-1]

        monkeypatch.setattr(Connection, "_v2_read_cold_run", counted)
        c.send(b"".join(v2.encode_read_request(7, i) for i in range(11)))
        answers = [v2.decode_response(await c.body()) for _ in range(11)]
        assert [(a.entry_id, bytes(a.entry)) for a in answers] == list(enumerate(cold + hot))
        assert lengths and lengths[0] < 11 and lengths[0] * 100_000 < 2 * 256 * 1024
        assert server.reads_gate.count == 0
        c.close()

    body(tmp_path)


def test_a_bug_answering_a_stretch_drops_only_that_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error of our own while a stretch is answered closes that connection (its reads' permits back), and the
    bookie goes on serving the others."""

    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c, entries, gated = await on_disk(bookie, server, monkeypatch, 7, 4)
        gated.gate.set()

        def broken(*_args: Any) -> None:
            raise RuntimeError("a bug")

        monkeypatch.setattr(Connection, "_answer_cold_run", broken)
        c.send(b"".join(v2.encode_read_request(7, i) for i in range(4)))
        assert await asyncio.wait_for(c.reader.read(), 10) == b""  # closed, nothing answered
        assert server.reads_gate.count == 0
        monkeypatch.undo()
        other = await Conn.open(server.port)
        r = await other.v2(v2.encode_read_request(7, 2))
        assert (r.rc, bytes(r.entry)) == (v2.EOK, entries[2])
        other.close()
        c.close()

    body(tmp_path)


def test_a_failed_job_answers_its_misses_eio_and_its_hits_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose stretch holds misses and entries memory holds (the write cache): the job fails on its read
    thread, so its misses are answered EIO (a client asks another replica), its hits with their bytes, in order;
    every permit comes back and the next run is read."""

    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c, entries, _gated = await on_disk(bookie, server, monkeypatch, 7, 6)
        monkeypatch.undo()  # no gate
        more = [make_entry(7, i, b"w%d" % i) for i in range(6, 9)]
        for e in more:
            assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK  # the write cache
        original = bookie.storage.read_run_cold

        def broken(*_args: Any) -> Any:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(bookie.storage, "read_run_cold", broken)
        order = [0, 6, 1, 7, 2, 8]
        c.send(b"".join(v2.encode_read_request(7, i) for i in order))
        answers = [v2.decode_response(await c.body()) for _ in order]
        assert [(a.entry_id, a.rc) for a in answers] == [(i, v2.EIO if i < 6 else v2.EOK) for i in order]
        assert [bytes(a.entry) for a in answers if a.rc == v2.EOK] == [more[0], more[1], more[2]]
        monkeypatch.setattr(bookie.storage, "read_run_cold", original)
        c.send(b"".join(v2.encode_read_request(7, i) for i in order))
        again = [v2.decode_response(await c.body()) for _ in order]
        assert [bytes(a.entry) for a in again] == [([*entries, *more])[i] for i in order]
        assert server.reads_gate.count == 0 and all(conn._permits_held == 0 for conn in server_side(server))
        c.close()

    body(tmp_path)


def test_what_a_job_brings_is_cached_only_for_a_ledger_that_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At their mean size a ledger's entries would not fit the read cache: what a job brought of it is not cached
    (a scan of it would evict its own entries); a small ledger's is; a ledger deleted while its job ran is
    answered with what the job read and not cached."""

    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c, big, gated = await on_disk(bookie, server, monkeypatch, 7, 40, size=1000)
        gated.gate.set()
        small = [make_entry(8, i, b"s") for i in range(4)]
        for e in small:
            assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
        to_disk(bookie)
        bookie.storage.read_cache_max_bytes = 30 * len(big[0])  # 40 of the big ledger's entries do not fit
        c.send(b"".join(v2.encode_read_request(7, i) for i in range(5)))
        assert [bytes(v2.decode_response(await c.body()).entry) for _ in range(5)] == big[:5]
        c.send(b"".join(v2.encode_read_request(8, i) for i in range(4)))
        assert [bytes(v2.decode_response(await c.body()).entry) for _ in range(4)] == small
        assert cached_entries(bookie, 7) == [] and cached_entries(bookie, 8) == [0, 1, 2, 3]
        gated.gate.clear()
        gated.started.clear()
        c.send(v2.encode_read_request(7, 30))
        await started(gated)
        bookie.storage.read_cache_max_bytes = 1 << 20
        bookie.storage.delete_ledger(0, 7)
        gated.gate.set()
        r = v2.decode_response(await c.body())
        assert (r.rc, bytes(r.entry)) == (v2.EOK, big[30]) and cached_entries(bookie, 7) == []
        c.close()

    body(tmp_path)


def test_cold_reads_inside_a_pending_read_ahead_wait_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read one at a time (a connection's first chunk, before it is known to speak v2, or a read outside a run):
    six pipelined cold reads of consecutive entries, the first goes to a read thread and each of the five in its
    read-ahead window waits for it on its own (they do not count as the connection's reads on the read threads).
    One disk read, not six.  A read past the window goes to the disk itself, reading ahead twice as far."""

    @with_bookie(dbStorage_readAheadCacheBatchSize=10)
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c, entries, gated = await on_disk(bookie, server, monkeypatch, 7, 40)
        one_read_at_a_time(monkeypatch)
        c.send(b"".join(v2.encode_read_request(7, i) for i in range(6)))
        await started(gated)
        await asyncio.sleep(0.1)
        [conn] = server_side(server)
        assert (conn._cold_reads, conn._waiting_reads) == (1, 5)
        gated.gate.set()
        answers = [v2.decode_response(await c.body()) for _ in range(6)]
        assert sorted((a.entry_id, bytes(a.entry)) for a in answers) == list(enumerate(entries[:6]))
        assert gated.threads == ["bookie-read_0"]
        assert (conn._cold_reads, conn._waiting_reads) == (0, 0)
        r = await c.v2(v2.encode_read_request(7, 10))  # 0 + 10: past the window, and no read-ahead pending
        assert (r.rc, bytes(r.entry)) == (v2.EOK, entries[10]) and len(gated.threads) == 2
        assert cached_entries(bookie, 7) == list(range(30))  # it followed on from the first: twice as far ahead
        assert not bookie.reads._read_aheads and server.reads_gate.count == 0
        c.close()

    body(tmp_path)


def conn_of(server: BookieServer, c: Conn) -> Any:
    """The server's side of the client connection ``c``."""
    port = c.writer.get_extra_info("sockname")[1]
    [conn] = [conn for conn in server_side(server) if conn.peer.endswith(str(port))]
    return conn


def test_a_failed_read_ahead_is_not_its_waiters_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read the others wait for fails (EIO, its own answer): the waiters do not take its error; the first reads
    its entry itself and the others wait for that read's read-ahead."""

    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c, entries, gated = await on_disk(bookie, server, monkeypatch, 8, 5)
        one_read_at_a_time(monkeypatch)
        gated_read = bookie.storage.read_cold
        calls: list[int] = []

        def first_fails(key: Any, ahead: int) -> Any:
            calls.append(key[2])
            if len(calls) == 1:
                gated_read(key, ahead)  # waits for the gate, then fails
                raise OSError(5, "Input/output error")
            return gated_read(key, ahead)

        monkeypatch.setattr(bookie.storage, "read_cold", first_fails)
        c.send(b"".join(v2.encode_read_request(8, i) for i in range(5)))
        await started(gated)
        await asyncio.sleep(0.1)
        assert calls == [0]
        gated.gate.set()
        answers = {a.entry_id: a for a in [v2.decode_response(await c.body()) for _ in range(5)]}
        assert answers[0].rc == v2.EIO
        assert [(answers[i].rc, bytes(answers[i].entry)) for i in range(1, 5)] == [(v2.EOK, e) for e in entries[1:]]
        assert calls == [0, 1]
        assert server.reads_gate.count == 0 and not bookie.reads._read_aheads
        c.close()

    body(tmp_path)


def test_a_read_ahead_that_does_not_bring_the_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries too large for the read-ahead's chunk (256 KiB) to hold the next one whole: each waiter reads its own
    entry, one after another (the later ones wait for the earlier one's read), not all at once."""

    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c, entries, gated = await on_disk(bookie, server, monkeypatch, 9, 4, size=200_000)
        one_read_at_a_time(monkeypatch)
        pending_at_once: list[int] = []
        original = bookie.reads._read_cold_soon

        def counted(key: Any) -> Any:
            answer = original(key)
            pending_at_once.append(len(bookie.reads._read_aheads[(0, 9)]))
            return answer

        monkeypatch.setattr(bookie.reads, "_read_cold_soon", counted)
        c.send(b"".join(v2.encode_read_request(9, i) for i in range(4)))
        await started(gated)
        await asyncio.sleep(0.1)
        assert len(gated.threads) == 1
        gated.gate.set()
        answers = sorted(
            (a.entry_id, a.rc, bytes(a.entry)) for a in [v2.decode_response(await c.body()) for _ in range(4)]
        )
        assert answers == [(i, v2.EOK, entries[i]) for i in range(4)]
        assert len(gated.threads) == 4 and pending_at_once == [1, 1, 1, 1]
        c.close()

    body(tmp_path)


def test_reads_waiting_for_a_read_ahead_are_bounded_per_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection whose reads wait for another connection's read-ahead stops dispatching at its bound of waiting
    reads (WAITING_READS_PER_CONNECTION x dbStorage_readAheadCacheBatchSize; 3 here), and goes on once they are
    answered."""

    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        a, entries, gated = await on_disk(bookie, server, monkeypatch, 6, 10)
        b = await Conn.open(server.port)
        assert (await b.v2(v2.encode_read_request(4, 0))).rc == v2.ENOLEDGER  # the connection speaks v2 now
        conn_b = conn_of(server, b)
        assert conn_b._waiting_limit == admission_module.WAITING_READS_PER_CONNECTION * 100
        conn_b._waiting_limit = 3
        one_read_at_a_time(monkeypatch)  # a's read reads ahead, b's reads wait for it one by one
        a.send(v2.encode_read_request(6, 0))
        await started(gated)
        b.send(b"".join(v2.encode_read_request(6, i) for i in range(1, 7)))
        await asyncio.sleep(0.2)
        waiting = [item if isinstance(item, v2.ReadRequest) else v2.decode_request(item) for item in conn_b._backlog]
        assert conn_b._waiting_reads == 3 and [request.entry_id for request in waiting] == [4, 5, 6]
        gated.gate.set()
        assert bytes(v2.decode_response(await a.body()).entry) == entries[0]
        answers = [v2.decode_response(await b.body()) for _ in range(6)]
        assert sorted((r.entry_id, bytes(r.entry)) for r in answers) == [(i, entries[i]) for i in range(1, 7)]
        assert gated.threads == ["bookie-read_0"]
        a.close()
        b.close()

    body(tmp_path)


def test_a_runs_job_holds_at_most_cold_run_reads_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/bookie.md, "Runs of single reads": a job takes the stretch of the run up to ``COLD_RUN_READS`` (1,024)
    reads; the rest of the run follows in the next jobs.  With the bound at 4, ten pipelined cold reads are three
    jobs of 4, 4 and 2, answered in order."""
    assert v2_handlers_module.COLD_RUN_READS == 1024
    monkeypatch.setattr(v2_handlers_module, "COLD_RUN_READS", 4)

    @with_bookie()
    async def body(bookie: Bookie, server: BookieServer) -> None:
        c, entries, gated = await on_disk(bookie, server, monkeypatch, 7, 20)
        gated.gate.set()
        single = count_single_reads(monkeypatch)
        jobs = count_run_jobs(bookie, monkeypatch)
        c.send(b"".join(v2.encode_read_request(7, i) for i in range(10)))
        answers = [v2.decode_response(await c.body()) for _ in range(10)]
        assert [(a.entry_id, bytes(a.entry)) for a in answers] == list(enumerate(entries[:10]))
        assert jobs == [[(7, i) for i in range(4)], [(7, i) for i in range(4, 8)], [(7, 8), (7, 9)]]
        assert single == []
        c.close()

    body(tmp_path)
