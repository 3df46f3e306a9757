"""Ledger storage: entry logs on disk, an LMDB entry-location index, a write
cache and a read cache, and per-ledger state.

Shaped like BookKeeper's DbLedgerStorage, because its trade-offs fit a bookie:

* New entries go into a **write cache** (a dict) as soon as their add is
  accepted, so they are readable at once; the journal makes them durable.
* A **checkpoint** swaps the write cache out, appends its entries (sorted by
  ledger and entry, so a ledger's entries are contiguous on disk) to the
  current **entry log** with one write and one fsync, then stores each
  entry's location ``(log id, offset, length)`` and the dirty ledger states in
  one LMDB transaction together with the journal position the checkpoint
  covers.  Journal files before that mark can then be deleted.
* The **index** is LMDB (py-lmdb), not a home-made B-tree and not RocksDB:
  LMDB is small and well kept, ACID with crash-safe copy-on-write pages (no
  repair step after kill -9), its reads are memory-mapped lookups with no
  copies and no compaction threads, and it installs as a plain pip wheel.
  Keys are big-endian ``(scope id, ledger id, entry id)`` so a range scan
  lists one ledger's entries in order.
* A small byte-bounded **read cache** (LRU) keeps recently read entries.

Each ledger directory holds its own entry logs and index; a ledger lives in
directory ``(scope id * 31 + ledger id) % n`` (cookies pin the directory list,
so the mapping never changes under existing data).

This module does no networking and knows nothing of asyncio: the bookie
decides when to checkpoint and on which thread.  Its rooms: this one (ledger
state, the write cache, memory look-ups, checkpoints, deletion, replay),
:mod:`bookie_server.storage_reads` (the read cache and the disk reads),
:mod:`bookie_server.compaction` (copying the live entries out of mostly
dead entry logs) and :mod:`bookie_server.entry_logs` (one directory's entry
logs and index, and the key and record formats).
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import eq, itemgetter
from pathlib import Path

import lmdb

from bkspark.errors import BookieIOError, MalformedFrameError, NoSuchEntryError, NoSuchLedgerError
from bkspark.protocol.digest import lac_header

from bookie_server.compaction import CompactedLog, compact_entry_logs
from bookie_server.entry_logs import (
    CHECKPOINT_KEY,
    INDEX_KEY,
    LEDGER_KEY,
    CacheKey,
    EntryKey,
    IndexRow,
    LedgerDirectory,
    LedgerKey,
    cache_key,
    key_address,
    key_ledger,
    log_records,
)
from bookie_server.journal import CrashPoint, JournalPosition, JournalRecord, RecordType, crash_point, decode_add_payload
from bookie_server.storage_reads import CachedRange, StorageReads, cached_size

__all__ = ["CHECKPOINT_PIECE_ENTRIES", "LedgerInfo", "LedgerStorage", "Snapshot"]

log = logging.getLogger("bookie_server.storage")


_STATE = struct.Struct(">BBqqHI")  # version, flags, lac, last entry, key length, explicit LAC length
_STATE_VERSION = 1
_FLAG_FENCED = 1
_FLAG_HAS_KEY = 2
_FLAG_HAS_LAC = 4
#: Entries of a checkpoint written per :func:`log_records` call (docs/bookie.md, "Checkpoints"): the compiled call
#: holds the GIL while it sorts the keys and makes their index rows, 0.25-0.37 us per entry, so a piece keeps the
#: event loop from waiting more than a few ms; a whole 64 MiB write cache of 100 B entries held it 125-185 ms.
CHECKPOINT_PIECE_ENTRIES = 16384


@dataclass(slots=True)
class LedgerInfo:
    """What a bookie remembers about one ledger besides its entries."""

    master_key: bytes | None = None
    fenced: bool = False
    explicit_lac: bytes | None = None
    #: max of the entries' LAC fields and the explicit LAC value.
    lac: int = -1
    #: highest entry id stored (-1: none).
    last_entry: int = -1

    def pack(self) -> bytes:
        """Binary form stored in the index's ``ledgers`` table."""
        key = self.master_key or b""
        blob = self.explicit_lac or b""
        flags = (
            (_FLAG_FENCED if self.fenced else 0)
            | (_FLAG_HAS_KEY if self.master_key is not None else 0)
            | (_FLAG_HAS_LAC if self.explicit_lac is not None else 0)
        )
        return _STATE.pack(_STATE_VERSION, flags, self.lac, self.last_entry, len(key), len(blob)) + key + blob

    @classmethod
    def unpack(cls, data: bytes) -> "LedgerInfo":
        """Inverse of :meth:`pack`; :class:`BookieIOError` when the bytes are damaged."""
        try:
            version, flags, lac, last_entry, key_len, blob_len = _STATE.unpack_from(data, 0)
        except struct.error as exc:
            raise BookieIOError("ledger state record is corrupt", error=str(exc)) from exc
        if version != _STATE_VERSION or len(data) != _STATE.size + key_len + blob_len:
            raise BookieIOError("ledger state record is corrupt", version=version, size=len(data))
        key = data[_STATE.size : _STATE.size + key_len]
        blob = data[_STATE.size + key_len :]
        return cls(
            master_key=bytes(key) if flags & _FLAG_HAS_KEY else None,
            fenced=bool(flags & _FLAG_FENCED),
            explicit_lac=bytes(blob) if flags & _FLAG_HAS_LAC else None,
            lac=lac,
            last_entry=last_entry,
        )


@dataclass
class Snapshot:
    """A checkpoint in progress: what it will write, and the journal mark it covers."""

    mark: JournalPosition
    entries: dict[CacheKey, bytes]
    states: dict[LedgerKey, bytes]
    deletes: set[LedgerKey] = field(default_factory=set)


def _group_keys(scope_id: int, adds: Sequence[tuple], one_ledger: bool) -> Sequence[CacheKey]:
    """The cache keys of a group of adds whose first two items are ledger id and entry id: one ``range`` when
    they are one ledger's consecutive entries (``one_ledger`` says the first half; a client's run of adds), else a
    list (:func:`cache_key` of each)."""
    n, first = len(adds), adds[0]
    entry_id = first[1]
    if one_ledger and 0 <= entry_id and entry_id + n <= 1 << 63:  # the range stays within the ledger's keys
        if all(map(eq, map(itemgetter(1), adds), range(entry_id, entry_id + n))):
            start = cache_key(scope_id, first[0], entry_id)
            return range(start, start + n)
    return [cache_key(scope_id, add[0], add[1]) for add in adds]






class LedgerStorage(StorageReads):
    """Entries and ledger state of a bookie, over one or more ledger directories; the read cache and the disk
    reads are in :class:`~bookie_server.storage_reads.StorageReads`."""

    def __init__(
        self,
        ledger_dirs: Iterable[str | os.PathLike[str]],
        *,
        write_cache_max_bytes: int = 64 * 1024 * 1024,
        read_cache_max_bytes: int = 64 * 1024 * 1024,
        entry_log_size_limit: int = 1024 * 1024 * 1024,
        index_map_size: int = 64 * 1024 * 1024 * 1024,
    ) -> None:
        self.ledger_dirs = [Path(d) for d in ledger_dirs]
        if not self.ledger_dirs:
            raise ValueError("at least one ledger directory is needed")
        self.write_cache_max_bytes = write_cache_max_bytes
        self.read_cache_max_bytes = read_cache_max_bytes
        self._entry_log_size_limit = entry_log_size_limit
        self._map_size = index_map_size
        self._dirs: list[LedgerDirectory] = []
        self._ledgers: dict[LedgerKey, LedgerInfo] = {}
        self._dirty: set[LedgerKey] = set()
        self._write_cache: dict[CacheKey, bytes] = {}
        self._write_cache_bytes = 0
        self._flushing: dict[CacheKey, bytes] = {}
        #: Entries (cache key -> bytes) and the ranges of cold batch reads (``RANGE_BIT`` | their first entry's
        #: key -> CachedRange), least recently used first, all counted in ``_read_cache_bytes`` against
        #: ``read_cache_max_bytes``.
        self._read_cache: OrderedDict[CacheKey, bytes | CachedRange] = OrderedDict()
        self._read_cache_bytes = 0
        self._pending_deletes: set[LedgerKey] = set()
        self.checkpoint_mark = JournalPosition(0, 0)
        #: Held by whoever appends to the entry logs or moves their rows: a checkpoint's write, one log's compaction
        #: (two threads; each pins the log it began in, ``LedgerDirectory.checkpoint_first_log``).
        self._append_lock = threading.Lock()
        #: Set by :meth:`close`: a compaction on another thread stops before its next log.
        self._closing = False

    # -- life cycle ---------------------------------------------------------------------
    def open(self) -> None:
        """Open every directory's index and load all ledger states."""
        self._closing = False
        marks: list[JournalPosition] = []
        for root in self.ledger_dirs:
            directory = LedgerDirectory(root, map_size=self._map_size, entry_log_size_limit=self._entry_log_size_limit)
            self._dirs.append(directory)
            try:
                with directory.begin_read() as txn:
                    for key, value in txn.cursor(db=directory.ledgers_db):
                        if len(key) != LEDGER_KEY.size:
                            raise BookieIOError("ledger state key is corrupt", directory=str(root))
                        self._ledgers[LEDGER_KEY.unpack(key)] = LedgerInfo.unpack(value)
                    mark = txn.get(CHECKPOINT_KEY, db=directory.meta_db)
            except lmdb.Error as exc:
                raise BookieIOError("cannot read the entry index", directory=str(root), error=str(exc)) from exc
            if mark is None:
                marks.append(JournalPosition(0, 0))
                continue
            try:
                marks.append(JournalPosition.unpack(mark))
            except struct.error as exc:
                raise BookieIOError("checkpoint mark is corrupt", directory=str(root)) from exc
        # All directories are checkpointed together; the oldest mark is the safe one.
        self.checkpoint_mark = min(marks)

    def close(self) -> None:
        """Close indexes and files (run a checkpoint first to keep the write cache).  A compaction running on
        another thread (a GC round's, which a stop does not wait for) ends with the log it is copying."""
        self._closing = True  # a compaction stops before its next log, whoever takes the lock first
        with self._append_lock:
            for directory in self._dirs:
                directory.close()
            self._dirs.clear()

    def _dir_for(self, scope_id: int, ledger_id: int) -> LedgerDirectory:
        return self._dirs[(scope_id * 31 + ledger_id) % len(self._dirs)]

    # -- ledger state -------------------------------------------------------------------
    def ledger(self, scope_id: int, ledger_id: int) -> LedgerInfo | None:
        """The ledger's state, or None when this bookie has never seen it."""
        return self._ledgers.get((scope_id, ledger_id))

    def ensure_ledger(self, scope_id: int, ledger_id: int) -> tuple[LedgerInfo, bool]:
        """The ledger's state, created empty if new; the flag says whether it was created."""
        key = (scope_id, ledger_id)
        info = self._ledgers.get(key)
        if info is None:
            info = self._ledgers[key] = LedgerInfo()
            self._dirty.add(key)
            self._pending_deletes.discard(key)
            return info, True
        return info, False

    def set_master_key(self, scope_id: int, ledger_id: int, master_key: bytes) -> None:
        """Bind the ledger's master key (first use only)."""
        info, _ = self.ensure_ledger(scope_id, ledger_id)
        if info.master_key is None:
            info.master_key = bytes(master_key)
            self._dirty.add((scope_id, ledger_id))

    def set_fenced(self, scope_id: int, ledger_id: int) -> None:
        """Mark the ledger fenced (it stays so for good)."""
        info, _ = self.ensure_ledger(scope_id, ledger_id)
        if not info.fenced:
            info.fenced = True
            self._dirty.add((scope_id, ledger_id))

    def set_explicit_lac(self, scope_id: int, ledger_id: int, blob: bytes, lac: int) -> None:
        """Keep the explicit-LAC blob verbatim and raise the LAC to ``lac`` if higher."""
        info, _ = self.ensure_ledger(scope_id, ledger_id)
        info.explicit_lac = bytes(blob)
        if lac > info.lac:
            info.lac = lac
        self._dirty.add((scope_id, ledger_id))

    def ledgers(self) -> list[LedgerKey]:
        """Every ledger this bookie holds."""
        return list(self._ledgers)

    # -- entries ------------------------------------------------------------------------
    def put_entry(self, scope_id: int, ledger_id: int, entry_id: int, lac: int, data: bytes) -> LedgerInfo:
        """Store an entry (into the write cache) and track last entry and LAC."""
        self.put_entries(scope_id, [(ledger_id, entry_id, lac)], [data])
        return self._ledgers[(scope_id, ledger_id)]

    def put_entries(self, scope_id: int, adds: Sequence[tuple], entries: Sequence[bytes]) -> None:
        """:meth:`put_entry` for each add, whose first three items are ledger id, entry id and LAC, with its
        entry bytes from ``entries`` (the add path's group of adds: one call, not one per entry).

        The loops over the group are the builtins' (``dict.update``, key-view intersections, ``max`` over the
        ids), not Python statements per entry; a group of one ledger's consecutive entries (a client's run of
        adds) has its keys as one ``range``.  An entry stored again (in this group or before it) is counted
        once, with its newest bytes, as :meth:`put_entry` counts it.
        """
        if not adds:
            return
        cache = self._write_cache
        ledger_ids = dict.fromkeys(map(itemgetter(0), adds))
        keys = _group_keys(scope_id, adds, len(ledger_ids) == 1)
        info = self._ledgers.get((scope_id, adds[0][0]))
        size_before = len(cache)
        if type(keys) is range and info is not None and adds[0][1] > info.last_entry:
            # A run past the ledger's last entry (a writer's next adds): the write cache holds none of its keys,
            # since each stored entry raised last_entry, so there is nothing written again to look for.
            cache.update(zip(keys, entries))
            if len(cache) - size_before == len(keys):
                self._write_cache_bytes += sum(map(len, entries))
            else:  # not expected: count the cache again rather than trust the rule above
                self._write_cache_bytes = sum(map(len, cache.values()))
        else:
            replaced = cache.keys() & keys  # usually empty: an entry written again
            replaced_bytes = sum([len(cache[key]) for key in replaced]) if replaced else 0
            cache.update(zip(keys, entries))
            if len(cache) - size_before == len(keys):
                grown = sum(map(len, entries))  # every key new and none twice in the group
            else:
                grown = sum([len(cache[key]) for key in set(keys)]) - replaced_bytes
            self._write_cache_bytes += grown
        read_cache = self._read_cache
        if read_cache:
            for key in read_cache.keys() & keys:
                self._read_cache_bytes -= cached_size(read_cache.pop(key))
        if len(ledger_ids) == 1:
            ledger_id = adds[0][0]
            self._note_added(scope_id, ledger_id, max(map(itemgetter(1), adds)), max(map(itemgetter(2), adds)))
            return
        for ledger_id in ledger_ids:
            self._note_added(
                scope_id,
                ledger_id,
                max([add[1] for add in adds if add[0] == ledger_id]),
                max([add[2] for add in adds if add[0] == ledger_id]),
            )

    def _note_added(self, scope_id: int, ledger_id: int, last_entry: int, lac: int) -> None:
        """A ledger got entries up to ``last_entry`` (and a LAC of ``lac``) in the write cache."""
        info, _ = self.ensure_ledger(scope_id, ledger_id)
        self._dirty.add((scope_id, ledger_id))
        if last_entry > info.last_entry:
            info.last_entry = last_entry
        if lac > info.lac:
            info.lac = lac

    @property
    def write_cache_bytes(self) -> int:
        """Bytes of entries not yet in an entry log."""
        return self._write_cache_bytes

    @property
    def read_cache_bytes(self) -> int:
        """Bytes the read cache holds: entries single reads brought and ranges batch reads brought."""
        return self._read_cache_bytes

    @property
    def needs_flush(self) -> bool:
        """True when the write cache has outgrown its budget."""
        return self._write_cache_bytes >= self.write_cache_max_bytes

    def get_entry(self, scope_id: int, ledger_id: int, entry_id: int) -> bytes:
        """An entry's stored bytes; entry -1 means the last stored entry (on the calling thread, disk included).

        Raises :class:`NoSuchLedgerError`, :class:`NoSuchEntryError` or, for a
        damaged index or entry log, :class:`BookieIOError`.
        """
        address, data = self.locate(scope_id, ledger_id, entry_id)
        if data is not None:
            return data
        key = cache_key(*address)
        data = self._read_from_disk(key)
        self._cache_read(key, data)
        return data

    def locate(self, scope_id: int, ledger_id: int, entry_id: int) -> tuple[EntryKey, bytes | None]:
        """``(key, bytes)`` of an entry in memory (write cache, checkpoint in progress, read cache), or
        ``(key, None)`` when only the disk has it (:meth:`read_cold`); entry -1 is resolved in the key.

        Loop thread.  Raises :class:`NoSuchLedgerError`, or :class:`NoSuchEntryError` for -1 of an empty ledger.
        """
        info = self._ledgers.get((scope_id, ledger_id))
        if info is None:
            raise NoSuchLedgerError(ledger_id=ledger_id, scope_id=scope_id)
        if entry_id == -1:
            entry_id = info.last_entry
            if entry_id < 0:
                raise NoSuchEntryError(ledger_id=ledger_id, entry_id=-1)
        return (scope_id, ledger_id, entry_id), self._in_memory(cache_key(scope_id, ledger_id, entry_id))

    def memory_hits(self, scope_id: int, reads: Sequence[tuple]) -> list[bytes | None]:
        """Loop thread: for each read, whose first two items are ledger id and entry id, the bytes :meth:`locate`
        finds in memory, or None where memory lacks them or locate must decide (an unknown ledger: ENOLEDGER;
        entry -1: the last one): a run of single reads looked up with one call (docs/bookie.md, "Runs of single
        reads")."""
        in_memory = self._in_memory
        found = [in_memory(cache_key(scope_id, read[0], read[1])) for read in reads]
        known = self._ledgers
        unknown = {ledger_id for ledger_id in set(map(itemgetter(0), reads)) if (scope_id, ledger_id) not in known}
        if unknown or -1 in map(itemgetter(1), reads):
            found = [None if read[0] in unknown or read[1] == -1 else data for read, data in zip(reads, found)]
        return found

    def _in_memory(self, key: CacheKey) -> bytes | None:
        """Loop thread: the entry from the write cache, else the checkpoint in progress, else the read cache,
        whose order moves on a hit; None where none holds it (the one home of these rules; a batch read also
        looks for ranges: :meth:`range_in_memory`)."""
        data = self._write_cache.get(key)
        if data is not None:
            return data
        data = self._flushing.get(key)
        if data is not None:
            return data
        cached = self._read_cache.get(key)
        if cached is not None:
            self._read_cache.move_to_end(key)
        return cached  # type: ignore[return-value]  # an entry's key holds its bytes, never a CachedRange

    def has_entry(self, scope_id: int, ledger_id: int, entry_id: int) -> bool:
        """True when the entry is stored here (no exceptions)."""
        try:
            self.get_entry(scope_id, ledger_id, entry_id)
            return True
        except (NoSuchEntryError, NoSuchLedgerError):
            return False


    def _ledger_or_raise(self, scope_id: int, ledger_id: int) -> None:
        if (scope_id, ledger_id) not in self._ledgers:
            raise NoSuchLedgerError(ledger_id=ledger_id, scope_id=scope_id)

    def entry_ids(self, scope_id: int, ledger_id: int) -> list[int]:
        """Sorted ids of every entry stored for the ledger (index plus caches)."""
        if (scope_id, ledger_id) not in self._ledgers:
            raise NoSuchLedgerError(ledger_id=ledger_id, scope_id=scope_id)
        ids: set[int] = set()
        directory = self._dir_for(scope_id, ledger_id)
        prefix = LEDGER_KEY.pack(scope_id, ledger_id)
        with directory.begin_read() as txn:
            cursor = txn.cursor()
            if cursor.set_range(prefix):
                for key in cursor.iternext(keys=True, values=False):
                    if key[:16] != prefix:
                        break
                    ids.add(INDEX_KEY.unpack(key)[2])
        ledger = key_ledger(cache_key(scope_id, ledger_id, 0))
        for cache in (self._write_cache, self._flushing):
            ids.update(key_address(key)[2] for key in cache if key_ledger(key) == ledger)
        return sorted(ids)

    # -- deletion (garbage collection) ---------------------------------------------------
    def delete_ledger(self, scope_id: int, ledger_id: int) -> None:
        """Forget a ledger now; its index rows and state go at the next checkpoint."""
        key = (scope_id, ledger_id)
        self._ledgers.pop(key, None)
        self._dirty.discard(key)
        ledger = key_ledger(cache_key(scope_id, ledger_id, 0))
        for gone in [k for k in self._write_cache if key_ledger(k) == ledger]:
            self._write_cache_bytes -= len(self._write_cache.pop(gone))
        for gone in [k for k in self._read_cache if key_ledger(k) == ledger]:  # entries and ranges
            self._read_cache_bytes -= cached_size(self._read_cache.pop(gone))
        self._pending_deletes.add(key)

    # -- journal replay -----------------------------------------------------------------
    def apply(self, record: JournalRecord) -> None:
        """Re-apply one journal record at start-up (idempotent)."""
        scope_id, ledger_id = record.scope_id, record.ledger_id
        if record.type is RecordType.ADD_ENTRY:
            entry_id, lac, data = decode_add_payload(record.payload)
            self.put_entry(scope_id, ledger_id, entry_id, lac, data)
        elif record.type is RecordType.MASTER_KEY:
            self.set_master_key(scope_id, ledger_id, record.payload)
        elif record.type is RecordType.FENCE:
            self.set_fenced(scope_id, ledger_id)
        elif record.type is RecordType.EXPLICIT_LAC:
            try:
                lac = lac_header(record.payload)[2]
            except MalformedFrameError:
                lac = -1
            self.set_explicit_lac(scope_id, ledger_id, record.payload, lac)

    # -- checkpoint ---------------------------------------------------------------------
    def begin_checkpoint(self, mark: JournalPosition) -> Snapshot:
        """Swap the write cache out (caller's thread, between requests).

        ``mark`` must be a journal position such that every record before it
        has already been applied here; replay restarts from it.
        """
        if self._flushing:
            raise RuntimeError("a checkpoint is already running")
        entries, self._write_cache = self._write_cache, {}
        self._write_cache_bytes = 0
        self._flushing = entries
        states = {key: self._ledgers[key].pack() for key in self._dirty if key in self._ledgers}
        self._dirty = set()
        deletes, self._pending_deletes = self._pending_deletes, set()
        return Snapshot(mark=mark, entries=entries, states=states, deletes=deletes)

    def write_checkpoint(self, snapshot: Snapshot) -> None:
        """Write a snapshot to entry logs and the index (any thread; the slow part), never beside a compaction."""
        with self._append_lock:
            self._write_checkpoint(snapshot)

    def _write_checkpoint(self, snapshot: Snapshot) -> None:
        per_dir: dict[int, list[CacheKey]] = {}
        n = len(self._dirs)
        if n == 1:
            per_dir[0] = list(snapshot.entries)
        else:
            for key in snapshot.entries:
                scope_id, ledger_id, _ = key_address(key)
                per_dir.setdefault((scope_id * 31 + ledger_id) % n, []).append(key)
        try:
            for index, directory in enumerate(self._dirs):
                keys = per_dir.get(index)
                pieces: list[list[IndexRow]] = []  # each piece's index rows
                directory.checkpoint_first_log = directory.log_id  # unpinned below, once the rows are committed
                if keys:
                    placed: list[tuple[int, int]] = []

                    def place(size: int, directory: LedgerDirectory = directory) -> tuple[int, int]:
                        placed.append(directory.place(size))
                        return placed[-1]

                    # In pieces: each log_records call holds the GIL while it makes its rows, and the loop thread
                    # must not wait for a whole write cache's (docs/bookie.md, "Checkpoints").
                    keys.sort()
                    for at in range(0, len(keys), CHECKPOINT_PIECE_ENTRIES):
                        blob, rows = log_records(keys[at : at + CHECKPOINT_PIECE_ENTRIES], snapshot.entries, place)
                        if directory.append(blob) != placed[-1]:  # only this thread appends: a bug if it moved
                            raise BookieIOError("an entry log moved between placing and appending a checkpoint")
                        pieces.append(rows)
                    directory.sync()
                    crash_point(CrashPoint.CHECKPOINT_LOGS_SYNCED)
                with directory.env.begin(write=True) as txn:
                    # Deletes first: a snapshot holds entries or state of a deleted ledger only when a writer
                    # re-created it after a failed checkpoint put its delete back (end_checkpoint); the old life's
                    # rows go, the new life's are written below, as if the re-creation came after the delete's
                    # checkpoint.
                    for scope_id, ledger_id in snapshot.deletes:
                        if (scope_id * 31 + ledger_id) % n != index:
                            continue
                        txn.delete(LEDGER_KEY.pack(scope_id, ledger_id), db=directory.ledgers_db)
                        prefix = LEDGER_KEY.pack(scope_id, ledger_id)
                        cursor = txn.cursor(db=directory.index_db)
                        if cursor.set_range(prefix):
                            while cursor.key()[:16] == prefix:
                                if not cursor.delete():
                                    break
                    if pieces:
                        cursor = txn.cursor(db=directory.index_db)
                        for at in range(len(pieces)):
                            # Each piece's rows are freed after their put, not all at once holding the GIL.
                            rows, pieces[at] = pieces[at], []
                            cursor.putmulti(rows)
                    for (scope_id, ledger_id), state in snapshot.states.items():
                        if (scope_id * 31 + ledger_id) % n == index:
                            txn.put(LEDGER_KEY.pack(scope_id, ledger_id), state, db=directory.ledgers_db)
                    txn.put(CHECKPOINT_KEY, snapshot.mark.pack(), db=directory.meta_db)
                directory.checkpoint_first_log = None
            crash_point(CrashPoint.CHECKPOINT_COMMITTED)
        except (OSError, lmdb.Error) as exc:
            raise BookieIOError("checkpoint failed", error=str(exc)) from exc
        finally:
            for directory in self._dirs:
                directory.checkpoint_first_log = None  # a failed checkpoint's records are in no index row

    def end_checkpoint(self, snapshot: Snapshot, ok: bool) -> None:
        """Release the snapshot (caller's thread); on failure its data goes back to the write cache."""
        if ok:
            self.checkpoint_mark = snapshot.mark
        else:
            for key, data in snapshot.entries.items():
                if key not in self._write_cache and key_address(key)[:2] in self._ledgers:
                    self._write_cache[key] = data
                    self._write_cache_bytes += len(data)
            self._dirty |= set(snapshot.states) & set(self._ledgers)
            self._pending_deletes |= snapshot.deletes
        for directory in self._dirs:
            directory.refresh()  # before the flushed entries leave memory
        self._flushing = {}

    def checkpoint(self, mark: JournalPosition) -> None:
        """All three steps on the calling thread (start-up, shutdown, tests)."""
        snapshot = self.begin_checkpoint(mark)
        ok = False
        try:
            self.write_checkpoint(snapshot)
            ok = True
        finally:
            self.end_checkpoint(snapshot, ok)

    # -- disk ---------------------------------------------------------------------------
    def reclaim_entry_logs(self) -> list[Path]:
        """Delete entry logs that hold only deleted entries (run after a checkpoint; any thread).

        Returns the removed files.  A log written by a checkpoint in progress is
        never touched (see :meth:`LedgerDirectory.unused_logs`).
        """
        removed: list[Path] = []
        for directory in list(self._dirs):
            try:
                for log_id in directory.unused_logs():
                    path = directory.log_path(log_id)
                    directory.remove_log(log_id)
                    removed.append(path)
            except (OSError, lmdb.Error) as exc:
                raise BookieIOError("entry log reclaim failed", error=str(exc)) from exc
        return removed

    def compact_entry_logs(self, threshold: float) -> list[CompactedLog]:
        """Compact every closed entry log whose live share of bytes is above 0 and under ``threshold`` (any
        thread; :func:`bookie_server.compaction.compact_entry_logs`, under the append lock a checkpoint's write
        also takes, stopping once :meth:`close` has begun).  The emptied logs are removed by
        :meth:`reclaim_entry_logs`, once the loop thread has dropped its reused index snapshots
        (:meth:`refresh_indexes`)."""
        return compact_entry_logs(self._dirs, self._append_lock, lambda: self._closing, threshold)

    def refresh_indexes(self) -> None:
        """Loop thread: drop the reused index snapshots (a compaction moved rows; the next lookup sees them)."""
        for directory in self._dirs:
            directory.refresh()

    def entry_log_bytes(self) -> int:
        """Bytes of every entry log file of every ledger directory (what compaction and reclaim bring down)."""
        total = 0
        for directory in self._dirs:
            for log_id in directory.log_ids():
                try:
                    total += directory.log_path(log_id).stat().st_size
                except FileNotFoundError:
                    pass
        return total

    def disk_usage(self) -> tuple[int, int]:
        """``(total, free)`` bytes summed over the ledger directories' file systems."""
        seen: set[int] = set()
        total = free = 0
        for root in self.ledger_dirs:
            try:
                dev = os.stat(root).st_dev
            except OSError:
                continue
            if dev in seen:
                continue
            seen.add(dev)
            usage = shutil.disk_usage(root)
            total += usage.total
            free += usage.free
        return total, free

    def iter_entries(self, scope_id: int, ledger_id: int) -> Iterator[tuple[int, bytes]]:
        """``(entry id, bytes)`` of every stored entry of a ledger, in order."""
        for entry_id in self.entry_ids(scope_id, ledger_id):
            yield entry_id, self.get_entry(scope_id, ledger_id, entry_id)
