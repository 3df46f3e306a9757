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
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter

from bkspark.config.bookie import BookieConfig
from bkspark.errors import (
    BookieError,
    BookieIOError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
    WriteOnReadOnlyBookieError,
)

from bookie_server.checkpoints import Checkpoints
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
from bookie_server.reads import BookieReads
from bookie_server.storage import LedgerInfo, LedgerStorage

#: The fields of an add row (``add_entries_cb``) that its checks depend on: ledger id, master key, recovery and
#: high-priority flags.
_CHECKED_FIELDS = itemgetter(0, 4, 5, 6)

__all__ = ["Bookie", "ReadLacResult"]

log = logging.getLogger("bookie_server.bookie")


def _settles(fut: asyncio.Future[None]) -> Callable[[BaseException | None], None]:
    """A journal completion ``done(error)`` that settles ``fut`` (once: a later call finds it done)."""

    def done(error: BaseException | None) -> None:
        if fut.done():
            return
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)

    return done


@dataclass(frozen=True, slots=True)
class ReadLacResult:
    """What READ_LAC answers: the explicit-LAC blob and the last entry, when present."""

    explicit_lac: bytes | None
    last_entry: bytes | None


class Bookie(Checkpoints):
    """Ledger state machine over one journal and one :class:`LedgerStorage`; its checkpoints and read-only state
    are in :class:`~bookie_server.checkpoints.Checkpoints`, its request reads in :attr:`reads`."""

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
        #: The request reads: memory, else the read threads (docs/bookie.md, "Reads").
        self.reads = BookieReads(conf, self.storage)

    # -- life cycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Open storage, replay the journal, checkpoint, start the writer and flusher."""
        self._loop = asyncio.get_running_loop()
        self.reads.start(self._loop)
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
            self.reads.stop()  # no read thread left on a closed index
            self.storage.close()

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
        settle = _settles(fut)

        def done(error: BaseException | None) -> None:
            if error is None and after is not None:
                after()
            settle(error)

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
        self, scope_id: int, ledger_id: int, entry_id: int, lac: int, entry: bytes, master_key: bytes, **flags: bool
    ) -> asyncio.Future[None]:
        """Store an entry; the future resolves once it is durable in the journal.  ``flags`` are
        :meth:`add_entry_cb`'s (``recovery``, ``high_priority``).

        Raises at once: EREADONLY, EUA (key mismatch), EFENCED (fenced, not recovery).
        """
        fut = self._new_future()
        self.add_entry_cb(scope_id, ledger_id, entry_id, lac, entry, master_key, _settles(fut), **flags)
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
        tools); raises ENOLEDGER / ENOENTRY / EIO.  Requests use :attr:`reads` (:class:`BookieReads`)."""
        return self.storage.get_entry(scope_id, ledger_id, entry_id)

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
