"""The bookie's core: what an add, a fence, a read or an explicit LAC does to
ledger state, journal and storage, independent of the wire protocol.

Everything here runs on the event loop thread (the journal writer and the
checkpoint run on their own threads and report back through the loop), so
ledger state needs no locks.  Operations that must be durable before they are
answered return an ``asyncio.Future`` that resolves when the journal has
synced their record.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TypeVar

from bkspark.errors import (
    BookieError,
    BookieIOError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
    WriteOnReadOnlyBookieError,
)
from bkspark.retry import Attempts, RetryPolicy

from bookie_server.config import BookieConfig
from bookie_server.journal import (
    Journal,
    JournalFaults,
    JournalPosition,
    RecordType,
    add_records,
    encode_add,
    encode_record,
    replay_journals,
)
from bookie_server.storage import LedgerInfo, LedgerStorage

#: The fields of an add row (``add_entries_cb``) that its checks depend on: ledger id, master key, recovery and
#: high-priority flags.
_CHECKED_FIELDS = itemgetter(0, 4, 5, 6)

T = TypeVar("T")
R = TypeVar("R")

#: A ledger's cold single reads that follow one another along it (a scan) read ahead twice as many entries each
#: time, up to this many times ``dbStorage_readAheadCacheBatchSize`` (docs/bookie.md, "Reads"). The read-ahead
#: only takes records from the one chunk its read brought, so a larger one costs no more I/O.
READ_AHEAD_GROWTH = 16

#: Ledgers whose last cold read's read-ahead :class:`Bookie` remembers (the least recently read go first).
SEQUENTIAL_LEDGERS = 4096

#: A failed periodic checkpoint is tried again after 0.1 s, doubling up to 5 s (or ``flushInterval`` when shorter), for
#: as long as it fails: a full disk is not retried at every 100 ms tick of the loop (docs/bookie.md, "Failures between
#: the steps").
CHECKPOINT_RETRY = RetryPolicy(
    max_tries=sys.maxsize, delay=0.1, backoff=2.0, max_delay=5.0, deadline=None, jitter=0.0, retry_on=lambda exc: True
)


async def _outlast_cancellation(write: "asyncio.Future[None]") -> bool:
    """Wait until ``write`` (a checkpoint's write on an executor thread) is done, through cancellations of the
    awaiting task; whether one came.  The thread cannot be stopped: a checkpoint that released its snapshot
    while it still ran would hand the entries back to the write cache and let the next checkpoint (a stop's final
    one) write the entry log and the index beside it (docs/bookie.md, "Failures between the steps")."""
    cancelled = False
    while not write.done():
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:  # noqa: BLE001 - the write's own error: the caller takes it from the future
            break
    return cancelled


def checkpoint_retry(interval_s: float) -> RetryPolicy:
    """The back-off of failed periodic checkpoints for a bookie whose ``flushInterval`` is ``interval_s`` seconds:
    :data:`CHECKPOINT_RETRY`, its waits never longer than that interval."""
    return CHECKPOINT_RETRY.with_(max_delay=min(interval_s, CHECKPOINT_RETRY.max_delay))


#: Seconds between two log lines about checkpoints that keep failing (the first failure is logged with its traceback,
#: later ones only as a count in a one-line warning).
CHECKPOINT_FAILURE_LOG_INTERVAL_S = 60.0

__all__ = ["Bookie", "ReadAheadWait", "ReadLacResult"]

log = logging.getLogger("bookie_server.bookie")


class ReadAheadWait(asyncio.Future):  # type: ignore[type-arg]
    """A cold read's answer that waits for a read-ahead already on a read thread (:meth:`Bookie.read_entry_soon`;
    docs/bookie.md, "Reads"): the connection counts it apart from the reads it sent to the read threads."""


@dataclass(frozen=True, slots=True)
class ReadLacResult:
    """What READ_LAC answers: the explicit-LAC blob and the last entry, when present."""

    explicit_lac: bytes | None
    last_entry: bytes | None


class Bookie:
    """Ledger state machine over one journal and one :class:`LedgerStorage`."""

    def __init__(self, conf: BookieConfig, *, metrics: object | None = None) -> None:
        self.conf = conf
        self.metrics = metrics
        self.storage = LedgerStorage(
            conf.ledger_paths,
            write_cache_max_bytes=conf.dbStorage_writeCacheMaxSizeMb * 1024 * 1024,
            read_cache_max_bytes=conf.dbStorage_readAheadCacheMaxSizeMb * 1024 * 1024,
            entry_log_size_limit=conf.logSizeLimit,
        )
        # Every journal directory is written (file n in directory n % count) and replayed.
        self.journal_dirs = [path / "current" for path in conf.journal_paths]
        self.journal: Journal | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lac_waiters: dict[tuple[int, int], list[asyncio.Future[None]]] = {}
        self._fence_pending: dict[tuple[int, int], asyncio.Future[None]] = {}
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._checkpointing = False
        self._write_cache_waiters: list[Callable[[], None]] = []
        self._background: set[asyncio.Task[None]] = set()
        self._queued_records: list[bytes] = []
        self._queued_dones: list[Callable[[BaseException | None], None]] = []
        self._queued_early: list[Callable[[BaseException | None], None]] = []
        self._forced_readonly = conf.forceReadOnlyBookie
        self._disk_readonly = False
        #: The journal failed a write or a sync and refuses every record from now on (journal.py): only a restart
        #: makes this bookie writable again.
        self._journal_failed = False
        #: The last checkpoint failed (a full or broken ledger disk, while the journal may still work): read-only
        #: until one succeeds again (:meth:`_after_checkpoint`).
        self._checkpoint_failed = False
        #: Checkpoints failed in a row, and when the last log line about them was written (:meth:`_after_checkpoint`).
        self._checkpoint_failures = 0
        self._checkpoint_failure_logged = 0.0
        self.on_state_change: Callable[[bool], None] | None = None
        #: Called once on the loop, with the reason, when the bookie must stop: a fault (a full disk, a failed journal
        #: or checkpoint) would turn it read-only while ``readOnlyModeEnabled`` is false, where Java's bookie shuts
        #: down (docs/bookie.md, configuration: "read-only switches").
        self.on_must_stop: Callable[[str], None] | None = None
        self._must_stop = False
        #: Called on the loop after every checkpoint with its latency in milliseconds and whether it succeeded (the
        #: app's ``bookie_flush`` metric).
        self.on_checkpoint: Callable[[float, bool], None] | None = None
        self.started = False
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

    # -- life cycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Open storage, replay the journal, checkpoint, start the writer and flusher."""
        self._loop = asyncio.get_running_loop()
        self.storage.open()
        replayed = self._replay()
        self.journal = Journal(
            self.journal_dirs,
            sync_data=self.conf.journalSyncData,
            max_file_size=self.conf.journalMaxSizeMB * 1024 * 1024,
            dispatch=self._loop.call_soon_threadsafe,
            on_batch=getattr(self.metrics, "journal_batch", None),
            on_failure=self._journal_broke,
            faults=JournalFaults.from_env(),
        )
        self.journal.open()
        # Everything replayed is now written to entry logs, so old journals can go.
        await self._loop.run_in_executor(None, self.storage.checkpoint, self.journal.written_position)
        self.journal.trim(self.storage.checkpoint_mark)
        log.info("bookie storage ready", extra={"replayed_records": replayed, "ledgers": len(self.storage.ledgers())})
        self._checkpoint_task = asyncio.create_task(self._checkpoint_loop(), name="bookie-checkpoint")
        self.started = True

    def _replay(self) -> int:
        """Strict replay of every journal directory (see :func:`replay_journals`)."""
        return replay_journals(
            self.journal_dirs,
            self.storage.checkpoint_mark,
            self.storage.apply,
            skip_invalid_records=self.conf.skipReplayJournalInvalidRecord,
        )

    async def stop(self) -> None:
        """Stop flushing, sync the journal, checkpoint everything, close files (all of them even when the final
        checkpoint fails, which is then raised)."""
        if not self.started:
            return
        self.started = False
        if self._checkpoint_task is not None:
            self._checkpoint_task.cancel()  # a checkpoint it is in ends its write first (:meth:`checkpoint`)
            try:
                await self._checkpoint_task
            except asyncio.CancelledError:
                pass
        assert self.journal is not None and self._loop is not None
        journal = self.journal
        if self._queued_records:
            self._flush_queued()
        await self._loop.run_in_executor(None, journal.close)
        while self._checkpointing:
            await asyncio.sleep(0.01)
        try:
            # When it fails (a full disk), the journal keeps every record it did not store: the next start replays.
            await self._loop.run_in_executor(None, self.storage.checkpoint, journal.written_position)
            journal.trim(self.storage.checkpoint_mark)
        finally:
            for waiters in self._lac_waiters.values():
                for fut in waiters:
                    if not fut.done():
                        fut.cancel()
            self._lac_waiters.clear()
            self.read_pool.shutdown(wait=True, cancel_futures=True)  # no read thread left on a closed index
            self.storage.close()

    async def _checkpoint_loop(self) -> None:
        """A checkpoint every ``flushInterval``, or as soon as the write cache is full; after a failure, the next
        only after :data:`CHECKPOINT_RETRY`'s back-off (a full cache would otherwise retry it at every tick).
        :meth:`checkpoint` reports every outcome itself (:meth:`_after_checkpoint`)."""
        interval = max(self.conf.flushInterval, 100) / 1000.0
        retry = checkpoint_retry(interval)
        failing: Attempts | None = None
        next_run = time.monotonic() + interval
        while True:
            await asyncio.sleep(min(0.1, interval))
            if time.monotonic() >= next_run or (failing is None and self.storage.needs_flush):
                try:
                    await self.checkpoint()
                except Exception as exc:
                    failing = failing or retry.start()
                    next_run = time.monotonic() + failing.next_delay(exc)
                    continue
                failing = None
                next_run = time.monotonic() + interval

    async def checkpoint(self) -> None:
        """Flush the write cache to entry logs + index, then trim covered journal files; the outcome, failure
        included, goes to :meth:`_after_checkpoint` before this returns or raises."""
        if self._checkpointing or self.journal is None or self._loop is None:
            return
        self._checkpointing = True
        started = time.perf_counter()
        stored = False
        failure: Exception | None = None
        cancelled = False
        try:
            snapshot = self.storage.begin_checkpoint(self.journal.written_position)
            try:
                write = self._loop.run_in_executor(None, self.storage.write_checkpoint, snapshot)
                cancelled = await _outlast_cancellation(write)
                write.result()  # the write's own error, if it failed
                stored = True
            finally:
                self.storage.end_checkpoint(snapshot, stored)
            self.journal.roll()
            self.journal.trim(self.storage.checkpoint_mark)
            if cancelled:
                raise asyncio.CancelledError
        except Exception as exc:
            failure = exc
            if cancelled:  # the task was cancelled meanwhile: it ends cancelled whatever the write did
                raise asyncio.CancelledError from exc
            raise
        finally:
            self._after_checkpoint(stored, failure)
            if self.on_checkpoint is not None:
                self.on_checkpoint((time.perf_counter() - started) * 1000.0, failure is None)
            self._checkpointing = False
            waiters, self._write_cache_waiters = self._write_cache_waiters, []
            for wake in waiters:
                wake()

    def _checkpoint_in_background(self) -> None:
        """A checkpoint now, not awaited (an add filled the write cache).  Its failure was reported by
        :meth:`_after_checkpoint` (the periodic loop retries it), so the task's exception is taken here rather than
        logged again by asyncio as never retrieved."""
        if self._loop is not None:
            task = self._loop.create_task(self.checkpoint())
            self._background.add(task)  # keep a reference until it is done
            task.add_done_callback(self._checkpoint_done)

    def _checkpoint_done(self, task: "asyncio.Task[None]") -> None:
        self._background.discard(task)
        if not task.cancelled():
            task.exception()

    async def checkpoint_after_now(self) -> None:
        """A checkpoint that begins after this call: one already running may have taken its snapshot before what the
        caller just changed (GC's deletions), so it is waited for, not joined."""
        while self._checkpointing:
            await asyncio.sleep(0.01)
        await self.checkpoint()  # no await between the loop's end and its check: it runs

    @property
    def write_cache_full(self) -> bool:
        """True while a checkpoint runs and the write cache is at its bound: new adds must wait.

        (DbLedgerStorage blocks adds the same way; without this the cache would grow
        without bound while the disk is slow.)
        """
        return self._checkpointing and self.storage.needs_flush

    def wait_write_cache(self, wake: Callable[[], None]) -> None:
        """Run ``wake`` once the running checkpoint ends (a connection parked on a full write cache)."""
        if self.write_cache_full:
            self._write_cache_waiters.append(wake)
        else:
            wake()

    # -- read-only state ----------------------------------------------------------------
    @property
    def readonly(self) -> bool:
        """True when adds are refused (admin request, disks over the threshold, a failed journal, or a failed
        checkpoint)."""
        return self._forced_readonly or self._disk_readonly or self._journal_failed or self._checkpoint_failed

    @property
    def high_priority_writable(self) -> bool:
        """True when recovery (high-priority) adds are taken even if :attr:`readonly`: only an admin's read-only
        switch lets them through; a full disk, a failed journal or a failed checkpoint cannot store them."""
        return not (self._disk_readonly or self._journal_failed or self._checkpoint_failed)

    def _after_checkpoint(self, stored: bool, failure: Exception | None) -> None:
        """Loop thread, after every periodic, add-triggered or GC checkpoint: the one place that turns its outcome into
        the bookie's state and log lines (docs/bookie.md, "Failures between the steps").

        One whose entries were not stored turns the bookie read-only: with its ledger disk full or broken and its
        journal still working, each add it took would stay in the write cache, given back by every failed
        checkpoint, past the cache's bound.  The next that stores them makes it writable again, as Java's bookie
        leaves read-only mode once a ledger directory is writable.  A disk that stays full must not flood the log:
        the first failure in a row is logged with its traceback, later ones as a count at most once every
        :data:`CHECKPOINT_FAILURE_LOG_INTERVAL_S`, and the first success after them in one line.
        """
        before = self.readonly
        self._checkpoint_failed = not stored
        if stored and failure is None:
            if self._checkpoint_failures:
                log.info("a checkpoint succeeded again after %d failed ones: the ledger storage takes adds",
                         self._checkpoint_failures, extra={"failed_checkpoints": self._checkpoint_failures})
                self._checkpoint_failures = 0
        else:
            self._checkpoint_failures += 1
            now = time.monotonic()
            if self._checkpoint_failures == 1:
                state = ": read-only until one succeeds (the write cache keeps its entries)" if not stored else (
                    " after storing its entries"
                )
                log.error("a checkpoint failed%s; tried again with back-off, logged again at most once every %.0f s",
                          state, CHECKPOINT_FAILURE_LOG_INTERVAL_S, exc_info=failure)
                self._checkpoint_failure_logged = now
            elif now - self._checkpoint_failure_logged >= CHECKPOINT_FAILURE_LOG_INTERVAL_S:
                log.warning("checkpoints keep failing: %d in a row, the last with %r", self._checkpoint_failures,
                            failure, extra={"failed_checkpoints": self._checkpoint_failures})
                self._checkpoint_failure_logged = now
        self._notify_state(before)

    def _journal_broke(self) -> None:
        """Loop thread: the journal refuses every record from now on, so the bookie turns read-only (its registration
        moves to ``available/readonly``, and clients stop choosing it for new ledgers) while it goes on serving
        reads (docs/bookie.md, "Failures between the steps")."""
        before = self.readonly
        self._journal_failed = True
        log.error("the journal failed: the bookie is read-only until it is restarted")
        self._notify_state(before)

    def set_readonly(self, readonly: bool) -> None:
        """Admin switch (HTTP ``/api/v1/bookie/state/readonly``)."""
        before = self.readonly
        self._forced_readonly = readonly
        self._notify_state(before)

    def check_disks(self) -> None:
        """Enter read-only mode over diskUsageThreshold, leave it under diskUsageLwmThreshold."""
        total, free = self.storage.disk_usage()
        if total <= 0:
            return
        used = 1.0 - free / total
        before = self.readonly
        if not self._disk_readonly and used >= self.conf.diskUsageThreshold:
            log.warning("disk usage %.3f over threshold %.3f: going read-only", used, self.conf.diskUsageThreshold)
            self._disk_readonly = True
        elif self._disk_readonly and used < self.conf.diskUsageLwmThreshold:
            log.info("disk usage %.3f under %.3f: writable again", used, self.conf.diskUsageLwmThreshold)
            self._disk_readonly = False
        self._notify_state(before)

    def _notify_state(self, before: bool) -> None:
        """Tell the app the bookie turned read-only or writable (its registration follows); or, when a fault turned
        it read-only while ``readOnlyModeEnabled`` is false, that it must stop: Java's bookie shuts down then
        ("ReadOnly mode is not enabled ... Shutting down bookie", exit status 5), its registration left as it is
        until the stop removes it.  Meanwhile adds get EREADONLY."""
        if before == self.readonly:
            return
        faulted = self._disk_readonly or self._journal_failed or self._checkpoint_failed
        if self.readonly and faulted and not self.conf.readOnlyModeEnabled:
            if not self._must_stop:
                self._must_stop = True
                reason = "disk usage over diskUsageThreshold" if self._disk_readonly else (
                    "the journal failed" if self._journal_failed else "a checkpoint failed"
                )
                log.error("%s, and read-only mode is not enabled (readOnlyModeEnabled=false): shutting down the bookie",
                          reason)
                if self.on_must_stop is not None:
                    self.on_must_stop(reason)
            return
        if self.on_state_change is not None:
            self.on_state_change(self.readonly)

    # -- helpers ------------------------------------------------------------------------
    def _new_future(self) -> asyncio.Future[None]:
        assert self._loop is not None
        return self._loop.create_future()

    def _journal_cb(
        self, record: bytes, done: Callable[[BaseException | None], None], *, deferred_sync: bool = False
    ) -> None:
        """Queue a journal record; ``done(error)`` runs on the loop once it is durable.

        Records queued during one loop iteration go to the journal thread together
        (one lock round trip), in order.
        """
        if self.journal is None:
            done(BookieIOError("bookie is not running"))
            return
        if not self._queued_records:
            assert self._loop is not None
            self._loop.call_soon(self._flush_queued)
        self._queued_records.append(record)
        (self._queued_early if deferred_sync else self._queued_dones).append(done)

    def _flush_queued(self) -> None:
        if not self._queued_records:
            return  # flushed already (a group of adds hands its records over at once)
        records, self._queued_records = self._queued_records, []
        dones, self._queued_dones = self._queued_dones, []
        early, self._queued_early = self._queued_early, []
        if self.journal is None:
            error = BookieIOError("bookie is not running")
            for done in dones + early:
                done(error)
            return
        self.journal.submit_many(records, dones, early)

    def _journal(self, record: bytes, fut: asyncio.Future[None], after: Callable[[], None] | None = None) -> None:
        def done(error: BaseException | None) -> None:
            if error is None and after is not None:
                after()
            if fut.done():
                return
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)

        self._journal_cb(record, done)

    def _check_key(self, info: LedgerInfo | None, master_key: bytes, ledger_id: int) -> None:
        if info is not None and info.master_key is not None and info.master_key != master_key:
            raise UnauthorizedAccessError("master key mismatch", ledger_id=ledger_id)

    def _bind_key(self, scope_id: int, ledger_id: int, info: LedgerInfo | None, master_key: bytes) -> bytes:
        """Journal bytes to prepend when this is the ledger's first master key."""
        if info is not None and info.master_key is not None:
            return b""
        self.storage.set_master_key(scope_id, ledger_id, master_key)
        return encode_record(RecordType.MASTER_KEY, scope_id, ledger_id, master_key)

    # -- operations ---------------------------------------------------------------------
    def add_entry(
        self,
        scope_id: int,
        ledger_id: int,
        entry_id: int,
        lac: int,
        entry: bytes,
        master_key: bytes,
        *,
        recovery: bool = False,
        high_priority: bool = False,
    ) -> asyncio.Future[None]:
        """Store an entry; the future resolves once it is durable in the journal.

        Raises at once: EREADONLY, EUA (key mismatch), EFENCED (fenced, not recovery).
        """
        fut = self._new_future()

        def done(error: BaseException | None) -> None:
            if not fut.done():
                if error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(error)

        self.add_entry_cb(
            scope_id, ledger_id, entry_id, lac, entry, master_key, done, recovery=recovery, high_priority=high_priority
        )
        return fut

    def add_entry_cb(
        self,
        scope_id: int,
        ledger_id: int,
        entry_id: int,
        lac: int,
        entry: bytes,
        master_key: bytes,
        done: Callable[[BaseException | None], None],
        *,
        recovery: bool = False,
        high_priority: bool = False,
        deferred_sync: bool = False,
    ) -> None:
        """:meth:`add_entry` without a future (the server's hot path): ``done(error)`` once durable,
        or, with ``deferred_sync`` (WriteFlag.DEFERRED_SYNC), once written but before the sync."""
        if self.readonly and not (high_priority and self.high_priority_writable):
            raise WriteOnReadOnlyBookieError(ledger_id=ledger_id)
        info = self.storage.ledger(scope_id, ledger_id)
        self._check_key(info, master_key, ledger_id)
        if info is not None and info.fenced and not recovery:
            raise LedgerFencedError(ledger_id=ledger_id)
        prefix = self._bind_key(scope_id, ledger_id, info, master_key)
        self.storage.put_entry(scope_id, ledger_id, entry_id, lac, entry)
        record = encode_add(scope_id, ledger_id, entry_id, lac, entry)

        def durable(error: BaseException | None) -> None:
            if error is None and (scope_id, ledger_id) in self._lac_waiters:
                self._lac_changed(scope_id, ledger_id)
            done(error)

        self._journal_cb(prefix + record if prefix else record, durable, deferred_sync=deferred_sync)
        if self.storage.needs_flush and not self._checkpointing:
            self._checkpoint_in_background()

    def add_entries_cb(
        self,
        adds: Sequence[tuple[int, int, int, bytes | memoryview, bytes, bool, bool]],
        done: Callable[[BaseException | None], None],
    ) -> list[BookieError | None]:
        """The adds of one received chunk (scope 0), as a group (loop thread).

        ``adds`` are ``(ledger_id, entry_id, lac, entry, master_key, recovery, high_priority)``.  Each
        is checked and stored as :meth:`add_entry_cb` does it; the accepted ones go to the journal as one
        submission (one record blob, one completion) handed to the journal thread before this returns, not
        one loop iteration later, and ``done(error)`` runs once they are all durable (not at all when none was
        accepted; during this call when the journal refuses at once).  Returns each add's refusal (None:
        accepted), in order.

        The checks depend on the ledger, the key and the two flags only, and nothing in the loop changes
        their outcome once passed, so consecutive adds alike are checked once (docs/bookie.md, "Adds").
        """
        refused: list[BookieError | None] = []
        accepted: list[tuple[int, int, int, bytes | memoryview, bytes, bool, bool]] = []
        key_records: list[bytes] = []
        passed: tuple[int, bytes, bool, bool] | None = None
        for add in adds:
            checked = _CHECKED_FIELDS(add)
            if passed is None or passed != checked:
                try:
                    key_record = self._check_add(*checked)
                except BookieError as exc:
                    refused.append(exc)
                    passed = None
                    continue
                if key_record:
                    key_records.append(key_record)
                passed = checked
            accepted.append(add)
            refused.append(None)
        if accepted:
            blob, entries = add_records(0, accepted)
            self.storage.put_entries(0, accepted, entries)
            touched = set(map(itemgetter(0), accepted))

            def durable(error: BaseException | None) -> None:
                if error is None and self._lac_waiters:
                    for ledger_id in touched:
                        if (0, ledger_id) in self._lac_waiters:
                            self._lac_changed(0, ledger_id)
                done(error)

            self._journal_cb(b"".join(key_records) + blob if key_records else blob, durable)
            self._flush_queued()  # a group is a batch already: the journal thread may take it now
            if self.storage.needs_flush and not self._checkpointing:
                self._checkpoint_in_background()
        return refused

    def _check_add(self, ledger_id: int, master_key: bytes, recovery: bool, high_priority: bool) -> bytes:
        """The checks of a scope-0 add (read-only, master key, fenced), raising the refusal; the MASTER_KEY record
        of a ledger this add creates (to journal before its adds), else b""."""
        if self.readonly and not (high_priority and self.high_priority_writable):
            raise WriteOnReadOnlyBookieError(ledger_id=ledger_id)
        info = self.storage.ledger(0, ledger_id)
        self._check_key(info, master_key, ledger_id)
        if info is not None and info.fenced and not recovery:
            raise LedgerFencedError(ledger_id=ledger_id)
        # A new ledger's key record goes before the group's adds (before this ledger's first).
        return self._bind_key(0, ledger_id, info, master_key)

    def fence(self, scope_id: int, ledger_id: int, master_key: bytes) -> asyncio.Future[None]:
        """Fence a ledger (creating it if unknown); resolves once the fence is durable.

        Raises EUA at once on a master key mismatch.  A ledger whose fence failed answers every later fence with
        that failure (its fenced flag stays: refusing adds is safe, acknowledging the fence is not).
        """
        info = self.storage.ledger(scope_id, ledger_id)
        self._check_key(info, master_key, ledger_id)
        key = (scope_id, ledger_id)
        if info is not None and info.fenced:
            pending = self._fence_pending.get(key)
            if pending is not None:
                return asyncio.shield(pending)  # type: ignore[return-value]
            fut = self._new_future()
            fut.set_result(None)
            return fut
        prefix = self._bind_key(scope_id, ledger_id, info, master_key)
        self.storage.set_fenced(scope_id, ledger_id)
        fut = self._new_future()
        self._fence_pending[key] = fut
        fut.add_done_callback(lambda done: self._fence_settled(key, done))
        self._journal(prefix + encode_record(RecordType.FENCE, scope_id, ledger_id), fut)
        return fut

    def _fence_settled(self, key: tuple[int, int], done: asyncio.Future[None]) -> None:
        """A durable fence is forgotten (later fences of the ledger answer EOK at once); a failed one is kept, so
        they get its error: the ledger is fenced in memory but its record is not durable, and an EOK from memory
        would be an acknowledgement a crash loses (docs/bookie.md, "Failures between the steps")."""
        if not done.cancelled() and done.exception() is None:
            self._fence_pending.pop(key, None)

    def read_entry(self, scope_id: int, ledger_id: int, entry_id: int) -> bytes:
        """An entry's bytes (entry -1: the last stored), on the loop thread even from disk (start-up, recovery
        tools); raises ENOLEDGER / ENOENTRY / EIO.  Requests use :meth:`read_entry_soon`."""
        return self.storage.get_entry(scope_id, ledger_id, entry_id)

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

    def last_add_confirmed(self, scope_id: int, ledger_id: int) -> int:
        """The bookie's LAC for the ledger (ENOLEDGER when unknown)."""
        info = self.storage.ledger(scope_id, ledger_id)
        if info is None:
            raise NoSuchLedgerError(ledger_id=ledger_id)
        return info.lac

    def write_lac(
        self, scope_id: int, ledger_id: int, blob: bytes, master_key: bytes, lac: int
    ) -> asyncio.Future[None]:
        """Keep an explicit-LAC blob verbatim; ``lac`` is the value its header carries."""
        if self.readonly:
            raise WriteOnReadOnlyBookieError(ledger_id=ledger_id)
        info = self.storage.ledger(scope_id, ledger_id)
        self._check_key(info, master_key, ledger_id)
        prefix = self._bind_key(scope_id, ledger_id, info, master_key)
        self.storage.set_explicit_lac(scope_id, ledger_id, blob, lac)
        fut = self._new_future()
        self._journal(
            prefix + encode_record(RecordType.EXPLICIT_LAC, scope_id, ledger_id, blob),
            fut,
            lambda: self._lac_changed(scope_id, ledger_id),
        )
        return fut

    def read_lac(self, scope_id: int, ledger_id: int) -> ReadLacResult:
        """Explicit-LAC blob and last entry (either may be None); raises ENOLEDGER for an unknown ledger."""
        info = self.storage.ledger(scope_id, ledger_id)
        if info is None:
            raise NoSuchLedgerError(ledger_id=ledger_id)
        last = None
        if info.last_entry >= 0:
            try:
                last = self.storage.get_entry(scope_id, ledger_id, -1)
            except NoSuchEntryError:
                last = None
        return ReadLacResult(info.explicit_lac, last)

    def force_ledger(self) -> asyncio.Future[None]:
        """Resolves once everything journaled so far is durable."""
        fut = self._new_future()
        self._journal(b"", fut)
        return fut

    async def wait_for_lac(self, scope_id: int, ledger_id: int, previous_lac: int, timeout_ms: int) -> bool:
        """Wait until the ledger's LAC passes ``previous_lac`` or the timeout ends; True if it did."""
        timeout = min(max(timeout_ms, 0), self.conf.longPollMaxTimeoutMs) / 1000.0
        deadline = time.monotonic() + timeout
        key = (scope_id, ledger_id)
        while True:
            info = self.storage.ledger(scope_id, ledger_id)
            if info is None:
                raise NoSuchLedgerError(ledger_id=ledger_id)
            if info.lac > previous_lac:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            fut = self._new_future()
            self._lac_waiters.setdefault(key, []).append(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except asyncio.TimeoutError:
                return False
            finally:
                waiters = self._lac_waiters.get(key)
                if waiters is not None:
                    try:
                        waiters.remove(fut)
                    except ValueError:
                        pass
                    if not waiters:
                        self._lac_waiters.pop(key, None)

    def _lac_changed(self, scope_id: int, ledger_id: int) -> None:
        waiters = self._lac_waiters.pop((scope_id, ledger_id), None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def entry_ids(self, scope_id: int, ledger_id: int) -> list[int]:
        """Sorted ids of the ledger's stored entries (ENOLEDGER when unknown)."""
        return self.storage.entry_ids(scope_id, ledger_id)

    def delete_ledger(self, scope_id: int, ledger_id: int) -> None:
        """Drop a ledger's entries and state (garbage collection)."""
        self.storage.delete_ledger(scope_id, ledger_id)
        self._lac_changed(scope_id, ledger_id)

    @property
    def checkpoint_mark(self) -> JournalPosition:
        """Journal position the last checkpoint covers."""
        return self.storage.checkpoint_mark
