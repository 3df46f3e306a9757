"""The public client: ``BookKeeper``, ``LedgerHandle`` (writer) and ``ReadHandle``.

An asyncio core runs on one event loop in a background thread owned by the
``BookKeeper`` object; the methods here are a blocking facade over it (what a
Spark executor task wants), plus ``append_async`` returning a
``concurrent.futures.Future``.  ZooKeeper work (kazoo, thread-based) runs in
the loop's executor so the loop never blocks on it.

    with BookKeeper(metadata_service_uri="zk+hierarchical://127.0.0.1:2181/ledgers") as bk:
        lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        lh.append(b"payload"); lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        entries = rh.read(0, rh.last_add_confirmed)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import secrets
import threading
import time
import weakref
from functools import partial
from typing import Any, Awaitable, Callable, Iterator, Mapping, TypeVar

from bkspark.client.conf import ClientConf
from bkspark.security.auth import ClientSecurity
from bkspark.security.zk import ZkSecurity
from bkspark.client.context import ClientContext, LedgerRef
from bkspark.client.ops import BookieOps
from bkspark.client.pool import BookiePool
from bkspark.client.reader import LedgerEntry, LedgerReader
from bkspark.client.recovery import recover_ledger
from bkspark.client.writer import LedgerWriter
from bkspark.errors import (
    ClientClosedError,
    DigestMismatchError,
    IllegalOpError,
    InvalidOptionError,
    LedgerClosedError,
    LedgerExistsError,
    NotEnoughBookiesError,
    UnauthorizedAccessError,
)
from bkspark.metadata.registry import BookieRegistry
from bkspark.metadata.store import Versioned, ZkMetadataStore
from bkspark.placement import policy_from_conf
from bkspark.placement.base import conf_bool
from bkspark.placement.rackaware import RESOLVE_BY_BOOKIE_ID
from bkspark.protocol.digest import Digester, DigestType
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState

__all__ = ["BookKeeper", "LedgerHandle", "ReadHandle", "LedgerEntry", "SCOPE_EXTENSION"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The ``bkspark.extensions`` value a bookie advertises when it stores scope ids != 0.
SCOPE_EXTENSION = "scope-ids"


class BookKeeper:
    """A BookKeeper client: ledgers on the bookies of one cluster (context manager).

    ``conf`` takes BookKeeper client keys (``useV2WireProtocol``,
    ``addEntryTimeoutSec``, ``ensemblePlacementPolicy``...); keyword arguments
    override them.  See :class:`ClientConf`.
    """

    def __init__(self, metadata_service_uri: str, conf: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.conf = ClientConf.from_mapping(conf, **kwargs)
        # TLS and SASL settings are checked before anything connects (docs/security.md).
        security = ClientSecurity.from_conf(self.conf.extra)
        self.metadata_service_uri = metadata_service_uri
        self._closed = False
        self._writers: weakref.WeakSet[LedgerWriter] = weakref.WeakSet()
        self._loop = asyncio.new_event_loop()
        self._loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="bkspark-zk"))
        self._thread = threading.Thread(target=self._run_loop, name="bkspark-client", daemon=True)
        self._thread.start()
        try:
            self.store = ZkMetadataStore(
                metadata_service_uri,
                session_timeout=self.conf.zkTimeout,
                metadata_format_version=self.conf.ledgerMetadataVersion,
                store_ctime=self.conf.storeSystemTimeAsLedgerCreationTime,
                zk_security=ZkSecurity.from_conf(self.conf.extra),
            )
            self.registry = BookieRegistry(
                self.store.zk,
                self.store.root,
                retry=self.store.retry,
                address_resolver_enabled=self.conf.bookieAddressResolverEnabled,
                address_tracking=self.conf.enableBookieAddressTracking,
            )
            placement_conf = self.conf.placement_conf()
            self.policy = policy_from_conf(placement_conf)
            if hasattr(self.policy, "set_bookie_address_resolver") and not conf_bool(
                placement_conf, RESOLVE_BY_BOOKIE_ID, False
            ):
                # BP-41: the DNS-to-switch mapping gets the bookie's registered host, as Java's
                # resolver gives it, not a BookieId that may not be an address at all.
                self.policy.set_bookie_address_resolver(lambda bookie: self.registry.resolve(bookie)[0])
            self.registry.add_listener(self._cluster_changed)
            self.pool = BookiePool(
                self.registry,
                max_frame_size=self.conf.nettyMaxFrameSizeBytes,
                connect_timeout=self.conf.connectTimeoutMillis / 1000.0,
                security=security,
            )
            self.registry.add_address_listener(
                lambda bookie_id: self._loop.call_soon_threadsafe(self.pool.drop, bookie_id)
            )
            ops = BookieOps(
                self.pool,
                use_v2=self.conf.useV2WireProtocol,
                add_timeout=self.conf.addEntryTimeoutSec,
                read_timeout=self.conf.readEntryTimeoutSec,
            )
            self.ctx = ClientContext(self.conf, self._loop, ops, self.store, self.registry, self.policy)
        except BaseException:
            self._stop_loop()
            if hasattr(self, "store"):
                self.store.close()
            raise

    # -- plumbing ------------------------------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _cluster_changed(self, writable: frozenset[str], readonly: frozenset[str]) -> None:
        self._loop.call_soon_threadsafe(self.policy.on_cluster_changed, writable, readonly)

    def _run(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        """Run a coroutine on the client loop and wait for it (not from the loop thread)."""
        if self._closed:
            if asyncio.iscoroutine(coro):
                coro.close()
            raise ClientClosedError("client is closed")
        if threading.current_thread() is self._thread:
            raise IllegalOpError("blocking client call from the client's own event loop")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)  # type: ignore[arg-type]

    def _call_soon(self, fn: Callable[[], None]) -> None:
        self._loop.call_soon_threadsafe(fn)

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()

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
        """Close connections and the ZooKeeper session; open handles become unusable."""
        if self._closed:
            return
        try:
            self._run(self._shutdown(), timeout=10)
        except Exception:
            log.debug("error closing bookie connections", exc_info=True)
        self._closed = True
        self.registry.close()
        self.policy.uninitialize()
        self._stop_loop()
        self.store.close()

    async def _shutdown(self) -> None:
        """Fail what is still pending (no caller waits forever), then close the connections."""
        error = ClientClosedError("client closed")
        for writer in list(self._writers):
            if writer.pending or not writer.closed:
                writer._fail_all(error)
        await self.pool.close()

    def __enter__(self) -> "BookKeeper":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ledgers -----------------------------------------------------------------------------------

    def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum_size: int = 2,
        ack_quorum_size: int = 2,
        digest_type: str | int | DigestType = "CRC32C",
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        scope_id: int = 0,
        ledger_id: int | None = None,
    ) -> "LedgerHandle":
        """Create a ledger and return its write handle.

        ``ledger_id`` given (the "adv" form, e.g. from ``ledger_name.ids_from_uuid``)
        uses that id and no ZooKeeper counter; :class:`LedgerExistsError` if taken.
        Otherwise, in scope 0 the id comes from the cluster's generator, retried on
        collision as Java's ``LedgerCreateOp`` does; in a scope != 0 (BP-35,
        decentralised ids) it is a random 63-bit id, redrawn on collision.
        """
        if not (ensemble_size >= write_quorum_size >= ack_quorum_size >= 1):
            raise InvalidOptionError(
                "need ensemble_size >= write_quorum_size >= ack_quorum_size >= 1",
                ensemble_size=ensemble_size,
                write_quorum_size=write_quorum_size,
                ack_quorum_size=ack_quorum_size,
            )
        if not isinstance(password, (bytes, bytearray)):
            raise TypeError("password must be bytes")
        dtype = DigestType.parse(digest_type)
        custom = dict(custom_metadata or {})
        return self._run(
            self._create(ensemble_size, write_quorum_size, ack_quorum_size, dtype, bytes(password), custom, scope_id, ledger_id)
        )

    def create_ledger_adv(self, ledger_id: int, scope_id: int = 0, **kwargs: Any) -> "LedgerHandle":
        """Create a ledger with a caller-chosen id (Java's ``createLedgerAdv``; BP-35 scope ids)."""
        return self.create_ledger(ledger_id=ledger_id, scope_id=scope_id, **kwargs)

    async def _create(
        self, e: int, w: int, a: int, dtype: DigestType, password: bytes, custom: dict[str, bytes], scope_id: int,
        ledger_id: int | None,
    ) -> "LedgerHandle":
        ctx = self.ctx
        exclude: set[str] = set()
        if scope_id != 0:
            # Scope != 0 always goes over v3 (BookieOps.data_version), to bookies that store scope ids.
            writable = self.registry.writable_bookies()
            capable = {b for b in writable if SCOPE_EXTENSION in self.registry.extensions(b)}
            exclude = set(writable) - capable
            if len(capable) < e:
                raise NotEnoughBookiesError(
                    f"scope ids != 0 need bookies advertising '{SCOPE_EXTENSION}' in bkspark.extensions "
                    "(Apache BookKeeper bookies do not)",
                    wanted=e,
                    capable=len(capable),
                )
        ensemble = ctx.policy.new_ensemble(e, w, a, custom, frozenset(exclude))
        md = LedgerMetadata(
            ensemble_size=e,
            write_quorum_size=w,
            ack_quorum_size=a,
            digest_type=dtype,
            password=password,
            ensembles={0: tuple(ensemble)},
            ctime=int(time.time() * 1000),
            custom_metadata=custom,
            format_version=self.conf.ledgerMetadataVersion,
            store_ctime=self.conf.storeSystemTimeAsLedgerCreationTime,
        )
        attempts = 0
        while True:
            attempts += 1
            if ledger_id is not None:
                lid = ledger_id
            elif scope_id != 0:
                lid = secrets.randbits(63)  # BP-35: no counter for scoped ledgers
            else:
                lid = await ctx.in_thread(self.store.generate_ledger_id)
            try:
                versioned = await ctx.in_thread(self.store.create_ledger_metadata, lid, md, scope_id)
                break
            except LedgerExistsError:
                if ledger_id is not None or attempts >= 10:
                    raise
        ref = LedgerRef(lid, scope_id)
        writer = LedgerWriter(ctx, ref, versioned, password)
        self._writers.add(writer)
        return LedgerHandle(self, ref, writer)

    def open_ledger(
        self,
        ledger_id: int,
        scope_id: int = 0,
        recovery: bool = True,
        password: bytes = b"",
        digest_type: str | int | DigestType | None = None,
    ) -> "ReadHandle":
        """Open a ledger for reading; ``recovery=True`` fences and closes it first (spec §4.6, §4.7)."""
        return self._run(self._open(ledger_id, scope_id, recovery, bytes(password), digest_type))

    async def _open(
        self, ledger_id: int, scope_id: int, recovery: bool, password: bytes, digest_type: Any
    ) -> "ReadHandle":
        ctx = self.ctx
        ref = LedgerRef(ledger_id, scope_id)
        versioned: Versioned = await ctx.in_thread(self.store.read_ledger_metadata, ledger_id, scope_id)
        md = versioned.metadata
        if md.has_password and md.password != password:
            raise UnauthorizedAccessError("wrong password for ledger", ledger_id=ledger_id)
        if md.has_password and (self.conf.enableDigestTypeAutodetection or digest_type is None):
            dtype = md.digest_type
        else:
            dtype = DigestType.parse(digest_type if digest_type is not None else "CRC32C")
            if md.digest_type is not None and md.digest_type != dtype:
                raise DigestMismatchError(
                    "digest type does not match the ledger's", ledger_id=ledger_id, requested=dtype.name,
                    stored=md.digest_type.name,
                )
        assert dtype is not None
        digester = Digester(dtype, password)
        if md.state == LedgerState.CLOSED:
            return ReadHandle(self, ref, versioned, digester, md.last_entry_id, password)
        if recovery:
            versioned = await recover_ledger(ctx, ref, versioned, password)
            return ReadHandle(self, ref, versioned, digester, versioned.metadata.last_entry_id, password)
        reader = LedgerReader(ctx, ref, md, digester)
        lac = await reader.read_lac()
        # The writer may have changed ensemble (or closed) between our metadata read and the LAC
        # read; Java keeps a metadata watch for this, one re-read serves the same purpose here.
        versioned = await ctx.in_thread(self.store.read_ledger_metadata, ledger_id, scope_id)
        if versioned.metadata.state == LedgerState.CLOSED:
            lac = versioned.metadata.last_entry_id
        return ReadHandle(self, ref, versioned, digester, lac, password)

    def delete_ledger(self, ledger_id: int, scope_id: int = 0) -> None:
        """Delete the ledger's metadata; bookies garbage-collect its entries."""
        self._run(self.ctx.in_thread(self.store.delete_ledger_metadata, ledger_id, scope_id))

    def list_ledgers(self, scope_id: int = 0) -> list[int]:
        """Every ledger id of a scope, ascending (walking ZooKeeper as Java does)."""
        return self._run(self.ctx.in_thread(lambda: list(self.store.list_ledgers(scope_id))))

    def get_ledger_metadata(self, ledger_id: int, scope_id: int = 0) -> LedgerMetadata:
        """The ledger's current metadata."""
        return self._run(self.ctx.in_thread(self.store.read_ledger_metadata, ledger_id, scope_id)).metadata

    def bookie_info(self, bookie_id: str) -> tuple[int, int]:
        """GET_BOOKIE_INFO over v3: ``(total disk capacity, free disk space)`` in bytes."""
        return self._run(self.ctx.ops.bookie_info_async(bookie_id))

    def list_entries_on_bookie(self, bookie_id: str, ledger_id: int, scope_id: int = 0) -> list[int]:
        """GET_LIST_OF_ENTRIES_OF_LEDGER over v3: the entry ids one bookie stores for a ledger."""
        return self._run(self.ctx.ops.list_entries_async(bookie_id, ledger_id, scope_id))

    def writable_bookies(self) -> frozenset[str]:
        """BookieIds of the writable bookies (``<root>/available``)."""
        return self.registry.writable_bookies()

    def readonly_bookies(self) -> frozenset[str]:
        """BookieIds of the read-only bookies (``<root>/available/readonly``)."""
        return self.registry.readonly_bookies()


_PENDING = "PENDING"
_DONE_STATES = ("FINISHED", "CANCELLED", "CANCELLED_AND_NOTIFIED")


class _AppendFuture(concurrent.futures.Future):  # type: ignore[type-arg]
    """The ``concurrent.futures.Future`` that ``append_async`` returns, cheaper to make.

    A plain Future builds its own ``threading.Condition`` (an RLock, a deque and
    five bound methods: about ten GC-tracked objects), which the profile of a
    write load showed as the largest allocation per entry.  These futures share
    their handle's condition instead.  Waiters on a shared condition can be
    woken by another future's completion, so :meth:`result` and
    :meth:`exception` wait in a loop until *this* future is done or the timeout
    has passed; everything else is the standard implementation.
    """

    def __init__(self, condition: threading.Condition) -> None:  # noqa: D107 - no super().__init__ on purpose
        self._condition = condition
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks = []

    def _wait_done(self, timeout: float | None) -> None:
        if self._state in _DONE_STATES:
            return
        with self._condition:
            if timeout is None:
                while self._state not in _DONE_STATES:
                    self._condition.wait()
                return
            deadline = time.monotonic() + timeout
            while self._state not in _DONE_STATES:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._condition.wait(remaining)

    def result(self, timeout: float | None = None) -> Any:
        self._wait_done(timeout)
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait_done(timeout)
        return super().exception(0)


class _LedgerIdentity:
    """The (scope id, ledger id) of a handle, from its ``LedgerRef``."""

    _ref: LedgerRef

    @property
    def ledger_id(self) -> int:
        return self._ref.ledger_id

    @property
    def scope_id(self) -> int:
        return self._ref.scope_id


class LedgerHandle(_LedgerIdentity):
    """Write handle of a ledger this client created (appends in order, then close)."""

    def __init__(self, bk: BookKeeper, ref: LedgerRef, writer: LedgerWriter) -> None:
        self._bk = bk
        self._ref = ref
        self._writer = writer
        self._max_pending = bk.conf.maxPendingAdds
        self._in_flight = 0
        self._inbox: list[tuple[bytes, concurrent.futures.Future[int]]] = []
        self._inbox_lock = threading.Lock()
        # Appenders wait on this only when maxPendingAdds entries are in flight.
        self._room = threading.Condition(self._inbox_lock)
        self._waiting = 0
        self._inbox_scheduled = False
        #: Shared by every future of this handle (see _AppendFuture).
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

    def _drain_inbox(self) -> None:
        with self._inbox_lock:
            items, self._inbox = self._inbox, []
            self._inbox_scheduled = False
        append = self._writer.append
        done = self._done
        for data, fut in items:
            append(data, partial(done, fut))

    def _done(self, fut: "concurrent.futures.Future[int]", entry_id: int | None, exc: BaseException | None) -> None:
        """An append finished (loop thread): free its slot, then complete its future."""
        with self._inbox_lock:
            self._in_flight -= 1
            if self._waiting:
                self._room.notify()
        try:
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(entry_id)  # type: ignore[arg-type]
        except concurrent.futures.InvalidStateError:
            pass  # the caller cancelled the future; the entry was still written

    def append_async(self, payload: bytes) -> "concurrent.futures.Future[int]":
        """Queue one entry; the future gives its entry id once Qa bookies have it.

        Blocks while ``maxPendingAdds`` entries are in flight (bounded pipelining).
        Entries are sent in the order of calls.
        """
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        if self._bk._closed:
            raise ClientClosedError("client is closed")
        data = bytes(payload)
        fut: concurrent.futures.Future[int] = _AppendFuture(self._futures_cond)
        with self._inbox_lock:
            while self._in_flight >= self._max_pending:
                self._waiting += 1
                try:
                    self._room.wait()
                finally:
                    self._waiting -= 1
            self._in_flight += 1
            self._inbox.append((data, fut))
            if not self._inbox_scheduled:
                self._inbox_scheduled = True
                self._bk._call_soon(self._drain_inbox)
        return fut

    def append(self, payload: bytes) -> int:
        """Append one entry and wait for it to be acknowledged; returns its entry id."""
        return self.append_async(payload).result()

    def flush(self) -> None:
        """Wait until every entry appended so far is acknowledged (or failed)."""
        self._bk._run(self._flush())

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # let queued appends reach the writer first
        self._drain_inbox()
        await self._writer.drain()

    def write_lac(self) -> int:
        """Store the current LAC explicitly on its write set (WRITE_LAC over v3); returns it."""
        return self._bk._run(self._writer.write_lac())

    def force(self) -> int:
        """FORCE_LEDGER on every bookie of the current ensemble (v3); returns the LAC made durable."""
        return self._bk._run(self._writer.force())

    def close(self) -> None:
        """Wait for pending appends, then close the ledger (CLOSED at the LAC in the metadata)."""
        if self._writer.closed:
            return
        self._bk._run(self._close())

    async def _close(self) -> None:
        self._drain_inbox()
        await self._writer.close()

    def __enter__(self) -> "LedgerHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReadHandle(_LedgerIdentity):
    """Read handle of an opened ledger."""

    def __init__(
        self, bk: BookKeeper, ref: LedgerRef, versioned: Versioned, digester: Digester, lac: int, password: bytes
    ) -> None:
        self._bk = bk
        self._ref = ref
        self._versioned = versioned
        self._lac = lac
        self._password = password
        self._reader = LedgerReader(bk.ctx, ref, versioned.metadata, digester)
        self._closed = False

    @property
    def metadata(self) -> LedgerMetadata:
        return self._versioned.metadata

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def length(self) -> int:
        return self.metadata.length

    @property
    def is_closed(self) -> bool:
        """Whether the ledger (not this handle) is closed."""
        return self.metadata.state == LedgerState.CLOSED

    def _check(self) -> None:
        if self._closed:
            raise LedgerClosedError("read handle is closed", ledger_id=self.ledger_id)

    def read(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` inclusive; ``last`` must not be beyond the LAC."""
        self._check()
        if first < 0 or last < first:
            raise InvalidOptionError("bad entry range", first=first, last=last)
        if last > self._lac:
            raise InvalidOptionError("cannot read beyond the last add confirmed", last=last, lac=self._lac)
        return self._bk._run(self._reader.read_range(first, last))

    def read_unconfirmed(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` without the LAC check (they may not exist yet)."""
        self._check()
        if first < 0 or last < first:
            raise InvalidOptionError("bad entry range", first=first, last=last)
        return self._bk._run(self._reader.read_range(first, last))

    def batch_read(self, start: int, max_count: int = 100, max_size: int = 0) -> list[LedgerEntry]:
        """BP-62 batch read: up to ``max_count`` entries / ``max_size`` bytes from ``start`` (maybe fewer)."""
        self._check()
        return self._bk._run(self._reader.batch_read(start, max_count, max_size, self._lac))

    def read_batched(
        self, first: int, last: int, batch_size: int = 100, max_size: int = 0, parallel: int = 4
    ) -> Iterator[LedgerEntry]:
        """Every entry ``first..last`` (up to the LAC) through batch reads, ``parallel`` batches in flight."""
        self._check()
        last = min(last, self._lac)
        window = max(1, batch_size) * max(1, parallel)
        cur = first
        while cur <= last:
            end = min(last, cur + window - 1)
            entries = self._bk._run(self._reader.read_range_batched(cur, end, batch_size, max_size, self._lac, parallel))
            yield from entries
            cur = end + 1

    def read_last_add_confirmed(self) -> int:
        """Ask the bookies for the LAC (no RPC for a closed ledger); updates :attr:`last_add_confirmed`."""
        self._check()
        if self.is_closed:
            return self._lac
        lac = self._bk._run(self._refresh_and_read_lac())
        self._lac = max(self._lac, lac)
        return self._lac

    async def _refresh_and_read_lac(self) -> int:
        ctx = self._bk.ctx
        versioned = await ctx.in_thread(ctx.store.read_ledger_metadata, self.ledger_id, self.scope_id)
        self._versioned = versioned
        self._reader.metadata = versioned.metadata
        if versioned.metadata.state == LedgerState.CLOSED:
            return versioned.metadata.last_entry_id
        return await self._reader.read_lac()

    def __iter__(self) -> Iterator[LedgerEntry]:
        """Every entry up to the LAC, read in batches."""
        return self.read_batched(0, self._lac)

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> "ReadHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
