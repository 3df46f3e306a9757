"""The blocking client: ``BookKeeper``, ``LedgerHandle`` (writer) and ``ReadHandle``.

A thin facade over :mod:`bkspark.client.aio`: a ``BookKeeper`` owns one
``AsyncBookKeeper`` and one event loop, run by a daemon thread named
``bkspark-client``; every blocking method hands the async one's coroutine to
that loop and waits (what a Spark executor task wants).  The async methods
check their arguments when called, on the caller's thread, so a bad argument
raises here before anything reaches the loop.  ``append_async`` returns an
:class:`AppendFuture` and is the one hot path that does not go through a
coroutine: entries queue in an inbox the loop drains in batches.

    with BookKeeper(metadata_service_uri="zk+hierarchical://127.0.0.1:2181/ledgers") as bk:
        lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        lh.append(b"payload"); lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        entries = rh.read(0, rh.last_add_confirmed)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
import weakref
from functools import partial
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from bkspark.client.aio import (
    AsyncBookKeeper, AsyncLedgerHandle, AsyncReadHandle, HandleIdentity, check_payload, check_payloads,
)
from bkspark.client.arrow import payload_runs_batch, require_pyarrow
from bkspark.client.conf import ClientConf
from bkspark.client.payloads import PackedPayloads, payload_bytes
from bkspark.client.reader import LedgerEntry
from bkspark.client.tail import LacUpdate, LedgerTail, open_tail, refresh_tails, wait_for_any_tail
from bkspark.client.writer import AddCallback
from bkspark.config.typed import DEFAULT_ACK_QUORUM_SIZE, DEFAULT_ENSEMBLE_SIZE, DEFAULT_WRITE_QUORUM_SIZE
from bkspark.errors import ClientClosedError, IllegalOpError
from bkspark.metadata.registry import BookieRegistry
from bkspark.metadata.store import Versioned, ZkMetadataStore
from bkspark.placement.base import EnsemblePlacementPolicy
from bkspark.protocol.digest import DigestType
from bkspark.protocol.ledger_metadata import LedgerMetadata

__all__ = ["BookKeeper", "LedgerHandle", "ReadHandle", "LedgerEntry", "AppendFuture"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class BookKeeper:
    """A BookKeeper client: ledgers on the bookies of one cluster (context manager); any thread but its own.

    ``conf`` takes BookKeeper client keys (``useV2WireProtocol``,
    ``addEntryTimeoutSec``, ``ensemblePlacementPolicy``...); keyword arguments
    override them.  See :class:`ClientConf`.  :attr:`aio` is the
    :class:`AsyncBookKeeper` underneath, for coroutines scheduled on :attr:`loop`
    (with :meth:`run_coroutine`); its loop-only parts (the connection pool, the
    shared services) are reached through it, never through this facade.
    Tails of open ledgers: :meth:`open_tail`, :meth:`refresh_tails`, :meth:`wait_for_tails`.
    """

    def __init__(self, metadata_service_uri: str, conf: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.aio = AsyncBookKeeper(metadata_service_uri, conf, **kwargs)
        self.conf: ClientConf = self.aio.conf
        self.metadata_service_uri = metadata_service_uri
        self._closed = False
        #: Guards ``_closed`` against ``_calls`` and ``_handles``: what close() must settle is what was started
        #: before it flipped ``_closed``.
        self._calls_lock = threading.Lock()
        #: Held through close(): a second caller waits for the first to finish (they raced to stop the loop).
        self._close_lock = threading.Lock()
        #: Blocking calls handed to the loop and not yet answered (their concurrent futures).
        self._calls: set[concurrent.futures.Future[Any]] = set()
        #: Write handles whose queued appends close() fails (the loop that would send them stops).
        self._handles: weakref.WeakSet[LedgerHandle] = weakref.WeakSet()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="bkspark-client", daemon=True)
        self._thread.start()
        try:
            self.run_coroutine(self.aio.start())
        except BaseException:
            self._stop_loop()
            raise

    # -- plumbing ------------------------------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def run_coroutine(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        """Run ``coro`` on the client's event loop and wait for its result (at most ``timeout`` seconds).

        The thread contract of the blocking client: call it from any thread but the client's own loop thread
        (there it raises :class:`IllegalOpError`: it would wait for itself).  ``coro`` runs on the loop thread, so
        it may use the loop-only parts of :attr:`aio` (its connection pool and services).  After :meth:`close`,
        :class:`ClientClosedError`; the coroutine is then closed unstarted.  Every blocking method of the client
        goes through here (docs/contracts.md, "The blocking client's thread contract").
        """
        if self._closed:
            if asyncio.iscoroutine(coro):
                coro.close()
            raise ClientClosedError("client is closed")
        if threading.current_thread() is self._thread:
            if asyncio.iscoroutine(coro):
                coro.close()
            raise IllegalOpError("blocking client call from the client's own event loop")
        if not asyncio.iscoroutine(coro):
            coro = _awaited(coro)  # a future or another awaitable: run_coroutine_threadsafe wants a coroutine
        with self._calls_lock:
            if self._closed:
                coro.close()  # type: ignore[union-attr]
                raise ClientClosedError("client is closed")
            call = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
            self._calls.add(call)
        try:
            return call.result(timeout)
        finally:
            with self._calls_lock:
                self._calls.discard(call)

    def _call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop; nothing when the loop has closed under the caller (close() then settles what
        ``fn`` would have handled: :meth:`LedgerHandle._fail_queued`)."""
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:
            if not self._loop.is_closed():
                raise

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()

    @property
    def store(self) -> ZkMetadataStore:
        """The ledger metadata store (blocking, thread-safe)."""
        return self.aio.store

    @property
    def registry(self) -> BookieRegistry:
        return self.aio.registry

    @property
    def policy(self) -> EnsemblePlacementPolicy:
        return self.aio.policy

    @property
    def zk(self) -> Any:
        """The client's started kazoo client (shared with the metadata store)."""
        return self.store.zk

    @property
    def ledgers_root(self) -> str:
        """The ledgers root path of the metadata service URI."""
        return self.store.root

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The client's event loop (for asyncio callers: schedule coroutines with run_coroutine_threadsafe)."""
        return self._loop

    def close(self) -> None:
        """Close connections and the ZooKeeper session; open handles become unusable.

        Calls other threads are in end: an append queued or waiting for room, and a blocking call the closing
        loop left unanswered, raise :class:`ClientClosedError` (docs/client.md, "Closing the client").  Threads
        closing the client at once return when it is closed; the client's own loop thread may not close it.
        """
        if threading.current_thread() is self._thread:
            raise IllegalOpError("blocking close() from the client's own event loop (await aio.close() there)")
        with self._close_lock:
            if self._closed:
                return
            try:
                self.run_coroutine(self.aio.close(), timeout=30)
            except Exception:
                log.debug("error closing the client", exc_info=True)
            with self._calls_lock:
                self._closed = True
                unanswered = list(self._calls)
                handles = list(self._handles)
            self._stop_loop()
            closed = ClientClosedError("client is closed")
            for call in unanswered:
                try:
                    call.set_exception(closed)
                except concurrent.futures.InvalidStateError:
                    pass  # answered (or cancelled) while the loop stopped
            for handle in handles:
                handle._fail_queued(closed)

    def __enter__(self) -> "BookKeeper":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ledgers -----------------------------------------------------------------------------------

    def create_ledger(
        self,
        ensemble_size: int = DEFAULT_ENSEMBLE_SIZE,
        write_quorum_size: int = DEFAULT_WRITE_QUORUM_SIZE,
        ack_quorum_size: int = DEFAULT_ACK_QUORUM_SIZE,
        digest_type: str | int | DigestType = "CRC32C",
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        scope_id: int = 0,
        ledger_id: int | None = None,
    ) -> "LedgerHandle":
        """Create a ledger and return its write handle (see :meth:`AsyncBookKeeper.create_ledger`)."""
        self._check_open()
        handle = self.run_coroutine(
            self.aio.create_ledger(
                ensemble_size, write_quorum_size, ack_quorum_size, digest_type, password, custom_metadata, scope_id,
                ledger_id,
            )
        )
        return self._track(LedgerHandle(self, handle))

    def create_ledger_adv(self, ledger_id: int, scope_id: int = 0, **kwargs: Any) -> "LedgerHandle":
        """Create a ledger with a caller-chosen id (Java's ``createLedgerAdv``; BP-35 scope ids)."""
        return self.create_ledger(ledger_id=ledger_id, scope_id=scope_id, **kwargs)

    def open_ledger(
        self,
        ledger_id: int,
        scope_id: int = 0,
        recovery: bool = True,
        password: bytes = b"",
        digest_type: str | int | DigestType | None = None,
        *,
        metadata: Versioned | None = None,
    ) -> "ReadHandle":
        """Open a ledger for reading; ``recovery=True`` fences and closes it first (docs/protocol.md §4 items 6, 7).
        ``metadata``: as :meth:`AsyncBookKeeper.open_ledger`'s (the ledger's metadata just read by the caller)."""
        self._check_open()
        return ReadHandle(self, self.run_coroutine(
            self.aio.open_ledger(ledger_id, scope_id, recovery, password, digest_type, metadata=metadata)
        ))

    def delete_ledger(self, ledger_id: int, scope_id: int = 0) -> None:
        """Delete the ledger's metadata; bookies garbage-collect its entries."""
        self._check_open()
        self.run_coroutine(self.aio.delete_ledger(ledger_id, scope_id))

    def list_ledgers(self, scope_id: int = 0) -> list[int]:
        """Every ledger id of a scope, ascending (walking ZooKeeper as Java does)."""
        self._check_open()
        return self.run_coroutine(self.aio.list_ledgers(scope_id))

    def get_ledger_metadata(self, ledger_id: int, scope_id: int = 0) -> LedgerMetadata:
        """The ledger's current metadata."""
        self._check_open()
        return self.run_coroutine(self.aio.get_ledger_metadata(ledger_id, scope_id))

    def bookie_info(self, bookie_id: str) -> tuple[int, int]:
        """GET_BOOKIE_INFO over v3: ``(total disk capacity, free disk space)`` in bytes."""
        self._check_open()
        return self.run_coroutine(self.aio.bookie_info(bookie_id))

    def list_entries_on_bookie(self, bookie_id: str, ledger_id: int, scope_id: int = 0) -> list[int]:
        """GET_LIST_OF_ENTRIES_OF_LEDGER over v3: the entry ids one bookie stores for a ledger."""
        self._check_open()
        return self.run_coroutine(self.aio.list_entries_on_bookie(bookie_id, ledger_id, scope_id))

    def writable_bookies(self) -> frozenset[str]:
        """BookieIds of the writable bookies (``<root>/available``)."""
        return self.aio.writable_bookies()

    def readonly_bookies(self) -> frozenset[str]:
        """BookieIds of the read-only bookies (``<root>/available/readonly``)."""
        return self.aio.readonly_bookies()

    # -- tails of open ledgers (docs/streaming.md, docs/contracts.md "Tails") --------------------------

    def open_tail(
        self, ledger_id: int, scope_id: int = 0, *, start_entry: int = 0, password: bytes = b"",
        digest_type: str | int | DigestType | None = None,
    ) -> LedgerTail:
        """A cursor following the ledger from ``start_entry`` on as its writer adds entries (opened without
        recovery).  Its coroutines run on the client's loop: drive it with :meth:`run_coroutine`
        (``tail.next_batch(timeout_ms)``), :meth:`refresh_tails` and :meth:`wait_for_tails`."""
        return open_tail(self, ledger_id, scope_id, start_entry=start_entry, password=password, digest_type=digest_type)

    def refresh_tails(self, tails: Iterable[LedgerTail]) -> list[LacUpdate | BaseException]:
        """Bring every tail's LAC up to date at once (a zero-timeout long poll each; a tail that learned nothing
        re-reads its metadata, so a close is seen) and learn each one's entry size.  One result per tail, in
        order: its :class:`LacUpdate` or the error its poll ended with (the other tails are still refreshed)."""
        return self.run_coroutine(refresh_tails(list(tails)))

    def wait_for_tails(self, tails: Iterable[LedgerTail], timeout_ms: int, wake: asyncio.Event | None = None) -> None:
        """Block until one tail's LAC moves, ``wake`` is set, or ``timeout_ms`` passes (then look at the tails).

        ``wake`` is an ``asyncio.Event`` set on the client's loop (from another thread:
        ``bk.loop.call_soon_threadsafe(wake.set)``); it is cleared on return, and one already set returns at once.
        """
        self.run_coroutine(wait_for_any_tail(list(tails), timeout_ms, wake), timeout=timeout_ms / 1000.0 + 30)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("client is closed")

    def _track(self, handle: "LedgerHandle") -> "LedgerHandle":
        """Remember a write handle, so that close() fails its queued appends."""
        with self._calls_lock:
            if self._closed:
                raise ClientClosedError("client is closed")
            self._handles.add(handle)
        return handle


async def _awaited(awaitable: Awaitable[T]) -> T:
    """A coroutine for ``run_coroutine_threadsafe`` from any awaitable the async API returns."""
    return await awaitable


_PENDING, _FINISHED, _FAILED, _CANCELLED = 0, 1, 2, 3
_STATE_NAMES = {_PENDING: "pending", _FINISHED: "finished", _FAILED: "failed", _CANCELLED: "cancelled"}


class AppendFuture:
    """What ``append_async`` and ``append_many`` return: the ``concurrent.futures.Future`` API, lighter to make.

    A ``concurrent.futures.Future`` builds its own ``threading.Condition`` (an
    RLock, a deque and five bound methods: about ten GC-tracked objects), which
    the profile of a write load showed as the largest allocation per entry.
    These futures share their handle's condition instead and keep their state in
    four slots.  They offer ``result``, ``exception``, ``done``, ``cancel``,
    ``cancelled``, ``running`` and ``add_done_callback`` with the standard
    meaning (timeouts raise ``concurrent.futures.TimeoutError``), but they are
    not ``concurrent.futures.Future`` instances: ``concurrent.futures.wait`` does
    not take them (call :meth:`result` on each, in order).  Completed on the
    client's loop thread; waited on from any other thread.
    """

    __slots__ = ("_condition", "_state", "_value", "_callbacks")

    def __init__(self, condition: threading.Condition) -> None:
        self._condition = condition
        self._state = _PENDING
        #: The entry id once FINISHED, the exception once FAILED.
        self._value: Any = None
        self._callbacks: list[Callable[["AppendFuture"], Any]] | None = None

    # -- completion (loop thread) -----------------------------------------------------

    def _settle(self, state: int, value: Any) -> None:
        with self._condition:
            if self._state != _PENDING:
                raise concurrent.futures.InvalidStateError(f"future already {_STATE_NAMES[self._state]}")
            self._state = state
            self._value = value
            self._condition.notify_all()
        self._run_callbacks()

    def set_result(self, entry_id: int) -> None:
        self._settle(_FINISHED, entry_id)

    def set_exception(self, error: BaseException) -> None:
        self._settle(_FAILED, error)

    def _run_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, None
        for fn in callbacks or ():
            try:
                fn(self)
            except Exception:
                log.exception("append future callback failed")

    # -- the Future API (any thread) -----------------------------------------------------

    def done(self) -> bool:
        return self._state != _PENDING

    def running(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def cancel(self) -> bool:
        """Stop waiting for the entry (it may still be written); False once it completed."""
        with self._condition:
            if self._state == _CANCELLED:
                return True
            if self._state != _PENDING:
                return False
            self._state = _CANCELLED
            self._condition.notify_all()
        self._run_callbacks()
        return True

    def add_done_callback(self, fn: Callable[["AppendFuture"], Any]) -> None:
        """Call ``fn(future)`` once done (at once, on this thread, if it already is)."""
        with self._condition:
            if self._state == _PENDING:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        try:
            fn(self)
        except Exception:
            log.exception("append future callback failed")

    def _wait_done(self, timeout: float | None) -> None:
        """Wait on the shared condition until *this* future is done (others wake it too)."""
        if self._state != _PENDING:
            return
        with self._condition:
            if timeout is None:
                while self._state == _PENDING:
                    self._condition.wait()
                return
            deadline = time.monotonic() + timeout
            while self._state == _PENDING:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise concurrent.futures.TimeoutError()
                self._condition.wait(remaining)

    def result(self, timeout: float | None = None) -> Any:
        """The entry id (a ``range`` of them for ``append_many``); raises the append's error, ``CancelledError`` or ``TimeoutError``."""
        self._wait_done(timeout)
        if self._state == _FINISHED:
            return self._value  # type: ignore[no-any-return]
        if self._state == _FAILED:
            raise self._value
        raise concurrent.futures.CancelledError()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The append's error (None if it succeeded); ``CancelledError`` or ``TimeoutError`` as :meth:`result`."""
        self._wait_done(timeout)
        if self._state == _CANCELLED:
            raise concurrent.futures.CancelledError()
        return self._value if self._state == _FAILED else None

    def __repr__(self) -> str:
        return f"<AppendFuture {_STATE_NAMES[self._state]}>"


class LedgerHandle(HandleIdentity):
    """Write handle of a ledger this client created (appends in order, then close); any thread.

    Wraps an :class:`AsyncLedgerHandle` (:attr:`aio`) that lives on the client's loop.
    """

    def __init__(self, bk: BookKeeper, handle: AsyncLedgerHandle) -> None:
        self._bk = bk
        self.aio = handle
        self.ref = handle.ref
        self._writer = handle.writer
        self._max_pending = bk.conf.maxPendingAdds
        self._max_pending_bytes = bk.conf.maxPendingAddBytes
        #: Entries and payload bytes appended and not yet acknowledged (or failed); under ``_inbox_lock``.
        self._in_flight = 0
        self._in_flight_bytes = 0
        #: Single payloads (bytes) and bulk appends (a list of bytes or packed payloads), each with its future and
        #: payload bytes, in call order.
        self._inbox: list[tuple[bytes | list[bytes] | PackedPayloads, AppendFuture, int]] = []
        self._inbox_lock = threading.Lock()
        # Appenders wait on this only when maxPendingAdds entries or maxPendingAddBytes bytes are in flight.
        self._room = threading.Condition(self._inbox_lock)
        self._waiting = 0
        self._inbox_scheduled = False
        #: Shared by every future of this handle (see AppendFuture).
        self._futures_cond = threading.Condition()

    @property
    def last_add_confirmed(self) -> int:
        """Highest entry id such that it and all before it are acknowledged."""
        return self._writer.lac

    @property
    def last_add_pushed(self) -> int:
        return self._writer.last_add_pushed

    @property
    def length(self) -> int:
        """Bytes of payload acknowledged so far."""
        return self._writer.confirmed_length

    @property
    def metadata(self) -> LedgerMetadata:
        return self._writer.metadata

    @property
    def is_closed(self) -> bool:
        return self._writer.closed

    @property
    def max_payload(self) -> int:
        """The largest entry one add can carry (``nettyMaxFrameSizeBytes`` less the frame's own bytes)."""
        return self._writer.max_payload

    def _drain_inbox(self) -> None:
        """Hand queued entries to the writer in call order (loop thread); single appends queued one after another
        go as one run (:meth:`LedgerWriter.append_each`), each with its own future."""
        with self._inbox_lock:
            items, self._inbox = self._inbox, []
            self._inbox_scheduled = False
        writer = self._writer
        done = self._done
        singles: list[bytes] = []
        callbacks: list[AddCallback] = []
        for data, fut, size in items:
            if type(data) is list or type(data) is PackedPayloads:
                if singles:
                    self._hand_over_singles(singles, callbacks)
                    singles, callbacks = [], []
                writer.append_many(data, partial(self._batch_done, fut, len(data), size))
            else:
                singles.append(data)  # type: ignore[arg-type]
                callbacks.append(partial(done, fut, size))
        if singles:
            self._hand_over_singles(singles, callbacks)

    def _hand_over_singles(self, singles: list[bytes], callbacks: list[AddCallback]) -> None:
        if len(singles) == 1:
            self._writer.append(singles[0], callbacks[0])
        else:
            self._writer.append_each(singles, callbacks)

    def _has_room(self, count: int, size: int) -> bool:
        """Whether ``count`` more entries of ``size`` bytes together fit the bounds (under ``_inbox_lock``); an
        append larger than a bound goes when nothing else is in flight."""
        if not self._in_flight:
            return True
        if self._in_flight + count > self._max_pending:
            return False
        return not self._max_pending_bytes or self._in_flight_bytes + size <= self._max_pending_bytes

    def _wait_for_room(self, count: int, size: int) -> None:
        """Block until ``count`` entries of ``size`` bytes fit, then take their room (under ``_inbox_lock``);
        :class:`ClientClosedError` once the client is closed (close() wakes the waiters: :meth:`_fail_queued`)."""
        while True:
            if self._bk._closed:
                raise ClientClosedError("client is closed")
            if self._has_room(count, size):
                break
            self._waiting += 1
            try:
                self._room.wait()
            finally:
                self._waiting -= 1
        self._in_flight += count
        self._in_flight_bytes += size

    def _fail_queued(self, error: BaseException) -> None:
        """The client closed (its loop has stopped): fail the appends still in the inbox, which the loop will
        never hand to the writer, give their room back and wake every appender waiting for room (any thread)."""
        with self._inbox_lock:
            items, self._inbox = self._inbox, []
            for data, fut, size in items:
                self._in_flight -= len(data) if type(data) is list or type(data) is PackedPayloads else 1
                self._in_flight_bytes -= size
            self._room.notify_all()
        for _data, fut, _size in items:
            try:
                fut.set_exception(error)
            except concurrent.futures.InvalidStateError:
                pass  # the caller cancelled it

    def _done(self, fut: AppendFuture, size: int, entry_id: int | None, exc: BaseException | None) -> None:
        """An append finished (loop thread): free its room, then complete its future."""
        with self._inbox_lock:
            self._in_flight -= 1
            self._in_flight_bytes -= size
            if self._waiting:
                self._room.notify_all()  # a bulk append may wait for more room than a single one
        try:
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(entry_id)  # type: ignore[arg-type]
        except concurrent.futures.InvalidStateError:
            pass  # the caller cancelled the future; the entry was still written

    def _batch_done(
        self, fut: AppendFuture, queued: int, size: int, first: int | None, count: int, exc: BaseException | None
    ) -> None:
        """A bulk append finished (loop thread): free the room of its ``queued`` entries and ``size`` bytes at
        once, then complete its future."""
        with self._inbox_lock:
            self._in_flight -= queued
            self._in_flight_bytes -= size
            if self._waiting:
                self._room.notify_all()
        try:
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(range(first, first + count))  # type: ignore[arg-type, operator]
        except concurrent.futures.InvalidStateError:
            pass  # the caller cancelled the future; the entries were still written

    def append_async(self, payload: bytes) -> AppendFuture:
        """Queue one entry; the future gives its entry id once Qa bookies have it.

        Blocks while ``maxPendingAdds`` entries, or with this one more than ``maxPendingAddBytes`` payload bytes,
        are in flight (bounded pipelining).
        Entries are sent in the order of calls.  Raises at once, with nothing
        queued and the ledger still writable, for a payload that is not bytes
        (``TypeError``) or larger than :attr:`max_payload` (:class:`EntryTooLargeError`).
        """
        check_payload(payload)
        self._writer.check_payload_size(len(payload))
        if self._bk._closed:
            raise ClientClosedError("client is closed")
        data = bytes(payload)
        fut = AppendFuture(self._futures_cond)
        with self._inbox_lock:
            self._wait_for_room(1, len(data))
            self._inbox.append((data, fut, len(data)))
            if not self._inbox_scheduled:
                self._inbox_scheduled = True
                self._bk._call_soon(self._drain_inbox)
        return fut

    def append_many(self, payloads: Iterable[bytes | bytearray | memoryview] | PackedPayloads) -> AppendFuture:
        """Queue ``payloads`` as consecutive entries with one hand-over to the loop; one future for them all.

        The future's result is the ``range`` of their entry ids once every one is acknowledged by Qa
        bookies; on a failure it raises the first error (entries up to :attr:`last_add_confirmed` are
        acknowledged, later ones are not).  Each entry is an ordinary add, ordered with ``append_async``
        calls in call order.  Blocks while the entries would take more than ``maxPendingAdds`` slots or
        ``maxPendingAddBytes`` bytes (a batch larger than either waits until nothing else is in flight).  Raises at once, with
        nothing queued and the ledger still writable, for a payload that is not bytes (``TypeError``)
        or larger than :attr:`max_payload` (:class:`EntryTooLargeError` with the entry's ``index``).
        Payloads laid end to end in one buffer (:class:`PackedPayloads`, e.g. an Arrow binary column's) go
        without a bytes object per entry.
        """
        data = check_payloads(payloads)
        self._writer.check_payload_sizes(data)
        if self._bk._closed:
            raise ClientClosedError("client is closed")
        fut = AppendFuture(self._futures_cond)
        size = payload_bytes(data)
        with self._inbox_lock:
            self._wait_for_room(len(data), size)
            self._inbox.append((data, fut, size))
            if not self._inbox_scheduled:
                self._inbox_scheduled = True
                self._bk._call_soon(self._drain_inbox)
        return fut

    def append(self, payload: bytes | bytearray | memoryview) -> int:
        """Append one entry and wait for it to be acknowledged; returns its entry id."""
        return self.append_async(payload).result()

    def flush(self) -> None:
        """Wait until every entry appended so far is acknowledged (or failed)."""
        self._bk.run_coroutine(self._flush())

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # let queued appends reach the writer first
        self._drain_inbox()
        await self.aio.flush()

    def write_lac(self) -> int:
        """Store the current LAC explicitly on its write set (WRITE_LAC over v3); returns it."""
        return self._bk.run_coroutine(self.aio.write_lac())

    def force(self) -> int:
        """FORCE_LEDGER on every bookie of the current ensemble (v3); returns the LAC made durable."""
        return self._bk.run_coroutine(self.aio.force())

    def close(self) -> None:
        """Wait for pending appends, then close the ledger (CLOSED at the LAC in the metadata)."""
        if self._writer.closed:
            return
        self._bk.run_coroutine(self._close())

    async def _close(self) -> None:
        self._drain_inbox()
        await self.aio.close()

    def __enter__(self) -> "LedgerHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReadHandle(HandleIdentity):
    """Read handle of an opened ledger; any thread.  Wraps an :class:`AsyncReadHandle` (:attr:`aio`)."""

    def __init__(self, bk: BookKeeper, handle: AsyncReadHandle) -> None:
        self._bk = bk
        self.aio = handle
        self.ref = handle.ref

    @property
    def metadata(self) -> LedgerMetadata:
        return self.aio.metadata

    @property
    def last_add_confirmed(self) -> int:
        return self.aio.lac

    @property
    def length(self) -> int:
        return self.aio.length

    @property
    def is_closed(self) -> bool:
        """Whether the ledger (not this handle) is closed."""
        return self.aio.is_closed

    def read(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` inclusive; ``last`` must not be beyond the LAC."""
        return self._bk.run_coroutine(self.aio.read(first, last))

    def read_unconfirmed(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` without the LAC check (they may not exist yet)."""
        return self._bk.run_coroutine(self.aio.read_unconfirmed(first, last))

    def batch_read(self, start: int, max_count: int = 100, max_size: int = 0) -> list[LedgerEntry]:
        """BP-62 batch read: up to ``max_count`` entries / ``max_size`` bytes from ``start`` (maybe fewer)."""
        return self._bk.run_coroutine(self.aio.batch_read(start, max_count, max_size))

    def read_batched(
        self, first: int, last: int, batch_size: int = 100, max_size: int = 0, parallel: int = 4
    ) -> Iterator[LedgerEntry]:
        """Every entry ``first..last`` (up to the LAC) through batch reads, ``parallel`` batches in flight."""
        first, last = self.aio.check_batched_args(first, last, batch_size, max_size, parallel)
        return self._read_batched(first, last, batch_size, max_size, parallel)

    def _read_batched(self, first: int, last: int, batch_size: int, max_size: int, parallel: int) -> Iterator[LedgerEntry]:
        last = min(last, self.aio.lac)
        window = max(1, batch_size) * max(1, parallel)
        cur = first
        while cur <= last:
            end = min(last, cur + window - 1)
            yield from self._bk.run_coroutine(self.aio.read_range_batched(cur, end, batch_size, max_size, parallel))
            cur = end + 1

    def read_payload_groups(self, first: int, last: int, **options: Any) -> Iterator[tuple[int, list[bytes]]]:
        """Every entry ``first..min(last, LAC)`` as ``(first entry id, payloads)`` groups, read pipelined
        (options of :meth:`AsyncReadHandle.read_payload_groups`).  One hop to the client's loop per group:
        the reads stay in flight on the loop while the caller works on the previous group."""
        return self._groups_of(self.aio.read_payload_groups(first, last, **options))

    def _groups_of(self, groups: AsyncIterator[T]) -> Iterator[T]:
        """The items of an async generator of the handle's, each fetched with one hop to the client's loop."""
        try:
            while True:
                try:
                    group = self._bk.run_coroutine(groups.__anext__())
                except StopAsyncIteration:
                    return
                yield group
        finally:
            # A client closed under the iteration has stopped its loop, and the reads with it: nothing to close.
            with contextlib.suppress(ClientClosedError):
                self._bk.run_coroutine(groups.aclose())  # type: ignore[attr-defined]

    def read_batches(self, first: int, last: int, **options: Any) -> Iterator[Any]:
        """Every entry ``first..min(last, LAC)`` as ``pyarrow.RecordBatch``es of ``entry_id`` (int64) and
        ``payload`` (binary), built on the calling thread (:func:`bkspark.client.arrow.payload_runs_batch`: the
        buffers the reads gathered taken as they are, or joined once); several batch requests in flight, spread
        over the bookies (see :meth:`read_payload_groups`).  Needs pyarrow."""
        require_pyarrow()
        return self._record_batches_of(self._groups_of(self.aio.read_payload_runs(first, last, **options)))

    @staticmethod
    def _record_batches_of(groups: Iterator[tuple[int, list[Sequence[bytes]]]]) -> Iterator[Any]:
        with contextlib.closing(groups):  # closing the batches closes the reads (_groups_of)
            for start, pieces in groups:
                yield payload_runs_batch(start, pieces)

    def read_last_add_confirmed(self) -> int:
        """Ask the bookies for the LAC (no RPC for a closed ledger); updates :attr:`last_add_confirmed`."""
        return self._bk.run_coroutine(self.aio.read_last_add_confirmed())

    def __iter__(self) -> Iterator[LedgerEntry]:
        """Every entry up to the LAC, read in batches (none for an empty ledger)."""
        return self.read_batched(0, self.aio.lac) if self.aio.lac >= 0 else iter(())

    def close(self) -> None:
        self.aio.close()

    def __enter__(self) -> "ReadHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
