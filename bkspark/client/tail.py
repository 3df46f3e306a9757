"""Tailing reads: follow an open ledger as its writer adds entries, until it is closed.

A reader of an open ledger may only read up to the LAC (last add confirmed).
Polling READ_LAC in a loop either wastes requests or adds latency; BookKeeper's
answer is the *long-poll* LAC read (Java's ``readLastAddConfirmedAndEntry``):
a v3 READ_ENTRY of entry -1 with ``previousLAC`` and ``timeOut`` that the bookie
holds until its LAC passes ``previousLAC`` (or the timeout ends), answering
with its LAC and, with the ENTRY_PIGGYBACK flag, entry ``previousLAC + 1``.

* :func:`wait_for_lac` asks every bookie of the ledger's last ensemble at once
  and returns on the first answer that moves the LAC (any bookie's LAC is a
  confirmed lower bound: the writer only ever sends confirmed LACs).
* :class:`LedgerTail` turns that into a cursor: read what is confirmed, wait
  when nothing is, re-read the metadata when a wait times out (an ensemble
  change or the writer's close is seen there), stop once the ledger is closed
  and read to its last entry.
* :func:`follow_ledger` (blocking generator) and :func:`follow_ledger_async`
  (async iterator, usable from any asyncio loop) wrap it.
* :func:`refresh_tails` and :func:`wait_for_any_tail` handle many tails side by side
  (a streaming query's ledgers); the blocking client's :meth:`~bkspark.client.bookkeeper.BookKeeper.refresh_tails`
  and :meth:`~bkspark.client.bookkeeper.BookKeeper.wait_for_tails` run them on its loop.

A bookie learns a ledger's LAC from the LAC the writer piggybacks on each add
and from explicit LAC writes; an idle writer's last entries only become
visible when its ``explicitLacInterval`` is set (or when it closes).  See
docs/streaming.md.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, AsyncIterator, Iterator, Sequence

from bkspark.client.reader import LedgerEntry, LedgerReader, pick_error
from bkspark.errors import (
    BKError,
    DigestMismatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
)
from bkspark.protocol.ledger_metadata import LedgerState

if TYPE_CHECKING:  # pragma: no cover
    from bkspark.client.bookkeeper import BookKeeper, ReadHandle

__all__ = [
    "LacUpdate",
    "LedgerTail",
    "wait_for_lac",
    "follow_ledger",
    "follow_ledger_async",
    "open_tail",
    "refresh_tails",
    "wait_for_any_tail",
    "DEFAULT_LONG_POLL_TIMEOUT_MS",
    "UNKNOWN_LEDGER_BACKOFF",
]

log = logging.getLogger(__name__)

#: How long one long-poll LAC read may wait on the bookies by default.
DEFAULT_LONG_POLL_TIMEOUT_MS = 10_000
#: Seconds to wait when no bookie knows the ledger yet (no entry reached them): nothing to long-poll on.
UNKNOWN_LEDGER_BACKOFF = 0.1
#: Entries read per request while catching up.
READ_CHUNK = 500

_MISSING = (NoSuchEntryError, NoSuchLedgerError)


@dataclass(frozen=True)
class LacUpdate:
    """What a long poll learned: the LAC (unchanged on timeout) and, if piggybacked, entry ``previous + 1``."""

    lac: int
    entry: LedgerEntry | None = None


async def wait_for_lac(reader: LedgerReader, previous_lac: int, timeout_ms: int) -> LacUpdate:
    """Long-poll every bookie of the last ensemble; return once one shows a LAC above ``previous_lac``.

    Returns ``LacUpdate(previous_lac)`` when the timeout ends without progress.
    Raises the bookies' error only when every one of them failed with
    something other than "no such ledger/entry" (they are all unreachable).
    """
    ops = reader.ctx.ops
    ref = reader.ref
    bookies = list(dict.fromkeys(reader.metadata.last_ensemble))
    loop = asyncio.get_running_loop()
    started = loop.time()
    polls = [
        asyncio.ensure_future(ops.long_poll_lac_async(b, ref.ledger_id, ref.scope_id, previous_lac, timeout_ms))
        for b in bookies
    ]
    errors: list[BaseException] = []
    try:
        for finished in asyncio.as_completed(polls):
            try:
                body, max_lac = await finished
            except UnauthorizedAccessError:
                raise
            except BKError as exc:
                errors.append(exc)
                continue
            lac = -1 if max_lac is None else max_lac
            entry = None
            if body is not None and lac > previous_lac:
                try:
                    verified = reader._verify(body, previous_lac + 1)
                except DigestMismatchError as exc:
                    log.warning("ledger %s: bad piggybacked entry %s: %s", ref.ledger_id, previous_lac + 1, exc)
                else:
                    entry = LedgerEntry(ref.ledger_id, verified.entry_id, bytes(verified.payload), ref.scope_id)
            if lac > previous_lac:
                return LacUpdate(lac, entry)
    finally:
        for poll in polls:
            if not poll.done():
                poll.cancel()
    if errors and len(errors) == len(bookies):
        if not all(isinstance(e, _MISSING) for e in errors):
            raise pick_error(errors, ledger_id=ref.ledger_id)
        # No bookie holds the ledger yet (no entry reached them): nothing to wait on, back off briefly.
        remaining = timeout_ms / 1000.0 - (loop.time() - started)
        if remaining > 0:
            await asyncio.sleep(min(remaining, UNKNOWN_LEDGER_BACKOFF))
    return LacUpdate(previous_lac)


class LedgerTail:
    """A cursor over an open (or closed) ledger that waits for new entries with long polls.

    Runs on the client's event loop: every coroutine here is awaited there
    (the blocking and async wrappers below take care of it).
    """

    def __init__(self, bk: "BookKeeper", handle: "ReadHandle", next_entry: int = 0) -> None:
        self._bk = bk
        self._reader: LedgerReader = handle.aio.reader
        self.ledger_id = handle.ledger_id
        self.scope_id = handle.scope_id
        #: The highest LAC learned so far (the last entry id once the ledger is closed).
        self.lac = handle.last_add_confirmed
        self.closed = handle.is_closed
        if self.closed:
            self.lac = handle.metadata.last_entry_id
        #: The next entry id this cursor hands out.
        self.next_entry = next_entry
        #: Bytes of the last entry a long poll piggybacked (an estimate of the writer's entry size).
        self.last_entry_size: int | None = None

    @property
    def finished(self) -> bool:
        """Closed and every entry handed out."""
        return self.closed and self.next_entry > self.lac

    async def refresh_metadata(self) -> None:
        """Re-read the metadata: a close (and its last entry) or a new ensemble show up here."""
        ctx = self._reader.ctx
        versioned = await ctx.in_thread(ctx.store.read_ledger_metadata, self.ledger_id, self.scope_id)
        md = versioned.metadata
        self._reader.metadata = md
        if md.state == LedgerState.CLOSED:
            self.closed = True
            self.lac = md.last_entry_id

    async def wait(self, timeout_ms: int) -> LacUpdate:
        """Wait up to ``timeout_ms`` for the LAC to move; on a timeout, re-read the metadata."""
        if self.closed:
            return LacUpdate(self.lac)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            update = await wait_for_lac(self._reader, self.lac, timeout_ms)
        except UnauthorizedAccessError:
            raise
        except BKError as exc:
            # Every bookie polled failed (they are down, or an ensemble change replaced them): wait out the
            # timeout as a poll would have, then read the metadata again; the next wait polls its bookies.
            log.warning("ledger %s: no bookie of its last ensemble answered the long poll (%s)", self.ledger_id, exc)
            await asyncio.sleep(max(0.0, timeout_ms / 1000.0 - (loop.time() - started)))
            await self.refresh_metadata()
            return LacUpdate(self.lac)
        if update.lac > self.lac:
            self.lac = update.lac
            if update.entry is not None:
                self.last_entry_size = len(update.entry.payload)
            return update
        await self.refresh_metadata()
        return LacUpdate(self.lac)

    async def learn_entry_size(self) -> None:
        """Read the last confirmed entry once for :attr:`last_entry_size` when no long poll has carried one (the
        entries were confirmed before this cursor was opened, and none came since)."""
        if self.last_entry_size is None and not self.closed and self.lac >= 0:
            entries = await self._reader.read_range(self.lac, self.lac)
            if entries:
                self.last_entry_size = len(entries[0].payload)

    async def next_batch(self, timeout_ms: int, max_entries: int = READ_CHUNK) -> list[LedgerEntry] | None:
        """The next confirmed entries (at most ``max_entries``); ``[]`` if the wait timed out; None when finished."""
        if self.next_entry <= self.lac:
            last = min(self.lac, self.next_entry + max(1, max_entries) - 1)
            entries = await self._reader.read_range(self.next_entry, last)
            self.next_entry = last + 1
            return entries
        if self.closed:
            return None
        update = await self.wait(timeout_ms)
        if update.entry is not None and update.entry.entry_id == self.next_entry:
            self.next_entry += 1
            return [update.entry]
        if self.next_entry <= self.lac:
            return await self.next_batch(timeout_ms, max_entries)
        return None if self.finished else []


def open_tail(
    bk: "BookKeeper", ledger_id: int, scope_id: int = 0, *, start_entry: int = 0, password: bytes = b"",
    digest_type: object = None,
) -> LedgerTail:
    """A :class:`LedgerTail` of the ledger from ``start_entry`` on, opened without recovery (blocking: any thread
    but the client's loop)."""
    handle = bk.open_ledger(ledger_id, scope_id=scope_id, recovery=False, password=password, digest_type=digest_type)
    return LedgerTail(bk, handle, start_entry)


async def refresh_tails(tails: Sequence[LedgerTail]) -> list[LacUpdate | BaseException]:
    """A zero-timeout long poll per tail, side by side (a tail re-reads its metadata when nothing moved); then,
    for a tail no long poll carried an entry to yet, one read of its last confirmed entry: its size estimate.

    One result per tail, in order: its :class:`LacUpdate`, or the error its poll ended with (the others go on).
    Runs on the client's loop.
    """
    results = await asyncio.gather(*(tail.wait(0) for tail in tails), return_exceptions=True)
    unsized = [t for t, r in zip(tails, results) if not isinstance(r, BaseException) and t.last_entry_size is None]
    for tail, error in zip(unsized, await asyncio.gather(*(t.learn_entry_size() for t in unsized), return_exceptions=True)):
        if error is not None:
            log.debug("ledger %s: could not read its last entry for a size estimate: %s", tail.ledger_id, error)
    return list(results)


async def wait_for_any_tail(tails: Sequence[LedgerTail], timeout_ms: int, wake: asyncio.Event | None = None) -> None:
    """Long-poll every tail and wait for ``wake``; return when the first fires or at the timeout.

    ``wake`` (set on the client's loop, e.g. by ``bk.loop.call_soon_threadsafe(wake.set)`` from a ZooKeeper
    watch) ends the wait early; it is cleared on return, and a ``wake`` already set returns at once (something
    changed since the last wait: the caller looks again).  A failed poll is logged, never raised: the caller
    looks at the tails' positions afterwards.  Runs on the client's loop.
    """
    if wake is not None and wake.is_set():
        wake.clear()
        return
    polls = [asyncio.ensure_future(tail.wait(timeout_ms)) for tail in tails]
    watcher = asyncio.ensure_future(wake.wait()) if wake is not None else None
    waiting = [*polls, *([watcher] if watcher is not None else [])]
    try:
        if waiting:
            await asyncio.wait(waiting, timeout=timeout_ms / 1000.0, return_when=asyncio.FIRST_COMPLETED)
        else:
            await asyncio.sleep(timeout_ms / 1000.0)
    finally:
        if wake is not None:
            wake.clear()
        for task in waiting:
            if not task.done():
                task.cancel()
        for poll in polls:
            if poll.done() and not poll.cancelled() and poll.exception() is not None:
                log.debug("long poll failed: %s", poll.exception())


def follow_ledger(
    bk: "BookKeeper",
    ledger_id: int,
    scope_id: int = 0,
    *,
    start_entry: int = 0,
    password: bytes = b"",
    digest_type: object = None,
    long_poll_timeout_ms: int = DEFAULT_LONG_POLL_TIMEOUT_MS,
) -> Iterator[LedgerEntry]:
    """Every entry of the ledger from ``start_entry`` on, waiting for new ones, until it is closed.

    Blocking generator (call it from any thread but the client's loop); entries
    come in entry order, each exactly once; it returns after the closed
    ledger's last entry.
    """
    tail = open_tail(bk, ledger_id, scope_id, start_entry=start_entry, password=password, digest_type=digest_type)
    while True:
        batch = bk.run_coroutine(tail.next_batch(long_poll_timeout_ms))
        if batch is None:
            return
        yield from batch


async def follow_ledger_async(
    bk: "BookKeeper",
    ledger_id: int,
    scope_id: int = 0,
    *,
    start_entry: int = 0,
    password: bytes = b"",
    digest_type: object = None,
    long_poll_timeout_ms: int = DEFAULT_LONG_POLL_TIMEOUT_MS,
) -> AsyncIterator[LedgerEntry]:
    """:func:`follow_ledger` as an async iterator for the caller's own asyncio loop."""
    caller_loop = asyncio.get_running_loop()
    tail = await caller_loop.run_in_executor(
        None, partial(open_tail, bk, ledger_id, scope_id, start_entry=start_entry, password=password, digest_type=digest_type)
    )
    while True:
        batch = await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(tail.next_batch(long_poll_timeout_ms), bk.loop)
        )
        if batch is None:
            return
        for entry in batch:
            yield entry
