"""The bookie's add path helpers: the one-copy journal ADD_ENTRY record and the lock-free request metrics."""

from __future__ import annotations

import asyncio
import os
import struct

import pytest

from bkspark.errors import BookieIOError, NoSuchEntryError
from bkspark.protocol import v2
from bookie_server.bookie import Bookie
from bookie_server.journal import _ADD_PREFIX, RecordType, encode_add, encode_record
from bookie_server.metrics import BookieMetrics, LoopHistogram
from bookie_server.server import BookieServer
from tests.unit.test_bookie_server import BAD_KEY, KEY, Conn, make_entry, with_bookie


def test_encode_add_is_the_generic_record_byte_for_byte() -> None:
    for scope_id, size in ((0, 0), (0, 1), (5, 1024), (2**62, 70_000)):
        entry = os.urandom(size)
        expected = encode_record(RecordType.ADD_ENTRY, scope_id, 7, _ADD_PREFIX.pack(9, 8) + entry)
        assert encode_add(scope_id, 7, 9, 8, entry) == expected
        assert encode_add(scope_id, 7, 9, 8, memoryview(entry)) == expected


def test_loop_histogram_buckets_are_prometheus_cumulative_le() -> None:
    hist = LoopHistogram((1.0, 5.0, float("inf")))
    for value in (0.5, 1.0, 1.5, 5.0, 9.0):
        hist.observe(value)
    buckets, total = hist.cumulative()
    assert buckets == [("1.0", 2), ("5.0", 4), ("+Inf", 5)] and total == 17.0


def test_request_metrics_render_with_their_bookkeeper_names() -> None:
    metrics = BookieMetrics()
    metrics.observe_request("ADD_ENTRY", 0.3, True)
    metrics.observe_request("ADD_ENTRY", 4000.0, False)
    metrics.add_bytes.inc(1024)
    metrics.read_bytes.inc(10)
    metrics.batch_read_response_size.observe(2000)
    text = metrics.render().decode()
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST_count{success="true"} 1.0' in text
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST_bucket{le="+Inf",success="false"} 1.0' in text
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST_bucket{le="0.5",success="true"} 1.0' in text
    assert "bookkeeper_server_ADD_ENTRY_BYTES_total 1024.0" in text
    assert "bookkeeper_server_READ_ENTRY_BYTES_total 10.0" in text
    assert 'bookkeeper_server_BATCH_READ_ENTRY_RESPONSE_SIZE_bucket{le="2048.0"} 1.0' in text


@with_bookie()
async def test_adds_of_one_chunk_are_one_group_with_refusals_answered_apart(bookie: Bookie, server: BookieServer) -> None:
    """Ten adds in one send: a fenced ledger's and a wrong key's are refused, the rest acknowledged together."""
    await bookie.fence(0, 8, KEY)  # ledger 8 is fenced (a recovery started): plain adds are refused
    submissions: list[int] = []
    journal = bookie.journal
    assert journal is not None
    original = journal.submit_many

    def counting(records, dones, written=()):  # type: ignore[no-untyped-def]
        submissions.append(len(records))
        original(records, dones, written)

    journal.submit_many = counting  # type: ignore[method-assign]
    c = await Conn.open(server.port)
    frames = [v2.encode_add_request(0, KEY, make_entry(5, i, b"p%d" % i)) for i in range(8)]
    frames.insert(3, v2.encode_add_request(0, KEY, make_entry(8, 0, b"fenced")))
    frames.insert(6, v2.encode_add_request(0, BAD_KEY, make_entry(5, 100, b"wrong key")))
    c.send(b"".join(frames))
    responses = [v2.decode_response(await c.body()) for _ in frames]
    by_entry = {(r.ledger_id, r.entry_id): r.rc for r in responses}
    assert by_entry.pop((8, 0)) == v2.EFENCED and by_entry.pop((5, 100)) == v2.EUA
    assert by_entry == {(5, i): v2.EOK for i in range(8)}
    assert submissions == [1]  # the accepted adds reached the journal as one submission
    assert [bookie.storage.get_entry(0, 5, i) for i in range(8)] == [make_entry(5, i, b"p%d" % i) for i in range(8)]
    # Refusals leave before the group's acknowledgements (they need no journal).
    assert {(r.ledger_id, r.entry_id) for r in responses[:2]} == {(8, 0), (5, 100)}
    text = server.metrics.render().decode()
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST_count{success="true"} 8.0' in text
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST_count{success="false"} 2.0' in text
    c.close()


@with_bookie()
async def test_a_group_checks_each_change_of_ledger_key_or_flags(bookie: Bookie, server: BookieServer) -> None:
    """Consecutive adds alike are checked once (docs/bookie.md, "Adds"): a wrong key between right ones, a new
    ledger's first add (which binds its key), a fenced ledger's plain and recovery adds, all in one send."""
    await bookie.fence(0, 8, KEY)
    c = await Conn.open(server.port)
    sends = [
        (KEY, 0, make_entry(5, 0, b"a")),
        (BAD_KEY, 0, make_entry(5, 1, b"wrong key")),
        (KEY, 0, make_entry(5, 2, b"b")),
        (KEY, 0, make_entry(9, 0, b"new ledger: binds the key")),
        (KEY, 0, make_entry(9, 1, b"c")),
        (BAD_KEY, 0, make_entry(9, 2, b"wrong key for the key just bound")),
        (KEY, 0, make_entry(8, 0, b"fenced")),
        (KEY, v2.FLAG_RECOVERY_ADD, make_entry(8, 0, b"recovery add to a fenced ledger")),
        (KEY, 0, make_entry(8, 1, b"fenced again")),
    ]
    c.send(b"".join(v2.encode_add_request(flags, key, entry) for key, flags, entry in sends))
    responses = [v2.decode_response(await c.body()) for _ in sends]
    assert sorted((r.ledger_id, r.entry_id, r.rc) for r in responses) == sorted([
        (5, 0, v2.EOK), (5, 1, v2.EUA), (5, 2, v2.EOK), (9, 0, v2.EOK), (9, 1, v2.EOK), (9, 2, v2.EUA),
        (8, 0, v2.EFENCED), (8, 0, v2.EOK), (8, 1, v2.EFENCED),
    ])
    stored = bookie.storage.ledger(0, 9)
    assert stored is not None and stored.master_key == KEY
    assert [bookie.storage.get_entry(0, 5, i) for i in (0, 2)] == [sends[0][2], sends[2][2]]
    assert bookie.storage.get_entry(0, 8, 0) == sends[7][2]
    c.close()


@with_bookie()
async def test_a_malformed_frame_among_decoded_adds_closes_the_connection_after_the_adds_before_it(
    bookie: Bookie, server: BookieServer
) -> None:
    """On a v2 connection a received chunk's adds are decoded in one pass (v2_bulk.decode_add_requests); a frame that
    pass leaves alone is parsed in its turn: the adds before a malformed one are taken (stored and journalled;
    their answers die with the connection, as the ones a Java bookie was writing when its decoder failed), the
    bookie closes the connection, and the add after it is never stored."""
    c = await Conn.open(server.port)
    first = await c.v2(v2.encode_add_request(0, KEY, make_entry(5, 0, b"decides v2")))
    assert first.rc == v2.EOK
    short_add = v2.encode_add_request(0, KEY, make_entry(5, 3, b""))
    short_add = struct.pack(">I", 4 + 20 + 8) + short_add[4:4 + 4 + 20 + 8]  # an entry of 8 bytes: no ids
    c.send(b"".join([
        v2.encode_add_request(0, KEY, make_entry(5, 1, b"one")),
        v2.encode_add_request(0, KEY, make_entry(5, 2, b"two")),
        short_add,
        v2.encode_add_request(0, KEY, make_entry(5, 4, b"after")),
    ]))
    assert await c.closed_by_peer()
    assert [bookie.storage.get_entry(0, 5, i) for i in (1, 2)] == [make_entry(5, 1, b"one"), make_entry(5, 2, b"two")]
    with pytest.raises(NoSuchEntryError):
        bookie.storage.get_entry(0, 5, 4)


@with_bookie()
async def test_a_group_is_handed_to_the_journal_before_add_entries_cb_returns(bookie: Bookie, server: BookieServer) -> None:
    """The group's records and the records queued before it in the same loop iteration (a fence here) reach the
    journal thread in one submission, in order, during the call: the journal need not wait for the loop to turn."""
    journal = bookie.journal
    assert journal is not None
    submitted: list[list[bytes]] = []
    original = journal.submit_many

    def recording(records, dones, written=()):  # type: ignore[no-untyped-def]
        submitted.append(list(records))
        original(records, dones, written)

    journal.submit_many = recording  # type: ignore[method-assign]
    fenced = bookie.fence(0, 8, KEY)
    outcomes: list[BaseException | None] = []
    refused = bookie.add_entries_cb(
        [(5, i, -1, make_entry(5, i, b"e%d" % i), KEY, False, False) for i in range(3)], outcomes.append
    )
    assert refused == [None, None, None]
    assert len(submitted) == 1 and len(submitted[0]) == 2  # the fence's record, then the group's blob
    assert outcomes == []  # durable later, from the journal thread through the loop
    await fenced
    for _ in range(200):
        if outcomes:
            break
        await asyncio.sleep(0.01)
    assert outcomes == [None]


@with_bookie()
async def test_a_group_the_journal_refuses_is_answered_in_full(bookie: Bookie, server: BookieServer) -> None:
    """A failed journal refuses a group from its thread; a bookie without a journal (stopping) refuses it during
    add_entries_cb, before the connection has counted the group: the answer then waits for the next loop
    iteration.  Either way every add of the chunk is answered EIO and every permit comes back."""
    journal = bookie.journal
    assert journal is not None
    c = await Conn.open(server.port)
    assert (await c.v2(v2.encode_add_request(0, KEY, make_entry(5, 0, b"before")))).rc == v2.EOK
    for refuse in ("failed journal", "no journal"):
        if refuse == "failed journal":
            journal._failure = BookieIOError("the journal's disk failed")  # what a failed write or sync leaves
        else:
            bookie.journal = None
        c.send(b"".join(v2.encode_add_request(0, KEY, make_entry(5, i, b"e%d" % i)) for i in range(1, 6)))
        responses = [v2.decode_response(await c.body()) for _ in range(5)]
        assert sorted((r.entry_id, r.rc) for r in responses) == [(i, v2.EIO) for i in range(1, 6)], refuse
        assert server.adds_gate.count == 0 and server.adds_gate.bytes == 0
        journal._failure = None
        bookie.journal = journal
    c.close()


@with_bookie()
async def test_a_new_ledgers_master_key_record_goes_before_its_groups_adds(bookie: Bookie, server: BookieServer) -> None:
    """docs/bookie.md, "Adds": a new ledger's MASTER_KEY record goes into the journal before the group's ADD_ENTRY
    records (replay binds the key before it stores the entries), and only once for the ledger."""
    from bookie_server.journal import all_journal_files, iter_records

    c = await Conn.open(server.port)
    assert (await c.v2(v2.encode_add_request(0, KEY, make_entry(4, 0, b"decides v2")))).rc == v2.EOK
    c.send(b"".join(v2.encode_add_request(0, KEY, make_entry(9, i, b"e%d" % i)) for i in range(4)))
    assert sorted([v2.decode_response(await c.body()).rc for _ in range(4)]) == [v2.EOK] * 4
    assert bookie.journal is not None
    records = [
        (record.type, record.ledger_id)
        for _file_id, path in all_journal_files(bookie.journal.directories)
        for _end, record in iter_records(path)
        if record.ledger_id == 9
    ]
    assert records == [(RecordType.MASTER_KEY, 9)] + [(RecordType.ADD_ENTRY, 9)] * 4
    c.close()
