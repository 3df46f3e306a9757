"""Bookie discovery: who is writable, who is read-only, and where each BookieId lives (BP-41).

Mirrors Java's ``ZKRegistrationClient`` + ``DefaultBookieAddressResolver``:

* writable bookies are the children of ``<root>/available`` (minus ``readonly``),
  read-only ones the children of ``<root>/available/readonly``; both watched;
* a BookieId resolves through the ``BookieServiceInfo`` stored in its
  registration znode (``bookie-rpc`` endpoint), read once, cached, and dropped
  when the znode changes or goes (one-shot data watch, re-armed on the next
  read), so a bookie back on a new address is found again;
* empty data (bookies <= 4.10) and ids ending in ``:0`` are legacy ``host:port``;
* with ``bookieAddressResolverEnabled=false`` every id *is* its address;
* an id that cannot be resolved raises :class:`BookieUnavailableError`, which
  the client treats exactly like a bookie that is down.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, ZookeeperError
from kazoo.protocol.states import EventType, WatchedEvent

from bkspark.errors import BadMetadataError, BookieUnavailableError, InvalidBookieIdError
from bkspark.metadata.retry import ZkRetry
from bkspark.protocol import service_info as si
from bkspark.protocol import zk_paths
from bkspark.protocol.bookie_id import BookieId

__all__ = ["BookieRegistry", "ClusterListener"]

log = logging.getLogger(__name__)

ClusterListener = Callable[[frozenset[str], frozenset[str]], None]


class BookieRegistry:
    """Writable / read-only bookie sets (watched) and the BookieId → address resolver."""

    def __init__(
        self,
        zk: KazooClient,
        root: str,
        *,
        retry: ZkRetry | None = None,
        address_resolver_enabled: bool = True,
        address_tracking: bool = True,
    ) -> None:
        self.zk = zk
        self.root = root.rstrip("/")
        self.available = zk_paths.available_path(self.root)
        self.readonly_path = zk_paths.readonly_path(self.root)
        self.retry = retry or ZkRetry()
        self.address_resolver_enabled = address_resolver_enabled
        self.address_tracking = address_tracking
        self._lock = threading.RLock()
        self._writable: frozenset[str] = frozenset()
        self._readonly: frozenset[str] = frozenset()
        self._info: dict[str, "si.BookieServiceInfo"] = {}
        self._listeners: list[ClusterListener] = []
        self._address_listeners: list[Callable[[str], None]] = []
        self._closed = False
        self._started = False

    # -- cluster view ----------------------------------------------------------------

    def start(self) -> None:
        """Read both bookie lists and keep watching them."""
        if self._started:
            return
        self._started = True
        self._refresh_writable()
        self._refresh_readonly()

    def close(self) -> None:
        """Stop reacting to watches (kazoo cannot cancel one-shot watches)."""
        self._closed = True
        with self._lock:
            self._listeners.clear()
            self._address_listeners.clear()

    def _children(self, path: str, watch: Callable[[WatchedEvent], None]) -> list[str]:
        try:
            return self.retry(self.zk.get_children, path, watch=watch)
        except NoNodeError:
            # Watch for its creation so the set fills in once the cluster is formatted.
            self.retry(self.zk.exists, path, watch=watch)
            return []

    def _refresh_writable(self, event: WatchedEvent | None = None) -> None:
        if self._closed:
            return
        try:
            children = self._children(self.available, self._refresh_writable)
        except Exception:  # a closed/suspended session: the next event re-reads
            log.warning("cannot list writable bookies", exc_info=True)
            return
        self._set(writable=frozenset(c for c in children if c != zk_paths.READONLY))

    def _refresh_readonly(self, event: WatchedEvent | None = None) -> None:
        if self._closed:
            return
        try:
            children = self._children(self.readonly_path, self._refresh_readonly)
        except Exception:
            log.warning("cannot list read-only bookies", exc_info=True)
            return
        self._set(readonly=frozenset(children))

    def _set(self, writable: frozenset[str] | None = None, readonly: frozenset[str] | None = None) -> None:
        with self._lock:
            if writable is not None:
                self._writable = writable
            if readonly is not None:
                self._readonly = readonly
            current_w, current_r = self._writable, self._readonly
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(current_w, current_r)
            except Exception:
                log.exception("bookie cluster listener failed")

    def writable_bookies(self) -> frozenset[str]:
        """BookieIds registered under ``available`` (the only candidates for writes)."""
        self.start()
        return self._writable

    def readonly_bookies(self) -> frozenset[str]:
        """BookieIds registered under ``available/readonly`` (readable, never written)."""
        self.start()
        return self._readonly

    def add_listener(self, listener: ClusterListener, *, call_now: bool = True) -> None:
        """Call ``listener(writable, readonly)`` on every change (and once now)."""
        self.start()
        with self._lock:
            self._listeners.append(listener)
            w, r = self._writable, self._readonly
        if call_now:
            listener(w, r)

    def remove_listener(self, listener: ClusterListener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def add_address_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(bookie_id)`` when a bookie's registration changes or goes (connections to drop)."""
        with self._lock:
            self._address_listeners.append(listener)

    # -- BookieServiceInfo and addresses --------------------------------------------

    def service_info(self, bookie_id: str) -> "si.BookieServiceInfo | None":
        """The bookie's registered service info (cached and watched), None if not registered."""
        with self._lock:
            cached = self._info.get(bookie_id)
        if cached is not None:
            return cached
        for path in (f"{self.available}/{bookie_id}", f"{self.readonly_path}/{bookie_id}"):
            watch = self._make_invalidator(bookie_id) if self.address_tracking else None
            try:
                data, _ = self.retry(self.zk.get, path, watch=watch)
            except NoNodeError:
                continue
            except ZookeeperError:
                log.warning("cannot read registration of %s", bookie_id, exc_info=True)
                return None
            try:
                info = si.parse(data, bookie_id)
            except (BadMetadataError, InvalidBookieIdError, ValueError):
                log.warning("bad BookieServiceInfo for %s", bookie_id, exc_info=True)
                return None
            if self.address_tracking:
                with self._lock:
                    self._info[bookie_id] = info
            return info
        return None

    def _make_invalidator(self, bookie_id: str) -> Callable[[WatchedEvent], None]:
        def invalidate(event: WatchedEvent) -> None:
            if event.type == EventType.NONE:
                # kazoo fires every watch with NONE when its ZooKeeper connection drops, even when the session
                # lives on: nothing is known to have changed, so only the watch (and with it the cached address)
                # is gone; the next look-up reads the registration again. Dropping the bookie's connections here
                # failed every long poll in flight at each blip (docs/reliability.md).
                self.forget(bookie_id)
                return
            if event.type in (EventType.CHANGED, EventType.DELETED):
                with self._lock:
                    self._info.pop(bookie_id, None)
                    listeners = list(self._address_listeners)
                for listener in listeners:
                    try:
                        listener(bookie_id)
                    except Exception:
                        log.exception("address listener failed")

        return invalidate

    def forget(self, bookie_id: str) -> None:
        """Drop the cached address (e.g. after a connection to it failed)."""
        with self._lock:
            self._info.pop(bookie_id, None)

    def properties(self, bookie_id: str) -> dict[str, str]:
        """The bookie's advertised properties ({} when unknown)."""
        info = self.service_info(bookie_id)
        return dict(info.properties) if info is not None else {}

    def extensions(self, bookie_id: str) -> frozenset[str]:
        """Our protocol extensions the bookie advertises (``bkspark.extensions``)."""
        raw = self.properties(bookie_id).get(si.EXTENSIONS_PROPERTY, "")
        return frozenset(x.strip() for x in raw.split(",") if x.strip())

    def resolve(self, bookie_id: str) -> tuple[str, int]:
        """``(host, port)`` of a bookie; :class:`BookieUnavailableError` when it cannot be resolved."""
        if not self.address_resolver_enabled or bookie_id.endswith(":0"):
            return self._legacy(bookie_id)
        info = self.service_info(bookie_id)
        if info is None:
            raise BookieUnavailableError("bookie is not registered, its address is unknown", bookie_id=bookie_id)
        return si.endpoint_for(info)  # BookieUnavailableError when no bookie-rpc endpoint

    @staticmethod
    def _legacy(bookie_id: str) -> tuple[str, int]:
        try:
            return BookieId.parse(bookie_id).host_port()
        except InvalidBookieIdError as exc:
            raise BookieUnavailableError("bookie id is not a host:port address", bookie_id=bookie_id) from exc
