"""The bookie's write-ahead journal: append-only files, group commit, replay.

An add (or a fence, an explicit LAC, a ledger's first master key) is
acknowledged only once its journal record is on disk.  One writer thread takes
*every* record queued since its last write, writes them with a single
``os.write`` and makes them durable with a single ``os.fdatasync`` (group
commit), then hands the whole batch of completions back to the event loop in
one call.  While one sync runs, the next batch piles up, so the number of
syncs per second stays bounded by the disk and not by the number of clients.

Record layout (all big-endian)::

    [body length: u32][crc32c(body): u32][body]
    body = [type: u8][scope id: i64][ledger id: i64][payload]

A journal file starts with a 16-byte header ``b"BKSJ" + u32 version + u64 file id``
(written and synced before any record).  File ids are unique across all journal
directories: file ``n`` lives in directory ``n % len(journalDirectories)``, so
successive files (the journal rolls at every checkpoint) spread over the disks.

Replay (:func:`replay_journals`) is strict.  It reads every directory's files in
id order from the checkpoint mark.  A crash can only tear the end of the newest
file (a file is complete and synced before the next one is started), so damage
there that looks like an interrupted write -- a record running past the end of
the file, a checksum mismatch in the very last record, zero fill -- is truncated
away with a warning: nothing in it was acknowledged.  Any other damage stops the
bookie with :class:`~bkspark.errors.CorruptJournalError` naming the file and the
offset, unless the operator sets ``skipReplayJournalInvalidRecord=true``
(BookKeeper's key): then the rest of that file is skipped, with an error logged,
and its records are lost.
"""

from __future__ import annotations

import enum
import logging
import os
import re
import signal
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO
from dataclasses import dataclass
from pathlib import Path

import crc32c

from bkspark.errors import BookieIOError, CorruptJournalError
from bkspark.protocol.speedups import load_compiled

__all__ = [
    "RecordType",
    "JournalRecord",
    "JournalPosition",
    "Journal",
    "JournalDamage",
    "JournalFileScan",
    "encode_record",
    "iter_records",
    "journal_files",
    "all_journal_files",
    "replay_journals",
    "SKIP_INVALID_KEY",
    "JournalFaults",
    "CrashPoint",
    "crash_point",
    "crash_words",
    "CRASH_AT_ENV",
]

log = logging.getLogger("bookie_server.journal")

_FILE_MAGIC = b"BKSJ"
_FILE_VERSION = 1
_FILE_HEADER = struct.Struct(">4sIQ")
_RECORD_PREFIX = struct.Struct(">II")
_BODY_HEADER = struct.Struct(">Bqq")
#: Sanity bound on one record body: an entry can never exceed the frame limit by much.
MAX_RECORD_BODY = 256 * 1024 * 1024
_FILE_NAME = re.compile(r"^([0-9a-f]{16})\.txn$")
#: The configuration key that lets an operator accept the loss of a damaged journal file's tail.
SKIP_INVALID_KEY = "skipReplayJournalInvalidRecord"


class RecordType(enum.IntEnum):
    """What a journal record says happened to a ledger."""

    ADD_ENTRY = 1  # payload: [entry id: i64][lac: i64][entry bytes]
    FENCE = 2  # payload: empty
    EXPLICIT_LAC = 3  # payload: the explicit-LAC blob as the client sent it
    MASTER_KEY = 4  # payload: the ledger's master key (first use)


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One decoded journal record."""

    type: RecordType
    scope_id: int
    ledger_id: int
    payload: bytes


@dataclass(frozen=True, order=True, slots=True)
class JournalPosition:
    """A point in the journal: file id and byte offset inside that file."""

    file_id: int
    offset: int

    def pack(self) -> bytes:
        """16 bytes, for the checkpoint mark in the index."""
        return struct.pack(">QQ", self.file_id, self.offset)

    @classmethod
    def unpack(cls, data: bytes) -> "JournalPosition":
        """Inverse of :meth:`pack`."""
        file_id, offset = struct.unpack(">QQ", data)
        return cls(file_id, offset)


_ADD_PREFIX = struct.Struct(">qq")


def encode_record(rtype: RecordType, scope_id: int, ledger_id: int, payload: bytes | memoryview = b"") -> bytes:
    """One framed, checksummed journal record."""
    body = _BODY_HEADER.pack(rtype, scope_id, ledger_id) + payload
    return _RECORD_PREFIX.pack(len(body), crc32c.crc32c(body)) + body


#: The body header of an ADD_ENTRY record and its payload's entry id and LAC, packed at once.
_ADD_BODY_HEADER = struct.Struct(">Bqqqq")


def encode_add(scope_id: int, ledger_id: int, entry_id: int, lac: int, entry: bytes | memoryview) -> bytes:
    """An ADD_ENTRY record (entry id and LAC are kept so replay needs no entry parser).

    The same bytes as ``encode_record(ADD_ENTRY, ..., entry id ‖ lac ‖ entry)``, built with one copy of
    the entry (the bookie's add path runs this once per entry on its event loop).
    """
    head = _ADD_BODY_HEADER.pack(RecordType.ADD_ENTRY, scope_id, ledger_id, entry_id, lac)
    return b"".join(
        (_RECORD_PREFIX.pack(len(head) + len(entry), crc32c.crc32c(entry, crc32c.crc32c(head))), head, entry)
    )


#: The bookie's compiled loops (bookie_server/_speedups.c), or None: read at call time, so tests can turn them
#: off here as BKSPARK_NO_EXTENSIONS=1 does at import.
_speedups = load_compiled("bookie_server._speedups")

#: An add as the add path hands it over: ledger id, entry id, LAC, the entry (further items are ignored).
AddItem = tuple  # (int, int, int, bytes | memoryview, ...)


def add_records(scope_id: int, adds: list[AddItem]) -> tuple[bytes, list[bytes]]:
    """The ADD_ENTRY records of ``adds`` as one journal blob, and each entry as ``bytes`` for the write cache.

    The compiled loop when it is built (one call per group of adds on the event loop; docs/bookie.md, "Adds"),
    else, and for anything it hands back, :func:`add_records_reference`.
    """
    if _speedups is not None:
        built = _speedups.add_records(scope_id, adds)
        if built is not None:
            return built
    return add_records_reference(scope_id, adds)


def add_records_reference(scope_id: int, adds: list[AddItem]) -> tuple[bytes, list[bytes]]:
    """The pure-Python :func:`add_records`: the tested reference of the compiled one."""
    entries = [add[3] if type(add[3]) is bytes else bytes(add[3]) for add in adds]
    blob = b"".join([encode_add(scope_id, add[0], add[1], add[2], entry) for add, entry in zip(adds, entries)])
    return blob, entries


def decode_add_payload(payload: bytes) -> tuple[int, int, bytes]:
    """``(entry id, lac, entry bytes)`` of an ADD_ENTRY payload."""
    entry_id, lac = _ADD_PREFIX.unpack_from(payload, 0)
    return entry_id, lac, payload[_ADD_PREFIX.size :]


def journal_files(directory: Path) -> list[tuple[int, Path]]:
    """``(file id, path)`` of every journal file in ``directory``, oldest first."""
    found = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        match = _FILE_NAME.match(name)
        if match:
            found.append((int(match.group(1), 16), directory / name))
    found.sort()
    return found


def all_journal_files(directories: Sequence[Path]) -> list[tuple[int, Path]]:
    """``(file id, path)`` of the journal files of every directory, oldest first (ids are global)."""
    found: dict[int, Path] = {}
    for directory in directories:
        for file_id, path in journal_files(directory):
            if file_id in found:
                raise CorruptJournalError(
                    f"journal file id {file_id:016x} exists twice ({found[file_id]} and {path}); "
                    "remove the copy that does not belong to this bookie"
                )
            found[file_id] = path
    return sorted(found.items())


@dataclass(frozen=True, slots=True)
class JournalDamage:
    """Where and how a journal file stops being readable."""

    path: Path
    offset: int
    reason: str
    #: True when it looks like a write interrupted by a crash (only possible at the end of the newest file).
    torn: bool


#: The most replay asks of a journal file in one read: what it holds besides the record it decodes, whatever the
#: file's size (docs/bookie.md, "Journal replay").  A record larger than this is read in several such reads.
REPLAY_READ_BYTES = 1024 * 1024


class _ForwardReader:
    """A journal file read forward in reads of at most :data:`REPLAY_READ_BYTES`, keeping only the bytes not yet
    consumed: ``buf[pos:]`` holds the file from offset :attr:`offset` on."""

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self.fh = fh
        self.size = size
        self.buf = bytearray()
        self.pos = 0
        #: File offset of ``buf[pos]``.
        self.offset = 0
        #: A view of ``buf`` while its size stays (:meth:`current_view`), released before it changes.
        self.view: memoryview | None = None

    def current_view(self) -> memoryview:
        """A view of ``buf`` as it is now (one per read, not one per record)."""
        if self.view is None:
            self.view = memoryview(self.buf)
        return self.view

    def close(self) -> None:
        if self.view is not None:
            self.view.release()
            self.view = None

    def skip_to(self, offset: int) -> None:
        """Move forward to ``offset`` (at or after the current one), reading nothing before it."""
        ahead = offset - self.offset
        if ahead <= len(self.buf) - self.pos:
            self.pos += ahead
        else:
            self.fh.seek(offset)
            if self.view is not None:
                self.view.release()
                self.view = None
            self.buf.clear()
            self.pos = 0
        self.offset = offset

    def fill(self, n: int) -> bool:
        """Make ``buf[pos:pos + n]`` hold the file's next ``n`` bytes; False when the file ends before them."""
        if self.offset + n > self.size:
            return False
        if len(self.buf) - self.pos >= n:
            return True
        if self.view is not None:
            self.view.release()  # the buffer cannot change size while a view of it is out
            self.view = None
        del self.buf[: self.pos]  # the consumed bytes go before more are read: one memmove per read, not per record
        self.pos = 0
        while len(self.buf) < n:
            chunk = self.fh.read(min(REPLAY_READ_BYTES, self.size - self.offset - len(self.buf)))
            if not chunk:
                return False
            self.buf += chunk
        return True

    def consume(self, n: int) -> None:
        self.pos += n
        self.offset += n

    def rest_is_zero(self) -> bool:
        """Whether every byte from here to the end of the file is zero (read on in bounded reads)."""
        if any(memoryview(self.buf)[self.pos :]):
            return False
        while True:
            chunk = self.fh.read(REPLAY_READ_BYTES)
            if not chunk:
                return True
            if any(chunk):
                return False


class JournalFileScan:
    """Iterate ``(end offset, record)`` over one journal file; :attr:`damage` says why it stopped early.

    The file is streamed (:class:`_ForwardReader`): replay holds one read's bytes and the record it decodes, not
    the whole file, which reached ``journalMaxSizeMB`` (2 GiB by default) between two checkpoints.
    """

    def __init__(self, path: Path, start_offset: int = 0) -> None:
        self.path = path
        self.start_offset = start_offset
        self.damage: JournalDamage | None = None

    def _damaged(self, offset: int, reason: str, torn: bool) -> None:
        self.damage = JournalDamage(self.path, offset, reason, torn)

    def __iter__(self) -> Iterator[tuple[int, JournalRecord]]:
        with open(self.path, "rb", buffering=0) as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return  # created, crashed before its header: nothing was ever written to it
            reader = _ForwardReader(fh, size)
            try:
                yield from self._scan(reader, size)
            finally:
                reader.close()

    def _scan(self, reader: _ForwardReader, size: int) -> Iterator[tuple[int, JournalRecord]]:
        if not reader.fill(_FILE_HEADER.size):
            self._damaged(0, f"file header truncated ({size} bytes)", torn=True)
            return
        magic, version, _file_id = _FILE_HEADER.unpack_from(reader.buf, reader.pos)
        if magic != _FILE_MAGIC or version != _FILE_VERSION:
            self._damaged(0, "bad file header", torn=False)
            return
        reader.skip_to(max(self.start_offset, _FILE_HEADER.size))
        while reader.offset < size:
            offset = reader.offset
            if not reader.fill(_RECORD_PREFIX.size):
                self._damaged(offset, "truncated record prefix", torn=True)
                return
            length, crc = _RECORD_PREFIX.unpack_from(reader.buf, reader.pos)
            end = offset + _RECORD_PREFIX.size + length
            if length < _BODY_HEADER.size or length > MAX_RECORD_BODY:
                self._damaged(offset, f"bad record length {length}", torn=reader.rest_is_zero())
                return
            if end > size or not reader.fill(_RECORD_PREFIX.size + length):
                self._damaged(offset, "record runs past the end of the file", torn=True)
                return
            start = reader.pos + _RECORD_PREFIX.size
            view = reader.current_view()
            if crc32c.crc32c(view[start : start + length]) != crc:
                # The very last record of the file may be half-written; one followed by more data is not.
                self._damaged(offset, "checksum mismatch", torn=end == size)
                return
            rtype, scope_id, ledger_id = _BODY_HEADER.unpack_from(view, start)
            payload = bytes(view[start + _BODY_HEADER.size : start + length])
            try:
                kind = RecordType(rtype)
            except ValueError:
                self._damaged(offset, f"unknown record type {rtype}", torn=False)
                return
            reader.consume(_RECORD_PREFIX.size + length)
            yield end, JournalRecord(kind, scope_id, ledger_id, payload)


def iter_records(path: Path, start_offset: int = 0) -> Iterator[tuple[int, JournalRecord]]:
    """``(end offset, record)`` of each readable record of one file (stops at damage, see :class:`JournalFileScan`)."""
    return iter(JournalFileScan(path, start_offset))


def replay_journals(
    directories: Sequence[Path],
    mark: JournalPosition,
    apply: Callable[[JournalRecord], None],
    *,
    skip_invalid_records: bool = False,
) -> int:
    """Apply every record after ``mark`` from all directories, oldest file first; the number applied.

    A torn tail of the newest file is truncated (and synced) so later starts see a clean file.
    Other damage raises :class:`CorruptJournalError`, or with ``skip_invalid_records`` skips the
    rest of that file with an error logged.
    """
    files = all_journal_files(directories)
    count = 0
    for index, (file_id, path) in enumerate(files):
        if file_id < mark.file_id:
            continue
        scan = JournalFileScan(path, mark.offset if file_id == mark.file_id else 0)
        for _end, record in scan:
            apply(record)
            count += 1
        damage = scan.damage
        if damage is None:
            continue
        if damage.torn and index == len(files) - 1:
            dropped = path.stat().st_size - damage.offset
            log.warning(
                "journal file %s: %s at offset %d is the torn tail of an interrupted write; "
                "truncated (%d bytes dropped, none of them acknowledged)",
                path,
                damage.reason,
                damage.offset,
                dropped,
            )
            _truncate(path, damage.offset)
            continue
        if skip_invalid_records:
            log.error(
                "journal file %s: %s at offset %d; %s=true: the rest of this file is skipped and its records are lost",
                path,
                damage.reason,
                damage.offset,
                SKIP_INVALID_KEY,
            )
            continue
        raise CorruptJournalError(
            f"journal file {path}: {damage.reason} at offset {damage.offset}; the records after it cannot be "
            f"replayed, so the bookie will not start. Restore the file, or set {SKIP_INVALID_KEY}=true to skip "
            "the rest of this file and accept the loss of its records"
        )
    return count


def _truncate(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


Completion = Callable[[BaseException | None], None]


@dataclass(frozen=True, slots=True)
class JournalFaults:
    """Test-only fault points of the journal writer, read from the environment (never set in production).

    ``BKSPARK_TEST_JOURNAL_POWER_CUT_AT_BATCH=N``: bytes written but not yet synced are
    kept in memory (they stand for the page cache), and the N-th group commit, once
    written and before its sync, kills the process with SIGKILL: its unsynced records
    are really lost, as in a power cut.  (A plain kill -9 keeps the page cache, so it
    cannot tell an acknowledgement sent before the sync from one sent after.)

    ``BKSPARK_TEST_JOURNAL_ACK_BEFORE_SYNC=1`` swaps the order this module exists to
    keep: completions are dispatched after the write and before the sync.  The
    ack-after-sync test uses it to show that it catches the bug.
    """

    power_cut_at_batch: int | None = None
    ack_before_sync: bool = False

    POWER_CUT_ENV = "BKSPARK_TEST_JOURNAL_POWER_CUT_AT_BATCH"
    ACK_BEFORE_SYNC_ENV = "BKSPARK_TEST_JOURNAL_ACK_BEFORE_SYNC"

    @classmethod
    def from_env(cls) -> "JournalFaults | None":
        """The faults the environment asks for, or None (the normal case)."""
        cut = os.environ.get(cls.POWER_CUT_ENV)
        swap = os.environ.get(cls.ACK_BEFORE_SYNC_ENV, "") not in ("", "0")
        if cut is None and not swap:
            return None
        log.warning("journal test faults active: power cut at batch %s, ack before sync %s", cut, swap)
        return cls(power_cut_at_batch=int(cut) if cut else None, ack_before_sync=swap)

    def power_cut(self, dispatched_acks: bool) -> None:
        """Die like a machine losing power (after giving dispatched acks time to reach their clients)."""
        if dispatched_acks:
            time.sleep(1.0)
        log.warning("journal test fault: power cut now, unsynced journal bytes are lost")
        os.kill(os.getpid(), signal.SIGKILL)


class CrashPoint(enum.Enum):
    """The steps of the storage's multi-step operations between which a test can make the bookie crash
    (:func:`crash_point`; docs/bookie.md, "Failures between the steps")."""

    #: A checkpoint's entries are in the entry logs (written and synced); its index rows and mark are not committed.
    CHECKPOINT_LOGS_SYNCED = "checkpoint-logs-synced"
    #: A checkpoint's index rows, ledger states, deletions and mark are committed; the journal is not yet trimmed.
    CHECKPOINT_COMMITTED = "checkpoint-committed"
    #: A GC round's deletions are checkpointed; the entry logs they emptied are not yet removed.
    GC_CHECKPOINTED = "gc-checkpointed"
    #: A compaction's copies of one entry log's live records are in the current log (synced); the index rows still
    #: point at the old log.
    COMPACTION_COPIED = "compaction-copied"
    #: A compaction's index rows point at the copies (committed); the old entry log is not removed yet.
    COMPACTION_INDEXED = "compaction-indexed"
    #: The journal rolled to a new file (header synced); the batch that made it roll is not written.
    JOURNAL_ROLLED = "journal-rolled"


#: ``<crash point value>:<n>``: the process SIGKILLs itself the n-th time it reaches that step (test-only).
CRASH_AT_ENV = "BKSPARK_TEST_CRASH_AT"


def _crash_at_from_env() -> tuple[CrashPoint, int] | None:
    value = os.environ.get(CRASH_AT_ENV)
    if not value:
        return None
    name, _, count = value.partition(":")
    point = CrashPoint(name)
    log.warning("test fault active: crash at the %s step, time %s", point.value, count or "1")
    return point, int(count or "1")


_crash_at = _crash_at_from_env()
_crash_hits: dict[CrashPoint, int] = {}
_crash_lock = threading.Lock()


def crash_point(point: CrashPoint) -> None:
    """A step between two of a multi-step operation: when ``BKSPARK_TEST_CRASH_AT`` names it (never in
    production), the n-th call SIGKILLs the process here, so a test sees what a crash at that step leaves."""
    if _crash_at is None or _crash_at[0] is not point:
        return
    with _crash_lock:
        _crash_hits[point] = hits = _crash_hits.get(point, 0) + 1
    if hits == _crash_at[1]:
        log.warning(crash_words(point))
        os.kill(os.getpid(), signal.SIGKILL)


def crash_words(point: CrashPoint) -> str:
    """What the bookie logs as it crashes itself at ``point`` (a test looks for it)."""
    return f"test fault: crash now, at the {point.value} step"


class Journal:
    """Append-only journal with one group-commit writer thread.

    ``submit(record, done)`` queues bytes; ``done(None)`` (or ``done(error)``)
    is later run through ``dispatch`` (``loop.call_soon_threadsafe`` in the
    server, a direct call in tests) once for the whole batch the record was
    written in.  ``submit(b"", done)`` is a barrier: done once everything
    queued before it is durable (FORCE_LEDGER).
    """

    def __init__(
        self,
        directory: Path | Sequence[Path],
        *,
        sync_data: bool = True,
        max_file_size: int = 2048 * 1024 * 1024,
        dispatch: Callable[[Callable[[], None]], None] | None = None,
        on_batch: Callable[[int, int, float], None] | None = None,
        on_failure: Callable[[], None] | None = None,
        faults: JournalFaults | None = None,
    ) -> None:
        paths = [directory] if isinstance(directory, (str, os.PathLike)) else list(directory)
        #: Journal directories; file ``n`` goes to ``directories[n % len(directories)]``.
        self.directories = [Path(d) for d in paths]
        self.sync_data = sync_data
        self.max_file_size = max_file_size
        self._dispatch = dispatch or (lambda fn: fn())
        self._on_batch = on_batch
        #: Run (through dispatch) once, when a write or a sync fails and the journal starts refusing records.
        self._on_failure = on_failure
        self._faults = faults
        self._batches = 0
        #: With a power-cut fault: bytes "written" but held back from the file until the sync.
        self._unsynced: list[bytes] = []
        self._cond = threading.Condition()
        self._pending: list[bytes] = []
        self._waiters: list[Completion] = []
        self._early: list[Completion] = []
        self._closing = False
        self._roll_requested = False
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._fd = -1
        self._file_id = 0
        self._file_size = 0
        #: Offset up to which records have been handed to the OS (read from other threads).
        self.written_position = JournalPosition(0, 0)

    # -- life cycle ---------------------------------------------------------------------
    def open(self) -> None:
        """Start a fresh journal file (after replay) and the writer thread."""
        for directory in self.directories:
            directory.mkdir(parents=True, exist_ok=True)
        existing = all_journal_files(self.directories)
        next_id = (existing[-1][0] + 1) if existing else 1
        self._open_file(next_id)
        self._thread = threading.Thread(target=self._run, name="bookie-journal", daemon=True)
        self._thread.start()

    def _open_file(self, file_id: int) -> None:
        directory = self.directories[file_id % len(self.directories)]
        path = directory / f"{file_id:016x}.txn"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        os.write(fd, _FILE_HEADER.pack(_FILE_MAGIC, _FILE_VERSION, file_id))
        os.fsync(fd)
        _fsync_dir(directory)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = fd
        self._file_id = file_id
        self._file_size = _FILE_HEADER.size
        self.written_position = JournalPosition(file_id, self._file_size)

    def close(self) -> None:
        """Write and sync everything queued, stop the writer, close the file."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- writing ------------------------------------------------------------------------
    def submit(self, record: bytes, done: Completion) -> None:
        """Queue one record; ``done`` runs (through dispatch) once it is durable."""
        with self._cond:
            if self._closing or self._failure is not None:
                error = self._failure or BookieIOError("journal is closed")
                self._dispatch(lambda: done(error))
                return
            self._pending.append(record)
            self._waiters.append(done)
            if len(self._pending) == 1:
                self._cond.notify()

    def submit_many(
        self, records: list[bytes], dones: Sequence[Completion], written: Sequence[Completion] = ()
    ) -> None:
        """Queue several records at once (one lock round trip); same contract as :meth:`submit`.

        ``written`` completions run as soon as their batch is written, before the
        sync (DEFERRED_SYNC adds: the client forces the ledger later).
        """
        with self._cond:
            if self._closing or self._failure is not None:
                error = self._failure or BookieIOError("journal is closed")
                self._dispatch(_completion_batch([*dones, *written], error))
                return
            was_empty = not self._pending
            self._pending.extend(records)
            self._waiters.extend(dones)
            self._early.extend(written)
            if was_empty:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending and self._closing:
                    return
                records, self._pending = self._pending, []
                waiters, self._waiters = self._waiters, []
                early, self._early = self._early, []
                roll, self._roll_requested = self._roll_requested, False
                failure = self._failure
            if failure is not None:
                # Queued before the failure was known: written after a batch whose bytes may be gone, they would be
                # acknowledged past a hole that replay stops at.
                self._dispatch(_completion_batch(waiters + early, failure))
                continue
            started = time.perf_counter()
            error: BaseException | None = None
            try:
                data = b"".join(records)
                if data:
                    too_big = self._file_size + len(data) > self.max_file_size
                    if (roll or too_big) and self._file_size > _FILE_HEADER.size:
                        self._open_file(self._file_id + 1)
                        crash_point(CrashPoint.JOURNAL_ROLLED)
                    faults = self._faults
                    if faults is not None and faults.power_cut_at_batch is not None:
                        self._unsynced.append(data)
                    else:
                        write_all(self._fd, data)
                    self._file_size += len(data)
                    self.written_position = JournalPosition(self._file_id, self._file_size)
                    if early:
                        self._dispatch(_completion_batch(early, None))
                        early = []
                    if faults is not None:
                        self._batches += 1
                        if faults.ack_before_sync:
                            self._dispatch(_completion_batch(waiters, None))
                            waiters = []
                        if self._batches == faults.power_cut_at_batch:
                            faults.power_cut(dispatched_acks=faults.ack_before_sync)
                        if self._unsynced:
                            write_all(self._fd, b"".join(self._unsynced))
                            self._unsynced.clear()
                    if self.sync_data:
                        os.fdatasync(self._fd)
            except OSError as exc:
                log.error("journal write failed: %s; the bookie refuses further writes", exc)
                error = BookieIOError("journal write failed", error=str(exc))
                with self._cond:
                    self._failure = error
                if self._on_failure is not None:
                    self._dispatch(self._on_failure)
            if self._on_batch is not None:
                self._on_batch(len(records), sum(map(len, records)), time.perf_counter() - started)
            self._dispatch(_completion_batch(waiters + early, error))

    # -- trimming -----------------------------------------------------------------------
    def roll(self) -> None:
        """Ask for a new file at the next write (so the current one can be trimmed later)."""
        with self._cond:
            self._roll_requested = True

    def trim(self, mark: JournalPosition) -> list[Path]:
        """Delete journal files wholly before ``mark`` (their records are checkpointed)."""
        removed = []
        for file_id, path in all_journal_files(self.directories):
            if file_id < mark.file_id and file_id != self._file_id:
                try:
                    path.unlink()
                    removed.append(path)
                except FileNotFoundError:
                    pass
        return removed


def _completion_batch(waiters: list[Completion], error: BaseException | None) -> Callable[[], None]:
    def complete() -> None:
        for done in waiters:
            try:
                done(error)
            except Exception:  # one broken callback must not stop the others
                log.exception("journal completion callback failed")

    return complete


#: The most one ``os.write`` of :func:`write_all` hands the kernel.  One 64 MiB write (a checkpoint's entry-log
#: append) cost 84-144 ms of CPU on this project's build machine, the same bytes in 1 MiB writes 12 ms: the kernel's
#: copy into new page-cache pages is that much slower for one huge write (BENCHMARKS.md, "The Python bookie's
#: adds").  BookKeeper's Java bookie writes through 64 KiB buffers.
WRITE_CHUNK_BYTES = 1024 * 1024


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of ``data`` to ``fd`` (the journal's and the entry logs' one write loop), at most
    :data:`WRITE_CHUNK_BYTES` per call."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view[:WRITE_CHUNK_BYTES]) :]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
