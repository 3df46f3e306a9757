"""The Python bookie over real sockets: v2 and v3 operations, batch reads, bad input."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any


from bkspark.protocol import v2, v3
from bkspark.protocol.digest import Digester, master_key
from bkspark.protocol.framing import FrameSplitter
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from bookie_server.bookie import Bookie
from bookie_server.server import BookieServer
from tests.harness.deadline import GENEROUS
from tests.harness.inprocess_bookie import started_bookie

KEY = master_key(b"secret")
BAD_KEY = master_key(b"other")
DIGEST = Digester("CRC32C", b"secret")


def make_entry(ledger: int, eid: int, payload: bytes, lac: int | None = None, scope: int = 0) -> bytes:
    return DIGEST.package_entry(ledger, eid, eid - 1 if lac is None else lac, 0, payload, scope_id=scope)


class Conn:
    """A bare client connection that sends frames and reads response bodies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.splitter = FrameSplitter()
        self.bodies: list[memoryview] = []

    @classmethod
    async def open(cls, port: int) -> "Conn":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    def send(self, frame: bytes) -> None:
        self.writer.write(frame)

    async def body(self, timeout: float = 5.0) -> memoryview:
        while not self.bodies:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                raise ConnectionError("closed by the bookie")
            self.bodies.extend(self.splitter.feed(data))
        return self.bodies.pop(0)

    async def v2(self, frame: bytes) -> Any:
        self.send(frame)
        return v2.decode_response(await self.body())

    async def v3(self, request: pb.Request) -> pb.Response:
        self.send(v3.encode_request(request))
        return v3.decode_response(await self.body())

    async def closed_by_peer(self, timeout: float = 5.0) -> bool:
        try:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
        except ConnectionError:
            return True  # reset by the bookie
        except asyncio.TimeoutError:
            return False
        return data == b""

    def close(self) -> None:
        self.writer.close()


Env = tuple[Bookie, BookieServer]


def with_bookie(**conf: object) -> Callable[[Callable[..., Awaitable[None]]], Callable[[Path], None]]:
    """Run an async test body with a started bookie + server in one event loop."""

    def wrap(fn: Callable[..., Awaitable[None]]) -> Callable[[Path], None]:
        def test(tmp_path: Path) -> None:
            async def main() -> None:
                async with started_bookie(tmp_path, **conf) as (bookie, server):
                    await fn(bookie, server)

            asyncio.run(main())

        test.__name__ = fn.__name__
        test.__doc__ = fn.__doc__
        return test

    return wrap


@with_bookie()
async def test_v2_add_read_fence_and_errors(bookie: Bookie, server: BookieServer) -> None:
    c = await Conn.open(server.port)
    entries = [make_entry(1, i, b"payload-%d" % i) for i in range(5)]
    # Pipelined: five adds in one write, five answers.
    c.send(b"".join(v2.encode_add_request(0, KEY, e) for e in entries))
    acks = [v2.decode_response(await c.body()) for _ in entries]
    assert sorted((a.rc, a.entry_id) for a in acks) == [(0, i) for i in range(5)]
    assert all(a.ledger_id == 1 for a in acks)

    r = await c.v2(v2.encode_read_request(1, 3))
    assert (r.rc, r.entry_id, bytes(r.entry)) == (v2.EOK, 3, entries[3])
    r = await c.v2(v2.encode_read_request(1, -1))
    assert (r.rc, r.entry_id, bytes(r.entry)) == (v2.EOK, -1, entries[4])
    assert (await c.v2(v2.encode_read_request(1, 7))).rc == v2.ENOENTRY
    assert (await c.v2(v2.encode_read_request(2, 0))).rc == v2.ENOLEDGER
    # Wrong master key on add: EUA.
    assert (await c.v2(v2.encode_add_request(0, BAD_KEY, make_entry(1, 5, b"x")))).rc == v2.EUA
    # Fencing read with the wrong key: EUA; with the right key: EOK, then adds get EFENCED.
    assert (await c.v2(v2.encode_read_request(1, -1, v2.FLAG_DO_FENCING, BAD_KEY))).rc == v2.EUA
    r = await c.v2(v2.encode_read_request(1, -1, v2.FLAG_DO_FENCING | v2.FLAG_HIGH_PRIORITY, KEY))
    assert (r.rc, bytes(r.entry)) == (v2.EOK, entries[4])
    assert (await c.v2(v2.encode_add_request(0, KEY, make_entry(1, 5, b"late")))).rc == v2.EFENCED
    recovery = v2.FLAG_RECOVERY_ADD | v2.FLAG_HIGH_PRIORITY
    assert (await c.v2(v2.encode_add_request(recovery, KEY, make_entry(1, 5, b"rec")))).rc == v2.EOK
    # Fencing an unknown ledger creates it fenced (recovery of a ledger with no entries here).
    r = await c.v2(v2.encode_read_request(9, -1, v2.FLAG_DO_FENCING, KEY))
    assert r.rc == v2.ENOENTRY
    assert bookie.storage.ledger(0, 9).fenced  # type: ignore[union-attr]
    # Version 3 in a v2 header: EBADVERSION with the normal response shape.
    bad = bytearray(v2.encode_read_request(1, 0))
    bad[4] = 3
    assert (await c.v2(bytes(bad))).rc == v2.EBADVERSION
    # AUTH: answered as the Java bookie with auth disabled.
    auth = await c.v2(v2.encode_auth_request("AuthDisabledPlugin", b""))
    assert isinstance(auth, v2.AuthResponse) and auth.auth_plugin_name == "AuthDisabledPlugin"
    c.close()


@with_bookie(maxBatchReadSize=1000)
async def test_v2_batch_read_semantics(bookie: Bookie, server: BookieServer) -> None:
    c = await Conn.open(server.port)
    entries = [make_entry(3, i, bytes([i]) * 100) for i in range(10)]  # 136 bytes each
    for e in entries[:6] + entries[7:]:  # a gap at 6
        assert (await c.v2(v2.encode_add_request(0, KEY, e))).rc == v2.EOK

    async def batch(start: int, count: int, size: int, rid: int = 1) -> v2.BatchReadResponse:
        r = await c.v2(v2.encode_batch_read_request(3, start, rid, count, size))
        assert isinstance(r, v2.BatchReadResponse) and r.request_id == rid and r.start_entry_id == start
        return r

    r = await batch(0, 3, 1 << 20)
    assert [bytes(e) for e in r.entries] == entries[:3]
    r = await batch(0, 0, 1 << 20)  # no count limit: stops at the gap
    assert len(r.entries) == 6
    # Size: 36 + k * (4 + 136) <= 600 -> k = 4.
    assert len((await batch(0, 100, 600)).entries) == 4
    # The bookie's maxBatchReadSize (1000) caps the request's: 36 + 6*140 = 876, 7 would be 1016.
    assert len((await batch(7, 100, 1 << 20)).entries) == 3  # 7, 8, 9 then no more entries
    assert len((await batch(0, -1, 1 << 30)).entries) == 6
    # The first entry is returned even when alone it exceeds the limit.
    assert len((await batch(0, 10, 1)).entries) == 1
    r = await batch(6, 5, 1 << 20, rid=77)
    assert (r.rc, r.entries) == (v2.ENOENTRY, [])
    r = await batch(0, 5, 1 << 20, rid=78)
    assert r.rc == v2.EOK
    r = await c.v2(v2.encode_batch_read_request(44, 0, 5, 5, 1000))
    assert r.rc == v2.ENOLEDGER
    text = server.metrics.render().decode()
    assert 'bookkeeper_server_BATCH_READ_ENTRY_REQUEST_bucket{le="3000.0",success="true"}' in text
    assert 'bookkeeper_server_BATCH_READ_ENTRY_RESPONSE_SIZE_bucket{le="1.048576e+06"}' in text
    c.close()


@with_bookie()
async def test_v3_operations(bookie: Bookie, server: BookieServer) -> None:
    c = await Conn.open(server.port)
    entries = [make_entry(5, i, b"v3-%d" % i) for i in range(4)]
    for i, e in enumerate(entries):
        resp = await c.v3(v3.add_request(i + 1, 5, i, KEY, e))
        assert v3.response_status(resp) == pb.EOK and resp.addResponse.entryId == i
    resp = await c.v3(v3.read_request(10, 5, 2))
    assert resp.readResponse.body == entries[2] and resp.readResponse.maxLAC == 2
    resp = await c.v3(v3.read_request(11, 5, -1))
    assert resp.readResponse.body == entries[3] and resp.readResponse.entryId == -1
    assert v3.response_status(await c.v3(v3.read_request(12, 5, 9))) == pb.ENOENTRY
    assert v3.response_status(await c.v3(v3.read_request(13, 6, 0))) == pb.ENOLEDGER
    assert v3.response_status(await c.v3(v3.add_request(14, 5, 4, BAD_KEY, make_entry(5, 4, b"x")))) == pb.EUA

    # Explicit LAC.
    blob = DIGEST.package_lac(5, 3)
    assert v3.response_status(await c.v3(v3.write_lac_request(20, 5, 3, KEY, blob))) == pb.EOK
    resp = await c.v3(v3.read_lac_request(21, 5))
    assert resp.readLacResponse.lacBody == blob and resp.readLacResponse.lastEntryBody == entries[3]
    # As ReadLacProcessorV3: nothing found (even an unknown ledger) is ENOENTRY; an explicit LAC
    # without any stored entry is EIO with the LAC blob.
    assert v3.response_status(await c.v3(v3.read_lac_request(22, 77))) == pb.ENOENTRY
    assert v3.response_status(await c.v3(v3.write_lac_request(23, 78, 0, KEY, DIGEST.package_lac(78, 0)))) == pb.EOK
    resp = await c.v3(v3.read_lac_request(24, 78))
    assert (resp.readLacResponse.status, resp.readLacResponse.lacBody) == (pb.EIO, DIGEST.package_lac(78, 0))

    # Piggyback long poll: LAC 3 > previous 1 -> entry 2 comes back at once.
    resp = await c.v3(v3.read_request(30, 5, -1, previous_lac=1, timeout_ms=1000, piggyback=True))
    rr = resp.readResponse
    assert (rr.status, rr.entryId, rr.maxLAC, rr.body) == (pb.EOK, 2, 3, entries[2])
    # LAC not past previous: waits, then a later add wakes it up.
    c.send(v3.encode_request(v3.read_request(31, 5, -1, previous_lac=3, timeout_ms=5000, piggyback=True)))
    await asyncio.sleep(0.1)
    c2 = await Conn.open(server.port)
    later = make_entry(5, 4, b"later", lac=4)
    assert v3.response_status(await c2.v3(v3.add_request(32, 5, 4, KEY, later))) == pb.EOK
    resp = v3.decode_response(await c.body())
    assert resp.header.txnId == 31 and resp.readResponse.entryId == 4 and resp.readResponse.body == later
    # Timeout with no change: EOK, maxLAC only.
    resp = await c.v3(v3.read_request(33, 5, -1, previous_lac=10, timeout_ms=50, piggyback=True))
    assert (resp.readResponse.status, resp.readResponse.maxLAC, resp.readResponse.HasField("body")) == (pb.EOK, 4, False)

    # Fencing over v3, then EFENCED for normal adds; FORCE_LEDGER; bookie info; entry list.
    resp = await c.v3(v3.read_request(40, 5, -1, v3.FLAG_DO_FENCING, master_key=KEY))
    assert resp.readResponse.status == pb.EOK and not resp.readResponse.HasField("maxLAC")
    assert v3.response_status(await c.v3(v3.add_request(41, 5, 5, KEY, make_entry(5, 5, b"f")))) == pb.EFENCED
    assert v3.response_status(await c.v3(v3.force_ledger_request(42, 5))) == pb.EOK
    # DEFERRED_SYNC adds are acknowledged once written; FORCE_LEDGER then makes them durable.
    deferred = make_entry(15, 0, b"deferred")
    resp = await c.v3(v3.add_request(48, 15, 0, KEY, deferred, write_flags=v3.WRITE_FLAG_DEFERRED_SYNC))
    assert v3.response_status(resp) == pb.EOK
    assert v3.response_status(await c.v3(v3.force_ledger_request(49, 15))) == pb.EOK
    assert (await c.v3(v3.read_request(50, 15, 0))).readResponse.body == deferred
    resp = await c.v3(v3.get_bookie_info_request(43))
    assert resp.getBookieInfoResponse.totalDiskCapacity >= resp.getBookieInfoResponse.freeDiskSpace > 0
    resp = await c.v3(v3.get_list_of_entries_request(44, 5))
    assert v3.decode_availability(resp.getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger) == [0, 1, 2, 3, 4]
    assert v3.response_status(await c.v3(v3.start_tls_request(45))) == pb.EBADREQ
    resp = await c.v3(v3.auth_request(46, "AuthDisabledPlugin", b""))
    assert resp.status == pb.EOK and resp.authResponse.authPluginName == "AuthDisabledPlugin"
    # Unknown operation (RANGE_READ_ENTRY): EBADREQ with the header echoed.
    req = pb.Request(header=pb.BKPacketHeader(version=pb.VERSION_THREE, operation=pb.RANGE_READ_ENTRY, txnId=47, priority=3))
    resp = await c.v3(req)
    assert resp.status == pb.EBADREQ and resp.header.priority == 3
    assert (resp.header.txnId, resp.header.operation, resp.header.version) == (47, pb.RANGE_READ_ENTRY, pb.VERSION_THREE)
    # Our v3 batch read, with a scope id.
    scoped = [make_entry(5, i, b"s%d" % i, scope=9) for i in range(3)]
    for i, e in enumerate(scoped):
        assert v3.response_status(await c.v3(v3.add_request(50 + i, 5, i, KEY, e, scope_id=9))) == pb.EOK
    resp = await c.v3(v3.batch_read_request(60, 5, 0, 10, 1 << 20, scope_id=9))
    assert list(resp.batchReadResponse.entries) == scoped and resp.batchReadResponse.ledgerScopeId == 9
    resp = await c.v3(v3.read_request(61, 5, 1, scope_id=9))
    assert resp.readResponse.body == scoped[1]
    # Scope 9's ledger 5 is not scope 0's ledger 5 (fenced above).
    assert bookie.storage.ledger(9, 5).fenced is False  # type: ignore[union-attr]
    c.close()
    c2.close()


@with_bookie()
async def test_a_v3_add_whose_entry_names_another_scope_is_refused_and_stores_nothing(
    bookie: Bookie, server: BookieServer
) -> None:
    """docs/extensions.md, "Entry format V2": the bookie reads the scope from the entry itself; a v3 add whose
    entry's scope is not the request's ``ledgerScopeId`` (either way round, scope 0 included) gets EBADREQ and
    stores nothing under either scope, and the connection goes on."""
    c = await Conn.open(server.port)
    cases = [
        (make_entry(7, 0, b"x", scope=3), 4),  # entry of scope 3, request says 4
        (make_entry(7, 0, b"x", scope=3), 0),  # entry of scope 3, request says nothing (scope 0)
        (make_entry(7, 0, b"x"), 3),  # a V1 (scope 0) entry sent as scope 3
    ]
    for txn, (entry, scope) in enumerate(cases):
        resp = await c.v3(v3.add_request(txn, 7, 0, KEY, entry, scope_id=scope))
        assert v3.response_status(resp) == pb.EBADREQ, (txn, scope)
    for scope in (0, 3, 4):
        assert bookie.storage.ledger(scope, 7) is None, scope
    good = make_entry(7, 0, b"x", scope=3)
    assert v3.response_status(await c.v3(v3.add_request(9, 7, 0, KEY, good, scope_id=3))) == pb.EOK
    c.close()


@with_bookie(longPollMaxTimeoutMs=300)
async def test_a_long_poll_waits_at_most_long_poll_max_timeout_ms(bookie: Bookie, server: BookieServer) -> None:
    """docs/bookie.md, configuration table: ``longPollMaxTimeoutMs`` cuts a long poll's own timeout (here 10 s) to
    it: with no new entry the read is answered after about 0.3 s, not after its own 600 s (a generous deadline
    far below that)."""
    c = await Conn.open(server.port)
    assert v3.response_status(await c.v3(v3.add_request(1, 11, 0, KEY, make_entry(11, 0, b"a")))) == pb.EOK
    started = time.monotonic()
    resp = await asyncio.wait_for(c.v3(v3.read_request(2, 11, 1, previous_lac=0, timeout_ms=600_000)), GENEROUS)
    waited = time.monotonic() - started
    assert waited >= 0.25, waited  # it was held (a lower bound: a slow machine only adds)
    assert v3.response_status(resp) != pb.EOK or not resp.readResponse.body  # nothing new to carry
    c.close()


@with_bookie()
async def test_bad_input_closes_only_that_connection(bookie: Bookie, server: BookieServer) -> None:
    good = await Conn.open(server.port)
    assert (await good.v2(v2.encode_add_request(0, KEY, make_entry(8, 0, b"keep")))).rc == v2.EOK

    cases = [
        struct.pack(">I", 6 * 1024 * 1024) + b"\0" * 16,  # over nettyMaxFrameSizeBytes
        struct.pack(">II", 4, (2 << 24) | (9 << 16)),  # unknown v2 opcode 9
        struct.pack(">II", 8, (2 << 24) | (2 << 16)) + b"\0" * 4,  # truncated v2 read
        struct.pack(">I", 3) + b"\x0a\x01\xff",  # neither valid v3 nor v2
    ]
    for frame in cases:
        bad = await Conn.open(server.port)
        bad.send(frame)
        assert await bad.closed_by_peer(), frame[:12]
    # A v3 connection that then sends v2 stays v3... until a v2 frame flips it: that frame is served as v2.
    mixed = await Conn.open(server.port)
    resp = await mixed.v3(v3.read_request(1, 8, 0))
    assert resp.readResponse.body == make_entry(8, 0, b"keep")
    r = await mixed.v2(v2.encode_read_request(8, 0))
    assert r.rc == v2.EOK
    # The good connection still works, and the data is intact.
    r = await good.v2(v2.encode_read_request(8, 0))
    assert bytes(r.entry) == make_entry(8, 0, b"keep")
    assert server.metrics.protocol_errors._value.get() >= len(cases)  # type: ignore[attr-defined]
    good.close()
    mixed.close()


@with_bookie(forceReadOnlyBookie="true")
async def test_readonly_bookie_refuses_adds(bookie: Bookie, server: BookieServer) -> None:
    c = await Conn.open(server.port)
    assert (await c.v2(v2.encode_add_request(0, KEY, make_entry(1, 0, b"x")))).rc == v2.EREADONLY
    c.close()
    c = await Conn.open(server.port)  # v2 and v3 do not mix on one connection
    resp = await c.v3(v3.add_request(1, 1, 0, KEY, make_entry(1, 0, b"x")))
    assert v3.response_status(resp) == pb.EREADONLY
    # High-priority (recovery) adds are still accepted by an admin-forced read-only bookie.
    resp = await c.v3(v3.add_request(2, 1, 0, KEY, make_entry(1, 0, b"x"), v3.FLAG_HIGH_PRIORITY | v3.FLAG_RECOVERY_ADD))
    assert v3.response_status(resp) == pb.EOK
    blob = DIGEST.package_lac(1, 0)
    assert v3.response_status(await c.v3(v3.write_lac_request(3, 1, 0, KEY, blob))) == pb.EREADONLY
    c.close()


@with_bookie(journalSyncData="true")
async def test_write_lac_fence_without_key_and_force_ledger_as_a_journal_barrier(bookie: Bookie, server: BookieServer) -> None:
    """docs/bookie.md, "Protocol coverage": WRITE_LAC takes the ledger id from the LAC blob, not from the request
    (Java's ``Bookie.setExplicitLac``); a v3 fencing read without a master key is EUA (ReadEntryProcessorV3); FORCE_LEDGER
    is a journal barrier: answered only once what was journaled before it is synced, while a DEFERRED_SYNC add is
    answered before that sync; with ``journalSyncData=true`` each group commit is fdatasync'ed."""
    import os
    import threading

    c = await Conn.open(server.port)
    entries = [make_entry(7, i, b"lac-%d" % i) for i in range(2)]
    for i, e in enumerate(entries):
        assert v3.response_status(await c.v3(v3.add_request(i + 1, 7, i, KEY, e))) == pb.EOK
    # The request names ledger 8, the blob ledger 7: the blob's ledger gets the explicit LAC, ledger 8 nothing.
    blob = DIGEST.package_lac(7, 1)
    assert v3.response_status(await c.v3(v3.write_lac_request(10, 8, 1, KEY, blob))) == pb.EOK
    assert (await c.v3(v3.read_lac_request(11, 7))).readLacResponse.lacBody == blob
    assert v3.response_status(await c.v3(v3.read_lac_request(12, 8))) == pb.ENOENTRY
    assert bookie.storage.ledger(0, 8) is None
    # Fencing without a master key: EUA, and the ledger is not fenced.
    keyless = v3.read_request(13, 7, -1, v3.FLAG_DO_FENCING, master_key=KEY)
    keyless.readRequest.ClearField("masterKey")  # our encoder refuses to build it; another client may send it
    resp = await c.v3(keyless)
    assert resp.readResponse.status == pb.EUA and not bookie.storage.ledger(0, 7).fenced  # type: ignore[union-attr]
    keyless.readRequest.ledgerId = 9  # a ledger this bookie does not know: no key to compare with, still EUA
    resp = await c.v3(keyless)
    assert resp.readResponse.status == pb.EUA and bookie.storage.ledger(0, 9) is None

    release, syncing = threading.Event(), threading.Event()
    real_fdatasync = os.fdatasync
    syncs = [0]

    def held_fdatasync(fd: int) -> None:
        syncs[0] += 1
        syncing.set()
        assert release.wait(10)
        real_fdatasync(fd)

    os.fdatasync = held_fdatasync  # type: ignore[assignment]
    try:
        deferred = make_entry(7, 2, b"deferred")
        resp = await c.v3(v3.add_request(20, 7, 2, KEY, deferred, write_flags=v3.WRITE_FLAG_DEFERRED_SYNC))
        assert v3.response_status(resp) == pb.EOK  # written, its sync still held
        assert await asyncio.to_thread(syncing.wait, 5)
        c.send(v3.encode_request(v3.force_ledger_request(21, 7)))
        with_answer = asyncio.ensure_future(c.body(timeout=10))
        await asyncio.sleep(0.5)
        assert not with_answer.done()  # the barrier waits for the sync
        release.set()
        resp = v3.decode_response(await with_answer)
        assert resp.header.txnId == 21 and v3.response_status(resp) == pb.EOK
    finally:
        release.set()
        os.fdatasync = real_fdatasync  # type: ignore[assignment]
    assert syncs[0] >= 1
    assert (await c.v3(v3.read_request(22, 7, 2))).readResponse.body == deferred
    c.close()


@with_bookie()
async def test_every_operation_has_its_latency_histogram_and_bp62_its_buckets(bookie: Bookie, server: BookieServer) -> None:
    """docs/bookie.md, "Operations", Metrics: a ``bookkeeper_server_<OP>_REQUEST`` latency histogram (``success``
    label) for every operation, BP-62's two batch-read histograms with exactly the documented buckets, and the
    limits' ``LIMIT_HITS`` and in-progress gauges under their documented names."""
    from prometheus_client.parser import text_string_to_metric_families

    c = await Conn.open(server.port)
    entries = [make_entry(4, i, b"m-%d" % i) for i in range(3)]
    for i, e in enumerate(entries):
        assert v3.response_status(await c.v3(v3.add_request(i, 4, i, KEY, e))) == pb.EOK
    assert v3.response_status(await c.v3(v3.read_request(10, 4, 0))) == pb.EOK
    assert v3.response_status(await c.v3(v3.read_request(11, 4, 9))) == pb.ENOENTRY  # a failure: success="false"
    assert v3.response_status(await c.v3(v3.batch_read_request(12, 4, 0, 10, 1 << 20))) == pb.EOK
    assert v3.response_status(await c.v3(v3.write_lac_request(13, 4, 2, KEY, DIGEST.package_lac(4, 2)))) == pb.EOK
    assert v3.response_status(await c.v3(v3.read_lac_request(14, 4))) == pb.EOK
    assert v3.response_status(await c.v3(v3.force_ledger_request(15, 4))) == pb.EOK
    assert v3.response_status(await c.v3(v3.get_bookie_info_request(16))) == pb.EOK
    assert v3.response_status(await c.v3(v3.get_list_of_entries_request(17, 4))) == pb.EOK
    resp = await c.v3(v3.read_request(18, 4, -1, previous_lac=0, timeout_ms=1000, piggyback=True))
    assert v3.response_status(resp) == pb.EOK
    assert v3.response_status(await c.v3(v3.read_request(19, 4, -1, v3.FLAG_DO_FENCING, master_key=KEY))) == pb.EOK
    c.close()

    families = {f.name: f for f in text_string_to_metric_families(server.metrics.render().decode())}

    def count(name: str, success: str = "true") -> float:
        return sum(
            s.value for s in families[name].samples if s.name == f"{name}_count" and s.labels.get("success") == success
        )

    ops = (
        "ADD_ENTRY", "READ_ENTRY", "BATCH_READ_ENTRY", "READ_LAC", "WRITE_LAC", "FORCE_LEDGER", "GET_BOOKIE_INFO",
        "GET_LIST_OF_ENTRIES_OF_LEDGER", "READ_ENTRY_FENCE_REQUEST", "READ_ENTRY_LONG_POLL_REQUEST",
    )
    for op in ops:
        name = f"bookkeeper_server_{op}" if op.endswith("_REQUEST") else f"bookkeeper_server_{op}_REQUEST"
        assert count(name) >= 1, op
    assert count("bookkeeper_server_ADD_ENTRY_REQUEST") == 3
    assert count("bookkeeper_server_READ_ENTRY_REQUEST", "false") == 1

    def bounds(name: str, label: dict[str, str]) -> list[str]:
        return [
            s.labels["le"] for s in families[name].samples
            if s.name == f"{name}_bucket" and all(s.labels.get(k) == v for k, v in label.items())
        ]

    latency = bounds("bookkeeper_server_BATCH_READ_ENTRY_REQUEST", {"success": "true"})
    assert [float(le) for le in latency] == [5, 10, 20, 50, 100, 200, 500, 1000, 3000, float("inf")]
    size = bounds("bookkeeper_server_BATCH_READ_ENTRY_RESPONSE_SIZE", {})
    assert [float(le) for le in size] == [128, 512, 1 << 10, 2 << 10, 4 << 10, 16 << 10, 128 << 10, 1 << 20, float("inf")]
    assert "bookie_read_cache_size" in families and "bookkeeper_server_LIMIT_HITS" in families

    # READ_ENTRY_IN_PROGRESS counts a waiting long poll ("Limits": long polls included).
    def in_progress() -> float:
        text = server.metrics.render().decode()
        [family] = [f for f in text_string_to_metric_families(text) if f.name == "bookkeeper_server_READ_ENTRY_IN_PROGRESS"]
        return family.samples[0].value

    poll = await Conn.open(server.port)
    assert in_progress() == 0
    poll.send(v3.encode_request(v3.read_request(30, 4, -1, previous_lac=2, timeout_ms=5000, piggyback=True)))
    for _ in range(50):
        if in_progress() == 1:
            break
        await asyncio.sleep(0.02)
    assert in_progress() == 1
    adder = await Conn.open(server.port)
    recovery = v3.FLAG_RECOVERY_ADD | v3.FLAG_HIGH_PRIORITY  # the ledger was fenced above
    assert v3.response_status(await adder.v3(v3.add_request(31, 4, 3, KEY, make_entry(4, 3, b"wake", lac=3), recovery))) == pb.EOK
    assert v3.decode_response(await poll.body()).readResponse.entryId == 3
    assert in_progress() == 0
    poll.close()
    adder.close()


def test_bookie_info_is_the_ledger_directories_file_systems_counted_once(tmp_path: Path) -> None:
    """docs/bookie.md, "Protocol coverage": GET_BOOKIE_INFO answers the total and free bytes of the ledger
    directories' file systems: two ledger directories on one file system count it once."""
    import shutil

    async def main() -> None:
        dirs = f"{tmp_path / 'l1'},{tmp_path / 'l2'}"
        async with started_bookie(tmp_path, ledgerDirectories=dirs) as (_bookie, server):
            c = await Conn.open(server.port)
            info = (await c.v3(v3.get_bookie_info_request(1))).getBookieInfoResponse
            usage = shutil.disk_usage(tmp_path)
            assert info.totalDiskCapacity == usage.total
            assert abs(info.freeDiskSpace - usage.free) < 64 << 20  # the free space moves with other writers
            c.close()

    asyncio.run(main())
