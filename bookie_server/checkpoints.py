"""The bookie's checkpoints and the read-only state they drive (a room of :class:`~bookie_server.bookie.Bookie`).

A checkpoint moves the write cache into entry logs and the index, then trims the journal files it covers: every
``flushInterval``, as soon as the write cache is full (adds wait meanwhile: :attr:`Checkpoints.write_cache_full`),
after GC's deletions, and at a stop.  Its outcome, with a full disk, a failed journal and the admin's switch, decides
whether the bookie takes adds (:attr:`Checkpoints.readonly`), and whether it must stop because read-only mode is
not enabled (docs/bookie.md, "Failures between the steps").  Everything here runs on the event-loop thread; the
checkpoint's writes run on an executor thread.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable

from bkspark.retry import Attempts, RetryPolicy

__all__ = ["CHECKPOINT_FAILURE_LOG_INTERVAL_S", "CHECKPOINT_RETRY", "Checkpoints", "checkpoint_retry"]

log = logging.getLogger("bookie_server.bookie")

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


class Checkpoints:
    """Checkpoints, the write cache's bound while one runs, and the read-only state (event-loop thread).

    The state it keeps lives on the bookie (set up by ``Bookie.__init__``): ``_checkpointing``,
    ``_write_cache_waiters``, ``_background``, the four read-only causes and the checkpoint failure counters.
    """

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

    # -- read-only state ------------------------------------------------------------------
    @property
    def readonly(self) -> bool:
        """True when adds are refused (admin request, disks over the threshold, a failed journal, or a failed
        checkpoint)."""
        return self._forced_readonly or self._disk_readonly or self._journal_failed or self._checkpoint_failed

    @property
    def disk_full(self) -> bool:
        """True while the ledger disks are over ``diskUsageThreshold`` (until back under the low mark)."""
        return self._disk_readonly

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
