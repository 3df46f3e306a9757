"""Entry-log compaction of the bookie's storage, as Apache BookKeeper's ``GarbageCollectorThread`` and
``EntryLogCompactor`` do it (docs/bookie.md, "Compaction").

A log in which a few live entries are left would otherwise be kept whole.  Each such log's live records are copied
to the current log, synced, then their index rows moved to the copies in one LMDB commit; the emptied log is then
the reclaim's (``LedgerStorage.reclaim_entry_logs``).  :class:`~bookie_server.storage.LedgerStorage` owns the
directories, the append lock and the closing flag, and calls :func:`compact_entry_logs` with them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import lmdb

from bkspark.errors import BookieIOError

from bookie_server.entry_logs import CacheKey, LedgerDirectory, log_records
from bookie_server.journal import CrashPoint, crash_point

__all__ = ["COMPACTION_BATCH_BYTES", "CompactedLog", "compact_entry_logs", "compact_log"]

#: The storage's logger: its compaction lines keep the name they had when this was a part of it.
log = logging.getLogger("bookie_server.storage")

#: Bytes of live records a compaction reads from the old log before it appends their copies: what it holds in memory
#: at once, whatever the size of the log (docs/bookie.md, "Compaction").
COMPACTION_BATCH_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CompactedLog:
    """One entry log a compaction emptied: its id, the live entries and bytes copied out of it, and its size."""

    directory: Path
    log_id: int
    entries: int
    live_bytes: int
    log_bytes: int


def compact_entry_logs(
    directories: Sequence[LedgerDirectory], append_lock: threading.Lock, closing: Callable[[], bool], threshold: float
) -> list[CompactedLog]:
    """Compact every closed entry log whose live share of bytes is above 0 and under ``threshold`` (any
    thread): its live records are copied to the current log and their index rows moved to the copies, the
    emptiest logs first, as Apache BookKeeper's ``GarbageCollectorThread`` does (docs/bookie.md, "Compaction").
    The emptied logs are not removed here: ``LedgerStorage.reclaim_entry_logs`` removes them, once the loop thread has
    dropped its reused index snapshot (``LedgerDirectory.refresh``), which may still point into them.

    Each log is one step under the append lock, so checkpoints wait at most one log's copy.  A crash after the
    copy and before the index commit leaves copies no row points at (dead bytes of the current log); after the
    commit and before the removal, a log no row points at, which the next reclaim removes.
    """
    compacted: list[CompactedLog] = []
    if threshold <= 0:
        return compacted
    for directory in list(directories):
        try:
            with append_lock:
                if closing():
                    return compacted
                usage = directory.log_usage()
        except (OSError, lmdb.Error) as exc:
            raise BookieIOError("entry log usage scan failed", error=str(exc)) from exc
        candidates = [log_id for log_id, (live, size) in usage.items() if live and size and live / size < threshold]
        candidates.sort(key=lambda log_id: usage[log_id][0] - usage[log_id][1])  # most unused bytes first
        for log_id in candidates:
            with append_lock:
                if closing():
                    return compacted  # the storage is closing (a stop)
                done = compact_log(directory, log_id, usage[log_id][1])
            if done is not None:
                compacted.append(done)
                log.info(
                    "compacted entry log %d of %s: %d live entries (%d of %d bytes) copied to the current log",
                    log_id, directory.root, done.entries, done.live_bytes, done.log_bytes,
                    extra={"log_id": log_id, "live_bytes": done.live_bytes, "log_bytes": done.log_bytes},
                )
    return compacted


def compact_log(directory: LedgerDirectory, log_id: int, log_bytes: int) -> CompactedLog | None:
    """Copy one log's live records to the current log, sync, then move their rows in one LMDB commit (a row
    only while it still points at the old record: a ledger deleted or an entry written again meanwhile keeps
    what it has).  Under the append lock; the log a copy began in stays pinned until the commit."""
    directory.checkpoint_first_log = directory.log_id
    try:
        rows = directory.rows_in_log(log_id)
        if not rows:
            return None
        moves: list[tuple[bytes, bytes, bytes]] = []  # key, old location, new location
        live_bytes = 0
        at = 0
        while at < len(rows):
            batch: dict[CacheKey, bytes] = {}
            old_of: dict[bytes, bytes] = {}
            size = 0
            chunk: list[object] = [None, 0, b""]
            while at < len(rows) and (not batch or size < COMPACTION_BATCH_BYTES):
                key_bytes, location = rows[at]
                at += 1
                key = int.from_bytes(key_bytes, "big")
                data = directory.read_record(location, key, chunk)
                batch[key] = data
                old_of[key_bytes] = location
                size += len(data)
            live_bytes += size
            placed: list[tuple[int, int]] = []

            def place(n: int) -> tuple[int, int]:
                placed.append(directory.place(n))
                return placed[-1]

            blob, new_rows = log_records(list(batch), batch, place)
            if directory.append(blob) != placed[-1]:
                raise BookieIOError("an entry log moved between placing and appending a compaction")
            moves.extend((key_bytes, old_of[key_bytes], new) for key_bytes, new in new_rows)
        directory.sync()
        crash_point(CrashPoint.COMPACTION_COPIED)
        with directory.env.begin(write=True, db=directory.index_db) as txn:
            for key_bytes, old, new in moves:
                if txn.get(key_bytes) == old:
                    txn.put(key_bytes, new)
        crash_point(CrashPoint.COMPACTION_INDEXED)
        return CompactedLog(directory.root, log_id, len(moves), live_bytes, log_bytes)
    except (OSError, lmdb.Error) as exc:
        raise BookieIOError("entry log compaction failed", log_id=log_id, error=str(exc)) from exc
    finally:
        directory.checkpoint_first_log = None
