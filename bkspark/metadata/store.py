"""Ledger metadata in ZooKeeper, laid out exactly as Apache BookKeeper lays it out.

What Java does, and so what we do (docs/protocol.md §5):

* ``<root>/LAYOUT`` names the ledger manager; its class decides the path scheme
  (hybrid hierarchical, always-long, legacy short).  A missing LAYOUT is
  created with the hierarchical factory, as the first Java client would.
* Ledger ids come from ``LongZkLedgerIdGenerator``: an ephemeral-sequential
  ``<root>/idgen/ID-`` znode, deleted right away; once ``idgen-long`` exists
  (or the 31-bit counter overflows), ``idgen-long/HOB-<n>/ID-`` with
  ``id = n << 32 | low``.
* Metadata znodes are created PERSISTENT with their parents; a create lost to a
  connection loss is never retried blindly: we read what is there and accept it
  only if it carries our own ``cToken`` (else :class:`LedgerExistsError`).
* Updates are compare-and-set on the znode version (:class:`MetadataVersionError`).
* Deletes remove the znode, then every parent left empty.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Literal, Sequence, overload

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    ZookeeperError,
)
from kazoo.protocol.states import WatchedEvent
from kazoo.retry import KazooRetry

from bkspark.metadata.listing import LedgerListing
from bkspark.protocol.values import INT64_MAX
from bkspark.errors import (
    BadMetadataError,
    InvalidOptionError,
    LedgerExistsError,
    MetadataError,
    MetadataVersionError,
    NoSuchLedgerMetadataError,
)
from bkspark.metadata.retry import RECONNECT_RETRY, TRANSIENT_ZK_ERRORS, ZkRetry, wait_connected
from bkspark.metadata.znodes import ZkClient
from bkspark.protocol import layout as layout_codec
from bkspark.protocol import ledger_metadata as md_codec
from bkspark.protocol import zk_paths
from bkspark.protocol.ledger_metadata import LedgerMetadata
from bkspark.security.zk import ZkSecurity

__all__ = ["Versioned", "ZkMetadataStore", "LEDGER_ID_MAX_SHORT", "connection_retry"]

log = logging.getLogger(__name__)

#: Ids at or above this value overflow the 31-bit generator (Integer.MAX_VALUE).
LEDGER_ID_MAX_SHORT = zk_paths.MAX_SHORT_LEDGER_ID

#: cToken draws (:meth:`ZkMetadataStore.new_ctoken`).
_CTOKEN_RANDOM = random.SystemRandom()


def connection_retry(session_timeout: float) -> KazooRetry:
    """How our kazoo client (re)connects: every 0.1 s doubling to 1 s, for at most ``session_timeout`` (zkTimeout)
    from the moment the connection was lost or first tried (docs/reliability.md, "ZooKeeper outages").

    A ZooKeeper outage shorter than zkTimeout is then only a pause: calls wait for the reconnection, and the
    session survives. A longer one ends the connection for good, so that every waiting call fails (kazoo's
    ``ConnectionClosedError``, a :class:`MetadataError` through :class:`ZkRetry`) instead of waiting for ever,
    as Apache BookKeeper's Java client gives up after zkTimeout. kazoo's default never gives up and lets the delay
    grow to an hour, so a short outage could still cost minutes.
    """
    return KazooRetry(
        max_tries=-1,
        delay=RECONNECT_RETRY.delay,
        backoff=RECONNECT_RETRY.backoff,
        max_delay=RECONNECT_RETRY.max_delay,
        deadline=session_timeout,
        ignore_expire=False,
    )


@dataclass(frozen=True)
class Versioned:
    """Ledger metadata with the znode version it was read (or written) at."""

    metadata: LedgerMetadata
    version: int


class ZkMetadataStore(LedgerListing):
    """BookKeeper's ZooKeeper metadata: LAYOUT, id generation, ledger znodes, listing.

    Blocking and thread-safe (kazoo is); the asyncio client calls it from a
    worker thread.  ``zk`` may be an already started ``KazooClient`` (then it
    is not stopped on :meth:`close`).
    """

    def __init__(
        self,
        metadata_service_uri: str,
        *,
        zk: KazooClient | None = None,
        session_timeout: float = 10.0,
        retry: ZkRetry | None = None,
        metadata_format_version: int = 3,
        store_ctime: bool = False,
        create_layout: bool = True,
        zk_security: ZkSecurity | None = None,
        read_only: bool = False,
    ) -> None:
        self.uri = layout_codec.parse_metadata_service_uri(metadata_service_uri)
        self.root = zk_paths.check_root(self.uri.root)
        self.retry = retry or ZkRetry()
        self.metadata_format_version = metadata_format_version
        self.store_ctime = store_ctime
        self._owns_zk = zk is None
        # Credentials and ACLs (zkEnableSecurity): docs/security.md.
        security = zk_security.kazoo_kwargs() if zk_security is not None else {}
        self.zk = zk or ZkClient(
            hosts=self.uri.connect_string,
            timeout=session_timeout,
            connection_retry=connection_retry(session_timeout),
            **security,
        )
        if self._owns_zk:
            try:
                self.zk.start(timeout=session_timeout)
            except Exception as exc:  # kazoo raises a bare timeout_exception
                self.zk.close()
                hint = (
                    " (were the ZooKeeper credentials refused? see docs/security.md)"
                    if zk_security is not None and zk_security.authenticated
                    else " (if ZooKeeper requires authentication, give credentials: zkDigestAuthPath or a JAAS "
                    "'Client' section, see docs/security.md)"
                )
                raise MetadataError(
                    "cannot connect to ZooKeeper" + hint,
                    hosts=self.uri.connect_string,
                    error=f"{type(exc).__name__}: {exc}",
                ) from exc
        try:
            self.scheme = self._load_layout(create_layout, read_only)
        except BaseException:
            # Not a cluster root, or a LAYOUT that disagrees with the URI: the session this store opened must not
            # outlive it (each failed construction in a long-lived process, e.g. a Spark task retried, leaked one).
            self.close()
            raise
        self._idgen_long: bool | None = None
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Stop the ZooKeeper session if this store opened it."""
        if self._owns_zk:
            try:
                self.zk.stop()
            finally:
                self.zk.close()

    def __enter__(self) -> "ZkMetadataStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- LAYOUT ------------------------------------------------------------------

    def _load_layout(self, create: bool, read_only: bool = False) -> str:
        """Read ``<root>/LAYOUT`` (creating it as Java's first client would) and return the path scheme.

        ``read_only`` (another system's metadata, e.g. Apache Pulsar's, which writes no LAYOUT: docs/pulsar.md)
        creates nothing: a missing LAYOUT means the URI's scheme, hierarchical by default.

        A ``metadataServiceUri`` naming another manager than LAYOUT is refused,
        as a Java client refuses to start in that case.
        """
        path = zk_paths.layout_path(self.root)
        wanted = self.uri.scheme
        try:
            data, _ = self.retry(self.zk.get, path)
        except NoNodeError:
            if read_only:
                return wanted or "hierarchical"
            if not create:
                raise BadMetadataError("no LAYOUT znode: not a BookKeeper cluster root", path=path) from None
            fresh = layout_codec.LedgerLayout.for_scheme(wanted or "hierarchical").serialize()
            try:
                self.retry(self.zk.create, path, fresh, makepath=True)
                data = fresh
            except NodeExistsError:
                data, _ = self.retry(self.zk.get, path)
        except ZookeeperError as exc:
            raise self.retry.wrap_error(exc, path=path) from exc
        layout = layout_codec.LedgerLayout.parse(data)
        scheme = layout.scheme
        if wanted is not None and wanted != scheme:
            raise BadMetadataError(
                "metadataServiceUri names a different ledger manager than LAYOUT",
                uri_type=wanted,
                layout=layout.manager_factory_class,
            )
        if scheme == "ms":
            raise BadMetadataError("the MetaStore ledger manager is not supported", layout=layout.manager_factory_class)
        return scheme

    # -- paths ---------------------------------------------------------------------

    def ledger_path(self, ledger_id: int, scope_id: int = 0) -> str:
        """The metadata znode of a ledger under this cluster's layout."""
        return zk_paths.ledger_path(self.root, ledger_id, scheme=self.scheme, scope_id=scope_id)

    # -- id generation (LongZkLedgerIdGenerator) ----------------------------------

    def _sequential_id(self, prefix: str) -> int:
        """ZkLedgerIdGenerator: create ``<prefix>`` ephemeral-sequential, parse the number, delete it."""
        # A retry after a connection loss may leave an extra ephemeral znode: harmless
        # (ephemeral, and ids only need to be unique), so blind retries are fine here.
        created = self.retry(self.zk.create, prefix, b"", ephemeral=True, sequence=True, makepath=True)
        number = zk_paths.sequential_id(created, prefix)
        self.zk.delete_async(created)
        return number

    def _idgen_long_exists(self) -> bool:
        if self._idgen_long is None:
            self._idgen_long = self.retry(self.zk.exists, zk_paths.idgen_long_path(self.root)) is not None
        return self._idgen_long

    def generate_ledger_id(self) -> int:
        """A fresh ledger id, drawn exactly as Java's ``LongZkLedgerIdGenerator`` draws it.

        The flat manager draws from ``<root>/ID-`` and the legacy manager has
        no 63-bit mode (both raise :class:`MetadataError` on overflow).
        """
        try:
            if self.scheme == "flat":
                prefix = f"{self.root}/{zk_paths.ID_PREFIX}"
            else:
                prefix = zk_paths.idgen_prefix(self.root)
            if self.scheme in ("flat", "legacyhierarchical") or not self._idgen_long_exists():
                ledger_id = self._sequential_id(prefix)
                if not zk_paths.is_short_id_overflow(ledger_id):
                    return ledger_id
                if self.scheme in ("flat", "legacyhierarchical"):
                    raise MetadataError("31-bit ledger id space exhausted (LedgerIdOverflowException)")
                try:
                    self.retry(self.zk.create, zk_paths.idgen_long_path(self.root), b"", makepath=True)
                except NodeExistsError:
                    pass
                self._idgen_long = True
            return self._generate_long_id()
        except ZookeeperError as exc:
            raise self.retry.wrap_error(exc, op="generate_ledger_id") from exc

    def _generate_long_id(self) -> int:
        base = zk_paths.idgen_long_path(self.root)
        while True:
            hobs = sorted(
                h for h in (zk_paths.parse_hob(c) for c in self.retry(self.zk.get_children, base)) if h is not None
            )
            if not hobs:
                self._create_hob(1)
                continue
            high = hobs[-1]
            if len(hobs) > 3:
                for old in hobs[:-3]:
                    self.zk.delete_async(zk_paths.hob_path(self.root, old), version=0)
            low = self._sequential_id(zk_paths.hob_prefix(self.root, high))
            if not zk_paths.is_short_id_overflow(low):
                return zk_paths.compose_long_id(high, low)
            self._create_hob(high + 1)

    def _create_hob(self, high: int) -> None:
        try:
            self.retry(self.zk.create, zk_paths.hob_path(self.root, high), b"", makepath=True)
        except NodeExistsError:
            pass

    # -- ledger metadata CRUD ------------------------------------------------------

    def new_ctoken(self) -> int:
        """What Java puts in ``cToken``: ``ThreadLocalRandom.nextLong(Long.MAX_VALUE)``.

        Drawn from the system's randomness, not the global ``random``: a create's token tells its znode from
        another client's, so two processes forked from one parent must not draw the same tokens, and the
        application's seeded ``random`` must neither feed them nor be consumed by them.
        """
        return _CTOKEN_RANDOM.randrange(0, INT64_MAX)

    def _for_create(self, metadata: LedgerMetadata) -> tuple[LedgerMetadata, bytes]:
        """What a create of ``metadata`` writes: a fresh cToken (format 3 without one), and its bytes."""
        if metadata.format_version >= 3 and not metadata.ctoken:
            metadata = metadata.with_ctoken(self.new_ctoken())
        return metadata, md_codec.serialize(metadata, version=metadata.format_version)

    def ledger_znode_to_create(self, ledger_id: int, metadata: LedgerMetadata, scope_id: int = 0) -> tuple[str, bytes]:
        """``(path, bytes)`` of a ledger's metadata znode that a ZooKeeper ``multi`` of the caller's creates (its
        parent znodes made now): the bytes :meth:`create_ledger_metadata` would write, cToken included."""
        _, data = self._for_create(metadata)
        path = self.ledger_path(ledger_id, scope_id)
        try:
            self.retry(self.zk.ensure_path, path.rsplit("/", 1)[0])
        except ZookeeperError as exc:
            raise self.retry.wrap_error(exc, path=path) from exc
        return path, data

    def create_ledger_metadata(self, ledger_id: int, metadata: LedgerMetadata, scope_id: int = 0) -> Versioned:
        """Create the ledger's znode (version 0); :class:`LedgerExistsError` if it is there.

        A create interrupted by a connection loss is resolved by reading the
        znode: ours (same cToken, or the same bytes for tokenless formats)
        counts as created, anything else as :class:`LedgerExistsError`.
        """
        metadata, data = self._for_create(metadata)
        path = self.ledger_path(ledger_id, scope_id)
        attempts = self.retry.start()
        while True:
            try:
                self.zk.create(path, data, makepath=True)
                return Versioned(metadata, 0)
            except NodeExistsError:
                if attempts.tries > 0 and self._is_our_znode(path, metadata, data):
                    return Versioned(metadata, 0)
                raise LedgerExistsError("ledger already exists", ledger_id=ledger_id, scope_id=scope_id) from None
            except TRANSIENT_ZK_ERRORS as exc:
                # The create may or may not have reached the server: look before trying again.
                self._wait_connected()
                try:
                    existing, stat = self.retry(self.zk.get, path)
                except NoNodeError:
                    try:
                        attempts.backoff(exc)
                    except TRANSIENT_ZK_ERRORS:
                        raise MetadataError("create of ledger metadata kept losing the connection", path=path) from None
                    continue
                if self._same_creation(existing, metadata, data):
                    return Versioned(metadata, stat.version)
                raise LedgerExistsError("ledger already exists", ledger_id=ledger_id, scope_id=scope_id) from None
            except ZookeeperError as exc:
                raise self.retry.wrap_error(exc, path=path) from exc

    def _wait_connected(self, timeout: float = 30.0) -> None:
        wait_connected(self.zk, timeout)

    def _is_our_znode(self, path: str, metadata: LedgerMetadata, data: bytes) -> bool:
        try:
            existing, _ = self.retry(self.zk.get, path)
        except NoNodeError:
            return False
        return self._same_creation(existing, metadata, data)

    @staticmethod
    def _same_creation(existing: bytes, metadata: LedgerMetadata, data: bytes) -> bool:
        if existing == data:
            return True
        if not metadata.ctoken:
            return False
        try:
            return md_codec.parse(existing).ctoken == metadata.ctoken
        except Exception:  # unparsable foreign data is not ours
            return False

    def read_ledger_metadata(
        self, ledger_id: int, scope_id: int = 0, watch: Callable[[WatchedEvent], None] | None = None
    ) -> Versioned:
        """The ledger's metadata and znode version; :class:`NoSuchLedgerMetadataError` if absent."""
        path = self.ledger_path(ledger_id, scope_id)
        try:
            data, stat = self.retry(self.zk.get, path, watch=watch)
        except NoNodeError:
            raise NoSuchLedgerMetadataError("no such ledger", ledger_id=ledger_id, scope_id=scope_id) from None
        except ZookeeperError as exc:
            raise self.retry.wrap_error(exc, path=path) from exc
        # Java falls back to the znode's creation time (stat.ctime, ms) when the blob has none.
        return Versioned(md_codec.parse(data, znode_ctime=stat.ctime), stat.version)

    @overload
    def read_many_ledger_metadata(
        self, refs: Sequence[tuple[int, int]], *, bad_metadata_as_result: Literal[False] = False
    ) -> Iterator[tuple[int, int, Versioned | None]]: ...

    @overload
    def read_many_ledger_metadata(
        self, refs: Sequence[tuple[int, int]], *, bad_metadata_as_result: Literal[True]
    ) -> Iterator[tuple[int, int, Versioned | BadMetadataError | None]]: ...

    def read_many_ledger_metadata(
        self, refs: Sequence[tuple[int, int]], *, bad_metadata_as_result: bool = False
    ) -> Iterator[tuple[int, int, Versioned | BadMetadataError | None]]:
        """``(scope id, ledger id, metadata and znode version, or None when absent)`` for each ``(scope id,
        ledger id)`` in order, read with ZooKeeper multi reads of many znodes each (any thread;
        :mod:`bkspark.metadata.multiread`), a lost connection retried under this store's policy.  A ledger id no
        path of this layout can hold is absent; metadata that does not parse raises :class:`BadMetadataError`
        (or, with ``bad_metadata_as_result``, is that ledger's result: the orphan audit reports it and goes on),
        any other failure the store's wrapped error."""
        from bkspark.metadata.multiread import get_many

        paths: list[str] = []
        has_path: list[bool] = []
        for scope_id, ledger_id in refs:
            try:
                paths.append(self.ledger_path(ledger_id, scope_id))
            except InvalidOptionError:
                has_path.append(False)
                continue
            has_path.append(True)
        results = get_many(self.zk, paths, retry=self.retry)
        try:
            for (scope_id, ledger_id), known in zip(refs, has_path):
                path, result = next(results) if known else (None, None)
                if result is None or isinstance(result, NoNodeError):
                    yield scope_id, ledger_id, None
                    continue
                if isinstance(result, BaseException):
                    raise self.retry.wrap_error(result, path=path) from result
                data, stat = result
                try:
                    metadata = md_codec.parse(data, znode_ctime=stat.ctime)
                except BadMetadataError as exc:
                    if not bad_metadata_as_result:
                        raise
                    yield scope_id, ledger_id, exc
                    continue
                yield scope_id, ledger_id, Versioned(metadata, stat.version)
        except ZookeeperError as exc:  # the request itself (session expiry; connection loss without a retry left)
            raise self.retry.wrap_error(exc) from exc

    def write_ledger_metadata(
        self, ledger_id: int, metadata: LedgerMetadata, version: int, scope_id: int = 0
    ) -> Versioned:
        """Compare-and-set: write only if the znode is still at ``version``.

        :class:`MetadataVersionError` when someone else wrote first;
        :class:`NoSuchLedgerMetadataError` when the ledger was deleted.
        """
        if version < 0:
            raise InvalidOptionError("compare-and-set needs a known znode version", version=version)
        metadata = metadata.as_update()
        data = md_codec.serialize(metadata, version=metadata.format_version)
        path = self.ledger_path(ledger_id, scope_id)
        try:
            stat = self._set_with_retry(path, data, version)
        except BadVersionError:
            raise MetadataVersionError(
                "ledger metadata changed concurrently", ledger_id=ledger_id, scope_id=scope_id, version=version
            ) from None
        except NoNodeError:
            raise NoSuchLedgerMetadataError("no such ledger", ledger_id=ledger_id, scope_id=scope_id) from None
        except ZookeeperError as exc:
            raise self.retry.wrap_error(exc, path=path) from exc
        return Versioned(metadata, stat.version)

    def _set_with_retry(self, path: str, data: bytes, version: int):  # type: ignore[no-untyped-def]
        """``set`` with a conditional version; after a connection loss, look whether it was applied.

        Applied (the znode holds our bytes one version up): done.  Changed by
        someone else: :class:`BadVersionError`.  Unchanged: try again while the
        ZooKeeper policy allows, then :class:`MetadataError`.
        """
        attempts = self.retry.start()
        while True:
            try:
                return self.zk.set(path, data, version=version)
            except TRANSIENT_ZK_ERRORS as exc:
                self._wait_connected()
                current, stat = self.retry(self.zk.get, path)
                if stat.version == version + 1 and current == data:
                    return stat  # our write went through before the connection dropped
                if stat.version != version:
                    raise BadVersionError() from None
                try:
                    attempts.backoff(exc)
                except TRANSIENT_ZK_ERRORS:
                    raise MetadataError("compare-and-set of ledger metadata kept losing the connection", path=path) from None

    def delete_ledger_metadata(self, ledger_id: int, scope_id: int = 0, version: int = -1) -> None:
        """Delete the ledger's znode (then its empty parents); an absent znode is fine."""
        path = self.ledger_path(ledger_id, scope_id)
        try:
            self.retry(self.zk.delete, path, version=version)
        except NoNodeError:
            pass
        except BadVersionError:
            raise MetadataVersionError("ledger metadata changed concurrently", ledger_id=ledger_id) from None
        except ZookeeperError as exc:
            raise self.retry.wrap_error(exc, path=path) from exc
        self._delete_empty_parents(path)

    def _delete_empty_parents(self, path: str) -> None:
        parent = path.rsplit("/", 1)[0]
        stop = {self.root, zk_paths.scopes_root(self.root)}
        while parent not in stop and parent.startswith(self.root + "/"):
            try:
                self.retry(self.zk.delete, parent)
            except (NotEmptyError, NoNodeError):
                return
            except ZookeeperError:
                return
            parent = parent.rsplit("/", 1)[0]

    def ledger_exists(self, ledger_id: int, scope_id: int = 0) -> bool:
        """Whether the ledger's metadata znode exists."""
        return self.retry(self.zk.exists, self.ledger_path(ledger_id, scope_id)) is not None
