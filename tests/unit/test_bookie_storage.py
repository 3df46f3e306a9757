"""Journal and ledger storage of the Python bookie: durability, replay, corruption."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import random
import re
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest

from bkspark.errors import (
    BookieIOError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
    WriteOnReadOnlyBookieError,
)
from bookie_server.bookie import Bookie, ReadLacResult
from bkspark.config.bookie import BookieConfig, load_conf, parse_conf_text
from bookie_server.journal import (
    Journal,
    JournalPosition,
    RecordType,
    encode_add,
    encode_record,
    JournalFileScan,
    iter_records,
    journal_files,
)
from bookie_server import checkpoints as checkpoints_module
from bookie_server import journal as journal_module
from bookie_server import entry_logs as entry_logs_module
from bookie_server import storage as storage_module
from bookie_server import storage_reads as storage_reads_module
from bookie_server.entry_logs import cache_key, key_address, key_ledger
from bookie_server.storage import LedgerInfo, LedgerStorage, _group_keys

KEY = b"k" * 20
OTHER_KEY = b"x" * 20


def entry(ledger: int, eid: int, lac: int, payload: bytes = b"") -> bytes:
    """A V1-shaped entry (header + 8-byte fake digest + payload): the bookie stores it verbatim."""
    return struct.pack(">qqqq", ledger, eid, lac, len(payload)) + b"\0" * 8 + payload


# -- journal --------------------------------------------------------------------------------


def test_journal_group_commit_and_replay(tmp_path: Path) -> None:
    done: list[BaseException | None] = []
    batches: list[int] = []
    journal = Journal(tmp_path, on_batch=lambda n, size, secs: batches.append(n))
    journal.open()
    for i in range(200):
        journal.submit(encode_add(0, 7, i, i - 1, entry(7, i, i - 1, b"p%d" % i)), done.append)
    journal.submit(b"", done.append)  # barrier
    journal.close()
    assert done == [None] * 201
    assert sum(batches) == 201
    records = [r for _, path in journal_files(tmp_path) for _, r in iter_records(path)]
    assert [r.type for r in records] == [RecordType.ADD_ENTRY] * 200
    assert records[5].ledger_id == 7 and records[5].payload.endswith(b"p5")


def test_journal_scan_stops_at_damage_and_says_where(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.open()
    for i in range(3):
        journal.submit(encode_record(RecordType.FENCE, 0, i), lambda e: None)
    journal.close()
    (_, path), = journal_files(tmp_path)
    full = path.read_bytes()
    # A partial fourth record (as a crash mid-write leaves it) ...
    torn = encode_record(RecordType.FENCE, 0, 3)[:-5]
    path.write_bytes(full + torn)
    scan = JournalFileScan(path)
    assert [r.ledger_id for _, r in scan] == [0, 1, 2]
    assert scan.damage is not None and scan.damage.torn and scan.damage.offset == len(full)
    # ... and a corrupted byte inside the second record: the scan stops before it, not torn.
    second_start = len(full) - 2 * len(encode_record(RecordType.FENCE, 0, 2))
    damaged = bytearray(full)
    damaged[second_start + 12] ^= 0xFF
    path.write_bytes(bytes(damaged))
    scan = JournalFileScan(path)
    assert [r.ledger_id for _, r in scan] == [0]
    assert scan.damage is not None and not scan.damage.torn and scan.damage.offset == second_start


def test_journal_after_close_fails_submissions(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.open()
    journal.close()
    errors: list[BaseException | None] = []
    journal.submit(encode_record(RecordType.FENCE, 0, 1), errors.append)
    assert len(errors) == 1 and isinstance(errors[0], BookieIOError)


def test_journal_rolls_and_trims(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_file_size=200)
    journal.open()
    for i in range(20):
        written = threading.Event()
        journal.submit(encode_record(RecordType.EXPLICIT_LAC, 0, i, b"z" * 40), lambda e: written.set())
        assert written.wait(5)
    journal.close()
    files = journal_files(tmp_path)
    assert len(files) > 3
    removed = journal.trim(JournalPosition(files[-1][0], 16))
    assert len(removed) == len(files) - 1


# -- storage --------------------------------------------------------------------------------


def test_storage_write_cache_checkpoint_and_reopen(tmp_path: Path) -> None:
    storage = LedgerStorage([tmp_path / "a", tmp_path / "b"])
    storage.open()
    storage.set_master_key(0, 1, KEY)
    storage.set_master_key(3, 2, KEY)
    for i in range(50):
        storage.put_entry(0, 1, i, i - 1, entry(1, i, i - 1, b"one%d" % i))
        storage.put_entry(3, 2, i, i - 2, entry(2, i, i - 2, b"two%d" % i))
    storage.set_fenced(0, 1)
    storage.set_explicit_lac(3, 2, struct.pack(">qq", 2, 70) + b"d", 70)
    assert storage.get_entry(0, 1, 10).endswith(b"one10")
    storage.checkpoint(JournalPosition(5, 99))
    assert storage.write_cache_bytes == 0
    assert storage.get_entry(0, 1, -1).endswith(b"one49")  # from the entry log now
    storage.close()

    again = LedgerStorage([tmp_path / "a", tmp_path / "b"])
    again.open()
    assert again.checkpoint_mark == JournalPosition(5, 99)
    one = again.ledger(0, 1)
    two = again.ledger(3, 2)
    assert one == LedgerInfo(master_key=KEY, fenced=True, explicit_lac=None, lac=48, last_entry=49)
    assert two is not None and two.lac == 70 and not two.fenced and two.explicit_lac.endswith(b"d")
    assert [again.get_entry(3, 2, i)[-5:] for i in (0, 49)] == [b"\0two0", b"two49"]
    assert again.entry_ids(0, 1) == list(range(50))
    with pytest.raises(NoSuchEntryError):
        again.get_entry(0, 1, 50)
    with pytest.raises(NoSuchLedgerError):
        again.get_entry(0, 99, 0)
    with pytest.raises(NoSuchLedgerError):
        again.get_entry(1, 1, 0)  # same ledger id, other scope
    again.close()


def test_a_group_of_entries_is_stored_as_one_entry_at_a_time_would_be(tmp_path: Path) -> None:
    """``put_entries`` (one call per group of adds, the builtins' loops) against storing the same adds one by one
    the way the per-entry loop did: the same write cache, byte count, read cache, last entries and LACs, over
    random groups with entries written again (in the group and before it), several ledgers and scopes, entries
    the read cache holds, and runs of one ledger's consecutive entries (whose keys are one range)."""
    rng = random.Random(1125)
    grouped = LedgerStorage([tmp_path / "grouped"])
    grouped.open()
    model_cache: dict[tuple[int, int, int], bytes] = {}
    model_read: dict[tuple[int, int, int], bytes] = {}
    model_ledgers: dict[tuple[int, int], list[int]] = {}
    for _round in range(300):
        scope = rng.choice([0, 0, 3])
        adds, entries = [], []
        if rng.random() < 0.3:  # a client's run of adds
            run_ledger, first = rng.choice([1, 2, 9]), rng.randrange(0, 60)
            ids = [(run_ledger, first + i) for i in range(rng.randrange(1, 30))]
        else:
            ids = [(rng.choice([1, 1, 1, 2, 9]), rng.randrange(0, 60)) for _ in range(rng.randrange(1, 30))]
        for ledger, entry_id in ids:
            adds.append((ledger, entry_id, rng.randrange(-1, entry_id + 1), b"", b"k" * 20, False, False))
            entries.append(rng.randbytes(rng.randrange(0, 40)))
        for key in rng.sample(sorted(model_cache), min(3, len(model_cache))):  # the read cache holds some keys
            data = rng.randbytes(5)
            held = grouped._read_cache.get(cache_key(*key), b"")
            assert isinstance(held, bytes)
            grouped._read_cache_bytes += len(data) - len(held)
            grouped._read_cache[cache_key(*key)] = data
            model_read[key] = data
        grouped.put_entries(scope, adds, entries)
        for add, data in zip(adds, entries):  # the per-entry reference
            key = (scope, add[0], add[1])
            model_cache[key] = data
            model_read.pop(key, None)
            state = model_ledgers.setdefault((scope, add[0]), [-1, -1])
            state[0], state[1] = max(state[0], add[1]), max(state[1], add[2])
        assert grouped._write_cache == {cache_key(*key): data for key, data in model_cache.items()}
        assert grouped.write_cache_bytes == sum(map(len, model_cache.values()))
        assert dict(grouped._read_cache) == {cache_key(*key): data for key, data in model_read.items()}
        assert grouped._read_cache_bytes == sum(map(len, model_read.values()))
        for (scope_id, ledger_id), (last_entry, lac) in model_ledgers.items():
            info = grouped.ledger(scope_id, ledger_id)
            assert info is not None and (info.last_entry, info.lac) == (last_entry, lac)
            assert (scope_id, ledger_id) in grouped._dirty
    grouped.close()


def test_cache_keys_are_the_index_keys_as_integers() -> None:
    """An entry's cache key is one int whose 24 big-endian bytes are its index key and record key (``>qqq``):
    a round trip for signed ids, the ints' order that of the index, one ledger part for all of a ledger's keys."""
    rng = random.Random(1126)
    edges = [0, 1, -1, 2**63 - 1, -(2**63)]
    triples = [tuple(rng.choice(edges) if rng.random() < 0.3 else rng.randrange(-(2**63), 2**63) for _ in range(3))
               for _ in range(2000)]
    for triple in triples:
        key = cache_key(*triple)
        assert 0 <= key < 1 << 192 and key.to_bytes(24, "big") == struct.pack(">qqq", *triple)
        assert key_address(key) == triple
        assert key_ledger(key) == key_ledger(cache_key(triple[0], triple[1], 0)) == key >> 64
    keys = [cache_key(*t) for t in triples]
    assert sorted(keys) == [int.from_bytes(b, "big") for b in sorted(struct.pack(">qqq", *t) for t in triples)]
    assert len(set(keys)) == len(set(triples))


@pytest.mark.parametrize(
    ("scope", "ids", "is_range"),
    [
        (0, [(7, 0), (7, 1), (7, 2)], True),  # a client's run
        (3, [(2**62, 2**63 - 3), (2**62, 2**63 - 2), (2**62, 2**63 - 1)], True),  # up to the last entry id
        (-1, [(-5, 10)], True),  # signed scope and ledger: the range is within the entry part
        (0, [(7, 0), (7, 2)], False),  # a gap
        (0, [(7, 1), (7, 0)], False),  # out of order
        (0, [(7, 3), (7, 3)], False),  # the same entry twice
        (0, [(7, 0), (8, 1)], False),  # two ledgers
        (0, [(7, -1), (7, 0)], False),  # a negative entry id: its key is past the ledger's others
        (0, [(7, 2**63 - 1)], True),
    ],
)
def test_a_group_of_adds_keys_are_one_range_only_for_one_ledgers_consecutive_entries(
    scope: int, ids: list[tuple[int, int]], is_range: bool
) -> None:
    adds = [(ledger, entry_id, -1) for ledger, entry_id in ids]
    keys = _group_keys(scope, adds, len({ledger for ledger, _ in ids}) == 1)
    assert isinstance(keys, range) == is_range
    assert list(keys) == [cache_key(scope, ledger, entry_id) for ledger, entry_id in ids]


def test_a_run_past_the_last_entry_counts_what_it_replaced_even_against_the_rule(tmp_path: Path) -> None:
    """A run of adds past the ledger's last entry skips the look for entries written again (the write cache holds
    none of its keys); should one be there after all, the byte count is counted again, not thrown off."""
    storage = LedgerStorage([tmp_path])
    storage.open()
    storage.put_entries(0, [(4, i, i - 1) for i in range(3)], [b"a" * 10] * 3)
    assert storage.write_cache_bytes == 30
    storage.put_entries(0, [(4, i, i - 1) for i in range(3, 6)], [b"b" * 7] * 3)  # the rule's usual case
    assert storage.write_cache_bytes == 51
    storage._write_cache[cache_key(0, 4, 7)] = b"stale" * 3  # what the rule says cannot be: past last entry 5
    storage._write_cache_bytes += 15
    storage.put_entries(0, [(4, i, i - 1) for i in range(6, 9)], [b"c" * 4] * 3)
    assert storage.write_cache_bytes == sum(map(len, storage._write_cache.values())) == 51 + 12
    assert storage.get_entry(0, 4, 7) == b"cccc" and storage.ledger(0, 4).last_entry == 8  # type: ignore[union-attr]
    storage.close()


def test_storage_delete_ledger_removes_index_rows(tmp_path: Path) -> None:
    storage = LedgerStorage([tmp_path])
    storage.open()
    for lg in (1, 2):
        for i in range(5):
            storage.put_entry(0, lg, i, -1, entry(lg, i, -1))
    storage.checkpoint(JournalPosition(1, 16))
    storage.put_entry(0, 1, 5, -1, entry(1, 5, -1))
    storage.delete_ledger(0, 1)
    with pytest.raises(NoSuchLedgerError):
        storage.get_entry(0, 1, 0)
    storage.checkpoint(JournalPosition(1, 32))
    storage.close()
    again = LedgerStorage([tmp_path])
    again.open()
    assert again.ledgers() == [(0, 2)]
    assert again.entry_ids(0, 2) == [0, 1, 2, 3, 4]
    again.close()
    env = lmdb.open(str(tmp_path / "current" / "index"), max_dbs=4, readonly=True, lock=False)
    with env.begin(db=env.open_db(b"index", create=False)) as txn:
        keys = [struct.unpack(">qqq", k)[1] for k, _ in txn.cursor()]
    env.close()
    assert keys == [2] * 5


def test_storage_corrupt_index_is_a_typed_error(tmp_path: Path) -> None:
    storage = LedgerStorage([tmp_path])
    storage.open()
    for i in range(3):
        storage.put_entry(0, 5, i, -1, entry(5, i, -1, b"abc"))
    storage.checkpoint(JournalPosition(1, 16))
    directory = storage._dirs[0]
    with directory.env.begin(write=True, db=directory.index_db) as txn:
        txn.put(struct.pack(">qqq", 0, 5, 1), b"garbage")  # wrong size
        loc = txn.get(struct.pack(">qqq", 0, 5, 0))
        txn.put(struct.pack(">qqq", 0, 5, 2), loc)  # points at entry 0's record
    directory.refresh()
    storage._read_cache.clear()
    with pytest.raises(BookieIOError):
        storage.get_entry(0, 5, 1)
    with pytest.raises(BookieIOError):
        storage.get_entry(0, 5, 2)
    assert storage.get_entry(0, 5, 0).endswith(b"abc")
    with directory.env.begin(write=True, db=directory.ledgers_db) as txn:
        txn.put(struct.pack(">qq", 0, 5), b"\x09bad")
    storage.close()
    with pytest.raises(BookieIOError):
        LedgerStorage([tmp_path]).open()


def test_ledger_info_roundtrip() -> None:
    info = LedgerInfo(master_key=b"", fenced=True, explicit_lac=b"\1" * 24, lac=12, last_entry=13)
    assert LedgerInfo.unpack(info.pack()) == info
    assert LedgerInfo.unpack(LedgerInfo().pack()) == LedgerInfo()


# -- bookie core: journal + storage together ------------------------------------------------


def make_conf(tmp_path: Path, **kw: object) -> BookieConfig:
    values: dict[str, object] = {
        "journalDirectories": str(tmp_path / "journal"),
        "ledgerDirectories": str(tmp_path / "ledgers"),
        "flushInterval": 3600000,
    }
    values.update(kw)
    return BookieConfig.from_mapping(values)


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_bookie_replays_journal_after_crash(tmp_path: Path) -> None:
    async def write_then_crash() -> None:
        bookie = Bookie(make_conf(tmp_path))
        await bookie.start()
        futs = [bookie.add_entry(0, 9, i, i - 1, entry(9, i, i - 1, b"e%d" % i), KEY) for i in range(100)]
        await asyncio.gather(*futs)
        await bookie.fence(0, 9, KEY)
        await bookie.write_lac(0, 9, struct.pack(">qq", 9, 150) + b"dg", KEY, 150)
        # Simulated crash: the journal thread stops, nothing is checkpointed, files stay open.
        assert bookie.journal is not None
        bookie.journal.close()
        bookie._checkpoint_task.cancel()  # type: ignore[union-attr]
        bookie.storage.close()  # drops the write cache: LMDB refuses a second open in one process

    async def restart() -> None:
        bookie = Bookie(make_conf(tmp_path))
        await bookie.start()
        try:
            assert [bookie.read_entry(0, 9, i)[-3:].lstrip(b"\0") for i in (0, 57, 99)] == [b"e0", b"e57", b"e99"]
            assert bookie.read_entry(0, 9, -1).endswith(b"e99")
            assert bookie.last_add_confirmed(0, 9) == 150
            info = bookie.storage.ledger(0, 9)
            assert info is not None and info.fenced and info.master_key == KEY
            with pytest.raises(LedgerFencedError):
                bookie.add_entry(0, 9, 100, 99, entry(9, 100, 99), KEY)
            await bookie.add_entry(0, 9, 100, 99, entry(9, 100, 99, b"rec"), KEY, recovery=True)
            with pytest.raises(UnauthorizedAccessError):
                bookie.fence(0, 9, OTHER_KEY)
        finally:
            await bookie.stop()

    run(write_then_crash())
    run(restart())
    # A clean stop checkpointed everything: the next start has nothing to replay.
    journal_dir = tmp_path / "journal" / "current"
    assert len(journal_files(journal_dir)) == 1

    async def third() -> None:
        bookie = Bookie(make_conf(tmp_path))
        await bookie.start()
        try:
            assert bookie.read_entry(0, 9, 100).endswith(b"rec")
            assert bookie.entry_ids(0, 9) == list(range(101))
        finally:
            await bookie.stop()

    run(third())


def test_a_checkpoint_after_now_waits_out_the_running_one_and_commits_what_came_after_its_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GC deletes a ledger while a periodic checkpoint is writing (its snapshot taken before the delete), then asks
    for a checkpoint: returning with the running one would leave the delete uncommitted when the GC looks for the
    entry logs it emptied.  ``checkpoint_after_now`` waits for it and runs one that commits the delete."""

    async def scenario() -> None:
        bookie = Bookie(make_conf(tmp_path))
        await bookie.start()
        try:
            await bookie.add_entry(0, 9, 0, -1, entry(9, 0, -1, b"doomed"), KEY)
            writing, release = threading.Event(), threading.Event()
            real_write = bookie.storage.write_checkpoint

            def slow_write(snapshot: Any) -> None:
                writing.set()
                assert release.wait(10)
                real_write(snapshot)

            monkeypatch.setattr(bookie.storage, "write_checkpoint", slow_write)
            running = asyncio.ensure_future(bookie.checkpoint())
            assert await asyncio.get_running_loop().run_in_executor(None, writing.wait, 10)
            monkeypatch.undo()  # the next checkpoint writes at once
            bookie.delete_ledger(0, 9)
            after = asyncio.ensure_future(bookie.checkpoint_after_now())
            await asyncio.sleep(0.05)
            assert not after.done()  # it waits for the running one
            release.set()
            await asyncio.gather(running, after)
            assert not bookie.storage._pending_deletes  # committed by the second checkpoint: no index row left
            with pytest.raises(NoSuchEntryError):
                bookie.storage._read_from_disk(cache_key(0, 9, 0), own_transaction=True)
        finally:
            await bookie.stop()

    run(scenario())


def test_a_checkpoint_that_keeps_failing_is_retried_with_back_off_and_its_traceback_logged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The ledger disk refuses every checkpoint for 3 s while the write cache is full (flushInterval 0.5 s): the
    bookie is read-only, the checkpoint is tried again after 0.1 s, 0.2 s, 0.4 s, then every 0.5 s (the flush
    interval), not at every 100 ms tick of the loop (30 tries, each logging a traceback, before this rule); the
    traceback is logged once (asyncio's "never retrieved" included), then a count at most once per interval (made
    0.5 s here), and once the disk takes writes again the next try stores the entries, says so in one line with
    the count, and the bookie takes adds again."""
    monkeypatch.setattr(checkpoints_module, "CHECKPOINT_FAILURE_LOG_INTERVAL_S", 0.5)
    caplog.set_level(logging.INFO)

    async def scenario() -> None:
        bookie = Bookie(make_conf(tmp_path, dbStorage_writeCacheMaxSizeMb=1, flushInterval=500))
        await bookie.start()
        try:
            real_write = bookie.storage.write_checkpoint
            tries: list[float] = []
            disk_full = True

            def write(snapshot: Any) -> None:
                tries.append(time.monotonic())
                if disk_full:
                    raise BookieIOError("entry log append failed", error="EFBIG")
                real_write(snapshot)

            monkeypatch.setattr(bookie.storage, "write_checkpoint", write)
            payload = b"p" * 64 * 1024
            eid = 0
            while not bookie.storage.needs_flush:  # the add that fills the cache starts a checkpoint: it fails
                await bookie.add_entry(0, 1, eid, eid - 1, entry(1, eid, eid - 1, payload), KEY)
                eid += 1
            await asyncio.sleep(3.0)
            assert bookie.readonly and bookie.storage.needs_flush
            window = [t for t in tries if t - tries[0] < 3.0]
            assert 6 <= len(window) <= 12, [round(t - tries[0], 2) for t in tries]
            gaps = [b - a for a, b in zip(tries, tries[1:])]
            assert all(0.45 <= gap <= 0.75 for gap in gaps[-3:]), gaps  # the back-off reached the flush interval
            failed = len(tries)
            disk_full = False
            for _ in range(60):  # the next try comes within the flush interval
                if not bookie.readonly:
                    break
                await asyncio.sleep(0.1)
            assert not bookie.readonly and not bookie.storage.needs_flush and len(tries) == failed + 1
            await bookie.add_entry(0, 1, eid, eid - 1, entry(1, eid, eid - 1, payload), KEY)
            assert bookie.read_entry(0, 1, 0) == entry(1, 0, -1, payload)
        finally:
            await bookie.stop()
        tracebacks = [r for r in caplog.records if r.exc_info]
        assert len(tracebacks) == 1 and isinstance(tracebacks[0].exc_info[1], BookieIOError)  # type: ignore[index]
        counts = [r for r in caplog.records if r.levelno == logging.WARNING and "keep failing" in r.getMessage()]
        assert 2 <= len(counts) <= 6 and all(b.created - a.created >= 0.45 for a, b in zip(counts, counts[1:]))
        counted = [r.failed_checkpoints for r in counts]  # type: ignore[attr-defined]
        assert counted == sorted(set(counted))  # each says how many failed in a row so far
        back = [r for r in caplog.records if "succeeded again" in r.getMessage()]
        assert len(back) == 1 and back[0].failed_checkpoints == failed  # type: ignore[attr-defined]

    run(scenario())


def test_bookie_rules_readonly_key_fence_and_long_poll(tmp_path: Path) -> None:
    async def body() -> None:
        bookie = Bookie(make_conf(tmp_path, journalSyncData="false"))
        await bookie.start()
        try:
            await bookie.add_entry(0, 1, 0, -1, entry(1, 0, -1), KEY)
            with pytest.raises(UnauthorizedAccessError):
                bookie.add_entry(0, 1, 1, 0, entry(1, 1, 0), OTHER_KEY)
            states: list[bool] = []
            bookie.on_state_change = states.append
            bookie.set_readonly(True)
            with pytest.raises(WriteOnReadOnlyBookieError):
                bookie.add_entry(0, 1, 1, 0, entry(1, 1, 0), KEY)
            # Recovery writes (high priority) still go through an admin-forced read-only bookie.
            await bookie.add_entry(0, 1, 1, 0, entry(1, 1, 0), KEY, recovery=True, high_priority=True)
            bookie.set_readonly(False)
            assert states == [True, False]

            waiter = asyncio.create_task(bookie.wait_for_lac(0, 1, 0, 5000))
            await asyncio.sleep(0.05)
            assert not waiter.done()
            await bookie.add_entry(0, 1, 2, 1, entry(1, 2, 1), KEY)
            assert await asyncio.wait_for(waiter, 2) is True
            assert await bookie.wait_for_lac(0, 1, 5, 50) is False
            with pytest.raises(NoSuchLedgerError):
                await bookie.wait_for_lac(0, 404, 0, 10)
            await bookie.force_ledger()
            lac = bookie.read_lac(0, 1)
            assert lac.explicit_lac is None and lac.last_entry is not None
            with pytest.raises(NoSuchLedgerError):
                bookie.read_lac(0, 2)
            await bookie.write_lac(0, 3, struct.pack(">qq", 3, 0) + b"d", KEY, 0)
            assert bookie.read_lac(0, 3) == ReadLacResult(struct.pack(">qq", 3, 0) + b"d", None)
            await bookie.checkpoint()
            assert bookie.read_entry(0, 1, 2) == entry(1, 2, 1)
        finally:
            await bookie.stop()

    run(body())


def test_conf_file_parsing(tmp_path: Path) -> None:
    text = "# comment\nbookiePort=3999\njournalDirectories=/a, /b\nledgerDirectories : /c\n" \
           "journalSyncData=false\nbookieId=my-bookie\nsomeJavaOnlyKey=1\n"
    assert parse_conf_text(text)["ledgerDirectories"] == "/c"
    path = tmp_path / "bk.conf"
    path.write_text(text)
    conf = load_conf(path, {"bookiePort": 4000, "httpServerPort": None})
    assert conf.bookiePort == 4000 and conf.journalDirectories == ["/a", "/b"]
    assert conf.ledgerDirectories == ["/c"] and conf.journalSyncData is False
    assert conf.bookie_id() == "my-bookie" and conf.extra == {"someJavaOnlyKey": "1"}
    conf2 = BookieConfig.from_mapping({"advertisedAddress": "10.0.0.1", "bookiePort": "3181"})
    assert conf2.bookie_id() == "10.0.0.1:3181"
    with pytest.raises(ValueError):
        BookieConfig.from_mapping({"bookiePort": "notanumber"})
    assert os.path.basename(str(conf.ledger_paths[0])) == "c"


def test_storage_get_range_from_disk_and_caches(tmp_path: Path) -> None:
    storage = LedgerStorage([tmp_path], read_cache_max_bytes=0)
    storage.open()
    for i in list(range(0, 6)) + list(range(7, 10)):  # a gap at 6
        storage.put_entry(0, 4, i, i - 1, entry(4, i, i - 1, b"r" * 100))  # 140 bytes each
    storage.checkpoint(JournalPosition(1, 16))
    storage.put_entry(0, 4, 10, 9, entry(4, 10, 9, b"r" * 100))  # still in the write cache
    assert [struct.unpack_from(">q", e, 8)[0] for e in storage.get_range(0, 4, 0, 100, 1 << 20)] == list(range(6))
    assert len(storage.get_range(0, 4, 0, 3, 1 << 20)) == 3
    assert len(storage.get_range(0, 4, 0, 100, 3 * 144)) == 3  # 4 + 140 per entry
    assert len(storage.get_range(0, 4, 0, 100, 1)) == 1  # the first entry always
    assert [struct.unpack_from(">q", e, 8)[0] for e in storage.get_range(0, 4, 8, 100, 1 << 20)] == [8, 9, 10]
    with pytest.raises(NoSuchEntryError):
        storage.get_range(0, 4, 6, 10, 1 << 20)
    with pytest.raises(NoSuchLedgerError):
        storage.get_range(0, 5, 0, 10, 1 << 20)
    # A damaged index row in the middle ends the range there; as the first entry it is an error.
    directory = storage._dirs[0]
    with directory.env.begin(write=True, db=directory.index_db) as txn:
        txn.put(struct.pack(">qqq", 0, 4, 2), b"bad")
    directory.refresh()
    assert len(storage.get_range(0, 4, 0, 100, 1 << 20)) == 2
    with pytest.raises(BookieIOError):
        storage.get_range(0, 4, 2, 100, 1 << 20)
    storage.close()


def test_storage_reclaims_entry_logs_of_deleted_ledgers(tmp_path: Path) -> None:
    storage = LedgerStorage([tmp_path], entry_log_size_limit=2000)
    storage.open()
    for ledger in (1, 2):  # one checkpoint (and so one entry log) per ledger
        for i in range(10):
            storage.put_entry(0, ledger, i, i - 1, entry(ledger, i, i - 1, b"z" * 200))
        storage.checkpoint(JournalPosition(1, 16))
    storage.put_entry(0, 3, 0, -1, entry(3, 0, -1, b"in the current log"))
    storage.checkpoint(JournalPosition(1, 32))
    logs_dir = tmp_path / "current" / "entrylogs"
    before = sorted(os.listdir(logs_dir))
    assert len(before) >= 3
    assert storage.reclaim_entry_logs() == []  # everything is live
    storage.delete_ledger(0, 1)
    storage.checkpoint(JournalPosition(1, 48))
    removed = storage.reclaim_entry_logs()
    assert removed and all(not p.exists() for p in removed)
    assert storage.get_entry(0, 2, 9).endswith(b"z" * 200)
    assert storage.get_entry(0, 3, 0).endswith(b"in the current log")
    assert sorted(os.listdir(logs_dir)) == sorted(set(before) - {p.name for p in removed})
    storage.close()


def test_a_log_a_running_checkpoint_wrote_and_rolled_past_is_not_reclaimed_before_its_rows_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint in pieces fills log 1, rolls to log 2 and appends there, its index rows not committed yet; a
    reclaim running meanwhile (the GC's, on another thread) sees log 1 behind the current log and in no index row.
    It must keep it: the rows the checkpoint then commits point into it."""
    storage = LedgerStorage([tmp_path], entry_log_size_limit=4096)
    storage.open()
    written = {i: entry(1, i, i - 1, b"p" * 1000) for i in range(15)}
    for i, data in written.items():
        storage.put_entry(0, 1, i, i - 1, data)
    monkeypatch.setattr(storage_module, "CHECKPOINT_PIECE_ENTRIES", 5)  # 5 KiB a piece: one log each
    real_log_records = storage_module.log_records
    calls: list[int] = []
    two_appended, release = threading.Event(), threading.Event()

    def pausing_log_records(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:  # pieces 1 and 2 are appended, to logs 1 and 2
            two_appended.set()
            assert release.wait(10)
        return real_log_records(*args)

    monkeypatch.setattr(storage_module, "log_records", pausing_log_records)
    snapshot = storage.begin_checkpoint(JournalPosition(1, 16))
    checkpoint = threading.Thread(target=storage.write_checkpoint, args=(snapshot,))
    checkpoint.start()
    try:
        assert two_appended.wait(10)
        removed = storage.reclaim_entry_logs()
    finally:
        release.set()
        checkpoint.join(10)
    storage.end_checkpoint(snapshot, True)
    assert removed == []
    assert [storage.get_entry(0, 1, i) for i in range(15)] == [written[i] for i in range(15)]
    storage.close()


def test_journal_deferred_sync_completes_before_the_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bookie_server.journal as journal_module

    release = threading.Event()
    syncing = threading.Event()
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        syncing.set()
        assert release.wait(10)
        real_fdatasync(fd)

    journal = Journal(tmp_path)
    journal.open()
    monkeypatch.setattr(journal_module.os, "fdatasync", slow_fdatasync)
    order: list[str] = []
    early_done = threading.Event()
    journal.submit_many(
        [encode_record(RecordType.FENCE, 0, 1), encode_record(RecordType.FENCE, 0, 2)],
        [lambda e: order.append("synced")],
        [lambda e: (order.append("written"), early_done.set())],
    )
    assert early_done.wait(5) and syncing.wait(5)
    assert order == ["written"]  # acknowledged while the sync is still running
    release.set()
    journal.close()
    assert order == ["written", "synced"]


def test_records_queued_when_a_journal_sync_fails_are_refused_not_written_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed sync the kernel may drop the batch's pages and still report the next sync as done: a batch
    queued behind the failed one, written and synced after it, would be acknowledged past a hole that replay stops
    at.  It gets the failure instead, and the file ends where the failed batch ends."""
    journal = Journal(tmp_path)
    journal.open()
    real_fdatasync = os.fdatasync
    outcomes: list[BaseException | None] = []
    done = threading.Event()

    def failing_fdatasync(fd: int) -> None:
        monkeypatch.setattr(journal_module.os, "fdatasync", real_fdatasync)  # the syncs after this one succeed
        journal.submit(encode_record(RecordType.FENCE, 0, 2), lambda e: (outcomes.append(e), done.set()))
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(journal_module.os, "fdatasync", failing_fdatasync)
    journal.submit(encode_record(RecordType.FENCE, 0, 1), outcomes.append)
    assert done.wait(5)
    journal.close()
    assert [type(e) for e in outcomes] == [BookieIOError, BookieIOError]
    assert [r.ledger_id for _, r in iter_records(journal_files(tmp_path)[-1][1])] == [1]


class _DiskThatFails:
    """The storage module's ``os``, except that chosen calls fail the way a full disk makes them fail."""

    def __init__(self, *, write_halfway: int = 0, open_logs: int = 0, writes_first: int = 0) -> None:
        self.write_halfway = write_halfway  # appends that write half their bytes, then hit ENOSPC
        self.open_logs = open_logs  # entry-log creations that fail
        self.writes_first = writes_first  # appends (over 64 bytes) that succeed before those
        self._failing_write = False

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self._failing_write:
            self._failing_write = False
            raise OSError(errno.ENOSPC, "No space left on device")
        if self.writes_first and len(data) > 64:
            self.writes_first -= 1
        elif self.write_halfway and len(data) > 64:
            self.write_halfway -= 1
            self._failing_write = True
            return os.write(fd, bytes(data)[: len(data) // 2])
        return os.write(fd, data)

    def open(self, path: object, flags: int, *args: int) -> int:
        if self.open_logs and str(path).endswith(".log") and flags & os.O_CREAT:
            self.open_logs -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.open(path, flags, *args)  # type: ignore[arg-type]


def _put_range(storage: LedgerStorage, first: int, last: int) -> dict[int, bytes]:
    written = {}
    for i in range(first, last):
        written[i] = entry(1, i, i - 1, b"entry %d " % i * 20)
        storage.put_entry(0, 1, i, i - 1, written[i])
    return written


@pytest.mark.parametrize("piece", [None, 7], ids=["one piece", "the third of three pieces"])
def test_a_checkpoint_retried_after_a_write_that_stopped_halfway_indexes_the_right_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int | None
) -> None:
    """A full disk cut a checkpoint's append in the middle: the half-written records stay in the log, unindexed,
    and so do the pieces appended before it (docs/bookie.md, "Checkpoints": no index row is written before the
    last piece). The retry must not count offsets from where the failed append began (the file grew since): every
    entry reads back as written, before and after a restart."""
    storage = LedgerStorage([tmp_path])
    storage.open()
    storage.set_master_key(0, 1, KEY)
    written = _put_range(storage, 0, 10)
    storage.checkpoint(JournalPosition(1, 10))
    written |= _put_range(storage, 10, 30)
    disk = _DiskThatFails(write_halfway=1, writes_first=0 if piece is None else 2)
    monkeypatch.setattr(entry_logs_module, "os", disk)
    monkeypatch.setattr(journal_module, "os", disk)  # the one write loop (write_all) lives there
    if piece is not None:
        monkeypatch.setattr(storage_module, "CHECKPOINT_PIECE_ENTRIES", piece)  # 20 entries: 7, 7 and 6
    with pytest.raises(BookieIOError):
        storage.checkpoint(JournalPosition(1, 30))
    assert disk.writes_first == 0 and disk.write_halfway == 0  # it failed where it was meant to
    with pytest.raises(NoSuchEntryError):
        storage._read_from_disk(cache_key(0, 1, 10), own_transaction=True)  # nothing of it indexed
    assert storage.write_cache_bytes > 0  # the entries went back to the write cache
    monkeypatch.undo()
    storage.checkpoint(JournalPosition(1, 30))
    assert [storage.get_entry(0, 1, i) for i in range(30)] == [written[i] for i in range(30)]
    storage.close()
    again = LedgerStorage([tmp_path])
    again.open()
    assert [again.get_entry(0, 1, i) for i in range(30)] == [written[i] for i in range(30)]
    again.close()


def test_a_checkpoint_retried_after_the_next_entry_log_could_not_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry log was full and the next one could not be created: nothing may be written through the old,
    closed descriptor, and the retry opens the next log and indexes every entry right."""
    storage = LedgerStorage([tmp_path], entry_log_size_limit=2048)
    storage.open()
    storage.set_master_key(0, 1, KEY)
    written = _put_range(storage, 0, 10)
    storage.checkpoint(JournalPosition(1, 10))
    written |= _put_range(storage, 10, 20)
    monkeypatch.setattr(entry_logs_module, "os", _DiskThatFails(open_logs=1))
    with pytest.raises(BookieIOError):
        storage.checkpoint(JournalPosition(1, 20))
    monkeypatch.undo()
    storage.checkpoint(JournalPosition(1, 20))
    storage.close()
    again = LedgerStorage([tmp_path])
    again.open()
    assert [again.get_entry(0, 1, i) for i in range(20)] == [written[i] for i in range(20)]
    again.close()


@pytest.mark.parametrize("checkpoint_fails", [True, False], ids=["failed", "ok"])
def test_a_ledger_written_again_while_a_failed_checkpoint_held_its_delete_keeps_its_new_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpoint_fails: bool
) -> None:
    """Ledger 1 is deleted; the checkpoint that carries the delete fails after a writer (a zombie writing to a
    ledger id after its garbage collection) stored new entries under the same id. The failed checkpoint puts the
    delete back; the next one must delete the old life's rows only: the new entries are acknowledged and read
    back, before and after a restart, exactly as when the checkpoint had not failed."""
    storage = LedgerStorage([tmp_path])
    storage.open()
    storage.set_master_key(0, 1, KEY)
    for i in range(5):
        storage.put_entry(0, 1, i, i - 1, entry(1, i, i - 1, b"old %d " % i * 20))
    storage.put_entry(0, 2, 0, -1, entry(2, 0, -1, b"other " * 40))
    storage.checkpoint(JournalPosition(1, 10))
    storage.delete_ledger(0, 1)
    storage.put_entry(0, 2, 1, 0, entry(2, 1, 0, b"other " * 40))  # something for the checkpoint to write
    snapshot = storage.begin_checkpoint(JournalPosition(1, 20))
    assert (0, 1) in snapshot.deletes
    new = {i: entry(1, i, i - 1, b"new %d " % i * 20) for i in range(3)}
    storage.set_master_key(0, 1, OTHER_KEY)
    for i, data in new.items():  # while the checkpoint's thread writes
        storage.put_entry(0, 1, i, i - 1, data)
    if checkpoint_fails:
        disk = _DiskThatFails(write_halfway=1)
        monkeypatch.setattr(entry_logs_module, "os", disk)
        monkeypatch.setattr(journal_module, "os", disk)
        with pytest.raises(BookieIOError):
            storage.write_checkpoint(snapshot)
        monkeypatch.undo()
    else:
        storage.write_checkpoint(snapshot)
    storage.end_checkpoint(snapshot, ok=not checkpoint_fails)
    storage.checkpoint(JournalPosition(1, 30))
    for store in (storage, None):
        if store is None:
            storage.close()
            store = LedgerStorage([tmp_path])
            store.open()
        assert store.entry_ids(0, 1) == [0, 1, 2]  # the old life's entries 3 and 4 are gone with its delete
        assert [store.get_entry(0, 1, i) for i in range(3)] == [new[i] for i in range(3)]
        assert store.ledger(0, 1).master_key == OTHER_KEY
        assert store.entry_ids(0, 2) == [0, 1]
    store.close()


def test_a_crash_before_a_delete_reaches_a_checkpoint_brings_the_ledger_back_until_deleted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/bookie.md, "Checkpoints": deletes are not journaled. Ledger 1 is deleted, the checkpoint that carries the
    delete fails, and the bookie stops before another one (close() runs no checkpoint: a crash, as far as the index
    knows). After the restart ledger 1 is back with the entries of the last checkpoint; the next garbage-collection
    round, finding its metadata still gone (bookie_server/gc.py), deletes it again, and that delete lasts."""
    storage = LedgerStorage([tmp_path])
    storage.open()
    storage.set_master_key(0, 1, KEY)
    old = {i: entry(1, i, i - 1, b"old %d " % i * 20) for i in range(5)}
    for i, data in old.items():
        storage.put_entry(0, 1, i, i - 1, data)
    storage.put_entry(0, 2, 0, -1, entry(2, 0, -1, b"other " * 40))
    storage.checkpoint(JournalPosition(1, 10))
    storage.delete_ledger(0, 1)
    storage.put_entry(0, 2, 1, 0, entry(2, 1, 0, b"other " * 40))  # something for the checkpoint to write
    disk = _DiskThatFails(write_halfway=1)
    monkeypatch.setattr(entry_logs_module, "os", disk)
    monkeypatch.setattr(journal_module, "os", disk)
    with pytest.raises(BookieIOError):
        storage.checkpoint(JournalPosition(1, 20))
    monkeypatch.undo()
    assert storage.ledger(0, 1) is None  # deleted in memory; the delete waits for the next checkpoint
    storage.close()
    again = LedgerStorage([tmp_path])
    again.open()
    assert again.entry_ids(0, 1) == [0, 1, 2, 3, 4]
    assert [again.get_entry(0, 1, i) for i in range(5)] == [old[i] for i in range(5)]
    again.delete_ledger(0, 1)  # what the garbage collector's next round does, then its checkpoint
    again.checkpoint(JournalPosition(1, 30))
    again.close()
    last = LedgerStorage([tmp_path])
    last.open()
    assert last.ledger(0, 1) is None
    with pytest.raises(NoSuchLedgerError):
        last.entry_ids(0, 1)
    assert last.entry_ids(0, 2) == [0]  # its second entry was in the failed checkpoint only (not journaled here)
    last.close()


def test_a_runs_job_reads_what_single_reads_read(tmp_path: Path) -> None:
    """``read_run_cold`` (docs/bookie.md, "Runs of single reads"): a striped ledger's ids on this bookie (two of
    every three entries stored, the run asking every third), ids of a second ledger of another directory in the
    middle, a missing entry and one past the end, each read's bytes or error in order, the same bytes as
    ``get_entry``; a record walked to and one found through the index alike; the budget ends the job after the
    read that reaches it (the first always), and nothing is cached."""
    storage = LedgerStorage([tmp_path / "a", tmp_path / "b"], read_cache_max_bytes=1 << 20)
    storage.open()
    stored = [i for i in range(300) if i % 3 != 1]  # what a bookie of a 3/2 ensemble holds of the first 300
    for i in stored:
        storage.put_entry(0, 4, i, i - 1, entry(4, i, i - 1, b"s" * (50 + i % 7)))
    for i in range(5):
        storage.put_entry(0, 5, i, i - 1, entry(5, i, i - 1, b"t" * 80))
    storage.checkpoint(JournalPosition(1, 16))
    assert storage._dir_for(0, 4) is not storage._dir_for(0, 5)  # two index transactions in one job
    reads = [(4, i) for i in range(0, 150, 3)] + [(5, 2), (5, 0)] + [(4, i) for i in range(150, 300, 3)]
    reads += [(4, 1), (4, 400), (4, 297)]  # not stored here, past the end, and after errors again
    found = storage.read_run_cold(0, reads, 1 << 30)
    assert len(found) == len(reads) and not storage._read_cache
    for (ledger_id, entry_id), data in zip(reads, found):
        if ledger_id == 4 and entry_id in (1, 400):
            assert isinstance(data, NoSuchEntryError) and data.context["entry_id"] == entry_id
        else:
            assert data == storage.get_entry(0, ledger_id, entry_id)
    sizes = [len(data) for data in found if isinstance(data, bytes)]
    budget = sum(sizes[:10]) - 1
    assert storage.read_run_cold(0, reads, budget) == found[:10]  # the tenth reaches the budget
    assert storage.read_run_cold(0, reads, 1) == found[:1]
    assert storage.read_run_cold(0, [], 100) == []
    storage.close()


def test_a_runs_job_walks_the_log_and_asks_the_index_only_past_a_gap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One ledger's entries read in order, every second one: each is found by walking the records after the last
    one read (one index read for the first); a run that jumps past what the chunk holds asks the index again."""
    storage = LedgerStorage([tmp_path], read_cache_max_bytes=1 << 20)
    storage.open()
    for i in range(200):
        storage.put_entry(0, 6, i, i - 1, entry(6, i, i - 1, b"w" * 100))
    storage.checkpoint(JournalPosition(1, 16))
    index_reads: list[bytes] = []
    directory = storage._dirs[0]
    original_begin = directory.env.begin

    class CountingTxn:
        def __init__(self, txn: lmdb.Transaction) -> None:
            self.txn = txn

        def get(self, key: bytes) -> bytes | None:
            index_reads.append(key)
            return self.txn.get(key)

        def abort(self) -> None:
            self.txn.abort()

    monkeypatch.setattr(directory, "env", type("Env", (), {"begin": lambda self, **kw: CountingTxn(original_begin(**kw))})())
    found = storage.read_run_cold(0, [(6, i) for i in range(0, 100, 2)], 1 << 30)
    assert [struct.unpack_from(">q", data, 8)[0] for data in found] == list(range(0, 100, 2))
    assert len(index_reads) == 1
    storage.read_run_cold(0, [(6, 10), (6, 11), (6, 150), (6, 151)], 1 << 30)
    assert len(index_reads) == 3  # 10, then 11 walked to; 150 past the walk's few records, then 151 walked to
    # The walk looks at up to RUN_WALK_RECORDS (4, docs/bookie.md "Runs of single reads") records past the last read:
    # 44 is the 4th after 40, found walking; 49 is the 5th after 44, asked of the index.
    assert storage_reads_module.RUN_WALK_RECORDS == 4
    found = storage.read_run_cold(0, [(6, 40), (6, 44), (6, 49)], 1 << 30)
    assert [struct.unpack_from(">q", data, 8)[0] for data in found] == [40, 44, 49]
    assert [struct.unpack(">qqq", key)[2] for key in index_reads[3:]] == [40, 49]
    monkeypatch.undo()
    storage.close()


def test_a_checkpoint_is_written_in_pieces_and_reads_back_as_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CHECKPOINT_PIECE_ENTRIES (docs/bookie.md, "Checkpoints"): a checkpoint of more entries than a piece, over two
    directories and entry logs small enough to roll between pieces, makes one ``log_records`` call per piece, in
    key order, none larger than a piece; every entry reads back as written, from this storage and after a
    reopen, and every log is within its size limit (they rolled between pieces)."""
    monkeypatch.setattr(storage_module, "CHECKPOINT_PIECE_ENTRIES", 7)
    calls: list[list[int]] = []
    original = storage_module.log_records

    def counted(keys: list[int], entries: dict[int, bytes], place: Any) -> Any:
        calls.append(list(keys))
        return original(keys, entries, place)

    monkeypatch.setattr(storage_module, "log_records", counted)
    dirs = [tmp_path / "a", tmp_path / "b"]
    storage = LedgerStorage(dirs, entry_log_size_limit=4096)
    storage.open()
    written = {}
    for ledger_id in (3, 4):
        for i in range(50):
            written[(ledger_id, i)] = entry(ledger_id, i, i - 1, bytes([i]) * (100 + i))
            storage.put_entry(0, ledger_id, i, i - 1, written[(ledger_id, i)])
    storage.checkpoint(JournalPosition(1, 16))
    assert len(calls) == 2 * 8 and all(1 <= len(keys) <= 7 for keys in calls)
    for ledger_id in (3, 4):
        mine = [key for keys in calls for key in keys if key_address(key)[1] == ledger_id]
        assert mine == sorted(mine) == [cache_key(0, ledger_id, i) for i in range(50)]
    assert all(storage.get_entry(0, ledger_id, i) == data for (ledger_id, i), data in written.items())
    storage.close()
    again = LedgerStorage(dirs, entry_log_size_limit=4096)
    again.open()
    assert all(again.get_entry(0, ledger_id, i) == data for (ledger_id, i), data in written.items())
    for directory in again._dirs:
        logs = sorted(directory.logs_dir.glob("*.log"))
        assert len(logs) > 2 and all(log.stat().st_size <= 4096 for log in logs)  # rolled between pieces
    again.close()


def test_a_stop_during_a_checkpoint_lets_its_write_finish_before_the_final_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint's write runs on an executor thread: a stop that cancelled the loop's await of it left that
    thread writing the entry log and the index while the stop's final checkpoint wrote them too, with the entries
    of the first handed back to the write cache meanwhile (and the bookie turned read-only by a checkpoint that
    had not failed). The stop now waits for the running checkpoint, then makes the final one: the writes never
    overlap, nothing is logged as failed, and every entry reads back after a restart."""
    caplog.set_level(logging.INFO)
    spans: list[tuple[str, float, float]] = []

    async def scenario() -> None:
        bookie = Bookie(make_conf(tmp_path, flushInterval=200))
        await bookie.start()
        real_write = bookie.storage.write_checkpoint
        real_checkpoint = bookie.storage.checkpoint
        started = threading.Event()

        def slow_write(snapshot: Any) -> None:
            t0 = time.monotonic()
            if snapshot.entries:
                started.set()
                time.sleep(0.5)  # the slow part of a checkpoint, on its executor thread
            real_write(snapshot)
            spans.append(("write", t0, time.monotonic()))

        def final(mark: Any) -> None:
            t0 = time.monotonic()
            real_checkpoint(mark)
            spans.append(("final", t0, time.monotonic()))

        monkeypatch.setattr(bookie.storage, "write_checkpoint", slow_write)
        monkeypatch.setattr(bookie.storage, "checkpoint", final)
        payload = b"s" * 1024
        for eid in range(50):
            await bookie.add_entry(0, 1, eid, eid - 1, entry(1, eid, eid - 1, payload), KEY)
        while not started.is_set():  # the periodic checkpoint has taken these entries and is writing them
            await asyncio.sleep(0.01)
        await bookie.stop()

    run(scenario())
    writes = [s for s in spans if s[0] == "write" and s[2] - s[1] >= 0.5]
    finals = [s for s in spans if s[0] == "final"]
    assert len(writes) == 1 and len(finals) == 1, spans
    assert writes[0][2] <= finals[0][1], spans  # the running checkpoint's write ended before the final one began
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]

    async def reopened() -> None:
        bookie = Bookie(make_conf(tmp_path, flushInterval=200))
        await bookie.start()
        try:
            for eid in range(50):
                assert bookie.read_entry(0, 1, eid) == entry(1, eid, eid - 1, b"s" * 1024)
        finally:
            await bookie.stop()

    run(reopened())


@pytest.mark.parametrize(("flush_interval_s", "cap"), [(60.0, 5.0), (0.5, 0.5)])
def test_failed_checkpoints_back_off_from_a_tenth_of_a_second_to_five_seconds_or_the_flush_interval(
    flush_interval_s: float, cap: float
) -> None:
    """The waits between tries of a checkpoint that keeps failing double from 0.1 s up to 5 s, or up to
    ``flushInterval`` when that is shorter, and never give up (docs/bookie.md, "Failures between the steps")."""
    attempts = checkpoints_module.checkpoint_retry(flush_interval_s).start()
    waits = [attempts.next_delay(BookieIOError("entry log append failed")) for _ in range(200)]
    assert waits == pytest.approx([min(0.1 * 2**i, cap) for i in range(200)])


def _doc_table_defaults(heading_row: str) -> dict[str, str]:
    """``key -> default`` as docs/bookie.md's table starting with ``heading_row`` states them (a cell naming
    several keys, e.g. ``a`` / ``b``, pairs them with its default cell's values in order)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "bookie.md").read_text(encoding="utf-8")
    lines = text[text.index(heading_row):].splitlines()[2:]
    out: dict[str, str] = {}
    for line in lines:
        if not line.startswith("|"):
            break
        key_cell, default_cell = (cell.strip() for cell in line.strip("|").split("|")[:2])
        keys = [k.strip("`*") for k in re.split(r" / |, ", key_cell)]
        default_cell = re.sub(r"\s*\((Java's|Java: \d+)\)", "", default_cell)  # a remark on Java's value
        values = re.split(r" / |, ", default_cell) if len(keys) > 1 else [default_cell]
        assert len(keys) == len(values), line
        out.update(zip(keys, values))
    return out


def _doc_value(text: str) -> object:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    number, _, unit = text.partition(" ")
    if unit in units:
        return int(number) * units[unit]
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("`/"):
        return [text.strip("`")]
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return float(text) if re.fullmatch(r"\d+\.\d+", text) else text


def test_the_documented_defaults_are_the_bookies() -> None:
    """docs/bookie.md's configuration table and its "Limits" table state each key's default: a bookie built from
    an empty configuration has those values (and a key documented as Java's has Java's name and value)."""
    conf = BookieConfig()
    documented = _doc_table_defaults("| key | default | meaning |")
    limits = _doc_table_defaults("| key | default | bounds | when reached |")
    assert set(documented) & set(limits) == {"dbStorage_writeCacheMaxSizeMb", "nettyMaxFrameSizeBytes"}
    for key in set(documented) & set(limits):
        assert _doc_value(documented[key]) == _doc_value(limits[key]), key
    documented.update(limits)
    special = {
        "bookieId": "`<advertisedAddress>:<bookiePort>`",
        "advertisedAddress": "this host's IP",
        "metadataServiceUri": "unset",
    }
    for key, text in documented.items():
        if key in special:
            assert text == special[key]
            continue
        assert getattr(conf, key) == _doc_value(text), (key, text)
    assert conf.bookieId is None and conf.advertisedAddress is None and conf.metadataServiceUri is None
    assert conf.advertised_host() == socket.gethostbyname(socket.gethostname())
    assert conf.bookie_id() == f"{conf.advertised_host()}:3181"
    # Stated in "Reads" rather than in a table: numReadWorkerThreads 1, dbStorage_readAheadCacheBatchSize 100.
    assert (conf.numReadWorkerThreads, conf.dbStorage_readAheadCacheBatchSize) == (1, 100)


class _ScriptedZk:
    """ZooKeeper as the collector sees it (``exists``, ``get``): a cluster root with a hierarchical LAYOUT, whose
    ledger znodes are present or not per look-up round as the test says; it notes when each round began."""

    def __init__(self, rounds: list[set[str]], *, root: bool = True, fail_in_round: int | None = None) -> None:
        from kazoo.exceptions import ConnectionLoss

        self.rounds, self.root, self.fail_in_round = rounds, root, fail_in_round
        self.round_times: list[float] = []
        self._loss = ConnectionLoss

    def exists(self, path: str, watch: object = None) -> object:
        import time

        if path == "/ledgers":
            self.round_times.append(time.monotonic())
            return object() if self.root else None
        n = len(self.round_times) - 1
        if n == self.fail_in_round:
            raise self._loss()
        return object() if path in self.rounds[min(n, len(self.rounds) - 1)] else None

    def get(self, path: str, watch: object = None) -> tuple[bytes, object]:
        from bkspark.devcluster.zookeeper import HIERARCHICAL_LAYOUT

        assert path == "/ledgers/LAYOUT"
        return HIERARCHICAL_LAYOUT, object()


def test_gc_deletes_a_ledger_only_when_two_look_ups_a_second_apart_miss_it(tmp_path: Path) -> None:
    """docs/bookie.md, "Cluster membership", Garbage collection: a ledger is deleted only when its metadata znode is
    missing in two look-ups a second apart; without the root, or on any ZooKeeper error, nothing is deleted.
    (The paths and the layouts against a real ZooKeeper: tests/integration/test_bookie_gc.py.)"""
    from bookie_server.gc import GarbageCollector

    l5, l6, l7 = "/ledgers/00/0000/L0005", "/ledgers/00/0000/L0006", "/ledgers/00/0000/L0007"

    async def body() -> None:
        bookie = Bookie(make_conf(tmp_path, journalSyncData="false"))
        await bookie.start()
        try:
            for ledger in (5, 6, 7):
                await bookie.add_entry(0, ledger, 0, -1, entry(ledger, 0, -1), KEY)

            async def round_with(zk: _ScriptedZk) -> list[tuple[int, int]]:
                return await GarbageCollector(bookie, zk, "/ledgers").run_once()  # type: ignore[arg-type]

            # No root, or a ZooKeeper error in either look-up: nothing, though 6 and 7 have no metadata.
            assert await round_with(_ScriptedZk([{l5}], root=False)) == []
            assert await round_with(_ScriptedZk([{l5}], fail_in_round=0)) == []
            assert await round_with(_ScriptedZk([{l5}], fail_in_round=1)) == []
            # 6 is missing in the first look-up only (its metadata is there again for the second): kept; 7 in
            # both: deleted, the look-ups a second or more apart.
            zk = _ScriptedZk([{l5}, {l5, l6}])
            assert await round_with(zk) == [(0, 7)]
            assert len(zk.round_times) == 2 and zk.round_times[1] - zk.round_times[0] >= 1.0
            assert sorted(bookie.storage.ledgers()) == [(0, 5), (0, 6)]
            assert await round_with(_ScriptedZk([{l5}])) == [(0, 6)]
            assert bookie.storage.ledgers() == [(0, 5)]
        finally:
            await bookie.stop()

    run(body())


def test_checkpoints_run_every_flush_interval(tmp_path: Path) -> None:
    """docs/bookie.md, configuration table: ``flushInterval`` is the time between checkpoints (write cache to entry
    logs and index): at 200 ms an add leaves the write cache within a second or two on its own; at an hour it stays."""
    import time

    async def stays_cached_for(flush_interval: int, seconds: float) -> bool:
        bookie = Bookie(make_conf(tmp_path / str(flush_interval), journalSyncData="false", flushInterval=flush_interval))
        await bookie.start()
        try:
            await bookie.add_entry(0, 1, 0, -1, entry(1, 0, -1, b"flush me"), KEY)
            mark = bookie.checkpoint_mark
            deadline = time.monotonic() + seconds
            while not bookie.checkpoint_mark > mark and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if not bookie.checkpoint_mark > mark:
                assert bookie.storage.write_cache_bytes > 0
                return True
            assert bookie.storage.write_cache_bytes == 0
            assert bookie.storage.get_entry(0, 1, 0) == entry(1, 0, -1, b"flush me")  # from the entry log now
            return False
        finally:
            await bookie.stop()

    assert run(stays_cached_for(200, 5.0)) is False
    assert run(stays_cached_for(3600000, 1.5)) is True


def test_journal_files_and_ledgers_are_spread_over_the_directories_by_the_documented_rules(tmp_path: Path) -> None:
    """docs/bookie.md, "Architecture": journal file ``n`` is in journal directory ``n % count`` and the journal rolls
    at each checkpoint; a ledger lives in ledger directory ``(scope * 31 + ledger) % n`` (the cookie pins the list, so
    a rule that moved would lose existing data): its records are in that directory's entry logs and no other's."""
    journals = [tmp_path / "j0", tmp_path / "j1"]
    ledgers = [tmp_path / "l0", tmp_path / "l1", tmp_path / "l2"]
    keys = [(0, 1), (0, 2), (0, 3), (0, 4), (2, 1), (5, 7), (1, 30)]

    async def body() -> set[int]:
        bookie = Bookie(make_conf(
            tmp_path, journalSyncData="false",
            journalDirectories=",".join(map(str, journals)), ledgerDirectories=",".join(map(str, ledgers)),
        ))
        await bookie.start()
        seen: set[int] = set()
        try:
            for scope, ledger in keys:
                body = entry(ledger, 0, -1, b"<scope %d ledger %d>" % (scope, ledger))
                await bookie.add_entry(scope, ledger, 0, -1, body, KEY)
                await bookie.checkpoint()
                for index, directory in enumerate(journals):
                    for file_id, _path in journal_module.journal_files(directory / "current"):
                        assert file_id % 2 == index, (file_id, directory)
                        seen.add(file_id)
        finally:
            await bookie.stop()
        return seen

    seen = run(body())
    assert len(seen) >= len(keys)  # a new journal file after every checkpoint
    for scope, ledger in keys:
        payload = b"<scope %d ledger %d>" % (scope, ledger)
        holders = [
            i for i, directory in enumerate(ledgers)
            if any(payload in log.read_bytes() for log in (directory / "current" / "entrylogs").glob("*.log"))
        ]
        assert holders == [(scope * 31 + ledger) % 3], (scope, ledger, holders)


@pytest.mark.parametrize("sync", ["true", "false"])
def test_journal_sync_data_decides_whether_group_commits_are_fdatasynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync: str
) -> None:
    """docs/bookie.md, configuration table: ``journalSyncData`` true fdatasyncs each group commit; false does not
    (only for tests: an acknowledged add may then be lost with the page cache)."""
    synced_by_journal: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        if threading.current_thread().name == "bookie-journal":
            synced_by_journal.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)

    async def body() -> None:
        bookie = Bookie(make_conf(tmp_path, journalSyncData=sync))
        await bookie.start()
        try:
            for eid in range(5):
                await bookie.add_entry(0, 1, eid, eid - 1, entry(1, eid, eid - 1), KEY)
        finally:
            await bookie.stop()

    run(body())
    assert (len(synced_by_journal) >= 5) if sync == "true" else synced_by_journal == []


def test_journal_and_entry_logs_roll_at_their_configured_sizes(tmp_path: Path) -> None:
    """docs/bookie.md, configuration table: ``journalMaxSizeMB`` is the journal file rotation size and ``logSizeLimit``
    the entry log rotation size, through a bookie's configuration (the storage's own tests set the sizes directly).
    An append larger than the limit goes whole into a log of its own, so the second part checkpoints 30 KB at a time."""
    payload = b"r" * 10_000

    async def body() -> None:
        bookie = Bookie(make_conf(tmp_path, journalSyncData="false", journalMaxSizeMB=1, logSizeLimit=64 * 1024))
        await bookie.start()
        try:
            for eid in range(300):  # 3 MB of journal records, no checkpoint
                await bookie.add_entry(0, 1, eid, eid - 1, entry(1, eid, eid - 1, payload), KEY)
            journal_sizes = [p.stat().st_size for _, p in journal_module.journal_files(tmp_path / "journal" / "current")]
            assert len(journal_sizes) >= 3 and all(size <= (1 << 20) + 20_000 for size in journal_sizes)
            await bookie.checkpoint()
            for eid in range(60):
                await bookie.add_entry(0, 2, eid, eid - 1, entry(2, eid, eid - 1, payload), KEY)
                if eid % 3 == 2:
                    await bookie.checkpoint()
        finally:
            await bookie.stop()

    run(body())
    logs = sorted((tmp_path / "ledgers" / "current" / "entrylogs").glob("*.log"))[1:]  # after the 3 MB one
    assert len(logs) >= 8 and all(log.stat().st_size <= 64 * 1024 for log in logs)


def test_a_cancelled_checkpoint_ends_its_write_before_it_ends_and_keeps_what_it_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint's task cancelled while its write runs on the executor thread (as the app's stop cancels a GC
    round's checkpoint): the task ends only once the write has, cancelled, with the snapshot released as stored (the
    write cache empty, the bookie writable, nothing logged as failed), and the next checkpoint starts after it."""
    caplog.set_level(logging.INFO)

    async def scenario() -> None:
        bookie = Bookie(make_conf(tmp_path, flushInterval=600000))
        await bookie.start()
        try:
            real_write = bookie.storage.write_checkpoint
            done: list[float] = []

            def slow_write(snapshot: Any) -> None:
                time.sleep(0.5)
                real_write(snapshot)
                done.append(time.monotonic())

            monkeypatch.setattr(bookie.storage, "write_checkpoint", slow_write)
            for eid in range(20):
                await bookie.add_entry(0, 1, eid, eid - 1, entry(1, eid, eid - 1, b"c" * 512), KEY)
            task = asyncio.get_running_loop().create_task(bookie.checkpoint())
            await asyncio.sleep(0.1)  # the write is running
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            ended = time.monotonic()
            assert done and done[0] <= ended  # the write ended first
            assert bookie.storage.write_cache_bytes == 0 and not bookie.readonly
            await bookie.checkpoint()  # no "already running": the first one is over
        finally:
            await bookie.stop()
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]

    run(scenario())
