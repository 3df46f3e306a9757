"""The bookie's request reads: from memory at once, else from disk on the read threads, with read-ahead.

Memory (the write cache, then the read cache) answers on the event loop; an entry only the disk holds is read by
one of ``numReadWorkerThreads`` read threads, so a slow disk never stalls the loop, and the answer is a future
the connection waits on (docs/bookie.md, "Reads").  A cold single read brings the entries after its own too (its
read-ahead, ``dbStorage_readAheadCacheBatchSize``, growing while a ledger is scanned), and the reads its window
holds wait for it (:class:`ReadAheadWait`) instead of reading the disk again.  Batch reads follow Java's
``BatchedReadEntryProcessor`` (:meth:`BookieReads.read_batch_soon`); runs of single reads go to a read thread as
one job (:meth:`BookieReads.read_run_soon`).

Everything here runs on the event-loop thread except the ``LedgerStorage`` calls handed to the read threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TypeVar

from bkspark.config.bookie import BookieConfig
from bkspark.errors import BookieError, BookieIOError
from bkspark.protocol import v2

from bookie_server.storage import LedgerStorage

__all__ = ["READ_AHEAD_GROWTH", "SEQUENTIAL_LEDGERS", "BookieReads", "ReadAheadWait"]

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("bookie_server.bookie")

#: A ledger's cold single reads that follow one another along it (a scan) read ahead twice as many entries each
#: time, up to this many times ``dbStorage_readAheadCacheBatchSize`` (docs/bookie.md, "Reads"). The read-ahead
#: only takes records from the one chunk its read brought, so a larger one costs no more I/O.
READ_AHEAD_GROWTH = 16

#: Ledgers whose last cold read's read-ahead :class:`Bookie` remembers (the least recently read go first).
SEQUENTIAL_LEDGERS = 4096


class ReadAheadWait(asyncio.Future):  # type: ignore[type-arg]
    """A cold read's answer that waits for a read-ahead already on a read thread (:meth:`BookieReads.read_entry_soon`;
    docs/bookie.md, "Reads"): the connection counts it apart from the reads it sent to the read threads."""



class BookieReads:
    """The read threads, and the cold reads on them whose read-ahead later reads may wait for (loop thread)."""

    def __init__(self, conf: BookieConfig, storage: LedgerStorage) -> None:
        self.conf = conf
        self.storage = storage
        #: The bookie's event loop, from :meth:`start` on.
        self._loop: asyncio.AbstractEventLoop | None = None
        #: (scope id, ledger id) -> [(entry id, answer, read-ahead)] of the cold single reads on a read thread whose
        #: read-ahead may bring the entries after theirs, up to that many in all (docs/bookie.md, "Reads").
        self._read_aheads: dict[tuple[int, int], list[tuple[int, asyncio.Future[bytes], int]]] = {}
        #: (scope id, ledger id) -> (entry id, read-ahead) of the ledger's last cold single read: the next one
        #: reads ahead twice as far when it follows on (:meth:`_read_ahead_size`).
        self._last_read_ahead: OrderedDict[tuple[int, int], tuple[int, int]] = OrderedDict()
        #: Reads of entries only the disk holds run here, off the event loop (docs/bookie.md, "Reads").
        self.read_pool = concurrent.futures.ThreadPoolExecutor(
            max(1, conf.numReadWorkerThreads), thread_name_prefix="bookie-read"
        )

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Answer on ``loop`` from now on (the bookie's start)."""
        self._loop = loop

    def stop(self) -> None:
        """Wait for the read threads and drop the reads not started: no read thread is left on a closed index."""
        self.read_pool.shutdown(wait=True, cancel_futures=True)

    def read_batch_soon(
        self, scope_id: int, ledger_id: int, start_entry: int, max_count: int, max_size: int
    ) -> "list[bytes] | asyncio.Future[list[bytes]]":
        """A batch read's entries, as BatchedReadEntryProcessor.readData (4.17) reads them: first entry always, stop
        at gaps or limits.

        The response frame is counted from 36 bytes (prefix, request id, length field)
        plus ``4 + len`` per entry, against ``min(request maxSize, maxBatchReadSize)``.
        The entries now when memory holds them all, else a future the read threads complete.
        """
        if max_count <= 0:
            max_count = 0x7FFFFFFF
        limit = min(max_size, self.conf.maxBatchReadSize)
        if start_entry >= 0:
            return self.read_range_soon(
                scope_id, ledger_id, start_entry, max_count, limit - v2.BATCH_RESPONSE_OVERHEAD
            )
        # Start -1 reads "the last entry" first, as Java's readEntry(-1) does, then -1 + i.
        frame_size = v2.BATCH_RESPONSE_OVERHEAD
        entries: list[bytes] = []
        for i in range(max_count):
            try:
                data = self.storage.get_entry(scope_id, ledger_id, start_entry + i)
            except BookieError:
                if not entries:
                    raise
                break
            frame_size += len(data) + 4
            if entries and frame_size > limit:
                break
            entries.append(data)
        return entries

    def read_entry_soon(self, scope_id: int, ledger_id: int, entry_id: int) -> "bytes | asyncio.Future[bytes]":
        """An entry's bytes now when memory holds it, else a future a read thread completes from disk
        (docs/bookie.md, "Reads").  ENOLEDGER (and ENOENTRY for -1 of an empty ledger) raise now; the disk's
        errors come through the future."""
        key, data = self.storage.locate(scope_id, ledger_id, entry_id)
        if data is not None:
            return data
        pending = self._read_ahead_for(key, None)
        if pending is None:
            return self._read_cold_soon(key)
        # A read-ahead on a read thread may bring it: wait for that one, then look again.
        assert self._loop is not None
        wait = ReadAheadWait(loop=self._loop)
        self._wait_for(pending, key, wait)
        return wait

    def memory_hits(self, scope_id: int, reads: Sequence[tuple]) -> list[bytes | None]:
        """:meth:`LedgerStorage.memory_hits`: what memory holds of a run of single reads; the reads it does not
        answer take :meth:`read_entry_soon`."""
        return self.storage.memory_hits(scope_id, reads)

    def read_run_soon(
        self, scope_id: int, reads: list[tuple[int, int]], budget: int
    ) -> "asyncio.Future[list[bytes | BookieError]]":
        """The entries of a run's single reads that memory lacks, ``(ledger id, entry id)`` each, from a read
        thread as one job (:meth:`LedgerStorage.read_run_cold`: each read's bytes or error, in order, within
        ``budget`` bytes); what it brought goes into the read cache unless its ledger would not fit there
        (docs/bookie.md, "Runs of single reads")."""
        storage = self.storage

        def remember(found: list[bytes | BookieError]) -> list[bytes | BookieError]:
            storage.remember_run(scope_id, reads, found)
            return found

        return self._on_read_thread(lambda: storage.read_run_cold(scope_id, reads, budget), remember)

    def _read_ahead_for(
        self, key: tuple[int, int, int], after: int | None
    ) -> "tuple[int, asyncio.Future[bytes]] | None":
        """``(its entry id, its answer)`` of a cold read on a read thread whose read-ahead window holds ``key``'s
        entry (ids after the read's own, less than it + its read-ahead) and, unless ``after`` is None, whose
        entry id is greater than ``after``; or None."""
        pending = self._read_aheads.get((key[0], key[1]))
        if pending:
            entry_id = key[2]
            for first, answer, ahead in pending:
                if first < entry_id < first + ahead and (after is None or first > after):
                    return first, answer
        return None

    def _wait_for(
        self, pending: "tuple[int, asyncio.Future[bytes]]", key: tuple[int, int, int], wait: ReadAheadWait
    ) -> None:
        first, answer = pending
        answer.add_done_callback(lambda _done: self._after_read_ahead(key, wait, first))

    def _read_ahead_size(self, key: tuple[int, int, int]) -> int:
        """How many entries the cold single read of ``key`` brings, itself included (docs/bookie.md, "Reads"):
        ``dbStorage_readAheadCacheBatchSize``, or twice the ledger's last cold read's when this one follows on from
        it (after its entry, less than four of its read-aheads further: a scan, striped ensembles' gaps included),
        up to :data:`READ_AHEAD_GROWTH` times the setting."""
        base = max(1, self.conf.dbStorage_readAheadCacheBatchSize)
        if base == 1:
            return 1
        ledger = (key[0], key[1])
        last = self._last_read_ahead.pop(ledger, None)
        ahead = base
        if last is not None and last[0] < key[2] < last[0] + 4 * last[1]:
            ahead = min(2 * last[1], READ_AHEAD_GROWTH * base)
        self._last_read_ahead[ledger] = (key[2], ahead)
        if len(self._last_read_ahead) > SEQUENTIAL_LEDGERS:
            self._last_read_ahead.popitem(last=False)
        return ahead

    def _read_cold_soon(self, key: tuple[int, int, int]) -> "asyncio.Future[bytes]":
        """A read thread reads ``key``'s entry and its read-ahead; while it runs, the reads its window holds
        wait for it (:meth:`_read_ahead_for`)."""
        ahead = self._read_ahead_size(key)
        answer = self._on_read_thread(lambda: self.storage.read_cold(key, ahead), self._cache_read_ahead)
        if ahead > 1:
            ledger = (key[0], key[1])
            pending = self._read_aheads.setdefault(ledger, [])
            item = (key[2], answer, ahead)
            pending.append(item)
            # First of the answer's callbacks: the read-ahead is no longer pending when its waiters look again.
            answer.add_done_callback(lambda _done: self._read_ahead_done(ledger, item))
        return answer

    def _read_ahead_done(self, ledger: tuple[int, int], item: tuple[int, "asyncio.Future[bytes]", int]) -> None:
        pending = self._read_aheads.get(ledger)
        if pending is not None:
            pending.remove(item)
            if not pending:
                del self._read_aheads[ledger]

    def _after_read_ahead(self, key: tuple[int, int, int], wait: ReadAheadWait, first: int) -> None:
        """The read-ahead of entry ``first`` that ``wait`` waited for is over, whatever its outcome (its error
        is its own read's, not this one's): the entry from memory if it brought it; else the read waits for a
        read-ahead of a later entry than ``first`` whose window holds it, if one is on a read thread (another
        waiter's own read: a window of entries too large for one read-ahead is read one entry after another,
        not all at once), else it goes to a read thread itself.  The entries it waits for increase, so it
        waits fewer times than the largest read-ahead (:meth:`_read_ahead_size`)."""
        if wait.done():
            return
        try:
            _key, data = self.storage.locate(*key)
        except BookieError as exc:  # the ledger was deleted meanwhile: what this read would answer now
            wait.set_exception(exc)
            return
        if data is not None:
            wait.set_result(data)
            return
        pending = self._read_ahead_for(key, first)
        if pending is not None:
            self._wait_for(pending, key, wait)
            return

        def settle(own: "asyncio.Future[bytes]") -> None:
            if wait.done():
                return
            error = own.exception()
            if error is None:
                wait.set_result(own.result())
            else:
                wait.set_exception(error)

        try:
            own = self._read_cold_soon(key)
        except RuntimeError as exc:  # the read threads are shut down: the bookie is stopping
            wait.set_exception(BookieIOError("entry read failed", error=repr(exc)))
            return
        own.add_done_callback(settle)

    def _cache_read_ahead(self, found: list[tuple[int, bytes]]) -> bytes:
        """Loop thread: a cold single read's entry and its read-ahead go into the read cache; the entry is
        the answer."""
        self.storage.remember(found)
        return found[0][1]

    def read_range_soon(
        self, scope_id: int, ledger_id: int, start: int, max_count: int, budget: int
    ) -> "list[bytes] | asyncio.Future[list[bytes]]":
        """A batch read's entries (:meth:`LedgerStorage.get_range`'s rules): now when memory holds the whole
        range, else a future a read thread completes with the rest from disk.  What the disk gave goes into
        the read cache as one range (:meth:`LedgerStorage.remember_range`; docs/bookie.md, "Reads")."""
        storage = self.storage
        have, used, next_id = storage.range_in_memory(scope_id, ledger_id, start, max_count, budget)
        if next_id is None:
            return have
        stop, from_memory = start + max_count, len(have)

        def remember(entries: list[bytes]) -> list[bytes]:
            storage.remember_range(scope_id, ledger_id, next_id, entries[from_memory:])
            return entries

        return self._on_read_thread(
            lambda: storage.range_cold(scope_id, ledger_id, next_id, stop, budget, have, used), remember
        )

    def _on_read_thread(self, read: Callable[[], R], result: Callable[[R], T]) -> "asyncio.Future[T]":
        """Run ``read`` on a read thread; on the loop, resolve the returned future with ``result(found)`` (or
        the read's error; EIO when ``result`` itself raises: the request is answered whatever fails)."""
        assert self._loop is not None
        loop = self._loop
        out: asyncio.Future[T] = loop.create_future()

        def done(fut: "asyncio.Future[R]") -> None:
            if out.done():
                return
            if fut.cancelled():
                out.set_exception(BookieIOError("entry read cancelled"))
                return
            error = fut.exception()
            if error is None:
                try:
                    out.set_result(result(fut.result()))
                except Exception as exc:  # noqa: BLE001 - a failure on the loop still answers the request
                    log.exception("handling a read thread's result failed")
                    out.set_exception(BookieIOError("entry read failed", error=repr(exc)))
            elif isinstance(error, BookieError):
                out.set_exception(error)
            else:
                out.set_exception(BookieIOError("entry read failed", error=repr(error)))

        loop.run_in_executor(self.read_pool, read).add_done_callback(done)
        return out
