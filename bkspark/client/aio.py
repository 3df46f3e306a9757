"""The asyncio client: ``AsyncBookKeeper``, ``AsyncLedgerHandle`` (writer) and ``AsyncReadHandle``.

Everything here lives on one event loop: the one :meth:`AsyncBookKeeper.start`
ran on (an asyncio user's own loop, or the blocking client's ``bkspark-client``
thread).  Call its methods from that loop only.  ZooKeeper work (kazoo is
thread-based) runs in the client's own ``bkspark-zk`` thread pool, so the loop
never blocks on it and an asyncio user's default executor is left alone.

    async with AsyncBookKeeper("zk+hierarchical://127.0.0.1:2181/ledgers") as bk:
        lh = await bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        await lh.append(b"payload"); await lh.close()
        rh = await bk.open_ledger(lh.ledger_id)
        entries = await rh.read(0, rh.last_add_confirmed)

Arguments are checked when a method is called, before anything is awaited
(as kazoo's ``*_async`` methods do): a wrong type is a ``TypeError``, a wrong
value an :class:`InvalidOptionError`.  The blocking :mod:`bkspark.client.bookkeeper`
facade calls the same methods, so both APIs check the same way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import secrets
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable

from bkspark.client.conf import ClientConf
from bkspark.client.ops import BookieOps
from bkspark.client.pool import BookiePool
from bkspark.client.arrow import DEFAULT_BYTES_PER_BATCH, DEFAULT_ROWS_PER_BATCH, payload_runs_batch, require_pyarrow
from bkspark.client.reader import DEFAULT_BYTES_IN_FLIGHT, LedgerEntry, LedgerReader
from bkspark.client.payloads import PackedPayloads, payload_bytes
from bkspark.client.recovery import recover_ledger
from bkspark.client.services import ClientServices
from bkspark.client.writer import LedgerWriter
from bkspark.config.typed import DEFAULT_ACK_QUORUM_SIZE, DEFAULT_ENSEMBLE_SIZE, DEFAULT_WRITE_QUORUM_SIZE, is_int
from bkspark.errors import (
    ClientClosedError,
    DigestMismatchError,
    InvalidOptionError,
    LedgerClosedError,
    LedgerExistsError,
    NotEnoughBookiesError,
    UnauthorizedAccessError,
)
from bkspark.metadata.registry import BookieRegistry
from bkspark.metadata.store import Versioned, ZkMetadataStore
from bkspark.placement import policy_from_conf
from bkspark.placement.base import EnsemblePlacementPolicy, check_quorums, conf_bool
from bkspark.placement.rackaware import RESOLVE_BY_BOOKIE_ID
from bkspark.protocol.digest import Digester, DigestType
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState, check_custom_metadata
from bkspark.protocol.ledger_name import LedgerRef
from bkspark.protocol.service_info import SCOPE_IDS_EXTENSION
from bkspark.protocol.values import INT64_MAX, check_int
from bkspark.retry import METADATA_CAS_RETRY
from bkspark.security.auth import ClientSecurity
from bkspark.security.zk import ZkSecurity

__all__ = [
    "AsyncBookKeeper", "AsyncLedgerHandle", "AsyncReadHandle", "HandleIdentity", "check_payload", "check_payloads",
    "check_password",
]

log = logging.getLogger(__name__)

#: A drawn ledger id that is already taken is a lost create-if-absent race: draw again
#: (Java's ``LedgerCreateOp`` does the same), a bounded number of times.
_ID_COLLISION_RETRY = METADATA_CAS_RETRY.with_(max_tries=10, retry_on=lambda exc: isinstance(exc, LedgerExistsError))


# -- eager argument checks (any thread: they only look at their arguments) ------------------------


def check_password(password: object) -> bytes:
    """The ledger password as bytes; ``TypeError`` for anything but bytes or bytearray."""
    if not isinstance(password, (bytes, bytearray)):
        raise TypeError(f"password must be bytes, not {type(password).__name__}")
    return bytes(password)


def check_payload(payload: object) -> None:
    """``TypeError`` unless ``payload`` is bytes-like (bytes, bytearray, memoryview)."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise TypeError(f"payload must be bytes, not {type(payload).__name__}")


#: The payload types a bulk append takes without a copy (exactly ``bytes``: a subclass is copied).
_BYTES_ONLY = frozenset((bytes,))


def check_payloads(payloads: Iterable[object]) -> list[bytes] | PackedPayloads:
    """The entries of a bulk append as a list of immutable bytes, or the :class:`PackedPayloads` given (immutable
    already); ``TypeError`` names the first bad one.

    ``bytes`` pass through without a copy; a bytearray or memoryview is copied, because the writer keeps
    each payload until it is acknowledged (an ensemble change sends it again).
    """
    if type(payloads) is PackedPayloads:
        return payloads
    if isinstance(payloads, (bytes, bytearray, memoryview, str)):
        raise TypeError("append_many takes a sequence of payloads, not one payload")
    out: list[bytes] = list(payloads)  # type: ignore[arg-type]  # our own list: the caller may reuse theirs
    if set(map(type, out)) <= _BYTES_ONLY:  # one pass in C (a generator was a tenth of a bulk append's caller)
        return out
    out = []
    for index, payload in enumerate(payloads):
        if type(payload) is bytes:
            out.append(payload)
        elif isinstance(payload, (bytes, bytearray, memoryview)):
            out.append(bytes(payload))
        else:
            raise TypeError(f"payload {index} of a bulk append must be bytes, not {type(payload).__name__}")
    return out


def _check_ledger_id(ledger_id: object) -> int:
    return check_int(ledger_id, "ledger id", 0, INT64_MAX)


def _check_scope_id(scope_id: object) -> int:
    return check_int(scope_id, "scope id")


def _check_digest(digest_type: object) -> DigestType:
    if not (isinstance(digest_type, (str, DigestType)) or is_int(digest_type)):
        raise TypeError(f"digest_type must be a DigestType, its name or its number, not {type(digest_type).__name__}")
    return DigestType.parse(digest_type)


def _check_entry_range(first: object, last: object) -> tuple[int, int]:
    first = check_int(first, "first entry id")
    last = check_int(last, "last entry id")
    if first < 0 or last < first:
        raise InvalidOptionError("bad entry range", first=first, last=last)
    return first, last


def _closing_step(what: str, step: Callable[..., object], *args: object) -> None:
    """One step of :meth:`AsyncBookKeeper.close`: an error is logged and the close goes on."""
    try:
        step(*args)
    except Exception:  # noqa: BLE001 - closing must go on
        log.warning("error %s while closing the client", what, exc_info=True)


class AsyncBookKeeper:
    """A BookKeeper client for asyncio code: ledgers on the bookies of one cluster.

    ``conf`` takes BookKeeper client keys (``useV2WireProtocol``,
    ``addEntryTimeoutSec``, ``ensemblePlacementPolicy``...); keyword arguments
    override them (see :class:`ClientConf`).  Nothing connects until
    :meth:`start` (or ``async with``); from then on the client belongs to the
    loop that started it.
    """

    def __init__(self, metadata_service_uri: str, conf: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        if not isinstance(metadata_service_uri, str):
            raise TypeError(f"metadata_service_uri must be a str, not {type(metadata_service_uri).__name__}")
        if conf is not None and not isinstance(conf, Mapping):
            raise TypeError(f"conf must be a mapping, not {type(conf).__name__}")
        self.conf = ClientConf.from_mapping(conf, **kwargs)
        # TLS, SASL and ZooKeeper settings are checked before anything connects (docs/security.md).
        self.security = ClientSecurity.from_conf(self.conf.extra)
        self.zk_security = ZkSecurity.from_conf(self.conf.extra)
        self.metadata_service_uri = metadata_service_uri
        self.closed = False
        self._started = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The ZooKeeper calls' threads (kazoo blocks); owned by this client, shut down by close().
        self.zk_executor = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="bkspark-zk")
        self._writers: weakref.WeakSet[LedgerWriter] = weakref.WeakSet()
        self.store: ZkMetadataStore
        self.registry: BookieRegistry
        self.policy: EnsemblePlacementPolicy
        self.pool: BookiePool
        self.services: ClientServices

    # -- lifecycle (the loop) -----------------------------------------------------------------

    async def start(self) -> "AsyncBookKeeper":
        """Connect to ZooKeeper and watch the bookies; binds the client to the running loop."""
        if self._started:
            return self
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._started = True
        try:
            store, registry = await loop.run_in_executor(self.zk_executor, self._open_metadata)
        except BaseException:
            self.zk_executor.shutdown(wait=False)
            self.closed = True
            raise
        try:
            self.store, self.registry = store, registry
            placement_conf = self.conf.placement_conf()
            self.policy = policy_from_conf(placement_conf)
            if hasattr(self.policy, "set_bookie_address_resolver") and not conf_bool(
                placement_conf, RESOLVE_BY_BOOKIE_ID, False
            ):
                # BP-41: the DNS-to-switch mapping gets the bookie's registered host, as Java's
                # resolver gives it, not a BookieId that may not be an address at all.
                self.policy.set_bookie_address_resolver(lambda bookie: self.registry.resolve(bookie)[0])
            # Registry listeners run on kazoo's threads: hand their news to the loop.  The view as
            # of now goes to the policy at once, so a create_ledger awaited next already sees it.
            registry.add_listener(
                lambda writable, readonly: loop.call_soon_threadsafe(self.policy.on_cluster_changed, writable, readonly),
                call_now=False,
            )
            self.policy.on_cluster_changed(registry.writable_bookies(), registry.readonly_bookies())
            self.pool = BookiePool(
                self.registry,
                max_frame_size=self.conf.nettyMaxFrameSizeBytes,
                connect_timeout=self.conf.connectTimeoutMillis / 1000.0,
                executor=self.zk_executor,
                security=self.security,
            )
            self.registry.add_address_listener(lambda bookie_id: loop.call_soon_threadsafe(self.pool.drop, bookie_id))
            ops = BookieOps(
                self.pool,
                use_v2=self.conf.useV2WireProtocol,
                add_timeout=self.conf.addEntryTimeoutSec,
                read_timeout=self.conf.readEntryTimeoutSec,
            )
            self.services = ClientServices(
                self.conf, loop, ops, store, self.registry, self.policy, executor=self.zk_executor
            )
        except BaseException:
            registry.close()
            await loop.run_in_executor(self.zk_executor, store.close)
            self.zk_executor.shutdown(wait=False)
            self.closed = True
            raise
        return self

    def _open_metadata(self) -> tuple[ZkMetadataStore, BookieRegistry]:
        """Start the ZooKeeper session and read the bookie lists (blocking: a ``bkspark-zk`` thread)."""
        store = ZkMetadataStore(
            self.metadata_service_uri,
            session_timeout=self.conf.zkTimeout,
            metadata_format_version=self.conf.ledgerMetadataVersion,
            store_ctime=self.conf.storeSystemTimeAsLedgerCreationTime,
            zk_security=self.zk_security,
            read_only=self.conf.metadataReadOnly,
        )
        try:
            registry = BookieRegistry(
                store.zk,
                store.root,
                retry=store.retry,
                address_resolver_enabled=self.conf.bookieAddressResolverEnabled,
                address_tracking=self.conf.enableBookieAddressTracking,
            )
            registry.start()
        except BaseException:
            store.close()
            raise
        return store, registry

    async def close(self) -> None:
        """Fail what is still pending (no caller waits forever), close connections and the ZooKeeper session.

        Every step runs whatever the one before it raised (a placement policy of the user's may fail in
        ``uninitialize``): the ZooKeeper session and the client's threads never outlive it.  A failed step is
        logged, not raised: the client is closed either way (docs/client.md, "Closing the client").
        """
        if self.closed:
            return
        self.closed = True
        if not self._started:
            self.zk_executor.shutdown(wait=False)
            return
        error = ClientClosedError("client closed")
        for writer in list(self._writers):
            if writer.pending or not writer.closed:
                _closing_step("failing a ledger's pending adds", writer._fail_all, error)
        try:
            await self.pool.close()
        except Exception:  # noqa: BLE001 - closing must go on
            log.debug("error closing bookie connections", exc_info=True)
        _closing_step("closing the bookie registry", self.registry.close)
        _closing_step("uninitializing the placement policy", self.policy.uninitialize)
        try:
            await asyncio.get_running_loop().run_in_executor(self.zk_executor, self.store.close)
        except Exception:  # noqa: BLE001 - closing must go on
            log.warning("error closing the ZooKeeper session", exc_info=True)
        finally:
            self.zk_executor.shutdown(wait=False)

    async def __aenter__(self) -> "AsyncBookKeeper":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_usable(self) -> None:
        if self.closed:
            raise ClientClosedError("client is closed")
        if not self._started:
            raise ClientClosedError("client is not started: await start() (or use async with) first")

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop this client belongs to (set by :meth:`start`)."""
        if self._loop is None:
            raise ClientClosedError("client is not started")
        return self._loop

    # -- ledgers ----------------------------------------------------------------------------------

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
    ) -> Awaitable["AsyncLedgerHandle"]:
        """Create a ledger; awaits to its write handle.  Arguments are checked now.

        ``ledger_id`` given (the "adv" form, e.g. from ``ledger_name.ids_from_uuid``)
        uses that id and no ZooKeeper counter; :class:`LedgerExistsError` if taken.
        Otherwise, in scope 0 the id comes from the cluster's generator, retried on
        collision as Java's ``LedgerCreateOp`` does; in a scope != 0 (BP-35,
        decentralised ids) it is a random 63-bit id, redrawn on collision.
        """
        check_quorums(ensemble_size, write_quorum_size, ack_quorum_size)
        dtype = _check_digest(digest_type)
        pw = check_password(password)
        custom = check_custom_metadata(custom_metadata)
        scope = _check_scope_id(scope_id)
        lid = None if ledger_id is None else _check_ledger_id(ledger_id)
        self._check_usable()
        return self._create(ensemble_size, write_quorum_size, ack_quorum_size, dtype, pw, custom, scope, lid)

    def create_ledger_adv(self, ledger_id: int, scope_id: int = 0, **kwargs: Any) -> Awaitable["AsyncLedgerHandle"]:
        """Create a ledger with a caller-chosen id (Java's ``createLedgerAdv``; BP-35 scope ids)."""
        return self.create_ledger(ledger_id=ledger_id, scope_id=scope_id, **kwargs)

    async def _create(
        self, e: int, w: int, a: int, dtype: DigestType, password: bytes, custom: dict[str, bytes], scope_id: int,
        ledger_id: int | None,
    ) -> "AsyncLedgerHandle":
        ctx = self.services
        exclude: set[str] = set()
        if scope_id != 0:
            # Scope != 0 always goes over v3 (BookieOps.data_version), to bookies that store scope ids.
            writable = self.registry.writable_bookies()
            capable = {b for b in writable if SCOPE_IDS_EXTENSION in self.registry.extensions(b)}
            exclude = set(writable) - capable
            if len(capable) < e:
                raise NotEnoughBookiesError(
                    f"scope ids != 0 need bookies advertising '{SCOPE_IDS_EXTENSION}' in bkspark.extensions "
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
        attempts = _ID_COLLISION_RETRY.start()
        while True:
            if ledger_id is not None:
                lid = ledger_id
            elif scope_id != 0:
                lid = secrets.randbits(63)  # BP-35: no counter for scoped ledgers
            else:
                lid = await ctx.in_thread(self.store.generate_ledger_id)
            try:
                versioned = await ctx.in_thread(self.store.create_ledger_metadata, lid, md, scope_id)
                break
            except LedgerExistsError as exc:
                if ledger_id is not None:
                    raise  # the caller's id is taken: nothing to redraw
                await attempts.backoff_async(exc)
        ref = LedgerRef(lid, scope_id)
        writer = LedgerWriter(ctx, ref, versioned, password)
        self._writers.add(writer)
        return AsyncLedgerHandle(self, ref, writer)

    def open_ledger(
        self,
        ledger_id: int,
        scope_id: int = 0,
        recovery: bool = True,
        password: bytes = b"",
        digest_type: str | int | DigestType | None = None,
        *,
        metadata: Versioned | None = None,
    ) -> Awaitable["AsyncReadHandle"]:
        """Open a ledger for reading; ``recovery=True`` fences and closes it first (docs/protocol.md §4 items 6, 7).

        ``metadata``: the ledger's metadata and znode version as the caller just read them (e.g. many at once with
        ``store.read_many_ledger_metadata``), to open without reading them again; opened as if read here.
        """
        lid = _check_ledger_id(ledger_id)
        scope = _check_scope_id(scope_id)
        if not isinstance(recovery, bool):
            raise TypeError(f"recovery must be a bool, not {type(recovery).__name__}")
        if metadata is not None and not isinstance(metadata, Versioned):
            raise TypeError(f"metadata must be a Versioned, not {type(metadata).__name__}")
        pw = check_password(password)
        dtype = None if digest_type is None else _check_digest(digest_type)
        self._check_usable()
        return self._open(lid, scope, recovery, pw, dtype, metadata)

    async def _open(
        self, ledger_id: int, scope_id: int, recovery: bool, password: bytes, digest_type: DigestType | None,
        known: Versioned | None = None,
    ) -> "AsyncReadHandle":
        ctx = self.services
        ref = LedgerRef(ledger_id, scope_id)
        versioned: Versioned = (
            known if known is not None else await ctx.in_thread(self.store.read_ledger_metadata, ledger_id, scope_id)
        )
        md = versioned.metadata
        if md.has_password and md.password != password:
            raise UnauthorizedAccessError("wrong password for ledger", ledger_id=ledger_id)
        if md.has_password and (self.conf.enableDigestTypeAutodetection or digest_type is None):
            dtype = md.digest_type
        else:
            dtype = digest_type if digest_type is not None else DigestType.parse("CRC32C")
            if md.digest_type is not None and md.digest_type != dtype:
                raise DigestMismatchError(
                    "digest type does not match the ledger's", ledger_id=ledger_id, requested=dtype.name,
                    stored=md.digest_type.name,
                )
        assert dtype is not None
        digester = Digester(dtype, password)
        if md.state == LedgerState.CLOSED:
            return AsyncReadHandle(self, ref, versioned, digester, md.last_entry_id)
        if recovery:
            versioned = await recover_ledger(ctx, ref, versioned, password)
            return AsyncReadHandle(self, ref, versioned, digester, versioned.metadata.last_entry_id)
        reader = LedgerReader(ctx, ref, md, digester)
        lac = await reader.read_lac()
        # The writer may have changed ensemble (or closed) between our metadata read and the LAC
        # read; Java keeps a metadata watch for this, one re-read serves the same purpose here.
        versioned = await ctx.in_thread(self.store.read_ledger_metadata, ledger_id, scope_id)
        if versioned.metadata.state == LedgerState.CLOSED:
            lac = versioned.metadata.last_entry_id
        return AsyncReadHandle(self, ref, versioned, digester, lac)

    def delete_ledger(self, ledger_id: int, scope_id: int = 0) -> Awaitable[None]:
        """Delete the ledger's metadata; bookies garbage-collect its entries."""
        lid, scope = _check_ledger_id(ledger_id), _check_scope_id(scope_id)
        self._check_usable()
        return self.services.in_thread(self.store.delete_ledger_metadata, lid, scope)

    def list_ledgers(self, scope_id: int = 0) -> Awaitable[list[int]]:
        """Every ledger id of a scope, ascending (walking ZooKeeper as Java does)."""
        scope = _check_scope_id(scope_id)
        self._check_usable()
        return self.services.in_thread(lambda: list(self.store.list_ledgers(scope)))

    def get_ledger_metadata(self, ledger_id: int, scope_id: int = 0) -> Awaitable[LedgerMetadata]:
        """The ledger's current metadata."""
        lid, scope = _check_ledger_id(ledger_id), _check_scope_id(scope_id)
        self._check_usable()
        return self._metadata(lid, scope)

    async def _metadata(self, ledger_id: int, scope_id: int) -> LedgerMetadata:
        versioned = await self.services.in_thread(self.store.read_ledger_metadata, ledger_id, scope_id)
        return versioned.metadata  # type: ignore[no-any-return]

    def bookie_info(self, bookie_id: str) -> Awaitable[tuple[int, int]]:
        """GET_BOOKIE_INFO over v3: ``(total disk capacity, free disk space)`` in bytes.

        A retriable failure (the bookie restarting, overloaded) is tried again under ``BOOKIE_RETRY``.
        """
        if not isinstance(bookie_id, str):
            raise TypeError(f"bookie_id must be a str, not {type(bookie_id).__name__}")
        self._check_usable()
        return self.services.bookie_retry.call_async(self.services.ops.bookie_info_async, bookie_id)

    def list_entries_on_bookie(self, bookie_id: str, ledger_id: int, scope_id: int = 0) -> Awaitable[list[int]]:
        """GET_LIST_OF_ENTRIES_OF_LEDGER over v3: the entry ids one bookie stores for a ledger."""
        if not isinstance(bookie_id, str):
            raise TypeError(f"bookie_id must be a str, not {type(bookie_id).__name__}")
        lid, scope = _check_ledger_id(ledger_id), _check_scope_id(scope_id)
        self._check_usable()
        return self.services.bookie_retry.call_async(self.services.ops.list_entries_async, bookie_id, lid, scope)

    def writable_bookies(self) -> frozenset[str]:
        """BookieIds of the writable bookies (``<root>/available``)."""
        return self.registry.writable_bookies()

    def readonly_bookies(self) -> frozenset[str]:
        """BookieIds of the read-only bookies (``<root>/available/readonly``)."""
        return self.registry.readonly_bookies()


class HandleIdentity:
    """The (scope id, ledger id) of a handle, from its ``LedgerRef`` (async and blocking handles alike)."""

    ref: LedgerRef

    @property
    def ledger_id(self) -> int:
        return self.ref.ledger_id

    @property
    def scope_id(self) -> int:
        return self.ref.scope_id


class AsyncLedgerHandle(HandleIdentity):
    """Write handle of a ledger this client created (appends in order, then close); loop thread only."""

    def __init__(self, bk: AsyncBookKeeper, ref: LedgerRef, writer: LedgerWriter) -> None:
        self.bk = bk
        self.ref = ref
        self.writer = writer

    @property
    def last_add_confirmed(self) -> int:
        """Highest entry id such that it and all before it are acknowledged."""
        return self.writer.lac

    @property
    def last_add_pushed(self) -> int:
        return self.writer.last_add_pushed

    @property
    def length(self) -> int:
        """Bytes of payload acknowledged so far."""
        return self.writer.confirmed_length

    @property
    def metadata(self) -> LedgerMetadata:
        return self.writer.metadata

    @property
    def is_closed(self) -> bool:
        return self.writer.closed

    @property
    def max_payload(self) -> int:
        """The largest entry one add can carry (``nettyMaxFrameSizeBytes`` less the frame's own bytes)."""
        return self.writer.max_payload

    def append_cb(self, payload: bytes | bytearray | memoryview, callback: Callable[[int | None, BaseException | None], None]) -> None:
        """Queue one entry; ``callback(entry_id, error)`` on the loop once Qa bookies have it (or it failed).

        Raises at once (nothing queued, the ledger still writable) for a payload
        that is not bytes (``TypeError``) or that no frame can carry
        (:class:`EntryTooLargeError`).
        """
        check_payload(payload)
        self.writer.check_payload_size(len(payload))
        if self.bk.closed:
            raise ClientClosedError("client is closed")
        self.writer.append(bytes(payload), callback)

    def append(self, payload: bytes | bytearray | memoryview) -> Awaitable[int]:
        """Append one entry; awaits to its entry id.  Entries are sent in the order of calls."""
        fut: asyncio.Future[int] = self.bk.loop.create_future()

        def done(entry_id: int | None, exc: BaseException | None) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(entry_id)  # type: ignore[arg-type]

        self.append_cb(payload, done)
        return fut

    def append_many(self, payloads: Iterable[bytes | bytearray | memoryview] | PackedPayloads) -> Awaitable[range]:
        """Append ``payloads`` as consecutive entries, all sent at once; awaits to the range of their ids.

        Every entry is an ordinary add (ordered after earlier appends, acknowledged by Qa bookies, an
        ensemble change on a bookie failure); the await ends once all are acknowledged, or raises the
        first error (entries up to :attr:`last_add_confirmed` are acknowledged, later ones are not).
        Raises at once, with nothing queued, for a payload that is not bytes (``TypeError``) or larger
        than :attr:`max_payload` (:class:`EntryTooLargeError`, its ``index`` in the batch).
        """
        data = check_payloads(payloads)
        self.writer.check_payload_sizes(data)
        if self.bk.closed:
            raise ClientClosedError("client is closed")
        fut: asyncio.Future[range] = self.bk.loop.create_future()

        def done(first: int | None, count: int, exc: BaseException | None) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(range(first, first + count))  # type: ignore[operator]

        self.writer.append_many(data, done)
        return fut

    async def flush(self) -> None:
        """Wait until every entry appended so far is acknowledged (or failed)."""
        await self.writer.drain()

    async def write_lac(self) -> int:
        """Store the current LAC explicitly on its write set (WRITE_LAC over v3); returns it."""
        return await self.writer.write_lac()

    async def force(self) -> int:
        """FORCE_LEDGER on every bookie of the current ensemble (v3); returns the LAC made durable."""
        return await self.writer.force()

    async def close(self) -> None:
        """Wait for pending appends, then close the ledger (CLOSED at the LAC in the metadata)."""
        if not self.writer.closed:
            await self.writer.close()

    async def __aenter__(self) -> "AsyncLedgerHandle":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncReadHandle(HandleIdentity):
    """Read handle of an opened ledger; loop thread only."""

    def __init__(
        self, bk: AsyncBookKeeper, ref: LedgerRef, versioned: Versioned, digester: Digester, lac: int
    ) -> None:
        self.bk = bk
        self.ref = ref
        self.versioned = versioned
        self.lac = lac
        self.reader = LedgerReader(bk.services, ref, versioned.metadata, digester)
        self.closed = False

    @property
    def metadata(self) -> LedgerMetadata:
        return self.versioned.metadata

    @property
    def last_add_confirmed(self) -> int:
        return self.lac

    @property
    def length(self) -> int:
        return self.metadata.length

    @property
    def is_closed(self) -> bool:
        """Whether the ledger (not this handle) is closed."""
        return self.metadata.state == LedgerState.CLOSED

    def check_open(self) -> None:
        if self.closed:
            raise LedgerClosedError("read handle is closed", ledger_id=self.ledger_id)

    def read(self, first: int, last: int) -> Awaitable[list[LedgerEntry]]:
        """Entries ``first..last`` inclusive; ``last`` must not be beyond the LAC."""
        first, last = _check_entry_range(first, last)
        self.check_open()
        if last > self.lac:
            raise InvalidOptionError("cannot read beyond the last add confirmed", last=last, lac=self.lac)
        return self.reader.read_range(first, last)

    def read_unconfirmed(self, first: int, last: int) -> Awaitable[list[LedgerEntry]]:
        """Entries ``first..last`` without the LAC check (they may not exist yet)."""
        first, last = _check_entry_range(first, last)
        self.check_open()
        return self.reader.read_range(first, last)

    def batch_read(self, start: int, max_count: int = 100, max_size: int = 0) -> Awaitable[list[LedgerEntry]]:
        """BP-62 batch read: up to ``max_count`` entries / ``max_size`` bytes from ``start`` (maybe fewer)."""
        start = check_int(start, "start entry id")
        check_int(max_count, "max_count")
        check_int(max_size, "max_size")
        self.check_open()
        return self.reader.batch_read(start, max_count, max_size, self.lac)

    def check_batched_args(self, first: object, last: object, batch_size: object, max_size: object, parallel: object) -> tuple[int, int]:
        """The checks of a batched range read, made when it is called (an iterator's too, not at its first step)."""
        first, last = _check_entry_range(first, last)
        for name, value in (("batch_size", batch_size), ("max_size", max_size), ("parallel", parallel)):
            check_int(value, name)
        self.check_open()
        return first, last

    def read_range_batched(
        self, first: int, last: int, batch_size: int = 100, max_size: int = 0, parallel: int = 4
    ) -> Awaitable[list[LedgerEntry]]:
        """Entries ``first..min(last, LAC)`` through batch reads, ``parallel`` batches in flight."""
        first, last = self.check_batched_args(first, last, batch_size, max_size, parallel)
        return self.reader.read_range_batched(first, min(last, self.lac), batch_size, max_size, self.lac, parallel)

    def read_batched(
        self, first: int, last: int, batch_size: int = 100, max_size: int = 0, parallel: int = 4
    ) -> AsyncIterator[LedgerEntry]:
        """Every entry ``first..last`` (up to the LAC), ``batch_size * parallel`` entries at a time."""
        first, last = self.check_batched_args(first, last, batch_size, max_size, parallel)
        return self._read_batched(first, last, batch_size, max_size, parallel)

    async def _read_batched(
        self, first: int, last: int, batch_size: int, max_size: int, parallel: int
    ) -> AsyncIterator[LedgerEntry]:
        last = min(last, self.lac)
        window = max(1, batch_size) * max(1, parallel)
        cur = first
        while cur <= last:
            end = min(last, cur + window - 1)
            for entry in await self.read_range_batched(cur, end, batch_size, max_size, parallel):
                yield entry
            cur = end + 1

    def read_payload_groups(self, first: int, last: int, **options: Any) -> AsyncIterator[tuple[int, list[bytes]]]:
        """Every entry ``first..min(last, LAC)`` as ``(first entry id, payloads)`` groups (``bytes`` payloads) of up to
        ``rows_per_group`` entries / about ``bytes_per_group`` bytes, read pipelined (see
        :meth:`LedgerReader.stream_payloads`): the groups of :meth:`read_payload_runs` (whose options these are),
        one list each."""
        return self._payload_groups_of(self.read_payload_runs(first, last, **options))

    @staticmethod
    async def _payload_groups_of(
        runs: AsyncIterator[tuple[int, list[Sequence[bytes]]]]
    ) -> AsyncIterator[tuple[int, list[bytes]]]:
        async for group_first, pieces in runs:
            yield group_first, [payload for piece in pieces for payload in piece]

    def read_payload_runs(
        self,
        first: int,
        last: int,
        *,
        batch_size: int = 100,
        max_size: int = 0,
        bytes_in_flight: int = DEFAULT_BYTES_IN_FLIGHT,
        batch: bool = True,
        rows_per_group: int = DEFAULT_ROWS_PER_BATCH,
        bytes_per_group: int = DEFAULT_BYTES_PER_BATCH,
    ) -> AsyncIterator[tuple[int, list[Sequence[bytes]]]]:
        """The groups of :meth:`read_payload_groups` as the pieces the reads gave, in order (each a
        :class:`PackedPayloads` gathered by the compiled check, or a list of ``bytes``), with no object per entry
        made here: the rows of :meth:`read_batches` (:func:`bkspark.client.arrow.payload_runs_batch`)."""
        first, last = _check_entry_range(first, last)
        for name, value in (("batch_size", batch_size), ("max_size", max_size), ("bytes_in_flight", bytes_in_flight),
                            ("rows_per_group", rows_per_group), ("bytes_per_group", bytes_per_group)):
            check_int(value, name)
        if rows_per_group < 1 or bytes_per_group < 1 or bytes_in_flight < 1:
            raise InvalidOptionError("rows_per_group, bytes_per_group and bytes_in_flight must be >= 1")
        self.check_open()
        return self._read_payload_runs(first, last, batch_size, max_size, bytes_in_flight, batch, rows_per_group, bytes_per_group)

    async def _read_payload_runs(
        self, first: int, last: int, batch_size: int, max_size: int, bytes_in_flight: int, batch: bool,
        rows_per_group: int, bytes_per_group: int,
    ) -> AsyncIterator[tuple[int, list[Sequence[bytes]]]]:
        pieces: list[Sequence[bytes]] = []
        rows = 0
        group_first = first
        group_bytes = 0
        async for start, payloads in self.reader.stream_payloads(
            first, last, self.lac, batch_size=batch_size, max_size=max_size, bytes_in_flight=bytes_in_flight,
            batch=batch,
        ):
            while payloads:
                take = rows_per_group - rows
                chunk, payloads = payloads[:take], payloads[take:]
                if not pieces:
                    group_first = start
                pieces.append(chunk)
                rows += len(chunk)
                group_bytes += payload_bytes(chunk)
                start += len(chunk)
                if rows >= rows_per_group or group_bytes >= bytes_per_group:
                    yield group_first, pieces
                    pieces, rows, group_bytes = [], 0, 0
        if pieces:
            yield group_first, pieces

    def read_batches(self, first: int, last: int, **options: Any) -> AsyncIterator[Any]:
        """Every entry ``first..min(last, LAC)`` as ``pyarrow.RecordBatch``es of ``entry_id`` and ``payload``
        (needs pyarrow; options as :meth:`read_payload_groups`).  The batches are built on the loop thread:
        asyncio users who mind should take the payload groups and build them elsewhere."""
        require_pyarrow()
        return self._record_batches_of(self.read_payload_runs(first, last, **options))

    @staticmethod
    async def _record_batches_of(runs: AsyncIterator[tuple[int, list[Sequence[bytes]]]]) -> AsyncIterator[Any]:
        async for start, pieces in runs:
            yield payload_runs_batch(start, pieces)

    async def read_last_add_confirmed(self) -> int:
        """Ask the bookies for the LAC (no RPC for a closed ledger); updates :attr:`last_add_confirmed`."""
        self.check_open()
        if self.is_closed:
            return self.lac
        ctx = self.bk.services
        versioned = await ctx.in_thread(ctx.store.read_ledger_metadata, self.ledger_id, self.scope_id)
        self.versioned = versioned
        self.reader.metadata = versioned.metadata
        if versioned.metadata.state == LedgerState.CLOSED:
            lac = versioned.metadata.last_entry_id
        else:
            lac = await self.reader.read_lac()
        self.lac = max(self.lac, lac)
        return self.lac

    def close(self) -> None:
        """Forget the handle (reads need no server-side state)."""
        self.closed = True

    async def __aenter__(self) -> "AsyncReadHandle":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
