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
decides when to checkpoint and on which thread.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import eq, itemgetter
from pathlib import Path

import lmdb

from bkspark.errors import BookieError, BookieIOError, MalformedFrameError, NoSuchEntryError, NoSuchLedgerError
from bkspark.protocol.digest import lac_header
from bkspark.protocol.speedups import load_compiled

from bookie_server.journal import (
    CrashPoint,
    JournalPosition,
    JournalRecord,
    RecordType,
    crash_point,
    decode_add_payload,
    write_all,
)

__all__ = [
    "LedgerInfo",
    "LedgerStorage",
    "Snapshot",
    "LedgerKey",
    "EntryKey",
    "CacheKey",
    "cache_key",
    "key_address",
    "key_ledger",
]

log = logging.getLogger("bookie_server.storage")

LedgerKey = tuple[int, int]  # (scope id, ledger id)
EntryKey = tuple[int, int, int]  # (scope id, ledger id, entry id): an entry's address outside this module
#: An entry's key in the write cache, a checkpoint's snapshot and the read cache: :func:`cache_key`.
CacheKey = int

_INDEX_KEY = struct.Struct(">qqq")
_LEDGER_KEY = struct.Struct(">qq")
_LOCATION = struct.Struct(">QQI")  # log id, offset of the entry bytes, length
_LOG_HEADER = struct.Struct(">4sI")
_LOG_MAGIC = b"BKSL"
_LOG_RECORD = struct.Struct(">Iqqq")  # length, scope, ledger, entry; then the entry bytes
_RECORD_LENGTH = struct.Struct(">I")  # the first field of _LOG_RECORD; the key's 24 bytes follow it
_U64 = (1 << 64) - 1
_U128 = (1 << 128) - 1
#: Set in the read-cache key of a range a cold batch read brought (``CachedRange``; its first entry's key
#: otherwise), never in an entry's.
_RANGE_BIT = 1 << 192

_STATE = struct.Struct(">BBqqHI")  # version, flags, lac, last entry, key length, explicit LAC length
_STATE_VERSION = 1
_FLAG_FENCED = 1
_FLAG_HAS_KEY = 2
_FLAG_HAS_LAC = 4
_CHECKPOINT_KEY = b"checkpoint"
_LOG_NAME = re.compile(r"^([0-9a-f]{16})\.log$")
#: The bookie's compiled loops (bookie_server/_speedups.c), or None: read at call time, so tests can turn them
#: off here as BKSPARK_NO_EXTENSIONS=1 does at import.
_speedups = load_compiled("bookie_server._speedups")
#: Bytes read from an entry log at once during batch reads (the next entries usually follow).
_READ_AHEAD = 256 * 1024
#: Entries of a checkpoint written per :func:`log_records` call (docs/bookie.md, "Checkpoints"): the compiled call
#: holds the GIL while it sorts the keys and makes their index rows, 0.25-0.37 us per entry, so a piece keeps the
#: event loop from waiting more than a few ms; a whole 64 MiB write cache of 100 B entries held it 125-185 ms.
CHECKPOINT_PIECE_ENTRIES = 16384
#: Records a run of single reads walks past in the chunk before it asks the index (:meth:`LedgerStorage.read_run_cold`):
#: a striped ledger's next entry on a bookie is at most W - 1 records on (its other entries in between).
RUN_WALK_RECORDS = 4


def cache_key(scope_id: int, ledger_id: int, entry_id: int) -> CacheKey:
    """An entry's cache key: scope, ledger and entry id, each as 64 unsigned bits, in one integer (docs/bookie.md,
    "Python's garbage collector").  Its 24 big-endian bytes are the entry's index key and the key of its entry-log
    record (the bits of ``>qqq``), so the int order is the order of the index and of a checkpoint's records.  An
    int, not a tuple: hashed in one step, made with no container per entry (a group of adds' keys are one
    ``range``), and never tracked by Python's garbage collector, which a write cache of a million tuples kept busy."""
    return (scope_id & _U64) << 128 | (ledger_id & _U64) << 64 | (entry_id & _U64)


def key_address(key: CacheKey) -> EntryKey:
    """The inverse of :func:`cache_key`: ``(scope id, ledger id, entry id)``, signed as stored."""
    return _INDEX_KEY.unpack(key.to_bytes(_INDEX_KEY.size, "big"))  # type: ignore[return-value]


def key_ledger(key: CacheKey) -> int:
    """The part of a cache key (an entry's or a range's) that names its ledger: equal for every key of one ledger,
    and to ``cache_key(scope, ledger, 0) >> 64``."""
    return (key >> 64) & _U128


class CachedRange:
    """What a cold batch read brought from disk, entries ``first..``: one item of the read cache
    (``LedgerStorage.remember_range``).  An entry's bytes never change once written (a recovery add writes the
    same), so a range stays right while its ledger exists."""

    __slots__ = ("first", "entries", "nbytes")

    def __init__(self, first: int, entries: list[bytes]) -> None:
        self.first = first
        self.entries = entries
        self.nbytes = sum(map(len, entries))

    def get(self, key: CacheKey) -> bytes | None:
        """The entry of ``key`` (of this range's ledger) when the range holds it, else None."""
        i = (key & _U64) - self.first
        return self.entries[i] if 0 <= i < len(self.entries) else None


def _cached_size(item: bytes | CachedRange) -> int:
    """The bytes a read-cache item counts for against ``read_cache_max_bytes``."""
    return item.nbytes if isinstance(item, CachedRange) else len(item)


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


def _record_at(data: bytes, pos: int) -> tuple[CacheKey, int, int] | None:
    """The entry-log record starting at ``pos`` of a chunk read from a log: ``(its key, where its entry bytes
    start, where it ends)``, or None when the chunk does not hold it whole.  The one parser of records met by
    walking a log (read-ahead of single reads, consecutive entries of batch reads); a record found through the
    index is checked against its location instead (``LedgerStorage._read_record``)."""
    end_of_header = pos + _LOG_RECORD.size
    if pos < 0 or end_of_header > len(data):
        return None
    end = end_of_header + _RECORD_LENGTH.unpack_from(data, pos)[0]
    if end > len(data):
        return None
    return int.from_bytes(data[pos + _RECORD_LENGTH.size : end_of_header], "big"), end_of_header, end


#: Where a blob of this many bytes will land in an entry log: ``(log id, offset)``.
Place = Callable[[int], tuple[int, int]]
#: An index row: the entry key's bytes and its location's bytes.
IndexRow = tuple[bytes, bytes]


def log_records(keys: list[CacheKey], entries: dict[CacheKey, bytes], place: Place) -> tuple[bytes, list[IndexRow]]:
    """The entry-log records of ``keys`` (sorted, so a ledger's entries are contiguous) as one blob, and their
    index rows; ``place(len(blob))`` says where the blob will be appended.

    The compiled loop when it is built (the checkpoint's hottest code; docs/bookie.md, "Checkpoints"),
    else, and for anything it hands back, :func:`log_records_reference`.
    """
    if _speedups is not None:
        built = _speedups.log_records(keys, entries, place)
        if built is not None:
            return built
    return log_records_reference(keys, entries, place)


def log_records_reference(
    keys: list[CacheKey], entries: dict[CacheKey, bytes], place: Place
) -> tuple[bytes, list[IndexRow]]:
    """The pure-Python :func:`log_records`: the tested reference of the compiled one."""
    keys = sorted(keys)
    parts: list[bytes] = []
    relative: list[tuple[bytes, int, int]] = []
    pos = 0
    for key in keys:
        data = entries[key]
        key_bytes = key.to_bytes(_INDEX_KEY.size, "big")  # an entry's key, so < 2**192: OverflowError else
        parts.append(_RECORD_LENGTH.pack(len(data)) + key_bytes)
        parts.append(data)
        pos += _LOG_RECORD.size
        relative.append((key_bytes, pos, len(data)))
        pos += len(data)
    log_id, start = place(pos)
    rows = [(key_bytes, _LOCATION.pack(log_id, start + rel, length)) for key_bytes, rel, length in relative]
    return b"".join(parts), rows


class _Directory:
    """One ledger directory: entry log files plus an LMDB index."""

    def __init__(self, root: Path, *, map_size: int, entry_log_size_limit: int) -> None:
        self.root = root
        self.current = root / "current"
        self.logs_dir = self.current / "entrylogs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.entry_log_size_limit = entry_log_size_limit
        try:
            self.env = lmdb.open(
                str(self.current / "index"),
                map_size=map_size,
                max_dbs=4,
                subdir=True,
                sync=True,
                metasync=True,
                readahead=False,
            )
        except lmdb.Error as exc:
            raise BookieIOError("cannot open the entry index", path=str(self.current / "index"), error=str(exc)) from exc
        self.index_db = self.env.open_db(b"index")
        self.ledgers_db = self.env.open_db(b"ledgers")
        self.meta_db = self.env.open_db(b"meta")
        self._read_fds: dict[int, int] = {}
        self._fd_lock = threading.Lock()
        self._read_txn: lmdb.Transaction | None = None
        logs = self.log_ids()
        self.log_id = (logs[-1] + 1) if logs else 1
        self._write_fd = -1
        self._write_size = 0
        #: Set until a new log has its header and a durable name: the next append makes it again.
        self._roll_next = False
        #: Set when an append failed: bytes of it may follow the end this directory counts (``_write_size``).
        self._end_unknown = False
        #: While a checkpoint writes here: the log it began in.  It and every later log may hold its records, whose
        #: index rows are not committed yet, so :meth:`unused_logs` leaves them alone.
        self.checkpoint_first_log: int | None = None

    def index_get(self, key: bytes) -> bytes | None:
        """Look a key up in the index through a reused read transaction (loop thread only).

        Opening a transaction per lookup costs more than the lookup; the snapshot is
        refreshed by :meth:`refresh` after every checkpoint, so it never misses
        entries that left the write cache.
        """
        txn = self._read_txn
        if txn is None:
            txn = self._read_txn = self.env.begin(db=self.index_db, buffers=False)
        return txn.get(key)

    def refresh(self) -> None:
        """Drop the reused read transaction (the next lookup sees the latest commit)."""
        if self._read_txn is not None:
            self._read_txn.abort()
            self._read_txn = None

    def log_ids(self) -> list[int]:
        ids = []
        for name in os.listdir(self.logs_dir):
            match = _LOG_NAME.match(name)
            if match:
                ids.append(int(match.group(1), 16))
        return sorted(ids)

    def log_path(self, log_id: int) -> Path:
        return self.logs_dir / f"{log_id:016x}.log"

    def place(self, size: int) -> tuple[int, int]:
        """Where ``size`` bytes appended next will land, ``(log id, start offset)``: the current entry log,
        rolled first when they would not fit (the next :meth:`append` of that size lands there)."""
        if self._end_unknown and not self._roll_next:
            self._cut_back()
        if (
            self._write_fd < 0
            or self._roll_next
            or (self._write_size + size > self.entry_log_size_limit and self._write_size > _LOG_HEADER.size)
        ):
            self._roll()
        return self.log_id, self._write_size

    def append(self, blob: bytes) -> tuple[int, int]:
        """Append to the current entry log (rolling it when full); return ``(log id, start offset)``.

        A write that fails may have left part of the blob in the log (a disk that filled up halfway), so the
        offsets this directory counts no longer match the file's: the next append cuts the log back to them
        (:meth:`_cut_back`), or starts a new log when it cannot.
        """
        self.place(len(blob))
        start = self._write_size
        try:
            write_all(self._write_fd, blob)
        except BaseException:
            self._end_unknown = True
            raise
        self._write_size += len(blob)
        return self.log_id, start

    def sync(self) -> None:
        if self._write_fd >= 0:
            os.fsync(self._write_fd)

    def _cut_back(self) -> None:
        """After a failed append: cut the log back to the end this directory counts (what the write left after it
        is in no index row), so that the retry appends to the same log at the offsets it computed.  A checkpoint
        retried on a disk that stays full used to start a new log every time (docs/bookie.md, "Failures between
        the steps").  When the cut fails too, the next :meth:`place` rolls to a new log."""
        try:
            os.ftruncate(self._write_fd, self._write_size)
        except OSError as exc:
            log.warning(
                "cannot cut entry log %d back to %d bytes (%s): starting a new one", self.log_id, self._write_size, exc
            )
            self._roll_next = True
        self._end_unknown = False

    def _roll(self) -> None:
        """Start the next entry log.  Any step may fail (a full or broken disk): the state left behind makes the
        next :meth:`place` try again, never write through a closed descriptor or at a wrong offset.  A log that
        holds no record yet (its making failed) is made again in place, not left behind for a new file."""
        if self._write_fd >= 0 and self._write_size > _LOG_HEADER.size:
            os.fsync(self._write_fd)
            fd, self._write_fd = self._write_fd, -1
            os.close(fd)
            self.log_id += 1
        self._roll_next = True  # until the header is in and the log's name is durable
        self._end_unknown = False
        if self._write_fd < 0:
            path = self.log_path(self.log_id)
            self._write_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self._write_size = 0
        os.ftruncate(self._write_fd, 0)  # what a failed making of this log left
        write_all(self._write_fd, _LOG_HEADER.pack(_LOG_MAGIC, 1))
        self._write_size = _LOG_HEADER.size
        dfd = os.open(self.logs_dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self._roll_next = False

    def read(self, log_id: int, offset: int, length: int) -> bytes:
        with self._fd_lock:
            fd = self._read_fds.get(log_id)
            if fd is None:
                try:
                    fd = os.open(self.log_path(log_id), os.O_RDONLY)
                except FileNotFoundError as exc:
                    raise BookieIOError("entry log is missing", log_id=log_id) from exc
                self._read_fds[log_id] = fd
        return os.pread(fd, length, offset)

    def unused_logs(self) -> list[int]:
        """Entry logs no index row points into (any thread: its own read transaction).

        The log being appended to is never reported, nor any log a running checkpoint has
        written (it may roll past one before its index rows are committed).
        """
        # Both read *before* the index snapshot, the log id first: a checkpoint pins its first log before it appends
        # or rolls, and unpins it only once its rows are committed, so every older log got its last append in a
        # checkpoint whose rows this snapshot holds.
        current = self.log_id
        pinned = self.checkpoint_first_log
        if pinned is not None:
            current = min(current, pinned)
        referenced: set[int] = set()
        with self.env.begin(db=self.index_db) as txn:
            for value in txn.cursor().iternext(keys=False, values=True):
                if len(value) == _LOCATION.size:
                    referenced.add(_LOCATION.unpack(value)[0])
        return [log_id for log_id in self.log_ids() if log_id < current and log_id not in referenced]

    def remove_log(self, log_id: int) -> None:
        """Delete an entry log file (after :meth:`unused_logs` said nothing refers to it)."""
        with self._fd_lock:
            fd = self._read_fds.pop(log_id, None)
            if fd is not None:
                os.close(fd)
        try:
            self.log_path(log_id).unlink()
        except FileNotFoundError:
            pass

    def close(self) -> None:
        self.refresh()
        if self._write_fd >= 0:
            os.fsync(self._write_fd)
            os.close(self._write_fd)
            self._write_fd = -1
        with self._fd_lock:
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()
        self.env.close()


class LedgerStorage:
    """Entries and ledger state of a bookie, over one or more ledger directories."""

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
        self._dirs: list[_Directory] = []
        self._ledgers: dict[LedgerKey, LedgerInfo] = {}
        self._dirty: set[LedgerKey] = set()
        self._write_cache: dict[CacheKey, bytes] = {}
        self._write_cache_bytes = 0
        self._flushing: dict[CacheKey, bytes] = {}
        #: Entries (cache key -> bytes) and the ranges of cold batch reads (``_RANGE_BIT`` | their first entry's
        #: key -> CachedRange), least recently used first, all counted in ``_read_cache_bytes`` against
        #: ``read_cache_max_bytes``.
        self._read_cache: OrderedDict[CacheKey, bytes | CachedRange] = OrderedDict()
        self._read_cache_bytes = 0
        self._pending_deletes: set[LedgerKey] = set()
        self.checkpoint_mark = JournalPosition(0, 0)

    # -- life cycle ---------------------------------------------------------------------
    def open(self) -> None:
        """Open every directory's index and load all ledger states."""
        marks: list[JournalPosition] = []
        for root in self.ledger_dirs:
            directory = _Directory(root, map_size=self._map_size, entry_log_size_limit=self._entry_log_size_limit)
            self._dirs.append(directory)
            try:
                with directory.env.begin() as txn:
                    for key, value in txn.cursor(db=directory.ledgers_db):
                        if len(key) != _LEDGER_KEY.size:
                            raise BookieIOError("ledger state key is corrupt", directory=str(root))
                        self._ledgers[_LEDGER_KEY.unpack(key)] = LedgerInfo.unpack(value)
                    mark = txn.get(_CHECKPOINT_KEY, db=directory.meta_db)
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
        """Close indexes and files (run a checkpoint first to keep the write cache)."""
        for directory in self._dirs:
            directory.close()
        self._dirs.clear()

    def _dir_for(self, scope_id: int, ledger_id: int) -> _Directory:
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
                self._read_cache_bytes -= _cached_size(read_cache.pop(key))
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

    def read_cold(self, address: EntryKey, max_entries: int = 1) -> list[tuple[CacheKey, bytes]]:
        """Read thread: ``[(cache key, data)]`` for the entry at ``address`` (what :meth:`locate` gave) when only
        the disk holds it (docs/bookie.md, "Reads"): its own
        index read transaction, the entry log read under the directory's fd lock, no cache touched (the loop
        thread puts what it found in the read cache: :meth:`remember`).  Raises as :meth:`get_entry`.

        Then BookKeeper's read-ahead (``dbStorage_readAheadCacheBatchSize``): the records that follow the entry
        in its entry log while they hold later entries of the same ledger, up to ``max_entries`` in all, taken
        from the bytes the first read brought (no further I/O).  A checkpoint writes each ledger's entries in
        order, so the pipelined single reads of a scan find the next ones in the read cache."""
        key = cache_key(*address)
        directory, location = self._index_location(key, own_transaction=True)
        if max_entries <= 1:  # no read-ahead: the record alone, not a 256 KiB chunk
            return [(key, self._read_logged(directory, location, key, None))]
        chunk: list[object] = [None, 0, b""]
        found = [(key, self._read_logged(directory, location, key, chunk))]
        _log_id, start, data = chunk
        assert isinstance(start, int) and isinstance(data, bytes)
        pos = _LOCATION.unpack(location)[1] + len(found[0][1]) - start  # where the entry's record ends
        ledger, last = key_ledger(key), key
        while len(found) < max_entries:
            record = _record_at(data, pos)
            if record is None or key_ledger(record[0]) != ledger or record[0] <= last:
                break  # another ledger's record, or one the chunk does not hold whole
            last, body, pos = record
            found.append((last, data[body:pos]))
        return found

    def remember(self, keys_and_data: Iterable[tuple[CacheKey, bytes]]) -> None:
        """Loop thread: entries a read thread brought from disk go into the read cache, unless the ledger was
        deleted meanwhile."""
        for key, data in keys_and_data:
            if key_address(key)[:2] in self._ledgers:
                self._cache_read(key, data)

    def remember_run(
        self, scope_id: int, reads: Sequence[tuple[int, int]], found: Sequence[bytes | BookieError]
    ) -> None:
        """Loop thread: the entries a run's job brought from disk (:meth:`read_run_cold`; ``found[i]`` for
        ``reads[i]``) go into the read cache, but not those of a ledger that would not fit there at their mean
        size (the rule of :meth:`remember_range`: a scan of it would evict its own entries before a second pass
        reached them), nor of one deleted meanwhile."""
        sizes: dict[int, list[int]] = {}
        for (ledger_id, _entry_id), data in zip(reads, found):
            if isinstance(data, bytes):
                held = sizes.setdefault(ledger_id, [0, 0])
                held[0] += len(data)
                held[1] += 1
        fits = set()
        for ledger_id, (nbytes, count) in sizes.items():
            info = self._ledgers.get((scope_id, ledger_id))
            if info is not None and nbytes * (info.last_entry + 1) <= self.read_cache_max_bytes * count:
                fits.add(ledger_id)
        if fits:
            for (ledger_id, entry_id), data in zip(reads, found):
                if ledger_id in fits and isinstance(data, bytes):
                    self._cache_read(cache_key(scope_id, ledger_id, entry_id), data)

    def remember_range(self, scope_id: int, ledger_id: int, first: int, entries: list[bytes]) -> None:
        """Loop thread: the entries ``first..`` a cold batch read brought go into the read cache as one item,
        so a batch read that starts at ``first`` again is answered from memory (docs/bookie.md, "Reads"); one
        insert per batch, not per entry.  Nothing when the ledger was deleted meanwhile, nor for a ledger whose
        entries, at this range's mean size, would not fit the read cache: read in order, it would evict its own
        ranges before a second pass reached them, and the cache's churn cost CPU for no hit."""
        info = self._ledgers.get((scope_id, ledger_id))
        if not entries or info is None:
            return
        cached = CachedRange(first, entries)
        if cached.nbytes * (info.last_entry + 1) > self.read_cache_max_bytes * len(entries):
            return
        self._cache_read(_RANGE_BIT | cache_key(scope_id, ledger_id, first), cached)

    def _cache_read(self, key: CacheKey, data: bytes | CachedRange) -> None:
        size = _cached_size(data)
        if size <= self.read_cache_max_bytes // 4:
            held = self._read_cache.pop(key, None)  # read again (read-aheads overlap): counted once
            if held is not None:
                self._read_cache_bytes -= _cached_size(held)
            self._read_cache[key] = data
            self._read_cache_bytes += size
            while self._read_cache_bytes > self.read_cache_max_bytes:
                _, evicted = self._read_cache.popitem(last=False)
                self._read_cache_bytes -= _cached_size(evicted)

    def has_entry(self, scope_id: int, ledger_id: int, entry_id: int) -> bool:
        """True when the entry is stored here (no exceptions)."""
        try:
            self.get_entry(scope_id, ledger_id, entry_id)
            return True
        except (NoSuchEntryError, NoSuchLedgerError):
            return False

    def _read_from_disk(self, key: CacheKey, own_transaction: bool = False) -> bytes:
        """Index lookup, then the entry-log record: through the loop thread's reused read transaction, or
        (``own_transaction``, any thread) through a new one.  Raises ENOENTRY, or EIO for index or log errors."""
        directory, location = self._index_location(key, own_transaction)
        return self._read_logged(directory, location, key, None)

    def _index_location(self, key: CacheKey, own_transaction: bool) -> tuple[_Directory, bytes]:
        """The entry's directory and index value (see :meth:`_read_from_disk`); ENOENTRY, or EIO."""
        scope_id, ledger_id, entry_id = key_address(key)
        directory = self._dir_for(scope_id, ledger_id)
        packed = key.to_bytes(_INDEX_KEY.size, "big")
        try:
            if own_transaction:
                with directory.env.begin(db=directory.index_db, buffers=False) as txn:
                    location = txn.get(packed)
            else:
                location = directory.index_get(packed)
        except lmdb.Error as exc:
            raise BookieIOError("entry index read failed", error=str(exc)) from exc
        if location is None:
            raise NoSuchEntryError(ledger_id=ledger_id, entry_id=entry_id)
        return directory, location

    def _read_logged(self, directory: _Directory, location: bytes, key: CacheKey, chunk: list[object] | None) -> bytes:
        """:meth:`_read_record`, its OSError answered as EIO."""
        try:
            return self._read_record(directory, location, key, chunk)
        except OSError as exc:
            _, ledger_id, entry_id = key_address(key)
            raise BookieIOError(
                "entry log read failed", ledger_id=ledger_id, entry_id=entry_id, error=str(exc)
            ) from exc

    @staticmethod
    def _read_record(
        directory: _Directory, location: bytes, key: CacheKey, chunk: list[object] | None
    ) -> bytes:
        """Read and check one entry-log record; ``chunk`` is a reusable read-ahead buffer
        ``[log id, start offset, bytes]`` (sequential entries of a ledger sit next to each other)."""

        def damaged(problem: str, **details: object) -> BookieIOError:
            _, ledger_id, entry_id = key_address(key)
            return BookieIOError(problem, ledger_id=ledger_id, entry_id=entry_id, **details)

        if len(location) != _LOCATION.size:
            raise damaged("entry index is corrupt")
        log_id, offset, length = _LOCATION.unpack(location)
        record_offset = offset - _LOG_RECORD.size
        if record_offset < _LOG_HEADER.size:
            raise damaged("entry index is corrupt")
        need = _LOG_RECORD.size + length
        raw: bytes | memoryview
        if chunk is None:
            raw = directory.read(log_id, record_offset, need)
        else:
            c_log, c_start, c_data = chunk
            assert isinstance(c_start, int) and isinstance(c_data, bytes)
            if c_log != log_id or record_offset < c_start or record_offset + need > c_start + len(c_data):
                c_data = directory.read(log_id, record_offset, max(need, _READ_AHEAD))
                chunk[:] = [log_id, record_offset, c_data]
                c_start = record_offset
            raw = memoryview(c_data)[record_offset - c_start : record_offset - c_start + need]
        if len(raw) != need:
            raise damaged("entry log is truncated", log_id=log_id)
        if (
            _RECORD_LENGTH.unpack_from(raw, 0)[0] != length
            or int.from_bytes(raw[_RECORD_LENGTH.size : _LOG_RECORD.size], "big") != key
        ):
            raise damaged("entry index points at the wrong record")
        return bytes(raw[_LOG_RECORD.size :])

    def get_range(self, scope_id: int, ledger_id: int, start: int, max_count: int, budget: int) -> list[bytes]:
        """Consecutive entries from ``start`` for a batch read, on the calling thread (disk included).

        The rules of every range (:meth:`_collect`): the first entry is always returned (its errors are
        raised: ENOLEDGER, ENOENTRY, EIO); each later one only while the running sum of ``len + 4`` stays
        within ``budget``; the range ends at the first entry that is missing or unreadable.  What the disk gave
        stays out of the read cache (the bookie's batch reads, :meth:`range_in_memory` then :meth:`range_cold`,
        put it there as one range).
        """
        self._ledger_or_raise(scope_id, ledger_id)
        directory = self._dir_for(scope_id, ledger_id)
        chunk: list[object] = [None, 0, b""]

        def fetch(key: CacheKey) -> bytes:
            data = self._in_memory(key)
            if data is None:
                location = directory.index_get(key.to_bytes(_INDEX_KEY.size, "big"))
                if location is None:
                    raise NoSuchEntryError(ledger_id=ledger_id, entry_id=key_address(key)[2])
                data = self._read_record(directory, location, key, chunk)
            return data

        out: list[bytes] = []
        self._collect(scope_id, ledger_id, start, start + max_count, budget, out, 0, fetch)
        return out

    def range_in_memory(
        self, scope_id: int, ledger_id: int, start: int, max_count: int, budget: int
    ) -> tuple[list[bytes], int, int | None]:
        """The memory part of a batch read (loop thread): ``(entries, bytes used, next entry id)``, where the
        next id is the first entry only the disk has (:meth:`range_cold` continues from it), or None when the
        range is complete.  Same rules and errors as :meth:`get_range`."""
        self._ledger_or_raise(scope_id, ledger_id)
        out: list[bytes] = []
        next_id, stop, used = start, start + max_count, 0
        read_cache = self._read_cache
        while True:  # entries memory holds one by one, then, where it lacks one, a range starting there
            next_id, used = self._collect(scope_id, ledger_id, next_id, stop, budget, out, used, self._in_memory)
            if next_id >= stop:
                return out, used, None
            range_key = _RANGE_BIT | cache_key(scope_id, ledger_id, next_id)
            found = read_cache.get(range_key)
            if not isinstance(found, CachedRange):
                return out, used, next_id
            read_cache.move_to_end(range_key)
            next_id, used = self._collect(scope_id, ledger_id, next_id, stop, budget, out, used, found.get)
            if next_id >= stop:
                return out, used, None

    def range_cold(
        self, scope_id: int, ledger_id: int, start: int, stop: int, budget: int, have: list[bytes], used: int
    ) -> list[bytes]:
        """The disk part of a batch read, for a read thread: the ``have`` entries already collected (``used``
        bytes of ``budget``) followed by entries ``start..stop-1``, from one index read transaction with the
        entry logs' read-ahead.  No cache is touched here; the loop thread then puts the entries from disk into
        the read cache as one range (:meth:`remember_range`; docs/bookie.md, "Reads").  An entry only the write
        cache holds ends the range there (a shorter batch, as a missing entry does)."""
        directory = self._dir_for(scope_id, ledger_id)
        chunk: list[object] = [None, 0, b""]
        #: Where the last record read ends in the chunk: a checkpoint writes a ledger's entries in order, so the
        #: next entry's record usually starts there, and its key in the record's header says so (no index read).
        after = [-1]
        out = list(have)
        try:
            with directory.env.begin(db=directory.index_db, buffers=False) as txn:

                def fetch(key: CacheKey) -> bytes:
                    data = chunk[2]
                    assert isinstance(data, bytes)
                    record = _record_at(data, after[0]) if after[0] >= 0 else None
                    if record is not None and record[0] == key:
                        _key, body, after[0] = record
                        return data[body : after[0]]
                    location = txn.get(key.to_bytes(_INDEX_KEY.size, "big"))
                    if location is None:
                        raise NoSuchEntryError(ledger_id=ledger_id, entry_id=key_address(key)[2])
                    entry = self._read_record(directory, location, key, chunk)
                    start = chunk[1]
                    assert isinstance(start, int)
                    after[0] = _LOCATION.unpack(location)[1] + len(entry) - start
                    return entry

                self._collect(scope_id, ledger_id, start, stop, budget, out, used, fetch)
        except lmdb.Error as exc:
            if not out:
                raise BookieIOError("entry index read failed", error=str(exc)) from exc
        return out

    def read_run_cold(
        self, scope_id: int, reads: Sequence[tuple[int, int]], budget: int
    ) -> list[bytes | BookieError]:
        """The disk part of a run of single reads, for a read thread: for each ``(ledger id, entry id)`` in
        order, its bytes or its error (ENOENTRY, EIO), while the bytes stay within ``budget`` (the first
        always; the caller sends the rest again).  Per directory one index read transaction and one entry-log
        chunk reused from read to read, and the walk of :meth:`range_cold`: a record a few records after the
        last one read that carries the wanted key needs no index read (a striped ledger's next entry on this
        bookie is one or two records on).  No cache is touched (docs/bookie.md, "Runs of single reads")."""
        out: list[bytes | BookieError] = []
        used = 0
        #: Per directory: its index read transaction, its chunk ``[log id, start, bytes]`` (log ids are a
        #: directory's own) and where the last record read ends in that chunk.
        state: dict[int, tuple[lmdb.Transaction, list[object], list[int]]] = {}
        try:
            for ledger_id, entry_id in reads:
                if out and used >= budget:
                    break
                key = cache_key(scope_id, ledger_id, entry_id)
                directory = self._dir_for(scope_id, ledger_id)
                held = state.get(id(directory))
                found: bytes | BookieError | None = None
                if held is not None:
                    _txn, chunk, after = held
                    data = chunk[2]
                    assert isinstance(data, bytes)
                    pos = after[0]
                    for _ in range(RUN_WALK_RECORDS):
                        record = _record_at(data, pos) if pos >= 0 else None
                        if record is None or record[0] > key:
                            break
                        if record[0] == key:
                            found, after[0] = data[record[1] : record[2]], record[2]
                            break
                        pos = record[2]
                if found is None:
                    found = self._run_read_indexed(directory, ledger_id, entry_id, key, state)
                if isinstance(found, bytes):
                    used += len(found)
                out.append(found)
        finally:
            for txn, _chunk, _after in state.values():
                txn.abort()
        return out

    def _run_read_indexed(
        self,
        directory: _Directory,
        ledger_id: int,
        entry_id: int,
        key: CacheKey,
        state: dict[int, tuple[lmdb.Transaction, list[object], list[int]]],
    ) -> bytes | BookieError:
        """:meth:`read_run_cold`'s read of one entry (``key`` its cache key) through the index: its bytes, or its
        error."""
        try:
            held = state.get(id(directory))
            if held is None:
                txn = directory.env.begin(db=directory.index_db, buffers=False)
                held = state[id(directory)] = (txn, [None, 0, b""], [-1])
            txn, chunk, after = held
            location = txn.get(key.to_bytes(_INDEX_KEY.size, "big"))
        except lmdb.Error as exc:
            return BookieIOError("entry index read failed", error=str(exc))
        if location is None:
            return NoSuchEntryError(ledger_id=ledger_id, entry_id=entry_id)
        try:
            data = self._read_logged(directory, location, key, chunk)
        except BookieError as exc:
            after[0] = -1
            return exc
        start = chunk[1]
        assert isinstance(start, int)
        after[0] = _LOCATION.unpack(location)[1] + len(data) - start
        return data

    @staticmethod
    def _collect(
        scope_id: int,
        ledger_id: int,
        start: int,
        stop: int,
        budget: int,
        out: list[bytes],
        used: int,
        fetch: Callable[[CacheKey], bytes | None],
    ) -> tuple[int, int]:
        """The one home of a batch read's range rules: append entries ``start..stop-1`` to ``out`` while
        ``fetch`` gives them and ``budget`` holds (``len + 4`` each, the first always).  ``fetch`` returns
        None to stop at an entry another path must read.  An error of the range's first entry is raised; a
        later one ends the range.  Returns ``(the id where it stopped, bytes used)``."""
        key_of_entry_0 = cache_key(scope_id, ledger_id, 0)
        for entry_id in range(start, stop):
            try:
                data = fetch(key_of_entry_0 | (entry_id & _U64))
            except lmdb.Error as exc:
                if not out:
                    raise BookieIOError("entry index read failed", error=str(exc)) from exc
                return stop, used
            except (NoSuchEntryError, BookieIOError, OSError):
                if not out:
                    raise
                return stop, used
            if data is None:
                return entry_id, used
            size = len(data) + 4
            if out and used + size > budget:
                return stop, used
            out.append(data)
            used += size
        return stop, used

    def _ledger_or_raise(self, scope_id: int, ledger_id: int) -> None:
        if (scope_id, ledger_id) not in self._ledgers:
            raise NoSuchLedgerError(ledger_id=ledger_id, scope_id=scope_id)

    def entry_ids(self, scope_id: int, ledger_id: int) -> list[int]:
        """Sorted ids of every entry stored for the ledger (index plus caches)."""
        if (scope_id, ledger_id) not in self._ledgers:
            raise NoSuchLedgerError(ledger_id=ledger_id, scope_id=scope_id)
        ids: set[int] = set()
        directory = self._dir_for(scope_id, ledger_id)
        prefix = _LEDGER_KEY.pack(scope_id, ledger_id)
        with directory.env.begin(db=directory.index_db) as txn:
            cursor = txn.cursor()
            if cursor.set_range(prefix):
                for key in cursor.iternext(keys=True, values=False):
                    if key[:16] != prefix:
                        break
                    ids.add(_INDEX_KEY.unpack(key)[2])
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
            self._read_cache_bytes -= _cached_size(self._read_cache.pop(gone))
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
        """Write a snapshot to entry logs and the index (any thread; the slow part)."""
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

                    def place(size: int, directory: _Directory = directory) -> tuple[int, int]:
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
                        txn.delete(_LEDGER_KEY.pack(scope_id, ledger_id), db=directory.ledgers_db)
                        prefix = _LEDGER_KEY.pack(scope_id, ledger_id)
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
                            txn.put(_LEDGER_KEY.pack(scope_id, ledger_id), state, db=directory.ledgers_db)
                    txn.put(_CHECKPOINT_KEY, snapshot.mark.pack(), db=directory.meta_db)
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
        never touched (see :meth:`_Directory.unused_logs`).
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
