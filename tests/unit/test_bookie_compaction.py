"""Entry-log compaction of the Python bookie's storage (docs/bookie.md, "Compaction"): live entries of a log under
the threshold copied to the current log, their index rows moved, the emptied log removed by the reclaim; a failure
between the steps leaves every entry readable; when a GC round compacts (:class:`CompactionSchedule`)."""

from __future__ import annotations

import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from bkspark.errors import BookieIOError, InvalidOptionError
from bookie_server import compaction as compaction_module
from bkspark.config.bookie import BookieConfig
from bookie_server.entry_logs import INDEX_KEY
from bookie_server.gc import CompactionSchedule
from bookie_server.journal import CrashPoint, JournalPosition
from bookie_server.storage import LedgerStorage

LIVE, DOOMED = 1, 2


def entry(ledger: int, eid: int, payload: bytes) -> bytes:
    return struct.pack(">qqqq", ledger, eid, eid - 1, len(payload)) + b"\0" * 8 + payload


def mixed_log(tmp_path: Path, *, live: int = 5, doomed: int = 100) -> tuple[LedgerStorage, dict[int, bytes]]:
    """A storage whose one closed entry log holds ``live`` small entries of ledger 1 and ``doomed`` 2 KiB entries of
    ledger 2, ledger 2 deleted: the log's live share is about 1 %."""
    storage = LedgerStorage([tmp_path])
    storage.open()
    kept = {i: entry(LIVE, i, b"live %d" % i) for i in range(live)}
    for i, data in kept.items():
        storage.put_entry(0, LIVE, i, i - 1, data)
    for i in range(doomed):
        storage.put_entry(0, DOOMED, i, i - 1, entry(DOOMED, i, b"d" * 2048))
    storage.checkpoint(JournalPosition(1, 16))
    storage.close()
    storage = LedgerStorage([tmp_path])  # reopened as by a restart: the log is closed, the next one is new
    storage.open()
    storage.delete_ledger(0, DOOMED)
    storage.checkpoint(JournalPosition(1, 32))
    return storage, kept


def log_files(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / "current" / "entrylogs").glob("*.log")}


def test_a_log_under_the_threshold_is_compacted_and_removed_and_its_live_entries_stay(tmp_path: Path) -> None:
    """The old code kept the log whole for its one live ledger: reclaim removed nothing and the disk use stayed."""
    storage, kept = mixed_log(tmp_path)
    assert storage.reclaim_entry_logs() == []  # ledger 1 still lives in it
    before_files, before_bytes = log_files(tmp_path), storage.entry_log_bytes()
    assert storage.compact_entry_logs(0.2) != []
    storage.refresh_indexes()
    removed = storage.reclaim_entry_logs()
    assert {p.name for p in removed} == before_files
    after_bytes = storage.entry_log_bytes()
    assert after_bytes < before_bytes / 10
    assert {i: storage.get_entry(0, LIVE, i) for i in kept} == kept
    storage.close()
    storage = LedgerStorage([tmp_path])
    storage.open()
    assert {i: storage.get_entry(0, LIVE, i) for i in kept} == kept
    storage.close()


def test_a_log_at_or_over_the_threshold_is_left_alone(tmp_path: Path) -> None:
    storage, _ = mixed_log(tmp_path, live=60, doomed=60)  # live share is small but not under 1 %
    assert storage.compact_entry_logs(0.001) == []
    assert storage.compact_entry_logs(0.0) == []
    storage.close()


@pytest.mark.parametrize("point", [CrashPoint.COMPACTION_COPIED, CrashPoint.COMPACTION_INDEXED])
def test_a_compaction_cut_off_between_its_steps_loses_nothing_and_the_next_one_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: CrashPoint
) -> None:
    """An error at each step stands in for a crash there (the crash itself: tests/integration/
    test_bookie_compaction.py): after the copy, the rows still point at the old log; after the commit, at the copies."""
    storage, kept = mixed_log(tmp_path)
    old_logs = log_files(tmp_path)

    def fail_at(step: CrashPoint) -> None:
        if step is point:
            raise OSError("cut off at " + step.value)

    monkeypatch.setattr(compaction_module, "crash_point", fail_at)
    with pytest.raises(BookieIOError):
        storage.compact_entry_logs(0.2)
    storage.refresh_indexes()
    assert {i: storage.get_entry(0, LIVE, i) for i in kept} == kept
    removed = {p.name for p in storage.reclaim_entry_logs()}
    assert removed == (set() if point is CrashPoint.COMPACTION_COPIED else old_logs)
    monkeypatch.undo()
    storage.compact_entry_logs(0.2)
    storage.refresh_indexes()
    storage.reclaim_entry_logs()
    assert not log_files(tmp_path) & old_logs
    assert {i: storage.get_entry(0, LIVE, i) for i in kept} == kept
    storage.close()


def test_a_row_changed_between_the_copy_and_the_commit_keeps_its_new_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger deleted, or an entry written again, while its log is copied: the compaction moves only rows that
    still point at the old record, so it neither brings a deleted entry back nor hides a newer one."""
    storage, kept = mixed_log(tmp_path)
    directory = storage._dirs[0]
    deleted_key = INDEX_KEY.pack(0, LIVE, 0)
    rewritten_key = INDEX_KEY.pack(0, LIVE, 1)
    rewritten: list[bytes] = []

    def meanwhile(step: CrashPoint) -> None:
        if step is CrashPoint.COMPACTION_COPIED:
            with directory.env.begin(write=True, db=directory.index_db) as txn:
                txn.delete(deleted_key)
                other = txn.get(INDEX_KEY.pack(0, LIVE, 2))  # a valid location that is not entry 1's old one
                txn.put(rewritten_key, other)
                rewritten.append(other)

    monkeypatch.setattr(compaction_module, "crash_point", meanwhile)
    storage.compact_entry_logs(0.2)
    with directory.env.begin(db=directory.index_db) as txn:
        assert txn.get(deleted_key) is None
        assert txn.get(rewritten_key) == rewritten[0]
    storage.close()


def test_a_compaction_holds_one_batch_of_live_records_in_memory_not_the_whole_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, _ = mixed_log(tmp_path, live=40, doomed=400)
    monkeypatch.setattr(compaction_module, "COMPACTION_BATCH_BYTES", 64)
    sizes: list[int] = []
    real = compaction_module.log_records

    def counting(keys: Any, entries: Any, place: Any) -> Any:
        sizes.append(len(entries))
        return real(keys, entries, place)

    monkeypatch.setattr(compaction_module, "log_records", counting)
    assert storage.compact_entry_logs(0.5)
    assert len(sizes) > 1 and max(sizes) <= 2
    storage.close()


def test_the_schedule_runs_major_then_minor_compactions_at_their_intervals() -> None:
    """Apache BookKeeper's GarbageCollectorThread: the start counts as a compaction of both kinds; a major one
    moves the minor one's clock too; a threshold or interval of 0 turns a kind off; forcing runs one now."""
    schedule = CompactionSchedule(0.2, 3600, 0.8, 86400, last_minor=0.0, last_major=0.0)
    assert schedule.due(3600) is None
    assert schedule.due(3601) == ("minor", 0.2)
    assert schedule.due(3602) is None
    assert schedule.due(86401) == ("major", 0.8)
    assert schedule.due(86401 + 3600) is None  # the major one counted as a minor one
    assert schedule.due(86402, force_minor=True) == ("minor", 0.2)
    assert schedule.due(86403, force_major=True) == ("major", 0.8)
    assert schedule.due(86404) is None
    assert schedule.due(86405, disk_full=True) is None  # isForceGCAllowWhenNoSpace is off
    full = CompactionSchedule(0.2, 3600, 0.8, 86400, force_when_no_space=True, last_minor=0.0, last_major=0.0)
    assert full.due(1, disk_full=True) == ("major", 0.8)
    off = CompactionSchedule(0.0, 3600, 0.8, 0, last_minor=0.0, last_major=0.0)
    assert off.due(10**9) is None
    assert off.due(10**9, force_minor=True) is None  # minor is off: a threshold of 0 compacts nothing
    assert off.due(10**9, force_major=True) == ("major", 0.8)


def test_the_compaction_keys_are_read_with_java_defaults_and_checked() -> None:
    conf = BookieConfig()
    assert (conf.minorCompactionThreshold, conf.minorCompactionInterval) == (0.2, 3600)
    assert (conf.majorCompactionThreshold, conf.majorCompactionInterval) == (0.8, 86400)
    assert conf.isForceGCAllowWhenNoSpace is False
    conf = BookieConfig.from_mapping({"minorCompactionThreshold": "0.1", "isForceGCAllowWhenNoSpace": "true"})
    assert (conf.minorCompactionThreshold, conf.isForceGCAllowWhenNoSpace) == (0.1, True)
    with pytest.raises(InvalidOptionError, match="majorCompactionThreshold"):
        BookieConfig.from_mapping({"majorCompactionThreshold": "1.5"})
    with pytest.raises(InvalidOptionError, match="minorCompactionInterval"):
        BookieConfig.from_mapping({"minorCompactionInterval": "-1"})


def test_a_read_whose_log_a_compaction_removed_after_its_lookup_reads_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read thread looked the entry up, then the compaction moved it and the reclaim removed the old log before
    the read: the read looks up again and finds the copy, instead of answering EIO ("entry log is missing")."""
    storage, kept = mixed_log(tmp_path)
    real_lookup = storage._index_location
    calls: list[int] = []

    def lookup_then_compact(key: int, own_transaction: bool) -> Any:
        found = real_lookup(key, own_transaction)
        calls.append(1)
        if len(calls) == 1:
            assert storage.compact_entry_logs(0.2)
            assert storage.reclaim_entry_logs()
        return found

    monkeypatch.setattr(storage, "_index_location", lookup_then_compact)
    from bookie_server.entry_logs import cache_key

    assert storage._read_from_disk(cache_key(0, LIVE, 3), own_transaction=True) == kept[3]
    assert len(calls) == 2
    storage.close()


def test_a_compaction_running_when_the_storage_closes_ends_instead_of_touching_a_closed_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop does not wait for a GC round's compaction on its executor thread: the storage's close waits for the
    log being copied, and the compaction then stops before its next log."""
    storage = LedgerStorage([tmp_path], entry_log_size_limit=64 * 1024)
    storage.open()
    for ledger in (LIVE, DOOMED):
        for i in range(60):
            storage.put_entry(0, ledger, i, i - 1, entry(ledger, i, (b"%d" % ledger) * 2048))
    storage.checkpoint(JournalPosition(1, 16))  # several logs, each holding both ledgers
    storage.close()
    storage = LedgerStorage([tmp_path], entry_log_size_limit=64 * 1024)
    storage.open()
    storage.delete_ledger(0, DOOMED)
    storage.checkpoint(JournalPosition(1, 32))
    real = compaction_module.compact_log
    compacted: list[int] = []

    def then_close(directory: Any, log_id: int, log_bytes: int) -> Any:
        done = real(directory, log_id, log_bytes)
        compacted.append(log_id)
        if len(compacted) == 1:
            closer = threading.Thread(target=storage.close)
            closer.start()
            while not storage._closing:  # the stop has begun; it waits for the lock this compaction holds
                closer.join(0.01)
            assert storage._dirs  # not closed under the copy
            waiting.append(closer)
        return done

    waiting: list[threading.Thread] = []
    monkeypatch.setattr(compaction_module, "compact_log", then_close)
    result = storage.compact_entry_logs(0.9)
    waiting[0].join(10)
    assert len(result) == 1 and compacted == [result[0].log_id]
    reopened = LedgerStorage([tmp_path], entry_log_size_limit=64 * 1024)
    reopened.open()
    assert [reopened.get_entry(0, LIVE, i) for i in range(60)] == [entry(LIVE, i, b"1" * 2048) for i in range(60)]
    reopened.close()


def test_a_gc_round_on_full_disks_compacts_only_with_is_force_gc_allow_when_no_space(tmp_path: Path) -> None:
    """``isForceGCAllowWhenNoSpace``: while the ledger disks are over ``diskUsageThreshold`` (the bookie read-only
    for it), a GC round runs a major compaction whatever its interval; without the key it waits for the interval."""
    import asyncio

    from bookie_server.bookie import Bookie
    from bookie_server.gc import GarbageCollector
    from tests.unit.test_bookie_storage import KEY, _ScriptedZk, make_conf

    live_path = "/ledgers/00/0000/L0001"

    async def fill() -> None:
        bookie = Bookie(make_conf(tmp_path, journalSyncData="false"))
        await bookie.start()
        for i in range(5):
            await bookie.add_entry(0, LIVE, i, i - 1, entry(LIVE, i, b"live"), KEY)
        for i in range(100):
            await bookie.add_entry(0, DOOMED, i, i - 1, entry(DOOMED, i, b"d" * 2048), KEY)
        await bookie.stop()  # its checkpoint puts both in one log, closed at the next start

    async def rounds() -> None:
        bookie = Bookie(make_conf(tmp_path, journalSyncData="false"))
        await bookie.start()
        try:
            plain = GarbageCollector(bookie, _ScriptedZk([{live_path}]), "/ledgers")  # type: ignore[arg-type]
            assert await plain.run_once() == [(0, DOOMED)]
            bookie._disk_readonly = True  # what check_disks sets over diskUsageThreshold
            assert bookie.disk_full
            await plain.run_once()
            assert plain.compacted_total == 0  # the key is off: the interval (an hour) rules
            bookie.conf.isForceGCAllowWhenNoSpace = True
            forced = GarbageCollector(bookie, _ScriptedZk([{live_path}]), "/ledgers")  # type: ignore[arg-type]
            await forced.run_once()
            assert forced.compacted_total == 1
            assert [bookie.read_entry(0, LIVE, i) for i in range(5)] == [entry(LIVE, i, b"live") for i in range(5)]
        finally:
            await bookie.stop()

    asyncio.run(fill())
    asyncio.run(rounds())
