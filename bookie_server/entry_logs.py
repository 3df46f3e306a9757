"""Entry logs and the entry index of one ledger directory, and the formats they share with the caches.

An entry's **key** is one integer (:func:`cache_key`): scope, ledger and entry id as 64 unsigned bits each.  Its 24
big-endian bytes are the entry's key in the LMDB index and in its entry-log record, so the three agree in order.
An **entry log** is a file of records, ``length, key, entry bytes`` (:data:`LOG_RECORD`), after an 8-byte header;
the index maps a key to ``(log id, offset of the entry bytes, length)`` (:data:`LOCATION`).  A checkpoint writes a
ledger's entries in order, so the next entry's record usually follows the last one read (:func:`record_at`).

:class:`LedgerDirectory` owns one directory's files: the current entry log it appends to (rolled at
``logSizeLimit``, cut back after a failed append), the read descriptors shared by the read threads, and the LMDB
environment.  The rules of what goes where (write cache, checkpoints, reads) are :class:`LedgerStorage`'s
(bookie_server/storage.py); this module knows nothing of them.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb

from bkspark.errors import BookieIOError
from bkspark.protocol.speedups import load_compiled

from bookie_server.journal import write_all

__all__ = [
    "CHECKPOINT_KEY",
    "INDEX_KEY",
    "LEDGER_KEY",
    "LOCATION",
    "LOG_RECORD",
    "READ_AHEAD",
    "CacheKey",
    "EntryKey",
    "IndexReadTransaction",
    "IndexRow",
    "LedgerDirectory",
    "LedgerKey",
    "Place",
    "U64",
    "cache_key",
    "key_address",
    "key_ledger",
    "log_records",
    "log_records_reference",
    "record_at",
]

log = logging.getLogger("bookie_server.storage")

LedgerKey = tuple[int, int]  # (scope id, ledger id)
EntryKey = tuple[int, int, int]  # (scope id, ledger id, entry id): an entry's address outside this module
#: An entry's key in the write cache, a checkpoint's snapshot and the read cache: :func:`cache_key`.
CacheKey = int

INDEX_KEY = struct.Struct(">qqq")
LEDGER_KEY = struct.Struct(">qq")
LOCATION = struct.Struct(">QQI")  # log id, offset of the entry bytes, length
LOG_HEADER = struct.Struct(">4sI")
LOG_MAGIC = b"BKSL"
LOG_RECORD = struct.Struct(">Iqqq")  # length, scope, ledger, entry; then the entry bytes
RECORD_LENGTH = struct.Struct(">I")  # the first field of LOG_RECORD; the key's 24 bytes follow it
U64 = (1 << 64) - 1
U128 = (1 << 128) - 1
CHECKPOINT_KEY = b"checkpoint"
LOG_NAME = re.compile(r"^([0-9a-f]{16})\.log$")
#: The bookie's compiled loops (bookie_server/_speedups.c), or None: read at call time, so tests can turn them
#: off here as BKSPARK_NO_EXTENSIONS=1 does at import.
_speedups = load_compiled("bookie_server._speedups")
#: Bytes read from an entry log at once during batch reads (the next entries usually follow).
READ_AHEAD = 256 * 1024


class IndexReadTransaction:
    """A read transaction on a ledger directory's entry index that gives its LMDB reader slot back when it ends.

    py-lmdb ends a read transaction (``abort``, ``commit``, the end of a ``with``) by resetting it, which keeps its
    slot of the reader table until the Python object itself is freed (docs/bookie.md, "The entry index's reader
    slots").  Any reference left to it, above all a frame in the traceback of an exception raised while it was
    open (an ENOENTRY read, kept by the future that carries it), kept the slot taken, and a bookie's 126 slots ran
    out.  This holder is the only owner of the transaction and drops it when it ends, so the slot is freed then
    (or kept as py-lmdb's one reusable spare) whoever still references the holder.  Cursors are invalidated with the
    transaction and let go of it too.  One thread at a time, as LMDB asks."""

    __slots__ = ("_txn",)

    def __init__(self, txn: lmdb.Transaction) -> None:
        self._txn: lmdb.Transaction | None = txn

    def _open(self) -> lmdb.Transaction:
        txn = self._txn
        if txn is None:
            raise lmdb.Error("the entry index read transaction has ended")
        return txn

    def get(self, key: bytes, db: Any = None) -> bytes | None:
        """The value of ``key`` in the entry table (or in ``db``, a table of the same environment), or None."""
        return self._open().get(key) if db is None else self._open().get(key, db=db)

    def cursor(self, db: Any = None) -> lmdb.Cursor:
        """A cursor on the entry table (or ``db``), valid until the transaction ends."""
        return self._open().cursor() if db is None else self._open().cursor(db=db)

    def end(self) -> None:
        """End the transaction and free its reader slot; again: nothing."""
        txn, self._txn = self._txn, None
        if txn is not None:
            txn.abort()

    abort = end

    def __enter__(self) -> "IndexReadTransaction":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.end()


def cache_key(scope_id: int, ledger_id: int, entry_id: int) -> CacheKey:
    """An entry's cache key: scope, ledger and entry id, each as 64 unsigned bits, in one integer (docs/bookie.md,
    "Python's garbage collector").  Its 24 big-endian bytes are the entry's index key and the key of its entry-log
    record (the bits of ``>qqq``), so the int order is the order of the index and of a checkpoint's records.  An
    int, not a tuple: hashed in one step, made with no container per entry (a group of adds' keys are one
    ``range``), and never tracked by Python's garbage collector, which a write cache of a million tuples kept busy."""
    return (scope_id & U64) << 128 | (ledger_id & U64) << 64 | (entry_id & U64)


def key_address(key: CacheKey) -> EntryKey:
    """The inverse of :func:`cache_key`: ``(scope id, ledger id, entry id)``, signed as stored."""
    return INDEX_KEY.unpack(key.to_bytes(INDEX_KEY.size, "big"))  # type: ignore[return-value]


def key_ledger(key: CacheKey) -> int:
    """The part of a cache key (an entry's or a range's) that names its ledger: equal for every key of one ledger,
    and to ``cache_key(scope, ledger, 0) >> 64``."""
    return (key >> 64) & U128


def record_at(data: bytes, pos: int) -> tuple[CacheKey, int, int] | None:
    """The entry-log record starting at ``pos`` of a chunk read from a log: ``(its key, where its entry bytes
    start, where it ends)``, or None when the chunk does not hold it whole.  The one parser of records met by
    walking a log (read-ahead of single reads, consecutive entries of batch reads); a record found through the
    index is checked against its location instead (:meth:`LedgerDirectory.read_record`)."""
    end_of_header = pos + LOG_RECORD.size
    if pos < 0 or end_of_header > len(data):
        return None
    end = end_of_header + RECORD_LENGTH.unpack_from(data, pos)[0]
    if end > len(data):
        return None
    return int.from_bytes(data[pos + RECORD_LENGTH.size : end_of_header], "big"), end_of_header, end


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
        key_bytes = key.to_bytes(INDEX_KEY.size, "big")  # an entry's key, so < 2**192: OverflowError else
        parts.append(RECORD_LENGTH.pack(len(data)) + key_bytes)
        parts.append(data)
        pos += LOG_RECORD.size
        relative.append((key_bytes, pos, len(data)))
        pos += len(data)
    log_id, start = place(pos)
    rows = [(key_bytes, LOCATION.pack(log_id, start + rel, length)) for key_bytes, rel, length in relative]
    return b"".join(parts), rows


class LedgerDirectory:
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
        # Slots of LMDB's reader table that a process killed while reading left taken (see :meth:`begin_read`).
        freed = self.env.reader_check()
        if freed:
            log.warning("the entry index of %s: freed %d reader slots left by dead processes", root, freed)
        self.index_db = self.env.open_db(b"index")
        self.ledgers_db = self.env.open_db(b"ledgers")
        self.meta_db = self.env.open_db(b"meta")
        self._read_fds: dict[int, int] = {}
        self._fd_lock = threading.Lock()
        self._read_txn: IndexReadTransaction | None = None
        logs = self.log_ids()
        self.log_id = (logs[-1] + 1) if logs else 1
        self._write_fd = -1
        self._write_size = 0
        #: Set until a new log has its header and a durable name: the next append makes it again.
        self._roll_next = False
        #: Set when an append failed: bytes of it may follow the end this directory counts (``_write_size``).
        self._end_unknown = False
        #: While a checkpoint (or a compaction, bookie_server/storage.py) writes here: the log it began in.  It and every later log may hold its records, whose
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
            txn = self._read_txn = self.begin_read()
        return txn.get(key)

    def begin_read(self) -> IndexReadTransaction:
        """A read transaction on the index's entry table, any thread: the one home of beginning one.

        A read transaction takes a slot of LMDB's reader table; a process that dies holding slots (kill -9, a power
        cut) leaves them taken while any other process has the environment open, until ``mdb_reader_check`` frees
        them, as LMDB asks of an application after a crash.  So when the table is full, the slots of dead processes
        are freed (with a warning naming how many) and the transaction begun again once; a table full of live
        readers is the caller's ``lmdb.ReadersFullError``."""
        try:
            return IndexReadTransaction(self.env.begin(db=self.index_db))
        except lmdb.ReadersFullError:
            freed = self.env.reader_check()
            log.warning("the entry index of %s had no free reader slot; freed %d left by dead processes",
                        self.root, freed)
            try:
                return IndexReadTransaction(self.env.begin(db=self.index_db))
            except lmdb.ReadersFullError:
                log.error("the entry index of %s has no free reader slot: its reader table, by thread:\n%s",
                          self.root, self.reader_table())
                raise

    def _reader_rows(self) -> list[tuple[str, str, str]]:
        """LMDB's reader table (``mdb_reader_list``) as ``(pid, thread, txnid)`` rows; txnid ``-`` is a reset slot."""
        rows = [tuple(row.split()) for row in self.env.readers().splitlines()[1:]]
        return [row for row in rows if len(row) == 3]  # type: ignore[misc]

    def reader_slots(self) -> tuple[int, int]:
        """This process's slots of the index's reader table: ``(in a read transaction, idle)``; an idle one is a
        transaction py-lmdb keeps reset for reuse (the gauge ``bookie_index_reader_slots``, docs/bookie.md)."""
        pid = str(os.getpid())
        mine = [txnid for row_pid, _thread, txnid in self._reader_rows() if row_pid == pid]
        idle = mine.count("-")
        return len(mine) - idle, idle

    def reader_table(self) -> str:
        """LMDB's reader table, ``pid thread txnid`` a line, each of this process's threads named (a slot records the
        thread that began its transaction as ``pthread_self``, which is Python's ``threading.get_ident``)."""
        names = {f"{thread.ident:x}": thread.name for thread in threading.enumerate() if thread.ident is not None}
        return "\n".join(["pid thread txnid", *(f"{pid} {thread} {txnid} {names.get(thread, '')}".rstrip()
                                                 for pid, thread, txnid in self._reader_rows())])

    def refresh(self) -> None:
        """Drop the reused read transaction (the next lookup sees the latest commit)."""
        txn, self._read_txn = self._read_txn, None
        if txn is not None:
            txn.end()

    def log_ids(self) -> list[int]:
        ids = []
        for name in os.listdir(self.logs_dir):
            match = LOG_NAME.match(name)
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
            or (self._write_size + size > self.entry_log_size_limit and self._write_size > LOG_HEADER.size)
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
        if self._write_fd >= 0 and self._write_size > LOG_HEADER.size:
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
        write_all(self._write_fd, LOG_HEADER.pack(LOG_MAGIC, 1))
        self._write_size = LOG_HEADER.size
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
        # Read *before* the index snapshot, the log id first: a checkpoint (or a compaction) pins its first log
        # before it appends or rolls, and unpins it only once its rows are committed, so every older log got its
        # last append in a checkpoint whose rows this snapshot holds.
        current = self.first_open_log()
        referenced: set[int] = set()
        with self.begin_read() as txn:
            for value in txn.cursor().iternext(keys=False, values=True):
                if len(value) == LOCATION.size:
                    referenced.add(LOCATION.unpack(value)[0])
        return [log_id for log_id in self.log_ids() if log_id < current and log_id not in referenced]

    def first_open_log(self) -> int:
        """The first log id :meth:`unused_logs` and :meth:`log_usage` leave alone: the log being appended to, or the
        one a running checkpoint or compaction began in when older (its records may not be in the index yet)."""
        current = self.log_id
        pinned = self.checkpoint_first_log
        return current if pinned is None else min(current, pinned)

    def log_usage(self) -> dict[int, tuple[int, int]]:
        """For each entry log before :meth:`first_open_log`, ``(live bytes, record bytes)``: the bytes of the records
        index rows point at, and of all its records (the file less its header), whose ratio is Apache BookKeeper's
        ``EntryLogMetadata.getUsage`` (docs/bookie.md, "Compaction").  Any thread: its own read transaction."""
        first_open = self.first_open_log()
        live: dict[int, int] = {}
        with self.begin_read() as txn:
            for value in txn.cursor().iternext(keys=False, values=True):
                if len(value) == LOCATION.size:
                    log_id, _, length = LOCATION.unpack(value)
                    live[log_id] = live.get(log_id, 0) + LOG_RECORD.size + length
        usage = {}
        for log_id in self.log_ids():
            if log_id >= first_open:
                continue
            try:
                size = self.log_path(log_id).stat().st_size - LOG_HEADER.size
            except FileNotFoundError:
                continue
            usage[log_id] = (live.get(log_id, 0), max(size, 0))
        return usage

    def rows_in_log(self, log_id: int) -> list[IndexRow]:
        """The index rows that point into one entry log, in the order of their records in it (any thread)."""
        rows = []
        with self.begin_read() as txn:
            for key, value in txn.cursor().iternext(keys=True, values=True):
                if len(value) == LOCATION.size and LOCATION.unpack(value)[0] == log_id:
                    rows.append((key, value))
        rows.sort(key=lambda row: LOCATION.unpack(row[1])[1])
        return rows

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

    def read_record(self, location: bytes, key: CacheKey, chunk: list[object] | None) -> bytes:
        """Read and check one entry-log record; ``chunk`` is a reusable read-ahead buffer
        ``[log id, start offset, bytes]`` (sequential entries of a ledger sit next to each other)."""

        def damaged(problem: str, **details: object) -> BookieIOError:
            _, ledger_id, entry_id = key_address(key)
            return BookieIOError(problem, ledger_id=ledger_id, entry_id=entry_id, **details)

        if len(location) != LOCATION.size:
            raise damaged("entry index is corrupt")
        log_id, offset, length = LOCATION.unpack(location)
        record_offset = offset - LOG_RECORD.size
        if record_offset < LOG_HEADER.size:
            raise damaged("entry index is corrupt")
        need = LOG_RECORD.size + length
        raw: bytes | memoryview
        if chunk is None:
            raw = self.read(log_id, record_offset, need)
        else:
            c_log, c_start, c_data = chunk
            assert isinstance(c_start, int) and isinstance(c_data, bytes)
            if c_log != log_id or record_offset < c_start or record_offset + need > c_start + len(c_data):
                c_data = self.read(log_id, record_offset, max(need, READ_AHEAD))
                chunk[:] = [log_id, record_offset, c_data]
                c_start = record_offset
            raw = memoryview(c_data)[record_offset - c_start : record_offset - c_start + need]
        if len(raw) != need:
            raise damaged("entry log is truncated", log_id=log_id)
        if (
            RECORD_LENGTH.unpack_from(raw, 0)[0] != length
            or int.from_bytes(raw[RECORD_LENGTH.size : LOG_RECORD.size], "big") != key
        ):
            raise damaged("entry index points at the wrong record")
        return bytes(raw[LOG_RECORD.size :])
