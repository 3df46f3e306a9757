"""Back-pressure inside one bookie over real sockets: adds in progress, long polls, the write cache during a
checkpoint (docs/bookie.md, "Limits")."""

from __future__ import annotations

import asyncio
import threading

from bkspark.protocol import v2, v3
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from bookie_server.bookie import Bookie
from bookie_server.server import BookieServer
from tests.unit.test_bookie_server import DIGEST, KEY, Conn, make_entry, with_bookie


def track_max(gate: object) -> list[int]:
    """Record the gate's count after every admission (one request's, or a run of adds')."""
    seen = [0]
    acquire = gate.try_acquire  # type: ignore[attr-defined]
    acquire_many = gate.try_acquire_many  # type: ignore[attr-defined]

    def tracked(nbytes: int = 0) -> bool:
        ok = acquire(nbytes)
        seen[0] = max(seen[0], gate.count)  # type: ignore[attr-defined]
        return ok

    def tracked_many(sizes: list[int]) -> int:
        admitted = acquire_many(sizes)
        seen[0] = max(seen[0], gate.count)  # type: ignore[attr-defined]
        return admitted

    gate.try_acquire = tracked  # type: ignore[attr-defined]
    gate.try_acquire_many = tracked_many  # type: ignore[attr-defined]
    return seen


@with_bookie(maxAddsInProgressLimit=5)
async def test_adds_in_progress_never_pass_the_limit(bookie: Bookie, server: BookieServer) -> None:
    peak = track_max(server.adds_gate)
    c = await Conn.open(server.port)
    c.send(b"".join(v2.encode_add_request(0, KEY, make_entry(1, i, b"x" * 100)) for i in range(200)))
    acks = [v2.decode_response(await c.body()) for _ in range(200)]
    assert sorted(a.entry_id for a in acks if a.rc == v2.EOK) == list(range(200))
    assert peak[0] == 5  # reached, never passed
    assert server.limit_log.hits.get("maxAddsInProgressLimit", 0) > 0
    assert server.adds_gate.count == 0 and server.adds_gate.bytes == 0  # every permit came back
    rendered = server.metrics.render().decode()
    assert 'bookkeeper_server_LIMIT_HITS_total{limit="maxAddsInProgressLimit"}' in rendered
    assert "bookkeeper_server_ADD_ENTRY_IN_PROGRESS 0.0" in rendered
    c.close()


@with_bookie(maxAddsInProgressLimit=0, maxAddsInProgressBytes=2000)
async def test_runs_of_adds_cut_by_the_byte_bound_wait_their_turn(bookie: Bookie, server: BookieServer) -> None:
    """Two connections each send a run of 150 adds at once against a bound of 2,000 entry bytes (about 11 adds):
    each run is admitted a prefix at a time (docs/bookie.md, "Adds"), the bound is never passed, refused adds in
    a run (a scope id, which v2 cannot carry) give their permits back at once, every add is answered, and every
    permit comes back."""
    gate = server.adds_gate
    peak_bytes = [0]
    acquire_many = gate.try_acquire_many

    def tracked_many(sizes: list[int]) -> int:
        admitted = acquire_many(sizes)
        peak_bytes[0] = max(peak_bytes[0], gate.bytes)
        return admitted

    gate.try_acquire_many = tracked_many  # type: ignore[method-assign]
    conns = [await Conn.open(server.port) for _ in range(2)]
    for ledger, c in zip((1, 2), conns):
        c.send(b"".join(
            v2.encode_add_request(0, KEY, make_entry(ledger, i, b"x" * 100, scope=5 if i % 37 == 36 else 0))
            for i in range(150)
        ))
    for ledger, c in zip((1, 2), conns):
        acks = [v2.decode_response(await c.body()) for _ in range(150)]
        assert sorted(a.entry_id for a in acks if a.rc == v2.EOK) == [i for i in range(150) if i % 37 != 36]
        assert sorted(a.entry_id for a in acks if a.rc == v2.EBADREQ) == [36, 73, 110, 147]
        assert {a.ledger_id for a in acks} == {ledger}
    assert 0 < peak_bytes[0] <= 2000
    assert server.limit_log.hits.get("maxAddsInProgressLimit", 0) > 0  # the adds gate logs under its count key
    assert gate.count == 0 and gate.bytes == 0 and not gate.waiting  # every permit came back
    assert all(conn._permits_held == 0 for conn in server.connections)
    for c in conns:
        c.close()


@with_bookie(maxLongPollReadsInProgress=2)
async def test_long_polls_are_bounded_and_the_connection_waits(bookie: Bookie, server: BookieServer) -> None:
    writer = await Conn.open(server.port)
    assert (await writer.v2(v2.encode_add_request(0, KEY, make_entry(1, 0, b"a")))).rc == v2.EOK
    poller = await Conn.open(server.port)
    for txn in range(3):
        poller.send(v3.encode_request(v3.read_request(txn, 1, 0, previous_lac=0, timeout_ms=20_000)))
    poller.send(v3.encode_request(v3.read_lac_request(9, 1)))
    await asyncio.sleep(0.3)
    assert server.long_polls_gate.count == 2  # the third poll waits, and the READ_LAC behind it too
    assert not poller.bodies and not await _readable(poller, 0.2)
    # Other connections are served meanwhile.
    assert (await writer.v2(v2.encode_read_request(1, 0))).rc == v2.EOK
    # The LAC moves: both polls answer, then the third one runs (and answers at once), then READ_LAC.
    assert (await writer.v2(v2.encode_add_request(0, KEY, make_entry(1, 1, b"b", lac=0)))).rc == v2.EOK
    assert (await writer.v2(v2.encode_add_request(0, KEY, make_entry(1, 2, b"c", lac=1)))).rc == v2.EOK
    answers = [v3.decode_response(await poller.body()) for _ in range(4)]
    assert sorted(a.header.txnId for a in answers) == [0, 1, 2, 9]
    assert all(a.status == pb.EOK for a in answers)
    assert server.long_polls_gate.count == 0
    writer.close()
    poller.close()


async def _readable(conn: Conn, timeout: float) -> bool:
    try:
        data = await asyncio.wait_for(conn.reader.read(1), timeout)
    except asyncio.TimeoutError:
        return False
    conn.splitter.feed(data)
    return True


@with_bookie(dbStorage_writeCacheMaxSizeMb=1, flushInterval=600000, dbStorage_maxThrottleTimeMs=0)
async def test_full_write_cache_blocks_adds_while_a_checkpoint_runs(bookie: Bookie, server: BookieServer) -> None:
    """With ``dbStorage_maxThrottleTimeMs=0`` the adds wait as long as the checkpoint takes."""
    release = threading.Event()
    write = bookie.storage.write_checkpoint

    def slow_write(snapshot: object) -> None:
        release.wait(30)  # a disk that takes its time
        write(snapshot)  # type: ignore[arg-type]

    bookie.storage.write_checkpoint = slow_write  # type: ignore[method-assign]
    c = await Conn.open(server.port)
    payload = b"p" * 64 * 1024
    total = 48  # 3 MiB: one cache to flush, one to fill while the checkpoint runs, and more
    c.send(b"".join(v2.encode_add_request(0, KEY, make_entry(1, i, payload)) for i in range(total)))
    acked = 0
    while True:
        try:
            resp = v2.decode_response(await c.body(timeout=1.0))
        except asyncio.TimeoutError:
            break
        assert resp.rc == v2.EOK
        acked += 1
    assert bookie.write_cache_full
    assert acked < total
    assert bookie.storage.write_cache_bytes <= 1024 * 1024 + len(payload) + 100  # bounded, not growing
    assert server.limit_log.hits.get("dbStorage_writeCacheMaxSizeMb", 0) > 0
    release.set()  # the checkpoint ends: the parked adds go on
    for _ in range(total - acked):
        assert v2.decode_response(await c.body(timeout=10.0)).rc == v2.EOK
    c.close()


@with_bookie(dbStorage_writeCacheMaxSizeMb=1, flushInterval=600000, dbStorage_maxThrottleTimeMs=300)
async def test_adds_waiting_for_a_full_write_cache_are_refused_after_the_max_throttle_time(
    bookie: Bookie, server: BookieServer
) -> None:
    """A checkpoint that does not end (a stuck disk) with the write cache full: each add waits at most
    ``dbStorage_maxThrottleTimeMs``, then gets Java's refusal, v2 ETOOMANYREQUESTS and v3 EIO, while the checkpoint
    still hangs; the old code kept them waiting for as long as it hung.  Once it ends, adds are taken again."""
    release = threading.Event()
    write = bookie.storage.write_checkpoint

    def stuck_write(snapshot: object) -> None:
        release.wait(60)
        write(snapshot)  # type: ignore[arg-type]

    bookie.storage.write_checkpoint = stuck_write  # type: ignore[method-assign]
    try:
        c = await Conn.open(server.port)
        payload = b"p" * 64 * 1024
        total = 48
        c.send(b"".join(v2.encode_add_request(0, KEY, make_entry(1, i, payload)) for i in range(total)))
        answers = [v2.decode_response(await c.body(timeout=30.0)) for _ in range(total)]
        assert not release.is_set()
        rcs = {a.rc for a in answers}
        assert rcs <= {v2.EOK, v2.ETOOMANYREQUESTS} and v2.ETOOMANYREQUESTS in rcs
        v3c = await Conn.open(server.port)
        add = v3.add_request(7, 2, 0, KEY, make_entry(2, 0, payload))
        v3c.send(v3.encode_request(add))
        resp = v3.decode_response(await v3c.body(timeout=30.0))
        assert (resp.header.txnId, resp.status) == (7, pb.EIO)
        assert not release.is_set()
        assert server.limit_log.hits.get("dbStorage_maxThrottleTimeMs", 0) >= 2
    finally:
        release.set()
    while bookie.write_cache_full:
        await asyncio.sleep(0.05)
    assert (await c.v2(v2.encode_add_request(0, KEY, make_entry(3, 0, b"after")))).rc == v2.EOK
    c.close()
    v3c.close()


@with_bookie(maxLongPollReadsInProgress=1, maxReadsInProgressLimit=1)
async def test_permits_come_back_when_connections_close_or_requests_fail(bookie: Bookie, server: BookieServer) -> None:
    c = await Conn.open(server.port)
    assert (await c.v2(v2.encode_add_request(0, KEY, make_entry(1, 0, b"a")))).rc == v2.EOK
    poller = await Conn.open(server.port)
    poller.send(v3.encode_request(v3.read_request(1, 1, 0, previous_lac=0, timeout_ms=20_000)))
    for _ in range(50):
        if server.long_polls_gate.count == 1:
            break
        await asyncio.sleep(0.02)
    assert server.long_polls_gate.count == 1
    poller.close()  # the poll's task is cancelled with its connection: its permit comes back
    for _ in range(100):
        if server.long_polls_gate.count == 0:
            break
        await asyncio.sleep(0.02)
    assert server.long_polls_gate.count == 0
    # Reads answered with an error (bad version, unknown ledger) give their permit back too.
    v3_conn = await Conn.open(server.port)
    bad = v3.read_request(2, 1, 0)
    bad.header.version = pb.VERSION_TWO
    assert (await v3_conn.v3(bad)).status == pb.EBADVERSION
    v3_conn.close()
    assert (await c.v2(v2.encode_read_request(99, 0))).rc == v2.ENOLEDGER
    assert (await c.v2(v2.encode_read_request(1, 0))).rc == v2.EOK  # the one read slot is free again
    assert server.reads_gate.count == 0
    c.close()


@with_bookie(serverPartialFrameTimeoutMs=1000)
async def test_partial_frame_timeout_counts_per_frame_not_per_stream(bookie: Bookie, server: BookieServer) -> None:
    """A client streaming big frames (every chunk ending mid-frame) for longer than the timeout is not a slowloris;
    one that leaves a frame unfinished is cut."""
    c = await Conn.open(server.port)
    frame = v2.encode_add_request(0, KEY, make_entry(1, 0, b"z" * 20_000))
    stream = frame * 40
    step = 15_000  # never a frame boundary at a chunk's end
    for eid, offset in enumerate(range(0, len(stream), step)):
        c.send(stream[offset : offset + step])
        await c.writer.drain()
        await asyncio.sleep(0.05)  # 2.7 s in all, well over the 1 s timeout
    acks = [v2.decode_response(await c.body()) for _ in range(40)]
    assert all(a.rc == v2.EOK for a in acks)
    slow = await Conn.open(server.port)
    slow.send(frame[:100])
    assert await slow.closed_by_peer(timeout=5.0)
    assert server.limit_log.hits.get("serverPartialFrameTimeoutMs") == 1
    c.close()
    slow.close()


@with_bookie(maxAddsInProgressLimit=1)
async def test_explicit_lac_writes_and_force_ledger_count_among_adds_in_progress(bookie: Bookie, server: BookieServer) -> None:
    peak = track_max(server.adds_gate)
    c = await Conn.open(server.port)
    assert (await c.v3(v3.add_request(1, 1, 0, KEY, make_entry(1, 0, b"a")))).status == pb.EOK
    lac_blob = DIGEST.package_lac(1, 0)
    for txn in range(20):
        c.send(v3.encode_request(v3.write_lac_request(100 + txn, 1, 0, KEY, lac_blob)))
        c.send(v3.encode_request(v3.force_ledger_request(200 + txn, 1)))
    answers = [v3.decode_response(await c.body()) for _ in range(40)]
    assert all(a.status == pb.EOK for a in answers)
    assert peak[0] == 1 and server.adds_gate.count == 0
    c.close()


@with_bookie(serverConnectionIdleTimeoutMs=400)
async def test_a_connection_waiting_on_a_long_poll_is_not_idle(bookie: Bookie, server: BookieServer) -> None:
    """docs/bookie.md, "Limits": ``serverConnectionIdleTimeoutMs`` closes connections with no bytes either way *and no
    request in progress*: a long poll that waits three times the timeout keeps its connection, which is answered,
    then closed once it has been idle for the timeout."""
    c = await Conn.open(server.port)
    assert v3.response_status(await c.v3(v3.add_request(1, 3, 0, KEY, make_entry(3, 0, b"poll", lac=0)))) == pb.EOK
    resp = await c.v3(v3.read_request(2, 3, -1, previous_lac=0, timeout_ms=1200, piggyback=True))
    assert (resp.readResponse.status, resp.readResponse.maxLAC) == (pb.EOK, 0)  # the poll's timeout, not a close
    assert await c.closed_by_peer(timeout=5.0)
    assert server.limit_log.hits.get("serverConnectionIdleTimeoutMs") == 1
    c.close()


@with_bookie(serverWriteBufferHighWaterMark=4096, serverWriteBufferLowWaterMark=2048)
async def test_a_response_larger_than_the_high_water_mark_goes_out_whole(bookie: Bookie, server: BookieServer) -> None:
    """docs/bookie.md, "Limits": a response larger than ``serverWriteBufferHighWaterMark`` still goes out whole, and
    the requests behind it are answered once it drained (single and batch reads, v2)."""
    c = await Conn.open(server.port)
    entries = [make_entry(6, i, bytes([65 + i]) * 30_000) for i in range(4)]
    for e in entries:
        assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK
    c.send(b"".join(v2.encode_read_request(6, i) for i in range(4)) + v2.encode_batch_read_request(6, 0, 9, 4, 1 << 20))
    for i in range(4):
        r = v2.decode_response(await c.body())
        assert (r.rc, r.entry_id, bytes(r.entry)) == (v2.EOK, i, entries[i])
    batch = v2.decode_response(await c.body())
    assert [bytes(e) for e in batch.entries] == entries
    c.close()


@with_bookie(serverPartialFrameTimeoutMs=1000, serverWriteBufferHighWaterMark=4096, serverWriteBufferLowWaterMark=2048)
async def test_time_the_bookie_paused_reading_does_not_count_against_a_partial_frame(
    bookie: Bookie, server: BookieServer
) -> None:
    """docs/bookie.md, "Limits", ``serverPartialFrameTimeoutMs``: time the bookie itself paused reading does not
    count.  A client pipelines 200 reads of a 100 KB entry and the first bytes of one more, then reads nothing for
    2.5 timeouts: the bookie stops reading it (responses backed up) with that frame half received, and does not
    cut it; the frame's clock starts again when the bookie reads again, so the rest, sent 0.4 s after the client
    drained the answers, is in time and answered."""
    c = await Conn.open(server.port)
    big = make_entry(2, 0, b"p" * 100_000)
    assert (await c.v2(v2.encode_add_request(0, KEY, big))).rc == v2.EOK
    last = v2.encode_read_request(2, 0)
    c.send(b"".join(v2.encode_read_request(2, 0) for _ in range(200)) + last[:10])
    await asyncio.sleep(2.5)
    [conn] = list(server.connections)
    assert conn._reading_paused and conn.partial_since is not None and not conn.closed
    answers = [v2.decode_response(await c.body()) for _ in range(200)]
    assert all(bytes(a.entry) == big for a in answers)
    await asyncio.sleep(0.4)
    c.send(last[10:])
    assert bytes(v2.decode_response(await c.body()).entry) == big
    assert server.limit_log.hits.get("serverPartialFrameTimeoutMs", 0) == 0
    c.close()


async def _flood_until_writing_pauses(server: BookieServer, c: Conn, entry_bytes: int) -> object:
    """``c`` asks for 64 KiB entries and reads none of them: its connection's responses back up until the bookie
    stops writing to it (its write buffer over the high water mark).  Returns the server side of ``c``."""
    c.send(b"".join(v3.encode_request(v3.read_request(100 + i, 1, 0)) for i in range(400)))
    for _ in range(600):
        blocked = [conn for conn in server.connections if conn._write_blocked]
        if blocked:
            return blocked[0]
        await asyncio.sleep(0.05)
    raise AssertionError("the connection's responses never backed up")


@with_bookie(serverWriteBufferHighWaterMark=65536, serverWriteBufferLowWaterMark=32768,
             waitTimeoutOnResponseBackpressureMs=300, closeChannelOnResponseTimeout=True)
async def test_a_client_that_reads_no_response_is_closed_after_the_response_timeout(
    bookie: Bookie, server: BookieServer
) -> None:
    """``closeChannelOnResponseTimeout=true`` (Java's server setting): a connection whose responses wait longer than
    ``waitTimeoutOnResponseBackpressureMs`` for a client that reads nothing is dropped, its queued responses with it;
    another client is served throughout.  The old code kept such a connection, paused, for as long as it lived."""
    writer = await Conn.open(server.port)
    assert (await writer.v2(v2.encode_add_request(0, KEY, make_entry(1, 0, b"e" * 65536)))).rc == v2.EOK
    hog = await Conn.open(server.port)
    stuck = await _flood_until_writing_pauses(server, hog, 65536)
    for _ in range(600):
        if stuck not in server.connections:
            break
        await asyncio.sleep(0.05)
    assert stuck not in server.connections
    assert server.limit_log.hits.get("waitTimeoutOnResponseBackpressureMs", 0) == 1
    assert (await writer.v2(v2.encode_read_request(1, 0))).rc == v2.EOK
    writer.close()
    hog.close()


@with_bookie(serverWriteBufferHighWaterMark=65536, serverWriteBufferLowWaterMark=32768,
             waitTimeoutOnResponseBackpressureMs=300, closeChannelOnResponseTimeout=False)
async def test_without_close_a_timed_out_clients_responses_are_dropped_until_it_reads_again(
    bookie: Bookie, server: BookieServer
) -> None:
    """``closeChannelOnResponseTimeout=false``: the connection stays; a response made after the timeout while its
    client still reads nothing (a long poll answered by another client's add) is dropped, not queued; once the client
    reads again, it is answered as before."""
    writer = await Conn.open(server.port)
    assert (await writer.v2(v2.encode_add_request(0, KEY, make_entry(1, 0, b"e" * 65536)))).rc == v2.EOK
    hog = await Conn.open(server.port)
    hog.send(v3.encode_request(v3.read_request(1, 1, 1, previous_lac=-1, timeout_ms=60_000)))  # waits for the LAC
    stuck = await _flood_until_writing_pauses(server, hog, 65536)
    for _ in range(600):
        if stuck._dropping_responses:
            break
        await asyncio.sleep(0.05)
    assert stuck._dropping_responses and stuck in server.connections
    assert (await writer.v2(v2.encode_add_request(0, KEY, make_entry(1, 1, b"f", lac=0)))).rc == v2.EOK
    for _ in range(600):
        if stuck.responses_dropped:
            break
        await asyncio.sleep(0.05)
    assert stuck.responses_dropped >= 1  # the long poll's answer
    # The client reads again: what was queued arrives, and a new request is answered.
    hog.send(v3.encode_request(v3.read_request(999, 1, 1)))
    txns = []
    while not txns or txns[-1] != 999:
        resp = v3.decode_response(await hog.body(timeout=10.0))
        txns.append(resp.header.txnId)
    assert resp.status == pb.EOK and not stuck._dropping_responses
    assert 1 not in txns  # the long poll's answer was dropped
    writer.close()
    hog.close()
