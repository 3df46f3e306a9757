"""Reads past the write cache: the read cache, and the entry logs read through the index (a room of
:class:`~bookie_server.storage.LedgerStorage`).

The read cache is byte-bounded and least-recently-used: it keeps the entries single reads brought (with their
read-ahead) and, as one item each, the ranges cold batch reads brought (:class:`CachedRange`), but not those of a
ledger that would not fit in it (a scan would evict its own entries before a second pass reached them).  The disk
reads run on the read threads (:meth:`StorageReads.read_cold`, :meth:`StorageReads.range_cold`,
:meth:`StorageReads.read_run_cold`) with their own index transactions and touch no cache; the loop thread puts
what they brought into the cache (``remember*``).  A batch read's range rules have one home,
:meth:`StorageReads._collect` (docs/bookie.md, "Reads").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

import lmdb

from bkspark.errors import BookieError, BookieIOError, NoSuchEntryError

from bookie_server.entry_logs import (
    INDEX_KEY,
    LOCATION,
    U64,
    CacheKey,
    EntryKey,
    IndexReadTransaction,
    LedgerDirectory,
    cache_key,
    key_address,
    key_ledger,
    record_at,
)

log = logging.getLogger("bookie_server.storage")

__all__ = ["RANGE_BIT", "RUN_WALK_RECORDS", "CachedRange", "StorageReads", "cached_size"]


def index_read_failed(exc: lmdb.Error) -> BookieIOError:
    """The EIO a failed entry-index read is answered with, logged: the client sees only EIO (and reads another
    replica), so the operator's one sign of a failing index (a full reader table, a damaged file) is this line."""
    log.error("entry index read failed: %s", exc)
    return BookieIOError("entry index read failed", error=str(exc))


#: Set in the read-cache key of a range a cold batch read brought (``CachedRange``; its first entry's key
#: otherwise), never in an entry's.
RANGE_BIT = 1 << 192

#: Records a run of single reads walks past in the chunk before it asks the index (:meth:`LedgerStorage.read_run_cold`):
#: a striped ledger's next entry on a bookie is at most W - 1 records on (its other entries in between).
RUN_WALK_RECORDS = 4


class CachedRange:
    """What a cold batch read brought from disk, entries ``first..``: one item of the read cache
    (:meth:`StorageReads.remember_range`).  An entry's bytes never change once written (a recovery add writes the
    same), so a range stays right while its ledger exists."""

    __slots__ = ("first", "entries", "nbytes")

    def __init__(self, first: int, entries: list[bytes]) -> None:
        self.first = first
        self.entries = entries
        self.nbytes = sum(map(len, entries))

    def get(self, key: CacheKey) -> bytes | None:
        """The entry of ``key`` (of this range's ledger) when the range holds it, else None."""
        i = (key & U64) - self.first
        return self.entries[i] if 0 <= i < len(self.entries) else None


def cached_size(item: bytes | CachedRange) -> int:
    """The bytes a read-cache item counts for against ``read_cache_max_bytes``."""
    return item.nbytes if isinstance(item, CachedRange) else len(item)


class StorageReads:
    """The read cache and the disk reads of :class:`~bookie_server.storage.LedgerStorage`, whose state they share
    (``_ledgers``, ``_read_cache``, ``_read_cache_bytes``, ``read_cache_max_bytes``, ``_dirs``)."""

    def reader_slots(self) -> tuple[int, int]:
        """The entry indexes' reader slots this process holds, over every ledger directory: ``(active, idle)``
        (:meth:`LedgerDirectory.reader_slots`)."""
        active = idle = 0
        for directory in self._dirs:
            a, i = directory.reader_slots()
            active, idle = active + a, idle + i
        return active, idle

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
        pos = LOCATION.unpack(location)[1] + len(found[0][1]) - start  # where the entry's record ends
        ledger, last = key_ledger(key), key
        while len(found) < max_entries:
            record = record_at(data, pos)
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
        self._cache_read(RANGE_BIT | cache_key(scope_id, ledger_id, first), cached)

    def _cache_read(self, key: CacheKey, data: bytes | CachedRange) -> None:
        size = cached_size(data)
        if size <= self.read_cache_max_bytes // 4:
            held = self._read_cache.pop(key, None)  # read again (read-aheads overlap): counted once
            if held is not None:
                self._read_cache_bytes -= cached_size(held)
            self._read_cache[key] = data
            self._read_cache_bytes += size
            while self._read_cache_bytes > self.read_cache_max_bytes:
                _, evicted = self._read_cache.popitem(last=False)
                self._read_cache_bytes -= cached_size(evicted)

    def _read_from_disk(self, key: CacheKey, own_transaction: bool = False) -> bytes:
        """Index lookup, then the entry-log record: through the loop thread's reused read transaction, or
        (``own_transaction``, any thread) through a new one.  Raises ENOENTRY, or EIO for index or log errors."""
        directory, location = self._index_location(key, own_transaction)
        try:
            return self._read_logged(directory, location, key, None)
        except BookieIOError:
            # A compaction may have moved the entry and removed its old log between the lookup and the read
            # (docs/bookie.md, "Compaction"): once more from a fresh lookup, when it points elsewhere now.
            _, moved = self._index_location(key, True)
            if moved == location:
                raise
            return self._read_logged(directory, moved, key, None)

    def _index_location(self, key: CacheKey, own_transaction: bool) -> tuple[LedgerDirectory, bytes]:
        """The entry's directory and index value (see :meth:`_read_from_disk`); ENOENTRY, or EIO."""
        scope_id, ledger_id, entry_id = key_address(key)
        directory = self._dir_for(scope_id, ledger_id)
        packed = key.to_bytes(INDEX_KEY.size, "big")
        try:
            if own_transaction:
                with directory.begin_read() as txn:
                    location = txn.get(packed)
            else:
                location = directory.index_get(packed)
        except lmdb.Error as exc:
            raise index_read_failed(exc) from exc
        if location is None:
            raise NoSuchEntryError(ledger_id=ledger_id, entry_id=entry_id)
        return directory, location

    def _read_logged(self, directory: LedgerDirectory, location: bytes, key: CacheKey, chunk: list[object] | None) -> bytes:
        """:meth:`LedgerDirectory.read_record`, its OSError answered as EIO."""
        try:
            return directory.read_record(location, key, chunk)
        except OSError as exc:
            _, ledger_id, entry_id = key_address(key)
            # A failing disk is the operator's to see (the client only gets EIO, and heals from another replica).
            log.error("entry log read of ledger %s entry %s in %s failed: %s", ledger_id, entry_id, directory.root, exc)
            raise BookieIOError(
                "entry log read failed", ledger_id=ledger_id, entry_id=entry_id, error=str(exc)
            ) from exc

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
                location = directory.index_get(key.to_bytes(INDEX_KEY.size, "big"))
                if location is None:
                    raise NoSuchEntryError(ledger_id=ledger_id, entry_id=key_address(key)[2])
                data = directory.read_record(location, key, chunk)
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
            range_key = RANGE_BIT | cache_key(scope_id, ledger_id, next_id)
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
            with directory.begin_read() as txn:

                def fetch(key: CacheKey) -> bytes:
                    data = chunk[2]
                    assert isinstance(data, bytes)
                    record = record_at(data, after[0]) if after[0] >= 0 else None
                    if record is not None and record[0] == key:
                        _key, body, after[0] = record
                        return data[body : after[0]]
                    location = txn.get(key.to_bytes(INDEX_KEY.size, "big"))
                    if location is None:
                        raise NoSuchEntryError(ledger_id=ledger_id, entry_id=key_address(key)[2])
                    entry = directory.read_record(location, key, chunk)
                    start = chunk[1]
                    assert isinstance(start, int)
                    after[0] = LOCATION.unpack(location)[1] + len(entry) - start
                    return entry

                self._collect(scope_id, ledger_id, start, stop, budget, out, used, fetch)
        except lmdb.Error as exc:
            if not out:
                raise index_read_failed(exc) from exc
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
        state: dict[int, tuple[IndexReadTransaction, list[object], list[int]]] = {}
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
                        record = record_at(data, pos) if pos >= 0 else None
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
        directory: LedgerDirectory,
        ledger_id: int,
        entry_id: int,
        key: CacheKey,
        state: dict[int, tuple[IndexReadTransaction, list[object], list[int]]],
    ) -> bytes | BookieError:
        """:meth:`read_run_cold`'s read of one entry (``key`` its cache key) through the index: its bytes, or its
        error."""
        try:
            held = state.get(id(directory))
            if held is None:
                txn = directory.begin_read()
                held = state[id(directory)] = (txn, [None, 0, b""], [-1])
            txn, chunk, after = held
            location = txn.get(key.to_bytes(INDEX_KEY.size, "big"))
        except lmdb.Error as exc:
            return index_read_failed(exc)
        if location is None:
            return NoSuchEntryError(ledger_id=ledger_id, entry_id=entry_id)
        try:
            data = self._read_logged(directory, location, key, chunk)
        except BookieError as exc:
            after[0] = -1
            return exc
        start = chunk[1]
        assert isinstance(start, int)
        after[0] = LOCATION.unpack(location)[1] + len(data) - start
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
                data = fetch(key_of_entry_0 | (entry_id & U64))
            except lmdb.Error as exc:
                if not out:
                    raise index_read_failed(exc) from exc
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
